// The benchmark's read ceiling (tiles_ext/bench/bandwidth.py): one pass over a buffer with the decode kernel's
// weight-load pattern, so that "% of the floor" compares the kernel with what its own kind of load reaches, not with
// a PyTorch reduction. On an H200, torch.sum reads ~4.1-4.2 TB/s and this pattern ~4.4-4.5, as does a ring of bulk
// copies: the faster reader is the honest floor.
//
// Pattern: one 512-thread block per SM, each block a contiguous range, 16-byte ld.global.nc.L1::no_allocate loads,
// 8 per lane in flight. The sum of the 32-bit words shows that every byte was read: the
// tests compare it with the CPU backend's.
#include "cuda/read_sweep.h"

namespace tiles {
namespace cuda {
namespace {

constexpr int kSweepThreads = 512;
constexpr int kSweepInFlight = 8;

#include "cuda/ld_weight.cuh"

__global__ void __launch_bounds__(kSweepThreads, 1)
    read_sweep_kernel(const uint4* data, int64_t n16, unsigned long long* sum) {
  const int64_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * per;
  const int64_t end = begin + per < n16 ? begin + per : n16;
  unsigned long long acc = 0ull;
  for (int64_t i = begin + threadIdx.x; i < end; i += int64_t(kSweepThreads) * kSweepInFlight) {
    uint4 v[kSweepInFlight];
#pragma unroll
    for (int u = 0; u < kSweepInFlight; ++u) {
      const int64_t j = i + int64_t(u) * kSweepThreads;
      v[u] = j < end ? ld_weight(reinterpret_cast<const uint16_t*>(data + j)) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kSweepInFlight; ++u)
      acc += static_cast<unsigned long long>(v[u].x) + v[u].y + static_cast<unsigned long long>(v[u].z) + v[u].w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0 && acc != 0ull) atomicAdd(sum, acc);
}

}  // namespace

cudaError_t launch_read_sweep(const void* data, int64_t bytes, unsigned long long* sum, int blocks,
                              cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(sum, 0, sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return err;
  if (bytes == 0) return cudaSuccess;
  read_sweep_kernel<<<blocks, kSweepThreads, 0, stream>>>(static_cast<const uint4*>(data), bytes / 16, sum);
  return cudaPeekAtLastError();
}

}  // namespace cuda
}  // namespace tiles
