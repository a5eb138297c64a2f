// The persistent decode kernel's launch interface: plain C++ and CUDA runtime types only (no torch), so the kernel's
// translation units compile with nvcc alone and the torch glue (decode_step_cuda.cpp) only fills this struct.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "plan_format.h"

namespace tiles {
namespace cuda {

// Compile-time switch of the per-tile timestamps (off in the product build: no code, no cost). scripts/tile_timing.py
// builds its own library with it on.
#ifndef TILE_TIMING
#define TILE_TIMING 0
#endif

constexpr int kThreads = 512;          // threads per worker block (16 warps)
constexpr int kWarps = kThreads / 32;
// Bounds the by-value pointer tables below (kernel params up to 32 KB): the deepest served models that fit one GPU in
// BF16 (Qwen3-32B) have 64 layers.
constexpr int kMaxLayers = 64;
// Weight pointers passed by value: every layer slot of a BF16 plan (kMaxBf16LayerSlots: Llama's 9, the q/k/v biases
// and the q/k norms) for kMaxLayers layers, plus the model's final ones. An FP8 plan's list also holds the 7 scale
// tensors of each layer, so it fits up to ~47 layers (every served FP8 shape up to 8B has 36 or fewer); the op
// refuses a plan with more (h.num_weights) by name.
constexpr int kMaxWeights = kMaxLayers * kMaxBf16LayerSlots + (kNumSlots - kMaxLayerSlots);
// kAttnChunkElems (plan_format.h): KV positions staged per attention chunk = kAttnChunkElems / head_dim.
// 16-byte weight chunks per lane and row issued before the first use: with two rows, kUnroll x 16 KB in flight per
// SM. The flag-hand-off kernels (given to small models, whose stages are hand-off bound) measured 1% faster on
// SmolLM2 at 3, while Llama-1B's counter kernel loses 5% at 3. The host sizes shared memory with kUnroll 4's stage,
// which holds the smaller one.
#ifdef TILE_FLAG_HANDOFF
constexpr int kUnroll = 3;
#else
constexpr int kUnroll = 4;
#endif
// A k-split slice holds at least kSplitMinChunks 16-byte chunks of a row, three per lane (matvec_shape). One value
// for both hand-offs:
// the split sets the order in which a row's fp32 partial sums are added, so a kUnroll-dependent split made the
// counter and flag kernels round differently on tiles of few rows and many columns.
constexpr int kSplitMinChunks = 32 * 3;
// Per-tile timestamps (TILE_TIMING builds): start (before staging and the wait), wait done, signalled, then two phase
// marks inside the tile (matvec: input vector ready, arithmetic done; ATTN: q, the new row and the first chunk ready,
// chunk loop done; MERGE: scale factors ready, output written) and just before the signal. 0 = not reached.
constexpr int kTileTimes = 6;
enum : int { kTimeStart = 0, kTimeWaited = 1, kTimeSignalled = 2, kTimePhase1 = 3, kTimePhase2 = 4, kTimeDone = 5 };
constexpr int kNormRegs = 8;           // residual elements per thread held in registers by the one-read RMSNorm
constexpr int kStageBytesPerWarp = 2 * kUnroll * 32 * 16;  // one staged batch of two rows per warp
// Opt-in shared memory per block on sm_90 (227 KB), less 1 KB for the kernel's static shared variables.
constexpr int32_t kMaxSmemPerBlock = 227 * 1024 - 1024;
// An o-projection tile right after an ATTN tile stages warp w's first batch w x kPaceOCycles SM cycles after the tile
// starts (run_tile says why); 200 measured best at context 32 against 0, 100-250 and 400.
constexpr int32_t kPaceOCycles = 200;

// Per local tile, a record of kPlanRecWords in shared memory: the Tile (18 words), then up to kPlanRecWaits Wait
// records (a tile with more waits reads them from the blob). 96 bytes, a multiple of 16.
constexpr int kPlanRecWaits = 2;
constexpr int kPlanRecWords = kTileWords + kPlanRecWaits * kWaitWords;
static_assert(kPlanRecWords % 4 == 0, "plan records are read as 16-byte vectors");

// Dynamic shared memory layout (bytes), identical on host (sizing) and device (carving).
struct SmemLayout {
  int32_t vec;      // bf16 input vector of a matvec tile [max_in]
  int32_t red;      // fp32 partials of k-split rows [2 * kWarps]
  int32_t qf;       // fp32 rotated q [G][hd + 4] (padded: the G heads' rows start in different banks)
  int32_t of;       // fp32 o combined over the warps [G * hd]
  int32_t opart;    // fp32 o slots of the warps that hold positions [attn_slot_warps(hd)][hd / 8][4 G] float2
                    // (attn_tc_oidx); before the chunk loop the q/k norm's bf16 heads [G + 2][hd] (attn_norm_rotate)
  int32_t ml;       // fp32 m, l per head [2 * G]
  int32_t cs;       // fp32 cos, sin [hd]
  int32_t sc;       // fp32 warps' (m, l) [kWarps][G][2], then q's fragments [hd / 16][4 G] uint4 (hd x G floats)
  int32_t kbuf;     // bf16 K chunk [attn_chunk_rows][hd + 8] (padded against bank conflicts)
  int32_t vbuf;     // bf16 V chunk [attn_chunk_rows][attn_vstride(hd)]
  int32_t kbuf2;    // the attention's second K chunk (as kbuf); -1 when it does not fit
  int32_t vbuf2;    // its second V chunk (as vbuf); -1 when it does not fit
  int32_t msf;      // fp32 merge scale factors [G * P]
  int32_t rsd;      // fp32 residual rows of a RESID tile [hidden]; a QKV tile's bf16 bias words (stage_first_batch)
  int32_t stage;    // staged first weight batches [kWarps][kStageBytesPerWarp]
  int32_t ptab;     // buffer byte offsets [num_buffers], then weight widths [num_weights]; at 0
  int32_t prec;     // the worker's tile records [tiles_cap][kPlanRecWords]
  int32_t tiles_cap;  // local tile records that fit (a worker with more reads its tiles from the blob)
  int32_t total;
  int32_t chunk;    // positions per attention chunk
};

// Everything the kernel reads, passed BY VALUE (one struct kernel parameter): a CUDA graph that captures the
// launch needs no host-to-device copy, and replays see the same pointers.
struct KernelParams {
  const int32_t* plan;        // the blob on the device
  uint8_t* scratch;           // scratch arena (buffers of the plan)
  uint32_t* state;            // epoch, error words, counters (monotonic, never reset by the host)
  const int64_t* input_ids;   // [1]
  const int64_t* position;    // [1]
  const float* inv_freq;      // [head_dim / 2]
  float* logits;              // [num_steps, vocab]
  int64_t* tokens;            // [num_steps]
  float rope_scale;
  float eps;
  int32_t num_steps;
  int32_t num_eos;
  int32_t eos[kMaxEos];
  int32_t max_cache_len;
  // Host copy of the header (the device blob is checked against magic / total_words / num_tiles at start).
  Header h;
  uint64_t timeout_ns;        // bound of every spin-wait
  // Per-tile timing (TILE_TIMING builds only; scripts/tile_timing.py): kTileTimes %globaltimer values at
  // [((step * num_workers + worker) * tile_times_stride + k) * kTileTimes + i] for the worker's k-th tile (i:
  // kTime*). Null (and ignored) in the product build.
  unsigned long long* tile_times;
  int32_t tile_times_stride;
  const uint16_t* weights[kMaxWeights];  // bf16 bit patterns, plan weight order
  uint16_t* k_cache[kMaxLayers];         // per layer [num_kv_heads, max_cache_len, head_dim] bf16
  uint16_t* v_cache[kMaxLayers];
  // smem_layout of the launched kernel, filled by its launch (launch_cooperative): the counter kernels read the
  // offsets from the parameter (constant) bank where they use them. Computed in the kernel, ~20 of them stayed live
  // in registers for the whole launch, and at the 128-register bound the allocator spilled some into the tile loop.
  SmemLayout layout;
  // The op's sampler tensor (planner/format.py "Sampling"; sampler_words(vocab, lm_tiles) words, 16-byte aligned),
  // or null: the LMHEAD and ARGMAX tiles then run without it. Last, so that no other field's offset moves.
  int32_t* sampler;
  // FP8 plans: for weight w, the index in `weights` of its fp32 scale tensor (the E4M3 layer matrices), else -1.
  // After every other field, so that no BF16 kernel's parameter offsets move.
  int16_t scale_of[kMaxWeights];
  // A pass of several rows (the rows kernels, decode_rows.cuh; planner/format.py "Rows"): its rows (input_ids,
  // logits and tokens hold that many), and whether the arena is flagged (the rows then lie 2 * row_bytes into it, and
  // the counters other than ARGMAX's run on state[ROWS_PASSES]). After every other field, so that no one-row kernel's
  // parameter offsets move.
  int32_t rows;
  int32_t rows_flagged;
  // Prompt lookup (tiles::prompt_lookup, planner/format.py "Prompt lookup"): lookup_budget > 0 makes the rows kernel
  // run rounds of draft, pass and acceptance over `history` (lookup_length ids at the start; the accepted tokens are
  // appended) until lookup_budget tokens are accepted (into `tokens`), an EOS id is, or the cache has no room;
  // lookup_rounds[0] gets the rounds run. `logits` is then a [kMaxRows, vocab] scratch. After every other field, so
  // that no other kernel's parameter offsets move.
  int64_t* history;
  int64_t* lookup_rounds;
  int32_t lookup_length;
  int32_t lookup_budget;
  int32_t lookup_draft;  // draft tokens per round at most (prompt_lookup_num_tokens)
  int32_t lookup_ngram;  // the longest n-gram matched (max_matching_ngram_size)
};
static_assert(sizeof(KernelParams) <= 32000, "kernel parameters are limited to 32 KB (CUDA 12.1+)");

// Row stride (elements) of a staged V chunk, padded as K's is: the tensor-core warp path's ldmatrix.trans reads take
// 8 rows at once, conflict-free only with the pad.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int32_t attn_vstride(int32_t hd) {
  return hd + 8;
}

// The attention's warp path holds 8 positions per warp in a chunk of kAttnChunkElems / hd positions (128 at head_dim
// 64, 85 at 96, 64 at 128). Its warps with positions (those with o and (m, l) slots) and the rows of a staged chunk
// (the last warp's ldmatrix reads 8 rows, past a chunk of 85).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int32_t attn_slot_warps(int32_t hd) {
  return (kAttnChunkElems / hd + 7) / 8 < kWarps ? (kAttnChunkElems / hd + 7) / 8 : kWarps;
}
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int32_t attn_chunk_rows(int32_t hd) {
  return (kAttnChunkElems / hd + 7) / 8 * 8;
}

