// How late does a hand-off's poll see its counter when the polling SM has just issued its staging copies?
// (perf log, session 17: the boundary probe's median block passes a wait ~1 us after the last release with plain
// loads, ~2.5 us when each block staged 64 KB by cp.async before its wait.) 132 blocks of 512 threads (one per SM):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/poll_probe.cu -o /tmp/poll_probe
//   /tmp/poll_probe
// Each round: a grid barrier; then every block issues the mode's staging copies (weights from a 1 GB buffer, so from
// DRAM), block 0's thread 0 spins `delay` ns and releases a flag counter (stamping %globaltimer just before), and
// every other block's thread 0 polls the counter with ld.acquire.gpu (stamping when it sees it). Prints the median
// and p90 over blocks and rounds of (seen - released), per mode and delay. The question: is the poll slow because ITS
// WARP has copies in flight (then a poller warp that stages nothing is the fix), because ITS SM has (then only a
// copy path that bypasses the SM's loads, or staging earlier, helps), or not at all.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

constexpr int kThreads = 512;
constexpr int kMaxStage = 128 * 1024;
constexpr size_t kWeightBytes = size_t(1) << 30;

struct Mode {
  const char* name;
  int per_warp;     // bytes each staging warp copies by cp.async (16 B per lane per copy)
  int first_warp;   // warps [first_warp, kWarps) stage; warp 0 is the poller's
  int bulk;         // bytes of one 1-D bulk copy issued by warp 1's lane 0 (instead of cp.async)
  int relaxed;      // poll with ld.relaxed.gpu (no L1 invalidation) instead of ld.acquire.gpu
  int odd_only;     // only odd blocks stage: is the poll slow on its own SM's copies, or on everyone's?
  int l2;           // copy from a 16 MB region that stays in L2 (no DRAM behind the copies)
};

__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* c) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
  return v;
}

