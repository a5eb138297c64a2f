"""Plan: a scheduled tile graph and its int32 blob (layout in format.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .format import BUFFER, HEADER, TILE, WAIT, Op
from .graph import MIN_ROWS, build_graph
from .schedule import assign
from .shape import ModelShape

ALIGN = 256


@dataclass(frozen=True)
class GpuTarget:
    """The GPU a plan is made for. sm_count 0 means "any" (CPU plans, tests)."""
    name: str = "any"
    sm_count: int = 0
    cc_major: int = 0
    cc_minor: int = 0

    @classmethod
    def of_device(cls, device) -> "GpuTarget":
        import torch
        device = torch.device(device)
        if device.type != "cuda":
            return cls()
        p = torch.cuda.get_device_properties(device)
        return cls(p.name, p.multi_processor_count, p.major, p.minor)


@dataclass
class Plan:
    shape: ModelShape
    gpu: GpuTarget
    header: dict
    buffers: np.ndarray        # [num_buffers, BUFFER.words]
    tiles: np.ndarray          # [num_tiles, TILE.words]
    waits: np.ndarray          # [num_waits, WAIT.words]
    worker_offsets: np.ndarray  # [num_workers + 1]
    worker_tiles: np.ndarray   # [num_tiles]
    weight_shapes: np.ndarray  # [num_weights, 2]
    policy: str = "tiles"

    @property
    def num_workers(self) -> int:
        return self.header["num_workers"]

    def tile(self, i: int) -> dict:
        return dict(zip((f for f, _ in TILE.fields), (int(v) for v in self.tiles[i])))

    def tile_name(self, i: int) -> str:
        return describe_tile(self.tile(i), self.header)

    def worker_list(self, w: int) -> np.ndarray:
        return self.worker_tiles[self.worker_offsets[w]:self.worker_offsets[w + 1]]

    def header_words(self) -> list[int]:
        return [int(self.header[f]) for f, _ in HEADER.fields]

    def to_blob(self) -> np.ndarray:
        return np.concatenate([
            np.asarray(self.header_words(), dtype=np.int32),
            self.buffers.reshape(-1), self.tiles.reshape(-1), self.waits.reshape(-1),
            self.worker_offsets, self.worker_tiles, self.weight_shapes.reshape(-1),
        ]).astype(np.int32)

    @classmethod
    def from_blob(cls, blob: np.ndarray, shape: ModelShape, gpu: GpuTarget, policy: str = "tiles") -> "Plan":
        blob = np.asarray(blob, dtype=np.int32)
        if blob.size < HEADER.words:
            raise ValueError(f"plan blob has {blob.size} words, fewer than the {HEADER.words}-word header")
        h = dict(zip((f for f, _ in HEADER.fields), (int(v) for v in blob[:HEADER.words])))
        if h["magic"] != fmt.MAGIC:
            raise ValueError(f"not a plan blob (magic 0x{h['magic'] & 0xffffffff:08x})")
        if h["total_words"] != blob.size:
            raise ValueError(f"plan blob has {blob.size} words, header says {h['total_words']}")

        def section(off, n, width=1):
            if off < 0 or off + n * width > blob.size:
                raise ValueError("plan blob section out of bounds")
            return blob[off:off + n * width].reshape(n, width) if width > 1 else blob[off:off + n].copy()

        return cls(
            shape=shape, gpu=gpu, header=h,
            buffers=section(h["buffers_offset"], h["num_buffers"], BUFFER.words).copy(),
            tiles=section(h["tiles_offset"], h["num_tiles"], TILE.words).copy(),
            waits=section(h["waits_offset"], h["num_waits"], WAIT.words).copy(),
            worker_offsets=section(h["worker_offsets_offset"], h["num_workers"] + 1),
            worker_tiles=section(h["worker_tiles_offset"], h["num_tiles"]),
            weight_shapes=section(h["weight_shapes_offset"], h["num_weights"], 2).copy(),
            policy=policy,
        )


def slot_name(weight: int, num_layers: int) -> str:
    """Weight index -> slot name ("q", "lm_head", ...); "w<i>" when out of range."""
    per = len(fmt.LAYER_SLOTS)
    if 0 <= weight < num_layers * per:
        return fmt.LAYER_SLOTS[weight % per]
    if 0 <= weight - num_layers * per < len(fmt.FINAL_SLOTS):
        return fmt.FINAL_SLOTS[weight - num_layers * per]
    return f"w{weight}"


def describe_tile(t: dict, header: dict | None = None) -> str:
    """A tile's name from its fields (and the plan header, for slot names and KV groups). Plans name their
    tiles only this way, so a tile has the same name at build time, at load time and in kernel errors."""
    try:
        op = Op(t["op"]).name.lower()
    except ValueError:
        return f"op{t['op']}"
    where = f"L{t['layer']}." if t["layer"] >= 0 else ""
    rows = f"rows {t['row_begin']}:{t['row_end']}"
    if t["op"] == Op.ATTN:
        return f"{where}{op}[h{t['aux0']} p{t['aux1']}]"
    if t["op"] == Op.MERGE:
        return f"{where}{op}[h{t['aux0']}]"
    if t["op"] in (Op.GATEUP, Op.LMHEAD):
        return f"{where}{op} {rows}"
    if t["op"] in (Op.QKV, Op.RESID):
        if header is None:
            return f"{where}{op}[w{t['weight']}] {rows}"
        slot = slot_name(t["weight"], header["num_layers"])
        hd = max(header["head_dim"], 1)
        per_group = hd * max(header["num_heads"] // max(header["num_kv_heads"], 1), 1) if slot == "q" else hd
        group = f"[g{t['row_begin'] // per_group}]" if slot in ("q", "k", "v") else ""
        return f"{where}{slot}{group} {rows}"
    return f"{where}{op}"


def expected_weight_shapes(shape: ModelShape) -> np.ndarray:
    s = shape
    hd = s.head_dim
    per_layer = {
        "input_norm": (s.hidden, 0), "q": (s.num_heads * hd, s.hidden), "k": (s.num_kv_heads * hd, s.hidden),
        "v": (s.num_kv_heads * hd, s.hidden), "o": (s.hidden, s.num_heads * hd), "post_norm": (s.hidden, 0),
        "gate": (s.intermediate, s.hidden), "up": (s.intermediate, s.hidden), "down": (s.hidden, s.intermediate),
    }
    rows = []
    for _ in range(s.num_layers):
        rows += [per_layer[n] for n in fmt.LAYER_SLOTS]
    rows += [(s.hidden, 0), (s.vocab, s.hidden), (s.vocab, s.hidden)]
    return np.asarray(rows, dtype=np.int32)


def mark_merge_next(tiles: np.ndarray, lists) -> None:
    """out_offset = 1 on every partition-0 ATTN tile followed on its worker by the MERGE of its (layer, KV head),
    and aux1 = 1 + the ATTN tile's counter on that MERGE (format.py: the MERGE may release it in the ATTN's place)."""
    c = {f: TILE.index(f) for f in ("op", "layer", "aux0", "aux1", "out_offset", "signal")}
    for lst in lists:
        for a, b in zip(lst, lst[1:]):
            ta, tb = tiles[a], tiles[b]
            if (ta[c["op"]] == Op.ATTN and ta[c["aux1"]] == 0 and tb[c["op"]] == Op.MERGE
                    and ta[c["layer"]] == tb[c["layer"]] and ta[c["aux0"]] == tb[c["aux0"]]):
                ta[c["out_offset"]] = 1
                tb[c["aux1"]] = ta[c["signal"]] + 1


# The default planner's revision: bumped whenever build_plan's defaults give another plan for some config, so that
# plan caches (planfile.cache_path) re-plan instead of running an older plan, valid but slower, forever.
# 2: small matvec tiles floored at 16 rows (perf log v50). 3: every ATTN tile off the qkv workers, with as many
# partitions as they hold, where they hold the default's (v51). 4: gate/up pieces off the layer's o workers where
# the others hold them all (v52). tests/test_planner_graph.py holds each plan's hash.
PLAN_REVISION = 4


def build_plan(config, workers: int, policy: str = "tiles", gpu: GpuTarget | None = None,
               attn_partitions: int | None = None, attn_granule: int = 32, context_hint: int = 512,
               attn_single: int | None = None, o_off_merge: bool = True, attn0_off_qkv: bool = True,
               merge_next: bool = True, validate: bool = True, o_rows: int = 0, min_rows: int = MIN_ROWS,
               attn_off_qkv: bool | None = None, gateup_off_o: bool = True) -> Plan:
    """Tile graph + schedule + blob for a Llama-family config (a ModelShape, a transformers config or a dict).
    merge_next: mark each partition-0 ATTN tile whose MERGE runs right after it on the same worker (out_offset 1;
    format.py), so that at short context the kernel skips the partials nobody reads (perf log v44).
    attn_off_qkv: None places the attention's partitions by graph.build_graph's rule (v51); True / False force it.
    gateup_off_o: the gate/up pieces avoid the layer's o workers where the others hold them all (v52: SmolLM2, whose
    gate/up tiles behind an o tile started late; Llama-1B's stages fill every worker and its plan is unchanged)."""
    shape = config if isinstance(config, ModelShape) else ModelShape.from_config(config)
    gpu = gpu or GpuTarget()
    g = build_graph(shape, workers, policy, attn_partitions, attn_granule, context_hint, attn_single, o_off_merge,
                    attn0_off_qkv, o_rows, min_rows, attn_off_qkv, gateup_off_o)
    lists = assign(g)

    buffers = np.zeros((len(g.buffers), BUFFER.words), dtype=np.int32)
    off = 0
    for i, b in enumerate(g.buffers):
        buffers[i] = (off, b.numel, int(b.dtype))
        off += -(-b.numel * fmt.DTYPE_BYTES[b.dtype] // ALIGN) * ALIGN
    scratch_bytes = off

    tiles = np.zeros((len(g.tiles), TILE.words), dtype=np.int32)
    waits = []
    for i, t in enumerate(g.tiles):
        f = dict(t.fields)
        f["wait_begin"], f["wait_count"] = len(waits), len(t.waits)
        waits.extend(t.waits)
        tiles[i] = [f[name] for name, _ in TILE.fields]
    waits = np.asarray(waits, dtype=np.int32).reshape(-1, WAIT.words)

    worker_offsets = np.zeros(workers + 1, dtype=np.int32)
    for w, lst in enumerate(lists):
        worker_offsets[w + 1] = worker_offsets[w] + len(lst)
    worker_tiles = np.asarray([i for lst in lists for i in lst], dtype=np.int32)
    if merge_next:
        mark_merge_next(tiles, lists)
    weight_shapes = expected_weight_shapes(shape)

    header = {f: 0 for f, _ in HEADER.fields}
    header.update(
        magic=fmt.MAGIC, format_version=fmt.FORMAT_VERSION, abi_version=fmt.ABI_VERSION, header_words=HEADER.words,
        num_workers=workers, num_tiles=len(tiles), num_waits=len(waits), num_buffers=len(buffers),
        num_counters=len(g.counters), num_weights=len(weight_shapes), num_layers=shape.num_layers,
        hidden=shape.hidden, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        intermediate=shape.intermediate, vocab=shape.vocab, attn_partitions=g.attn_partitions,
        attn_granule=g.attn_granule, attn_single=g.attn_single, lm_tiles=g.lm_tiles, argmax_counter=g.argmax_counter,
        scratch_bytes=scratch_bytes, state_words=fmt.STATE_HEADER_WORDS + len(g.counters) * fmt.COUNTER_STRIDE_WORDS,
        counter_stride=fmt.COUNTER_STRIDE_WORDS, eps_bits=fmt.float_bits(shape.eps),
        sm_count=gpu.sm_count, cc_major=gpu.cc_major, cc_minor=gpu.cc_minor,
        config_hash=int(shape.config_hash()[:8], 16) & 0x7FFFFFFF,
    )
    o = HEADER.words
    for name, n in (("buffers_offset", buffers.size), ("tiles_offset", tiles.size), ("waits_offset", waits.size),
                    ("worker_offsets_offset", worker_offsets.size), ("worker_tiles_offset", worker_tiles.size),
                    ("weight_shapes_offset", weight_shapes.size)):
        header[name] = o
        o += n
    header["total_words"] = o
    plan = Plan(shape, gpu, header, buffers, tiles, waits, worker_offsets, worker_tiles, weight_shapes,
                policy=policy)
    if validate:
        from .validate import validate_plan  # late import: validate.py imports this module
        validate_plan(plan)
    return plan