#if defined(__CUDACC__)
__host__ __device__
#endif
inline SmemLayout smem_layout(const Header& h) {
  auto up16 = [](int32_t x) { return (x + 15) / 16 * 16; };
  SmemLayout s;
  const int32_t G = h.num_heads / h.num_kv_heads, hd = h.head_dim;
  int32_t max_in = h.hidden;
  if (h.num_heads * hd > max_in) max_in = h.num_heads * hd;
  if (h.intermediate > max_in) max_in = h.intermediate;
  s.chunk = kAttnChunkElems / hd;
  const int32_t rows = attn_chunk_rows(hd);
  int32_t o = 0;
  // The plan tables come first (offset 0): buffer_ptr / weight_cols find them without the layout.
  s.ptab = o; o += up16((h.num_buffers + h.num_weights) * 4);
  {
    const int32_t per = (h.num_tiles + h.num_workers - 1) / (h.num_workers > 0 ? h.num_workers : 1);
    int32_t cap = per + per / 2 + 16;
    if (cap > 1024) cap = 1024;
    s.tiles_cap = cap;
  }
  s.prec = o; o += s.tiles_cap * kPlanRecWords * 4;
  s.vec = o; o += up16(max_in * 2);
  s.red = o; o += up16(2 * kWarps * 4);
  s.qf = o; o += up16(G * (hd + 4) * 4);
  s.of = o; o += up16(G * hd * 4);
  s.opart = o; o += up16(attn_slot_warps(hd) * G * hd * 4);
  s.ml = o; o += up16(2 * G * 4);
  s.cs = o; o += up16(hd * 4);
  s.sc = o; o += up16((kWarps * 2 * G + hd * G) * 4);
  s.kbuf = o; o += up16(rows * (hd + 8) * 2);
  s.vbuf = o; o += up16(rows * attn_vstride(hd) * 2);
  s.msf = o; o += up16(G * h.attn_partitions * 4);
  // A QKV tile's bias words cover its rows (at most q's: one weight per tile) and one bf16 either side.
  const int32_t bias_bytes = (h.num_heads * hd + 2) * 2;
  s.rsd = o; o += up16(h.hidden * 4 > bias_bytes ? h.hidden * 4 : bias_bytes);
  s.stage = o;
  o += kWarps * kStageBytesPerWarp;
  // The attention's second K/V chunk (its double buffer) reuses the weight stage: a matvec tile stages only its own
  // batch and consumes it within the tile, so the stage is idle during an ATTN tile. Where it does not fit there it
  // is appended last (every other offset unchanged), where it fits. Both ways vbuf2 - vbuf = kbuf2 - kbuf
  // (attn_tile swaps the buffers by one offset); -1: single-buffered.
  const int32_t kv2 = up16(rows * (hd + 8) * 2) + up16(rows * attn_vstride(hd) * 2);
  s.kbuf2 = s.vbuf2 = -1;
  if (kv2 <= kWarps * kStageBytesPerWarp) {
    s.kbuf2 = s.stage;
  } else if (o + kv2 <= kMaxSmemPerBlock) {
    s.kbuf2 = o;
    o += kv2;
  }
  if (s.kbuf2 >= 0) s.vbuf2 = s.kbuf2 + up16(rows * (hd + 8) * 2);
  s.total = o;
  return s;
}

