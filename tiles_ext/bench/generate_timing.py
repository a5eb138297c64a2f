"""Timing model.generate(): decode ms/token = (time of N new tokens - time of 1 new token) / (N - 1).

Generating one token is prefill plus generate's setup, so the difference is N-1 decode steps with everything
generate does around them (stopping checks, cache bookkeeping). Greedy, and EOS ignored so every run generates
exactly N tokens: eos_token_id=[] (an empty list; None would be refilled from the model's generation config)
leaves an EOS criterion that never fires. EOS is ignored rather than suppressed with min_new_tokens: that adds a
logits processor to every system's loop, and it pushes a patched model off its multi-token path.
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
    gc.eos_token_id = []
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
    output ids}. Each repetition times generate(1) and generate(N) back to back and takes the difference, so a
    drift in the machine's speed hits both terms alike."""
    if new_tokens < 2:
        raise ValueError("need at least 2 new tokens to time decode steps")
    warm = []
    out = None
    for _ in tqdm(range(warmup), desc=f"{desc} warm-up", leave=False):
        warm.append(wall_s(lambda: generate(model, input_ids, new_tokens, **overrides), device))
    generate(model, input_ids, 1, **overrides)  # the 1-token call has its own first-call costs

    def run():
        nonlocal out
        out = generate(model, input_ids, new_tokens, **overrides)
    per_token, prefill = [], []
    for _ in tqdm(range(reps), desc=desc, leave=False):
        t1 = wall_s(lambda: generate(model, input_ids, 1, **overrides), device)
        tn = wall_s(run, device)
        prefill.append(t1)
        per_token.append((tn - t1) / (new_tokens - 1) * 1e3)
    return {"ms_per_token": per_token, "prefill_ms": statistics.median(prefill) * 1e3, "warmup_s": warm,
            "tokens": out[0, input_ids.shape[1]:].tolist()}
