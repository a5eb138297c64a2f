"""Plan: a scheduled tile graph and its int32 blob (layout in format.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import BUFFER, HEADER, OP_NAMES, TILE, WAIT, WEIGHT, Op
from tiles_ext.families import shape_of
from tiles_ext.planner.graph import MIN_ROWS, CutRules, build_graph
from tiles_ext.planner.schedule import assign
from tiles_ext.planner.shape import ModelShape
from tiles_ext.planner.validate import validate_plan
from tiles_ext.planner.weights import WeightLayout, layer_slot_mask

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
    weights: np.ndarray        # [num_weights, WEIGHT.words]: (slot, layer, rows, cols)
    policy: str = "tiles"

    @property
    def num_workers(self) -> int:
        return self.header["num_workers"]

    def tile(self, i: int) -> dict:
        return dict(zip((f for f, _ in TILE.fields), (int(v) for v in self.tiles[i])))

    def tile_name(self, i: int) -> str:
        return describe_tile(self.tile(i), self.header, self.weights)

    def worker_list(self, w: int) -> np.ndarray:
        return self.worker_tiles[self.worker_offsets[w]:self.worker_offsets[w + 1]]

    def header_words(self) -> list[int]:
        return [int(self.header[f]) for f, _ in HEADER.fields]

    def to_blob(self) -> np.ndarray:
        return np.concatenate([
            np.asarray(self.header_words(), dtype=np.int32),
            self.buffers.reshape(-1), self.tiles.reshape(-1), self.waits.reshape(-1),
            self.worker_offsets, self.worker_tiles, self.weights.reshape(-1),
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
            weights=section(h["weights_offset"], h["num_weights"], WEIGHT.words).copy(),
            policy=policy,
        )


def describe_tile(t: dict, header: dict, weights=None) -> str:
    """A tile's name from its fields, the plan header and weight table. Plans name their tiles only this way (the
    C++ op's error messages through csrc/plan_names.cpp, the same rule), so a tile has the same name at build
    time, at load time and in kernel errors."""
    if t["op"] not in OP_NAMES.keys():
        return f"op{t['op']}"
    op = OP_NAMES[Op(t["op"])]
    where = f"L{t['layer']}." if t["layer"] >= 0 else ""
    rows = f"rows {t['row_begin']}:{t['row_end']}"
    if t["op"] == Op.ATTN:
        return f"{where}{op}[h{t['aux0']} p{t['aux1']}]"
    if t["op"] == Op.MERGE:
        return f"{where}{op}[h{t['aux0']}]"
    if t["op"] in (Op.GATEUP, Op.LMHEAD):
        return f"{where}{op} {rows}"
    if t["op"] in (Op.QKV, Op.RESID):
        w = t["weight"]
        if weights is None or not 0 <= w < len(weights) or not 0 <= int(weights[w][0]) < len(fmt.SLOTS):
            return f"{where}{op}[w{w}] {rows}"
        slot = fmt.SLOTS[int(weights[w][0])]
        hd = max(header["head_dim"], 1)
        per_group = hd * max(header["num_heads"] // max(header["num_kv_heads"], 1), 1) if slot == "q" else hd
        group = f"[g{t['row_begin'] // per_group}]" if slot in ("q", "k", "v") else ""
        return f"{where}{slot}{group} {rows}"
    return f"{where}{op}"


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
# tests/test_planner_graph.py holds each shipped config's plan hash.
PLAN_REVISION = 6  # 6: every plan's arena holds MAX_ROWS rows (verify passes)
DEFAULT_RULES = CutRules(o_off_merge=True, attn0_off_qkv=True, min_rows=MIN_ROWS, attn_off_qkv=None,
                         gateup_off_o=True)


def build_plan(config, workers: int, policy: str = "tiles", gpu: GpuTarget | None = None,
               attn_partitions: int | None = None, attn_granule: int = 32, context_hint: int = 512,
               attn_single: int | None = None, o_off_merge: bool = True, attn0_off_qkv: bool = True,
               merge_next: bool = True, validate: bool = True, min_rows: int = MIN_ROWS,
               attn_off_qkv: bool | None = None, gateup_off_o: bool = True, max_rows: int = fmt.MAX_ROWS) -> Plan:
    """Tile graph + schedule + blob for a model (a ModelShape, or a transformers config / config.json dict that a
    family in tiles_ext.families reads). The cut options are graph.CutRules' (the defaults are DEFAULT_RULES).
    merge_next: mark each partition-0 ATTN tile whose MERGE runs right after it on the same worker (out_offset 1;
    format.py), so that at short context the kernel skips the partials nobody reads.
    max_rows: the most rows one pass decodes (format.py "Rows"): the arena holds that many rows of every buffer."""
    if not 1 <= max_rows <= fmt.MAX_ROWS:
        raise ValueError(f"max_rows {max_rows} outside 1..{fmt.MAX_ROWS}")
    shape = config if isinstance(config, ModelShape) else shape_of(config)
    gpu = gpu or GpuTarget()
    rules = CutRules(o_off_merge=o_off_merge, attn0_off_qkv=attn0_off_qkv, min_rows=min_rows,
                     attn_off_qkv=attn_off_qkv, gateup_off_o=gateup_off_o)
    g = build_graph(shape, workers, policy, attn_partitions, attn_granule, context_hint, attn_single, rules)
    lists = assign(g)
    buffers, row_bytes = _encode_buffers(g)
    tiles, waits = _encode_tiles(g)
    worker_offsets = np.zeros(workers + 1, dtype=np.int32)
    for w, lst in enumerate(lists):
        worker_offsets[w + 1] = worker_offsets[w] + len(lst)
    worker_tiles = np.asarray([i for lst in lists for i in lst], dtype=np.int32)
    if merge_next:
        mark_merge_next(tiles, lists)
    weights = WeightLayout(shape).table()
    sections = {"buffers": buffers, "tiles": tiles, "waits": waits, "worker_offsets": worker_offsets,
                "worker_tiles": worker_tiles, "weights": weights}
    header = _header(shape, gpu, g, sections, row_bytes, max_rows)
    plan = Plan(shape, gpu, header, buffers, tiles, waits, worker_offsets, worker_tiles, weights, policy=policy)
    if validate:
        validate_plan(plan)
    return plan


def _encode_buffers(g) -> tuple[np.ndarray, int]:
    """The buffer table (offsets ALIGN-aligned, in graph order) and the bytes of one row of the arena."""
    buffers = np.zeros((len(g.buffers), BUFFER.words), dtype=np.int32)
    off = 0
    for i, b in enumerate(g.buffers):
        buffers[i] = (off, b.numel, int(b.dtype))
        off += -(-b.numel * fmt.DTYPE_BYTES[b.dtype] // ALIGN) * ALIGN
    return buffers, off


def _encode_tiles(g) -> tuple[np.ndarray, np.ndarray]:
    tiles = np.zeros((len(g.tiles), TILE.words), dtype=np.int32)
    waits = []
    for i, t in enumerate(g.tiles):
        f = dict(t.fields)
        f["wait_begin"], f["wait_count"] = len(waits), len(t.waits)
        waits.extend(t.waits)
        tiles[i] = [f[name] for name, _ in TILE.fields]
    return tiles, np.asarray(waits, dtype=np.int32).reshape(-1, WAIT.words)


def _header(shape: ModelShape, gpu: GpuTarget, g, sections: dict, row_bytes: int, max_rows: int) -> dict:
    """The header: the shape's dimensions, the graph's counts, the GPU binding and the sections' offsets (they lie
    end to end after the header, in the order of `sections`). The arena holds max_rows rows of row_bytes each, row 0
    first, so that a one-row pass touches exactly the bytes a one-row plan's arena has."""
    header = {f: 0 for f, _ in HEADER.fields}
    header.update(
        magic=fmt.MAGIC, format_version=fmt.FORMAT_VERSION, abi_version=fmt.ABI_VERSION, header_words=HEADER.words,
        num_workers=g.workers, num_tiles=len(sections["tiles"]), num_waits=len(sections["waits"]),
        num_buffers=len(sections["buffers"]), num_counters=len(g.counters), num_weights=len(sections["weights"]),
        num_layers=shape.num_layers, hidden=shape.hidden, num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim, intermediate=shape.intermediate, vocab=shape.vocab,
        attn_partitions=g.attn_partitions, attn_granule=g.attn_granule, attn_single=g.attn_single,
        lm_tiles=g.lm_tiles, argmax_counter=g.argmax_counter, scratch_bytes=max_rows * row_bytes,
        state_words=fmt.STATE_HEADER_WORDS + len(g.counters) * fmt.COUNTER_STRIDE_WORDS,
        counter_stride=fmt.COUNTER_STRIDE_WORDS, eps_bits=fmt.float_bits(shape.eps),
        sm_count=gpu.sm_count, cc_major=gpu.cc_major, cc_minor=gpu.cc_minor,
        config_hash=int(shape.config_hash()[:8], 16) & 0x7FFFFFFF, layer_slots=layer_slot_mask(shape),
        weight_dtype=int(fmt.WEIGHT_FORMATS[shape.weight_format][0]), scale_layout=int(shape.scale_layout),
        max_rows=max_rows, row_bytes=row_bytes,
    )
    o = HEADER.words
    for name, arr in sections.items():
        header[f"{name}_offset"] = o
        o += arr.size
    header["total_words"] = o
    return header
