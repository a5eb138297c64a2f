// The input read after a hand-off, alone (perf log, "Next (issue 8), after session 15", item 1): 132 blocks of 512
// threads (one per SM) wait on a flag, then every block reads a freshly written vector from L2 into shared memory, as
// a matvec tile reads its input vector after its wait. How long does the read take when every SM reads the SAME
// lines at once (the kernel today), against each SM reading its OWN copy (written by another SM in the same round)?
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/bcast_probe.cu -o /tmp/bcast_probe
//   /tmp/bcast_probe
// Each round: writers store the round's vector(s) with a round tag, a grid barrier (monotonic counter) publishes
// them, every block's thread 0 stamps %globaltimer after the barrier, all threads read the vector (16-byte ld.cg,
// all of a thread's loads in flight at once), a block barrier, stamp again. Prints the median and p90 over blocks and
// rounds of the read time, per vector size and mode. Modes 3 and 4 first put 64 KB of "weights" per block in flight
// (a 64 MB buffer read in slices, so they come from DRAM), as the kernel's staging does before a wait: by cp.async
// (mode 3, the kernel's way) or by one bulk copy (mode 4, the copy engine), and time the vector read behind them.
// Modes 5 and 6 issue the same copies right after the barrier, just before the vector's loads (in the kernel the
// staged copies are often still in flight when the wait ends: DRAM is shared by 132 SMs doing the same).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

constexpr int kThreads = 512;
constexpr int kMaxBytes = 64 * 1024;

// mode 0: block 0 writes one vector, every block reads it. mode 1: block b writes the copy of block (b + 1) % G, every
// block reads its own copy. mode 2: as 0, but the block reads the vector starting at a rotated offset (its lines in a
// different order from its neighbours').
__global__ void __launch_bounds__(kThreads, 1) probe(float4* vecs, unsigned* bar, uint64_t* out, int bytes, int mode,
                                                    int rounds, unsigned base, const float4* weights) {
  extern __shared__ float4 sm[];
  __shared__ __align__(8) unsigned long long mbar;
  float4* stage = sm + kMaxBytes / 16;  // 64 KB after the vector's 64 KB
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(&mbar))));
    asm volatile("fence.proxy.async.shared::cta;");
  }
  __syncthreads();
  const int n4 = bytes / 16, G = gridDim.x, b = blockIdx.x;
  const int per = (n4 + kThreads - 1) / kThreads;  // 16-byte loads per thread (<= 8 at 64 KB)
  unsigned target = base;
  for (int r = 0; r < rounds; ++r) {
    // Write this round's vector(s).
    const float tag = float(r + 1);
    if (mode == 1) {
      float4* dst = vecs + size_t((b + 1) % G) * (kMaxBytes / 16);
      for (int i = threadIdx.x; i < n4; i += kThreads) dst[i] = make_float4(tag, tag, tag, float(i));
    } else if (b == 0) {
      for (int i = threadIdx.x; i < n4; i += kThreads) vecs[i] = make_float4(tag, tag, tag, float(i));
    }
    // Modes 3-6: this block's 64 KB of weights for this round (1024 slices of 64 MB, so they come from DRAM); modes
    // 3-4 issue them before the barrier, 5-6 after it.
    const float4* wsrc = weights + (size_t(r * G + b) % 1024) * (kMaxBytes / 16);
    auto stage_cp = [&]() {
      for (int i = threadIdx.x; i < kMaxBytes / 16; i += kThreads) cp16(stage + i, wsrc + i);
      asm volatile("cp.async.commit_group;" ::: "memory");
    };
    auto stage_bulk = [&]() {
      if (threadIdx.x != 0) return;
      const unsigned mb = static_cast<unsigned>(__cvta_generic_to_shared(&mbar));
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(mb), "r"(kMaxBytes) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       static_cast<unsigned>(__cvta_generic_to_shared(stage))),
                   "l"(wsrc), "r"(kMaxBytes), "r"(mb)
                   : "memory");
    };
    if (mode == 3) stage_cp();
    if (mode == 4) stage_bulk();
    target += G;
    grid_barrier(bar, target);
    const uint64_t t0 = now_ns();
    if (mode == 5) stage_cp();
    if (mode == 6) stage_bulk();
    const float4* src = mode == 1 ? vecs + size_t(b) * (kMaxBytes / 16) : vecs;
    const int rot = mode == 2 ? (b * 37) % (n4 > 0 ? n4 : 1) : 0;
    float4 v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (k < per && i < n4) {
        const int j = i + rot < n4 ? i + rot : i + rot - n4;
        v[k] = __ldcg(src + j);
      }
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (k < per && i < n4) sm[i] = v[k];
    }
    __syncthreads();
    if (threadIdx.x == 0) out[size_t(r) * G + b] = now_ns() - t0;
    if (mode == 3 || mode == 5) asm volatile("cp.async.wait_all;" ::: "memory");
    if (mode == 4 || mode == 6) {  // wait for the bulk copy (phase r & 1) before the stage is refilled
      const unsigned mb = static_cast<unsigned>(__cvta_generic_to_shared(&mbar));
      unsigned done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(mb), "r"(unsigned(r & 1)) : "memory");
    }
    if (threadIdx.x == 0 && sm[0].x != tag && mode != 2) out[size_t(r) * G + b] = ~0ull;  // a stale read
    target += G;
    grid_barrier(bar, target);  // nobody writes the next round's vector while another block still reads this one
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int rounds = 200;
  float4* vecs;
  unsigned* bar;
  uint64_t* out;
  CK(cudaMalloc(&vecs, size_t(sms) * kMaxBytes));
  CK(cudaMalloc(&bar, 4));
  CK(cudaMemset(bar, 0, 4));
  CK(cudaMalloc(&out, size_t(rounds) * sms * 8));
  float4* weights;
  CK(cudaMalloc(&weights, size_t(1024) * kMaxBytes));
  CK(cudaMemset(weights, 0, size_t(1024) * kMaxBytes));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kMaxBytes));
  std::vector<uint64_t> h(size_t(rounds) * sms);
  unsigned base = 0;
  printf("bytes  mode                         median_us  p90_us  (blocks %d, rounds %d, first 20 dropped)\n", sms,
         rounds);
  const char* names[7] = {"one vector, all SMs", "own copy per SM", "one vector, rotated order",
                          "one vector, 64KB cp.async", "one vector, 64KB bulk copy", "64KB cp.async just before",
                          "64KB bulk copy just before"};
  for (int bytes : {4096, 8192, 16384, 65536}) {
    for (int mode = 0; mode < 7; ++mode) {
      probe<<<sms, kThreads, 2 * kMaxBytes>>>(vecs, bar, out, bytes, mode, rounds, base, weights);
      base += 2u * sms * rounds;
      if (cudaDeviceSynchronize() != cudaSuccess) {
        printf("launch failed: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      CK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
      std::vector<uint64_t> s(h.begin() + size_t(20) * sms, h.end());
      const bool stale = std::any_of(s.begin(), s.end(), [](uint64_t x) { return x == ~0ull; });
      std::sort(s.begin(), s.end());
      printf("%6d %-28s %9.3f %7.3f%s\n", bytes, names[mode], s[s.size() / 2] / 1e3, s[s.size() * 9 / 10] / 1e3,
             stale ? "  STALE READS" : "");
    }
  }
  return 0;
}
