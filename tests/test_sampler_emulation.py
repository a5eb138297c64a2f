"""A CPU emulation of the CUDA sampler's index computations (csrc/cuda/sampler.cuh), lane by lane where the kernel
works across a warp: the radix select's passes and digit search (samp_kth_threshold), the LM tiles' candidates
(samp_lmhead), the merge's offsets scans, the gather's flat quad numbering and binary search, the threshold and
the rank sort (samp_merge). The emulated kept-after-top_k set must equal the CPU reference's (tiles::sample_logits with top_k
only) for any cut of the vocabulary into tiles: what the GPU tests then check on the device. The filters and the
draw after it are sampler_math.h's functions, compiled for both executors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tiles_ext import sampling as S
from tiles_ext.planner import format as fmt

LANES = 32


def order_key(v: np.ndarray) -> np.ndarray:
    b = np.asarray(v, dtype=np.float32).view(np.uint32)
    return np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.uint32)


def key_value(k: np.ndarray) -> np.ndarray:
    k = np.asarray(k, dtype=np.uint32)
    return np.where(k & 0x80000000, k & 0x7FFFFFFF, ~k).astype(np.uint32).view(np.float32)


def shfl_down_suffix(s):
    """samp_kth_threshold's suffix sums: incl[l] += shfl_down(incl, o)[l] where l + o < 32, o = 1, 2, ..., 16."""
    incl = list(s)
    o = 1
    while o < LANES:
        t = [incl[l + o] if l + o < LANES else incl[l] for l in range(LANES)]
        incl = [incl[l] + (t[l] if l + o < LANES else 0) for l in range(LANES)]
        o <<= 1
    return incl


def kth_threshold(keys: np.ndarray, k: int, from_common: bool = False) -> int:
    """samp_kth_threshold, pass by pass (from_common: kFromCommon, the first pass at the first differing byte)."""
    prefix, krem, first = 0, k, 0
    if from_common:
        lo, hi = int(keys.min()), int(keys.max())
        if lo == hi:
            return lo
        first = (32 - (lo ^ hi).bit_length()) // 8  # __clz(lo ^ hi) / 8
        prefix = 0 if first == 0 else lo >> (32 - 8 * first)
        assert all((int(x) >> (32 - 8 * first)) == prefix for x in keys) if first else True
    for pas in range(first, 4):
        shift = 24 - 8 * pas
        match = keys if pas == 0 else keys[(keys >> np.uint32(shift + 8)) == prefix]
        hist = np.bincount(((match >> np.uint32(shift)) & 255).astype(np.int64), minlength=256)
        c = hist.reshape(LANES, 8)
        s = c.sum(axis=1).tolist()
        incl = shfl_down_suffix(s)
        above = [incl[l] - s[l] for l in range(LANES)]
        hits = [l for l in range(LANES) if above[l] < krem <= incl[l]]
        assert len(hits) == 1, (hits, krem, incl)
        lane = hits[0]
        cum = above[lane]
        for j in range(7, -1, -1):
            if cum + c[lane, j] >= krem:
                digit, newk, in_bin = lane * 8 + j, krem - cum, int(c[lane, j])
                break
            cum += int(c[lane, j])
        krem = newk
        prefix = (prefix << 8) | digit
        if in_bin == krem or pas == 3:
            return prefix << shift
    raise AssertionError("not reached")


def scores(logits, settings, seen, position):
    """sampler_math.h process_score in numpy float32 (IEEE, as both executors)."""
    v = np.asarray(logits, dtype=np.float32).copy()
    rp = np.float32(settings.repetition_penalty)
    mask = np.zeros(v.size, dtype=bool)
    mask[list(seen)] = True
    if rp != 1:
        v = np.where(mask, np.where(v < 0, v * rp, v / rp), v).astype(np.float32)
    if position < settings.suppress_until:
        v[list(settings.suppress_ids)] = -np.inf
    if settings.temperature != 1:
        v = (v / np.float32(settings.temperature)).astype(np.float32)
    return (v + np.float32(0)).astype(np.float32)


