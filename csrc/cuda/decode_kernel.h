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
constexpr int kMaxLayers = 64;         // bounds the by-value pointer tables below (kernel params up to 32 KB)
// Weight pointers passed by value: 9 per layer (Llama's slots) plus the model's 3 final ones. The op refuses a plan
// with more (h.num_weights).
constexpr int kMaxWeights = kMaxLayers * 9 + 3;
constexpr int kMaxGroup = kWarps;      // query heads per KV head: one warp per head in the softmax update
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
  int32_t of;       // fp32 running o [G * hd]
  int32_t opart;    // fp32 o partials of the position groups [splits * G * hd]
  int32_t ml;       // fp32 m, l, alpha per head [4 * G]
  int32_t cs;       // fp32 cos, sin [hd]
  int32_t sc;       // fp32 scores / probabilities [chunk * G]
  int32_t kbuf;     // bf16 K chunk [chunk][hd + 8] (padded against bank conflicts)
  int32_t vbuf;     // bf16 V chunk [chunk][attn_vstride(hd)]
  int32_t kbuf2;    // the attention's second K chunk (as kbuf); -1 when it does not fit
  int32_t vbuf2;    // its second V chunk (as vbuf); -1 when it does not fit
  int32_t msf;      // fp32 merge scale factors [G * P]
  int32_t rsd;      // fp32 residual rows of a RESID tile [hidden]
  int32_t stage;    // staged first weight batches [kWarps][kStageBytesPerWarp]
  int32_t ptab;     // buffer byte offsets [num_buffers], then weight widths [num_weights]; at 0
  int32_t prec;     // the worker's tile records [tiles_cap][kPlanRecWords]
  int32_t tiles_cap;  // local tile records that fit (a worker with more reads its tiles from the blob)
  int32_t total;
  int32_t chunk;    // positions per attention chunk
  int32_t splits;   // position groups of the o update
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
  // attn_tile's o partials: one thread per (split, head, 8 dims); the splits cover a chunk's positions.
  s.splits = G * hd / 8 >= kThreads ? 1 : kThreads / (G * hd / 8);
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
  s.opart = o; o += up16(s.splits * G * hd * 4);
  s.ml = o; o += up16(4 * G * 4);
  s.cs = o; o += up16(hd * 4);
  s.sc = o; o += up16(G * (s.chunk + 8) * 4);
  s.kbuf = o; o += up16(s.chunk * (hd + 8) * 2);
  s.vbuf = o; o += up16(s.chunk * attn_vstride(hd) * 2);
  s.msf = o; o += up16(G * h.attn_partitions * 4);
  s.rsd = o; o += up16(h.hidden * 4);
  s.stage = o;
  o += kWarps * kStageBytesPerWarp;
  // The attention's second K/V chunk (its double buffer) reuses the weight stage: a matvec tile stages only its own
  // batch and consumes it within the tile, so the stage is idle during an ATTN tile. Where it does not fit there it
  // is appended last (every other offset unchanged), where it fits. Both ways vbuf2 - vbuf = kbuf2 - kbuf
  // (attn_tile swaps the buffers by one offset); -1: single-buffered.
  const int32_t kv2 = up16(s.chunk * (hd + 8) * 2) + up16(s.chunk * attn_vstride(hd) * 2);
  s.kbuf2 = s.vbuf2 = -1;
  if (kv2 <= kWarps * kStageBytesPerWarp) {
    s.kbuf2 = s.stage;
  } else if (o + kv2 <= kMaxSmemPerBlock) {
    s.kbuf2 = o;
    o += kv2;
  }
  if (s.kbuf2 >= 0) s.vbuf2 = s.kbuf2 + up16(s.chunk * (hd + 8) * 2);
  s.total = o;
  return s;
}

// The attention's warp path takes G <= kAttnWarpsMaxGroup query heads per KV head and head_dim kAttnWarpsHeadDim
// (plan_format.h, from planner/format.py, whose attn_warps_fit is this rule for Python): 8 positions per warp in a
// chunk, one lane per 8 dims of o, the 16 warps' states where the o partials go. Llama-3.2-1B (G 4), SmolLM2 (G 3).
// Other shapes run the five-step chunk loop, in kernels of their own (decode_kernel_*_fivestep.cu): compiled beside
// the warp path, its code cost the warp path's kernel registers and instruction-fetch locality.
static_assert(kAttnChunkElems / kAttnWarpsHeadDim == 8 * kWarps, "the warp path takes 8 positions per warp");
static_assert(kAttnWarpsMaxGroup * kAttnWarpsHeadDim / 8 <= 32 && kAttnWarpsMaxGroup <= 4,
              "the warp path keeps one lane per 8 dims of o and 4 heads x 8 positions in a warp's scores");
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr bool attn_warps_fit(const Header& h) {
  return tiles::attn_warps_fit(h.num_heads, h.num_kv_heads, h.head_dim);
}

