"""Assigns tiles to workers and orders each worker's list.

Within a stage, pieces (the tiles that must share a worker) are placed largest first on the worker with the
fewest bytes in that stage, ties going to the worker with the fewest bytes overall, so that small stages
(embed, argmax) rotate across workers instead of piling onto worker 0. A tile with `with_tile` (MERGE: its
partition-0 ATTN tile) goes to that tile's worker and runs right after it; a tile with `not_with` (the o projection
under o_off_merge: the layer's MERGE tiles) avoids those tiles' workers. Each worker runs its tiles in stage order;
since every wait points to an earlier stage, the plan cannot deadlock.
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
    where: dict[int, int] = {}
    for stage in sorted(by_stage):
        pieces = by_stage[stage]
        in_stage = [0] * W
        # Constrained pieces (not_with) first, so that the workers they may use are still free.
        order = sorted(pieces.items(), key=lambda kv: (not graph.tiles[kv[1][0]].not_with,
                                                       -sum(graph.tiles[i].weight_bytes for i in kv[1]), kv[0]))
        for piece, idx in order:
            nbytes = sum(graph.tiles[i].weight_bytes for i in idx)
            head = graph.tiles[idx[0]]
            if head.with_tile >= 0:
                w = where[head.with_tile]
            else:
                banned = {where[j] for j in head.not_with}
                w = min((k for k in range(W) if k not in banned), key=lambda k: (in_stage[k], total[k], k))
            in_stage[w] += nbytes
            total[w] += nbytes
            lists[w].extend(idx)
            for i in idx:
                where[i] = w
    # Stage order; within a stage, a tile that a later one is anchored to runs last, so that the two are adjacent.
    anchors = {t.with_tile for t in graph.tiles if t.with_tile >= 0}
    for w in range(W):
        lists[w].sort(key=lambda i: (graph.tiles[i].stage, i in anchors, i))
    return lists