def lmhead_candidates(proc: np.ndarray, row_begin: int, top_k: int):
    """samp_lmhead's candidates of one tile: (threshold key, [(score bits, id)]) in any order."""
    n = proc.size
    k = min(top_k, n)
    keys = order_key(proc)
    thr = kth_threshold(keys, k) if n > k else 0
    take = (proc > -np.inf) & (keys >= thr)
    ids = np.nonzero(take)[0]
    rng = np.random.default_rng(int(ids.sum()) + n)
    rng.shuffle(ids)  # the atomics' order is arbitrary
    return thr, [(int(proc[i:i + 1].view(np.int32)[0]), row_begin + int(i)) for i in ids]


def offsets_scan(counts):
    """samp_merge's warp-0 exclusive scans of the slot counts and of their 16-byte quads (two pairs each), 32 slots at
    a time with shfl_up: (offs, qoffs), each with the total last."""
    L = len(counts)
    offs, qoffs = [0] * (L + 1), [0] * (L + 1)
    carry = qcarry = 0
    for base in range(0, L, LANES):
        c = [counts[base + l] if base + l < L else 0 for l in range(LANES)]
        c = [x if x <= fmt.CAND_SLOT else 0 for x in c]
        q = [(x + 1) // 2 for x in c]
        incl, qincl = list(c), list(q)
        o = 1
        while o < LANES:
            t = [incl[l - o] if l >= o else incl[l] for l in range(LANES)]
            qt = [qincl[l - o] if l >= o else qincl[l] for l in range(LANES)]
            incl = [incl[l] + (t[l] if l >= o else 0) for l in range(LANES)]
            qincl = [qincl[l] + (qt[l] if l >= o else 0) for l in range(LANES)]
            o <<= 1
        for l in range(LANES):
            if base + l < L:
                offs[base + l] = carry + incl[l] - c[l]
                qoffs[base + l] = qcarry + qincl[l] - q[l]
        carry += incl[LANES - 1]
        qcarry += qincl[LANES - 1]
    offs[L], qoffs[L] = carry, qcarry
    return offs, qoffs


def merge(slots, top_k: int):
    """samp_merge up to the canonical kept list: [(score, id)] in score-descending, id-ascending order (None: more
    than KEPT_CAP, SAMPLER_OVERFLOW)."""
    L = len(slots)
    counts = [len(s) for s in slots]
    assert max(counts) <= fmt.CAND_SLOT
    offs, qoffs = offsets_scan(counts)
    assert offs[:-1] == np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist() and offs[-1] == sum(counts)
    total = offs[-1]
    keys = np.zeros(total, dtype=np.uint32)
    cids = np.full(total, -1, dtype=np.int64)
    written = np.zeros(total, dtype=np.int64)
    for g in range(qoffs[L]):  # the gather: flat quad g = quad h of the slot the binary search finds
        lo, hi = 0, L
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if qoffs[mid] <= g:
                lo = mid
            else:
                hi = mid
        assert qoffs[lo] <= g < qoffs[lo + 1]
        h = g - qoffs[lo]
        dst, left = offs[lo] + 2 * h, counts[lo] - 2 * h
        for e in range(2 if left > 1 else 1):
            bits, ident = slots[lo][2 * h + e]
            keys[dst + e] = order_key(np.array([bits], dtype=np.int32).view(np.float32))[0]
            cids[dst + e] = ident
            written[dst + e] += 1
    assert (written == 1).all()  # every candidate exactly once
    thr = kth_threshold(keys, top_k, from_common=True) if total > top_k else 0
    surv = np.nonzero(keys >= thr)[0]
    if surv.size > fmt.KEPT_CAP:
        return None  # SAMPLER_OVERFLOW on the GPU
    skeys = [(int(~keys[i] & 0xFFFFFFFF) << 32) | int(cids[i]) for i in surv]
    ranks = [sum(o < mine for o in skeys) for mine in skeys]  # rank sort
    out = [None] * len(skeys)
    for mine, r in zip(skeys, ranks):
        out[r] = (float(key_value(np.array([~(mine >> 32) & 0xFFFFFFFF], dtype=np.uint32))[0]), mine & 0xFFFFFFFF)
    return out


def test_digit_search_finds_the_kth_key_with_ties():
    rng = np.random.default_rng(0)
    for case in range(300):
        n = int(rng.integers(1, 3000))
        kind = case % 3
        if kind == 0:
            v = rng.standard_normal(n).astype(np.float32) * 4
        elif kind == 1:
            v = np.round(rng.standard_normal(n) * 2).astype(np.float32)  # heavy ties
        else:
            v = (10 + rng.random(n) * 1e-3).astype(np.float32)  # one exponent: the first pass's bin holds all
        v[rng.integers(n, size=max(1, n // 50))] = -np.inf
        keys = order_key(v)
        k = int(rng.integers(1, n + 1))
        kth = np.sort(keys)[::-1][k - 1]
        for from_common in (False, True):
            thr = kth_threshold(keys, k, from_common)
            assert np.array_equal(keys >= thr, keys >= kth), (case, n, k, from_common)


def cuts(vocab, rng):
    """Tile cuts of the vocabulary: the planner's even-ish pieces, random pieces, one tile, one row each."""
    yield [vocab * i // 7 for i in range(8)]
    b = sorted(set(rng.integers(1, vocab, size=int(rng.integers(1, 20))).tolist()))
    yield [0] + b + [vocab]
    yield [0, vocab]
    if vocab <= 80:
        yield list(range(vocab + 1))


@pytest.mark.parametrize("seed", range(6))
def test_emulated_candidate_path_keeps_the_reference_top_k(seed):
    rng = np.random.default_rng(100 + seed)
    for case in range(40):
        V = int(rng.choice([9, 70, 500, 2000]))
        lg = (rng.standard_normal(V) * float(rng.choice([1, 4]))).astype(np.float32)
        if case % 4 == 1:
            lg = np.round(lg)  # ties
        seen = rng.choice(V, size=int(rng.integers(0, V // 3 + 1)), replace=False).tolist()
        eos = tuple(rng.choice(V, size=2, replace=False).tolist())
        st = S.SamplerSettings(temperature=float(rng.choice([1.0, 0.7])), top_k=int(rng.integers(1, fmt.CAND_CAP + 1)),
                               repetition_penalty=float(rng.choice([1.0, 1.3])), suppress_until=50,
                               suppress_ids=eos)
        position = int(rng.choice([20, 60]))
        proc = scores(lg, st, seen, position)
        smp = S.make_sampler(V, 2, st, 0, seen)
        want, _ = torch.ops.tiles.sample_logits(torch.from_numpy(lg), smp, position)
        want = set(torch.nonzero(want).reshape(-1).tolist())
        for cut in cuts(V, rng):
            slots = [lmhead_candidates(proc[a:b], a, st.top_k)[1] for a, b in zip(cut, cut[1:])]
            if max(len(s) for s in slots) > fmt.CAND_SLOT:
                continue  # SAMPLER_OVERFLOW on the GPU (ties in a tile): the GPU tests do not meet it
            kept = merge(slots, st.top_k)
            if kept is None:
                continue
            assert {i for _, i in kept} == want, (case, cut)
            vals = [s for s, _ in kept]
            assert vals == sorted(vals, reverse=True)
            assert all(a[1] < b[1] for a, b in zip(kept, kept[1:]) if a[0] == b[0])
            assert all(proc[i] == s for s, i in kept)


def test_key_round_trip_and_order():
    v = np.array([-np.inf, -3.5, -1e-30, 0.0, 1e-30, 2.0, np.inf], dtype=np.float32)
    k = order_key(v)
    assert np.all(np.diff(k.astype(np.int64)) > 0)
    assert np.array_equal(key_value(k), v)
    # -0 would sort below +0: process_score makes it +0 first (x + 0).
    assert order_key(np.array([-0.0], dtype=np.float32))[0] < order_key(np.array([0.0], dtype=np.float32))[0]
    assert (np.float32(-0.0) + np.float32(0)).tobytes() == np.float32(0.0).tobytes()