// The four kernels, one translation unit each (decode_kernel.cuh holds their code): counter or flag-in-data
// hand-offs (flag_data.cuh: every scratch element carries the step's epoch and consumers poll their input words
// instead of counters; it wins where hand-offs dominate, SmolLM2 -11%, and loses where weight streams do, Llama-1B
// +9.5%, so the runtime chooses per model: tiles_ext/runtime.py choose_handoff), each with the attention's warp
// path or with the five-step chunk loop. A translation unit per kernel, so that no kernel's code changes another's
// code generation. Each exports its shared-memory limit setter, occupancy query and cooperative launch.
cudaError_t decode_counters_set_smem_limit(int32_t bytes);
cudaError_t decode_counters_blocks_per_sm(int32_t smem_bytes, int* blocks);
cudaError_t decode_counters_launch(const KernelParams& p, cudaStream_t stream);
cudaError_t decode_counters_fivestep_set_smem_limit(int32_t bytes);
cudaError_t decode_counters_fivestep_blocks_per_sm(int32_t smem_bytes, int* blocks);
cudaError_t decode_counters_fivestep_launch(const KernelParams& p, cudaStream_t stream);
cudaError_t decode_flags_set_smem_limit(int32_t bytes);
cudaError_t decode_flags_blocks_per_sm(int32_t smem_bytes, int* blocks);
cudaError_t decode_flags_launch(const KernelParams& p, cudaStream_t stream);
cudaError_t decode_flags_fivestep_set_smem_limit(int32_t bytes);
cudaError_t decode_flags_fivestep_blocks_per_sm(int32_t smem_bytes, int* blocks);
cudaError_t decode_flags_fivestep_launch(const KernelParams& p, cudaStream_t stream);

// Sets every kernel's dynamic shared-memory limit on the current device (the glue only ever raises it, once per new
// maximum, so no attribute call happens inside a CUDA-graph capture once a size has been seen).
inline cudaError_t decode_set_smem_limit(int32_t bytes) {
  cudaError_t e = decode_counters_set_smem_limit(bytes);
  if (e == cudaSuccess) e = decode_counters_fivestep_set_smem_limit(bytes);
  if (e == cudaSuccess) e = decode_flags_set_smem_limit(bytes);
  if (e == cudaSuccess) e = decode_flags_fivestep_set_smem_limit(bytes);
  return e;
}

// Blocks that fit on one SM with `smem_bytes` of dynamic shared memory (0 = none), the fewest over the kernels.
inline cudaError_t decode_blocks_per_sm(int32_t smem_bytes, int* blocks) {
  int n[4] = {0, 0, 0, 0};
  cudaError_t e = decode_counters_blocks_per_sm(smem_bytes, &n[0]);
  if (e == cudaSuccess) e = decode_counters_fivestep_blocks_per_sm(smem_bytes, &n[1]);
  if (e == cudaSuccess) e = decode_flags_blocks_per_sm(smem_bytes, &n[2]);
  if (e == cudaSuccess) e = decode_flags_fivestep_blocks_per_sm(smem_bytes, &n[3]);
  *blocks = n[0];
  for (int i = 1; i < 4; ++i)
    if (n[i] < *blocks) *blocks = n[i];
  return e;
}

// Launches the persistent kernel for this plan's shape (cooperative: all num_workers blocks co-resident) on
// `stream`. The shared-memory limit must already allow smem_layout(p.h).total. `flagged`: the scratch arena has the
// flagged layout (every element with its epoch, twice the plan's bytes), and hand-offs go by flag-in-data words.
inline cudaError_t launch_decode(const KernelParams& p, cudaStream_t stream, bool flagged) {
  const bool warp_path = attn_warps_fit(p.h);
  if (flagged) return warp_path ? decode_flags_launch(p, stream) : decode_flags_fivestep_launch(p, stream);
  return warp_path ? decode_counters_launch(p, stream) : decode_counters_fivestep_launch(p, stream);
}

}  // namespace cuda
}  // namespace tiles
