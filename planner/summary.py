"""Plan summary: tiles per operator, dependency depth, bytes per worker (overall and per stage), predicted time.

Stages are recovered from the blob alone (op, layer, weight slot), so a loaded plan summarises like a fresh one.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from tiles_ext.planner import cost
from tiles_ext.planner.format import TILE, Op
from tiles_ext.planner.order import step_order
from tiles_ext.planner.format import SLOTS


def tile_stages(plan) -> list[str]:
    """Stage name of every tile: embed, L<l>.qkv, L<l>.attn, L<l>.merge, L<l>.o, L<l>.gateup, L<l>.down,
    lmhead, argmax."""
    T = np.asarray(plan.tiles)
    table = np.asarray(plan.weights)
    out = []
    for op, layer, w in zip(T[:, TILE.index("op")].tolist(), T[:, TILE.index("layer")].tolist(),
                            T[:, TILE.index("weight")].tolist()):
        if op == Op.QKV:
            out.append(f"L{layer}.qkv")
        elif op == Op.RESID:
            out.append(f"L{layer}.{SLOTS[int(table[w][0])]}")
        elif layer >= 0:
            out.append(f"L{layer}.{Op(op).name.lower()}")
        else:
            out.append(Op(op).name.lower())
    return out


def dependency_depth(plan) -> int:
    """Longest chain of wait hand-offs within a step, counting tiles (EMBED alone = 1)."""
    g = step_order(plan)
    cdepth = [0] * plan.header["num_counters"]
    depth = 0
    for i in g.order:   # every signaller of a waited counter comes before its waiter
        d = 1 + max((cdepth[c] for c in g.waits[i]), default=0)
        cdepth[g.signal[i]] = max(cdepth[g.signal[i]], d)
        depth = max(depth, d)
    return depth


@dataclass
class StageStats:
    name: str
    tiles: int
    workers: int        # workers with at least one tile of the stage
    bytes: int
    max_bytes: int      # busiest worker's bytes in the stage
    mean_bytes: float   # bytes / num_workers (the ideal share)

    @property
    def imbalance(self) -> float:
        """max / ideal - 1: the fraction of the stage's time the busiest worker adds over a perfect split."""
        return self.max_bytes / self.mean_bytes - 1 if self.mean_bytes else 0.0


def stage_stats(plan) -> list[StageStats]:
    W = plan.num_workers
    stages = tile_stages(plan)
    nbytes = np.asarray(plan.tiles)[:, TILE.index("weight_bytes")].astype(np.int64)
    worker_of = np.empty(plan.header["num_tiles"], dtype=np.int64)
    off = np.asarray(plan.worker_offsets)
    worker_of[np.asarray(plan.worker_tiles)] = np.repeat(np.arange(W), np.diff(off))
    order = list(dict.fromkeys(stages))
    idx = {s: k for k, s in enumerate(order)}
    sid = np.asarray([idx[s] for s in stages])
    per = np.zeros((len(order), W), dtype=np.int64)
    np.add.at(per, (sid, worker_of), nbytes)
    tiles = np.bincount(sid, minlength=len(order))
    used = np.zeros((len(order), W), dtype=bool)
    used[sid, worker_of] = True
    return [StageStats(s, int(tiles[k]), int(used[k].sum()), int(per[k].sum()), int(per[k].max()),
                       float(per[k].sum()) / W) for k, s in enumerate(order)]


def _collapse(stats: list[StageStats]) -> list[tuple[str, StageStats]]:
    """Stages that repeat with identical numbers in consecutive layers print once, as L<a>-<b>.<stage>."""
    rows = []
    for st in stats:
        if st.name.startswith("L") and "." in st.name:
            layer, what = st.name[1:].split(".", 1)
            key = (what, st.tiles, st.workers, st.bytes, st.max_bytes)
            for r in rows:
                if r[0] == key and r[2] == int(layer) - 1:
                    r[2] = int(layer)
                    break
            else:
                rows.append([key, int(layer), int(layer), st])
        else:
            rows.append([None, None, None, st])
    out = []
    for key, a, b, st in rows:
        if key is None:
            out.append((st.name, st))
        else:
            out.append((f"L{a}{'' if a == b else f'-{b}'}.{key[0]}", st))
    return out


