"""validate_plan: proves a plan safe to execute, at build time and again at load time.

What a plan must satisfy (format.py gives each op's reads and writes):
  - header: self-consistent, agrees with the plan's ModelShape and with its own sections;
  - buffers: aligned, in bounds of one row of the arena (row_bytes; max_rows rows make scratch_bytes), disjoint;
  - tiles: fields valid for their op (weight slots of the right layer, dtypes, sizes, row ranges);
  - every output element (buffer element, logits row, LM partial slot, KV-cache (layer, head) write) is
    produced by exactly one tile, and every weight matrix's rows are covered exactly once;
  - wiring: every read sees the producer the Llama forward pass calls for (e.g. layer l's attention reads
    layer l's q rows);
  - counters: each wait's count equals the number of tiles that signal that counter per step;
  - happens-before (transitive closure of wait edges and per-worker program order) is acyclic, so
    co-resident workers cannot deadlock, and orders every producer before each of its readers;
  - every tile descends from EMBED and is an ancestor of ARGMAX, and EMBED waits on the previous step's
    ARGMAX: so all of step s happens before any of step s+1, which makes reusing buffers (and counting
    arrivals on monotonic counters) safe across steps.
Ancestor sets are Python-int bitsets over tiles, computed once in topological order.
"""
from __future__ import annotations


import numpy as np

from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import BUFFER, HEADER, TILE, WAIT, WEIGHT, DType, Op
from tiles_ext.planner.order import step_order
from tiles_ext.planner.weights import WeightLayout, layer_slot_mask


class PlanError(ValueError):
    """A plan that is inconsistent or unsafe; the message names the tile, buffer or header field."""


_COL = {name: i for i, (name, _) in enumerate(TILE.fields)}
MATRIX_SLOTS = ("q", "k", "v", "o", "gate", "up", "down")
_ROWS = ("row_begin", "row_end", "out_offset")
_UNUSED = {Op.EMBED: _ROWS + ("aux0", "aux1"), Op.QKV: ("aux0", "aux1"), Op.ATTN: ("row_begin", "row_end"),
           Op.MERGE: _ROWS, Op.RESID: ("aux0", "aux1"), Op.GATEUP: ("aux0", "aux1"),
           Op.LMHEAD: ("aux1", "out_offset"), Op.ARGMAX: _ROWS + ("aux1",)}


def _who(plan, i: int, worker_of) -> str:
    w = int(worker_of[i]) if worker_of is not None and 0 <= i < len(worker_of) else -1
    return f"tile {i} ({plan.tile_name(i)}{f', worker {w}' if w >= 0 else ''})"


def validate_plan(plan) -> None:
    """Raises PlanError naming the first problem found; returns None for a valid plan."""
    _check_header(plan)
    _check_buffers(plan)
    worker_of = _check_workers(plan)
    _Checker(plan, worker_of).run()