// The rows kernels' layout (decode_rows.cuh): the one-row layout's plan tables and attention buffers, no weight
// stage, k-split partials of every row in `red` (then the rows' RMSNorm scales), every row's rotated q in `qf` and
// RoPE tables in `cs`, the new K/V rows of every row (and the k-norm's staging) in `rsd`, and last `vec`: the inputs of all rows as
// [rows][block columns] bf16, kRowsVecBytes in all. A pass of R rows stages its inputs in column blocks of
// kRowsVecBytes / (2 R) columns (rows_matvec): at 8 rows of Llama-8B's 14336-wide down projection input (229 KB)
// that is 4 blocks of 4096 columns, at 2 rows one block of 14336. 64 KB: the bytes the one-row layout gives its weight
// stage, which the rows kernels do not have, so that both leave the same L1 beside shared memory.
constexpr int32_t kRowsVecBytes = 64 * 1024;
#if defined(__CUDACC__)
__host__ __device__
#endif
inline SmemLayout smem_layout_rows(const Header& h) {
  auto up16 = [](int32_t x) { return (x + 15) / 16 * 16; };
  SmemLayout s;
  const int32_t G = h.num_heads / h.num_kv_heads, hd = h.head_dim;
  s.chunk = kAttnChunkElems / hd;
  const int32_t rows = attn_chunk_rows(hd);
  int32_t o = 0;
  s.ptab = o; o += up16((h.num_buffers + h.num_weights) * 4);
  {
    const int32_t per = (h.num_tiles + h.num_workers - 1) / (h.num_workers > 0 ? h.num_workers : 1);
    int32_t cap = per + per / 2 + 16;
    if (cap > 1024) cap = 1024;
    s.tiles_cap = cap;
  }
  s.prec = o; o += s.tiles_cap * kPlanRecWords * 4;
  s.red = o; o += up16((2 * kWarps + 1) * kMaxRows * 4);
  s.qf = o; o += up16(kMaxRows * G * (hd + 4) * 4);
  s.of = o; o += up16(G * hd * 4);
  s.opart = o; o += up16(attn_slot_warps(hd) * G * hd * 4);
  s.ml = o; o += up16(2 * G * 4);
  s.cs = o; o += up16(kMaxRows * hd * 4);
  s.sc = o; o += up16((kWarps * 2 * G + hd * G) * 4);
  s.kbuf = o; o += up16(rows * (hd + 8) * 2);
  s.vbuf = o; o += up16(rows * attn_vstride(hd) * 2);
  s.msf = o; o += up16(G * h.attn_partitions * 4);
  s.rsd = o; o += up16(3 * kMaxRows * hd * 2);
  s.stage = o;
  s.kbuf2 = s.vbuf2 = -1;
  s.vec = o; o += kRowsVecBytes;
  s.total = o;
  return s;
}

