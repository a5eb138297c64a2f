"""TileDecoder: one patched model's plan bound to its device and weights; runs decode steps on a StaticCache.

The plan and the runtime (plan tensor, scratch arena, state words) belong to the decoder; the weights are the model's
own tensors, bound by `bind` and re-bound whenever they stop being the module's (bindings.Bindings). A copy of a
patched model gets a decoder of its own (`fresh`): the same immutable plan, new scratch and state, its own weights.
"""
from __future__ import annotations

import torch

from tiles_ext.planner.plan import Plan
from tiles_ext.runtime import TileRuntime, rope_tables
from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.bindings import Bindings


def _static(t: torch.Tensor) -> torch.Tensor:
    # Fixed addresses for CUDA graphs (generate compiles decode with mode="reduce-overhead"): without this,
    # cudagraph trees would copy every non-parameter input (all weights: detached views) into graph buffers.
    torch._dynamo.mark_static_address(t)
    return t


class TileDecoder:
    def __init__(self, plan: Plan, device: torch.device, handoff: str | None = None):
        self.plan = plan
        self.device = torch.device(device)
        self.runtime = TileRuntime(plan, self.device, handoff)
        for t in (self.runtime.plan_tensor, self.runtime.scratch, self.runtime.state):
            _static(t)
        s = plan.shape
        self.num_layers, self.num_kv_heads, self.head_dim = s.num_layers, s.num_kv_heads, s.head_dim
        self.vocab = s.vocab
        self.weights: list[torch.Tensor] = []
        self.inv_freq: torch.Tensor | None = None
        self.rope_scale = 1.0
        self.bindings: Bindings | None = None   # None: not bound (a fresh copy's decoder until its first use)

    def bind(self, model, weights, bindings: Bindings) -> None:
        """weights: the op's weights list (the model's own tensors, Family.weights), already checked against the
        plan; bindings: what they were read from."""
        self.weights = [_static(w) for w in weights]
        inv_freq, self.rope_scale = rope_tables(model)
        self.inv_freq = _static(inv_freq.to(self.device))
        self.bindings = bindings

    def fresh(self) -> "TileDecoder":
        """A decoder for a copy of the model: this plan (immutable, shared), a runtime of its own, no weights yet."""
        return TileDecoder(self.plan, self.device, self.runtime.handoff)

    def cache_problem(self, cache) -> str | None:
        """Why this decoder cannot decode into `cache` (None: it can); "" while the cache is unallocated."""
        problem = kv.cache_type_problem(cache, self.num_layers)
        if problem is not None:
            return problem
        if not kv.is_initialized(cache):
            return ""
        return kv.cache_tensor_problem(cache, self.device, self.num_kv_heads, self.head_dim)

    def launch(self, input_ids: torch.Tensor, cache, num_steps: int = 1, eos_ids=()):
        """Run num_steps decode steps from the cache's current position. input_ids: the token at that position
        (1 element, on the device). Returns (logits fp32 [num_steps, vocab], tokens int64 [num_steps]).
        Does not advance the cache counters (the caller knows how many steps ran)."""
        keys, values = kv.layer_tensors(cache)
        return self.runtime.step(self.weights, keys, values, input_ids.reshape(1), kv.position(cache),
                                 self.inv_freq, self.rope_scale, num_steps, eos_ids)

    def verify(self, input_ids: torch.Tensor, cache) -> torch.Tensor:
        """The R = len(input_ids) tokens at the cache's next positions (the last accepted token and a draft), in
        passes of at most runtime.max_rows rows: logits fp32 [R, vocab]. The cache holds their K/V and its counters
        advanced by R; rolling a rejected draft back is the caller's (the cache length is what the op attends to).
        Raises CacheFullError before any launch where the R positions do not fit."""
        rows = int(input_ids.numel())
        length = kv.check_room(cache, rows, f"this verify pass (the last accepted token and a draft of {rows - 1})")
        keys, values = kv.layer_tensors(cache)
        per_pass, pieces = self.runtime.max_rows, []
        for start in range(0, rows, per_pass):
            chunk = input_ids.reshape(-1)[start:start + per_pass]
            logits, _ = self.runtime.step(self.weights, keys, values, chunk, kv.position(cache), self.inv_freq,
                                          self.rope_scale)
            kv.advance(cache, int(chunk.numel()))
            pieces.append(logits)
        kv.record_length(cache, length + rows)
        return torch.cat(pieces) if len(pieces) > 1 else pieces[0]

    def lookup(self, history: torch.Tensor, length: int, cache, draft_tokens: int, budget: int, eos_ids=(),
               ngram: int = 2) -> tuple[list[int], int]:
        """One launch of greedy prompt lookup from a history of `length` ids whose last one the cache does not hold
        yet (cache length length - 1): (the accepted tokens, the rounds run); history gains the tokens, and the
        cache's length becomes length + accepted - 1. One host sync (the tokens)."""
        keys, values = kv.layer_tensors(cache)
        tokens, rounds = self.runtime.prompt_lookup(self.weights, keys, values, history, length, self.inv_freq,
                                                    self.rope_scale, draft_tokens, budget, eos_ids, ngram)
        host = tokens.tolist()
        done = next((i for i, t in enumerate(host) if t < 0), len(host))
        kv.set_length(cache, length + done - 1)
        return host[:done], int(rounds[0])

    def step(self, input_ids: torch.Tensor, cache) -> torch.Tensor:
        """One decode step: logits fp32 [1, vocab]; the cache holds the token's K/V and its counters advanced."""
        logits, _ = self.launch(input_ids, cache, 1)
        kv.advance(cache, 1)
        return logits

    def check_error(self) -> None:
        """Raise TileOpError if the op flagged an error (host sync: call only where the caller syncs anyway)."""
        self.runtime.check_error()
