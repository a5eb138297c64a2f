"""Helpers for tests/test_integration_*.py: patched copies of a model, op-call counting, greedy comparison."""
from __future__ import annotations

import contextlib
import copy

import torch

from tiles_ext.integrations.version import cache_field

CACHE = cache_field()  # the cache keyword of forward/generate in this Transformers version

# Unpatched BF16 PyTorch and the tile op round differently (the op keeps the residual stream and logits in fp32),
# so both are judged against the same model in fp32: max |diff| / max |logit|. Measured on SmolLM2-135M over 12
# steps: op 0.007-0.016, unpatched BF16 0.008-0.052.
LOGITS_REL_TOL = 0.05
# Two candidates whose unpatched logits are this close (in logit units) are a tie within BF16 noise: greedy may pick
# either, and a divergence there is not an error.
TIE_GAP = 0.3


def tiny_config(**over):
    """A small Llama config the planner accepts (head_dim 64, GQA 2:1): patch tests run in seconds."""
    from transformers import LlamaConfig
    kw = dict(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
              num_hidden_layers=2, vocab_size=512, max_position_embeddings=512, tie_word_embeddings=False)
    kw.update(over)
    return LlamaConfig(**kw)


def patched_copy(model, **options):
    import tiles_ext
    options.setdefault("plan_cache_dir", False)
    return tiles_ext.patch(copy.deepcopy(model), **options)


@contextlib.contextmanager
def count_op_calls():
    """Counts tiles::decode_step calls (and their num_steps) through the profiler."""
    from torch.profiler import ProfilerActivity, profile
    box = {}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield box
    box["calls"] = sum(e.count for e in prof.key_averages() if e.key == "tiles::decode_step")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))


def assert_greedy_match(ref_model, prompt_ids, ref_seq, got_seq, note=""):
    """Same tokens as the unpatched model, or a first divergence where the unpatched model's top-2 logits are a
    BF16 tie (TIE_GAP) and the patched token is one of those two; comparison stops at that point."""
    p = prompt_ids.shape[1]
    ref, got = ref_seq[0, p:].tolist(), got_seq[0, p:].tolist()
    n = min(len(ref), len(got))
    for i in range(n):
        if ref[i] == got[i]:
            continue
        context = torch.cat([prompt_ids, ref_seq[:, p:p + i]], dim=-1)
        with torch.no_grad():
            logits = ref_model(context).logits[0, -1].float()
        top2 = torch.topk(logits, 2)
        gap = float(top2.values[0] - top2.values[1])
        assert gap < TIE_GAP and got[i] in top2.indices.tolist(), (
            f"{note}: token {i} differs ({got[i]} vs unpatched {ref[i]}) where the unpatched top-2 gap is {gap:.3f} "
            f"(not a BF16 tie); ref {ref} got {got}")
        return i
    assert len(ref) == len(got), f"{note}: lengths differ: ref {ref} got {got}"
    return None


def assert_logits_near_fp32(f32_model, bf16_model, sequences, prompt_len, rows, note=""):
    """rows: generate's per-step logits (row 0 from the PyTorch prefill, later rows from the op). Each op row
    is within LOGITS_REL_TOL of the fp32 model's logits for the same sequence (teacher-forced), and on average
    no further from them than the unpatched BF16 model is (x1.5 + 0.005)."""
    with torch.no_grad():
        f32 = f32_model(sequences[:, :prompt_len + len(rows) - 1]).logits[0].float()
        bf16 = bf16_model(sequences[:, :prompt_len + len(rows) - 1]).logits[0].float()
    op_err, bf_err = [], []
    for i in range(1, len(rows)):
        t = prompt_len - 1 + i
        op_err.append(rel_err(rows[i][0], f32[t]))
        bf_err.append(rel_err(bf16[t], f32[t]))
        assert op_err[-1] < LOGITS_REL_TOL, f"{note}: step {i}: op logits off the fp32 model by {op_err[-1]:.4f}"
    if op_err:
        mean_op, mean_bf = sum(op_err) / len(op_err), sum(bf_err) / len(bf_err)
        assert mean_op <= 1.5 * mean_bf + 0.005, f"{note}: op error {mean_op:.4f} vs unpatched bf16 {mean_bf:.4f}"


def steps_executed(model) -> int:
    """Decode steps the op has really executed for this patched model (its state's EPOCH word; unaffected by
    torch.compile tracing, which dispatches the op to its fake kernel)."""
    from tiles_ext.integrations import patch_state
    from tiles_ext.planner.format import StateWord
    return int(patch_state(model).decoder.runtime.state[int(StateWord.EPOCH)])



def prompt_lookup_and_plain(main, prompt, new_tokens: int = 24, lookup: int = 5):
    """Plain greedy generate and greedy prompt lookup (no fallback allowed) of a patched model from one prompt: both
    outputs and the op passes the lookup took."""
    import warnings
    from tiles_ext.integrations import TilesFallbackWarning
    kw = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    plain = main.generate(prompt, **kw)
    before = steps_executed(main)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)
        got = main.generate(prompt, prompt_lookup_num_tokens=lookup, **kw)
    return plain, got, steps_executed(main) - before

# The rule for a KV cache the op filled, wholly or in part (a continuation whose earlier positions were decoded by
# the op and whose later ones a PyTorch prefill wrote): it is judged against the fp32 model's K/V for the same
# tokens, never against the unpatched BF16 cache, which rounds differently (op and PyTorch K/V for one position
# differ by up to one bf16 step, ~4e-3 to 1.2e-2 on the conformance models). Its error (max |diff| / max |fp32|,
# per layer) must stay within CACHE_REL_FACTOR times the unpatched BF16 cache's own error against fp32 for the same
# tokens: the factor of the logits rule above. Measured at the decode positions of tests/test_generate_conformance.py:
# op K 0.004-0.007, V 0.004-0.006; unpatched BF16 K 0.006-0.009, V 0.005-0.006 (largest op/BF16 ratio 1.21).
CACHE_REL_FACTOR = 1.5


def cache_errors(cache, ref_cache, begin: int, end: int) -> tuple[float, float]:
    """(K, V) error of `cache` against `ref_cache` over positions [begin, end): max over layers of rel_err."""
    def err(name):
        return max(rel_err(getattr(a, name)[:, :, begin:end], getattr(b, name)[:, :, begin:end])
                   for a, b in zip(cache.layers, ref_cache.layers))
    return err("keys"), err("values")


def assert_cache_near_fp32(f32_model, bf16_model, sequence, cache, begin: int, end: int, note=""):
    """The cache's K/V at positions [begin, end) of `sequence` are as close to the fp32 model's as the unpatched
    BF16 model's are (CACHE_REL_FACTOR)."""
    from transformers import DynamicCache
    f32_cache, bf16_cache = DynamicCache(config=f32_model.config), DynamicCache(config=bf16_model.config)
    with torch.no_grad():
        f32_model(sequence[:, :end], **{CACHE: f32_cache})
        bf16_model(sequence[:, :end], **{CACHE: bf16_cache})
    got = cache_errors(cache, f32_cache, begin, end)
    bf16 = cache_errors(bf16_cache, f32_cache, begin, end)
    for name, g, b in zip(("K", "V"), got, bf16):
        assert g <= CACHE_REL_FACTOR * b, (f"{note}: cache {name} off the fp32 model's by {g:.4f}, more than "
                                           f"{CACHE_REL_FACTOR} x the unpatched BF16 cache's {b:.4f}")
