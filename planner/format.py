"""The plan format: the single source of truth shared by Python and C++.

A plan is one flat int32 array (the "blob"). Its layout is declared here as ordered field lists;
`render_header()` turns them into `csrc/generated/plan_format.h`, and a test checks the committed
header is exactly what this file renders. Nothing else may hard-code a field position.

Blob layout (all int32 words):
    [Header][buffers: num_buffers x Buffer][tiles: num_tiles x Tile][waits: num_waits x Wait]
    [worker_offsets: num_workers + 1][worker_tiles: num_tiles][weights: num_weights x Weight]

The weight table says, for each entry of the op's `weights` list, which slot of which layer it is (SLOTS) and its
shape: every executor checks the tensors and every tile's reads against it, and derives no shape itself. A model
family (tiles_ext/families) picks its slots and their order; Llama's are input_norm, q, k, v, o, post_norm, gate,
up, down per layer, then final_norm, lm_head, embed.

Semantics every executor (C++ reference, CUDA kernel) must follow
-----------------------------------------------------------------
Step s of a launch decodes one token. Epoch e = state[STATE_EPOCH] + s + 1, where state[STATE_EPOCH]
counts the steps completed by earlier launches; the ARGMAX tile of the launch's last executed step adds the
number of executed steps to it. Counters are monotonic uint32 words in `state` at
STATE_HEADER_WORDS + counter * counter_stride. A tile waits, for each of its Wait records, until
(int32)(counter - (e + step_offset) * count) >= 0, runs, then adds 1 to its `signal` counter with release
semantics (after all its writes). A worker runs its tiles in worker_tiles order, for every step.

Rows (a verify pass). A launch with R = len(input_ids) > 1 (1 <= R <= max_rows, num_steps 1, no sampler) is one
step that decodes R consecutive positions pos .. pos + R - 1 of one sequence, row i holding token input_ids[i] at
position pos + i. Every tile runs once for all R rows (its weights read once), computing each row exactly as a
one-row step at that row's position computes it, in the same order: so R rows give the bits of R one-row launches.
Row i of buffer b lies at offset_bytes + i * row_bytes. Row i attends positions [0, pos + i] with its own
partition bounds attn_partition_range(pos + i + 1, ...): the cached positions below pos from the KV cache, the new
positions pos .. pos + i from the step's own rows (K_new normalised and rotated at its position, rounded to bf16 as
the cache stores it, and V_new), never from cache rows at or beyond pos, which may hold a rejected draft's K/V.
The tile that owns position pos + i under row i's bounds writes row i's K/V there, as a one-row step would. LMHEAD
writes logits row i, ARGMAX tokens[i] (no EOS stop within a pass); the epoch advances by 1 per pass.
On a flagged arena (CUDA flag hand-offs, whose one-row kernels advance only ARGMAX's counter) a pass of several
rows hands off by counters: its waits on every other counter take state[ROWS_PASSES] + 1 as the epoch, it adds 1
to ROWS_PASSES, and its rows lie 2 * row_bytes into the arena, past the flagged words of row 0.

Prompt lookup (the op tiles::prompt_lookup). One launch runs rounds of greedy prompt lookup over a token history
h[0 .. n) (int64, the prompt and every accepted token; the launch appends to it in place), n = `length` at the
start, until it has accepted `budget` tokens (1..MAX_LOOKUP_TOKENS), accepted an EOS id, or the cache has no room.
The KV cache holds positions 0 .. n - 2; h[n - 1] is the last accepted token. A round:
  1. Draft (Transformers' PromptLookupCandidateGenerator for greedy, no logits processors): for g from
     min(ngram, n - 1) down to 1, the first idx (ascending, 0 <= idx <= n - g) with h[idx .. idx + g) equal to
     h[n - g .. n) and start = idx + g < end = min(start + draft_tokens, n) gives the draft h[start .. end), cut
     before its first EOS id (cut to nothing: no draft); no match: no draft. The draft is then cut to the cache's
     room (n + m <= max_cache_len).
  2. Fit: a round accepts at most m + 1 tokens. If the launch has accepted a > 0 tokens and a + m + 1 > budget, the
     launch ends before this round (the next launch runs it unchanged); the launch's first round cuts its draft to
     budget - 1. So the rounds do not depend on where launches end.
  3. The pass: rows h[n - 1], draft[0 .. m) at positions n - 1 .. n - 1 + m (a verify pass, "Rows" above).
  4. Accept: j = the length of the longest prefix of the draft equal to the rows' tokens (the argmaxes t[0 .. j)),
     the accepted tokens t[0 .. j] (j + 1: the matched draft and the bonus token), cut after the first EOS id; they
     are appended to h and the outputs, n grows by their count. Cache rows beyond the new n - 2 keep a rejected
     draft's K/V and are never attended.
The op returns the accepted tokens (budget int64, -1 after the last) and the rounds (passes) it ran; the epoch
advances by 1 per pass. The CPU reference executor runs it. The CUDA prompt-lookup kernel
(docs/design/prompt-lookup-in-kernel.md) runs every round in one launch of the rows kernel: the ARGMAX tile
accepts, drafts the next round and publishes its rows in the state's LOOKUP_* words before its signal; every
worker waits for that signal before its next pass's tiles.

Ops (buffers named by id into the buffer table; "row r" means output row r of the tile's weight):
  EMBED    x[out_buf][:] = float(weight[token]) where token = input_ids[0] at step 0, else tokens[s-1].
  QKV      h = rmsnorm(in_buf fp32, norm weight, eps) as bf16 (HF order: bf16(x*rsqrt(mean(x^2)+eps)) * w);
           out_buf[out_offset + r - row_begin] = bf16(sum_k weight[r,k] * h[k] + bias[r]), fp32 accumulation and
           add, where bias = weight2 (the q/k/v bias vector of the tile's rows) or 0 when weight2 = -1.
  ATTN     aux0 = kv head, aux1 = partition p. Positions [lo, hi) = attn_partition_range(n, p, ...) with n = pos+1.
           in_buf = Q (bf16, un-rotated), in2_buf = K_new (bf16, un-rotated), in3_buf = V_new (bf16).
           norm = the per-head RMSNorm weight of q ([head_dim]) or -1, weight2 = that of k or -1: each q head and
           the new k head are first normalised as bf16(bf16(x * rsqrt(mean(x^2) + eps)) * w) (fp32 sums).
           If lo <= pos < hi the tile rotates K_new[head] (RoPE at pos, fp32 math, rounded to bf16) and writes
           it and V_new[head] into k_cache/v_cache[layer][0, head, pos, :] before using them.
           out_offset = 1 (partition 0 only) says the MERGE of (layer, aux0) is the next tile of this worker
           (the planner's with_tile, checked by the validator). When partition 0 then holds every position, that
           MERGE can take (m, l, o) from the executor's own storage, and an executor may skip writing them to
           out_buf and leave this tile's counter increment to that MERGE (the CUDA kernel does).
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

Sampling (the op's optional `sampler` tensor: int32, sampler_words(vocab, lm_tiles) words, SAMPLER_* below)
----------------------------------------------------------------------------------------------------------
With a sampler the LMHEAD and ARGMAX tiles pick tokens[s] from the step's logits as Transformers' processors and
`_sample` would, in Transformers' order; the op still returns the raw logits. The token of step s has absolute
position t = pos + 1 (its index in the sequence). Every executor computes, in fp32 with IEEE rounding and no
contraction (csrc/sampler_math.h holds the one definition both compile):
  1. score_i = logit_i; seen(i) (the seen bitmap) and penalty != 1: score_i < 0 ? score_i * penalty
     : score_i / penalty (RepetitionPenaltyLogitsProcessor);
  2. t < eos_suppress_until: score_i = -inf for every id of suppress_ids (MinNewTokensLengthLogitsProcessor);
  3. temperature != 1: score_i / temperature (TemperatureLogitsWarper).
  A NaN or +inf score, or no score above -inf, is the error BAD_LOGITS (the lowest such id, or -1): never drawn.
  GREEDY mode: tokens[s] = argmax of the scores (lowest id on ties). SAMPLE mode:
  4. top_k > 0: keep score_i >= the k-th largest score, k = min(top_k, vocab) (ties at the k-th all kept);
  5. the kept ids in canonical order (score descending, id ascending) L[0..n), e_j = exp(L_j - L_0) (the shared
     exp), S = e_0 + ... + e_{n-1} (this order); top_p_cut > 0: p_j = e_j / S, the suffix sums
     c_j = p_{n-1} + ... + p_j (from the end), keep the prefix L[0..m) with m = 1 + #{j >= 1: c_j > top_p_cut}
     (TopPLogitsWarper: ascending cumulative probabilities <= 1 - top_p removed, the largest kept);
  6. min_p > 0: S' = e_0 + ... + e_{m-1}, remove j with e_j / S' < min_p * (1 / S') (MinPLogitsWarper), j = 0 kept;
  7. the draw: u = (x0 >> 8) * 2^-24 with (x0, ..) = Philox4x32-10(counter (t, 0, 0, 0), key (seed_lo, seed_hi));
     over the kept ids in canonical order, S'' = their e_j summed in order, tokens[s] = the first whose running
     sum of e_j exceeds u * S'' (the last kept id with e_j > 0 if rounding leaves none).
  The ARGMAX tile sets the bit of tokens[s] in the seen bitmap. The CUDA kernel's LMHEAD tiles hand the ARGMAX
  tile their local candidates (rows >= the tile's local k-th score) through the candidate slots: it serves
  1 <= top_k <= CAND_CAP in SAMPLE mode and raises SAMPLER_OVERFLOW where the candidates exceed its slots (top_k
  outside that range, more than CAND_SLOT in a tile or KEPT_CAP in all: ties), never a silent drop.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

MAGIC = 0x454C4954  # "TILE" little-endian
FORMAT_VERSION = 6  # 6: the header's max_rows and row_bytes (several rows per pass); 5: the header's weight_dtype and scale_layout, the *_scale slots (FP8 weights); 4: the weight
# table (slot, layer, rows, cols) per weight, QKV bias and ATTN q/k-norm fields
# Bumped whenever an executor's behaviour for the same blob changes (kernel ABI).
ABI_VERSION = 1

MAX_STEPS = 64  # tokens per launch in multi-token mode
# Rows per pass: a launch of R > 1 input ids (a draft to verify) decodes R consecutive positions in one step, every
# tile applied to all R rows. A plan's arena holds max_rows rows (the header); MAX_ROWS bounds every plan's.
MAX_ROWS = 8
MAX_EOS = 8
# Prompt lookup (the op tiles::prompt_lookup, "Prompt lookup" above): tokens one launch accepts at most, and the
# longest n-gram its drafting matches (Transformers' max_matching_ngram_size; its default is 2).
MAX_LOOKUP_TOKENS = 64
MAX_LOOKUP_NGRAM = 8
STATE_HEADER_WORDS = 32
COUNTER_STRIDE_WORDS = 32  # one 128-byte line per counter: pollers do not share lines with writers
# Elements (positions x head_dim) of K (and of V) an ATTN tile stages per chunk in the CUDA kernel. The planner's
# default attn_single is one chunk of positions (planner/graph.py default_single).
ATTN_CHUNK_ELEMS = 8192
# The CUDA kernel's attention runs on its tensor-core warp path: 8 positions per warp of its 16 in a chunk of
# ATTN_CHUNK_ELEMS / head_dim positions, the G query heads of a KV head as the fragment rows (lane >> 2: at most 8),
# one kernel instantiation per head_dim of ATTN_WARPS_HEAD_DIMS (decode_kernel.h attn_warps_fit, launch_decode).
# The op refuses any other shape by name.
ATTN_WARPS_MAX_GROUP = 8
ATTN_WARPS_HEAD_DIMS = (64, 96, 128)


def attn_warps_fit(num_heads: int, num_kv_heads: int, head_dim: int) -> bool:
    """Whether the CUDA kernel's attention warp path takes this shape (the C++ rule is rendered from the same
    constants)."""
    if num_kv_heads <= 0 or num_heads % num_kv_heads:
        return False
    return num_heads // num_kv_heads <= ATTN_WARPS_MAX_GROUP and head_dim in ATTN_WARPS_HEAD_DIMS


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
    F8E4M3 = 3   # OCP FP8 E4M3 (torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinities


DTYPE_BYTES = {DType.F32: 4, DType.BF16: 2, DType.I32: 4, DType.F8E4M3: 1}


# --- weight formats (docs/numerics.md, "FP8 weights") -----------------------------------------------------------
# The matrices of QUANTIZED_SLOTS are BF16, or E4M3 with fp32 scales in one of the scale layouts; every executor
# dequantizes an element as float(q) * scale in fp32 and accumulates in fp32 as for BF16 weights. Norms, biases,
# the embedding and the LM head stay BF16 in every format: they are a small part of the bytes (SmolLM2: the tied
# embedding is the LM head, 28 % of its weights) and the LM head's rounding moves every logit.
class ScaleLayout(enum.IntEnum):
    NONE = 0          # BF16 matrices, no scale slots
    PER_CHANNEL = 1   # one fp32 scale per output row: w[r, k] = float(q[r, k]) * s[r]
    BLOCK128 = 2      # one fp32 scale per 128 x 128 block (Transformers' fine-grained FP8, weight_scale_inv):
                      # w[r, k] = float(q[r, k]) * s[r / 128, k / 128]; edge blocks may be partial


SCALE_BLOCK = 128       # rows and columns of a BLOCK128 scale block
FP8_E4M3_MAX = 448.0    # the largest finite E4M3 value
# The weights= names of patch() and ModelShape.weight_format -> (matrix dtype, scale layout).
WEIGHT_FORMATS = {
    "bf16": (DType.BF16, ScaleLayout.NONE),
    "fp8": (DType.F8E4M3, ScaleLayout.PER_CHANNEL),
    "fp8_block128": (DType.F8E4M3, ScaleLayout.BLOCK128),
}
# The matrices a weight format other than bf16 quantizes, each with its scale slot.
QUANTIZED_SLOTS = ("q", "k", "v", "o", "gate", "up", "down")
SCALE_SLOTS = {f"{s}_scale": s for s in QUANTIZED_SLOTS}


def scale_shape(layout: ScaleLayout, rows: int, cols: int) -> tuple[int, int]:
    """(rows, cols) of the scale tensor of a rows x cols matrix; cols 0 = a vector."""
    if layout == ScaleLayout.PER_CHANNEL:
        return rows, 0
    if layout == ScaleLayout.BLOCK128:
        return -(-rows // SCALE_BLOCK), -(-cols // SCALE_BLOCK)
    raise ValueError(f"scale layout {layout!r} has no scale tensor")


def matrix_bytes(layout: ScaleLayout, r0: int, r1: int, cols: int) -> int:
    """Bytes a tile streams for rows [r0, r1) of a matrix with `cols` columns: its elements and the scales of
    those rows (a BLOCK128 tile reads every block row it touches)."""
    if layout == ScaleLayout.NONE:
        return (r1 - r0) * cols * 2
    if layout == ScaleLayout.PER_CHANNEL:
        return (r1 - r0) * (cols + 4)
    block_rows = (r1 - 1) // SCALE_BLOCK - r0 // SCALE_BLOCK + 1 if r1 > r0 else 0
    return (r1 - r0) * cols + block_rows * -(-cols // SCALE_BLOCK) * 4


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
    # Passes of several rows run on a flagged arena (the CUDA rows kernel, which hands off by counters, while the
    # one-row flag kernels advance only ARGMAX's counter): the epoch of every other counter there. 0 elsewhere.
    ROWS_PASSES = 9
    # Prompt lookup on CUDA ("Prompt lookup" above): the next pass of the launch as its ARGMAX tile publishes it, read
    # by every worker once ARGMAX's counter reached the pass's epoch. LOOKUP_ROWS: its rows (0: the launch ends);
    # LOOKUP_POS: its first position; LOOKUP_IDS .. LOOKUP_IDS + MAX_ROWS - 1: its input ids.
    LOOKUP_ROWS = 10
    LOOKUP_POS = 11
    LOOKUP_IDS = 12


assert StateWord.LOOKUP_IDS + MAX_ROWS <= STATE_HEADER_WORDS, "the LOOKUP_IDS words lie in the state's header"

# ERROR_COUNTER of a WAIT_TIMEOUT raised by a poll of flagged input words (the flag hand-off kernels: the value
# carries its epoch, no counter; ERROR_SEEN / ERROR_WANTED are then the epoch bits seen and awaited).
FLAG_WAIT_COUNTER = -2


class ErrorCode(enum.IntEnum):
    OK = 0
    WAIT_TIMEOUT = 1     # a spin-wait exceeded its bound (a plan or kernel bug, never a valid schedule)
    CACHE_FULL = 2       # position + step reached the KV cache's capacity
    BAD_TOKEN = 3        # token id outside the vocabulary
    BAD_PLAN = 4         # the device plan does not match the header it was launched with
    BAD_LOGITS = 5       # a sampler's scores hold NaN or +inf, or nothing above -inf: nothing is drawn
    SAMPLER_OVERFLOW = 6  # more sampling candidates than the CUDA kernel's slots hold (top_k range, ties)


# What each error means, and the detail its words carry ({seen} / {wanted}: ERROR_SEEN / ERROR_WANTED as signed
# int32, {seen_u} / {wanted_u} as uint32, {counter}: ERROR_COUNTER). The Python reader (tiles_ext.errors) and the
# C++ op format errors from these alone, the C++ through the generated header.
ERROR_TEXTS = {
    ErrorCode.WAIT_TIMEOUT: "a dependency wait exceeded its bound (a plan or kernel bug, never a valid schedule)",
    ErrorCode.CACHE_FULL: "position + step reached the KV cache's capacity",
    ErrorCode.BAD_TOKEN: "a token id outside the vocabulary",
    ErrorCode.BAD_PLAN: "the device plan does not match the header it was launched with",
    ErrorCode.BAD_LOGITS: "a NaN or +inf score, or no score above -inf, where the sampler draws (never drawn from)",
    ErrorCode.SAMPLER_OVERFLOW: ("more sampling candidates than the CUDA kernel holds (top_k outside 1..CAND_CAP, "
                                 "or ties at the k-th score)"),
}
ERROR_DETAILS = {
    ErrorCode.WAIT_TIMEOUT: "counter {counter} was at {seen_u}, waited for {wanted_u}",
    ErrorCode.CACHE_FULL: "position {seen} with max_cache_len {wanted}",
    ErrorCode.BAD_TOKEN: "token {seen} with vocab {wanted}",
    ErrorCode.BAD_PLAN: "device word {seen}, header says {wanted}",
    ErrorCode.BAD_LOGITS: "token id {seen} (-1: every score is -inf) for the token at position {wanted}",
    ErrorCode.SAMPLER_OVERFLOW: "{seen} candidates where the kernel holds {wanted}",
}
# The detail of a WAIT_TIMEOUT whose ERROR_COUNTER is FLAG_WAIT_COUNTER (a poll of flagged input words).
FLAG_WAIT_DETAIL = "a flagged input word carried epoch {seen_u}, waited for {wanted_u}"
# The whole message. {where}: TILE_WHERE for a tile of the plan (UNNAMED_TILE_WHERE for a tile index without
# its plan), else STEP_WAIT_WHERE (a WAIT_TIMEOUT) or NO_TILE_WHERE.
ERROR_MESSAGE = ("tiles decode kernel error {name} ({meaning}) in worker {worker}, {where}, step {step}: {detail}. "
                 "The state keeps the error and later launches on it do nothing: make a new runtime/state.")
TILE_WHERE = "tile {tile} ({tile_name})"
STEP_WAIT_WHERE = "the step-boundary wait for the previous step's token"
NO_TILE_WHERE = "no tile (launch-time check)"
# {where} of a tile the reader cannot name (no plan given, or an index outside the plan's tiles).
UNNAMED_TILE_WHERE = "tile {tile}"
# {name}, {meaning} and {detail} of a code outside ErrorCode (a state written by another build); {code}: ERROR.
UNKNOWN_ERROR_NAME = "code {code}"
UNKNOWN_ERROR_TEXT = "an error code this build does not define"
UNKNOWN_ERROR_DETAIL = "counter {counter}, seen {seen}, wanted {wanted}"


# Weight slots: every tensor a family can hand the op, with its shape as (rows, cols) ModelShape dimension names
# (cols None: a vector of `rows` elements). Order fixed (the generated kSlot* values): new slots are appended.
SLOT_SHAPES = {
    "input_norm": ("hidden", None),
    "q": ("q_dim", "hidden"),
    "k": ("kv_dim", "hidden"),
    "v": ("kv_dim", "hidden"),
    "o": ("hidden", "q_dim"),
    "post_norm": ("hidden", None),
    "gate": ("intermediate", "hidden"),
    "up": ("intermediate", "hidden"),
    "down": ("hidden", "intermediate"),
    "final_norm": ("hidden", None),
    "lm_head": ("vocab", "hidden"),
    "embed": ("vocab", "hidden"),
    "q_bias": ("q_dim", None),
    "k_bias": ("kv_dim", None),
    "v_bias": ("kv_dim", None),
    "q_norm": ("head_dim", None),
    "k_norm": ("head_dim", None),
}
# The scale slots follow (their shapes: scale_shape of their matrix's in the plan's layout).
SLOTS = tuple(SLOT_SHAPES) + tuple(SCALE_SLOTS)
SLOT = {name: i for i, name in enumerate(SLOTS)}
# Slots that exist once per model (layer -1 in the weight table); every other slot exists once per layer.
MODEL_SLOTS = ("final_norm", "lm_head", "embed")
# The most slots one layer can have.
MAX_LAYER_SLOTS = len(SLOTS) - len(MODEL_SLOTS)
# The most slots a BF16 layer can have (no scale slots): bounds the CUDA kernel's by-value weight-pointer table,
# which serves BF16 plans only (the op refuses an FP8 plan on CUDA before it fills the table).
MAX_BF16_LAYER_SLOTS = MAX_LAYER_SLOTS - len(SCALE_SLOTS)
# The op's weights list: for every layer, the slots of the header's layer_slots mask in SLOTS order; then the
# MODEL_SLOTS in SLOTS order (planner/weights.py builds it, the generated weight_entry() reads it back in C++).
# The C++ expression of each shape dimension of SLOT_SHAPES, from a Header `h`.
DIM_EXPRESSIONS = {
    "hidden": "int64_t(h.hidden)",
    "q_dim": "int64_t(h.num_heads) * h.head_dim",
    "kv_dim": "int64_t(h.num_kv_heads) * h.head_dim",
    "intermediate": "int64_t(h.intermediate)",
    "vocab": "int64_t(h.vocab)",
    "head_dim": "int64_t(h.head_dim)",
}
# Op names as plans, tools and error messages print them (tiles_ext.planner.plan.describe_tile).
OP_NAMES = {Op.EMBED: "embed", Op.QKV: "qkv", Op.ATTN: "attn", Op.MERGE: "merge", Op.RESID: "resid",
            Op.GATEUP: "gateup", Op.LMHEAD: "lmhead", Op.ARGMAX: "argmax"}


def slot_shape(slot: str, shape) -> tuple[int, int]:
    """(rows, cols) of `slot` for a ModelShape; cols 0 = a vector."""
    if slot in SCALE_SLOTS:
        return scale_shape(WEIGHT_FORMATS[shape.weight_format][1], *slot_shape(SCALE_SLOTS[slot], shape))
    rows, cols = SLOT_SHAPES[slot]
    return int(getattr(shape, rows)), 0 if cols is None else int(getattr(shape, cols))


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
    ("weights_offset", "word offset of the weight table (num_weights Weight records)"),
    ("total_words", "words in the blob"),
    ("sm_count", "SM count of the GPU the plan was made for (0 = any)"),
    ("cc_major", "compute capability major (0 = any)"),
    ("cc_minor", "compute capability minor"),
    ("config_hash", "low 31 bits of the model-config hash"),
    ("layer_slots", "bitmask of the per-layer slots (1 << SLOT) every layer has: the weights list's layout"),
    ("weight_dtype", "DType of the QUANTIZED_SLOTS matrices: BF16, or F8E4M3 with their *_scale slots"),
    ("scale_layout", "ScaleLayout of the *_scale slots (NONE for BF16 matrices)"),
    ("max_rows", "rows one pass decodes at most (1..MAX_ROWS): the input ids of a verify pass"),
    ("row_bytes", "bytes of one row's buffers: row i of buffer b lies at offset_bytes + i * row_bytes"),
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

WEIGHT_FIELDS = [
    ("slot", "index into SLOTS (kSlot*)"),
    ("layer", "decoder layer, -1 for a model slot"),
    ("rows", "rows (or elements of a vector)"),
    ("cols", "columns; 0 = a vector of `rows` elements"),
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
    counts: dict = None   # field -> words, for the array fields (every other field is one word)

    def size(self, field: str) -> int:
        return (self.counts or {}).get(field, 1)

    @property
    def words(self) -> int:
        return sum(self.size(f) for f, _ in self.fields)

    def index(self, field: str) -> int:
        """Word offset of the field."""
        names = [f for f, _ in self.fields]
        return sum(self.size(f) for f in names[:names.index(field)])


# --- the sampler tensor -----------------------------------------------------------------------------------------
# [Sampler header: SAMPLER_HEADER_WORDS][candidate slots: lm_tiles x CAND_SLOT_WORDS][seen bitmap: SEEN_WORDS(vocab)]
# One int32 device tensor per generate call: its settings, no recompilation per call and nothing baked into a CUDA
# graph; the seen bitmap persists across the call's launches. The host fills the header and the bitmap (the prompt's
# ids); the executors never change the header, the CUDA LMHEAD tiles rewrite their candidate slot every step and the
# ARGMAX tile sets each picked id's bit. The EOS ids that end a launch stay the op's eos_ids argument.
CAND_CAP = 64     # the largest top_k the CUDA kernel's candidate path serves
CAND_SLOT = 128   # candidates one LMHEAD tile hands the ARGMAX tile: its local top_k and the ties at its k-th
KEPT_CAP = 128    # the kept set after top_k (k and the ties at the k-th) the CUDA ARGMAX tile sorts
SAMPLER_HEADER_WORDS = 32  # one 128-byte line: the fields below, then zeros


class SampleMode(enum.IntEnum):
    GREEDY = 0   # argmax of the processed scores (a greedy call with a repetition penalty or min_new_tokens)
    SAMPLE = 1   # filters, then the draw


SAMPLER_FIELDS = [
    ("mode", "SampleMode"),
    ("top_k", "keep the top_k largest scores, ties at the k-th kept; 0 = off"),
    ("eos_suppress_until", "tokens at positions below it see suppress_ids at -inf (min_new_tokens); 0 = off"),
    ("seed_lo", "Philox key word 0"),
    ("seed_hi", "Philox key word 1"),
    ("temperature_bits", "float32 bits: scores are divided by it; 1.0 = off"),
    ("top_p_cut_bits", "float32 bits of 1 - top_p (rounded once from double, as Transformers compares); 0 = off"),
    ("min_p_bits", "float32 bits: scores with probability below min_p x the largest are removed; 0 = off"),
    ("penalty_bits", "float32 bits of repetition_penalty, over the seen bitmap's ids; 1.0 = off"),
    ("num_suppress", "ids in suppress_ids (MinNewTokensLengthLogitsProcessor's eos_token_id), 0..MAX_EOS"),
    ("suppress_ids", "the ids eos_suppress_until holds at -inf; unused entries 0"),
]
# An LMHEAD tile's candidate slot: this header, then CAND_SLOT (score float bits, id) pairs.
CAND_FIELDS = [
    ("count", "pairs written; above CAND_SLOT: the tile had that many (SAMPLER_OVERFLOW), none written"),
    ("bad", "lowest row with a NaN or +inf score, or -1"),
    ("threshold_key", "order key (csrc/sampler_math.h order_key) of the tile's local k-th score: its candidates are "
                      "the rows above -inf whose key is at least it"),
    ("reserved", "0"),
]
CAND_SLOT_WORDS = len(CAND_FIELDS) + 2 * CAND_SLOT


def seen_words(vocab: int) -> int:
    """Words of the seen bitmap: bit (id & 31) of word (id >> 5) is set for every id seen."""
    return (vocab + 31) // 32


def sampler_cand_offset(slot: int) -> int:
    """Word offset of LM partial slot `slot`'s candidates."""
    return SAMPLER_HEADER_WORDS + slot * CAND_SLOT_WORDS


