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

from dataclasses import dataclass

import numpy as np

from tiles_ext.planner.format import TILE
from tiles_ext.planner.order import step_order

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
    W = h["num_workers"]
    nbytes = np.asarray(plan.tiles)[:, TILE.index("weight_bytes")].astype(np.float64)
    dur = (nbytes / (bandwidth / W) * 1e6).tolist()
    g = step_order(plan)
    if not g.complete:
        raise ValueError("plan has a dependency cycle; validate it first")
    arrivals = [0] * h["num_counters"]
    for c in g.signal:
        arrivals[c] += 1
    lat = [hop_us + arrival_us * k for k in arrivals]
    done = [0.0] * h["num_counters"]   # finish time of a counter's last signaller so far
    finish = [0.0] * len(dur)
    streamed = [0.0] * len(dur)        # prefetch: when the tile's weights have arrived
    for i in g.order:                  # every predecessor of i comes first
        p = g.prev[i]
        deps = max((done[c] + lat[c] for c in g.waits[i]), default=0.0)
        if prefetch:
            streamed[i] = (streamed[p] if p >= 0 else 0.0) + dur[i]
            # compute after both the weights and the inputs are in; a tile's own compute is not modelled
            finish[i] = max(streamed[i], deps, finish[p] if p >= 0 else 0.0)
        else:
            finish[i] = max(deps, finish[p] if p >= 0 else 0.0) + dur[i]
        done[g.signal[i]] = max(done[g.signal[i]], finish[i])
    off = np.asarray(plan.worker_offsets).tolist()
    wt = np.asarray(plan.worker_tiles).tolist()
    per_worker = np.zeros(W)
    for w in range(W):
        per_worker[w] = sum(dur[i] for i in wt[off[w]:off[w + 1]])
    return CostEstimate(
        us_per_token=max(finish) + lat[h["argmax_counter"]], stream_us=float(nbytes.sum() / bandwidth * 1e6),
        max_worker_us=float(per_worker.max()), bandwidth=bandwidth, hop_us=hop_us, prefetch=prefetch,
        finish_us=np.asarray(finish))
