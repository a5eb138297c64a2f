// Stage-boundary probe (docs/perf-log.md, session 16): does a weight stream that never stops hide the decode
// kernel's dependency stages? One block of 512 threads per SM streams Llama-1B's per-layer matvec bytes in the
// kernel's pattern (per block and layer: QKV 96 KB, O 64 KB, GATEUP 512 KB, DOWN 256 KB; 16 layers, 1.96 GB over
// 132 SMs). Between two stages every block waits for all blocks (a release counter: the producer's red.release, one
// acquire poll) and reads an 8 KB input vector (ld.cg), as a matvec tile does after its hand-off.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/boundary_probe.cu -o /tmp/boundary_probe
//   /tmp/boundary_probe            (one line per configuration: us per token-equivalent, TB/s)
//
// Paths: plain = 16-byte ld.global.nc loads, 8 per lane in flight (64 KB per SM), the stage's bytes only after its
// wait; staged = the same, with the next stage's first 64 KB issued by cp.async before the wait (the kernel's
// StageWeights); ring = one producer lane fills a ring of 32 KB slots by bulk copies (TMA) without ever waiting on a
// dependency (weights do not depend on activations), 15 consumer warps read the slots and pass the boundaries.
// boundaries 0 = the same bytes without any wait (the bandwidth reference for the path).
// fused (plain, staged and preload paths; docs/design/fused-mlp.md): GATEUP and DOWN as one stage of 768 KB per
// block (three waits per layer instead of four), ended by the split-K reduction the fused stage needs: 2048
// red.add.u64 per block into one shared accumulator; the stage after it (the next QKV) reads 24 KB of input (the
// int64 accumulator and the fp32 residual) instead of 8.
// steal (session 29; the issue-8 verdict's reopening question): plain loads, each warp a 4 KB item at a time. A block
// streams its own share of a stage except the last `pool` % of it; those tails of all blocks form one pool that any
// warp done with its own share claims from (`claim` items per global atomic, the next claim issued before the current
// one is streamed). A block releases the number of items it streamed; a wait polls for the stage's total. Do work
// stealing at the stage ends take the stragglers out of the ~2 us per all-to-all wait?
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

