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

from tiles_ext.planner.format import ATTN_CHUNK_ELEMS, TILE, DType, Op, matrix_bytes
from tiles_ext.planner.shape import ModelShape
from tiles_ext.planner.weights import WeightLayout


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
# pays its ~2 us of hand-off and input reads for almost no stream. Where the workers' cut gives such tiles, the
# planner cuts fewer pieces of at least MIN_ROWS rows instead (measured: SmolLM2 -3.2% at context 32, -2.4% at 4064;
# a floor on Llama-1B's 254 KB down tiles, which idles 4 workers, cost +1.4%). 16 rows still fit one batch of
# SmolLM2's flag kernel; 24 overflow it at gate/up and down and cost 12-17%.
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
# H200: SmolLM2 (3 KV heads) with 16 instead of 132 // 3 = 44 partitions took 0.824 instead of 0.975 ms/token at
# context 32 and 1.070 instead of 1.052 at 4064; Llama-3.2-1B with 8 instead of 16: -1% at 32, +14% at 4064.
MAX_DEFAULT_PARTITIONS = 16
# Where more than the default partitions of every KV head fit on workers without a qkv tile of their layer, the
# attention takes as many as fit, up to this (SmolLM2: 24, measured best against 16, 20, 32 and 44).
MAX_OFF_QKV_PARTITIONS = 24


