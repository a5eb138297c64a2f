"""Python face of torch.ops.tiles: the fake (meta) kernels for torch.compile (decode_step, prompt_lookup, sample_logits,
read_checksum, and the names ops describe_tiles / describe_error).

Callers go through tiles_ext.runtime.TileRuntime.step, which owns the plan tensor, scratch and state.

The op itself is defined in csrc/tiles_op.cpp (schema) with CPU (csrc/cpu) and CUDA (csrc/cuda) kernels; this
module must be imported after tiles_ext._C has registered the library.
"""
from __future__ import annotations

import torch

from tiles_ext.planner import format as fmt

_H = {name: i for i, (name, _) in enumerate(fmt.HEADER_FIELDS)}


@torch.library.register_fake("tiles::decode_step")
def _decode_step_fake(plan, plan_header, weights, k_cache, v_cache, scratch, state, input_ids, position,
                      rope_inv_freq, rope_scale, num_steps, eos_ids, order_seed=0, sampler=None):
    # Shapes and dtypes only (never data): the real kernels check everything else, including values.
    torch._check(len(plan_header) == fmt.HEADER.words,
                 lambda: f"plan_header has {len(plan_header)} words, expected {fmt.HEADER.words}")
    vocab = int(plan_header[_H["vocab"]])
    layers = int(plan_header[_H["num_layers"]])
    torch._check(plan.dtype == torch.int32, lambda: f"plan dtype {plan.dtype}, expected torch.int32")
    torch._check(plan.dim() == 1 and plan.shape[0] == plan_header[_H["total_words"]],
                 lambda: f"plan shape {tuple(plan.shape)}, expected ({plan_header[_H['total_words']]},)")
    num_weights = int(plan_header[_H["num_weights"]])
    torch._check(len(weights) == num_weights, lambda: f"{len(weights)} weights, the plan expects {num_weights}")
    # An FP8 plan's list mixes E4M3 matrices, their fp32 scales and BF16 vectors (the real kernels check which is
    # which); a BF16 plan's is all BF16.
    fp8 = int(plan_header[_H["weight_dtype"]]) == fmt.DType.F8E4M3
    allowed = (torch.bfloat16, torch.float8_e4m3fn, torch.float32) if fp8 else (torch.bfloat16,)
    for w in weights:
        torch._check(w.dtype in allowed, lambda: f"weight dtype {w.dtype}, expected one of {allowed}")
    torch._check(len(k_cache) == layers and len(v_cache) == layers,
                 lambda: f"k_cache/v_cache have {len(k_cache)}/{len(v_cache)} layers, the plan expects {layers}")
    for c in list(k_cache) + list(v_cache):
        torch._check(c.dtype == torch.bfloat16 and c.dim() == 4,
                     lambda: f"cache tensor {c.dtype} {tuple(c.shape)}, expected bf16 [1, kv, max_len, head_dim]")
    torch._check(scratch.dtype == torch.uint8, lambda: f"scratch dtype {scratch.dtype}, expected torch.uint8")
    torch._check(state.dtype == torch.int32, lambda: f"state dtype {state.dtype}, expected torch.int32")
    # R input ids: one token, or the R rows of a verify pass (one step, no sampler; planner/format.py "Rows").
    rows = input_ids.numel()
    max_rows = int(plan_header[_H["max_rows"]])
    torch._check(input_ids.dtype == torch.int64 and input_ids.dim() <= 1 and 1 <= rows <= max_rows,
                 lambda: f"input_ids {input_ids.dtype} {tuple(input_ids.shape)}, expected [R] int64, "
                         f"1 <= R <= the plan's max_rows {max_rows}")
    torch._check(rows == 1 or (num_steps == 1 and sampler is None),
                 lambda: f"{rows} rows with num_steps {num_steps} and a sampler {sampler is not None}: a verify "
                         "pass is one step without a sampler")
    torch._check(position.dtype == torch.int64 and position.numel() == 1,
                 lambda: f"position {position.dtype} {tuple(position.shape)}, expected one int64 element")
    torch._check(rope_inv_freq.dtype == torch.float32,
                 lambda: f"rope_inv_freq dtype {rope_inv_freq.dtype}, expected torch.float32")
    torch._check(1 <= num_steps <= fmt.MAX_STEPS, lambda: f"num_steps {num_steps} outside 1..{fmt.MAX_STEPS}")
    torch._check(len(eos_ids) <= fmt.MAX_EOS, lambda: f"{len(eos_ids)} eos ids, at most {fmt.MAX_EOS}")
    if sampler is not None:
        words = fmt.sampler_words(vocab, int(plan_header[_H["lm_tiles"]]))
        torch._check(sampler.dtype == torch.int32 and sampler.dim() == 1 and sampler.shape[0] == words,
                     lambda: f"sampler {sampler.dtype} {tuple(sampler.shape)}, expected int32 ({words},)")
    logits = plan.new_empty((num_steps * rows, vocab), dtype=torch.float32)
    tokens = plan.new_empty((num_steps * rows,), dtype=torch.int64)
    return logits, tokens