namespace {

constexpr int kThreads = 512;
constexpr int kLayers = 16;
constexpr int kStagesPerLayer = 4;
__constant__ int kStageKB[kStagesPerLayer] = {96, 64, 512, 256};  // QKV, O, GATEUP, DOWN per block
__constant__ int kFusedKB[kStagesPerLayer - 1] = {96, 64, 768};    // QKV, O, the fused MLP
constexpr int kReduceOut = 2048;                                    // the fused stage's outputs (Llama-1B hidden)
constexpr int kStageBytes = 64 * 1024;  // the staged path's first batch
constexpr int kInputBytes = 8 * 1024;
constexpr int kFusedInputBytes = 24 * 1024;  // after the fused stage: 16 KB of int64 and 8 KB of fp32 residual

// Consumer-warp barrier (the ring's producer warp never joins it).
__device__ __forceinline__ void consumers_sync(int n) { asm volatile("bar.sync 1, %0;" ::"r"(n) : "memory"); }

struct Cfg {
  int path;        // 0 plain, 1 staged, 2 ring, 3 preloaded (plain, the next stage's first 64 KB loaded into
                   // registers before the wait)
  int boundaries;  // 1 = wait for all blocks between stages, 2 = for this block only (the poll's own cost)
  int slots;       // ring: 32 KB slots
  int input;       // 1 = read the 8 KB input vector after each wait
  int slot;        // ring: bytes per slot (0 = 32 KB)
  int noread;      // ring: 1 = the consumers only wait and hand the slot back (no shared-memory reads)
  int fused;       // 1 = GATEUP and DOWN as one stage ended by the int64 reduction (not the ring)
  int pool;        // steal: % of each block's 4 KB items (per stage) that go to the shared pool
  int claim;       // steal: pool items per claim
};
// Per block, clock64 cycles: [0] the ring's producer blocked on a free slot, [1] the poll at the boundaries,
// [2] consumer warp 0 (of the ring: warp 1) waiting for a slot's bytes.
constexpr int kStats = 4;
constexpr int kAllStages = kLayers * kStagesPerLayer;
// Trace (%globaltimer, ns) per stage k and block b: [0][k][b] the block's stage k done (before its release),
// [1][k][b] its wait for stage k passed (k >= 1). The host derives the stragglers from it.

extern __shared__ __align__(1024) uint8_t smem[];

// The counter a block's stage release goes to: the grid's (boundaries 1) or the block's own (2).
__device__ __forceinline__ uint32_t* stage_counter(uint32_t* cnt, const Cfg& c) {
  return c.boundaries == 1 ? cnt : cnt + 1 + blockIdx.x;
}
// One thread: the wait of stage k for stage k - 1 (all blocks' or the block's own), timed into the stats and trace.
// `want`: the counter's value once stage k - 1 is done (0: one release per block and stage, as today's paths count).
__device__ __forceinline__ void wait_stage(uint32_t* cnt, int k, const Cfg& c, long long* stat,
                                           unsigned long long* tr, uint32_t want = 0u) {
  const long long t0 = clock64();
  if (want == 0u) want = static_cast<uint32_t>(k) * (c.boundaries == 1 ? gridDim.x : 1u);
  const uint32_t* ctr = stage_counter(cnt, c);
  while (ld_acquire(ctr) < want) {
  }
  stat[1] += clock64() - t0;
  tr[(size_t(kAllStages) + k) * gridDim.x + blockIdx.x] = now_ns();
}
// One thread: stage k done (traced), then its release (of n: the steal path counts items, the others blocks).
__device__ __forceinline__ void end_stage(uint32_t* cnt, int k, const Cfg& c, unsigned long long* tr,
                                          uint32_t n = 1u) {
  tr[size_t(k) * gridDim.x + blockIdx.x] = now_ns();
  if (n == 1u) {
    release_add(stage_counter(cnt, c));  // the ring's release as measured before (an immediate operand)
  } else {
    release_add(stage_counter(cnt, c), n);
  }
}
// The block's read of a stage's input vector after its wait (n16 16-byte words, ld.cg), folded into `acc`.
__device__ __forceinline__ void read_input(const uint4* input, int n16, float& acc) {
  for (int i = threadIdx.x; i < n16; i += kThreads) {
    const uint4 x = __ldcg(input + i);
    acc += __uint_as_float(x.x ^ x.w);
  }
  __syncthreads();
}

// One warp streams 4 KB item `item` of block `b`'s stage at byte offset `off` of its stream: 8 x 16 B per lane.
__device__ __forceinline__ float stream_item(const uint8_t* w, size_t per_block, int b, size_t off, int item,
                                             int lane) {
  const uint4* p = reinterpret_cast<const uint4*>(w + size_t(b) * per_block + off + size_t(item) * 4096);
  uint4 v[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) v[u] = ldnc(p + u * 32 + lane);
  float a = 0.f;
#pragma unroll
  for (int u = 0; u < 8; ++u) a += __uint_as_float(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
  return a;
}

// The steal path (Cfg::pool, Cfg::claim): see the header. pool[k] is stage k's claim counter (zeroed per launch).
__device__ void steal_path(const uint8_t* w, size_t per_block, const uint4* input, uint32_t* cnt, const Cfg& c,
                           long long* stat, unsigned long long* tr, uint32_t* pool, float* acc_out) {
  __shared__ uint32_t s_items;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nw = kThreads / 32;
  const int G = gridDim.x;
  float acc = 0.f;
  size_t off = 0;
  uint32_t want = 0;  // the items of every stage before this one (the wait's target)
  for (int layer = 0, k = 0; layer < kLayers; ++layer) {
    for (int s = 0; s < kStagesPerLayer; ++s, ++k) {
      const int nb = kStageKB[s] / 4;           // a block's items in this stage
      const int pb = nb * c.pool / 100;         // of them in the pool
      const int sb = nb - pb;                   // streamed by the block itself
      const uint32_t P = uint32_t(pb) * G;      // pool items of the stage
      if (c.boundaries && k > 0) {
        if (tid == 0) wait_stage(cnt, k, c, stat, tr, want);
        __syncthreads();
        if (c.input) read_input(input, kInputBytes / 16, acc);
      }
      if (tid == 0) s_items = 0u;
      __syncthreads();
      uint32_t mine = 0;
      for (int it = warp; it < sb; it += nw, ++mine) acc += stream_item(w, per_block, blockIdx.x, off, it, lane);
      // The pool: item j is block j % G's item sb + j / G, so the first claims take every block's tail evenly.
      if (P > 0) {
        uint32_t cur = 0, nxt = 0;
        if (lane == 0) cur = atomicAdd(pool + k, uint32_t(c.claim));
        cur = __shfl_sync(0xffffffffu, cur, 0);
        while (cur < P) {
          if (lane == 0) nxt = atomicAdd(pool + k, uint32_t(c.claim));  // in flight while `cur` streams
          for (uint32_t j = cur; j < cur + uint32_t(c.claim) && j < P; ++j, ++mine)
            acc += stream_item(w, per_block, int(j % G), off, sb + int(j / G), lane);
          cur = __shfl_sync(0xffffffffu, nxt, 0);
        }
      }
      if (lane == 0) atomicAdd(&s_items, mine);
      off += size_t(kStageKB[s]) * 1024;
      want += uint32_t(nb) * G;
      __syncthreads();
      if (tid == 0 && c.boundaries) end_stage(cnt, k, c, tr, s_items);
    }
  }
  *acc_out = acc;
}

__global__ void __launch_bounds__(kThreads, 1)
    boundary_kernel(const uint8_t* w, size_t per_block, const uint4* input, uint32_t* cnt, Cfg c, float* sink,
                    long long* stats, unsigned long long* tr, unsigned long long* red, uint32_t* pool) {
  long long* stat = stats + blockIdx.x * kStats;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint8_t* mine = w + blockIdx.x * per_block;
  float acc = 0.f;
  if (c.path == 4) {
    steal_path(w, per_block, input, cnt, c, stat, tr, pool, &acc);
    if (acc == 1.2345f) sink[0] = acc;
    return;
  }
  if (c.path != 2) {
    size_t off = 0;  // bytes of this block's stream consumed so far
    bool staged = false, pre = false;
    uint4 pv[8];
    const int spl = c.fused ? kStagesPerLayer - 1 : kStagesPerLayer;
    for (int layer = 0, k = 0; layer < kLayers; ++layer) {
      for (int s = 0; s < spl; ++s, ++k) {
        const size_t sb = size_t(c.fused ? kFusedKB[s] : kStageKB[s]) * 1024;
        if (c.boundaries && k > 0) {
          if (tid == 0) {
            wait_stage(cnt, k, c, stat, tr);
          }
          __syncthreads();
          if (c.input) read_input(input, (c.fused && s == 0 ? kFusedInputBytes : kInputBytes) / 16, acc);
        }
        size_t from = 0;
        if (staged) {
          asm volatile("cp.async.wait_all;" ::: "memory");
          __syncthreads();
          const uint4* q = reinterpret_cast<const uint4*>(smem);
          for (int i = tid; i < kStageBytes / 16; i += kThreads) {
            const uint4 v = q[i];
            acc += __uint_as_float(v.x ^ v.w);
          }
          from = kStageBytes;
        }
        if (pre) {
#pragma unroll
          for (int u = 0; u < 8; ++u) acc += __uint_as_float(pv[u].x ^ pv[u].y ^ pv[u].z ^ pv[u].w);
          from = size_t(kThreads) * 8 * 16;
          pre = false;
        }
        const uint4* p = reinterpret_cast<const uint4*>(mine + off);
        const size_t n16 = sb / 16;
        for (size_t i = from / 16 + tid; i < n16; i += kThreads * 8) {
          uint4 v[8];
#pragma unroll
          for (int u = 0; u < 8; ++u) {
            const size_t j = i + size_t(u) * kThreads;
            v[u] = j < n16 ? ldnc(p + j) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int u = 0; u < 8; ++u) acc += __uint_as_float(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
        }
        off += sb;
        if (c.fused && s == spl - 1) {  // the fused stage's split-K partials into the shared int64 accumulator
          for (int i = tid; i < kReduceOut; i += kThreads)
            asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(red + i), "l"(1ull) : "memory");
        }
        __syncthreads();  // the block's stage is done (and the staging buffer free)
        if (tid == 0) tr[size_t(k) * gridDim.x + blockIdx.x] = now_ns();  // release below, after the staging
        staged = false;
        if (c.path == 1 && k + 1 < kLayers * spl) {
          // The next stage's first batch, before its wait (the kernel's StageWeights).
          for (int i = tid; i < kStageBytes / 16; i += kThreads) cp16(smem + i * 16, mine + off + size_t(i) * 16);
          cp_commit();
          staged = true;
        }
        if (c.path == 3 && k + 1 < kLayers * spl) {
          const uint4* q = reinterpret_cast<const uint4*>(mine + off);
#pragma unroll
          for (int u = 0; u < 8; ++u) pv[u] = ldnc(q + tid + u * kThreads);
          pre = true;
        }
        if (c.boundaries && tid == 0) release_add(stage_counter(cnt, c));
      }
    }
    if (acc == 1.2345f) sink[0] = acc;
    return;
  }
  // The ring: slots of 32 KB; full[i] completes by the copy's bytes, empty[i] by the 15 consumer warps.
  const int sl = c.slot ? c.slot : 32 * 1024;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + c.slots * sl);
  uint64_t* empty = full + c.slots;
  if (tid == 0) {
    for (int i = 0; i < c.slots; ++i) {
      bar_init(full + i, 1);
      bar_init(empty + i, 15);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  size_t total = 0;
  for (int s = 0; s < kStagesPerLayer; ++s) total += size_t(kStageKB[s]) * 1024;
  total *= kLayers;
  const int nslot = static_cast<int>(total / sl);
  if (warp == 0) {
    if (lane == 0) {
      long long blocked = 0;
      for (int n = 0; n < nslot; ++n) {
        const int s = n % c.slots;
        if (n >= c.slots) {
          const long long t0 = clock64();
          bar_wait(empty + s, ((n / c.slots) - 1) & 1);
          blocked += clock64() - t0;
        }
        bar_expect(full + s, sl);
        bulk(smem + size_t(s) * sl, mine + size_t(n) * sl, sl, full + s);
      }
      stat[0] = blocked;
    }
    return;
  }
  const int cw = warp - 1, ct = tid - 32;
  int n = 0;
  for (int layer = 0, k = 0; layer < kLayers; ++layer) {
    for (int st = 0; st < kStagesPerLayer; ++st, ++k) {
      if (c.boundaries && k > 0) {
        if (ct == 0) {
          wait_stage(cnt, k, c, stat, tr);
        }
        consumers_sync(kThreads - 32);
        if (c.input) {
          const uint4 x = __ldcg(input + ct % (kInputBytes / 16));
          acc += __uint_as_float(x.x ^ x.w);
          consumers_sync(kThreads - 32);
        }
      }
      const int ns = kStageKB[st] * 1024 / sl;
      for (int e = 0; e < ns; ++e, ++n) {
        const int s = n % c.slots;
        if (ct == 0) {
          const long long t0 = clock64();
          bar_wait(full + s, (n / c.slots) & 1);
          stat[2] += clock64() - t0;
        } else {
          bar_wait(full + s, (n / c.slots) & 1);
        }
        const uint4* q = reinterpret_cast<const uint4*>(smem + size_t(s) * sl);
        for (int i = cw * 32 + lane; !c.noread && i < sl / 16; i += 15 * 32) {
          const uint4 v = q[i];
          acc += __uint_as_float(v.x ^ v.y ^ v.z ^ v.w);
        }
        __syncwarp();
        if (lane == 0) bar_arrive(empty + s);
      }
      if (c.boundaries) {
        consumers_sync(kThreads - 32);
        if (ct == 0) end_stage(cnt, k, c, tr);
      }
    }
  }
  if (acc == 1.2345f) sink[0] = acc;
}

// From the last run's trace: per wait, how far the last block's stage end lies behind the median block's and the
// first block's, how long after it the median block passes the wait, and whether the same blocks are late every
// time (split-half correlation of each block's mean lateness over even and odd stages; the blocks most often last).
int stragglers(std::vector<unsigned long long>& ht, const unsigned long long* tr, int sms) {
  CK(cudaMemcpy(ht.data(), tr, sizeof(unsigned long long) * ht.size(), cudaMemcpyDeviceToHost));
  double max_med = 0, max_min = 0, wake = 0;
  std::vector<double> late[2] = {std::vector<double>(sms, 0.0), std::vector<double>(sms, 0.0)};
  std::vector<int> last(sms, 0);
  const int nk = kAllStages - 1;  // stages followed by a wait
  for (int k = 0; k < nk; ++k) {
    std::vector<double> e(sms), wk(sms);
    for (int b = 0; b < sms; ++b) {
      e[b] = double(ht[size_t(k) * sms + b]);
      wk[b] = double(ht[(size_t(kAllStages) + k + 1) * sms + b]);
    }
    std::vector<double> es = e, ws = wk;
    std::sort(es.begin(), es.end());
    std::sort(ws.begin(), ws.end());
    const double med = es[sms / 2], mx = es[sms - 1];
    max_med += (mx - med) / nk;
    max_min += (mx - es[0]) / nk;
    wake += (ws[sms / 2] - mx) / nk;
    for (int b = 0; b < sms; ++b) late[k & 1][b] += (e[b] - med) / ((nk + 1 - (k & 1)) / 2);
    last[std::max_element(e.begin(), e.end()) - e.begin()]++;
  }
  double ma = 0, mb = 0;
  for (int b = 0; b < sms; ++b) ma += late[0][b] / sms, mb += late[1][b] / sms;
  double sab = 0, saa = 0, sbb = 0;
  for (int b = 0; b < sms; ++b) {
    sab += (late[0][b] - ma) * (late[1][b] - mb);
    saa += (late[0][b] - ma) * (late[0][b] - ma);
    sbb += (late[1][b] - mb) * (late[1][b] - mb);
  }
  std::vector<int> order(sms);
  for (int b = 0; b < sms; ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](int x, int y) { return last[x] > last[y]; });
  printf("        stragglers per wait: last - median %.2f us, last - first %.2f us, median wake %.2f us after the "
         "last; lateness split-half corr %.2f; most often last (block: waits) %d: %d, %d: %d, %d: %d, %d: %d\n",
         max_med * 1e-3, max_min * 1e-3, wake * 1e-3, sab / std::sqrt(saa * sbb + 1e-30), order[0], last[order[0]],
         order[1], last[order[1]], order[2], last[order[2]], order[3], last[order[3]]);
  return 0;
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t per_block = size_t(96 + 64 + 512 + 256) * 1024 * kLayers;
  const size_t bytes = per_block * sms;
  uint8_t* w;
  uint4* input;
  uint32_t* cnt;
  float* sink;
  CK(cudaMalloc(&w, bytes));
  CK(cudaMalloc(&input, kFusedInputBytes));
  unsigned long long* red;
  CK(cudaMalloc(&red, kReduceOut * 8));
  CK(cudaMalloc(&cnt, 4 * (1 + sms)));
  uint32_t* pool;  // the steal path's claim counters, one per stage
  CK(cudaMalloc(&pool, 4 * kAllStages));
  long long* stats;
  CK(cudaMalloc(&stats, sizeof(long long) * kStats * sms));
  std::vector<long long> hs(size_t(kStats) * sms);
  unsigned long long* tr;
  CK(cudaMalloc(&tr, sizeof(unsigned long long) * 2 * kAllStages * sms));
  std::vector<unsigned long long> ht(size_t(2) * kAllStages * sms);
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(w, 1, bytes));
  CK(cudaMemset(input, 2, kFusedInputBytes));
  CK(cudaFuncSetAttribute(boundary_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 222 * 1024));
  // Session 16 (H200, calls 6-7): plain 449 us without waits, 575-582 with them; staged 595-600; preload 566; ring of
  // 3-6 x 32 KB 443 / 568-572, its consumers reading nothing 583: ~2 us per wait whatever the path (perf log).
  const std::vector<Cfg> cfgs = {{0, 0, 0, 1}, {0, 1, 0, 1}, {1, 1, 0, 1}, {3, 1, 0, 1}, {2, 0, 6, 1},
                                 {2, 1, 6, 1}, {2, 1, 6, 1, 0, 1}, {0, 2, 0, 1}, {0, 1, 0, 1},
                                 // Session 18 (docs/design/fused-mlp.md): the fused MLP stage against the same
                                 // paths with four stages per layer (above and again after, for the drift).
                                 {0, 1, 0, 1, 0, 0, 1}, {1, 1, 0, 1, 0, 0, 1}, {3, 1, 0, 1, 0, 0, 1}, {1, 1, 0, 1},
                                 // Session 29: work stealing at the stage ends (pool %, claim), against plain.
                                 {4, 0, 0, 1, 0, 0, 0, 0, 1}, {4, 1, 0, 1, 0, 0, 0, 0, 1}, {4, 0, 0, 1, 0, 0, 0, 25, 1},
                                 {4, 1, 0, 1, 0, 0, 0, 12, 1}, {4, 1, 0, 1, 0, 0, 0, 25, 1},
                                 {4, 1, 0, 1, 0, 0, 0, 25, 2}, {4, 1, 0, 1, 0, 0, 0, 25, 4},
                                 {4, 1, 0, 1, 0, 0, 0, 50, 2}, {0, 1, 0, 1}};
  const char* names[] = {"plain", "staged", "ring", "preload", "steal"};
  printf("path    boundaries slots input  us/layer-set   TB/s  | us per block, mean (max): producer blocked, poll, "
         "waiting for bytes   (%d blocks, %.2f GB, %d stages)\n", sms, bytes / 1e9, kLayers * kStagesPerLayer);
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  for (const Cfg& c : cfgs) {
    const int smem = c.path == 2 ? c.slots * (c.slot ? c.slot : 32 * 1024) + c.slots * 16 : kStageBytes;
    float best;
    const auto reset = [&] {
      cudaError_t e = cudaMemset(cnt, 0, 4 * (1 + sms));
      if (e == cudaSuccess) e = cudaMemset(pool, 0, 4 * kAllStages);
      return e != cudaSuccess ? e : cudaMemset(stats, 0, sizeof(long long) * kStats * sms);
    };
    const auto launch = [&] {
      void* args[] = {&w, (void*)&per_block, &input, &cnt, (void*)&c, &sink, &stats, &tr, &red, &pool};
      return cudaLaunchCooperativeKernel((void*)boundary_kernel, dim3(sms), dim3(kThreads), args, smem, 0);
    };
    if (best_ms(5, reset, launch, &best)) return 1;
    CK(cudaMemcpy(hs.data(), stats, sizeof(long long) * kStats * sms, cudaMemcpyDeviceToHost));  // the last run's
    double mean[3] = {0, 0, 0}, mx[3] = {0, 0, 0};
    for (int b = 0; b < sms; ++b)
      for (int i = 0; i < 3; ++i) {
        const double us = hs[size_t(b) * kStats + i] / (khz * 1e-3);
        mean[i] += us / sms;
        if (us > mx[i]) mx[i] = us;
      }
    printf("%-7s%s %10d %5d %5d %13.1f %6.3f  | %6.1f (%6.1f) %6.1f (%6.1f) %6.1f (%6.1f)\n", names[c.path],
           c.fused ? " fused" : "", c.boundaries,
           c.slots, c.input, best * 1e3, bytes / (best * 1e-3) / 1e12, mean[0], mx[0], mean[1], mx[1], mean[2], mx[2]);
    if (c.path == 4) printf("        steal: pool %d%% of each block's items, %d per claim\n", c.pool, c.claim);
    if (c.boundaries == 1 && !c.fused && stragglers(ht, tr, sms) != 0) return 1;  // (its trace has 64 stages)
  }
  return 0;
}
