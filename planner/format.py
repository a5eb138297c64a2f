"""The plan format: the single source of truth shared by Python and C++.

A plan is one flat int32 array (the "blob"). Its layout is declared here as ordered field lists;
`render_header()` turns them into `csrc/generated/plan_format.h`, and a test checks the committed
header is exactly what this file renders. Nothing else may hard-code a field position.

Blob layout (all int32 words):
    [Header][buffers: num_buffers x Buffer][tiles: num_tiles x Tile][waits: num_waits x Wait]
    [worker_offsets: num_workers + 1][worker_tiles: num_tiles][weight_shapes: num_weights x 2]

Semantics every executor (C++ reference, CUDA kernel) must follow
-----------------------------------------------------------------
Step s of a launch decodes one token. Epoch e = state[STATE_EPOCH] + s + 1, where state[STATE_EPOCH]
counts the steps completed by earlier launches; the ARGMAX tile of the launch's last executed step adds the
number of executed steps to it. Counters are monotonic uint32 words in `state` at
STATE_HEADER_WORDS + counter * counter_stride. A tile waits, for each of its Wait records, until
(int32)(counter - (e + step_offset) * count) >= 0, runs, then adds 1 to its `signal` counter with release
semantics (after all its writes). A worker runs its tiles in worker_tiles order, for every step.

Ops (buffers named by id into the buffer table; "row r" means output row r of the tile's weight):
  EMBED    x[out_buf][:] = float(weight[token]) where token = input_ids[0] at step 0, else tokens[s-1].
  QKV      h = rmsnorm(in_buf fp32, norm weight, eps) as bf16 (HF order: bf16(x*rsqrt(mean(x^2)+eps)) * w);
           out_buf[out_offset + r - row_begin] = bf16(sum_k weight[r,k] * h[k]), fp32 accumulation.
  ATTN     aux0 = kv head, aux1 = partition p. Positions [lo, hi) = attn_partition_range(n, p, ...) with n = pos+1.
           in_buf = Q (bf16, un-rotated), in2_buf = K_new (bf16, un-rotated), in3_buf = V_new (bf16).
           If lo <= pos < hi the tile rotates K_new[head] (RoPE at pos, fp32 math, rounded to bf16) and writes
           it and V_new[head] into k_cache/v_cache[layer][0, head, pos, :] before using them.
           out_offset = 1 (partition 0 only) says the MERGE of (layer, aux0) is the next tile of this worker
           (the planner's with_tile, checked by the validator). When partition 0 then holds every position, that
           MERGE can take (m, l, o) from the executor's own storage, and an executor may skip writing them to
           out_buf and leave this tile's counter increment to that MERGE (the CUDA kernel does: perf log v44).
           Otherwise 0.
           For each q head of the group (q heads aux0*G .. aux0*G+G-1): q rotated in fp32, scores fp32
           scaled by 1/sqrt(head_dim); writes partial (m, l, o[head_dim]) fp32 to out_buf at
           ((aux0 * P + p) * G + g) * (head_dim + 2). Empty range: m = -inf, l = 0, o = 0.
  MERGE    aux0 = kv head. Log-sum-exp merge of the P partials of each q head in the group;
           out_buf (bf16 attention output) [q_head * head_dim + d]. aux1 = 1 + the signal counter of the
           preceding ATTN tile when that tile is marked (out_offset 1), else 0: where the ATTN tile left its
           increment to this MERGE (above), the MERGE adds it too, after its own release.
  RESID    out_buf[out_offset + r - row_begin] = in2_buf[same index] + sum_k weight[r,k] * in_buf[k]
           (in_buf bf16 vector, in2_buf and out_buf fp32 residual stream).
  GATEUP   h = rmsnorm(in_buf, norm) as for QKV; out_buf[r] = bf16(silu(g) * u), g = weight[r].h,
           u = weight2[r].h, all fp32 until the final rounding.
  LMHEAD   h = rmsnorm(in_buf, norm); logits[s, r] = sum_k weight[r,k] * h[k] (fp32, written to the op's
           logits output); (max, argmax) over its rows (lowest index on ties) to out_buf partial slot aux0:
           out_buf[2*aux0] = max (fp32), out_buf[2*aux0+1] = index (int32 bits).
  ARGMAX   reduces in_buf's aux0 partials (max, lowest index on ties) into tokens[s] (int64 output).
           If tokens[s] is an EOS id or s + 1 == num_steps the launch ends after step s.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

MAGIC = 0x454C4954  # "TILE" little-endian
FORMAT_VERSION = 3  # 2: header field attn_single; 3: MERGE-next marks (ATTN out_offset, MERGE aux1: perf log v44)
# Bumped whenever an executor's behaviour for the same blob changes (kernel ABI).
ABI_VERSION = 1

MAX_STEPS = 64  # tokens per launch in multi-token mode
MAX_EOS = 8
STATE_HEADER_WORDS = 32
COUNTER_STRIDE_WORDS = 32  # one 128-byte line per counter: pollers do not share lines with writers
# Elements (positions x head_dim) of K (and of V) an ATTN tile stages per chunk in the CUDA kernel. The planner's
# default attn_single is one chunk of positions (planner/graph.py default_single).
ATTN_CHUNK_ELEMS = 8192
# The CUDA kernel's attention warp path (perf log v45) takes at most ATTN_WARPS_MAX_GROUP query heads per KV head and
# head_dim ATTN_WARPS_HEAD_DIM: 8 positions per warp of its 16 in a chunk of ATTN_CHUNK_ELEMS / head_dim positions, one
# lane per 8 dims of o. Its default variants run only these shapes (decode_kernel.h attn_warps_fit).
ATTN_WARPS_MAX_GROUP = 4
ATTN_WARPS_HEAD_DIM = 64


def attn_warps_fit(num_heads: int, num_kv_heads: int, head_dim: int) -> bool:
    """Whether the kernel's attention warp path takes this shape (the C++ check reads the same two constants)."""
    if num_kv_heads <= 0 or num_heads % num_kv_heads:
        return False
    return num_heads // num_kv_heads <= ATTN_WARPS_MAX_GROUP and head_dim == ATTN_WARPS_HEAD_DIM


