"""Assigns tiles to workers and orders each worker's list.

Within a stage, pieces (the tiles that must share a worker) are placed largest first on the worker with the
fewest bytes in that stage, ties going to the worker with the fewest bytes overall, so that small stages
(embed, merge, argmax) rotate across workers instead of piling onto worker 0. Each worker runs its tiles in
stage order; since every wait points to an earlier stage, the plan cannot deadlock.
"""
from __future__ import annotations

from collections import defaultdict


def assign(graph) -> list[list[int]]:
    """Returns, for each worker, the indices of its tiles in execution order."""
    W = graph.workers
    total = [0] * W
    lists: list[list[int]] = [[] for _ in range(W)]
    by_stage: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, t in enumerate(graph.tiles):
        by_stage[t.stage][t.piece].append(i)
    for stage in sorted(by_stage):
        pieces = by_stage[stage]
        in_stage = [0] * W
        order = sorted(pieces.items(), key=lambda kv: (-sum(graph.tiles[i].weight_bytes for i in kv[1]), kv[0]))
        for piece, idx in order:
            nbytes = sum(graph.tiles[i].weight_bytes for i in idx)
            w = min(range(W), key=lambda k: (in_stage[k], total[k], k))
            in_stage[w] += nbytes
            total[w] += nbytes
            lists[w].extend(idx)
    for w in range(W):
        lists[w].sort(key=lambda i: (graph.tiles[i].stage, i))
    return lists