def _check_header(plan) -> None:
    h = plan.header
    s = plan.shape
    missing = [f for f, _ in HEADER.fields if f not in h]
    if missing:
        raise PlanError(f"plan header lacks fields {missing}")

    def need(field, want, why=""):
        if h[field] != want:
            raise PlanError(f"plan header {field} = {h[field]}, expected {want}{why}")

    need("magic", fmt.MAGIC)
    need("format_version", fmt.FORMAT_VERSION, " (plan made for another plan format)")
    need("abi_version", fmt.ABI_VERSION, " (plan made for another executor ABI)")
    need("header_words", HEADER.words)
    for field, want in (("num_layers", s.num_layers), ("hidden", s.hidden), ("num_heads", s.num_heads),
                        ("num_kv_heads", s.num_kv_heads), ("head_dim", s.head_dim),
                        ("intermediate", s.intermediate), ("vocab", s.vocab)):
        need(field, want, " (from the plan's model shape)")
    need("eps_bits", fmt.float_bits(s.eps), " (RMSNorm eps of the model shape)")
    need("config_hash", int(s.config_hash()[:8], 16) & 0x7FFFFFFF, " (hash of the model shape)")
    need("layer_slots", layer_slot_mask(s), " (the per-layer slots of the model shape)")
    need("num_weights", len(WeightLayout(s)))
    need("weight_dtype", int(fmt.WEIGHT_FORMATS[s.weight_format][0]), f" (weight format {s.weight_format!r})")
    need("scale_layout", int(s.scale_layout), f" (weight format {s.weight_format!r})")
    need("counter_stride", fmt.COUNTER_STRIDE_WORDS)
    need("state_words", fmt.STATE_HEADER_WORDS + h["num_counters"] * fmt.COUNTER_STRIDE_WORDS)
    for field in ("num_workers", "num_tiles", "num_counters", "attn_partitions", "attn_granule", "lm_tiles"):
        if h[field] < 1:
            raise PlanError(f"plan header {field} = {h[field]}, must be >= 1")
    if h["attn_single"] < 0:
        raise PlanError(f"plan header attn_single = {h['attn_single']}, must be >= 0")
    if h["num_counters"] > h["num_tiles"]:
        raise PlanError(f"plan header num_counters {h['num_counters']} exceeds num_tiles {h['num_tiles']}: every "
                        "counter needs a tile that signals it")
    if h["num_waits"] < 0 or h["num_buffers"] < 1:
        raise PlanError(f"plan header num_waits = {h['num_waits']}, num_buffers = {h['num_buffers']}")
    if not 0 <= h["argmax_counter"] < h["num_counters"]:
        raise PlanError(f"plan header argmax_counter {h['argmax_counter']} outside 0..{h['num_counters'] - 1}")
    gpu = plan.gpu
    for field, want in (("sm_count", gpu.sm_count), ("cc_major", gpu.cc_major), ("cc_minor", gpu.cc_minor)):
        need(field, want, f" (the plan's GPU target {gpu.name!r})")
    if h["sm_count"] and h["num_workers"] > h["sm_count"]:
        raise PlanError(f"plan has {h['num_workers']} workers but its GPU has {h['sm_count']} SMs: workers "
                        "must all be resident at once (one per SM) or waits could deadlock")
    # Sections: sizes match the header counts and lie end to end after the header.
    sections = (("buffers_offset", plan.buffers, (h["num_buffers"], BUFFER.words)),
                ("tiles_offset", plan.tiles, (h["num_tiles"], TILE.words)),
                ("waits_offset", plan.waits, (h["num_waits"], WAIT.words)),
                ("worker_offsets_offset", plan.worker_offsets, (h["num_workers"] + 1,)),
                ("worker_tiles_offset", plan.worker_tiles, (h["num_tiles"],)),
                ("weights_offset", plan.weights, (h["num_weights"], WEIGHT.words)))
    off = HEADER.words
    for field, arr, want_shape in sections:
        arr = np.asarray(arr)
        if tuple(arr.shape) != want_shape and not (arr.size == 0 and int(np.prod(want_shape)) == 0):
            raise PlanError(f"plan section at {field} has shape {tuple(arr.shape)}, header says {want_shape}")
        need(field, off, " (sections lie end to end)")
        off += int(np.prod(want_shape))
    need("total_words", off)
    want = WeightLayout(s).table()
    got = np.asarray(plan.weights)
    if not np.array_equal(got, want):
        bad = int(np.argwhere((got != want).any(axis=1))[0][0])
        raise PlanError(f"weight table entry {bad} (slot, layer, rows, cols) = {got[bad].tolist()}, expected "
                        f"{want[bad].tolist()} for the model shape")


def _check_buffers(plan) -> None:
    b = np.asarray(plan.buffers, dtype=np.int64)
    h = plan.header
    if not 1 <= h["max_rows"] <= fmt.MAX_ROWS or h["scratch_bytes"] != h["max_rows"] * h["row_bytes"]:
        raise PlanError(f"header max_rows {h['max_rows']} (1..{fmt.MAX_ROWS}) and row_bytes {h['row_bytes']} do not "
                        f"give scratch_bytes {h['scratch_bytes']} (max_rows x row_bytes)")
    scratch = h["row_bytes"]  # every buffer lies within one row; the rows repeat the layout
    ends = []
    for i, (off, numel, dtype) in enumerate(b.tolist()):
        if dtype not in {int(d) for d in DType}:
            raise PlanError(f"buffer {i}: dtype {dtype} is not a DType")
        if numel < 1 or off < 0 or off % 256:
            raise PlanError(f"buffer {i}: offset {off} / numel {numel} invalid (offsets are 256-byte aligned, "
                            "numel >= 1)")
        end = off + numel * fmt.DTYPE_BYTES[DType(dtype)]
        if end > scratch:
            raise PlanError(f"buffer {i}: bytes [{off}, {end}) exceed row_bytes {scratch}")
        ends.append((off, end, i))
    ends.sort()
    for (o0, e0, i0), (o1, e1, i1) in zip(ends, ends[1:]):
        if o1 < e0:
            raise PlanError(f"buffers {i0} [{o0}, {e0}) and {i1} [{o1}, {e1}) overlap in scratch")