def sampler_seen_offset(lm_tiles: int) -> int:
    return SAMPLER_HEADER_WORDS + lm_tiles * CAND_SLOT_WORDS


def sampler_words(vocab: int, lm_tiles: int) -> int:
    """Words of the sampler tensor of a plan with this vocab and lm_tiles (the op checks its size)."""
    return sampler_seen_offset(lm_tiles) + seen_words(vocab)


HEADER = Layout("Header", HEADER_FIELDS)
BUFFER = Layout("Buffer", BUFFER_FIELDS)
TILE = Layout("Tile", TILE_FIELDS)
WAIT = Layout("Wait", WAIT_FIELDS)
WEIGHT = Layout("Weight", WEIGHT_FIELDS)
SAMPLER = Layout("SamplerSettings", SAMPLER_FIELDS, counts={"suppress_ids": MAX_EOS})
CANDIDATES = Layout("Candidates", CAND_FIELDS)
LAYOUTS = (HEADER, BUFFER, TILE, WAIT, WEIGHT, SAMPLER, CANDIDATES)
assert SAMPLER.words <= SAMPLER_HEADER_WORDS


def float_bits(x: float) -> int:
    import struct
    return struct.unpack("<i", struct.pack("<f", x))[0]


def bits_float(b: int) -> float:
    import struct
    return struct.unpack("<f", struct.pack("<i", b))[0]


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.lower().split("_"))


