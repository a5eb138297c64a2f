// K/V stream probe (docs/perf-log.md, session 14): how fast can the attention tiles of one layer read their cached
// K/V rows, one block per (KV head, partition), and what limits the decode kernel's chunk loop at long context?
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/kv_probe.cu -o /tmp/kv_probe
//   /tmp/kv_probe            (prints one line per configuration)
//   KV_PROBE_TRACE=1 /tmp/kv_probe   (only the traced TMA runs: when each chunk lands while the block works)
//
// The layout is the decode kernel's: per layer K and V caches [kv_heads][max_len][head_dim] bf16, partition p of a
// head holds positions [p * ctx / P, (p + 1) * ctx / P) rounded to 32, read in chunks of 128 rows (16 KB of K and
// 16 KB of V). The 16 layers are walked in order with a grid barrier between them (the ATTN tiles of a layer start
// together after QKV), and the caches of all layers together exceed L2, so every layer reads HBM.
// Methods: 0 = cp.async 16-byte pieces into row-padded buffers (attn_issue_chunk's pattern), `depth` chunks in
// flight (2 = the kernel's double buffer); 1 = bulk copies (TMA), one per K and V chunk (unpadded rows), `depth`
// chunks in flight, one mbarrier per buffer; 2 = bulk copies, one per 128-byte row (padded rows).
// `work_ns`: each chunk's compute, emulated by a spin on %globaltimer after its rows landed (the kernel's ~1 us).
// `rotate`: partition p starts its walk at chunk p % chunks (spreads the partitions' addresses at each moment).
// It repeats decode_kernel.cu's cp.async and mbarrier wrappers on purpose: one standalone nvcc command.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

constexpr int kLayers = 16, kHeads = 8, kHd = 64, kParts = 16, kChunk = 128, kThreads = 512;
constexpr int kKStride = kHd + 8;  // padded row (elements), as the kernel's kbuf

struct Cfg {
  int method, depth, rotate, work_ns, ctx, max_len;
  int work_kind;  // 0: spin on %globaltimer, 1: spin on clock64, 2: a dependent FMA chain, 3: clock64 on 4 warps
  int trace;      // method 1: per chunk of the last layer, when it landed (warp 15's lane 0 polls the mbarriers of
                  // the chunks in flight instead of spinning) and when the block started on it (ns from the layer start)
};
constexpr int kTraceChunks = 16;

extern __shared__ __align__(1024) uint8_t smem[];

// Chunk buffer i: K rows then V rows, padded (methods 0, 2) or not (1).
__device__ __forceinline__ uint16_t* kbuf(int i, int padded) {
  const int kb = kChunk * (padded ? kKStride : kHd) * 2;
  return reinterpret_cast<uint16_t*>(smem + 64 + size_t(i) * 2 * kb);
}

