// Weight-stream bandwidth probe (docs/perf-log.md v19): how fast can one block per SM stream 2.47 GB through a
// shared-memory ring of bulk copies (TMA), and what in the decode kernel's stream protocol costs bandwidth?
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/stream_probe.cu -o /tmp/stream_probe
//   /tmp/stream_probe            (prints one line per configuration)
//
// Modes: 0 = a dedicated producer lane (warp 0) refills a slot as soon as the consumer warps' empty mbarrier says it
// is free (CUTLASS's pattern); 1 = the decode kernel's protocol: all 16 warps consume, the 16th release (a shared
// atomic) issues the refill; 2 = plain 16-byte ld.global.nc loads, 8 per lane in flight (the default kernel's path).
// Consumers either only wait (read 0) or also read their share of each stage from shared memory (read 1).
// Mode 3 = mode 1 with the decode kernel's LM-head consumption (matvec_stream): units of two 4 KB rows, a warp takes
// whole units (items w, w + 16, ...), dot products against an x vector in shared memory, warp sums; its variants add
// what the kernel has and the plain probe has not: other shared memory before the ring (pad), a cooperative launch,
// fences around the release, generic stage reads, a generic (not shared-space) release atomic.
// Results (H200, session 5): docs/perf-log.md v19.
// Its PTX wrappers come from probe_ptx.cuh and it repeats decode_kernel.cu's dot8 on purpose: the probe is one
// standalone nvcc command without the kernel's headers, so it measures the mechanism in isolation.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

__device__ __forceinline__ void copy(void* d, const void* s, uint32_t n, uint64_t* b, int evict) {
  if (evict) {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            sa(d)),
        "l"(s), "r"(n), "r"(sa(b)), "l"(pol)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(d)),
                 "l"(s), "r"(n), "r"(sa(b))
                 : "memory");
  }
}

struct Cfg {
  int mode, stages, sb, piece, read, evict, interleave;
  int split;  // mode 3: warps per unit (1 = the decode kernel's matvec_stream: a warp takes a whole unit)
  int pad;    // bytes of dynamic shared memory before the ring (the decode kernel's other buffers)
  int coop;   // cooperative launch
  int fence;  // mode 3: __threadfence_block around each release (the decode kernel's stream_release)
  int gen;    // mode 3: stage reads through a generic pointer (v19's first decode kernel version's were)
  int gatom;  // mode 3: the release counter through a generic pointer: a generic GPU-scope ATOM, not ATOMS (ditto)
};

__device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc) {
  const uint32_t wa[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xa[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(wa[i] << 16), __uint_as_float(xa[i] << 16), acc);
    acc = fmaf(__uint_as_float(wa[i] & 0xffff0000u), __uint_as_float(xa[i] & 0xffff0000u), acc);
  }
  return acc;
}

extern __shared__ __align__(1024) uint8_t ring[];

// Stage n of block b: contiguous per block (interleave 0) or stage-interleaved over blocks (1).
__device__ __forceinline__ const uint8_t* src_of(const uint8_t* base, size_t per_block, int nst, int n, int sb,
                                                 int interleave) {
  if (interleave) return base + (size_t(n) * gridDim.x + blockIdx.x) * sb;
  return base + blockIdx.x * per_block + size_t(n) * sb;
}

__device__ __forceinline__ void issue(const Cfg c, const uint8_t* src, uint8_t* dst, uint64_t* full) {
  bar_expect(full, c.sb);
  for (int off = 0; off < c.sb; off += c.piece) copy(dst + off, src + off, c.piece, full, c.evict);
}

