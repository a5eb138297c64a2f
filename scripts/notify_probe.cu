// Can a hand-off reach an SM sooner than its own poll does, while every SM has its next stage's staging in flight?
// (perf log, session 19, Next item 5: session 17's poll probe found a poll sees a release ~2.3 us late behind 64 KB
// of staging per SM, 1.3 us on an SM that copies nothing, 0.8 us on an idle GPU; the decode kernel pays that at
// each of its 64 all-to-all waits per token.) One block of 512 threads per SM:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/notify_probe.cu -o /tmp/notify_probe
//   /tmp/notify_probe
// Each round: a grid barrier; every staging block copies 64 KB from DRAM by cp.async (16 warps, as the kernel's
// StageWeights); block 0's thread 0 waits `delay` ns and releases; every other block stamps %globaltimer when it
// knows. Ways of knowing:
//   poll one counter     every block's thread 0 polls the released counter (ld.acquire.gpu): today's kernel;
//   poll own slot        the releaser's warp stores the round into one 256-byte slot per block (st.release.gpu),
//                        each block polls its own: is it the one hot line, or the fabric?
//   cluster C, ...       clusters of C blocks: only rank 0 polls the counter; on seeing it, it arrives (release,
//                        cluster scope) on every peer's mbarrier through distributed shared memory, and the peers
//                        wait on their own mbarrier (no global load at all). "poller idle": rank 0 stages nothing,
//                        as a block per cluster that streams no weights would.
// Prints median / p90 over blocks and rounds of (known - released), us, per release delay after the copies were
// issued. If a cluster mode's peers know ~1 us sooner than "poll one counter", a kernel whose waits are told by a
// cluster's poller saves ~1 us per wait (~60 us per token on Llama-1B, ~7%), minus the poller's own cost.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

