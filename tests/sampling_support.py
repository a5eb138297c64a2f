"""Helpers for the sampling tests: Transformers' own processors for a SamplerSettings, a Philox4x32-10 in Python
(checked against Random123's known answers), a chi-square p-value, and the kept-set comparison that allows only
the differences Transformers' own arithmetic leaves open (see kept_difference)."""
from __future__ import annotations

import math

import numpy as np
import torch
from transformers.generation.logits_process import (LogitsProcessorList, MinNewTokensLengthLogitsProcessor,
                                                    MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

from tiles_ext.planner.format import SampleMode

# Random123's kat_vectors, philox4x32 10: (counter, key, expected).
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def philox4x32_10(ctr, key):
    c = list(ctr)
    k0, k1 = key
    m = 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & m, (k1 + 0xBB67AE85) & m
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & m, p1 & m, ((p0 >> 32) ^ c[3] ^ k1) & m, p0 & m]
    return tuple(c)


def hf_processors(settings, prompt_len: int = 0, min_new_tokens: int = 0):
    """The processors Transformers' _get_logits_processor builds for these settings, in its order.
    settings.suppress_until must be prompt_len + min_new_tokens where min_new_tokens > 0."""
    procs = LogitsProcessorList()
    if settings.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(float(settings.repetition_penalty)))
    if min_new_tokens > 0:
        procs.append(MinNewTokensLengthLogitsProcessor(prompt_len, min_new_tokens, list(settings.suppress_ids)))
    if settings.mode == SampleMode.SAMPLE:
        if settings.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(float(settings.temperature)))
        if settings.top_k:
            procs.append(TopKLogitsWarper(int(settings.top_k)))
        if settings.top_p < 1.0:
            procs.append(TopPLogitsWarper(float(settings.top_p)))
        if settings.min_p:
            procs.append(MinPLogitsWarper(float(settings.min_p)))
    return procs


def history(seen_ids, length: int) -> torch.Tensor:
    """input_ids [1, length] holding exactly the ids of seen_ids (repeated to fill the length)."""
    seen = sorted(set(int(i) for i in seen_ids)) or [0]
    assert length >= len(seen)
    ids = (seen * (length // len(seen) + 1))[:length]
    return torch.tensor([ids], dtype=torch.long)


def chi2_pvalue(observed, expected) -> float:
    """P(chi-square >= statistic) for counts against expected counts (cells with expected > 0)."""
    obs = np.asarray(observed, dtype=np.float64)
    exp = np.asarray(expected, dtype=np.float64)
    live = exp > 0
    stat = float((((obs - exp) ** 2)[live] / exp[live]).sum())
    df = int(live.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def boundary_margins(scores: torch.Tensor, settings) -> np.ndarray:
    """For each id, in float64, how far it sits from the top-p and min-p cuts (the smaller distance), from the
    scores after the temperature; inf for ids no cut is near. The executors and Transformers compute these cuts in
    fp32 with their own softmax rounding, so at a distance of about 1e-7 they may disagree."""
    s = scores.double().reshape(-1)
    V = s.numel()
    margin = np.full(V, np.inf)
    alive = s > -math.inf
    if settings.top_k and settings.top_k < int(alive.sum()):
        kth = torch.topk(s, settings.top_k).values[-1]
        alive &= s >= kth
    if settings.top_p < 1.0:
        e = torch.where(alive, torch.exp(s - s[alive].max()), torch.zeros_like(s))
        p = e / e.sum()
        order = sorted(range(V), key=lambda i: (-float(s[i]), i))
        suffix = 0.0
        cut = 1.0 - settings.top_p
        for i in reversed(order):
            if not alive[i]:
                continue
            suffix += float(p[i])
            margin[i] = min(margin[i], abs(suffix - cut))
    if settings.min_p:
        e = torch.where(alive, torch.exp(s - s[alive].max()), torch.zeros_like(s))
        ratio = e.numpy()
        for i in range(V):
            if alive[i]:
                margin[i] = min(margin[i], abs(ratio[i] - settings.min_p))
    return margin


def kept_difference(ours: torch.Tensor, hf: torch.Tensor, warped: torch.Tensor, settings, tol=1e-5):
    """(ids, near): the ids where the kept sets differ and neither tolerance applies, and how many differ only
    through the first one. The tolerances: a tie of scores across the two differences (torch.sort is not stable,
    so Transformers' top-p keeps an arbitrary member of a tie at the cut; the executors keep the lowest ids), and
    a cut within `tol` of the id (boundary_margins: fp32 softmax rounding)."""
    ours, hf = ours.reshape(-1).bool(), hf.reshape(-1).bool()
    only_ours = torch.nonzero(ours & ~hf).reshape(-1).tolist()
    only_hf = torch.nonzero(hf & ~ours).reshape(-1).tolist()
    if not only_ours and not only_hf:
        return [], 0
    s = warped.reshape(-1)
    margin = boundary_margins(warped, settings)
    bad, near = [], 0
    for mine, other in ((only_ours, only_hf), (only_hf, only_ours)):
        for i in mine:
            if any(bool(s[i] == s[j]) for j in other):
                continue
            if margin[i] < tol:
                near += 1
                continue
            bad.append(i)
    return bad, near