__global__ void __launch_bounds__(512, 1) stream_kernel(const uint8_t* base, size_t per_block, Cfg c, float* sink) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nst = static_cast<int>(per_block / c.sb);
  uint8_t* slots = ring + c.pad;
  uint64_t* full = reinterpret_cast<uint64_t*>(slots + c.stages * c.sb);
  uint64_t* empty = full + c.stages;
  uint32_t* released = reinterpret_cast<uint32_t*>(empty + c.stages);
  float acc = 0.f;
  if (c.mode == 2) {
    // Plain loads: the block's bytes, 8 x 16 B per lane in flight.
    const uint4* p = reinterpret_cast<const uint4*>(base + blockIdx.x * per_block);
    const size_t n16 = per_block / 16;
    for (size_t i = tid; i < n16; i += 512 * 8) {
      uint4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const size_t j = i + size_t(u) * 512;
        if (j < n16) {
          asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                       : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                       : "l"(p + j));
        } else {
          v[u] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) acc += __uint_as_float(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
    }
    if (acc == 1.2345f) sink[0] = acc;
    return;
  }
  const int consumers = c.mode == 0 ? 15 : 16;
  // mode 3: the decode kernel's LM-head pattern. Rows of kCols bf16 (4 KB), units of two rows, ups units per stage;
  // unit u is split over c.split warps (item = u * split + part); warp w takes items w, w + 16, ...; every warp
  // passes every stage in order (wait, release), the 16th release refills the slot.
  constexpr int kCols = 2048;
  __shared__ __align__(16) uint16_t xv[kCols];
  if (c.mode == 3) {
    for (int i = tid; i < kCols; i += 512) xv[i] = 0x3f80;
  }
  if (tid == 0) {
    for (int i = 0; i < c.stages; ++i) {
      bar_init(full + i, 1);
      bar_init(empty + i, consumers);
      released[i] = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (c.mode == 0 && warp == 0) {
    if (lane == 0) {
      for (int n = 0; n < nst; ++n) {
        const int s = n % c.stages;
        if (n >= c.stages) bar_wait(empty + s, ((n / c.stages) - 1) & 1);
        issue(c, src_of(base, per_block, nst, n, c.sb, c.interleave), slots + size_t(s) * c.sb, full + s);
      }
    }
    return;
  }
  if ((c.mode == 1 || c.mode == 3) && tid == 0)
    for (int n = 0; n < c.stages && n < nst; ++n)
      issue(c, src_of(base, per_block, nst, n, c.sb, c.interleave), slots + size_t(n) * c.sb, full + n);
  const int cw = c.mode == 0 ? warp - 1 : warp;  // consumer index
  if (c.mode == 3) {
    const int ups = c.sb / (4 * kCols);
    const int nunits = nst * ups;
    const int items = nunits * c.split;
    const int slice = kCols / 8 / c.split;
    const uint4* hv = reinterpret_cast<const uint4*>(xv);
    int passed = 0;
    auto pass = [&](int m) {
      const int s = m % c.stages;
      bar_wait(full + s, (m / c.stages) & 1);
      __syncwarp();
      if (lane == 0) {
        if (c.fence) __threadfence_block();
        uint32_t* rel = released + s;
        if (c.gatom) asm volatile("mov.b64 %0, %0;" : "+l"(rel));  // the compiler no longer knows it is shared
        const uint32_t old = atomicAdd(rel, 1u);
        if (c.fence) __threadfence_block();
        if (old % 16 == 15 && m + c.stages < nst)
          issue(c, src_of(base, per_block, nst, m + c.stages, c.sb, c.interleave), slots + size_t(s) * c.sb,
                full + s);
      }
    };
    for (int item = warp; item < items; item += 16) {
      const int unit = item / c.split, part = item - unit * c.split;
      const int j = unit / ups;
      for (; passed < j; ++passed) pass(passed);
      const int s = j % c.stages;
      bar_wait(full + s, (j / c.stages) & 1);
      const uint8_t* sp = slots;
      if (c.gen) asm volatile("mov.b64 %0, %0;" : "+l"(sp));  // the compiler no longer knows it is shared
      const uint4* A = reinterpret_cast<const uint4*>(sp + size_t(s) * c.sb + size_t(unit - j * ups) * 4 * kCols);
      const uint4* B = A + kCols / 8;
      float a0 = 0.f, a1 = 0.f;
      for (int ch = part * slice + lane; ch < (part + 1) * slice; ch += 32) {
        const uint4 x = hv[ch];
        a0 = dot8(A[ch], x, a0);
        a1 = dot8(B[ch], x, a1);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        a0 += __shfl_xor_sync(0xffffffffu, a0, o);
        a1 += __shfl_xor_sync(0xffffffffu, a1, o);
      }
      acc += a0 + a1;
    }
    for (; passed < nst; ++passed) pass(passed);
    if (acc == 1.2345f) sink[0] = acc;
    return;
  }
  for (int n = 0; n < nst; ++n) {
    const int s = n % c.stages;
    bar_wait(full + s, (n / c.stages) & 1);
    if (c.read) {
      const uint4* q = reinterpret_cast<const uint4*>(slots + size_t(s) * c.sb);
      for (int i = cw * 32 + lane; i < c.sb / 16; i += consumers * 32) {
        const uint4 v = q[i];
        acc += __uint_as_float(v.x ^ v.w);
      }
    }
    __syncwarp();
    if (lane == 0) {
      if (c.mode == 0) {
        bar_arrive(empty + s);
      } else {
        const uint32_t old = atomicAdd(released + s, 1u);
        if (old % 16 == 15 && n + c.stages < nst)
          issue(c, src_of(base, per_block, nst, n + c.stages, c.sb, c.interleave), slots + size_t(s) * c.sb,
                full + s);
      }
    }
  }
  if (acc == 1.2345f) sink[0] = acc;
}

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t total = 2471624704ull;
  const size_t per_block = total / sms / (64 * 1024) * (64 * 1024);
  const size_t bytes = per_block * sms;
  uint8_t* buf;
  float* sink;
  CK(cudaMalloc(&buf, bytes + (1 << 20)));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(buf, 1, bytes));
  CK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 222 * 1024));
  // Rows measured on the H200 (docs/perf-log.md v19): every TMA row 4.47-4.57 TB/s, plain loads 4.42-4.54.
  std::vector<Cfg> cfgs = {
      {3, 4, 32768, 32768, 1, 0, 0, 1, 0, 0, 0, 0, 1},       {3, 3, 32768, 32768, 1, 0, 0, 1, 80 * 1024, 1, 0, 0, 0},
      {3, 6, 32768, 32768, 1, 0, 0, 1, 0, 1, 0, 0, 0},       {3, 4, 32768, 32768, 1, 0, 0, 1, 80 * 1024, 1, 1, 1, 1},
      {3, 4, 32768, 32768, 1, 0, 0, 1, 80 * 1024, 0, 0, 0},  {3, 4, 32768, 32768, 1, 0, 0, 1, 0, 1, 0, 0},
      {3, 4, 32768, 32768, 1, 0, 0, 1, 0, 0, 1, 0},          {3, 4, 32768, 32768, 1, 0, 0, 1, 0, 0, 0, 1},
      {3, 4, 32768, 32768, 1, 0, 0, 1, 80 * 1024, 1, 1, 1},  {3, 2, 32768, 32768, 1, 0, 0, 1, 80 * 1024, 1, 1, 1},
      {3, 4, 32768, 32768, 1, 0, 0, 1},                      {3, 4, 32768, 32768, 1, 0, 0, 4},
      {2, 0, 32768, 0, 0, 0, 0, 1},                          {0, 4, 32768, 32768, 0, 0, 0, 1},
      {1, 4, 32768, 32768, 1, 0, 0, 1},                      {0, 3, 16384, 16384, 0, 0, 0, 1},
      {0, 2, 65536, 65536, 0, 0, 0, 1},                      {0, 4, 32768, 4096, 0, 0, 0, 1},
  };
  printf("mode stages stage_KB piece_KB read evict interleave split pad_KB coop fence gen gatom   TB/s   ms\n");
  for (const Cfg& c : cfgs) {
    const int smem = c.mode == 2 ? 0 : c.pad + c.stages * c.sb + c.stages * 16 + c.stages * 4;
    float best;
    const auto launch = [&] {
      if (c.coop) {
        void* args[] = {&buf, (void*)&per_block, (void*)&c, &sink};
        return cudaLaunchCooperativeKernel((void*)stream_kernel, dim3(sms), dim3(512), args, smem, 0);
      }
      stream_kernel<<<sms, 512, smem>>>(buf, per_block, c, sink);
      return cudaPeekAtLastError();
    };
    if (best_ms(4, [] { return cudaSuccess; }, launch, &best)) return 1;
    printf("%4d %6d %8d %8d %4d %5d %10d %5d %6d %4d %5d %3d %5d %6.3f %6.3f\n", c.mode, c.stages, c.sb / 1024,
           c.piece / 1024, c.read, c.evict, c.interleave, c.split, c.pad / 1024, c.coop, c.fence, c.gen, c.gatom,
           bytes / (best * 1e-3) / 1e12, best);
  }
  return 0;
}