// The sampler's shared memory (sampler.cuh). An LMHEAD tile uses the weight stage (idle after its matvec): a
// histogram, a few words, and its processed scores where the rows do not stay in rsd. The ARGMAX tile uses
// everything after the plan tables ([vec, total): no tile leaves state there for the next): the outcome, then the
// merge's tables (samp_merge_layout), then the candidates' keys and ids.
constexpr int32_t kSampHistWords = 256;  // radix-select histogram
constexpr int32_t kSampMiscWords = 16;   // digits, counters, the lowest bad id, sums
constexpr int32_t kSampOutcomeBytes = 16;
struct SampMergeLayout {
  int32_t hist, misc, counts, offs, qoffs, skey, v, ids, e, pr, keep, keys;  // byte offsets in the region
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline SampMergeLayout samp_merge_layout(int32_t lm_tiles) {
  auto up = [](int32_t x, int32_t a) { return (x + a - 1) / a * a; };
  SampMergeLayout m;
  int32_t o = 0;
  m.hist = o; o += 4 * kSampHistWords;
  m.misc = o; o += 4 * kSampMiscWords;
  m.counts = o; o += 4 * lm_tiles;
  m.offs = o; o += 4 * (lm_tiles + 1);
  m.qoffs = o; o += 4 * (lm_tiles + 1);
  o = up(o, 8);
  m.skey = o; o += 8 * kKeptCap;
  m.v = o; o += 4 * kKeptCap;
  m.ids = o; o += 4 * kKeptCap;
  m.e = o; o += 4 * kKeptCap;
  m.pr = o; o += 4 * kKeptCap;
  m.keep = o; o += kKeptCap;
  m.keys = up(o, 16);
  return m;
}
// Bytes the ARGMAX tile's merge needs in the region after the outcome, for top_k up to CAND_CAP without ties: the
// tables, then a key and an id per candidate (more candidates than the region holds: SAMPLER_OVERFLOW at run time).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t samp_merge_bytes(int32_t lm_tiles) {
  return samp_merge_layout(lm_tiles).keys + int64_t(8) * lm_tiles * kCandCap;
}