class Op(enum.IntEnum):
    EMBED = 1
    QKV = 2
    ATTN = 3
    MERGE = 4
    RESID = 5
    GATEUP = 6
    LMHEAD = 7
    ARGMAX = 8


class DType(enum.IntEnum):
    F32 = 0
    BF16 = 1
    I32 = 2


DTYPE_BYTES = {DType.F32: 4, DType.BF16: 2, DType.I32: 4}


class StateWord(enum.IntEnum):
    """Words at the start of the `state` tensor (int32)."""
    EPOCH = 0          # steps completed by all earlier launches
    ERROR = 1          # 0 = ok, else an ErrorCode
    ERROR_WORKER = 2
    ERROR_TILE = 3
    ERROR_STEP = 4
    ERROR_COUNTER = 5
    ERROR_SEEN = 6     # counter value observed at the timeout
    ERROR_WANTED = 7   # value that was awaited
    STEPS_DONE = 8     # steps executed by the last launch


# ERROR_COUNTER of a WAIT_TIMEOUT raised by a poll of flagged input words (TILES_FLAGS CUDA builds: the value
# carries its epoch, no counter; ERROR_SEEN / ERROR_WANTED are then the epoch bits seen and awaited).
FLAG_WAIT_COUNTER = -2


class ErrorCode(enum.IntEnum):
    OK = 0
    WAIT_TIMEOUT = 1     # a spin-wait exceeded its bound (a plan or kernel bug, never a valid schedule)
    CACHE_FULL = 2       # position + step reached the KV cache's capacity
    BAD_TOKEN = 3        # token id outside the vocabulary
    BAD_PLAN = 4         # the device plan does not match the header it was launched with


# Per-layer weight slots; the op's `weights` list is these, layer by layer, then FINAL_SLOTS.
LAYER_SLOTS = ("input_norm", "q", "k", "v", "o", "post_norm", "gate", "up", "down")
FINAL_SLOTS = ("final_norm", "lm_head", "embed")
SLOT = {name: i for i, name in enumerate(LAYER_SLOTS)}


def weight_index(layer: int, slot: str, num_layers: int) -> int:
    if slot in SLOT:
        return layer * len(LAYER_SLOTS) + SLOT[slot]
    return num_layers * len(LAYER_SLOTS) + FINAL_SLOTS.index(slot)


def num_weights(num_layers: int) -> int:
    return num_layers * len(LAYER_SLOTS) + len(FINAL_SLOTS)