def _check_workers(plan) -> np.ndarray:
    h = plan.header
    n, W = h["num_tiles"], h["num_workers"]
    off = np.asarray(plan.worker_offsets, dtype=np.int64)
    if off[0] != 0 or off[-1] != n or np.any(np.diff(off) < 0):
        raise PlanError(f"worker_offsets must rise from 0 to num_tiles {n}; got {off[:4].tolist()}..."
                        f"{off[-2:].tolist()}")
    wt = np.asarray(plan.worker_tiles, dtype=np.int64)
    if wt.size and (wt.min() < 0 or wt.max() >= n):
        raise PlanError(f"worker_tiles holds tile {int(wt.min() if wt.min() < 0 else wt.max())} outside "
                        f"0..{n - 1}")
    seen = np.bincount(wt, minlength=n)
    if np.any(seen != 1):
        t = int(np.argmax(seen != 1))
        raise PlanError(f"tile {t} ({plan.tile_name(t)}) appears {int(seen[t])} times in worker lists, "
                        "must be exactly once")
    worker_of = np.empty(n, dtype=np.int64)
    worker_of[wt] = np.repeat(np.arange(W), np.diff(off))
    return worker_of


class _Checker:
    """Per-tile checks, output coverage, wiring and happens-before."""

    def __init__(self, plan, worker_of):
        self.plan = plan
        self.h = plan.header
        self.s = plan.shape
        self.worker_of = worker_of
        self.T = np.asarray(plan.tiles, dtype=np.int64)
        self.cols = {name: self.T[:, i].tolist() for name, i in _COL.items()}
        self.buffers = np.asarray(plan.buffers, dtype=np.int64).tolist()
        self.table = np.asarray(plan.weights, dtype=np.int64).reshape(-1, WEIGHT.words).tolist()
        self.layout = WeightLayout(self.s)
        self.L = self.s.num_layers
        self.P = self.h["attn_partitions"]
        n = self.h["num_tiles"]
        self.writes = []               # (tile, buf, lo, hi)
        self.reads = []                # (tile, buf, lo, hi, expected producer kind)
        self.kind = [None] * n         # producer kind, e.g. "L3.q", "embed"
        self.rows = {}                 # weight -> list of (row_begin, row_end, tile)
        self.logits = []               # (row_begin, row_end, tile)
        self.attn_seen = {}
        self.embeds, self.argmaxes = [], []
        # The producer of the residual entering layer l (l = L: the final norm's input).
        self.x_kind = ["embed"] + [f"L{l}.down" for l in range(self.L)]

    def who(self, i):
        return _who(self.plan, i, self.worker_of)

    def fail(self, i, msg):
        raise PlanError(f"{self.who(i)}: {msg}")

    # --- weights ---------------------------------------------------------------------------------
    def slot(self, w):
        """(layer, slot name) of weight entry w; (None, None) out of range."""
        if not 0 <= w < len(self.table):
            return None, None
        return self.table[w][1], fmt.SLOTS[self.table[w][0]]

    def shape_of(self, w):
        return self.table[w][2], self.table[w][3]

    def need_weight(self, i, field, allowed, layer):
        w = self.cols[field][i]
        wl, name = self.slot(w)
        if name not in allowed or wl != layer:
            want = " or ".join(allowed) + (f" of layer {layer}" if layer >= 0 else "")
            got = "none" if w == -1 else f"{w} ({name} of layer {wl})" if name else f"{w} (out of range)"
            self.fail(i, f"{field} must be {want}; got {got}")
        return name

    def need_feature(self, i, field, slot, layer, present):
        """`field` names `slot` of `layer` where the shape has the feature, else -1."""
        if present:
            self.need_weight(i, field, (slot,), layer)
        else:
            self.need_none(i, field)

    def need_none(self, i, *fields):
        for f in fields:
            if self.cols[f][i] != -1:
                self.fail(i, f"{f} must be -1 for this op, got {self.cols[f][i]}")

    # --- buffers ---------------------------------------------------------------------------------
    def need_buf(self, i, field, dtype, numel=None, min_numel=None):
        b = self.cols[field][i]
        if not 0 <= b < len(self.buffers):
            self.fail(i, f"{field} {b} is not a buffer (0..{len(self.buffers) - 1})")
        _, n, dt = self.buffers[b]
        if dt != int(dtype):
            self.fail(i, f"{field} buffer {b} has dtype {DType(dt).name}, op needs {DType(dtype).name}")
        if numel is not None and n != numel:
            self.fail(i, f"{field} buffer {b} has {n} elements, op needs exactly {numel}")
        if min_numel is not None and n < min_numel:
            self.fail(i, f"{field} buffer {b} has {n} elements, op needs at least {min_numel}")
        return b

    # --- rows ------------------------------------------------------------------------------------
    def rowrange(self, i, w):
        c = self.cols
        r0, r1 = c["row_begin"][i], c["row_end"][i]
        if not 0 <= r0 < r1 <= self.shape_of(w)[0]:
            self.fail(i, f"rows {r0}:{r1} outside weight {w}'s {self.shape_of(w)[0]} rows")
        self.rows.setdefault(w, []).append((r0, r1, i))
        return r0, r1

    def rows_out(self, i, w):
        r0, r1 = self.rowrange(i, w)
        if self.cols["out_offset"][i] != r0:
            self.fail(i, f"out_offset {self.cols['out_offset'][i]} != row_begin {r0}: element index must equal the "
                         "weight row (readers address q/k/v/residual/activation elements by row)")
        return r0, r1

    def need_bytes(self, i, want):
        if self.cols["weight_bytes"][i] != want:
            self.fail(i, f"weight_bytes {self.cols['weight_bytes'][i]}, the tile streams {want} weight bytes "
                         "(executors may size prefetches by it)")

    # --- the run ---------------------------------------------------------------------------------
    def run(self):
        for i in range(self.h["num_tiles"]):
            self.check_common(i)
            self.OP_CHECKS[self.cols["op"][i]](self, i, self.cols["layer"][i])
        self.check_singletons()
        self.check_coverage()
        owner = self.check_writes()
        self.check_counters()
        anc = self.happens_before()
        self.check_reads(owner, anc)
        self.check_steps(anc)
        for i in range(self.h["num_tiles"]):
            if self.cols["op"][i] in (Op.ATTN, Op.MERGE):
                self.check_merge_next(i)

    def check_common(self, i):
        """Wait records, signal, weight_bytes, the op's unused fields and its layer."""
        h, c = self.h, self.cols
        op, layer = c["op"][i], c["layer"][i]
        wb, wc, nw = c["wait_begin"][i], c["wait_count"][i], h["num_waits"]
        if not (0 <= wb and 0 <= wc and wb + wc <= nw):
            self.fail(i, f"wait records [{wb}, {wb + wc}) outside 0..{nw}")
        if not 0 <= c["signal"][i] < h["num_counters"]:
            self.fail(i, f"signal counter {c['signal'][i]} outside 0..{h['num_counters'] - 1}")
        if c["weight_bytes"][i] < 0:
            self.fail(i, f"weight_bytes {c['weight_bytes'][i]} < 0")
        if op not in tuple(Op):
            self.fail(i, f"op {op} is not an Op")
        # Fields an op does not use must hold the builder's neutral values, so no executor can read meaning into
        # them (and a corrupted one is caught).
        for f in _UNUSED.get(op, ()):
            want = 1 if (op == Op.EMBED and f == "row_end") else 0
            if c[f][i] != want:
                self.fail(i, f"{f} = {c[f][i]}, must be {want} for {Op(op).name}")
        if op in (Op.EMBED, Op.LMHEAD, Op.ARGMAX):
            if layer != -1:
                self.fail(i, f"layer must be -1 for {Op(op).name}, got {layer}")
        elif not 0 <= layer < self.L:
            self.fail(i, f"layer {layer} outside 0..{self.L - 1}")

    def check_embed(self, i, layer):
        H = self.s.hidden
        self.need_weight(i, "weight", ("embed",), -1)
        self.need_none(i, "weight2", "norm", "in_buf", "in2_buf", "in3_buf")
        self.writes.append((i, self.need_buf(i, "out_buf", DType.F32, numel=H), 0, H))
        self.need_bytes(i, H * 2)
        self.kind[i] = "embed"
        self.embeds.append(i)

    def check_qkv(self, i, layer):
        s, c = self.s, self.cols
        H = s.hidden
        name = self.need_weight(i, "weight", ("q", "k", "v"), layer)
        self.need_weight(i, "norm", ("input_norm",), layer)
        self.need_feature(i, "weight2", f"{name}_bias", layer, s.qkv_bias)
        self.need_none(i, "in2_buf", "in3_buf")
        self.reads.append((i, self.need_buf(i, "in_buf", DType.F32, numel=H), 0, H, self.x_kind[layer]))
        b = self.need_buf(i, "out_buf", DType.BF16, numel=s.q_dim if name == "q" else s.kv_dim)
        r0, r1 = self.rows_out(i, c["weight"][i])
        self.writes.append((i, b, r0, r1))
        self.need_bytes(i, fmt.matrix_bytes(self.s.scale_layout, r0, r1, H))
        self.kind[i] = f"L{layer}.{name}"

    def check_attn(self, i, layer):
        s, c, P = self.s, self.cols, self.P
        G, hd = s.group, s.head_dim
        self.need_none(i, "weight")
        self.need_feature(i, "norm", "q_norm", layer, s.qk_norm)
        self.need_feature(i, "weight2", "k_norm", layer, s.qk_norm)
        kvh, p = c["aux0"][i], c["aux1"][i]
        if not (0 <= kvh < s.num_kv_heads and 0 <= p < P):
            self.fail(i, f"kv head {kvh} / partition {p} outside {s.num_kv_heads} heads x {P} partitions")
        key = (layer, kvh, p)
        if key in self.attn_seen:
            self.fail(i, f"same (layer, kv head, partition) as {self.who(self.attn_seen[key])}: the KV cache row "
                         "would be written twice")
        self.attn_seen[key] = i
        self.reads.append((i, self.need_buf(i, "in_buf", DType.BF16, numel=s.q_dim), kvh * G * hd,
                           (kvh + 1) * G * hd, f"L{layer}.q"))
        self.reads.append((i, self.need_buf(i, "in2_buf", DType.BF16, numel=s.kv_dim), kvh * hd, (kvh + 1) * hd,
                           f"L{layer}.k"))
        self.reads.append((i, self.need_buf(i, "in3_buf", DType.BF16, numel=s.kv_dim), kvh * hd, (kvh + 1) * hd,
                           f"L{layer}.v"))
        part = hd + 2
        b = self.need_buf(i, "out_buf", DType.F32, numel=s.num_kv_heads * P * G * part)
        lo = (kvh * P + p) * G * part
        self.writes.append((i, b, lo, lo + G * part))
        self.kind[i] = f"L{layer}.attn"

    def check_merge(self, i, layer):
        s, P = self.s, self.P
        G, hd = s.group, s.head_dim
        part = hd + 2
        self.need_none(i, "weight", "weight2", "norm", "in2_buf", "in3_buf")
        kvh = self.cols["aux0"][i]
        if not 0 <= kvh < s.num_kv_heads:
            self.fail(i, f"kv head {kvh} outside 0..{s.num_kv_heads - 1}")
        b = self.need_buf(i, "in_buf", DType.F32, numel=s.num_kv_heads * P * G * part)
        self.reads.append((i, b, kvh * P * G * part, (kvh + 1) * P * G * part, f"L{layer}.attn"))
        b = self.need_buf(i, "out_buf", DType.BF16, numel=s.q_dim)
        self.writes.append((i, b, kvh * G * hd, (kvh + 1) * G * hd))
        self.kind[i] = f"L{layer}.merge"

    def check_resid(self, i, layer):
        H = self.s.hidden
        name = self.need_weight(i, "weight", ("o", "down"), layer)
        self.need_none(i, "weight2", "norm", "in3_buf")
        w = self.cols["weight"][i]
        cols = self.shape_of(w)[1]
        src = f"L{layer}.merge" if name == "o" else f"L{layer}.gateup"
        self.reads.append((i, self.need_buf(i, "in_buf", DType.BF16, numel=cols), 0, cols, src))
        r0, r1 = self.rows_out(i, w)
        res = self.x_kind[layer] if name == "o" else f"L{layer}.o"
        self.reads.append((i, self.need_buf(i, "in2_buf", DType.F32, numel=H), r0, r1, res))
        self.writes.append((i, self.need_buf(i, "out_buf", DType.F32, numel=H), r0, r1))
        self.need_bytes(i, fmt.matrix_bytes(self.s.scale_layout, r0, r1, cols))
        self.kind[i] = f"L{layer}.{name}"

    def check_gateup(self, i, layer):
        s, c = self.s, self.cols
        H = s.hidden
        self.need_weight(i, "weight", ("gate",), layer)
        self.need_weight(i, "weight2", ("up",), layer)
        self.need_weight(i, "norm", ("post_norm",), layer)
        self.need_none(i, "in2_buf", "in3_buf")
        self.reads.append((i, self.need_buf(i, "in_buf", DType.F32, numel=H), 0, H, f"L{layer}.o"))
        r0, r1 = self.rows_out(i, c["weight"][i])
        self.rows.setdefault(c["weight2"][i], []).append((r0, r1, i))
        self.writes.append((i, self.need_buf(i, "out_buf", DType.BF16, numel=s.intermediate), r0, r1))
        self.need_bytes(i, 2 * fmt.matrix_bytes(self.s.scale_layout, r0, r1, H))
        self.kind[i] = f"L{layer}.gateup"

    def check_lmhead(self, i, layer):
        h, H = self.h, self.s.hidden
        self.need_weight(i, "weight", ("lm_head",), -1)
        self.need_weight(i, "norm", ("final_norm",), -1)
        self.need_none(i, "weight2", "in2_buf", "in3_buf")
        self.reads.append((i, self.need_buf(i, "in_buf", DType.F32, numel=H), 0, H, self.x_kind[self.L]))
        r0, r1 = self.rowrange(i, self.cols["weight"][i])
        self.need_bytes(i, (r1 - r0) * H * 2)
        self.logits.append((r0, r1, i))
        slot = self.cols["aux0"][i]
        if not 0 <= slot < h["lm_tiles"]:
            self.fail(i, f"LM partial slot {slot} outside 0..{h['lm_tiles'] - 1}")
        b = self.need_buf(i, "out_buf", DType.F32, numel=2 * h["lm_tiles"])
        self.writes.append((i, b, 2 * slot, 2 * slot + 2))
        self.kind[i] = "lmhead"

    def check_argmax(self, i, layer):
        h = self.h
        self.need_none(i, "weight", "weight2", "norm", "in2_buf", "in3_buf", "out_buf")
        if self.cols["aux0"][i] != h["lm_tiles"]:
            self.fail(i, f"reduces {self.cols['aux0'][i]} partials, plan has lm_tiles = {h['lm_tiles']}")
        b = self.need_buf(i, "in_buf", DType.F32, numel=2 * h["lm_tiles"])
        self.reads.append((i, b, 0, 2 * h["lm_tiles"], "lmhead"))
        self.kind[i] = "argmax"
        self.argmaxes.append(i)

    OP_CHECKS = {Op.EMBED: check_embed, Op.QKV: check_qkv, Op.ATTN: check_attn, Op.MERGE: check_merge,
                 Op.RESID: check_resid, Op.GATEUP: check_gateup, Op.LMHEAD: check_lmhead, Op.ARGMAX: check_argmax}

    def check_singletons(self):
        """One EMBED and one ARGMAX (signalling the header's counter); an ATTN tile for every partition."""
        h, s, c = self.h, self.s, self.cols
        if len(self.embeds) != 1 or len(self.argmaxes) != 1:
            raise PlanError(f"plan must have exactly one EMBED and one ARGMAX tile; has {len(self.embeds)} and "
                            f"{len(self.argmaxes)}")
        self.embed, self.argmax = self.embeds[0], self.argmaxes[0]
        if c["signal"][self.argmax] != h["argmax_counter"]:
            self.fail(self.argmax, f"signals counter {c['signal'][self.argmax]}, header argmax_counter is "
                                   f"{h['argmax_counter']}")
        missing = sorted(set((l, k, p) for l in range(self.L) for k in range(s.num_kv_heads) for p in range(self.P))
                         - set(self.attn_seen))
        if missing:
            l, k, p = missing[0]
            raise PlanError(f"no ATTN tile for layer {l} kv head {k} partition {p} ({len(missing)} missing): "
                            "its KV-cache rows would never be written or read")

    def check_merge_next(self, i):
        """The MERGE-next marks are promises an executor may act on (skip the partials, move the ATTN tile's counter
        increment to its MERGE): ATTN out_offset 1 <=> its MERGE runs next on its worker, carrying aux1 = 1 + the
        ATTN tile's counter."""
        c = self.cols
        if c["op"][i] == Op.MERGE:
            mark = c["aux1"][i]
            j = self.prev_tile[i]
            if mark != 0 and not (j >= 0 and c["op"][j] == Op.ATTN and c["out_offset"][j] == 1
                                  and mark == c["signal"][j] + 1):
                prev = self.who(j) if j >= 0 else "nothing"
                self.fail(i, f"aux1 = {mark} says it follows its marked ATTN tile and releases that tile's counter "
                             f"{mark - 1}, but {prev} runs before it on its worker")
            return
        flag = c["out_offset"][i]
        if flag == 0:
            return
        if flag != 1 or c["aux1"][i] != 0:
            self.fail(i, f"out_offset = {flag}: an ATTN tile holds 0, or 1 on a partition-0 tile whose MERGE runs "
                         "next on its worker")
        j = self.next_tile.get(i, -1)
        if not (j >= 0 and c["op"][j] == Op.MERGE and c["layer"][j] == c["layer"][i] and c["aux0"][j] == c["aux0"][i]):
            nxt = self.who(j) if j >= 0 else "nothing"
            self.fail(i, f"out_offset = 1 says the MERGE of its KV head runs next on its worker, but {nxt} does: "
                         "an executor would skip partials that a MERGE elsewhere reads")
        if c["aux1"][j] != c["signal"][i] + 1:
            self.fail(j, f"aux1 = {c['aux1'][j]} after a marked ATTN tile, expected 1 + its counter "
                         f"{c['signal'][i]}: the ATTN tile's increment would be lost or land on another counter")

    def check_coverage(self):
        """Each weight matrix's rows (hence each output row) computed exactly once; logits rows likewise."""
        mats = [self.layout.index(l, sl) for l in range(self.L) for sl in MATRIX_SLOTS]
        mats.append(self.layout.index(-1, "lm_head"))
        for w in mats:
            layer, name = self.slot(w)
            self._cover(self.rows.get(w, []), self.shape_of(w)[0],
                        f"weight {w} ({name}{f' of layer {layer}' if layer >= 0 else ''}) rows")
        self._cover(self.logits, self.s.vocab, "logits rows")

    def _cover(self, ranges, total, what):
        ranges = sorted(ranges)
        pos = 0
        for r0, r1, i in ranges:
            if r0 < pos:
                prev = next(j for a, b, j in ranges if a < r1 and r0 < b and j != i)
                self.fail(i, f"{what} {r0}:{r1} also computed by {self.who(prev)}")
            if r0 > pos:
                raise PlanError(f"{what} {pos}:{r0} computed by no tile (of {total})")
            pos = r1
        if pos != total:
            raise PlanError(f"{what} {pos}:{total} computed by no tile (of {total})")

    def check_writes(self):
        """owner[buf][e] = the one tile writing element e; a buffer's writers are all of one kind."""
        kind = self.kind
        owner = [np.full(nb, -1, dtype=np.int64) for _, nb, _ in self.buffers]
        buf_kind = {}
        for i, b, lo, hi in self.writes:
            o = owner[b]
            if not 0 <= lo < hi <= len(o):
                self.fail(i, f"writes buffer {b} elements {lo}:{hi}, outside its {len(o)} elements")
            seg = o[lo:hi]
            if np.any(seg >= 0):
                j = int(seg[seg >= 0][0])
                self.fail(i, f"writes buffer {b} elements {lo}:{hi}, overlapping {self.who(j)}: every element "
                             "must be produced by exactly one tile")
            seg[:] = i
            k = buf_kind.setdefault(b, (kind[i], i))
            if k[0] != kind[i]:
                self.fail(i, f"writes buffer {b} as {kind[i]}, but {self.who(k[1])} writes it as {k[0]}")
        self.buf_name = {b: f"buffer {b} ({k})" for b, (k, _) in buf_kind.items()}
        return owner

    def check_counters(self):
        """Wait counts equal arrivals per step; offsets 0 (this step) or -1 (previous step)."""
        h, c = self.h, self.cols
        C = h["num_counters"]
        self.signalers = [[] for _ in range(C)]
        for i, sig in enumerate(c["signal"]):
            self.signalers[sig].append(i)
        waits = np.asarray(self.plan.waits, dtype=np.int64).reshape(-1, WAIT.words).tolist()
        self.tile_waits = []
        for i in range(h["num_tiles"]):
            wb = c["wait_begin"][i]
            mine = waits[wb:wb + c["wait_count"][i]]
            for ctr, count, off in mine:
                if not 0 <= ctr < C:
                    self.fail(i, f"waits on counter {ctr} outside 0..{C - 1}")
                if off not in (0, -1):
                    self.fail(i, f"wait step_offset {off}: only 0 (this step) and -1 (previous step) exist")
                n = len(self.signalers[ctr])
                if n == 0:
                    self.fail(i, f"waits on counter {ctr}, which no tile signals: it would wait forever")
                if count != n:
                    self.fail(i, f"waits for {count} arrivals on counter {ctr}, but {n} tiles signal it per step "
                                 f"(e.g. {self.who(self.signalers[ctr][0])}); "
                                 + ("it would wait forever" if count > n else
                                    "it could run before all producers finish"))
            self.tile_waits.append(mine)
        e = self.embed
        ew = self.tile_waits[e]
        if not any(ctr == h["argmax_counter"] and off == -1 for ctr, _, off in ew):
            self.fail(e, "EMBED must wait on the previous step's ARGMAX (counter argmax_counter, step_offset -1): "
                         "the next step's token and buffer reuse depend on it")

    def happens_before(self):
        """anc[i]: bitset of tiles that finish before tile i starts within a step. Raises on a cycle."""
        g = step_order(self.plan)
        self.tile_waits = g.waits
        self.prev_tile = g.prev                  # the worker's previous / next tile (check_merge_next)
        self.next_tile = {p: t for t, p in enumerate(g.prev) if p >= 0}
        if not g.complete:
            self.report_cycle(g.indeg, g.prev)
        anc = [0] * self.h["num_tiles"]          # ancestors of i, plus i itself
        ctr_anc = [0] * self.h["num_counters"]
        for i in g.order:                        # every predecessor of i comes first
            a = 1 << i
            if g.prev[i] >= 0:
                a |= anc[g.prev[i]]
            for ctr in g.waits[i]:
                a |= ctr_anc[ctr]
            anc[i] = a
            ctr_anc[g.signal[i]] |= a
        return anc

    def report_cycle(self, indeg, prev):
        """Walk back from a stuck tile along unfinished predecessors until a tile repeats."""
        stuck = {i for i, d in enumerate(indeg) if d > 0}

        def blocker(i):
            if prev[i] >= 0 and prev[i] in stuck:
                return prev[i], "runs after"
            for ctr in sorted(self.tile_waits[i]):
                for j in self.signalers[ctr]:
                    if j in stuck:
                        return j, f"waits on counter {ctr}, signalled by"
            raise AssertionError("stuck tile without stuck predecessor")

        i = min(stuck)
        path, seen = [], {}
        while i not in seen:
            seen[i] = len(path)
            j, why = blocker(i)
            path.append((i, why, j))
            i = j
        cyc = path[seen[i]:]
        links = [f"{self.who(a)} {why} {self.who(b)}" for a, why, b in cyc]
        if len(links) > 8:
            links = links[:4] + [f"... ({len(links) - 8} more) ..."] + links[-4:]
        raise PlanError(f"{self.who(cyc[0][0])} is on a dependency cycle of {len(cyc)} tiles (co-resident workers "
                        f"would deadlock): " + "; ".join(links))

    def check_reads(self, owner, anc):
        """Every read sees the producer the model calls for, ordered before it."""
        kind = self.kind
        cache = {}
        for i, b, lo, hi, want in self.reads:
            key = (b, lo, hi)
            bn = self.buf_name.get(b, f"buffer {b}")
            got = cache.get(key)
            if got is None:
                seg = owner[b][lo:hi]
                if hi > len(owner[b]) or lo < 0:
                    self.fail(i, f"reads {bn} elements {lo}:{hi}, outside its {len(owner[b])} elements")
                if np.any(seg < 0):
                    e = lo + int(np.argmax(seg < 0))
                    self.fail(i, f"reads {bn} element {e}, which no tile produces")
                prods = np.unique(seg).tolist()
                mask = 0
                for p in prods:
                    mask |= 1 << p
                got = cache[key] = (mask, prods)
            mask, prods = got
            pk = kind[prods[0]]
            if pk != want:
                self.fail(i, f"reads {bn} elements {lo}:{hi}, which {self.who(prods[0])} produces as {pk}; "
                             f"the model needs {want} there")
            missing = mask & ~anc[i]
            if missing:
                p = (missing & -missing).bit_length() - 1
                self.fail(i, f"reads {bn} elements {lo}:{hi} but its producer {self.who(p)} is not ordered "
                             "before it (no chain of waits and worker order): a wait is missing")

    def check_steps(self, anc):
        n = self.h["num_tiles"]
        full = (1 << n) - 1
        a = anc[self.argmax]
        if a != full:
            i = ((full & ~a) & -(full & ~a)).bit_length() - 1
            self.fail(i, f"is not ordered before the ARGMAX tile {self.argmax}: the next step could overwrite "
                         "buffers it still uses")
        e = self.embed
        for i in range(n):
            if not (anc[i] >> e) & 1:
                self.fail(i, "is not ordered after the EMBED tile: it could run while the previous step still "
                             "uses its buffers")