def _c_string(text: str) -> str:
    import json
    return json.dumps(text)  # the texts are ASCII: a JSON string is a valid C string literal


def _c_table(ctype: str, name: str, values) -> list[str]:
    return [f"constexpr {ctype} {name}[] = {{", *[f"    {v}," for v in values], "};"]


def _render_constants() -> list[str]:
    return [
        f"constexpr int32_t kMagic = 0x{MAGIC:08X};",
        f"constexpr int32_t kFormatVersion = {FORMAT_VERSION};",
        f"constexpr int32_t kAbiVersion = {ABI_VERSION};",
        f"constexpr int32_t kMaxSteps = {MAX_STEPS};",
        f"constexpr int32_t kMaxRows = {MAX_ROWS};",
        f"constexpr int32_t kMaxEos = {MAX_EOS};",
        f"constexpr int32_t kMaxLookupTokens = {MAX_LOOKUP_TOKENS};",
        f"constexpr int32_t kMaxLookupNgram = {MAX_LOOKUP_NGRAM};",
        f"constexpr int32_t kStateHeaderWords = {STATE_HEADER_WORDS};",
        f"constexpr int32_t kCounterStrideWords = {COUNTER_STRIDE_WORDS};",
        f"constexpr int32_t kAttnChunkElems = {ATTN_CHUNK_ELEMS};",
        f"constexpr int32_t kAttnWarpsMaxGroup = {ATTN_WARPS_MAX_GROUP};",
        "// The warp path's head_dims: one kernel instantiation each (X(hd) per head_dim), and as text for messages.",
        f"#define TILE_ATTN_HEAD_DIMS(X) {' '.join(f'X({hd})' for hd in ATTN_WARPS_HEAD_DIMS)}",
        f"constexpr const char* kAttnWarpsHeadDimsText = {_c_string(', '.join(map(str, ATTN_WARPS_HEAD_DIMS)))};",
        f"constexpr int32_t kNumSlots = {len(SLOTS)};",
        f"constexpr int32_t kMaxLayerSlots = {MAX_LAYER_SLOTS};",
        f"constexpr int32_t kMaxBf16LayerSlots = {MAX_BF16_LAYER_SLOTS};",
        f"constexpr int32_t kFlagWaitCounter = {FLAG_WAIT_COUNTER};",
        f"constexpr int32_t kCandCap = {CAND_CAP};",
        f"constexpr int32_t kCandSlot = {CAND_SLOT};",
        f"constexpr int32_t kKeptCap = {KEPT_CAP};",
        f"constexpr int32_t kSamplerHeaderWords = {SAMPLER_HEADER_WORDS};",
        f"constexpr int32_t kCandSlotWords = {CAND_SLOT_WORDS};",
        f"constexpr int32_t kScaleBlockSize = {SCALE_BLOCK};",
        "",
    ]