def attn_partition_range(n: int, p: int, partitions: int, granule: int, single: int = 0) -> tuple[int, int]:
    """Positions [lo, hi) of partition p when n positions are cached. Shared rule of every executor.
    Up to `single` positions partition 0 holds them all; beyond, ceil(n / partitions) rounded up to the granule."""
    per = -(-n // partitions)
    per = -(-per // granule) * granule
    if n <= single:
        per = n
    lo = min(p * per, n)
    return lo, min(lo + per, n)


# Field lists: (name, meaning). All int32. Order is the binary layout.
HEADER_FIELDS = [
    ("magic", "MAGIC"),
    ("format_version", "FORMAT_VERSION"),
    ("abi_version", "ABI_VERSION the plan was made for"),
    ("header_words", "number of header words"),
    ("num_workers", "workers (= thread blocks, one per SM)"),
    ("num_tiles", "tiles per step"),
    ("num_waits", "wait records"),
    ("num_buffers", "scratch buffers"),
    ("num_counters", "dependency counters"),
    ("num_weights", "entries of the op's weights list"),
    ("num_layers", "decoder layers"),
    ("hidden", "hidden size"),
    ("num_heads", "query heads"),
    ("num_kv_heads", "key/value heads"),
    ("head_dim", "head dimension"),
    ("intermediate", "MLP intermediate size"),
    ("vocab", "vocabulary size (LM head rows)"),
    ("attn_partitions", "KV-position partitions per KV head"),
    ("attn_granule", "partition lengths are multiples of this"),
    ("attn_single", "up to this many positions partition 0 holds them all (0: never)"),
    ("lm_tiles", "LM head tiles (argmax partial slots)"),
    ("argmax_counter", "counter signalled by the ARGMAX tile"),
    ("scratch_bytes", "bytes of the scratch arena"),
    ("state_words", "int32 words of the state tensor"),
    ("counter_stride", "words between counters in state"),
    ("eps_bits", "RMSNorm eps, float32 bits"),
    ("buffers_offset", "word offset of the buffer table"),
    ("tiles_offset", "word offset of the tile table"),
    ("waits_offset", "word offset of the wait table"),
    ("worker_offsets_offset", "word offset of worker_offsets[num_workers + 1]"),
    ("worker_tiles_offset", "word offset of worker_tiles[num_tiles]"),
    ("weight_shapes_offset", "word offset of weight_shapes[num_weights][2] (rows, cols; cols 0 = vector)"),
    ("total_words", "words in the blob"),
    ("sm_count", "SM count of the GPU the plan was made for (0 = any)"),
    ("cc_major", "compute capability major (0 = any)"),
    ("cc_minor", "compute capability minor"),
    ("config_hash", "low 31 bits of the model-config hash"),
]

BUFFER_FIELDS = [
    ("offset_bytes", "byte offset in the scratch arena (256-byte aligned)"),
    ("numel", "elements"),
    ("dtype", "DType"),
]

TILE_FIELDS = [
    ("op", "Op"),
    ("layer", "decoder layer, -1 outside layers"),
    ("weight", "weight index or -1"),
    ("weight2", "second weight (GATEUP: up) or -1"),
    ("norm", "RMSNorm weight index or -1"),
    ("row_begin", "first output row"),
    ("row_end", "one past the last output row"),
    ("in_buf", "input buffer"),
    ("in2_buf", "second input (RESID residual, ATTN K_new) or -1"),
    ("in3_buf", "third input (ATTN V_new) or -1"),
    ("out_buf", "output buffer or -1"),
    ("out_offset", "element offset of row_begin in out_buf; ATTN: 1 = its MERGE is this worker's next tile"),
    ("aux0", "ATTN/MERGE kv head; LMHEAD partial slot; ARGMAX partial count"),
    ("aux1", "ATTN partition; MERGE: 1 + the marked preceding ATTN tile's counter, or 0"),
    ("wait_begin", "first wait record"),
    ("wait_count", "number of wait records"),
    ("signal", "counter incremented on completion"),
    ("weight_bytes", "weight bytes the tile streams (cost model, prefetch)"),
]

WAIT_FIELDS = [
    ("counter", "counter index"),
    ("count", "arrivals per step"),
    ("step_offset", "0, or -1 to wait on the previous step"),
]


@dataclass(frozen=True)
class Layout:
    name: str
    fields: list

    @property
    def words(self) -> int:
        return len(self.fields)

    def index(self, field: str) -> int:
        return [f for f, _ in self.fields].index(field)


HEADER = Layout("Header", HEADER_FIELDS)
BUFFER = Layout("Buffer", BUFFER_FIELDS)
TILE = Layout("Tile", TILE_FIELDS)
WAIT = Layout("Wait", WAIT_FIELDS)
LAYOUTS = (HEADER, BUFFER, TILE, WAIT)


def float_bits(x: float) -> int:
    import struct
    return struct.unpack("<i", struct.pack("<f", x))[0]


def bits_float(b: int) -> float:
    import struct
    return struct.unpack("<f", struct.pack("<i", b))[0]


def render_header() -> str:
    """The C++ view of this file. Output is committed as csrc/generated/plan_format.h."""
    out = [
        "// GENERATED by planner/format.py (python -m tiles_ext.planner.format). Do not edit.",
        "// Plain C++ (no torch, no CUDA headers) so both the reference executor and the kernel include it.",
        "#pragma once",
        "#include <stdint.h>",
        "",
        "namespace tiles {",
        "",
        f"constexpr int32_t kMagic = 0x{MAGIC:08X};",
        f"constexpr int32_t kFormatVersion = {FORMAT_VERSION};",
        f"constexpr int32_t kAbiVersion = {ABI_VERSION};",
        f"constexpr int32_t kMaxSteps = {MAX_STEPS};",
        f"constexpr int32_t kMaxEos = {MAX_EOS};",
        f"constexpr int32_t kStateHeaderWords = {STATE_HEADER_WORDS};",
        f"constexpr int32_t kCounterStrideWords = {COUNTER_STRIDE_WORDS};",
        f"constexpr int32_t kAttnChunkElems = {ATTN_CHUNK_ELEMS};",
        f"constexpr int32_t kAttnWarpsMaxGroup = {ATTN_WARPS_MAX_GROUP};",
        f"constexpr int32_t kAttnWarpsHeadDim = {ATTN_WARPS_HEAD_DIM};",
        f"constexpr int32_t kLayerSlots = {len(LAYER_SLOTS)};",
        f"constexpr int32_t kFinalSlots = {len(FINAL_SLOTS)};",
        f"constexpr int32_t kFlagWaitCounter = {FLAG_WAIT_COUNTER};",
        "",
    ]
    for enum_cls, prefix in ((Op, "kOp"), (DType, "kDType"), (StateWord, "kState"), (ErrorCode, "kError")):
        out.append(f"// {enum_cls.__name__}")
        for m in enum_cls:
            camel = "".join(p.capitalize() for p in m.name.split("_"))
            out.append(f"constexpr int32_t {prefix}{camel} = {int(m)};")
        out.append("")
    out.append("// Weight slots within a layer, then the final slots.")
    for i, n in enumerate(LAYER_SLOTS):
        out.append(f"constexpr int32_t kSlot{''.join(p.capitalize() for p in n.split('_'))} = {i};")
    for i, n in enumerate(FINAL_SLOTS):
        out.append(f"constexpr int32_t kFinal{''.join(p.capitalize() for p in n.split('_'))} = {i};")
    out.append("")
    for lay in LAYOUTS:
        out.append(f"struct {lay.name} {{")
        for f, meaning in lay.fields:
            out.append(f"  int32_t {f};  // {meaning}")
        out.append("};")
        out.append(f"static_assert(sizeof({lay.name}) == {lay.words} * 4, \"{lay.name} layout\");")
        out.append(f"constexpr int32_t k{lay.name}Words = {lay.words};")
        out.append("")
    out += [
        "// Positions [lo, hi) of partition p when n positions are cached (planner/format.py: attn_partition_range).",
        "#if defined(__CUDACC__)",
        "__host__ __device__",
        "#endif",
        "inline void attn_partition_range(int32_t n, int32_t p, int32_t partitions, int32_t granule, int32_t single,",
        "                                 int32_t* lo, int32_t* hi) {",
        "  int32_t per = (n + partitions - 1) / partitions;",
        "  per = (per + granule - 1) / granule * granule;",
        "  if (n <= single) per = n;",
        "  int32_t l = p * per < n ? p * per : n;",
        "  *lo = l;",
        "  *hi = l + per < n ? l + per : n;",
        "}",
        "",
        "}  // namespace tiles",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    import pathlib
    import sys
    target = pathlib.Path(__file__).resolve().parent.parent / "csrc" / "generated" / "plan_format.h"
    if len(sys.argv) > 1:
        target = pathlib.Path(sys.argv[1])
    target.write_text(render_header())
    print(f"wrote {target}")
