"""Timing model.generate(): decode ms/token = (time of N new tokens - time of 1 new token) / (N - 1).

Generating one token is prefill plus generate's setup, so the difference is N-1 decode steps with everything
generate does around them (stopping checks, cache bookkeeping). Greedy, and EOS ignored (eos_token_id=None, so
no stopping criterion but the length) so every run generates exactly N tokens. EOS is ignored rather than
suppressed with min_new_tokens: that would add a logits processor to every system's loop, and it pushes a
patched model off its multi-token path.
"""
from __future__ import annotations

import copy
import statistics

import torch
from tqdm.auto import tqdm

from .timing import wall_s


def generation_config(model, new_tokens: int, **overrides):
    gc = copy.deepcopy(model.generation_config)
    gc.do_sample = False
    gc.num_beams = 1
    gc.max_new_tokens = new_tokens
    gc.min_new_tokens = None
    for k in ("temperature", "top_p", "top_k", "min_p", "typical_p"):
        if hasattr(gc, k):
            setattr(gc, k, None)
    if gc.pad_token_id is None:
        eos = gc.eos_token_id if gc.eos_token_id is not None else model.config.eos_token_id
        gc.pad_token_id = (eos[0] if isinstance(eos, (list, tuple)) else eos) if eos is not None else 0
    gc.eos_token_id = None
    for k, v in overrides.items():
        setattr(gc, k, v)
    return gc


def generate(model, input_ids: torch.Tensor, new_tokens: int, **overrides) -> torch.Tensor:
    gc = generation_config(model, new_tokens, **overrides)
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gc)
    got = out.shape[1] - input_ids.shape[1]
    if got != new_tokens:
        raise RuntimeError(f"generate returned {got} new tokens, expected {new_tokens}")
    return out


def time_generate(model, input_ids, new_tokens: int, reps: int, warmup: int, device, desc: str,
                  **overrides) -> dict:
    """{'ms_per_token': [per rep], 'prefill_ms': median time of generate(1), 'warmup_s': [...], 'tokens': last
    output ids}."""
    if new_tokens < 2:
        raise ValueError("need at least 2 new tokens to time decode steps")
    warm = []
    out = None
    for _ in tqdm(range(warmup), desc=f"{desc} warm-up", leave=False):
        warm.append(wall_s(lambda: generate(model, input_ids, new_tokens, **overrides), device))
    totals = []
    for _ in tqdm(range(reps), desc=desc, leave=False):
        def run():
            nonlocal out
            out = generate(model, input_ids, new_tokens, **overrides)
        totals.append(wall_s(run, device))
    # the warm-up above already ran this prefill; the median shrugs off a slower first 1-token call
    prefill = statistics.median(
        wall_s(lambda: generate(model, input_ids, 1, **overrides), device) for _ in range(reps // 2 + 2))
    per_token = [(t - prefill) / (new_tokens - 1) * 1e3 for t in totals]
    return {"ms_per_token": per_token, "prefill_ms": prefill * 1e3, "warmup_s": warm,
            "tokens": out[0, input_ids.shape[1]:].tolist()}