def _render_enums() -> list[str]:
    out = []
    for enum_cls, prefix in ((Op, "kOp"), (DType, "kDType"), (StateWord, "kState"), (ErrorCode, "kError"),
                             (SampleMode, "kMode"), (ScaleLayout, "kScale")):
        out.append(f"// {enum_cls.__name__}")
        out += [f"constexpr int32_t {prefix}{_camel(m.name)} = {int(m)};" for m in enum_cls]
        out.append("")
    out.append("// Weight slots (SLOTS): the `slot` of a Weight record.")
    out += [f"constexpr int32_t kSlot{_camel(n)} = {i};" for i, n in enumerate(SLOTS)]
    out.append("")
    return out


def _render_names() -> list[str]:
    """Names and message texts, for host code only (error messages, plan descriptions)."""
    ops = max(int(m) for m in Op) + 1
    codes = max(int(m) for m in ErrorCode) + 1
    out = ["// Names and texts (host code): index by Op, slot or ErrorCode value; nullptr where none is defined."]
    names = {int(op): name for op, name in OP_NAMES.items()}
    out += _c_table("const char*", "kOpNames", [_c_string(names[i]) if i in names else "nullptr" for i in range(ops)])
    out += [f"constexpr int32_t kNumOpNames = {ops};"]
    out += _c_table("const char*", "kSlotNames", [_c_string(n) for n in SLOTS])
    out += _c_table("const char*", "kErrorNames", [_c_string(ErrorCode(i).name) for i in range(codes)])
    out += _c_table("const char*", "kErrorTexts", [_c_string(ERROR_TEXTS.get(ErrorCode(i), "")) for i in range(codes)])
    out += _c_table("const char*", "kErrorDetails",
                    [_c_string(ERROR_DETAILS.get(ErrorCode(i), "")) for i in range(codes)])
    out += [f"constexpr int32_t kNumErrorCodes = {codes};",
            f"constexpr const char* kFlagWaitDetail = {_c_string(FLAG_WAIT_DETAIL)};",
            f"constexpr const char* kErrorMessage = {_c_string(ERROR_MESSAGE)};",
            f"constexpr const char* kTileWhere = {_c_string(TILE_WHERE)};",
            f"constexpr const char* kStepWaitWhere = {_c_string(STEP_WAIT_WHERE)};",
            f"constexpr const char* kNoTileWhere = {_c_string(NO_TILE_WHERE)};",
            f"constexpr const char* kUnnamedTileWhere = {_c_string(UNNAMED_TILE_WHERE)};",
            f"constexpr const char* kUnknownErrorName = {_c_string(UNKNOWN_ERROR_NAME)};",
            f"constexpr const char* kUnknownErrorText = {_c_string(UNKNOWN_ERROR_TEXT)};",
            f"constexpr const char* kUnknownErrorDetail = {_c_string(UNKNOWN_ERROR_DETAIL)};", ""]
    return out