def default_partitions(workers: int, num_kv_heads: int) -> int:
    return max(1, min(MAX_DEFAULT_PARTITIONS, workers // num_kv_heads))


def default_single(head_dim: int) -> int:
    """Up to one attention chunk of the CUDA kernel (positions), partition 0 holds every position, so its MERGE
    runs from the ATTN tile's shared memory (the kernel's local merge): one dependent hand-off less per layer."""
    return max(1, ATTN_CHUNK_ELEMS // head_dim)


@dataclass(frozen=True)
class CutRules:
    """How build_graph cuts and places the stages. The defaults (build_plan's) are the measured best; tests and
    tools switch single rules off to show what each does (docs/decisions.md, "plan and cut")."""
    o_off_merge: bool = False       # o in W - num_kv_heads pieces, off the workers of the layer's MERGE tiles
    attn0_off_qkv: bool = False     # qkv in W - num_kv_heads pieces; partition-0 ATTN tiles off the qkv workers
    min_rows: int = MIN_ROWS        # small matvec tiles floored at this many rows (0: one piece per worker)
    attn_off_qkv: bool | None = False  # every ATTN tile off the qkv workers; None: where they fit (below)
    gateup_off_o: bool = False      # gate/up pieces off the layer's o workers where the others hold them all


def build_graph(shape: ModelShape, workers: int, policy: str = "tiles", attn_partitions: int | None = None,
                attn_granule: int = 32, context_hint: int = 512, attn_single: int | None = None,
                rules: CutRules = CutRules()) -> TileGraph:
    """The tile graph of one decode step of `shape` on `workers` workers.

    rules.o_off_merge: the layer's MERGE tiles finish last before o, so an o tile on their worker would stage its
    rows only then. rules.attn0_off_qkv: each partition-0 ATTN tile stages its K/V rows while the qkv stage runs,
    not after its worker's own qkv tile (at short context partition 0 is the whole attention).
    rules.attn_off_qkv None: where attn0_off_qkv applies, attn_partitions is not given and the workers without a
    qkv tile hold at least the default partitions of every KV head, the attention takes as many partitions as they
    hold (at most MAX_OFF_QKV_PARTITIONS), all off the qkv workers (SmolLM2: 72 such workers, 24 partitions of its 3
    KV heads); elsewhere nothing changes (Llama-1B: 8 such workers).
    rules.gateup_off_o: where the other workers hold all of a layer's gate/up pieces (SmolLM2: 36 o and 96 gate/up
    pieces), none stages its first batch only after an o tile on its worker."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {POLICIES}")
    if workers < 1:
        raise ValueError("workers must be >= 1")
    if rules.min_rows < 0:
        raise ValueError(f"min_rows {rules.min_rows} must be >= 0 (0: one piece per worker)")
    if attn_granule < 1 or (attn_single is not None and attn_single < 0):
        raise ValueError(f"attn_single {attn_single} must be >= 0 and attn_granule {attn_granule} >= 1")
    b = _Builder(shape, workers, policy, rules)
    b.cut_attention(attn_partitions, attn_single)
    b.make_buffers()
    b.embed()
    for layer in range(shape.num_layers):
        qkv = b.qkv(layer)
        first_part = b.attention(layer, qkv, attn_granule, context_hint)
        merges = b.merge(layer, first_part)
        o_tiles = b.o_proj(layer, merges)
        b.gateup(layer, o_tiles)
        b.down(layer)
    b.lm_head()
    b.argmax()
    b.resolve_counts()
    return TileGraph(shape=shape, workers=workers, policy=policy, buffers=b.buffers, counters=b.counters,
                     stages=b.stages, tiles=b.tiles, attn_partitions=b.P, attn_granule=attn_granule,
                     attn_single=b.attn_single, lm_tiles=b.lm_tiles, argmax_counter=b.cid["argmax"],
                     context_hint=context_hint)


class _Builder:
    """build_graph's state: buffers, counters, stages and tiles, added stage by stage."""

    def __init__(self, shape: ModelShape, workers: int, policy: str, rules: CutRules):
        self.s, self.W, self.policy, self.rules = shape, workers, policy, rules
        self.layout = WeightLayout(shape)
        self.buffers: list[BufferSpec] = []
        self.bid: dict[str, int] = {}
        self.counters: list[str] = []
        self.cid: dict[str, int] = {}
        self.stages: list[str] = []
        self.stage_counters: list[list[int]] = []   # counters signalled by each stage
        self.tiles: list[TileSpec] = []
        self.signals: dict[int, int] = {}           # counter -> arrivals per step

    # --- plumbing ---------------------------------------------------------------------------------------------
    def w(self, layer: int, slot: str) -> int:
        return self.layout.index(layer, slot)

    def matrix_bytes(self, r0: int, r1: int, cols: int) -> int:
        """Bytes streamed for weight rows [r0, r1) of a matrix with `cols` columns, in the shape's weight format."""
        return matrix_bytes(self.s.scale_layout, r0, r1, cols)

    def row_bytes(self, cols: int) -> int:
        """Bytes of one matrix row in the shape's weight format (what the cut rules size tiles by)."""
        return self.matrix_bytes(0, 1, cols)

    def buf(self, name: str, numel: int, dtype: DType) -> None:
        self.bid[name] = len(self.buffers)
        self.buffers.append(BufferSpec(name, numel, dtype))

    def new_stage(self, name: str, counter_names) -> int:
        self.stages.append(name)
        ids = []
        for c in counter_names:
            self.cid[c] = len(self.counters)
            self.counters.append(c)
            ids.append(self.cid[c])
        self.stage_counters.append(ids)
        return len(self.stages) - 1

    def full(self, counter_name: str):
        """Wait for every arrival at a counter in this step (count filled in once all tiles exist)."""
        return (self.cid[counter_name], None, 0)

    def add(self, op, stage, piece, signal, waits, with_tile=-1, not_with=(), **f) -> int:
        base = {k: -1 for k, _ in TILE.fields}
        base.update(op=int(op), layer=-1, row_begin=0, row_end=0, out_offset=0, aux0=0, aux1=0,
                    wait_begin=0, wait_count=0, weight_bytes=0)
        base.update(f)
        base["signal"] = signal
        self.signals[signal] = self.signals.get(signal, 0) + 1
        if self.policy == "waves" and stage > 0:
            prev = self.stage_counters[stage - 1]
            waits = [(c, None, 0) for c in prev] + [w for w in waits if w[2] != 0]
        self.tiles.append(TileSpec(op, stage, piece, base, waits, with_tile, tuple(not_with)))
        return len(self.tiles) - 1

    # --- the cut ----------------------------------------------------------------------------------------------
    def cut_attention(self, attn_partitions, attn_single) -> None:
        """The qkv cut (the same in every layer) and the attention's partitions, which depend on the workers the
        qkv cut leaves free."""
        s, W, r = self.s, self.W, self.rules
        self.P = attn_partitions or default_partitions(W, s.num_kv_heads)
        self.free_qkv = r.attn0_off_qkv and W > 2 * s.num_kv_heads
        self.qkv_pieces = floor_pieces(s.q_dim + 2 * s.kv_dim, W - s.num_kv_heads if self.free_qkv else W,
                                       self.row_bytes(s.hidden), r.min_rows)
        self.attn_off_qkv = r.attn_off_qkv
        if self.attn_off_qkv is None:
            off_p = min(MAX_OFF_QKV_PARTITIONS, (W - self.qkv_pieces) // s.num_kv_heads)
            self.attn_off_qkv = self.free_qkv and attn_partitions is None and off_p >= self.P
            if self.attn_off_qkv:
                self.P = off_p
        self.attn_single = default_single(s.head_dim) if attn_single is None else attn_single

    def make_buffers(self) -> None:
        s, P = self.s, self.P
        for l in range(s.num_layers + 1):
            self.buf(f"x{l}", s.hidden, DType.F32)
        for l in range(s.num_layers):
            self.buf(f"xm{l}", s.hidden, DType.F32)
            self.buf(f"q{l}", s.q_dim, DType.BF16)
            self.buf(f"knew{l}", s.kv_dim, DType.BF16)
            self.buf(f"vnew{l}", s.kv_dim, DType.BF16)
            self.buf(f"attn_part{l}", s.num_kv_heads * P * s.group * (s.head_dim + 2), DType.F32)
            self.buf(f"attn_out{l}", s.q_dim, DType.BF16)
            self.buf(f"act{l}", s.intermediate, DType.BF16)
        self.lm_segments = cut_rows([("lm", s.vocab)], self.W)
        self.lm_tiles = len(self.lm_segments)
        self.buf("lm_partial", 2 * self.lm_tiles, DType.F32)

    # --- the stages -------------------------------------------------------------------------------------------
    def embed(self) -> None:
        """EMBED waits for the previous step's token."""
        st = self.new_stage("embed", ["embed"])
        self.add(Op.EMBED, st, 0, self.cid["embed"], [("argmax", None, -1)], weight=self.w(0, "embed"),
                 out_buf=self.bid["x0"], row_begin=0, row_end=1, weight_bytes=self.s.hidden * 2)

    def qkv(self, l: int) -> list[int]:
        """Grouped by KV head, so that the attention of a group waits only on its own rows. Each tile adds its
        rows' bias (weight2) where the shape has one."""
        s = self.s
        H, hd, G = s.hidden, s.head_dim, s.group
        x_in = "embed" if l == 0 else f"down{l - 1}"
        st = self.new_stage(f"L{l}.qkv", [f"qkv{l}.{h}" for h in range(s.num_kv_heads)])
        segs = []
        for h in range(s.num_kv_heads):
            segs += [(("q", h), G * hd), (("k", h), hd), (("v", h), hd)]
        tiles = []
        for piece, (which, h), r0, r1 in cut_rows(segs, self.qkv_pieces):
            base_row = h * (G * hd if which == "q" else hd)
            out = {"q": f"q{l}", "k": f"knew{l}", "v": f"vnew{l}"}[which]
            tiles.append(self.add(
                Op.QKV, st, piece, self.cid[f"qkv{l}.{h}"], [self.full(x_in)],
                layer=l, weight=self.w(l, which), weight2=self.w(l, f"{which}_bias"), norm=self.w(l, "input_norm"),
                in_buf=self.bid[f"x{l}"], row_begin=base_row + r0, row_end=base_row + r1, out_buf=self.bid[out],
                out_offset=base_row + r0, weight_bytes=self.matrix_bytes(base_row + r0, base_row + r1, H)))
        self.qkv_tiles = tiles
        return tiles

    def attention(self, l: int, qkv_tiles: list[int], granule: int, context_hint: int) -> dict[int, int]:
        """One tile per (KV head, partition); q and k get their per-head norms (norm, weight2) where the shape has
        them. Returns each KV head's partition-0 tile."""
        s, P = self.s, self.P
        hd = s.head_dim
        st = self.new_stage(f"L{l}.attn", [f"attn{l}.{h}" for h in range(s.num_kv_heads)])
        per = -(-context_hint // P)
        first_part = {}
        all_off = self.attn_off_qkv and self.W - self.qkv_pieces >= s.num_kv_heads * P
        for h in range(s.num_kv_heads):
            for p in range(P):
                i = self.add(
                    Op.ATTN, st, h * P + p, self.cid[f"attn{l}.{h}"], [self.full(f"qkv{l}.{h}")],
                    not_with=qkv_tiles if (self.free_qkv and p == 0) or all_off else (),
                    layer=l, norm=self.w(l, "q_norm"), weight2=self.w(l, "k_norm"), in_buf=self.bid[f"q{l}"],
                    in2_buf=self.bid[f"knew{l}"], in3_buf=self.bid[f"vnew{l}"], out_buf=self.bid[f"attn_part{l}"],
                    aux0=h, aux1=p, weight_bytes=min(per, max(0, context_hint - p * per)) * hd * 2 * 2)
                if p == 0:
                    first_part[h] = i
        return first_part

    def merge(self, l: int, first_part: dict[int, int]) -> list[int]:
        """On the worker of the KV head's partition-0 ATTN tile, right after it: below one chunk of context that
        tile holds every position, and the MERGE reads it from the worker's shared memory."""
        s, P = self.s, self.P
        st = self.new_stage(f"L{l}.merge", [f"merge{l}"])
        return [self.add(Op.MERGE, st, h, self.cid[f"merge{l}"], [self.full(f"attn{l}.{h}")],
                         with_tile=first_part[h], layer=l, in_buf=self.bid[f"attn_part{l}"],
                         out_buf=self.bid[f"attn_out{l}"], aux0=h, weight_bytes=P * s.group * (s.head_dim + 2) * 4)
                for h in range(s.num_kv_heads)]

    def o_proj(self, l: int, merge_tiles: list[int]) -> list[int]:
        s, W, r = self.s, self.W, self.rules
        H = s.hidden
        st = self.new_stage(f"L{l}.o", [f"o{l}"])
        avoid = r.o_off_merge and W > 2 * s.num_kv_heads
        pieces = floor_pieces(H, W - s.num_kv_heads if avoid else W, self.row_bytes(s.q_dim), r.min_rows)
        cut = cut_rows([("o", H)], pieces)
        free = W - s.num_kv_heads
        return [self.add(Op.RESID, st, piece, self.cid[f"o{l}"], [self.full(f"merge{l}")],
                         not_with=merge_tiles if avoid and piece < free else (),
                         layer=l, weight=self.w(l, "o"), in_buf=self.bid[f"attn_out{l}"], in2_buf=self.bid[f"x{l}"],
                         out_buf=self.bid[f"xm{l}"], row_begin=r0, row_end=r1, out_offset=r0,
                         weight_bytes=self.matrix_bytes(r0, r1, s.q_dim))
                for piece, _, r0, r1 in cut]

    def gateup(self, l: int, o_tiles: list[int]) -> None:
        s, W, r = self.s, self.W, self.rules
        H = s.hidden
        st = self.new_stage(f"L{l}.gateup", [f"gateup{l}"])
        pieces = floor_pieces(s.intermediate, W, 2 * self.row_bytes(H), r.min_rows)
        avoid = o_tiles if r.gateup_off_o and W - len(o_tiles) >= pieces else ()
        for piece, _, r0, r1 in cut_rows([("gu", s.intermediate)], pieces):
            self.add(Op.GATEUP, st, piece, self.cid[f"gateup{l}"], [self.full(f"o{l}")], not_with=avoid,
                     layer=l, weight=self.w(l, "gate"), weight2=self.w(l, "up"), norm=self.w(l, "post_norm"),
                     in_buf=self.bid[f"xm{l}"], out_buf=self.bid[f"act{l}"], row_begin=r0, row_end=r1, out_offset=r0,
                     weight_bytes=2 * self.matrix_bytes(r0, r1, H))

    def down(self, l: int) -> None:
        s = self.s
        H = s.hidden
        st = self.new_stage(f"L{l}.down", [f"down{l}"])
        cut = cut_rows([("down", H)], floor_pieces(H, self.W, self.row_bytes(s.intermediate), self.rules.min_rows))
        for piece, _, r0, r1 in cut:
            self.add(Op.RESID, st, piece, self.cid[f"down{l}"], [self.full(f"gateup{l}")],
                     layer=l, weight=self.w(l, "down"), in_buf=self.bid[f"act{l}"], in2_buf=self.bid[f"xm{l}"],
                     out_buf=self.bid[f"x{l + 1}"], row_begin=r0, row_end=r1, out_offset=r0,
                     weight_bytes=self.matrix_bytes(r0, r1, s.intermediate))

    def lm_head(self) -> None:
        s = self.s
        st = self.new_stage("lmhead", ["lm"])
        for slot, (piece, _, r0, r1) in enumerate(self.lm_segments):
            self.add(Op.LMHEAD, st, piece, self.cid["lm"], [self.full(f"down{s.num_layers - 1}")],
                     weight=self.w(0, "lm_head"), norm=self.w(0, "final_norm"), in_buf=self.bid[f"x{s.num_layers}"],
                     out_buf=self.bid["lm_partial"], row_begin=r0, row_end=r1, aux0=slot,
                     weight_bytes=(r1 - r0) * s.hidden * 2)

    def argmax(self) -> None:
        st = self.new_stage("argmax", ["argmax"])
        self.add(Op.ARGMAX, st, 0, self.cid["argmax"], [self.full("lm")], in_buf=self.bid["lm_partial"],
                 aux0=self.lm_tiles, weight_bytes=self.lm_tiles * 8)

    def resolve_counts(self) -> None:
        """A wait covers every arrival at its counter in a step."""
        for t in self.tiles:
            resolved = []
            for c, count, off in t.waits:
                c = self.cid[c] if isinstance(c, str) else c
                resolved.append((c, self.signals[c] if count is None else count, off))
            t.waits = resolved
