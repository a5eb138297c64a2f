// Session 24 (perf log): run twice; treat its cycles as rough. Its loops carry their own address arithmetic and the
// clocks are not locked, so one pattern moved between two builds of the probe (lds64 all 2.0 -> 5.8 cycles) and
// ffma 0.64 -> 0.92. What decided the attention's loads was ncu's wavefront count per instruction (ncu_attn.sh,
// ncu_lines.py --lds) and the LDS.128 pair rule: 4 wavefronts unless lanes n and n^1 (or n and n^2) share an address.
// What bounds the attention warp path's chunk (perf log, session 23)? Its profile at 16K positions: the scores take
// ~1.6K cycles per 128-position chunk, the o update ~1.1K, with 16 warps in lock-step (the end barrier costs ~0).
// The guess was shared-memory wavefronts: a warp-wide LDS.128 taken as four quarter-warp wavefronts whatever its
// addresses, so the scores' 24 LDS.128 per warp and chunk (16 of q, 8 of K) would cost 16 x 24 x 4 = 1.5K cycles.
// v59 cut them to 10 and added 24 shuffles per warp, and was slower (+1.1K cycles per chunk). This probe measures
// each ingredient alone, one block of 512 threads per SM, as the kernel runs:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/smem_probe.cu -o /tmp/smem_probe
//   /tmp/smem_probe
// Prints, per pattern, the SM's cycles per warp-instruction (the block's cycles over 16 warps x instructions), the
// median over blocks. Patterns (16-byte pieces, the warp path's layouts, head_dim 64):
//   lds128 q        lane (sj = lane / 4, sg = lane % 4) reads head sg's q piece: 4 addresses, rows 272 B apart
//   lds128 k        the same lane reads position sj's K piece: 8 addresses, rows 144 B apart (2 per quarter)
//   lds128 row      lane reads piece lane % 8 of one row: 8 addresses, 128 contiguous bytes (V, v59's K)
//   lds128 all      32 addresses, 512 contiguous bytes
//   lds64 all / lds32 all   32 addresses, 256 / 128 contiguous bytes
//   shfl xor        __shfl_xor_sync of 8 independent values
//   expf            expf of 8 independent values
//   ffma            8 independent fmaf chains (the issue rate, for scale)
// If "lds128 q" costs ~4 cycles where "lds32 all" costs ~1, the quarter-warp model holds and the q reads are the
// lever (bf16 q, or two positions per lane); if shuffles cost ~2+, v59's loss is its 24 shuffles.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_check.cuh"

namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32, kInner = 16;

enum Pattern { kLdsQ, kLdsK, kLdsRow, kLdsAll, kLds64, kLds32, kShfl, kExpf, kFfma, kNumPatterns };
const char* kNames[kNumPatterns] = {"lds128 q", "lds128 k", "lds128 row", "lds128 all", "lds64 all",
                                    "lds32 all", "shfl xor", "expf", "ffma"};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}

// Byte offset of a warp-wide load `c` of the pattern (c < kInner), inside a 40 KB window.
__device__ __forceinline__ uint32_t offset(int pat, int lane, int warp, int c) {
  const int sj = lane >> 2, sg = lane & 3;
  switch (pat) {
    case kLdsQ: return sg * 272 + (c & 15) * 16;                      // qf rows [G][hd + 4] floats
    case kLdsK: return (warp * 8 + sj) * 144 + (c & 7) * 16;          // kb rows [chunk][hd + 8] bf16
    case kLdsRow: return (warp * 8 + (c & 7)) * 128 + (lane & 7) * 16;  // one row, its 8 pieces
    case kLdsAll: return ((warp * kInner + c) * 512 + lane * 16) % 40960;
    case kLds64: return ((warp * kInner + c) * 256 + lane * 8) % 40960;
    default: return ((warp * kInner + c) * 128 + lane * 4) % 40960;
  }
}

__global__ void __launch_bounds__(kThreads, 1) probe(int pat, int iters, long long* cycles, uint32_t* sink) {
  extern __shared__ uint4 sm[];
  for (int i = threadIdx.x; i < 40960 / 16; i += kThreads) sm[i] = make_uint4(i, i * 3, i * 5, i * 7);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t base = smem_u32(sm);
  uint32_t acc = 0;
  float f[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = 0.001f * (lane + k);
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    if (pat <= kLdsAll) {
#pragma unroll
      for (int c = 0; c < kInner; ++c) {
        const uint4 v = lds128(base + offset(pat, lane, warp, c));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    } else if (pat == kLds64) {
#pragma unroll
      for (int c = 0; c < kInner; ++c) {
        const uint2 v = lds64(base + offset(pat, lane, warp, c));
        acc ^= v.x ^ v.y;
      }
    } else if (pat == kLds32) {
#pragma unroll
      for (int c = 0; c < kInner; ++c) acc ^= lds32(base + offset(pat, lane, warp, c));
    } else if (pat == kShfl) {
#pragma unroll
      for (int c = 0; c < kInner / 8; ++c) {
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] += __shfl_xor_sync(0xffffffffu, f[k], 1 << (k & 3));
      }
    } else if (pat == kExpf) {
#pragma unroll
      for (int c = 0; c < kInner / 8; ++c) {
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = expf(f[k] - 0.5f);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kInner / 8; ++c) {
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = fmaf(f[k], 0.999f, 0.001f);
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += f[k];
  if ((acc ^ __float_as_uint(s)) == 0x12345678u) sink[0] = acc;  // keeps the work alive
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 40960));
  long long* cycles = nullptr;
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&cycles, sms * sizeof(long long)));
  CK(cudaMalloc(&sink, 4));
  const int iters = 4096;
  std::vector<long long> h(sms);
  printf("smem_probe: %d blocks x %d threads, %d x %d warp-instructions per warp\n", sms, kThreads, iters, kInner);
  printf("%-12s %10s\n", "pattern", "cycles/warp-instr/SM");
  for (int pat = 0; pat < kNumPatterns; ++pat) {
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
      probe<<<sms, kThreads, 40960>>>(pat, iters, cycles, sink);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
    }
    CK(cudaMemcpy(h.data(), cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    // The non-memory patterns issue kInner / 8 x 8 = kInner instructions per iteration too.
    const double per = double(h[sms / 2]) / (double(iters) * kInner * kWarps);
    printf("%-12s %10.2f\n", kNames[pat], per);
  }
  return 0;
}
