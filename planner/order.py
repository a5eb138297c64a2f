"""The within-step dependency order of a plan's tiles, shared by the validator, the cost model and the summary.

A tile may start once every counter it waits on in the same step has all its arrivals (wait edges) and the
previous tile of its worker is done (program order). `step_order` walks that graph once (Kahn's algorithm, a
counter standing for all of its signallers); any consumer that only needs "every predecessor first" iterates
`order`. Waits on the previous step (step_offset -1) are not edges within a step.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from tiles_ext.planner.format import TILE, WAIT


@dataclass
class StepOrder:
    signal: list          # counter each tile signals
    waits: list           # set of counters each tile waits on in the same step
    prev: list            # previous tile on the same worker, -1 for a worker's first tile
    order: list           # tiles in a dependency-respecting order; shorter than num_tiles on a cycle
    indeg: list           # predecessors still unfinished after the walk (non-zero only on a cycle)

    @property
    def complete(self) -> bool:
        return len(self.order) == len(self.signal)


def step_order(plan) -> StepOrder:
    """Counters and wait records must be in range (the validator checks that before calling this)."""
    h = plan.header
    n, C = h["num_tiles"], h["num_counters"]
    T = np.asarray(plan.tiles)
    signal = T[:, TILE.index("signal")].tolist()
    wb, wc = T[:, TILE.index("wait_begin")].tolist(), T[:, TILE.index("wait_count")].tolist()
    records = np.asarray(plan.waits).reshape(-1, WAIT.words).tolist()
    waits = [{c for c, _, off in records[wb[i]:wb[i] + wc[i]] if off == 0} for i in range(n)]
    prev, nxt = [-1] * n, [-1] * n
    off = np.asarray(plan.worker_offsets).tolist()
    wt = np.asarray(plan.worker_tiles).tolist()
    for w in range(h["num_workers"]):
        lst = wt[off[w]:off[w + 1]]
        for a, b in zip(lst, lst[1:]):
            prev[b], nxt[a] = a, b
    left = [0] * C
    for s in signal:
        left[s] += 1
    waiters = [[] for _ in range(C)]
    indeg = [0] * n
    for i, cs in enumerate(waits):
        for c in cs:
            waiters[c].append(i)
        indeg[i] = len(cs) + (prev[i] >= 0)
    ready = deque(i for i in range(n) if indeg[i] == 0)
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        c = signal[i]
        left[c] -= 1
        if left[c] == 0:
            for j in waiters[c]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        j = nxt[i]
        if j >= 0:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    return StepOrder(signal=signal, waits=waits, prev=prev, order=order, indeg=indeg)