def summarize(plan, bandwidth: float = cost.H200_BANDWIDTH, hop_us: float = cost.HOP_US, compare=None) -> str:
    """Text summary. compare: another plan (e.g. the waves policy) whose prediction is shown beside."""
    h, W = plan.header, plan.num_workers
    stats = stage_stats(plan)
    nbytes = np.asarray(plan.tiles)[:, TILE.index("weight_bytes")].astype(np.int64)
    per_worker = np.zeros(W, dtype=np.int64)
    off = np.asarray(plan.worker_offsets)
    np.add.at(per_worker, np.repeat(np.arange(W), np.diff(off)), nbytes[np.asarray(plan.worker_tiles)])
    ops = Counter(s.split(".")[-1] for s in tile_stages(plan))
    s = plan.shape
    lines = [
        f"plan: {s.num_layers} layers, hidden {s.hidden}, heads {s.num_heads}/{s.num_kv_heads} (head_dim "
        f"{s.head_dim}), intermediate {s.intermediate}, vocab {s.vocab}, {'tied' if s.tied_lm_head else 'untied'} "
        f"LM head, rope {s.rope_type}",
        f"  policy {plan.policy}, {W} workers, GPU {plan.gpu.name} (sm_count {plan.gpu.sm_count}), "
        f"{h['num_tiles']} tiles, {h['num_waits']} waits, {h['num_counters']} counters, "
        f"{h['attn_partitions']} attention partitions per KV head, scratch {h['scratch_bytes']} B",
        "  tiles per operator: " + ", ".join(f"{k} {v}" for k, v in ops.items()),
        f"  dependency depth: {dependency_depth(plan)} (longest chain of waiting tiles per token)",
        f"  bytes per worker: max {per_worker.max() / 1e6:.3f} MB, mean {per_worker.mean() / 1e6:.3f} MB, "
        f"imbalance {per_worker.max() / per_worker.mean() - 1:.2%} (total {nbytes.sum() / 1e6:.1f} MB incl. "
        f"KV cache at {plan_context(plan)} positions)",
        "  per stage (bytes per worker: max / ideal share, imbalance = max/ideal - 1):",
    ]
    width = max(len(name) for name, _ in _collapse(stats))
    for name, st in _collapse(stats):
        lines.append(f"    {name:<{width}}  {st.tiles:5d} tiles on {st.workers:4d} workers  "
                     f"max {st.max_bytes / 1e3:10.1f} KB / ideal {st.mean_bytes / 1e3:10.1f} KB  "
                     + (f"imbalance {st.imbalance:7.2%}" if st.tiles >= W else f"({st.tiles} tiles < {W} workers)"))
    bw = (f"{bandwidth / 1e12:.2f} TB/s over {W} workers, {hop_us} us per hand-off + {cost.ARRIVAL_US * 1e3:.0f} ns "
          "per arrival")
    for p in [plan] + ([compare] if compare is not None else []):
        e = cost.estimate(p, bandwidth, hop_us)
        ep = cost.estimate(p, bandwidth, hop_us, prefetch=True)
        lines.append(f"  predicted ({p.policy}, {bw}): {e.us_per_token:.1f} us/token "
                     f"({e.efficiency:.0%} of the {e.stream_us:.1f} us bandwidth floor); with unbounded weight "
                     f"prefetch {ep.us_per_token:.1f} us/token")
    return "\n".join(lines)


def plan_context(plan) -> int:
    """Positions the ATTN tiles' byte counts assume (the planner's context hint)."""
    T = np.asarray(plan.tiles)
    att = T[T[:, TILE.index("op")] == Op.ATTN]
    if not len(att):
        return 0
    kv_bytes = int(att[:, TILE.index("weight_bytes")].sum())
    per_pos = plan.shape.num_layers * plan.shape.num_kv_heads * plan.shape.head_dim * 2 * 2
    return kv_bytes // per_pos if per_pos else 0
