// The persistent decode kernel's launch interface: plain C++ and CUDA runtime types only (no torch), so the kernel's
// translation unit compiles with nvcc alone and the torch glue (decode_step_cuda.cpp) only fills this struct.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "plan_format.h"

namespace tiles {
namespace cuda {

constexpr int kThreads = 512;          // threads per worker block (16 warps)
constexpr int kWarps = kThreads / 32;
constexpr int kMaxLayers = 64;         // bounds the by-value pointer tables below (kernel params up to 32 KB)
constexpr int kMaxWeights = kMaxLayers * kLayerSlots + kFinalSlots;
constexpr int kMaxGroup = kWarps;      // query heads per KV head: one warp per head in the softmax update
constexpr int kAttnChunkElems = 8192;  // KV positions staged per attention chunk = kAttnChunkElems / head_dim

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
  int32_t prefetch_bytes;     // per-tile L2 prefetch cap (cp.async.bulk.prefetch.L2), 0 = off
  int32_t prefetch_next;      // 1 = also prefetch the worker's next tile once the current one may run
  const uint16_t* weights[kMaxWeights];  // bf16 bit patterns, plan weight order
  uint16_t* k_cache[kMaxLayers];         // per layer [num_kv_heads, max_cache_len, head_dim] bf16
  uint16_t* v_cache[kMaxLayers];
};
static_assert(sizeof(KernelParams) <= 32000, "kernel parameters are limited to 32 KB (CUDA 12.1+)");

// Dynamic shared memory layout (bytes), identical on host (sizing) and device (carving).
struct SmemLayout {
  int32_t vec;      // bf16 input vector of a matvec tile [max_in]
  int32_t red;      // fp32 partials of k-split rows [2 * kWarps]
  int32_t qf;       // fp32 rotated q [G * hd]
  int32_t of;       // fp32 running o [G * hd]
  int32_t opart;    // fp32 o partials of the position groups [splits * G * hd]
  int32_t ml;       // fp32 m, l, alpha per head [4 * G]
  int32_t cs;       // fp32 cos, sin [hd]
  int32_t sc;       // fp32 scores / probabilities [chunk * G]
  int32_t kbuf;     // bf16 K chunk [chunk][hd + 8] (padded against bank conflicts)
  int32_t vbuf;     // bf16 V chunk [chunk][hd]
  int32_t msf;      // fp32 merge scale factors [G * P]
  int32_t total;
  int32_t chunk;    // positions per attention chunk
  int32_t splits;   // position groups of the o update
};

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
  s.splits = G * hd >= kThreads ? 1 : kThreads / (G * hd);
  int32_t o = 0;
  s.vec = o; o += up16(max_in * 2);
  s.red = o; o += up16(2 * kWarps * 4);
  s.qf = o; o += up16(G * hd * 4);
  s.of = o; o += up16(G * hd * 4);
  s.opart = o; o += up16(s.splits * G * hd * 4);
  s.ml = o; o += up16(4 * G * 4);
  s.cs = o; o += up16(hd * 4);
  s.sc = o; o += up16(s.chunk * G * 4);
  s.kbuf = o; o += up16(s.chunk * (hd + 8) * 2);
  s.vbuf = o; o += up16(s.chunk * hd * 2);
  s.msf = o; o += up16(G * h.attn_partitions * 4);
  s.total = o;
  return s;
}

// Launches the persistent kernel (cooperative: all num_workers blocks co-resident) on `stream`.
// Returns the CUDA error of the launch (or of the occupancy query), cudaSuccess otherwise.
cudaError_t launch_decode(const KernelParams& p, cudaStream_t stream);

// Blocks of the kernel that fit on one SM with the dynamic shared memory that `h` needs (0 = does not fit).
cudaError_t decode_blocks_per_sm(const Header& h, int* blocks);

}  // namespace cuda
}  // namespace tiles