// The attention's warp path takes every shape the op serves (plan_format.h attn_warps_fit, from planner/format.py):
// G <= kAttnWarpsMaxGroup query heads per KV head as the fragment rows (lane >> 2), head_dim one of
// TILE_ATTN_HEAD_DIMS, each with its own kernels. The op refuses other shapes by name (decode_step_cuda.cpp).
static_assert(kAttnWarpsMaxGroup <= 8, "the warp path's fragment rows (lane >> 2) hold the heads");
#define TILE_CHUNK_FITS(HD)                                                                                 \
  static_assert(attn_slot_warps(HD) * 8 >= kAttnChunkElems / (HD) && (HD) % 32 == 0,                    \
                "a chunk's positions are 8 per warp; ldmatrix blocks of 32 dims");
TILE_ATTN_HEAD_DIMS(TILE_CHUNK_FITS)
#undef TILE_CHUNK_FITS

// The kernels, one translation unit each (decode_kernel.cuh holds their code): counter or flag-in-data hand-offs
// (flag_data.cuh: every scratch element carries the step's epoch and consumers poll their input words instead of
// counters; it wins where hand-offs dominate, SmolLM2 -11%, and loses where weight streams do, Llama-1B +9.5%, so the
// runtime chooses per model: tiles_ext/runtime.py choose_handoff), each for one head_dim of the attention's warp path
// (decode_kernel_<hand-off>_hd<head_dim>.cu), and the same with the sampler (TILE_SAMPLER,
// decode_kernel_<hand-off>_hd<head_dim>_sampler.cu: the LMHEAD and ARGMAX tiles take the op's sampler tensor),
// launched for calls that pass one, so that the kernels without it keep their code exactly. A translation unit per
// kernel, so that no kernel's code changes another's code generation. Each exports its shared-memory limit setter,
// occupancy query and cooperative launch.
#define TILE_DECLARE_KERNEL(NAME)                                    \
  cudaError_t NAME##_set_smem_limit(int32_t bytes);                  \
  cudaError_t NAME##_blocks_per_sm(int32_t smem_bytes, int* blocks); \
  cudaError_t NAME##_launch(const KernelParams& p, cudaStream_t stream);
