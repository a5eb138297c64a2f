"""Teacher-forced decoding of a long text through the op, for the FP8 quality measures: per step the negative
log-likelihood of the text's next token and the op's top-1 token."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from parity_helpers import Bound, prefill
from tiles_ext.families import shape_of
from tiles_ext.planner.plan import build_plan

TEXT = Path(__file__).resolve().parent / "data" / "perplexity_text.txt"


def text_ids(tokenizer) -> torch.Tensor:
    return tokenizer(TEXT.read_text(), return_tensors="pt").input_ids


def op_steps(model, weight_format: str, ids: torch.Tensor, workers: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """(nll, top1) per decode step: step i (1 <= i < n - 1) feeds ids[i] at position i through the op, after a
    PyTorch prefill of ids[0], and scores ids[i + 1]. `model` holds its weights in `weight_format`."""
    plan = build_plan(dataclasses.replace(shape_of(model.config), weight_format=weight_format), workers)
    n = ids.shape[1]
    cache = prefill(model, ids[:, :1], n + 1)
    bound = Bound.of(model, plan)
    nll, top1 = torch.empty(n - 2), torch.empty(n - 2, dtype=torch.long)
    for i in range(1, n - 1):
        logits = bound.step(cache, ids[0, i], i)[0][0]
        nll[i - 1] = -torch.log_softmax(logits, -1)[ids[0, i + 1]]
        top1[i - 1] = logits.argmax()
    return nll, top1


def perplexity(nll: torch.Tensor) -> float:
    return math.exp(float(nll.double().mean()))