namespace {

constexpr int kThreads = 512;
constexpr int kStage = 64 * 1024;  // per block, 4 KB per warp
constexpr size_t kWeightBytes = size_t(1) << 30;
constexpr int kSlotWords = 64;     // 256 bytes per block's slot

struct Mode {
  const char* name;
  int cluster;      // 1: no cluster; else the cluster size, rank 0 polls and notifies
  int own_slot;     // poll a per-block slot written by the releaser
  int poller_idle;  // cluster rank 0 stages nothing
};

__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Arrive (release, cluster scope) on the mbarrier at the same shared-memory offset in cluster block `rank`.
__device__ __forceinline__ void remote_arrive(uint64_t* local_bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(sa(local_bar)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void wait_cluster_phase(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tW: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra W;\n\t}" ::"r"(sa(b)),
      "r"(parity)
      : "memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    probe(uint32_t* bar, uint32_t* flag, uint32_t* slots, uint64_t* out, const uint8_t* weights, Mode m,
          int delay_ns, int rounds, uint32_t bar_base, uint32_t flag_base) {
  extern __shared__ __align__(128) uint8_t sm[];
  __shared__ __align__(8) uint64_t note;  // cluster modes: one phase per round, completed by rank 0's arrive
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, G = gridDim.x, b = blockIdx.x;
  const uint32_t rank = m.cluster > 1 ? cluster_rank() : 0;
  if (m.cluster > 1) {
    if (tid == 0) {
      bar_init(&note, 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();  // every peer's mbarrier is initialised before anyone arrives on it
  }
  const size_t per_round = size_t(G) * kStage;
  for (int r = 0; r < rounds; ++r) {
    grid_barrier(bar, bar_base + uint32_t(r + 1) * G);
    const uint8_t* src = weights + (size_t(r) * per_round) % (kWeightBytes - per_round) + size_t(b) * kStage;
    const bool stages = !(m.poller_idle && m.cluster > 1 && rank == 0);
    if (stages) {
      for (int off = lane * 16; off < kStage / 16; off += 32 * 16)
        cp16(sm + warp * (kStage / 16) + off, src + warp * (kStage / 16) + off);
      cp_commit();
    }
    const uint32_t want = flag_base + uint32_t(r + 1);
    if (b == 0) {
      if (tid == 0) {
        const uint64_t t0 = now_ns();
        while (now_ns() - t0 < uint64_t(delay_ns)) {
        }
        out[size_t(r) * G] = now_ns();
        if (!m.own_slot) release_add(flag);
      }
      if (m.own_slot && warp == 0) {
        __syncwarp();  // lane 0 stamped first: the stores follow the stamp
        for (int k = lane; k < G; k += 32) st_release(slots + size_t(k) * kSlotWords, want);
      }
      if (m.cluster > 1 && tid == 0)
        for (int k = 1; k < m.cluster; ++k) remote_arrive(&note, uint32_t(k));
    } else if (m.cluster > 1 && rank != 0) {
      if (tid == 0) {
        wait_cluster_phase(&note, uint32_t(r & 1));
        out[size_t(r) * G + b] = now_ns();
      }
    } else if (tid == 0) {
      const uint32_t* c = m.own_slot ? slots + size_t(b) * kSlotWords : flag;
      while (static_cast<int32_t>(ld_acquire(c) - want) < 0) {
      }
      out[size_t(r) * G + b] = now_ns();
      if (m.cluster > 1)
        for (int k = 1; k < m.cluster; ++k) remote_arrive(&note, uint32_t(k));
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
  }
  if (m.cluster > 1) cluster_sync();  // no block leaves while a peer may still arrive on its mbarrier
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int rounds = 200, skip = 20;
  uint32_t *bar, *flag, *slots;
  uint64_t* out;
  uint8_t* weights;
  CK(cudaMalloc(&bar, 4));
  CK(cudaMalloc(&flag, 4));
  CK(cudaMalloc(&slots, size_t(sms) * kSlotWords * 4));
  CK(cudaMemset(slots, 0, size_t(sms) * kSlotWords * 4));
  CK(cudaMalloc(&out, size_t(rounds) * sms * 8));
  CK(cudaMalloc(&weights, kWeightBytes));
  CK(cudaMemset(weights, 1, kWeightBytes));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, kStage));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const Mode modes[] = {
      {"poll one counter (today)", 1, 0, 0},
      {"poll own slot", 1, 1, 0},
      {"cluster 2, poller stages", 2, 0, 0},
      {"cluster 2, poller idle", 2, 0, 1},
      {"cluster 4, poller stages", 4, 0, 0},
      {"cluster 4, poller idle", 4, 0, 1},
      {"cluster 8, poller idle", 8, 0, 1},
  };
  const int delays[] = {0, 1000, 2000};
  std::vector<uint64_t> h(size_t(rounds) * sms);
  printf("known after the release, us: median / p90 over blocks other than 0 x %d rounds, per release delay after "
         "the copies were issued (64 KB per staging block)\n%-30s%8s", rounds - skip, "mode", "blocks");
  for (int d : delays) printf("   %5d ns      ", d);
  printf("\n");
  for (const Mode& m : modes) {
    // Co-residency: the grid barrier needs every block resident, so the grid is as many whole clusters as fit.
    int grid = sms - sms % m.cluster;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = m.cluster;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kStage;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if (m.cluster > 1) {
      int fit = 0;
      cfg.gridDim = dim3(grid);
      CK(cudaOccupancyMaxActiveClusters(&fit, probe, &cfg));
      grid = std::min(grid, fit * m.cluster);
    }
    cfg.gridDim = dim3(grid);
    std::vector<double> med[2], p90[2];  // [0] the blocks told by a peer (cluster modes) or polling, [1] pollers
    uint32_t bar_base = 0, flag_base = 0;
    for (int d : delays) {
      CK(cudaMemset(bar, 0, 4));
      CK(cudaMemset(flag, 0, 4));
      CK(cudaMemset(slots, 0, size_t(sms) * kSlotWords * 4));
      CK(cudaLaunchKernelEx(&cfg, probe, bar, flag, slots, out, (const uint8_t*)weights, m, d, rounds, bar_base,
                            flag_base));
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h.data(), out, size_t(rounds) * grid * 8, cudaMemcpyDeviceToHost));
      std::vector<double> lat[2];
      for (int r = skip; r < rounds; ++r)
        for (int b = 1; b < grid; ++b)  // cluster rank = b % cluster (1-D grid, clusters along x)
          lat[m.cluster > 1 && b % m.cluster == 0].push_back(
              (double(h[size_t(r) * grid + b]) - double(h[size_t(r) * grid])) / 1e3);
      for (int g = 0; g < 2; ++g) {
        std::sort(lat[g].begin(), lat[g].end());
        med[g].push_back(lat[g].empty() ? 0 : lat[g][lat[g].size() / 2]);
        p90[g].push_back(lat[g].empty() ? 0 : lat[g][lat[g].size() * 9 / 10]);
      }
    }
    for (int g = 0; g < (m.cluster > 1 ? 2 : 1); ++g) {
      printf("%-30s%8d", g ? "   the same run: its pollers" : m.name, grid);
      for (size_t i = 0; i < med[g].size(); ++i) printf("   %6.2f / %6.2f", med[g][i], p90[g][i]);
      printf("\n");
    }
  }
  return 0;
}