#define TILE_DECLARE_KERNELS(HD)                          \
  TILE_DECLARE_KERNEL(decode_counters_hd##HD)             \
  TILE_DECLARE_KERNEL(decode_flags_hd##HD)                \
  TILE_DECLARE_KERNEL(decode_counters_hd##HD##_sampler)   \
  TILE_DECLARE_KERNEL(decode_flags_hd##HD##_sampler)      \
  TILE_DECLARE_KERNEL(decode_counters_hd##HD##_fp8)       \
  TILE_DECLARE_KERNEL(decode_counters_hd##HD##_fp8_sampler)
TILE_ATTN_HEAD_DIMS(TILE_DECLARE_KERNELS)
#undef TILE_DECLARE_KERNELS
// The rows kernels (decode_kernel_rows_hd<head_dim>.cu, decode_rows.cuh): a pass of several rows, counter hand-offs,
// BF16 plans, no sampler. Kernels of their own, so that the one-row kernels keep their code exactly.
// The prompt-lookup kernels (decode_kernel_lookup_hd<head_dim>.cu: decode_rows.cuh with TILE_LOOKUP) run every
// round of a tiles::prompt_lookup launch: kernels of their own, so that the rows kernels keep their code.
#define TILE_DECLARE_ROWS_KERNELS(HD) \
  TILE_DECLARE_KERNEL(decode_rows_hd##HD) \
  TILE_DECLARE_KERNEL(decode_lookup_hd##HD)
TILE_ATTN_HEAD_DIMS(TILE_DECLARE_ROWS_KERNELS)
#undef TILE_DECLARE_ROWS_KERNELS
#undef TILE_DECLARE_KERNEL

// tiles::sample_logits on the GPU (sample_kernel.cu): the sampler's LMHEAD share on lm_tiles even slices of the row
// (one block each), then its ARGMAX merge (one block), with the decode kernels' device functions (sampler.cuh).
// sampler: a copy the call may write (its candidate slots); kept: vocab bytes, zeroed; token: [1]; status: [3]
// (ErrorCode, seen, wanted). Stream-ordered, no host sync.
cudaError_t sample_logits_launch(const float* logits, int32_t vocab, int32_t lm_tiles, int32_t* sampler,
                                 int64_t position, uint8_t* kept, int64_t* token, int32_t* status,
                                 cudaStream_t stream);

// Sets every kernel's dynamic shared-memory limit on the current device (the glue only ever raises it, once per new
// maximum, so no attribute call happens inside a CUDA-graph capture once a size has been seen).
inline cudaError_t decode_set_smem_limit(int32_t bytes) {
  cudaError_t e = cudaSuccess;
#define TILE_SET_LIMIT(HD)                                                            \
  if (e == cudaSuccess) e = decode_counters_hd##HD##_set_smem_limit(bytes);         \
  if (e == cudaSuccess) e = decode_flags_hd##HD##_set_smem_limit(bytes);            \
  if (e == cudaSuccess) e = decode_counters_hd##HD##_sampler_set_smem_limit(bytes); \
  if (e == cudaSuccess) e = decode_flags_hd##HD##_sampler_set_smem_limit(bytes);   \
  if (e == cudaSuccess) e = decode_counters_hd##HD##_fp8_set_smem_limit(bytes);     \
  if (e == cudaSuccess) e = decode_counters_hd##HD##_fp8_sampler_set_smem_limit(bytes);
  TILE_ATTN_HEAD_DIMS(TILE_SET_LIMIT)
#undef TILE_SET_LIMIT
  return e;
}

// Blocks that fit on one SM with `smem_bytes` of dynamic shared memory (0 = none), the fewest over the kernels.
inline cudaError_t decode_blocks_per_sm(int32_t smem_bytes, int* blocks) {
  cudaError_t e = cudaSuccess;
  int fewest = 1 << 30;
  auto take = [&](cudaError_t (*query)(int32_t, int*)) {
    int n = 0;
    if (e == cudaSuccess) e = query(smem_bytes, &n);
    if (n < fewest) fewest = n;
  };
#define TILE_BLOCKS(HD)                                 \
  take(decode_counters_hd##HD##_blocks_per_sm);         \
  take(decode_flags_hd##HD##_blocks_per_sm);            \
  take(decode_counters_hd##HD##_sampler_blocks_per_sm); \
  take(decode_flags_hd##HD##_sampler_blocks_per_sm);   \
  take(decode_counters_hd##HD##_fp8_blocks_per_sm);     \
  take(decode_counters_hd##HD##_fp8_sampler_blocks_per_sm);
  TILE_ATTN_HEAD_DIMS(TILE_BLOCKS)
#undef TILE_BLOCKS
  *blocks = e == cudaSuccess ? fewest : 0;
  return e;
}

// Launches the persistent kernel for this plan's head_dim (cooperative: all num_workers blocks co-resident) on
// `stream`. The shared-memory limit must already allow smem_layout(p.h).total. `flagged`: the scratch arena has the
// flagged layout (every element with its epoch, twice the plan's bytes), and hand-offs go by flag-in-data words.
// p.sampler != null: the sampler kernels. An FP8 plan (h.weight_dtype): the FP8 kernels (counter hand-offs only;
// the op refuses a flagged arena for one first).
inline cudaError_t launch_decode(const KernelParams& p, cudaStream_t stream, bool flagged) {
  const bool sampler = p.sampler != nullptr;
  const bool fp8 = p.h.weight_dtype == kDTypeF8e4m3;
  switch (p.h.head_dim) {
#define TILE_LAUNCH(HD)                                                                                   \
    case HD:                                                                                            \
      if (fp8)                                                                                          \
        return sampler ? decode_counters_hd##HD##_fp8_sampler_launch(p, stream)                         \
                       : decode_counters_hd##HD##_fp8_launch(p, stream);                                \
      if (sampler)                                                                                      \
        return flagged ? decode_flags_hd##HD##_sampler_launch(p, stream)                                \
                       : decode_counters_hd##HD##_sampler_launch(p, stream);                            \
      return flagged ? decode_flags_hd##HD##_launch(p, stream) : decode_counters_hd##HD##_launch(p, stream);
    TILE_ATTN_HEAD_DIMS(TILE_LAUNCH)
#undef TILE_LAUNCH
    default:
      return cudaErrorInvalidValue;  // the op refuses other head_dims first (decode_step_cuda.cpp)
  }
}

// The rows kernels' shared-memory limit, occupancy (the fewest blocks over them) and launch (p.rows rows; the
// layout's smem_layout_rows(p.h).total must be allowed).
inline cudaError_t decode_rows_set_smem_limit(int32_t bytes) {
  cudaError_t e = cudaSuccess;
#define TILE_SET_ROWS_LIMIT(HD) \
  if (e == cudaSuccess) e = decode_rows_hd##HD##_set_smem_limit(bytes);
  TILE_ATTN_HEAD_DIMS(TILE_SET_ROWS_LIMIT)
#undef TILE_SET_ROWS_LIMIT
  return e;
}

inline cudaError_t decode_rows_blocks_per_sm(int32_t smem_bytes, int* blocks) {
  cudaError_t e = cudaSuccess;
  int fewest = 1 << 30;
#define TILE_ROWS_BLOCKS(HD)                                                     \
  {                                                                              \
    int n = 0;                                                                   \
    if (e == cudaSuccess) e = decode_rows_hd##HD##_blocks_per_sm(smem_bytes, &n); \
    if (n < fewest) fewest = n;                                                  \
  }
  TILE_ATTN_HEAD_DIMS(TILE_ROWS_BLOCKS)
#undef TILE_ROWS_BLOCKS
  *blocks = e == cudaSuccess ? fewest : 0;
  return e;
}

// The same for the prompt-lookup kernels (the rows kernels' layout: smem_layout_rows).
inline cudaError_t decode_lookup_set_smem_limit(int32_t bytes) {
  cudaError_t e = cudaSuccess;
#define TILE_SET_LOOKUP_LIMIT(HD) \
  if (e == cudaSuccess) e = decode_lookup_hd##HD##_set_smem_limit(bytes);
  TILE_ATTN_HEAD_DIMS(TILE_SET_LOOKUP_LIMIT)
#undef TILE_SET_LOOKUP_LIMIT
  return e;
}

inline cudaError_t decode_lookup_blocks_per_sm(int32_t smem_bytes, int* blocks) {
  cudaError_t e = cudaSuccess;
  int fewest = 1 << 30;
#define TILE_LOOKUP_BLOCKS(HD)                                                     \
  {                                                                                \
    int n = 0;                                                                     \
    if (e == cudaSuccess) e = decode_lookup_hd##HD##_blocks_per_sm(smem_bytes, &n); \
    if (n < fewest) fewest = n;                                                    \
  }
  TILE_ATTN_HEAD_DIMS(TILE_LOOKUP_BLOCKS)
#undef TILE_LOOKUP_BLOCKS
  *blocks = e == cudaSuccess ? fewest : 0;
  return e;
}

inline cudaError_t launch_decode_lookup(const KernelParams& p, cudaStream_t stream) {
  switch (p.h.head_dim) {
#define TILE_LAUNCH_LOOKUP(HD) \
    case HD:                   \
      return decode_lookup_hd##HD##_launch(p, stream);
    TILE_ATTN_HEAD_DIMS(TILE_LAUNCH_LOOKUP)
#undef TILE_LAUNCH_LOOKUP
    default:
      return cudaErrorInvalidValue;  // the op refuses other head_dims first (decode_step_cuda.cpp)
  }
}

inline cudaError_t launch_decode_rows(const KernelParams& p, cudaStream_t stream) {
  switch (p.h.head_dim) {
#define TILE_LAUNCH_ROWS(HD) \
    case HD:                 \
      return decode_rows_hd##HD##_launch(p, stream);
    TILE_ATTN_HEAD_DIMS(TILE_LAUNCH_ROWS)
#undef TILE_LAUNCH_ROWS
    default:
      return cudaErrorInvalidValue;  // the op refuses other head_dims first (decode_step_cuda.cpp)
  }
}

}  // namespace cuda
}  // namespace tiles