def _render_layouts() -> list[str]:
    out = []
    for lay in LAYOUTS:
        out.append(f"struct {lay.name} {{")
        out += [f"  int32_t {f}{'' if lay.size(f) == 1 else f'[{lay.size(f)}]'};  // {meaning}"
                for f, meaning in lay.fields]
        out.append("};")
        out.append(f"static_assert(sizeof({lay.name}) == {lay.words} * 4, \"{lay.name} layout\");")
        out.append(f"constexpr int32_t k{lay.name}Words = {lay.words};")
        out.append("")
    return out


def _render_weight_rules() -> list[str]:
    """weight_entry / slot_shape / num_weights: the weights list's layout and shapes from the header alone."""
    cases = []
    for slot, (rows, cols) in SLOT_SHAPES.items():
        c = "0" if cols is None else DIM_EXPRESSIONS[cols]
        cases.append(f"    case kSlot{_camel(slot)}: *rows = {DIM_EXPRESSIONS[rows]}; *cols = {c}; return;")
    for slot, matrix in SCALE_SLOTS.items():
        rows, cols = (DIM_EXPRESSIONS[d] for d in SLOT_SHAPES[matrix])
        cases.append(f"    case kSlot{_camel(slot)}: scale_shape(h.scale_layout, {rows}, {cols}, rows, cols); return;")
    scaled = ["-1"] * len(SLOTS)
    for slot, matrix in SCALE_SLOTS.items():
        scaled[SLOT[matrix]] = f"kSlot{_camel(slot)}"
    model_mask = sum(1 << SLOT[s] for s in MODEL_SLOTS)
    scale_mask = sum(1 << SLOT[s] for s in SCALE_SLOTS)
    return [
        f"constexpr int32_t kModelSlotMask = {model_mask};",
        f"constexpr int32_t kScaleSlotMask = {scale_mask};  // the *_scale slots",
        "// Slots per layer, model slots (planner/weights.py: WeightLayout).",
        "inline int32_t popcount32(int32_t m) { int32_t n = 0; for (; m; m &= m - 1) ++n; return n; }",
        "inline int64_t num_weights(const Header& h) {",
        "  return int64_t(h.num_layers) * popcount32(h.layer_slots) + popcount32(kModelSlotMask);",
        "}",
        "// Slot and layer (-1: a model slot) of entry i of the weights list; false when i is out of range.",
        "inline bool weight_entry(const Header& h, int64_t i, int32_t* slot, int32_t* layer) {",
        "  const int64_t per = popcount32(h.layer_slots);",
        "  int32_t mask = h.layer_slots;",
        "  int64_t k = i;",
        "  *layer = -1;",
        "  if (i < 0) return false;",
        "  if (i < int64_t(h.num_layers) * per) {",
        "    *layer = int32_t(i / per);",
        "    k = i % per;",
        "  } else {",
        "    mask = kModelSlotMask;",
        "    k = i - int64_t(h.num_layers) * per;",
        "  }",
        "  for (int32_t s = 0; s < kNumSlots; ++s) {",
        "    if (!((mask >> s) & 1)) continue;",
        "    if (k-- == 0) { *slot = s; return true; }",
        "  }",
        "  return false;",
        "}",
        "// The scale slot of each slot (-1: a slot the FP8 formats keep in BF16; planner/format.py SCALE_SLOTS).",
        *_c_table("int32_t", "kScaleSlotOf", scaled),
        "// Rows and columns (0: a vector) of the scale tensor of a rows x cols matrix (format.py scale_shape).",
        "inline void scale_shape(int32_t layout, int64_t rows, int64_t cols, int64_t* srows, int64_t* scols) {",
        "  if (layout == kScalePerChannel) { *srows = rows; *scols = 0; return; }",
        "  if (layout == kScaleBlock128) {",
        "    *srows = (rows + kScaleBlockSize - 1) / kScaleBlockSize;",
        "    *scols = (cols + kScaleBlockSize - 1) / kScaleBlockSize;",
        "    return;",
        "  }",
        "  *srows = -1; *scols = -1;",
        "}",
        "// Entry of (slot, layer) in the weights list (layer ignored for a model slot); -1 where there is none.",
        "inline int64_t weight_index(const Header& h, int32_t slot, int32_t layer) {",
        "  if (slot < 0 || slot >= kNumSlots) return -1;",
        "  const int32_t below = (int32_t(1) << slot) - 1;",
        "  if ((kModelSlotMask >> slot) & 1) {",
        "    return int64_t(h.num_layers) * popcount32(h.layer_slots) + popcount32(kModelSlotMask & below);",
        "  }",
        "  if (!((h.layer_slots >> slot) & 1) || layer < 0 || layer >= h.num_layers) return -1;",
        "  return int64_t(layer) * popcount32(h.layer_slots) + popcount32(h.layer_slots & below);",
        "}",
        "// The DType a slot's tensor has in this header's weight format: the FP8 matrices h.weight_dtype, their",
        "// scales F32, every other slot BF16.",
        "inline int32_t slot_dtype(const Header& h, int32_t slot) {",
        "  if (slot < 0 || slot >= kNumSlots) return kDTypeBf16;",
        "  if ((kScaleSlotMask >> slot) & 1) return kDTypeF32;",
        "  return kScaleSlotOf[slot] >= 0 ? h.weight_dtype : kDTypeBf16;",
        "}",
        "// Rows and columns (0: a vector of `rows` elements) of a slot for this header's model.",
        "inline void slot_shape(const Header& h, int32_t slot, int64_t* rows, int64_t* cols) {",
        "  switch (slot) {",
        *cases,
        "    default: *rows = -1; *cols = -1; return;",
        "  }",
        "}",
        "",
    ]


