"""The tile graph of one decode step: every operator cut into tiles, with buffers and dependency counters.

Stages run in this order per step (a stage is one operator of one layer):
    embed, [qkv, attn, merge, o, gateup, down] x layers, lmhead, argmax
Matrix stages are cut along output rows into at most `workers` pieces of (nearly) equal bytes. A stage with
segments (qkv: one KV group's q, k or v rows; these must not mix, because attention for a group waits on exactly
that group's tiles) is cut so that no piece straddles a segment: the smallest row count R with
sum(ceil(rows_i / R)) <= workers, each segment cut evenly into ceil(rows_i / R) pieces. That costs a little byte
balance (Llama-1B on 132 workers: 26 rows at most against 23.3 on average) but gives every worker one tile per
stage: measured on the H200, a second tile on a worker costs more in fixed per-tile latency (~5 us) than the
extra rows (~0.4 us). The scheduler keeps a piece on one worker.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .format import ATTN_CHUNK_ELEMS, DType, Op, TILE, weight_index
from .shape import ModelShape


@dataclass
class TileSpec:
    op: Op
    stage: int
    piece: int                      # tiles of one piece go to one worker
    fields: dict                    # Tile fields other than wait_begin / wait_count
    waits: list = field(default_factory=list)   # (counter, count, step_offset)
    with_tile: int = -1             # run on the worker of this (earlier-stage) tile, right after it; -1 free
    not_with: tuple = ()            # never on the worker of any of these (earlier-stage) tiles

    @property
    def weight_bytes(self) -> int:
        return self.fields["weight_bytes"]


@dataclass
class BufferSpec:
    name: str
    numel: int
    dtype: DType


@dataclass
class TileGraph:
    shape: ModelShape
    workers: int
    policy: str
    buffers: list
    counters: list                  # counter names
    stages: list                    # stage names
    tiles: list
    attn_partitions: int
    attn_granule: int
    attn_single: int
    lm_tiles: int
    argmax_counter: int
    context_hint: int


POLICIES = ("tiles", "waves")
# A matvec tile whose rows fit in one staged batch per SM (64 KB in the counter kernel, 48 KB in the flag kernel)
# pays its ~2 us of hand-off and input reads for almost no stream (session 19's busy table). Where the workers' cut
# gives such tiles, the planner cuts fewer pieces of at least MIN_ROWS rows instead (perf log v50: SmolLM2 -3.2% at
# ctx 32, -2.4% at 4064; a floor on Llama-1B's 254 KB down tiles, which idles 4 workers, cost +1.4%). 16 rows still
# fit one batch of SmolLM2's flag kernel; 24 overflow it at gate/up and down and cost 12-17% (perf log, session 20).
MIN_ROWS = 16
SMALL_TILE_BYTES = 64 * 1024


def cut_rows(segments, pieces: int):
    """Cut segments [(key, rows)] into at most `pieces` pieces of near-equal rows, no piece straddling two
    segments (unless there are more segments than pieces: then the segments are laid end to end and cut evenly,
    and a straddling piece becomes one tile per segment, all of the same piece).

    Returns [(piece, key, row_begin, row_end)] with rows local to the segment; empty pieces are dropped.
    """
    if 1 < len(segments) <= pieces:
        return _cut_segments_whole(segments, pieces)
    total = sum(n for _, n in segments)
    out = []
    starts = []
    acc = 0
    for key, n in segments:
        starts.append((key, acc, acc + n))
        acc += n
    for p in range(pieces):
        lo, hi = (p * total) // pieces, ((p + 1) * total) // pieces
        for key, s0, s1 in starts:
            a, b = max(lo, s0), min(hi, s1)
            if a < b:
                out.append((p, key, a - s0, b - s0))
    return out


def floor_pieces(rows: int, pieces: int, row_bytes: int, min_rows: int) -> int:
    """How many pieces to cut a matrix of `rows` rows into: `pieces`, unless each would be a small tile (at most
    SMALL_TILE_BYTES): then no more than pieces of min_rows rows each allow (0: no floor)."""
    if min_rows <= 0 or -(-rows // pieces) * row_bytes > SMALL_TILE_BYTES:
        return pieces
    return max(1, min(pieces, rows // min_rows))


def max_piece_rows(rows: list[int], pieces: int) -> int:
    """Smallest R such that cutting each segment into ceil(rows_i / R) pieces needs at most `pieces` pieces."""
    lo, hi = 1, max(rows)
    while lo < hi:
        mid = (lo + hi) // 2
        if sum(-(-n // mid) for n in rows) <= pieces:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _cut_segments_whole(segments, pieces: int):
    r = max_piece_rows([n for _, n in segments if n > 0], pieces)
    out = []
    piece = 0
    for key, n in segments:
        k = -(-n // r)
        for j in range(k):
            a, b = (j * n) // k, ((j + 1) * n) // k
            if a < b:
                out.append((piece, key, a, b))
                piece += 1
    return out


# Default attention partitions per KV head: enough to spread long contexts over the SMs, but no more than 16,
# because every partition costs the MERGE tile a read and every token pays for them at short context. Measured on the
# H200 (docs/perf-log.md v10): SmolLM2 (3 KV heads) with 16 instead of 132 // 3 = 44 partitions took 0.824 instead of
# 0.975 ms/token at context 32 and 1.070 instead of 1.052 at 4064; Llama-3.2-1B with 8 instead of 16: -1% at 32,
# +14% at 4064.
MAX_DEFAULT_PARTITIONS = 16
# Where more than the default partitions of every KV head fit on workers without a qkv tile of their layer, the
# attention takes as many as fit, up to this (perf log v51: SmolLM2 24, measured against 16, 20, 32 and 44).
MAX_OFF_QKV_PARTITIONS = 24


def default_partitions(workers: int, num_kv_heads: int) -> int:
    return max(1, min(MAX_DEFAULT_PARTITIONS, workers // num_kv_heads))


def default_single(head_dim: int) -> int:
    """Up to one attention chunk of the CUDA kernel (positions), partition 0 holds every position, so its MERGE
    runs from the ATTN tile's shared memory (the kernel's kOptLocalMerge): one dependent hand-off less per layer."""
    return max(1, ATTN_CHUNK_ELEMS // head_dim)


def build_graph(shape: ModelShape, workers: int, policy: str = "tiles", attn_partitions: int | None = None,
                attn_granule: int = 32, context_hint: int = 512, attn_single: int | None = None,
                o_off_merge: bool = False, attn0_off_qkv: bool = False, o_rows: int = 0,
                min_rows: int = MIN_ROWS, attn_off_qkv: bool | None = False, gateup_off_o: bool = False) -> TileGraph:
    """o_off_merge: the o projection is cut into workers - num_kv_heads pieces that avoid the workers running the
    layer's MERGE tiles (the last to finish before o; their o tile would stage its rows only then).
    attn0_off_qkv: the qkv projection is cut into workers - num_kv_heads pieces and each partition-0 ATTN tile runs
    on a worker without a qkv tile of its layer, so that its K/V rows are staged while the qkv stage runs, not
    after that worker's own qkv tile (at short context partition 0 is the whole attention).
    o_rows > 0 (experiment, perf log session 19): the o projection in pieces of exactly o_rows rows instead; under
    o_off_merge as many as there are other workers avoid the MERGE workers, the rest go to the least loaded.
    min_rows: the qkv, o, gate/up and down cuts give pieces of at least min_rows rows where one piece per worker
    would be a small tile (SMALL_TILE_BYTES); 0: one piece per worker always.
    attn_off_qkv: every ATTN tile, not only partition 0, avoids the workers of its layer's qkv tiles, where enough
    workers have none. None (build_plan's default, perf log v51): where attn0_off_qkv applies, attn_partitions is
    not given and the workers without a qkv tile hold at least the default partitions of every KV head, the
    attention takes as many partitions as they hold (at most MAX_OFF_QKV_PARTITIONS), all off the qkv workers
    (SmolLM2: 72 such workers, 24 partitions of its 3 KV heads); elsewhere nothing changes (Llama-1B: 8 such
    workers).
    gateup_off_o (build_plan's default, perf log v52): the gate/up pieces avoid the workers of the layer's o tiles
    where the other workers hold them all (SmolLM2: 36 o and 96 gate/up pieces), so that none stages its first
    batch only after an o tile on its worker."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {POLICIES}")
    if workers < 1:
        raise ValueError("workers must be >= 1")
    s = shape
    L, H, hd, G = s.num_layers, s.hidden, s.head_dim, s.group
    nq, nkv = s.num_heads * hd, s.num_kv_heads * hd
    P = attn_partitions or default_partitions(workers, s.num_kv_heads)
    # The qkv cut is the same in every layer; the attention's partitions depend on the workers it leaves free.
    free_qkv = attn0_off_qkv and workers > 2 * s.num_kv_heads
    qkv_pieces = floor_pieces(nq + 2 * nkv, workers - s.num_kv_heads if free_qkv else workers, H * 2, min_rows)
    if attn_off_qkv is None:
        off_p = min(MAX_OFF_QKV_PARTITIONS, (workers - qkv_pieces) // s.num_kv_heads)
        attn_off_qkv = free_qkv and attn_partitions is None and off_p >= P
        if attn_off_qkv:
            P = off_p
    if attn_single is None:
        attn_single = default_single(hd)
    if o_rows < 0 or min_rows < 0:
        raise ValueError(f"o_rows {o_rows} and min_rows {min_rows} must be >= 0 (0: the planner's cut)")
    if attn_single < 0 or attn_granule < 1:
        raise ValueError(f"attn_single {attn_single} must be >= 0 and attn_granule {attn_granule} >= 1")

    buffers: list[BufferSpec] = []
    bid: dict[str, int] = {}

    def buf(name, numel, dtype):
        bid[name] = len(buffers)
        buffers.append(BufferSpec(name, numel, dtype))

    for l in range(L + 1):
        buf(f"x{l}", H, DType.F32)
    for l in range(L):
        buf(f"xm{l}", H, DType.F32)
        buf(f"q{l}", nq, DType.BF16)
        buf(f"knew{l}", nkv, DType.BF16)
        buf(f"vnew{l}", nkv, DType.BF16)
        buf(f"attn_part{l}", s.num_kv_heads * P * G * (hd + 2), DType.F32)
        buf(f"attn_out{l}", nq, DType.BF16)
        buf(f"act{l}", s.intermediate, DType.BF16)
    lm_segments = cut_rows([("lm", s.vocab)], workers)
    lm_tiles = len(lm_segments)
    buf("lm_partial", 2 * lm_tiles, DType.F32)

    counters: list[str] = []
    cid: dict[str, int] = {}

    def counter(name):
        cid[name] = len(counters)
        counters.append(name)
        return cid[name]

    stages: list[str] = []
    stage_counters: list[list[int]] = []   # counters signalled by each stage
    tiles: list[TileSpec] = []
    signals: dict[int, int] = {}           # counter -> arrivals per step

    def W(layer, slot):
        return weight_index(layer, slot, L)

    def new_stage(name, counter_names):
        stages.append(name)
        stage_counters.append([counter(c) for c in counter_names])
        return len(stages) - 1

    def add(op, stage, piece, signal, waits, with_tile=-1, not_with=(), **f):
        base = {k: -1 for k, _ in TILE.fields}
        base.update(op=int(op), layer=-1, row_begin=0, row_end=0, out_offset=0, aux0=0, aux1=0,
                    wait_begin=0, wait_count=0, weight_bytes=0)
        base.update(f)
        base["signal"] = signal
        signals[signal] = signals.get(signal, 0) + 1
        if policy == "waves" and stage > 0:
            prev = stage_counters[stage - 1]
            waits = [(c, None, 0) for c in prev] + [w for w in waits if w[2] != 0]
        tiles.append(TileSpec(op, stage, piece, base, waits, with_tile, tuple(not_with)))

    def full(counter_name):
        """Wait for every arrival at a counter in this step (count filled in once all tiles exist)."""
        return (cid[counter_name], None, 0)

    # EMBED: waits for the previous step's token.
    st = new_stage("embed", ["embed"])
    add(Op.EMBED, st, 0, cid["embed"], [("argmax", None, -1)],
        weight=W(0, "embed"), out_buf=bid["x0"], row_begin=0, row_end=1, weight_bytes=H * 2)

    for l in range(L):
        x_in = "embed" if l == 0 else f"down{l - 1}"
        # QKV, grouped by KV head so attention for a group waits only on its own rows.
        st = new_stage(f"L{l}.qkv", [f"qkv{l}.{h}" for h in range(s.num_kv_heads)])
        segs = []
        for h in range(s.num_kv_heads):
            segs += [(("q", h), G * hd), (("k", h), hd), (("v", h), hd)]
        qkv_tiles = []
        for piece, (which, h), r0, r1 in cut_rows(segs, qkv_pieces):
            qkv_tiles.append(len(tiles))
            base_row = h * (G * hd if which == "q" else hd)
            out = {"q": f"q{l}", "k": f"knew{l}", "v": f"vnew{l}"}[which]
            add(Op.QKV, st, piece, cid[f"qkv{l}.{h}"], [full(x_in)],
                layer=l, weight=W(l, which), norm=W(l, "input_norm"), in_buf=bid[f"x{l}"],
                row_begin=base_row + r0, row_end=base_row + r1, out_buf=bid[out], out_offset=base_row + r0,
                weight_bytes=(r1 - r0) * H * 2)
        # Attention: one tile per (KV head, partition).
        st = new_stage(f"L{l}.attn", [f"attn{l}.{h}" for h in range(s.num_kv_heads)])
        per = -(-context_hint // P)
        first_part = {}
        all_off = attn_off_qkv and workers - qkv_pieces >= s.num_kv_heads * P
        for h in range(s.num_kv_heads):
            for p in range(P):
                if p == 0:
                    first_part[h] = len(tiles)
                add(Op.ATTN, st, h * P + p, cid[f"attn{l}.{h}"], [full(f"qkv{l}.{h}")],
                    not_with=qkv_tiles if (free_qkv and p == 0) or all_off else (),
                    layer=l, in_buf=bid[f"q{l}"], in2_buf=bid[f"knew{l}"], in3_buf=bid[f"vnew{l}"],
                    out_buf=bid[f"attn_part{l}"], aux0=h, aux1=p,
                    weight_bytes=min(per, max(0, context_hint - p * per)) * hd * 2 * 2)
        st = new_stage(f"L{l}.merge", [f"merge{l}"])
        merge_tiles = []
        for h in range(s.num_kv_heads):
            merge_tiles.append(len(tiles))
            # On partition 0's worker, right after it: below one chunk of context it holds every position.
            add(Op.MERGE, st, h, cid[f"merge{l}"], [full(f"attn{l}.{h}")], with_tile=first_part[h],
                layer=l, in_buf=bid[f"attn_part{l}"], out_buf=bid[f"attn_out{l}"], aux0=h,
                weight_bytes=P * G * (hd + 2) * 4)
        st = new_stage(f"L{l}.o", [f"o{l}"])
        avoid = o_off_merge and workers > 2 * s.num_kv_heads
        if o_rows > 0:
            o_cut = [(k, "o", r, min(H, r + o_rows)) for k, r in enumerate(range(0, H, o_rows))]
        else:
            o_cut = cut_rows([("o", H)], floor_pieces(H, workers - s.num_kv_heads if avoid else workers, nq * 2,
                                                        min_rows))
        free = workers - s.num_kv_heads
        o_tiles = []
        for piece, _, r0, r1 in o_cut:
            o_tiles.append(len(tiles))
            add(Op.RESID, st, piece, cid[f"o{l}"], [full(f"merge{l}")],
                not_with=merge_tiles if avoid and piece < free else (),
                layer=l, weight=W(l, "o"), in_buf=bid[f"attn_out{l}"], in2_buf=bid[f"x{l}"],
                out_buf=bid[f"xm{l}"], row_begin=r0, row_end=r1, out_offset=r0, weight_bytes=(r1 - r0) * nq * 2)
        st = new_stage(f"L{l}.gateup", [f"gateup{l}"])
        gu_pieces = floor_pieces(s.intermediate, workers, 4 * H, min_rows)
        gu_avoid = o_tiles if gateup_off_o and workers - len(o_tiles) >= gu_pieces else ()
        for piece, _, r0, r1 in cut_rows([("gu", s.intermediate)], gu_pieces):
            add(Op.GATEUP, st, piece, cid[f"gateup{l}"], [full(f"o{l}")], not_with=gu_avoid,
                layer=l, weight=W(l, "gate"), weight2=W(l, "up"), norm=W(l, "post_norm"), in_buf=bid[f"xm{l}"],
                out_buf=bid[f"act{l}"], row_begin=r0, row_end=r1, out_offset=r0,
                weight_bytes=2 * (r1 - r0) * H * 2)
        st = new_stage(f"L{l}.down", [f"down{l}"])
        for piece, _, r0, r1 in cut_rows([("down", H)], floor_pieces(H, workers, s.intermediate * 2, min_rows)):
            add(Op.RESID, st, piece, cid[f"down{l}"], [full(f"gateup{l}")],
                layer=l, weight=W(l, "down"), in_buf=bid[f"act{l}"], in2_buf=bid[f"xm{l}"],
                out_buf=bid[f"x{l + 1}"], row_begin=r0, row_end=r1, out_offset=r0,
                weight_bytes=(r1 - r0) * s.intermediate * 2)

    st = new_stage("lmhead", ["lm"])
    for slot, (piece, _, r0, r1) in enumerate(lm_segments):
        add(Op.LMHEAD, st, piece, cid["lm"], [full(f"down{L - 1}")],
            weight=W(0, "lm_head"), norm=W(0, "final_norm"), in_buf=bid[f"x{L}"], out_buf=bid["lm_partial"],
            row_begin=r0, row_end=r1, aux0=slot, weight_bytes=(r1 - r0) * H * 2)
    st = new_stage("argmax", ["argmax"])
    add(Op.ARGMAX, st, 0, cid["argmax"], [full("lm")], in_buf=bid["lm_partial"], aux0=lm_tiles,
        weight_bytes=lm_tiles * 8)

    # Resolve counts: a wait covers every arrival at its counter in a step.
    for t in tiles:
        resolved = []
        for c, count, off in t.waits:
            c = cid[c] if isinstance(c, str) else c
            resolved.append((c, signals[c] if count is None else count, off))
        t.waits = resolved

    return TileGraph(shape=s, workers=workers, policy=policy, buffers=buffers, counters=counters, stages=stages,
                     tiles=tiles, attn_partitions=P, attn_granule=attn_granule, attn_single=attn_single,
                     lm_tiles=lm_tiles, argmax_counter=cid["argmax"], context_hint=context_hint)
