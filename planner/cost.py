"""Cost model: predicted microseconds per token of a plan, from bytes streamed and dependency hand-offs.

Every worker streams at bandwidth / num_workers (the chip's measured read bandwidth shared evenly by one
worker per SM). A tile starts when its worker is free and, for each counter it waits on, `hop_us` after the
last signaller of that counter finished (a release/acquire hand-off between SMs, ~0.4-0.56 us measured on
H200). It then takes weight_bytes / per-worker bandwidth. The token ends `hop_us` after the ARGMAX tile, when
the next step's EMBED may start.

`prefetch=True` models a producer that streams a worker's weights ahead without bound (weights never depend
on activations): a tile then finishes at the later of its weights' arrival and its inputs' readiness. It is a
lower bound; the default (no overlap) is the conservative estimate.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .format import TILE, WAIT

H200_BANDWIDTH = 4.57e12   # bytes/s: TMA bulk-copy read rate measured on H200 (shared/reference/h200-decode.md)
HOP_US = 0.5               # one counter hand-off between SMs
# Extra latency per arrival at one counter: arrivals serialise on its cache line. 132 arrivals then cost
# 0.5 + 0.4 = 0.9 us, the measured 132-block counter barrier (0.89 us).
ARRIVAL_US = 0.003


@dataclass
class CostEstimate:
    us_per_token: float
    stream_us: float            # total bytes / bandwidth: the floor
    max_worker_us: float        # the busiest worker's streaming time
    bandwidth: float
    hop_us: float
    prefetch: bool
    finish_us: np.ndarray       # per tile, from the token's start

    @property
    def efficiency(self) -> float:
        """Fraction of the bandwidth floor reached."""
        return self.stream_us / self.us_per_token if self.us_per_token else 0.0


def estimate(plan, bandwidth: float = H200_BANDWIDTH, hop_us: float = HOP_US, prefetch: bool = False,
             arrival_us: float = ARRIVAL_US) -> CostEstimate:
    h = plan.header
    n, W = h["num_tiles"], h["num_workers"]
    T = np.asarray(plan.tiles)
    nbytes = T[:, TILE.index("weight_bytes")].astype(np.float64)
    dur = (nbytes / (bandwidth / W) * 1e6).tolist()
    signal = T[:, TILE.index("signal")].tolist()
    wb, wc = T[:, TILE.index("wait_begin")].tolist(), T[:, TILE.index("wait_count")].tolist()
    waits = np.asarray(plan.waits).reshape(-1, WAIT.words).tolist()
    C = h["num_counters"]
    tile_ctrs = [{c for c, _, off in waits[wb[i]:wb[i] + wc[i]] if off == 0} for i in range(n)]
    left = [0] * C
    for s in signal:
        left[s] += 1
    waiters = [[] for _ in range(C)]
    indeg = [0] * n
    prev, nxt = [-1] * n, [-1] * n
    off = np.asarray(plan.worker_offsets).tolist()
    wt = np.asarray(plan.worker_tiles).tolist()
    for w in range(W):
        lst = wt[off[w]:off[w + 1]]
        for a, b in zip(lst, lst[1:]):
            prev[b], nxt[a] = a, b
    for i, cs in enumerate(tile_ctrs):
        for c in cs:
            waiters[c].append(i)
        indeg[i] = len(cs) + (prev[i] >= 0)
    lat = [hop_us + arrival_us * k for k in left]
    done = [0.0] * C            # finish time of a counter's last signaller
    finish = [0.0] * n
    streamed = [0.0] * n        # prefetch: when the tile's weights have arrived
    ready = deque(i for i in range(n) if indeg[i] == 0)
    count = 0
    while ready:
        i = ready.popleft()
        count += 1
        p = prev[i]
        deps = max((done[c] + lat[c] for c in tile_ctrs[i]), default=0.0)
        if prefetch:
            streamed[i] = (streamed[p] if p >= 0 else 0.0) + dur[i]
            # compute after both the weights and the inputs are in; a tile's own compute is not modelled
            finish[i] = max(streamed[i], deps, finish[p] if p >= 0 else 0.0)
        else:
            finish[i] = max(deps, finish[p] if p >= 0 else 0.0) + dur[i]
        c = signal[i]
        done[c] = max(done[c], finish[i])
        left[c] -= 1
        if left[c] == 0:
            for j in waiters[c]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if nxt[i] >= 0:
            indeg[nxt[i]] -= 1
            if indeg[nxt[i]] == 0:
                ready.append(nxt[i])
    if count != n:
        raise ValueError("plan has a dependency cycle; validate it first")
    per_worker = np.zeros(W)
    for w in range(W):
        per_worker[w] = sum(dur[i] for i in wt[off[w]:off[w + 1]])
    return CostEstimate(
        us_per_token=max(finish) + lat[h["argmax_counter"]], stream_us=float(nbytes.sum() / bandwidth * 1e6),
        max_worker_us=float(per_worker.max()), bandwidth=bandwidth, hop_us=hop_us, prefetch=prefetch,
        finish_us=np.asarray(finish))