def _render_rules() -> list[str]:
    """The shared rules of every executor: the attention partitions and the attention warp path's shapes."""
    hd = "#if defined(__CUDACC__)\n__host__ __device__\n#endif"
    return [
        "// Positions [lo, hi) of partition p when n positions are cached (planner/format.py: attn_partition_range).",
        hd,
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
        "// The sampler tensor's layout (planner/format.py: sampler_cand_offset, sampler_seen_offset, sampler_words).",
        hd,
        "constexpr int64_t sampler_cand_offset(int32_t slot) {",
        "  return kSamplerHeaderWords + int64_t(slot) * kCandSlotWords;",
        "}",
        hd,
        "constexpr int64_t sampler_seen_offset(int32_t lm_tiles) { return sampler_cand_offset(lm_tiles); }",
        hd,
        "constexpr int64_t seen_words(int32_t vocab) { return (int64_t(vocab) + 31) / 32; }",
        hd,
        "constexpr int64_t sampler_words(int32_t vocab, int32_t lm_tiles) {",
        "  return sampler_seen_offset(lm_tiles) + seen_words(vocab);",
        "}",
        "",
        "// Whether the CUDA kernel's attention warp path takes this shape (planner/format.py: attn_warps_fit).",
        hd,
        "constexpr bool attn_warps_fit(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim) {",
        "  return num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&",
        "         num_heads / num_kv_heads <= kAttnWarpsMaxGroup &&",
        f"         ({' || '.join(f'head_dim == {hd}' for hd in ATTN_WARPS_HEAD_DIMS)});",
        "}",
        "",
    ]


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
    ]
    out += _render_constants() + _render_enums() + _render_names() + _render_layouts() + _render_weight_rules()
    out += _render_rules()
    out += ["}  // namespace tiles", ""]
    return "\n".join(out)


if __name__ == "__main__":
    import pathlib
    import sys
    target = pathlib.Path(__file__).resolve().parent.parent / "csrc" / "generated" / "plan_format.h"
    if len(sys.argv) > 1:
        target = pathlib.Path(sys.argv[1])
    target.write_text(render_header())
    print(f"wrote {target}")