__global__ void __launch_bounds__(kThreads, 1)
    probe(uint32_t* bar, uint32_t* flag, uint64_t* out, const uint8_t* weights, Mode m, int delay_ns, int rounds,
          uint32_t bar_base, uint32_t flag_base) {
  extern __shared__ __align__(128) uint8_t sm[];
  __shared__ __align__(8) uint64_t mbar;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, G = gridDim.x, b = blockIdx.x;
  if (tid == 0) {
    bar_init(&mbar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const size_t per_round = size_t(G) * kMaxStage;
  for (int r = 0; r < rounds; ++r) {
    grid_barrier(bar, bar_base + uint32_t(r + 1) * G);
    const uint8_t* src = weights + (m.l2 ? 0 : (size_t(r) * per_round) % (kWeightBytes - per_round)) +
                         size_t(b) * kMaxStage;
    const bool stages = !m.odd_only || (b & 1);
    if (!stages) {
    } else if (m.bulk) {
      if (warp == 1 && lane == 0) {
        bar_expect(&mbar, m.bulk);
        bulk(sm, src, m.bulk, &mbar);
      }
    } else if (m.per_warp && warp >= m.first_warp) {
      for (int off = lane * 16; off < m.per_warp; off += 32 * 16)
        cp16(sm + warp * m.per_warp + off, src + warp * m.per_warp + off);
      cp_commit();
    }
    if (tid == 0) {
      const uint32_t want = flag_base + uint32_t(r + 1);
      if (b == 0) {
        const uint64_t t0 = now_ns();
        while (now_ns() - t0 < uint64_t(delay_ns)) {
        }
        out[size_t(r) * G] = now_ns();
        release_add(flag);
      } else if (m.relaxed) {
        while (static_cast<int32_t>(ld_relaxed(flag) - want) < 0) {
        }
        out[size_t(r) * G + b] = now_ns();
      } else {
        while (static_cast<int32_t>(ld_acquire(flag) - want) < 0) {
        }
        out[size_t(r) * G + b] = now_ns();
      }
    }
    if (m.bulk) {
      if (warp == 1 && stages) bar_wait(&mbar, r & 1);
    } else {
      asm volatile("cp.async.wait_all;" ::: "memory");
    }
    __syncthreads();
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int rounds = 200, skip = 20;
  uint32_t *bar, *flag;
  uint64_t* out;
  uint8_t* weights;
  CK(cudaMalloc(&bar, 4));
  CK(cudaMalloc(&flag, 4));
  CK(cudaMemset(bar, 0, 4));
  CK(cudaMemset(flag, 0, 4));
  CK(cudaMalloc(&out, size_t(rounds) * sms * 8));
  CK(cudaMalloc(&weights, kWeightBytes));
  CK(cudaMemset(weights, 1, kWeightBytes));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStage));
  const Mode modes[] = {
      {"no staging", 0, 0, 0, 0, 0, 0},
      {"no staging, relaxed poll", 0, 0, 0, 1, 0, 0},
      {"64 KB cp.async, all 16 warps", 4096, 0, 0, 0, 0, 0},
      {"60 KB cp.async, warps 1-15", 4096, 1, 0, 0, 0, 0},
      {"64 KB cp.async, all, relaxed poll", 4096, 0, 0, 1, 0, 0},
      {"128 KB cp.async, all 16 warps", 8192, 0, 0, 0, 0, 0},
      {"120 KB cp.async, warps 1-15", 8192, 1, 0, 0, 0, 0},
      {"64 KB bulk copy (warp 1)", 0, 0, 65536, 0, 0, 0},
      {"128 KB bulk copy (warp 1)", 0, 0, 131072, 0, 0, 0},
      {"64 KB cp.async, from L2", 4096, 0, 0, 0, 0, 1},
      {"128 KB cp.async, from L2", 8192, 0, 0, 0, 0, 1},
      {"128 KB cp.async, odd blocks: stagers", 8192, 0, 0, 0, 1, 0},
      {"128 KB bulk copy, odd blocks: stagers", 0, 0, 131072, 0, 1, 0},
  };
  std::vector<uint64_t> h(size_t(rounds) * sms);
  uint32_t bar_base = 0, flag_base = 0;
  printf("poll sees the release, us after it: median / p90 over %d blocks x %d rounds, per release delay after the "
         "barrier\n%-40s", sms - 1, rounds - skip, "mode");
  const int delays[] = {0, 1000, 2000, 4000};
  for (int d : delays) printf("   %5d ns      ", d);
  printf("\n");
  for (const Mode& m : modes) {
    std::vector<double> lat[2];  // [0] the blocks that stage, [1] the others (odd_only modes)
    std::vector<double> med[2], p90[2];
    for (int d : delays) {
      probe<<<sms, kThreads, kMaxStage>>>(bar, flag, out, weights, m, d, rounds, bar_base, flag_base);
      CK(cudaDeviceSynchronize());
      bar_base += uint32_t(rounds) * sms;
      flag_base += uint32_t(rounds);
      CK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
      lat[0].clear();
      lat[1].clear();
      for (int r = skip; r < rounds; ++r)
        for (int b = 1; b < sms; ++b)
          lat[m.odd_only && !(b & 1)].push_back((double(h[size_t(r) * sms + b]) - double(h[size_t(r) * sms])) / 1e3);
      for (int g = 0; g < 2; ++g) {
        std::sort(lat[g].begin(), lat[g].end());
        med[g].push_back(lat[g].empty() ? 0 : lat[g][lat[g].size() / 2]);
        p90[g].push_back(lat[g].empty() ? 0 : lat[g][lat[g].size() * 9 / 10]);
      }
    }
    for (int g = 0; g < (m.odd_only ? 2 : 1); ++g) {
      printf("%-40s", g ? "   the same run: blocks that do not stage" : m.name);
      for (size_t i = 0; i < med[g].size(); ++i) printf("   %6.2f / %6.2f", med[g][i], p90[g][i]);
      printf("\n");
    }
  }
  return 0;
}