@torch.library.register_fake("tiles::prompt_lookup")
def _prompt_lookup_fake(plan, plan_header, weights, k_cache, v_cache, scratch, state, history, length,
                        rope_inv_freq, rope_scale, draft_tokens, ngram, budget, eos_ids):
    # Shapes and dtypes only: the accepted tokens ([budget], -1 after the last) and the rounds run ([1]).
    max_rows = int(plan_header[_H["max_rows"]])
    torch._check(1 <= draft_tokens <= max_rows - 1,
                 lambda: f"draft_tokens {draft_tokens} outside 1..{max_rows - 1} (the plan's max_rows - 1)")
    torch._check(1 <= ngram <= fmt.MAX_LOOKUP_NGRAM, lambda: f"ngram {ngram} outside 1..{fmt.MAX_LOOKUP_NGRAM}")
    torch._check(1 <= budget <= fmt.MAX_LOOKUP_TOKENS,
                 lambda: f"budget {budget} outside 1..{fmt.MAX_LOOKUP_TOKENS}")
    torch._check(history.dtype == torch.int64 and history.dim() == 1,
                 lambda: f"history {history.dtype} {tuple(history.shape)}, expected [N] int64")
    torch._check(len(eos_ids) <= fmt.MAX_EOS, lambda: f"{len(eos_ids)} eos ids, at most {fmt.MAX_EOS}")
    return plan.new_empty((budget,), dtype=torch.int64), plan.new_empty((1,), dtype=torch.int64)


@torch.library.register_fake("tiles::sample_logits")
def _sample_logits_fake(logits, sampler, position):
    # kept: a bool mask of the logits' shape; token: the drawn id, [1] int64.
    torch._check(logits.dtype == torch.float32, lambda: f"logits dtype {logits.dtype}, expected torch.float32")
    torch._check(sampler.dtype == torch.int32 and sampler.dim() == 1,
                 lambda: f"sampler {sampler.dtype} {tuple(sampler.shape)}, expected a 1-D int32 tensor")
    return torch.empty_like(logits, dtype=torch.bool), logits.new_empty((1,), dtype=torch.int64)


@torch.library.register_fake("tiles::read_checksum")
def _read_checksum_fake(x):
    # The benchmark's read pass (tiles_ext/bench/bandwidth.py): one int64 scalar on x's device.
    return x.new_empty((), dtype=torch.int64)


@torch.library.register_fake("tiles::describe_tiles")
def _describe_tiles_fake(plan, plan_header):
    # UTF-8 bytes whose length depends on the plan's contents.
    return plan.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.uint8)


@torch.library.register_fake("tiles::describe_error")
def _describe_error_fake(plan, plan_header, state):
    return plan.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.uint8)