__device__ void issue(const Cfg& c, const uint16_t* kc, const uint16_t* vc, int c0, int cn, int buf, uint64_t* bars) {
  const int padded = c.method != 1;
  uint16_t* kb = kbuf(buf, padded);
  uint16_t* vb = kb + kChunk * (padded ? kKStride : kHd);
  if (c.method == 0) {
    const int cpr = kHd / 8;
    for (int i = threadIdx.x; i < cn * cpr; i += kThreads) {
      const int j = i / cpr, q = i - j * cpr;
      cp16(kb + j * kKStride + q * 8, kc + int64_t(c0) * kHd + i * 8);
      cp16(vb + j * kKStride + q * 8, vc + int64_t(c0) * kHd + i * 8);
    }
    cp_commit();
  } else if (c.method == 1) {
    if (threadIdx.x == 0) {
      bar_expect(bars + buf, 2 * cn * kHd * 2);
      bulk(kb, kc + int64_t(c0) * kHd, cn * kHd * 2, bars + buf);
      bulk(vb, vc + int64_t(c0) * kHd, cn * kHd * 2, bars + buf);
    }
  } else {
    if (threadIdx.x < 32) {
      if (threadIdx.x == 0) bar_expect(bars + buf, 2 * cn * kHd * 2);
      __syncwarp();
      for (int j = threadIdx.x; j < cn; j += 32) {
        bulk(kb + j * kKStride, kc + int64_t(c0 + j) * kHd, kHd * 2, bars + buf);
        bulk(vb + j * kKStride, vc + int64_t(c0 + j) * kHd, kHd * 2, bars + buf);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    kv_kernel(const uint16_t* kcache, const uint16_t* vcache, Cfg c, unsigned* arrive, float* sink,
              unsigned long long* trace) {
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  if (threadIdx.x == 0)
    for (int i = 0; i < c.depth; ++i) bar_init(bars + i, 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  uint32_t phase_bits = 0;  // one parity bit per buffer (methods 1, 2)
  const int b = blockIdx.x;
  const bool tile = b < kHeads * kParts;
  const int kvh = b / kParts, part = b % kParts;
  const int lo = (c.ctx * part / kParts) / 32 * 32, hi = part + 1 == kParts ? c.ctx : (c.ctx * (part + 1) / kParts) / 32 * 32;
  const int nch = (hi - lo + kChunk - 1) / kChunk;
  float acc = 0.f;
  for (int l = 0; l < kLayers; ++l) {
    const uint64_t t_layer = now_ns();
    const bool traced = c.trace && c.method == 1 && l == kLayers - 1 && nch <= kTraceChunks;
    unsigned long long* tr = trace + size_t(b) * kTraceChunks * 2;  // [chunk][landed, started]
    if (tile) {
      const size_t layer_off = size_t(l) * kHeads * c.max_len * kHd;
      const uint16_t* kc = kcache + layer_off + size_t(kvh) * c.max_len * kHd;
      const uint16_t* vc = vcache + layer_off + size_t(kvh) * c.max_len * kHd;
      const int first = c.rotate ? part % nch : 0;
      auto chunk_at = [&](int n) { return lo + ((first + n) % nch) * kChunk; };
      auto len_at = [&](int n) {
        const int c0 = chunk_at(n);
        return hi - c0 < kChunk ? hi - c0 : kChunk;
      };
      const uint32_t phase_bits0 = phase_bits;  // this layer's starting parities (the trace's polls)
      if (traced && threadIdx.x == 0)
        for (int i = 0; i < 2 * kTraceChunks; ++i) tr[i] = 0;
      __syncthreads();
      // Prologue: depth - 1 chunks in flight.
      for (int n = 0; n < c.depth - 1 && n < nch; ++n) issue(c, kc, vc, chunk_at(n), len_at(n), n % c.depth, bars);
      for (int n = 0; n < nch; ++n) {
        const int nn = n + c.depth - 1;  // the chunk whose copies go out now (its buffer was freed last iteration)
        if (c.method == 0) {
          if (nn < nch) issue(c, kc, vc, chunk_at(nn), len_at(nn), nn % c.depth, bars);
          else cp_commit();  // an empty group keeps wait_group's count uniform
          // Chunk n is the oldest of depth groups in flight.
          if (c.depth == 2) cp_wait_group<1>();
          else if (c.depth == 3) cp_wait_group<2>();
          else if (c.depth == 4) cp_wait_group<3>();
          else cp_wait_group<5>();
        } else {
          if (nn < nch) issue(c, kc, vc, chunk_at(nn), len_at(nn), nn % c.depth, bars);
          const int bi = n % c.depth;
          bar_wait(bars + bi, (phase_bits >> bi) & 1u);
          phase_bits ^= 1u << bi;
        }
        __syncthreads();
        if (traced && threadIdx.x == 0) {
          tr[n * 2 + 1] = now_ns() - t_layer;
          if (tr[n * 2] == 0) tr[n * 2] = tr[n * 2 + 1];  // landed before anyone polled it
        }
        const uint16_t* kb = kbuf(n % c.depth, c.method != 1);
        acc += __uint_as_float(uint32_t(kb[threadIdx.x % 64]) << 16);
        if (traced && threadIdx.x >= kThreads - 32) {
          // Instead of working, the last warp polls the chunks in flight (n + 1 .. n + depth - 1) and lane 0 stamps
          // when each lands. The whole warp takes this branch: with one lane here and 31 in the spin below, the
          // warp ran both one after the other and a traced chunk cost twice its work (session 15).
          const uint64_t t0 = now_ns();
          while (threadIdx.x == kThreads - 32 && now_ns() - t0 < uint64_t(c.work_ns)) {
            for (int m = n + 1; m < n + c.depth && m < nch; ++m) {
              const int bm = m % c.depth;
              // Chunk m is the (m / depth)-th fill of its buffer in this layer; the layer's earlier fills of
              // buffer bm flipped its parity (phase_bits as it was at this layer's start, plus those fills).
              const uint32_t par = (phase_bits0 >> bm & 1u) ^ (uint32_t(m / c.depth) & 1u);
              if (tr[m * 2] == 0 && bar_test(bars + bm, par)) tr[m * 2] = now_ns() - t_layer;
            }
          }
        } else if (c.work_ns > 0) {
          if (c.work_kind == 0) {
            const uint64_t t0 = now_ns();
            while (now_ns() - t0 < uint64_t(c.work_ns)) {
            }
          } else if (c.work_kind == 1 || (c.work_kind == 3 && threadIdx.x < 128)) {
            const long long t0 = clock64(), cyc = (long long)c.work_ns * 19 / 10;
            while (clock64() - t0 < cyc) {
            }
          } else if (c.work_kind == 2) {
            float x = acc + 1.f;
            for (int i = 0; i < c.work_ns / 2; ++i) x = fmaf(x, 0.999f, 0.5f);  // ~4 cycles per FMA
            acc += x * 1e-30f;
          }
        }
        __syncthreads();  // the buffer is free for chunk n + depth
      }
    }
    // Grid barrier: the next layer's tiles start together.
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      const unsigned target = (l + 1) * gridDim.x;
      atomicAdd(arrive, 1u);
      while (*reinterpret_cast<volatile unsigned*>(arrive) < target) {
      }
    }
    __syncthreads();
  }
  if (acc == 1.2345f) sink[0] = acc;
}

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_len_cap = 16384 + 256;
  const size_t elems = size_t(kLayers) * kHeads * max_len_cap * kHd;
  uint16_t *kc, *vc;
  unsigned* arrive;
  float* sink;
  CK(cudaMalloc(&kc, elems * 2));
  CK(cudaMalloc(&vc, elems * 2));
  CK(cudaMalloc(&arrive, 4));
  CK(cudaMalloc(&sink, 4));
  unsigned long long* trace;
  CK(cudaMalloc(&trace, size_t(sms) * kTraceChunks * 2 * 8));
  CK(cudaMemset(trace, 0, size_t(sms) * kTraceChunks * 2 * 8));
  CK(cudaMemset(kc, 0x3c, elems * 2));
  CK(cudaMemset(vc, 0x3c, elems * 2));
  CK(cudaFuncSetAttribute(kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  std::vector<Cfg> cfgs;
  // Next call (prepared in session 14, not run): when do the chunks land while the block works? TMA, 4 in flight.
  const bool trace_only = getenv("KV_PROBE_TRACE") != nullptr;
  if (trace_only) {
    for (int work : {0, 1000, 2000}) cfgs.push_back({1, 4, 0, work, 16384, 16384 + 256, 1, 1});
    for (int work : {0, 1000}) cfgs.push_back({1, 2, 0, work, 16384, 16384 + 256, 1, 1});
  }
  // Session 14, call 1 ran methods 0-2, depths 2-6, rotation and max_len 16384 / 16640: all within 3% but method 2
  // (6x slower); the work spin on %globaltimer added its whole time per chunk. Call 2: which work overlaps.
  for (int ctx : trace_only ? std::vector<int>{} : std::vector<int>{16384, 4096})
    for (int method : {0, 1})
      for (int depth : {2, 4})
        for (int kind : {0, 1, 2, 3})
          for (int work : {0, 500, 1000, 2000}) {
            if ((work == 0) != (kind == 0)) continue;
            if (ctx == 4096 && (depth > 2 || work == 500 || work == 2000)) continue;
            cfgs.push_back({method, depth, 0, work, ctx, 16384 + 256, kind, 0});
          }
  printf("ctx max_len method depth rotate work_ns kind   us/layer  TB/s(K+V)\n");
  for (const Cfg& c : cfgs) {
    const int padded = c.method != 1;
    const int smem = 64 + c.depth * 2 * kChunk * (padded ? kKStride : kHd) * 2;
    float best;
    const auto launch = [&] {
      kv_kernel<<<sms, kThreads, smem>>>(kc, vc, c, arrive, sink, trace);
      return cudaPeekAtLastError();
    };
    if (best_ms(5, [&] { return cudaMemset(arrive, 0, 4); }, launch, &best)) return 1;
    const double us = best * 1000.0 / kLayers;
    const double bytes = 2.0 * kHeads * c.ctx * kHd * 2;  // K and V of one layer
    printf("%5d %7d %6d %5d %6d %7d %4d  %9.2f  %8.2f\n", c.ctx, c.max_len, c.method, c.depth, c.rotate, c.work_ns, c.work_kind, us,
           bytes / (us * 1e-6) / 1e12);
    if (c.trace) {
      // The last repetition's last layer: per chunk, landed / started (us from the layer start), four blocks.
      std::vector<unsigned long long> h(size_t(sms) * kTraceChunks * 2);
      CK(cudaMemcpy(h.data(), trace, h.size() * 8, cudaMemcpyDeviceToHost));
      for (int blk : {0, 37, 77, 127}) {
        printf("    block %3d landed/started us:", blk);
        for (int n = 0; n < kTraceChunks; ++n) {
          const unsigned long long ld = h[(size_t(blk) * kTraceChunks + n) * 2], st = h[(size_t(blk) * kTraceChunks + n) * 2 + 1];
          if (st == 0) break;
          printf(" %.2f/%.2f", ld / 1000.0, st / 1000.0);
        }
        printf("\n");
      }
    }
  }
  return 0;
}
