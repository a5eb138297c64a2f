// The persistent decode kernel: one block per worker executes exactly its worker_tiles list of the plan, for every
// step of the launch. Semantics of every op: planner/format.py (docstring). Dependencies are the plan's monotonic
// counters (release/acquire at GPU scope); every spin-wait is bounded and reports through the state's error words.
//
// Weight streaming: plain 16-byte ld.global.nc loads, 8 in flight per lane (two rows x kUnroll = 4 chunks: 64 KB
// per SM; 128 KB cost 7%, queueing every hand-off behind the stream: docs/perf-log.md v9), plus an L2 bulk
// prefetch (cp.async.bulk.prefetch.L2) of a tile's weight rows issued BEFORE the tile waits on its dependencies, so
// the weights of a tile stream while its inputs are still being produced (weights never depend on activations).
// docs/perf-log.md records why this and not (yet) the shared-memory ring of bulk copies.
//
// Reads of data produced inside the launch (scratch buffers, KV cache, tokens) use ld.global.cg (L2, never a stale
// L1 line); weights use ld.global.nc. Reductions run in a fixed order, so results are bit-identical run to run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#if defined(TILES_ATTN_PROFILE) || defined(TILES_ATTN_LANDING)
#include <stdio.h>  // the ATTN profile's and landing trace's printf (timing builds only)
#endif

#include "cuda/decode_kernel.h"

namespace tiles {
namespace cuda {

// The block's dynamic shared memory (layout: smem_layout). At namespace scope so that the plan-table helpers below
// can read the kOptPlanSmem tables at offset 0 without being handed the layout.
extern __shared__ __align__(16) uint8_t g_smem[];

// TILES_ATTN_SPLIT (timing builds, through TILES_TIMING_DEFINES; perf log, session 17's Next): where an ATTN tile's
// "inputs" phase ends. 0: after the first chunk's K/V rows have landed (the default); 1: after q, the new row and
// their barrier; 2: when thread 0's q elements have arrived (its loop used them); 3: when thread 0's own prestaged
// K/V copies have landed (its cp.async wait, before the barrier that waits for everyone's: session 18 measured
// 0.42 us between 1 and 0).
#ifndef TILES_ATTN_SPLIT
#define TILES_ATTN_SPLIT 0
#endif
// TILES_TILE_TIMING builds: the current tile's timestamps (thread 0 writes the pointer and the marks), so that the
// phase marks inside attn_tile / merge_tile need no parameter. The product build compiles the marks to nothing.
#if TILES_TILE_TIMING
namespace {
__shared__ unsigned long long* g_tile_times;
#ifdef TILES_ATTN_LANDING
// TILES_ATTN_LANDING (timing builds, through TILES_TIMING_DEFINES; perf log session 18, Next item 1): per warp, the
// latest time one of its threads returned from the prestaged chunk's cp.async wait. The partition-0 ATTN tile of KV
// head 0 in the last layer prints it, with when the tile started and when its wait ended.
__shared__ unsigned long long g_land[kWarps];
#endif
}
#define TILES_MARK(i)                                                                          \
  do {                                                                                         \
    if (threadIdx.x == 0 && g_tile_times != nullptr) g_tile_times[(i)] = global_ns();         \
  } while (0)
#else
#define TILES_MARK(i) \
  do {                \
  } while (0)
#endif

#ifdef TILES_PROBE_MLP_REDUCE
__device__ unsigned long long g_probe_mlp_acc[2048];  // the timing bound's accumulator (matvec case, GATEUP)
#endif

// TILES_ATTN_PROFILE (timing builds only, through TILES_TIMING_DEFINES): thread 0 of an ATTN tile adds the clock64
// cycles of each step of its chunk loop (the five-step loop's steps end at barriers; the warp path's sub-steps are
// warp 0's) and prints them for the last layer's tiles of a few workers and of partition 0: where a chunk's time
// goes (perf log, sessions 14 and 23).
#if defined(TILES_ATTN_PROFILE) && TILES_TILE_TIMING
#define ATTN_PROF_DECL unsigned long long prof_[8] = {0, 0, 0, 0, 0, 0, 0, 0}, prof_t_ = clock64();
#define ATTN_PROF(k)                                \
  do {                                              \
    if (threadIdx.x == 0) {                         \
      const unsigned long long n_ = clock64();      \
      prof_[(k)] += n_ - prof_t_;                   \
      prof_t_ = n_;                                 \
    }                                               \
  } while (0)
#else
#define ATTN_PROF_DECL
#define ATTN_PROF(k) \
  do {               \
  } while (0)
#endif

// The option bits as the device code sees them. TILES_LEAN_OPT (a build-time experiment knob: setup.py, like
// TILES_KUNROLL) makes them a compile-time constant, so every path of an option not in it is compiled out of every
// instantiation (the host then refuses any other TILES_KERNEL_OPT): does dead option code cost the default path
// (perf log v26, the codegen tax)?
#ifdef TILES_LEAN_OPT
#define OPT(p) (static_cast<int32_t>(TILES_LEAN_OPT))
#else
#define OPT(p) ((p).opt)
#endif

// TILES_FLAGS (a build-time experiment knob, setup.py): hand-offs by flag-in-data words instead of counters
// (flag_data.cuh, perf log v28).
#ifdef TILES_FLAGS
constexpr bool kFlags = true;
#else
constexpr bool kFlags = false;
#endif

// v38 (matvec): with a cp.async-staged first batch, the item's next batch is loaded before the staged batch's
// arithmetic. Not in the flag variant: its polls hold more registers, and there it made the tile loop spill.
constexpr bool kPreloadNext = !kFlags;

// kOptPrefetchAfterAttn: the local plan record of the matvec tile after the running ATTN tile (set by thread 0 before
// the tile; a shared variable rather than a parameter, to keep it out of the default path's registers).
namespace {
__shared__ const int32_t* g_pf_rec;  // internal: decode_kernel_default.cu compiles this file again
}

// Code that is cold on the default variant's hot path (perf log v36) is kept out of line there, after the kernel,
// so that the tile loop's hot blocks sit together; in the runtime-options kernels it stays inlined (out of line it
// made them spill 32-156 bytes).
#ifdef TILES_DEFAULT_VARIANT
#define TILES_OUTLINE __noinline__
#else
#define TILES_OUTLINE
#endif

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Small device helpers
// ---------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ float bf2f(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ float round_bf(float f) { return bf2f(f2bf(f)); }

__device__ __forceinline__ uint4 ld_weight(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void red_relaxed_add(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// All but this thread's most recent commit group (kOptAttnDoubleBuffer: the next chunk stays in flight).
__device__ __forceinline__ void cp_async_wait_but_last() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// kOptBulkStage: mbarrier + 1-D bulk copy (TMA engine). Shared-memory addresses are 32-bit shared::cta addresses
// (a CTA's own shared::cta address is a valid shared::cluster address; the kernel is launched without clusters).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// kOptStream's release counter (shared memory, CTA scope). The warp that prepares a fill publishes it with a
// release add; the one that issues it acquires with a fence after its (relaxed) add. An acq_rel add compiles to
// MEMBAR.ALL.CTA + ATOMS: every warp's release would pay the fence, so only these two do.
__device__ __forceinline__ uint32_t atom_add_relaxed_cta(uint32_t* a, uint32_t v) {
  uint32_t old;
  asm volatile("atom.relaxed.cta.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(smem_addr(a)), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ uint32_t atom_add_release_cta(uint32_t* a, uint32_t v) {
  uint32_t old;
  asm volatile("atom.release.cta.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(smem_addr(a)), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void fence_acquire_cta() { asm volatile("fence.acq_rel.cta;" ::: "memory"); }

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}

// Generic-proxy accesses of this thread to shared memory before the async-proxy (bulk copy) writes after it.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// kOptStream probe 4: the same copy with an L2 evict_first policy (weights are read once per token).
__device__ __forceinline__ void bulk_copy_g2s_evict_first(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(pol)
      : "memory");
}

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

#if TILES_ATTN_TC
// d += A * B on the tensor cores: one m16n8k16 tile, bf16 inputs, fp32 accumulators. PTX fragments (lane = 4r + t):
// A rows r (a0, a2) and r + 8 (a1, a3), columns 2t, 2t + 1 (a0, a1) and + 8 (a2, a3); B rows (k) 2t, 2t + 1 (b0) and
// + 8 (b1), column r; d rows r (d0, d1) and r + 8 (d2, d3), columns 2t, 2t + 1.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (x0, x1) as two bf16x2 words that add up to it within ~16 mantissa bits (hi = bf16(x), lo = bf16(x - hi)): two
// MMAs, hi then lo, keep about the accuracy of the fp32 path for q and the probabilities.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const uint16_t h0 = f2bf(x0), h1 = f2bf(x1);
  hi = uint32_t(h0) | (uint32_t(h1) << 16);
  lo = uint32_t(f2bf(x0 - bf2f(h0))) | (uint32_t(f2bf(x1 - bf2f(h1))) << 16);
}

// v63's fragments (PTX mma.m16n8k16 / m16n8k8, lane = 4r + t). ldmatrix: lane l gives the address of row l % 8 of
// 8x8 bf16 tile l / 8; lane 4r + t receives, of each tile, row r's columns 2t, 2t + 1 (.trans: rows 2t, 2t + 1 of
// column r). volatile without a "memory" clobber: it stays after the block barrier that publishes the tiles (a
// side effect), but the o slots' loads and stores may move across it (they never alias the K / V buffers).
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// v63d: A's rows r and r + 8 carry the hi and the lo bf16 halves of the same operand row (q's head r, P's head r),
// so one MMA does both halves and no A register is a zero: the caller adds D's rows r and r + 8.
// m16n8k8: a0 = row r at k 2t, 2t + 1, a1 = row r + 8; b0 = B rows 2t, 2t + 1 of column r; d0, d1 = row r at
// columns 2t, 2t + 1, d2, d3 = row r + 8.
__device__ __forceinline__ void mma_bf16_1688(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}
// sc holds the warps' states (kWarps x G x 2 floats) and after them q's fragments (16 G uint4) in G x (chunk + 8);
// opart ([splits = kThreads / (8 G)][G][hd] floats) the o slots, kWarps x 8 x 4G float2 (G <= 4).
static_assert((2 * kWarps + 64) <= kAttnChunkElems / kAttnWarpsHeadDim + 8, "v63's q fragments fit in sc");
static_assert(kWarps * 8 * 4 * 2 <= (kThreads / (8 * kAttnWarpsMaxGroup)) * kAttnWarpsHeadDim, "v63's o slots fit");
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// (value, index) order of the argmax: larger value first, lower index on ties. NaN never wins.
__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_argmax(float& v, int32_t& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// Block-wide sum in a fixed order (per-thread strided sums, warp butterflies, warp 0 adds the warps in order).
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kWarps ? red[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) red[kWarps] = s;
  }
  __syncthreads();
  return red[kWarps];
}

// ---------------------------------------------------------------------------------------------------------------
// Plan access (the blob lives in device memory; it is read-only for the launch)
// ---------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ Tile load_tile(const KernelParams& p, int32_t i) {
  Tile t;
  const int32_t* src = p.plan + p.h.tiles_offset + i * kTileWords;
  int32_t* dst = reinterpret_cast<int32_t*>(&t);
#pragma unroll
  for (int k = 0; k < kTileWords; ++k) dst[k] = __ldg(src + k);
  return t;
}

// kOptPlanSmem: these read the tables copied to shared memory at kernel start. Why: every ld.acquire of a wait
// invalidates L1, so each plan word read after a wait is an L2 round trip on the stage's critical path.
// TILES_FLAGS builds: every offset doubled (each element carries its epoch; flag_data.cuh).
__device__ __forceinline__ uint8_t* buffer_ptr(const KernelParams& p, int32_t b) {
  const int64_t off = (OPT(p) & kOptPlanSmem) ? reinterpret_cast<const int32_t*>(g_smem)[b]
                                              : __ldg(p.plan + p.h.buffers_offset + b * kBufferWords);
  return p.scratch + (kFlags ? 2 * off : off);
}

__device__ __forceinline__ int32_t weight_cols(const KernelParams& p, int32_t w) {
  if (OPT(p) & kOptPlanSmem) return reinterpret_cast<const int32_t*>(g_smem)[p.h.num_buffers + w];
  return __ldg(p.plan + p.h.weight_shapes_offset + 2 * w + 1);
}

// Tile from a local record (kOptPlanSmem): 16-byte shared-memory reads.
__device__ __forceinline__ Tile load_tile_rec(const int32_t* rec) {
  Tile t;
  int32_t* dst = reinterpret_cast<int32_t*>(&t);
  const int4* src = reinterpret_cast<const int4*>(rec);
#pragma unroll
  for (int k = 0; k < kTileWords / 4; ++k) {
    const int4 v = src[k];
    dst[4 * k] = v.x;
    dst[4 * k + 1] = v.y;
    dst[4 * k + 2] = v.z;
    dst[4 * k + 3] = v.w;
  }
#pragma unroll
  for (int k = kTileWords / 4 * 4; k < kTileWords; ++k) dst[k] = rec[k];
  return t;
}

// Copies the plan tables and (when they fit) this worker's tile records into shared memory. Returns whether the
// tile records are local. Called by all threads; ends with a barrier.
__device__ bool load_plan_smem(const KernelParams& p, const SmemLayout& L, int32_t tbeg, int32_t tend) {
  int32_t* tab = reinterpret_cast<int32_t*>(g_smem + L.ptab);
  const int32_t nb = p.h.num_buffers, nw = p.h.num_weights;
  for (int i = threadIdx.x; i < nb; i += kThreads) tab[i] = __ldg(p.plan + p.h.buffers_offset + i * kBufferWords);
  for (int i = threadIdx.x; i < nw; i += kThreads) tab[nb + i] = __ldg(p.plan + p.h.weight_shapes_offset + 2 * i + 1);
  const int32_t n = tend - tbeg;
  const bool local = n <= L.tiles_cap;
  if (local) {
    int32_t* rec = reinterpret_cast<int32_t*>(g_smem + L.prec);
    const int32_t* wt = p.plan + p.h.worker_tiles_offset + tbeg;
    for (int i = threadIdx.x; i < n * kPlanRecWords; i += kThreads) {
      const int32_t j = i / kPlanRecWords, w = i - j * kPlanRecWords;
      const int32_t* tile = p.plan + p.h.tiles_offset + __ldg(wt + j) * kTileWords;
      int32_t v = 0;
      if (w < kTileWords) {
        v = __ldg(tile + w);
      } else {
        const int32_t k = (w - kTileWords) / kWaitWords, c = (w - kTileWords) - k * kWaitWords;
        const int32_t wb = __ldg(tile + offsetof(Tile, wait_begin) / 4);
        const int32_t wc = __ldg(tile + offsetof(Tile, wait_count) / 4);
        if (k < wc) v = __ldg(p.plan + p.h.waits_offset + (wb + k) * kWaitWords + c);
      }
      rec[i] = v;
    }
  }
  __syncthreads();
  return local;
}

__device__ __forceinline__ uint32_t* counter_ptr(const KernelParams& p, int32_t c) {
  return p.state + kStateHeaderWords + c * p.h.counter_stride;
}

// ---------------------------------------------------------------------------------------------------------------
// Errors and waits
// ---------------------------------------------------------------------------------------------------------------
// First error wins (atomicCAS on ERROR); the winner fills in the details. (Out of line together with v36's two
// functions it made the default variant spill 52 bytes: inlined.)
__device__ void raise_error(const KernelParams& p, int32_t code, int32_t worker, int32_t tile, int32_t step,
                            int32_t counter, uint32_t seen, uint32_t wanted) {
  if (atomicCAS(p.state + kStateError, 0u, static_cast<uint32_t>(code)) == 0u) {
    p.state[kStateErrorWorker] = static_cast<uint32_t>(worker);
    p.state[kStateErrorTile] = static_cast<uint32_t>(tile);
    p.state[kStateErrorStep] = static_cast<uint32_t>(step);
    p.state[kStateErrorCounter] = static_cast<uint32_t>(counter);
    p.state[kStateErrorSeen] = seen;
    p.state[kStateErrorWanted] = wanted;
    __threadfence();
  }
}

#ifdef TILES_FLAGS
#include "cuda/flag_data.cuh"
#endif

// Scratch-buffer element access: flagged words in TILES_FLAGS builds (flag_data.cuh, perf log v28), plain otherwise.
// get_f32 reads an element produced in this launch (ld.cg: L2, never a stale L1 line; flagged: polled
// until it carries `epoch`).
__device__ __forceinline__ void put_f32(float* b, int64_t i, float v, uint32_t epoch) {
#ifdef TILES_FLAGS
  st_flag_f32(b, i, v, epoch);
#else
  b[i] = v;
#endif
}

__device__ __forceinline__ void put_bf16(uint16_t* b, int64_t i, uint16_t v, uint32_t epoch) {
#ifdef TILES_FLAGS
  st_flag_bf16(b, i, v, epoch);
#else
  b[i] = v;
#endif
}

__device__ __forceinline__ float get_f32(const KernelParams& p, const float* b, int64_t i, uint32_t epoch) {
#ifdef TILES_FLAGS
  return fl_get_f32(p, b, i, epoch);
#else
  return __ldcg(b + i);
#endif
}

// kOptPollPrefetch: thread 0's cursor over the rows of the GATEUP tile to prefetch while it polls (a: gate rows,
// b: up rows, from the tile's first row; off advances by the piece per unsuccessful poll up to len).
struct PollCursor {
  const uint8_t* a;
  const uint8_t* b;
  int64_t off, len;
  int32_t k;  // the GATEUP tile's index in the worker's list (-1: none)
};

__device__ __forceinline__ void poll_prefetch(const KernelParams& p, PollCursor* pc) {
  if (pc == nullptr || pc->off >= pc->len) return;
  const int64_t n = pc->len - pc->off < p.poll_piece ? pc->len - pc->off : p.poll_piece;
  prefetch_l2(pc->a + pc->off, static_cast<uint32_t>(n));
  prefetch_l2(pc->b + pc->off, static_cast<uint32_t>(n));
  pc->off += n;
}

// A counter wait's periodic check: true when it must give up (another worker raised an error, or this wait ran
// past p.timeout_ns: the timeout is raised here with the value last seen).
__device__ __forceinline__ bool wait_gives_up(const KernelParams& p, uint64_t t0, int32_t c, uint32_t seen,
                                              uint32_t target, int32_t worker, int32_t tile, int32_t step) {
  if (ld_relaxed(p.state + kStateError) != 0u) return true;
  if (global_ns() - t0 > p.timeout_ns) {
    raise_error(p, kErrorWaitTimeout, worker, tile, step, c, seen, target);
    return true;
  }
  return false;
}

// Thread-level bounded wait until (int32)(counter - target) >= 0. False on timeout (error raised here) or when
// another worker has raised an error (this worker must then exit). `pc`: kOptPollPrefetch's cursor or null.
__device__ bool wait_counter(const KernelParams& p, int32_t c, uint32_t target, int32_t worker, int32_t tile,
                             int32_t step, PollCursor* pc = nullptr) {
  const uint32_t* ctr = counter_ptr(p, c);
  uint32_t v = ld_acquire(ctr);
  if (static_cast<int32_t>(v - target) >= 0) return true;
  const uint64_t t0 = global_ns();
  for (uint32_t iter = 1;; ++iter) {
    poll_prefetch(p, pc);  // one piece per round trip that found the counter short
    v = ld_acquire(ctr);
    if (static_cast<int32_t>(v - target) >= 0) return true;
    if ((iter & 15u) == 0u) {
      if (wait_gives_up(p, t0, c, v, target, worker, tile, step)) return false;
      if (iter > 2048u) __nanosleep(128);
    }
  }
}

// kOptPollAhead (thread 0, after one acquire load found the counter short): three relaxed loads in flight, issued
// p.poll_gap SM cycles apart, so the counter's change is seen about half a round trip (+ half a gap) after it
// reaches L2 instead of a full one on average. An acquire load cannot overlap the next (its L1 invalidation waits for
// it), hence relaxed loads; the ordering then rests on the block barrier after the wait and on every read of a
// produced buffer going to L2 (ld.cg, cp.async.cg). p.poll_fence = 1 adds fence.acq_rel.gpu after the detection
// (formal acquire; it also waits for the two loads still in flight). Perf log v26: gap 0 (each load re-issued as
// soon as it is checked) is best; 256 and 512 lose.
__device__ bool wait_counter_ahead(const KernelParams& p, int32_t c, uint32_t target, int32_t worker, int32_t tile,
                                   int32_t step) {
  const uint32_t* ctr = counter_ptr(p, c);
  uint32_t v = ld_acquire(ctr);
  if (static_cast<int32_t>(v - target) >= 0) return true;
  const uint64_t gap = static_cast<uint64_t>(p.poll_gap);
  auto pause = [&]() {
    const uint64_t t = clock64();
    while (clock64() - t < gap) {
    }
  };
  uint32_t a = ld_relaxed(ctr);
  pause();
  uint32_t b = ld_relaxed(ctr);
  pause();
  uint32_t d = ld_relaxed(ctr);
  const uint64_t t0 = global_ns();
  for (uint32_t iter = 1;; ++iter) {
    pause();
    if (static_cast<int32_t>(a - target) >= 0) break;
    a = ld_relaxed(ctr);
    pause();
    if (static_cast<int32_t>(b - target) >= 0) break;
    b = ld_relaxed(ctr);
    pause();
    if (static_cast<int32_t>(d - target) >= 0) break;
    d = ld_relaxed(ctr);
    if ((iter & 15u) == 0u && wait_gives_up(p, t0, c, d, target, worker, tile, step)) return false;
  }
  if (p.poll_fence) __threadfence();
  return true;
}

// Block-level: thread 0 waits for every Wait record of the tile, then the block proceeds (or all exit).
// `rec`: the tile's local record (kOptPlanSmem) or null. One barrier (__syncthreads_and) publishes the outcome.
// kAhead: the PollPrefetch instantiation, where kOptPollAhead may run.
template <bool kAhead>
__device__ bool wait_tile(const KernelParams& p, const Tile& t, uint32_t epoch, int32_t worker, int32_t tile,
                          int32_t step, const int32_t* rec, PollCursor* pc = nullptr) {
  int ok = 1;
  if (threadIdx.x == 0) {
    const bool local = rec != nullptr && t.wait_count <= kPlanRecWaits;
    for (int k = 0; k < t.wait_count && ok; ++k) {
      int32_t c, count, off;
      if (local) {
        const int32_t* w = rec + kTileWords + k * kWaitWords;
        c = w[0];
        count = w[1];
        off = w[2];
      } else {
        const int32_t* w = p.plan + p.h.waits_offset + (t.wait_begin + k) * kWaitWords;
        c = __ldg(w);
        count = __ldg(w + 1);
        off = __ldg(w + 2);
      }
      const uint32_t target = (epoch + static_cast<uint32_t>(off)) * static_cast<uint32_t>(count);
      ok = (kAhead && (OPT(p) & kOptPollAhead) ? wait_counter_ahead(p, c, target, worker, tile, step)
                                                : wait_counter(p, c, target, worker, tile, step, pc))
               ? 1
               : 0;
    }
  }
  return __syncthreads_and(ok) != 0;
}

// All writes of the tile by all threads happen before the release increment. `also` >= 0: a second counter that
// only advances (v44: the increment of the marked ATTN tile before a local MERGE, which published nothing that
// the counter's waiters read), added after the release so that the release does not wait for it.
__device__ __forceinline__ void signal_tile(const KernelParams& p, const Tile& t, int32_t also = -1) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (!(OPT(p) & kOptNoFence)) __threadfence();
    red_release_add(counter_ptr(p, t.signal), 1u);
    if (also >= 0) red_relaxed_add(counter_ptr(p, also), 1u);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Prefetch: weights (and the KV rows of an attention tile) into L2; fire-and-forget, never waits.
// ---------------------------------------------------------------------------------------------------------------
__device__ void prefetch_range(const void* base, int64_t bytes, int64_t cap) {
  if (bytes > cap) bytes = cap;
  bytes &= ~int64_t(15);
  const char* b = static_cast<const char*>(base);
  const int lane = threadIdx.x & 31;
  constexpr int64_t kPiece = 16384;
  for (int64_t off = int64_t(lane) * kPiece; off < bytes; off += 32 * kPiece) {
    const int64_t n = bytes - off < kPiece ? bytes - off : kPiece;
    prefetch_l2(b + off, static_cast<uint32_t>(n));
  }
}

// kOptPrefetchAfterAttn (warp 0): the first `cap` bytes of a matvec tile's rows (of each matrix) into L2. The same
// ranges as prefetch_tile's matvec case with no skip; one helper for both changed the register allocation (spills)
// of the ring and PollPrefetch instantiations (ptxas, session 4), so the few lines stand twice.
__device__ void prefetch_rows(const KernelParams& p, const Tile& t, int64_t cap) {
  const int64_t cols = weight_cols(p, t.weight);
  const int64_t bytes = int64_t(t.row_end - t.row_begin) * cols * 2;
  prefetch_range(p.weights[t.weight] + int64_t(t.row_begin) * cols, bytes, cap);
  if (t.op == kOpGateup) prefetch_range(p.weights[t.weight2] + int64_t(t.row_begin) * cols, bytes, cap);
}

// Called by warp 0 only. Compiled out of the default variant, which launch_decode runs only with the prefetch off
// (the default with staged weights): its ~2300 never-executed instructions sat between the hot code of the tile
// loop (perf log v35).
__device__ void prefetch_tile(const KernelParams& p, const Tile& t, int64_t pos) {
#ifndef TILES_DEFAULT_VARIANT
  const int64_t cap = p.prefetch_bytes;
  if (cap <= 0) return;
  switch (t.op) {
    case kOpQkv:
    case kOpResid:
    case kOpGateup:
    case kOpLmhead: {
      const int64_t cols = weight_cols(p, t.weight);
      int64_t rows = t.row_end - t.row_begin, skip = 0;
      if ((OPT(p) & kOptStageWeights) && (OPT(p) & kOptPrefetchPastStage) && cols / 8 <= 32 * kUnroll) {
        // The staged first batches cover whole rows here (no k-split beyond one batch): rows of the first
        // kWarps units are in shared memory already, so the prefetch window starts after them.
        const int64_t units = t.op == kOpGateup ? rows : (rows + 1) / 2;
        const int64_t staged_units = units < kWarps ? units : kWarps;
        skip = t.op == kOpGateup ? staged_units : 2 * staged_units;
        if (skip > rows) skip = rows;
      }
      rows -= skip;
      prefetch_range(p.weights[t.weight] + (t.row_begin + skip) * cols, rows * cols * 2, cap);
      if (t.op == kOpGateup)
        prefetch_range(p.weights[t.weight2] + (t.row_begin + skip) * cols, rows * cols * 2, cap);
      break;
    }
    case kOpAttn: {
      int32_t lo, hi;
      attn_partition_range(static_cast<int32_t>(pos + 1), t.aux1, p.h.attn_partitions, p.h.attn_granule,
                           p.h.attn_single, &lo, &hi);
      if (hi > lo) {
        const int64_t hd = p.h.head_dim;
        const int64_t off = (int64_t(t.aux0) * p.max_cache_len + lo) * hd;
        prefetch_range(p.k_cache[t.layer] + off, int64_t(hi - lo) * hd * 2, cap);
        prefetch_range(p.v_cache[t.layer] + off, int64_t(hi - lo) * hd * 2, cap);
      }
      break;
    }
    default:
      break;
  }
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Input vectors of matvec tiles (into shared memory, bf16)
// ---------------------------------------------------------------------------------------------------------------
// h = bf16(bf16(x * rsqrt(mean(x^2) + eps)) * w): HF's RMSNorm order, fp32 residual in, bf16 out.
// `epoch`: the step's (TILES_FLAGS builds poll x's words until they carry it).
// RMSNorm for vectors longer than kThreads * kNormRegs (or without kOptNormRegs): two reads of x. Out of line: no
// supported model of the default set takes it, and inlined it sat between the hot blocks (perf log v36).
__device__ TILES_OUTLINE void rmsnorm_general(const KernelParams& p, const float* x, const uint16_t* w, int n,
                                             uint16_t* h, float* red, uint32_t epoch) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = get_f32(p, x, i, epoch);
    ss = fmaf(v, v, ss);
  }
  const float total = block_sum(ss, red);
  const float r = 1.0f / sqrtf(total / static_cast<float>(n) + p.eps);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = get_f32(p, x, i, epoch);
    h[i] = f2bf(round_bf(v * r) * bf2f(__ldg(w + i)));
  }
  __syncthreads();
}

__device__ void rmsnorm_to_smem(const KernelParams& p, const float* x, const uint16_t* w, int n, uint16_t* h,
                                float* red, uint32_t epoch) {
  if ((kFlags || (OPT(p) & kOptNormRegs)) && n <= kThreads * kNormRegs) {
    // One read of x (and w) into registers: one L2 round trip instead of two. Same order of operations.
    float xv[kNormRegs], wv[kNormRegs];
#ifdef TILES_FLAGS
    {
      int64_t idx[kNormRegs];
#pragma unroll
      for (int k = 0; k < kNormRegs; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kThreads;
        idx[k] = i < n ? i : -1;
      }
      fl_read_f32<kNormRegs>(p, x, idx, epoch, xv);  // skipped elements read 0
    }
#endif
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (!kFlags) xv[k] = i < n ? __ldcg(x + i) : 0.f;
      wv[k] = i < n ? bf2f(__ldg(w + i)) : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k)
      if (threadIdx.x + k * kThreads < n) ss = fmaf(xv[k], xv[k], ss);
    const float total = block_sum(ss, red);
    const float r = 1.0f / sqrtf(total / static_cast<float>(n) + p.eps);
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int i = threadIdx.x + k * kThreads;
      if (i < n) h[i] = f2bf(round_bf(xv[k] * r) * wv[k]);
    }
    __syncthreads();
    return;
  }
  rmsnorm_general(p, x, w, n, h, red, epoch);
}

__device__ void copy_bf16_to_smem(const KernelParams& p, const uint16_t* src, int n, uint16_t* h, uint32_t epoch) {
  const int chunks = n / 8;  // n % 8 == 0 (checked on the host)
  uint4* d = reinterpret_cast<uint4*>(h);
#ifdef TILES_FLAGS
  // Four chunks per thread in flight at once (a loop of single polls would pay one round trip per chunk).
  for (int i0 = threadIdx.x; i0 < chunks; i0 += 4 * kThreads) {
    int32_t c[4];
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) c[k] = i0 + k * kThreads < chunks ? i0 + k * kThreads : -1;
    fl_read_bf16x8<4>(p, src, c, epoch, v);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (c[k] >= 0) d[c[k]] = v[k];
  }
#else
  const uint4* s = reinterpret_cast<const uint4*>(src);
  for (int i = threadIdx.x; i < chunks; i += kThreads) d[i] = __ldcg(s + i);
#endif
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------------------------
// Matvec tiles: QKV, RESID, GATEUP, LMHEAD
// ---------------------------------------------------------------------------------------------------------------
// A warp computes a "unit": two rows (GATEUP: the gate row and the up row of one output row) over a slice of the
// columns. When a tile has fewer units than warps, the columns are split (ksplit) and the slices are added in a
// fixed order afterwards.
struct MatvecOut {
  int op;
  int32_t row_begin, row_end, out_offset;
  uint16_t* out_bf16;   // QKV, GATEUP
  float* out_f32;       // RESID; LMHEAD: the tile's rows [row - row_begin] in shared memory too, or null (v54)
  const float* resid;   // RESID in2
  const float* resid_smem;  // RESID residual rows [row - row_begin] in shared memory (kOptResidSmem) or null
  float* logits;        // LMHEAD row of this step
  uint32_t epoch;       // the step's (flagged stores and reads of TILES_FLAGS builds)
#ifdef TILES_FLAGS
  const KernelParams* params;  // for the polls of RESID's residual rows without kOptResidSmem
#endif
};

__device__ __forceinline__ void emit(const MatvecOut& o, int32_t unit, float a0, float a1) {
  switch (o.op) {
    case kOpQkv: {
      const int32_t r = o.row_begin + 2 * unit;
      put_bf16(o.out_bf16, o.out_offset + (r - o.row_begin), f2bf(a0), o.epoch);
      if (r + 1 < o.row_end) put_bf16(o.out_bf16, o.out_offset + (r + 1 - o.row_begin), f2bf(a1), o.epoch);
      break;
    }
    case kOpResid: {
      const int32_t r = o.row_begin + 2 * unit;
      const int32_t i0 = o.out_offset + (r - o.row_begin);
      if (o.resid_smem != nullptr) {
        put_f32(o.out_f32, i0, o.resid_smem[r - o.row_begin] + a0, o.epoch);
        if (r + 1 < o.row_end) put_f32(o.out_f32, i0 + 1, o.resid_smem[r + 1 - o.row_begin] + a1, o.epoch);
      } else {
#ifdef TILES_FLAGS
        const int64_t idx[2] = {i0, r + 1 < o.row_end ? i0 + 1 : -1};
        float rv[2];
        fl_read_f32<2>(*o.params, o.resid, idx, o.epoch, rv);
        put_f32(o.out_f32, i0, rv[0] + a0, o.epoch);
        if (r + 1 < o.row_end) put_f32(o.out_f32, i0 + 1, rv[1] + a1, o.epoch);
#else
        o.out_f32[i0] = __ldcg(o.resid + i0) + a0;
        if (r + 1 < o.row_end) o.out_f32[i0 + 1] = __ldcg(o.resid + i0 + 1) + a1;
#endif
      }
      break;
    }
    case kOpGateup: {
      const int32_t r = o.row_begin + unit;
      const float silu = a0 / (1.0f + expf(-a0));
      put_bf16(o.out_bf16, o.out_offset + (r - o.row_begin), f2bf(silu * a1), o.epoch);
      break;
    }
    case kOpLmhead: {
      const int32_t r = o.row_begin + 2 * unit;
      o.logits[r] = a0;
      if (r + 1 < o.row_end) o.logits[r + 1] = a1;
      if (o.out_f32 != nullptr) {
        o.out_f32[r - o.row_begin] = a0;
        if (r + 1 < o.row_end) o.out_f32[r + 1 - o.row_begin] = a1;
      }
      break;
    }
    default:
      break;
  }
}

// floor(a / b) for 0 <= a < 2^16 and 1 <= b <= 64 in four instructions (I2F, FADD, MUFU.RCP, FMUL, F2I) instead of
// the ~20-instruction dependent sequence of a 32-bit integer division by a runtime value (perf log v25: two of them
// per matvec item on the critical path). (a + 0.5) / b lies at least 0.5 / b from an integer, and rcp.approx errs by
// at most one ulp; tests/test_fast_div.py checks the whole domain with the reciprocal one ulp off either way.
__device__ __forceinline__ int32_t div_small(int32_t a, int32_t b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(static_cast<float>(b)));
  return static_cast<int32_t>((static_cast<float>(a) + 0.5f) * r);
}

// How a tile's rows are cut into warp work items (identical for the staging before the wait and the matvec).
struct MatvecShape {
  int32_t nunits, nchunks, ksplit, slice, items;
  bool pair;
};

__device__ __forceinline__ MatvecShape matvec_shape(int op, int32_t nrows, int32_t cols) {
  MatvecShape m;
  m.pair = (op == kOpGateup);
  m.nunits = m.pair ? nrows : (nrows + 1) / 2;
  m.nchunks = cols / 8;
  m.ksplit = 1;
  if (m.nunits < kWarps) {
    m.ksplit = div_small(kWarps, m.nunits);  // nunits < kWarps
    const int32_t maxk = (m.nchunks + 32 * kUnroll - 1) / (32 * kUnroll);
    if (m.ksplit > maxk) m.ksplit = maxk;
    if (m.ksplit < 1) m.ksplit = 1;
  }
  m.slice = div_small(m.nchunks + m.ksplit - 1, m.ksplit);  // nchunks = cols / 8 < 2^16, ksplit <= kWarps
  m.items = m.nunits * m.ksplit;
  return m;
}

struct MatvecItem {
  const uint16_t* A;
  const uint16_t* B;
  bool bvalid;
  int32_t unit, c0, c1;
};

__device__ __forceinline__ MatvecItem matvec_item(const MatvecShape& m, const uint16_t* W, const uint16_t* W2,
                                                  int32_t row_begin, int32_t row_end, int32_t cols, int32_t item) {
  MatvecItem it;
  it.unit = div_small(item, m.ksplit);  // item < nunits * ksplit < 2^16
  const int32_t ks = item - it.unit * m.ksplit;
  it.c0 = ks * m.slice;
  it.c1 = it.c0 + m.slice < m.nchunks ? it.c0 + m.slice : m.nchunks;
  if (m.pair) {
    const int64_t r = row_begin + it.unit;
    it.A = W + r * cols;
    it.B = W2 + r * cols;
    it.bvalid = true;
  } else {
    const int64_t r = row_begin + 2 * it.unit;
    it.A = W + r * cols;
    it.bvalid = r + 1 < row_end;
    it.B = it.bvalid ? it.A + cols : it.A;
  }
  return it;
}

// One batch of an item from global memory into a lane's weight registers: chunks base + u * 32 + lane of both rows,
// zeros past the item's slice (and for the missing second row).
__device__ __forceinline__ void load_batch(const MatvecItem& it, int32_t base, int lane, uint4 (&wa)[kUnroll],
                                           uint4 (&wb)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int32_t c = base + u * 32 + lane;
    if (c < it.c1) {
      wa[u] = ld_weight(it.A + int64_t(c) * 8);
      wb[u] = it.bvalid ? ld_weight(it.B + int64_t(c) * 8) : make_uint4(0, 0, 0, 0);
    } else {
      wa[u] = make_uint4(0, 0, 0, 0);
      wb[u] = make_uint4(0, 0, 0, 0);
    }
  }
}

// With a k-split, the block adds each unit's slices in slice order (fixed, so bit-identical) and emits the rows.
__device__ __forceinline__ void ksplit_sum(const MatvecShape& m, const float* red, const MatvecOut& o) {
  if (m.ksplit <= 1) return;
  __syncthreads();
  for (int32_t unit = threadIdx.x; unit < m.nunits; unit += kThreads) {
    float a0 = 0.f, a1 = 0.f;
    for (int32_t ks = 0; ks < m.ksplit; ++ks) {
      a0 += red[2 * (unit * m.ksplit + ks)];
      a1 += red[2 * (unit * m.ksplit + ks) + 1];
    }
    emit(o, unit, a0, a1);
  }
}

// kOptStageWeights: before the tile waits, each warp copies the first batch of its first item into its stage
// (cp.async, asynchronous): weights never depend on activations, so they stream while the inputs are produced.
// Each lane later reads back exactly the 16-byte chunks it copied itself (no cross-lane hand-off).
__device__ void stage_first_batch(const KernelParams& p, const Tile& t, uint8_t* stage) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t cols = weight_cols(p, t.weight);
  const MatvecShape m = matvec_shape(t.op, t.row_end - t.row_begin, cols);
  if (warp < m.items) {
    const MatvecItem it = matvec_item(m, p.weights[t.weight], t.weight2 >= 0 ? p.weights[t.weight2] : nullptr,
                                      t.row_begin, t.row_end, cols, warp);
    uint8_t* sw = stage + warp * kStageBytesPerWarp;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t c = it.c0 + u * 32 + lane;
      if (c < it.c1) {
        cp_async16(sw + (u * 32 + lane) * 16, it.A + int64_t(c) * 8);
        if (it.bvalid) cp_async16(sw + ((kUnroll + u) * 32 + lane) * 16, it.B + int64_t(c) * 8);
      }
    }
  }
  // Every thread commits one group per staged tile, possibly empty: kOptStageAhead's wait_group 1 counts on it.
  cp_async_commit();
}

__device__ __forceinline__ bool op_is_matvec(int32_t op) {
  return op == kOpQkv || op == kOpResid || op == kOpGateup || op == kOpLmhead;
}

// kOptBulkStage state, per warp (every lane of a warp holds the same values; registers of the kernel's loop).
// Each warp owns one stage region (kStageBytesPerWarp: its first batch, row A then row B, the chunks in the order
// the matvec's lanes read them) and one mbarrier. The barrier completes one phase per armed batch; `phase` is the
// parity of the next completion. A batch is armed for one local tile index and consumed (waited for) exactly once
// before the region is re-armed or the block exits.
struct BulkCtx {
  uint8_t* stage;        // all warps' regions: stage + warp * kStageBytesPerWarp
  uint64_t* bars;        // [kWarps]
  uint32_t phase;
  int32_t armed;         // local tile index whose batch is staged / in flight in this warp's region, -1 none
  int32_t k;             // local index of the running tile
  int32_t k2;            // local index of the worker's next matvec tile in this step, -1 none
  const int32_t* rec2;   // its local plan record (kOptPlanSmem) or null
  int32_t tile2;         // its plan tile index (blob read when rec2 is null)
};

// Lane 0: issues this warp's first batch of tile t (the same item and chunks as stage_first_batch) as at most two
// 1-D bulk copies completing on the warp's mbarrier. False when the warp has no item in t (nothing armed).
__device__ bool bulk_issue_lane0(const KernelParams& p, const Tile& t, uint8_t* stage, uint64_t* bars) {
  const int warp = threadIdx.x >> 5;
  const int32_t cols = weight_cols(p, t.weight);
  const MatvecShape m = matvec_shape(t.op, t.row_end - t.row_begin, cols);
  if (warp >= m.items) return false;
  const MatvecItem it = matvec_item(m, p.weights[t.weight], t.weight2 >= 0 ? p.weights[t.weight2] : nullptr,
                                    t.row_begin, t.row_end, cols, warp);
  int32_t n = it.c1 - it.c0;
  if (n > 32 * kUnroll) n = 32 * kUnroll;
  if (n < 0) n = 0;
  const uint32_t bytes = static_cast<uint32_t>(n) * 16u;  // rows are 16-byte aligned: cols % 8 == 0 (host check)
  uint8_t* sw = stage + warp * kStageBytesPerWarp;
  uint64_t* bar = bars + warp;
  mbar_arrive_expect_tx(bar, it.bvalid ? 2u * bytes : bytes);
  if (bytes > 0) {
    bulk_copy_g2s(sw, it.A + int64_t(it.c0) * 8, bytes, bar);
    if (it.bvalid) bulk_copy_g2s(sw + kUnroll * 32 * 16, it.B + int64_t(it.c0) * 8, bytes, bar);
  }
  return true;
}

// Warp-level: waits (bounded) for the warp's armed batch, if any. After it the region may be read, or re-armed.
__device__ void bulk_consume(const KernelParams& p, BulkCtx& bc) {
  if (bc.armed < 0) return;
  uint64_t* bar = bc.bars + (threadIdx.x >> 5);
  if (!mbar_try_wait(bar, bc.phase)) {
    const uint64_t t0 = global_ns();
    while (!mbar_try_wait(bar, bc.phase)) {
      if (global_ns() - t0 > p.timeout_ns) {
        // A bulk copy that never lands (a fault would have stopped the launch): report it, stop waiting.
        raise_error(p, kErrorWaitTimeout, blockIdx.x, bc.armed, -1, -2, bc.phase, 0u);
        break;
      }
    }
  }
  bc.phase ^= 1u;
  bc.armed = -1;
}

// Warp-level: arms the warp's region with tile t's first batch (local index kk). The region must be free (consumed).
// The __syncwarp + proxy fence order the lanes' earlier generic reads of the region before the copy engine's writes.
__device__ void bulk_arm(const KernelParams& p, BulkCtx& bc, const Tile& t, int32_t kk) {
  __syncwarp();
  int a = 0;
  if ((threadIdx.x & 31) == 0) {
    fence_proxy_async_smem();
    a = bulk_issue_lane0(p, t, bc.stage, bc.bars) ? 1 : 0;
  }
  a = __shfl_sync(0xffffffffu, a, 0);
  bc.armed = a ? kk : -1;
}

// Warp-level, once the warp no longer needs its region for the running tile: stage the next matvec tile's batch.
__device__ void bulk_next(const KernelParams& p, BulkCtx& bc) {
  bulk_consume(p, bc);  // a batch armed but never read (an item with an empty slice) still completes first
  if (bc.k2 < 0) return;
  const Tile t2 = bc.rec2 != nullptr ? load_tile_rec(bc.rec2) : load_tile(p, bc.tile2);
  bulk_arm(p, bc, t2, bc.k2);
}

// ---------------------------------------------------------------------------------------------------------------
// kOptWeightRing: per-warp rings of weight batches streamed by bulk copies across tiles, stages and steps
// ---------------------------------------------------------------------------------------------------------------
// A warp's stream is the sequence of row batches its matvec loop reads, in that order: for each matvec tile of the
// worker (plan order, step after step), for each of the warp's items (item = warp, warp + kWarps, ...), for each
// batch of kRingChunks chunks of the item's column slice: row A's piece, then row B's (when the item has one).
// Batch n lives in slot n % kRingSlots; its mbarrier completes one phase per fill, so its parity is
// (n / kRingSlots) & 1. Lane 0 produces (RingCur in shared memory), all lanes consume (RingCtx in registers).
// Weights never depend on activations, so the stream needs no dependency: only the ring's capacity throttles it.
struct RingCur {      // kRingCurWords words; lane 0 of its warp only
  const uint16_t* A;  // the current item's rows (B = A when it has no row B)
  const uint16_t* B;
  int32_t s, k;       // step, worker-local tile index (tbeg..tend)
  int32_t item;       // the warp's item in tile k, -1 = not yet located
  int32_t base;       // first chunk of the batch in the item's slice
  int32_t c1;         // end of the item's slice
  int32_t row;        // 0 = row A, 1 = row B
  int32_t bvalid;     // the item has a row B
  int32_t n;          // batches issued so far (ring) / prefetched so far (L2 cursor)
  int32_t done;       // the stream has no further batch in this launch
  int32_t pad[3];
};
static_assert(sizeof(RingCur) == kRingCurWords * 4, "RingCur size");

struct RingCtx {
  uint8_t* slots;    // this warp's kRingSlots slots
  uint64_t* bars;    // this warp's kRingSlots mbarriers
  RingCur* cur;      // this warp's ring cursor; cur + 1: its L2 look-ahead cursor
  const int32_t* recs;
  int32_t tbeg, tend;
  uint32_t taken;    // batches consumed by this warp (every lane holds it)
};

struct RingPlan {   // what the producer walks (the worker's local tile records)
  const int32_t* recs;
  int32_t tbeg, tend;
};

// Moves c to the batch at or after its position; false when none is left in the launch. Inside an item this is a
// few instructions; the tile walk runs once per item. A whole pass over the worker's tiles without a batch means the
// warp has no item in any of them: the stream is empty for good.
__device__ __forceinline__ bool ring_locate(const KernelParams& p, const RingPlan r, RingCur& c,
                                            const uint16_t** src, uint32_t* bytes) {
  if (c.done) return false;
  if (c.item < 0 || c.base >= c.c1) {
    const int warp = threadIdx.x >> 5;
    int32_t empty_tiles = 0;
    for (;;) {
      if (c.item >= 0) c.item += kWarps;  // the previous item is done (or its slice is empty)
      if (c.k >= r.tend) {
        c.k = r.tbeg;
        ++c.s;
        c.item = -1;
      }
      if (c.s >= p.num_steps || empty_tiles > r.tend - r.tbeg) {
        c.done = 1;
        return false;
      }
      const int32_t* rec = r.recs + (c.k - r.tbeg) * kPlanRecWords;
      const int32_t op = rec[offsetof(Tile, op) / 4];
      if (!op_is_matvec(op)) {
        ++c.k;
        ++empty_tiles;
        c.item = -1;
        continue;
      }
      const int32_t rb = rec[offsetof(Tile, row_begin) / 4], re = rec[offsetof(Tile, row_end) / 4];
      const int32_t cols = weight_cols(p, rec[offsetof(Tile, weight) / 4]);
      const MatvecShape m = matvec_shape(op, re - rb, cols);
      if (c.item < 0) {
        if (warp >= m.items) {
          ++c.k;
          ++empty_tiles;
          continue;
        }
        c.item = warp;
      }
      if (c.item >= m.items) {
        ++c.k;
        c.item = -1;
        continue;
      }
      const int32_t w2 = rec[offsetof(Tile, weight2) / 4];
      const MatvecItem it = matvec_item(m, p.weights[rec[offsetof(Tile, weight) / 4]],
                                        w2 >= 0 ? p.weights[w2] : nullptr, rb, re, cols, c.item);
      if (it.c0 >= it.c1) continue;  // an empty slice: the matvec loop reads no batch of it
      empty_tiles = 0;
      c.A = it.A;
      c.B = it.B;
      c.base = it.c0;
      c.c1 = it.c1;
      c.row = 0;
      c.bvalid = it.bvalid ? 1 : 0;
      break;
    }
  }
  const int32_t left = c.c1 - c.base;
  *bytes = static_cast<uint32_t>(left < kRingChunks ? left : kRingChunks) * 16u;
  *src = (c.row ? c.B : c.A) + int64_t(c.base) * 8;
  return true;
}

__device__ __forceinline__ void ring_advance(RingCur& c) {
  if (c.row == 0 && c.bvalid) {
    c.row = 1;
  } else {
    c.row = 0;
    c.base += kRingChunks;
  }
}

// Lane 0: fills every free slot (issued < taken + p.ring_slots) with the warp's next batches, then moves the L2
// look-ahead cursor to p.ring_l2_ahead batches past the ring. The caller has ordered the lanes' reads of the freed
// slots before these writes (ring_release). Scalar arguments, not a RingCtx reference: no stack copy of the context.
__device__ __forceinline__ void ring_fill_lane0(const KernelParams& p, const int32_t* recs, int32_t tbeg, int32_t tend,
                                             RingCur* cur, uint8_t* slots, uint64_t* bars, uint32_t taken) {
  const RingPlan rp{recs, tbeg, tend};
  RingCur c = cur[0];
  bool issued = false;
  // p.ring_slots (2..kRingSlots) of the kRingSlots slots are used: batch n still goes to slot n % kRingSlots, which
  // batch n - kRingSlots (< taken) has freed.
  while (static_cast<uint32_t>(c.n) < taken + static_cast<uint32_t>(p.ring_slots)) {
    const uint16_t* src;
    uint32_t bytes;
    if (!ring_locate(p, rp, c, &src, &bytes)) break;
    const int slot = c.n % kRingSlots;
    uint64_t* bar = bars + slot;
    mbar_arrive_expect_tx(bar, bytes);
    bulk_copy_g2s(slots + slot * kRingSlotBytes, src, bytes, bar);
    ++c.n;
    ring_advance(c);
    issued = true;
  }
  cur[0] = c;
  if (p.ring_l2_ahead > 0 && issued) {
    RingCur a = cur[1];
    if (a.n < c.n) a = c;  // (first call, or the look-ahead fell behind) it restarts where the ring is
    while (a.n < c.n + p.ring_l2_ahead) {
      const uint16_t* src;
      uint32_t bytes;
      if (!ring_locate(p, rp, a, &src, &bytes)) break;
      prefetch_l2(src, bytes);
      ++a.n;
      ring_advance(a);
    }
    cur[1] = a;
  }
}

// Bounded wait for an mbarrier phase of bulk copies (the weight ring's batches, the stream's stages). A copy that
// never lands is reported as a wait timeout on `counter` (-3: the ring, -4: the stream) with `what` (the batch or
// stage) and the parity; the wait then stops: the result is garbage, but the launch reports the error instead of
// returning it.
__device__ void wait_copy_phase(const KernelParams& p, uint64_t* bar, uint32_t parity, int32_t counter,
                                uint32_t what) {
  if (mbar_try_wait(bar, parity)) return;
  const uint64_t t0 = global_ns();
  for (uint32_t iter = 1; !mbar_try_wait(bar, parity); ++iter) {
    if ((iter & 15u) != 0u) continue;
    const uint64_t dt = global_ns() - t0;
    if (dt > p.timeout_ns) {
      raise_error(p, kErrorWaitTimeout, blockIdx.x, -1, -1, counter, what, parity);
      return;
    }
    // After an error anywhere (perhaps this timeout, raised by another warp), a copy still missing after 1 ms will
    // not land: stop waiting so that the exit paths do not wait once per outstanding copy.
    if (dt > 1000000ull && ld_relaxed(p.state + kStateError) != 0u) return;
  }
}

// Warp-level: waits (bounded) until batch taken + j has landed; returns its slot.
__device__ const uint8_t* ring_wait(const KernelParams& p, const RingCtx& r, uint32_t j) {
  const uint32_t n = r.taken + j;
  wait_copy_phase(p, r.bars + n % kRingSlots, (n / kRingSlots) & 1u, -3, n);
  return r.slots + (n % kRingSlots) * kRingSlotBytes;
}

// Warp-level, after the lanes have used `count` batches (their values are consumed by the arithmetic, so every
// read of the slots has completed): the slots are refilled. No proxy fence is needed for this write-after-read
// (the pattern of CUTLASS's TMA pipelines: consumer release, then the producer's copy); ring_fence = 1 adds one for
// comparison.
__device__ __forceinline__ void ring_release(const KernelParams& p, RingCtx& r, uint32_t count) {
  r.taken += count;
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    if (p.ring_fence) fence_proxy_async_smem();
    ring_fill_lane0(p, r.recs, r.tbeg, r.tend, r.cur, r.slots, r.bars, r.taken);
  }
}

// Warp-level: waits for every batch issued and not consumed (no copy may land in a block that has exited).
__device__ void ring_drain(const KernelParams& p, RingCtx& r) {
  __syncwarp();
  const uint32_t issued = static_cast<uint32_t>(*reinterpret_cast<volatile int32_t*>(&r.cur->n));
  while (r.taken < issued) {
    ring_wait(p, r, 0);
    ++r.taken;
  }
  __syncwarp();
}

// ---------------------------------------------------------------------------------------------------------------
// kOptStream: one block-wide ring of weight stages streamed by bulk copies across tiles, stages and steps
// ---------------------------------------------------------------------------------------------------------------
// The stream is the sequence of stages of the worker's matvec tiles (plan order, step after step). A tile's units
// (matvec_shape: two rows, or a gate and an up row) are cut into stages of ups = sstage_bytes / (2 x row bytes)
// units; a stage is one contiguous copy of its rows (GATEUP: the gate rows, then the up rows: two copies). Stage m
// lives in slot m % ns, whose mbarrier completes one phase per fill (parity (m / ns) & 1). Every warp passes every
// stage of a tile in order (waits for it, reads its items in it, releases it); once every warp has released a fill
// the slot is refilled with stage m + ns (stream_release says by whom). So nothing but the ring's depth throttles
// the stream: while the block waits on a counter, the ring fills up with the next tiles' weights.
// TILES_TILE_TIMING builds with a stream trace: one value for stage m (lane 0 of the caller writes it). SM clock
// cycles (clock64: cheap, per SM, 0.5 ns resolution against %globaltimer's 32 ns); the issue also records
// %globaltimer so that the analysis converts cycles to time.
__device__ __forceinline__ void stream_trace(const KernelParams& p, uint32_t m, int32_t col, uint64_t v) {
#if TILES_TILE_TIMING
  if (p.stream_trace != nullptr && m < static_cast<uint32_t>(p.stream_trace_cap))
    p.stream_trace[(int64_t(blockIdx.x) * p.stream_trace_cap + m) * kStreamTraceCols + col] = v;
#endif
}

struct StreamSlot {
  uint64_t full;      // mbarrier, count 1 (the issuing lane's arrive.expect_tx) and the copies' bytes
  int32_t s, k;       // the stage after the prepared one: step, worker-local tile index,
  int32_t st, nst;    // stage within that tile, the tile's stage count
  uint32_t released;  // kStreamEvents per fill: kWarps releases and the next fill's preparation (stream_release)
  uint32_t fills;     // fills issued
  const uint16_t* src;   // the prepared fill (computed while the current one is being read): first part,
  const uint16_t* src2;  // second part (GATEUP's up rows) or null,
  uint32_t bytes;        // bytes per part (0: the launch has no further stage for this slot)
  int32_t pad[3];
};
static_assert(sizeof(StreamSlot) == 64, "smem_layout sizes StreamSlot as 64 bytes");

// Lives in shared memory after the slots (written once at launch start; a local struct whose address the kernel
// passes around would live in local memory). It holds byte OFFSETS into the block's shared memory, not pointers:
// a pointer loaded from memory is generic to the compiler, and v19's measured version (pointers) compiled the
// release's atomicAdd to a generic GPU-scope ATOM and every slot access to generic LD/ST; addresses formed from
// g_smem compile to ATOMS / LDS / STS. The block's stage count consumed so far is a register of each thread.
struct StreamCtx {
  int32_t ring;   // the ring (1 KB aligned): stage slot i at ring + i * sb
  int32_t slots;  // StreamSlot[ns]
  int32_t recs;   // the worker's tile records (kOptPlanSmem)
  int32_t wptr;   // the weight pointers [num_weights] (a dynamically indexed kernel parameter is a constant-cache
                  // load that may miss)
  int32_t tbeg, tend, ns, sb;
  int32_t desc;   // the stage table [T] (int2 per stage of a step: stream_pack), valid when T > 0
  int32_t T;      // stages per step of this worker, or -1: no table (the fills walk the tile records)
  int32_t tmp;    // 16 ints of scratch for stream_start's scan (the k-split partials' area, idle then)
};
static_assert(sizeof(StreamCtx) <= 64, "smem_layout reserves 64 bytes for the StreamCtx");

__device__ __forceinline__ StreamSlot& stream_slot(const StreamCtx& S, int32_t i) {
  return reinterpret_cast<StreamSlot*>(g_smem + S.slots)[i];
}
__device__ __forceinline__ uint8_t* stream_stage(const StreamCtx& S, uint32_t i) {
  return g_smem + S.ring + i * static_cast<uint32_t>(S.sb);
}
__device__ __forceinline__ const int32_t* stream_rec(const StreamCtx& S, int32_t k) {
  return reinterpret_cast<const int32_t*>(g_smem + S.recs) + (k - S.tbeg) * kPlanRecWords;
}
__device__ __forceinline__ const uint16_t* stream_wptr(const StreamCtx& S, int32_t w) {
  return reinterpret_cast<const uint16_t* const*>(g_smem + S.wptr)[w];
}

// Units per stage and stage count of a matvec tile (from its local record). Identical for producer and consumer.
__device__ __forceinline__ int32_t stream_ups(int32_t cols, int32_t sb) { return sb / (4 * cols); }
__device__ __forceinline__ int32_t stream_nst(const KernelParams& p, const int32_t* rec, int32_t sb) {
  const int32_t op = rec[offsetof(Tile, op) / 4];
  if (!op_is_matvec(op)) return 0;
  const int32_t rows = rec[offsetof(Tile, row_end) / 4] - rec[offsetof(Tile, row_begin) / 4];
  const int32_t units = op == kOpGateup ? rows : (rows + 1) / 2;
  const int32_t ups = stream_ups(weight_cols(p, rec[offsetof(Tile, weight) / 4]), sb);
  return (units + ups - 1) / ups;
}

// Moves a cursor to the next stage of the stream (s >= num_steps: none is left in this launch).
__device__ void stream_next(const KernelParams& p, const StreamCtx& S, int32_t& s, int32_t& k, int32_t& st,
                            int32_t& nst) {
  if (++st < nst) return;
  st = 0;
  for (int32_t n = 0; n <= S.tend - S.tbeg; ++n) {
    if (++k >= S.tend) {
      k = S.tbeg;
      ++s;
    }
    nst = stream_nst(p, stream_rec(S, k), S.sb);
    if (nst > 0) return;
  }
  s = p.num_steps;  // the worker has no matvec tile at all
}

// A stage's rows: the first row of its weight(s), the weight(s), the rows per part (GATEUP: gate rows, then as
// many up rows). Identical for the stage table and the record walk.
struct StreamDesc {
  int32_t row0, w, w2, nrows;  // w2 = -1: one part
};
__device__ __forceinline__ StreamDesc stream_desc(const KernelParams& p, const Tile& t, int32_t sb, int32_t st) {
  const int32_t ups = stream_ups(weight_cols(p, t.weight), sb);
  const int32_t u0 = st * ups;
  StreamDesc d;
  d.w = t.weight;
  if (t.op == kOpGateup) {
    const int32_t rows = t.row_end - t.row_begin;
    d.row0 = t.row_begin + u0;
    d.nrows = rows - u0 < ups ? rows - u0 : ups;
    d.w2 = t.weight2;
  } else {
    d.row0 = t.row_begin + 2 * u0;
    const int32_t r1 = d.row0 + 2 * ups < t.row_end ? d.row0 + 2 * ups : t.row_end;
    d.nrows = r1 - d.row0;
    d.w2 = -1;
  }
  return d;
}
// Table entries: (row0, w | (w2 + 1) << 10 | nrows << 20); stream_start checks the field widths.
__device__ __forceinline__ bool stream_packable(const StreamDesc& d) {
  return d.w >= 0 && d.w < 1023 && d.w2 + 1 < 1024 && d.nrows > 0 && d.nrows < 4096;
}
__device__ __forceinline__ int2 stream_pack(const StreamDesc& d) {
  return make_int2(d.row0, d.w | ((d.w2 + 1) << 10) | (d.nrows << 20));
}
__device__ __forceinline__ StreamDesc stream_unpack(int2 e) {
  StreamDesc d;
  d.row0 = e.x;
  d.w = e.y & 1023;
  d.w2 = ((e.y >> 10) & 1023) - 1;
  d.nrows = (e.y >> 20) & 4095;
  return d;
}

// One lane: computes the slot's next fill (src, src2, bytes; bytes 0 when the launch has no further stage for the
// slot) and moves the slot's cursor ns stages on. With the stage table (T > 0) the cursor is (step, entry): one
// shared-memory read. Without it, the cursor walks the tile records (load, shape, stage count per tile crossed).
// Runs in the FIRST release of the slot's current fill (a warp that is ahead), off the path from the last release
// to the copy: v19's trace (session 6) found the issuing lane preparing too, by the record walk (0.6 us per fill),
// which made its warp the last to release the next stage as well, so one warp issued every fill and capped the
// stream at ~1.3 us per 32 KB stage on every SM. The walk still cost the preparing warp ~0.8 us (trace, call 6),
// enough to delay the next group of warps by that much: hence the table.
__device__ void stream_prepare(const KernelParams& p, const StreamCtx& S, int32_t slot) {
  StreamSlot& q = stream_slot(S, slot);
  q.bytes = 0u;
  if (q.s >= p.num_steps) return;
  StreamDesc d;
  if (S.T > 0) {
    d = stream_unpack(reinterpret_cast<const int2*>(g_smem + S.desc)[q.k]);
    int32_t s = q.s, k = q.k + S.ns;
    while (k >= S.T) {
      k -= S.T;
      ++s;
    }
    q.s = s;
    q.k = k;
  } else {
    d = stream_desc(p, load_tile_rec(stream_rec(S, q.k)), S.sb, q.st);
    int32_t s = q.s, k = q.k, st = q.st, nst = q.nst;
    for (int32_t i = 0; i < S.ns; ++i) stream_next(p, S, s, k, st, nst);
    q.s = s;
    q.k = k;
    q.st = st;
    q.nst = nst;
  }
  const int64_t cols = weight_cols(p, d.w);
  // Probe 16 reads the weight pointers from the kernel parameters instead of the shared-memory copy.
  auto weight = [&](int32_t w) { return (p.stream_probe & 16) ? p.weights[w] : stream_wptr(S, w); };
  q.src = weight(d.w) + int64_t(d.row0) * cols;
  q.src2 = d.w2 >= 0 ? weight(d.w2) + int64_t(d.row0) * cols : nullptr;
  q.bytes = static_cast<uint32_t>(int64_t(d.nrows) * cols * 2);
}

// One lane (the last event of the slot's current fill, or the launch start): issues the slot's prepared fill, if
// any. The preparing warp's fields are visible here: its release add follows its writes, and this lane's add read a
// later value of the same counter and then fenced (acquire).
__device__ void stream_issue(const KernelParams& p, const StreamCtx& S, int32_t slot) {
  StreamSlot& q = stream_slot(S, slot);
  const uint32_t bytes = q.bytes;
  if (bytes == 0u) return;
  const uint16_t* src = q.src;
  const uint16_t* src2 = q.src2;
  uint8_t* dst = stream_stage(S, static_cast<uint32_t>(slot));
  const uint32_t traced = q.fills * static_cast<uint32_t>(S.ns) + static_cast<uint32_t>(slot);
  stream_trace(p, traced, kStreamTraceIssue, clock64());
  stream_trace(p, traced, kStreamTraceIssueNs, global_ns());
  stream_trace(p, traced, kStreamTraceIssuer, threadIdx.x >> 5);
  ++q.fills;
  mbar_arrive_expect_tx(&q.full, src2 != nullptr ? 2u * bytes : bytes);
  const uint32_t piece = p.stream_piece > 0 ? static_cast<uint32_t>(p.stream_piece) : bytes;
  for (int part = 0; part < (src2 != nullptr ? 2 : 1); ++part) {
    const uint8_t* g = reinterpret_cast<const uint8_t*>(part ? src2 : src);
    uint8_t* d = dst + part * bytes;
    for (uint32_t off = 0; off < bytes; off += piece) {
      const uint32_t n = bytes - off < piece ? bytes - off : piece;
      if (p.stream_probe & 4) {
        bulk_copy_g2s_evict_first(d + off, g + off, n, &q.full);
      } else {
        bulk_copy_g2s(d + off, g + off, n, &q.full);
      }
    }
  }
}

// All threads, at kernel start (the plan records are in shared memory; thread 0 has written S's offsets): builds
// the stage table (dcap entries fit; a block-wide scan of the tiles' stage counts, then every thread writes its
// tile's entries), then slot i takes stage i and the first ns stages are issued at once, so the first weights stream
// while the step's first waits run. Ends with a barrier.
__device__ void stream_start(const KernelParams& p, StreamCtx& S, int32_t dcap) {
  __syncthreads();  // S's offsets
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t ntl = S.tend - S.tbeg;
  bool table = dcap > 0 && ntl <= kThreads && !(p.stream_probe & 32);  // probe 32: the record walk (tests)
  Tile t;
  int32_t cnt = 0;
  if (table && tid < ntl) {
    t = load_tile_rec(stream_rec(S, S.tbeg + tid));
    cnt = stream_nst(p, stream_rec(S, S.tbeg + tid), S.sb);
  }
  int32_t incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  int32_t* wsum = reinterpret_cast<int32_t*>(g_smem + S.tmp);
  if (lane == 31) wsum[warp] = incl;
  __syncthreads();
  int32_t before = 0, total = 0;
  for (int i = 0; i < kWarps; ++i) {
    if (i < warp) before += wsum[i];
    total += wsum[i];
  }
  table = table && total > 0 && total <= dcap;  // uniform: every thread summed the same partials
  bool bad = false;
  if (table) {
    int2* desc = reinterpret_cast<int2*>(g_smem + S.desc);
    for (int32_t st = 0; st < cnt; ++st) {
      const StreamDesc d = stream_desc(p, t, S.sb, st);
      bad = bad || !stream_packable(d);
      desc[before + incl - cnt + st] = stream_pack(d);
    }
  }
  table = !__syncthreads_or(bad) && table;
  if (tid == 0) {
    S.T = table ? total : -1;
    int32_t s = 0, k = S.tbeg - 1, st = 0, nst = 0;
    if (!table) stream_next(p, S, s, k, st, nst);
    for (int32_t i = 0; i < S.ns; ++i) {
      StreamSlot& q = stream_slot(S, i);
      if (table) {
        q.s = i / total;
        q.k = i % total;
      } else {
        q.s = s;
        q.k = k;
        q.st = st;
        q.nst = nst;
        stream_next(p, S, s, k, st, nst);
      }
      q.released = 0u;
      q.fills = 0u;
      mbar_init(&q.full, 1u);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int32_t i = 0; i < S.ns; ++i) {
      stream_prepare(p, S, i);
      stream_issue(p, S, i);
    }
  }
  __syncthreads();
}

// Warp-level: waits (bounded) until stage m has landed; returns its slot.
__device__ const uint8_t* stream_wait(const KernelParams& p, const StreamCtx& S, uint32_t m) {
  const uint32_t slot = m % static_cast<uint32_t>(S.ns);
  const uint32_t parity = (m / static_cast<uint32_t>(S.ns)) & 1u;
  wait_copy_phase(p, &stream_slot(S, static_cast<int32_t>(slot)).full, parity, -4, m);
  if ((threadIdx.x & 31) == 0) stream_trace(p, m, kStreamTraceWait + (threadIdx.x >> 5), clock64());
  return stream_stage(S, slot);
}

constexpr uint32_t kStreamEvents = kWarps + 1;

// Warp-level, after the warp's last read of stage m. No proxy fence for this write-after-read (CUTLASS's TMA
// pipelines: consumer release, then the producer's copy). The increment is relaxed: the refill's ordering after this
// warp's reads of the stage rests on its shared-memory accesses being performed in order (racecheck, which does not
// model atomics, flags it: perf log, session 6); a release add per warp would make it formal (not yet measured).
__device__ __forceinline__ void stream_release(const KernelParams& p, const StreamCtx& S, uint32_t m) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    stream_trace(p, m, kStreamTraceRelease + (threadIdx.x >> 5), clock64());
    const int32_t slot = static_cast<int32_t>(m % static_cast<uint32_t>(S.ns));
    // A fill counts kStreamEvents increments: kWarps releases and one "prepared" (the first release prepares the
    // slot's next fill, then increments again, releasing). The last increment, whichever it is, acquires and issues
    // the next fill.
    uint32_t* released = &stream_slot(S, slot).released;
    uint32_t old = atom_add_relaxed_cta(released, 1u);
    if (old % kStreamEvents == 0u) {
      stream_prepare(p, S, slot);
      stream_trace(p, m, kStreamTracePrepared, clock64());
      old = atom_add_release_cta(released, 1u);
    }
    if (old % kStreamEvents == kStreamEvents - 1) {
      fence_acquire_cta();
      stream_issue(p, S, slot);
    }
  }
}

// All threads, on every way out of the launch: waits for the fills still in flight (no copy may land in a block
// that has exited). The callers have passed a block barrier, so no release is racing.
__device__ void stream_drain(const KernelParams& p, const StreamCtx& S) {
  if (threadIdx.x < S.ns) {
    const uint32_t f = stream_slot(S, threadIdx.x).fills;
    uint64_t* bar = &stream_slot(S, threadIdx.x).full;
    if (f > 0u) {
      const uint64_t t0 = global_ns();
      while (!mbar_try_wait(bar, (f - 1u) & 1u)) {
        if (global_ns() - t0 > p.timeout_ns) break;
      }
    }
  }
  __syncthreads();
}

// The matvec of one tile from the stream: the same items, chunks and fmaf order per lane as matvec(), so the same
// values. Every thread advances n (the stages consumed so far) by the tile's stage count.
__device__ void matvec_stream(const KernelParams& p, int32_t cols, const uint16_t* h, const MatvecOut& o, float* red,
                              const StreamCtx& S, uint32_t& n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t rows = o.row_end - o.row_begin;
  const MatvecShape m = matvec_shape(o.op, rows, cols);
  const int32_t ups = stream_ups(cols, S.sb);
  const int32_t nst = (m.nunits + ups - 1) / ups;
  const int64_t rowbytes = int64_t(cols) * 2;
  const uint4* hv = reinterpret_cast<const uint4*>(h);
  const uint32_t base = n;
  int32_t passed = 0;
  for (int32_t item = warp; item < m.items; item += kWarps) {
    const int32_t unit = item / m.ksplit;
    const int32_t ks = item - unit * m.ksplit;
    const int32_t c0 = ks * m.slice;
    const int32_t c1 = c0 + m.slice < m.nchunks ? c0 + m.slice : m.nchunks;
    const int32_t j = unit / ups;
    for (; passed < j; ++passed) {
      stream_wait(p, S, base + passed);
      stream_release(p, S, base + passed);
    }
    const uint8_t* slot = stream_wait(p, S, base + j);
    if (lane == 0) stream_trace(p, base + j, kStreamTraceBegin + warp, clock64());
    const int32_t ju = unit - j * ups;
    const uint4* A;
    const uint4* B;
    bool bvalid;
    if (m.pair) {
      const int32_t nin = m.nunits - j * ups < ups ? m.nunits - j * ups : ups;
      A = reinterpret_cast<const uint4*>(slot + ju * rowbytes);
      B = reinterpret_cast<const uint4*>(slot + (nin + ju) * rowbytes);
      bvalid = true;
    } else {
      A = reinterpret_cast<const uint4*>(slot + 2 * ju * rowbytes);
      B = A + cols / 8;
      bvalid = 2 * unit + 1 < rows;
    }
    float a0 = 0.f, a1 = 0.f;
    // Unrolled so that the next chunks' shared-memory reads overlap this chunk's FMA chain (same fmaf order).
#pragma unroll 4
    for (int32_t c = c0 + lane; c < c1 && !(p.stream_probe & 1); c += 32) {
      const uint4 x = hv[c];
      a0 = dot8(A[c], x, a0);
      a1 = dot8(bvalid ? B[c] : make_uint4(0, 0, 0, 0), x, a1);
    }
    if (lane == 0) stream_trace(p, base + j, kStreamTraceEnd + warp, clock64());
    // The stage's last read by this warp is done: release it now, before the warp sums and the stores (the slot's
    // refill waits for the last release: session 6's trace), unless the warp's next item reads the same stage.
    const int32_t next = item + kWarps;
    if (next >= m.items || (next / m.ksplit) / ups > j) {
      for (; passed <= j; ++passed) {
        stream_wait(p, S, base + passed);
        stream_release(p, S, base + passed);
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      if (m.ksplit == 1) {
        emit(o, unit, a0, a1);
      } else {
        red[2 * item] = a0;
        red[2 * item + 1] = a1;
      }
    }
  }
  for (; passed < nst; ++passed) {
    stream_wait(p, S, base + passed);
    stream_release(p, S, base + passed);
  }
  n = base + static_cast<uint32_t>(nst);
  if (threadIdx.x == 0)
    for (int32_t j = 0; j < nst; ++j) stream_trace(p, base + j, kStreamTraceOp, (uint64_t(cols) << 8) | uint64_t(o.op));
  ksplit_sum(m, red, o);
}

// `stage`: this block's first weight batches copied before the wait (kOptStageWeights) or null.
// `bc`: kOptBulkStage state (null otherwise): this warp's batch, when armed for this tile, is read from its region
// after the warp's mbarrier wait; after the warp's first batch the region takes the next matvec tile's batch.
// `ring`: kOptWeightRing state of this warp (null otherwise): every batch comes from the warp's ring.
__device__ void matvec(const KernelParams& p, const uint16_t* W, const uint16_t* W2, int32_t cols, const uint16_t* h,
                       const MatvecOut& o, float* red, const uint8_t* stage, BulkCtx* bc, RingCtx* ring,
                       bool ahead_pending) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const MatvecShape m = matvec_shape(o.op, o.row_end - o.row_begin, cols);
  const uint4* hv = reinterpret_cast<const uint4*>(h);
  if (stage != nullptr) {
    if (ahead_pending) {
      cp_async_wait_but_last();  // kOptStageAhead: the next tile's batch, committed last, may stay in flight
    } else {
      cp_async_wait_all();
    }
  }
#if defined(TILES_MARK_SPLIT) && (TILES_MARK_SPLIT == 1 || TILES_MARK_SPLIT == 4)
  // Timing experiment (tile_timing.py with TILES_TIMING_DEFINES=-DTILES_MARK_SPLIT[=1|2|3|4]): a matvec tile's main
  // phase ends where the split says, the rest falls into the epilogue. 1: thread 0's staged copies have landed;
  // 4: every lane's of its warp (is 1 -> 2 the arithmetic, or the warp's other copies landing? perf log, session 8);
  // 2: its warp's first item's arithmetic is done; 3: and its warp sums (perf log v25).
#if TILES_MARK_SPLIT == 4
  __syncwarp();
#endif
  TILES_MARK(kTimePhase2);
#endif
  const uint8_t* bstage = bc != nullptr && bc->armed == bc->k ? bc->stage : nullptr;
  bool next_done = bc == nullptr;
  for (int32_t item = warp; item < m.items; item += kWarps) {
    const MatvecItem it = matvec_item(m, W, W2, o.row_begin, o.row_end, cols, item);
    float a0 = 0.f, a1 = 0.f;
    // With a cp.async-staged first batch the weight registers take the item's NEXT batch (v38) while the staged
    // one is computed straight from shared memory.
    uint4 wa[kUnroll], wb[kUnroll];
    bool preloaded = false;
    if (ring != nullptr) {
      // Straight from the slots, chunk base + u * 32 + lane at (u * 32 + lane) * 16 of its slot: per lane the same
      // chunks in the same order as the loads below, so the same fmaf sequence per accumulator. The slots are
      // refilled after the arithmetic, so no weight register is live across the refill.
      for (int32_t base = it.c0; base < it.c1; base += kRingChunks) {
        const uint8_t* sa = ring_wait(p, *ring, 0);
        const uint8_t* sb = it.bvalid ? ring_wait(p, *ring, 1) : sa;
#pragma unroll
        for (int u = 0; u < kRingChunks / 32; ++u) {
          const int32_t c = base + u * 32 + lane;
          if (c < it.c1) {
            const uint4 x = hv[c];
            a0 = dot8(*reinterpret_cast<const uint4*>(sa + (u * 32 + lane) * 16), x, a0);
            if (it.bvalid) a1 = dot8(*reinterpret_cast<const uint4*>(sb + (u * 32 + lane) * 16), x, a1);
          }
        }
        ring_release(p, *ring, it.bvalid ? 2u : 1u);
      }
    }
    for (int32_t base = it.c0; ring == nullptr && base < it.c1; base += 32 * kUnroll) {
      const bool from_bulk = bstage != nullptr && item == warp && base == it.c0;
      const bool staged = (stage != nullptr || from_bulk) && item == warp && base == it.c0;
      if (kPreloadNext && staged && !from_bulk) {
        // v38: the item's next batch is issued before the staged batch's arithmetic. That arithmetic takes 16
        // warps ~0.5 us of issue (perf log v25 split 2), and the SM's weight stream used to start only after it.
        // Within the item only: a preload across items keeps the registers live through the warp sums and stores,
        // and the kernel spills. Same chunks, same fmaf order: bit-identical.
        const int32_t nbase = base + 32 * kUnroll;
        if (nbase < it.c1) {
          load_batch(it, nbase, lane, wa, wb);
          preloaded = true;
        }
        const uint8_t* sw = stage + warp * kStageBytesPerWarp;
        // One chunk at a time: the preloads hold kUnroll x 2 registers of 16 bytes already (unrolled, the kernel
        // spills).
#pragma unroll 1
        for (int u = 0; u < kUnroll; ++u) {
          const int32_t c = base + u * 32 + lane;
          if (c < it.c1) {
            const uint4 x = hv[c];
            a0 = dot8(*reinterpret_cast<const uint4*>(sw + (u * 32 + lane) * 16), x, a0);
            a1 = dot8(it.bvalid ? *reinterpret_cast<const uint4*>(sw + ((kUnroll + u) * 32 + lane) * 16)
                                : make_uint4(0, 0, 0, 0), x, a1);
          }
        }
      } else {
        if (staged) {
          if (from_bulk) bulk_consume(p, *bc);
          const uint8_t* sw = (from_bulk ? bstage : stage) + warp * kStageBytesPerWarp;
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const bool in = base + u * 32 + lane < it.c1;
            wa[u] = in ? *reinterpret_cast<const uint4*>(sw + (u * 32 + lane) * 16) : make_uint4(0, 0, 0, 0);
            wb[u] = in && it.bvalid ? *reinterpret_cast<const uint4*>(sw + ((kUnroll + u) * 32 + lane) * 16)
                                    : make_uint4(0, 0, 0, 0);
          }
        } else if (preloaded) {
          preloaded = false;  // this batch's loads were issued before the staged batch's arithmetic
        } else {
          load_batch(it, base, lane, wa, wb);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int32_t c = base + u * 32 + lane;
          if (c < it.c1) {
            const uint4 x = hv[c];
            a0 = dot8(wa[u], x, a0);
            a1 = dot8(wb[u], x, a1);
          }
        }
      }
      if (!next_done) {  // the staged batch has been used: the region takes the next tile's batch
        bulk_next(p, *bc);
        next_done = true;
      }
    }
#if defined(TILES_MARK_SPLIT) && TILES_MARK_SPLIT == 2
    if (item == warp) TILES_MARK(kTimePhase2);
#endif
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
#if defined(TILES_MARK_SPLIT) && TILES_MARK_SPLIT == 3
    if (item == warp) TILES_MARK(kTimePhase2);
#endif
    if (lane == 0) {
      if (m.ksplit == 1) {
        emit(o, it.unit, a0, a1);
      } else {
        red[2 * item] = a0;
        red[2 * item + 1] = a1;
      }
    }
  }
  if (!next_done) bulk_next(p, *bc);  // warps without items (or with empty slices) in this tile
  ksplit_sum(m, red, o);
}

// ---------------------------------------------------------------------------------------------------------------
// Attention tiles
// ---------------------------------------------------------------------------------------------------------------
// RoPE tables at pos: cos/sin(float(pos) * inv_freq[i]) * rope_scale, i < hd/2 (rotate_half pairs i, i + hd/2).
__device__ void rope_tables(const KernelParams& p, int64_t pos, float* cs) {
  const int half = p.h.head_dim / 2;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float ang = static_cast<float>(pos) * __ldg(p.inv_freq + i);
    cs[i] = cosf(ang) * p.rope_scale;
    cs[half + i] = sinf(ang) * p.rope_scale;
  }
}

// kOptAttnPrestage, before the wait: the RoPE tables and the cached K/V rows [lo, min(pos, first chunk end)) of the
// first chunk (cp.async). Rows < pos are final before the step starts: the previous steps' ATTN tiles wrote them and
// are ancestors of the ARGMAX this worker waited for (or the host wrote them before the launch).
__device__ void attn_prestage(const KernelParams& p, const Tile& t, int64_t pos, uint8_t* smem, const SmemLayout& L) {
  const int hd = p.h.head_dim;
  float* cs = reinterpret_cast<float*>(smem + L.cs);
  uint16_t* kb = reinterpret_cast<uint16_t*>(smem + L.kbuf);
  uint16_t* vb = reinterpret_cast<uint16_t*>(smem + L.vbuf);
  rope_tables(p, pos, cs);
  int32_t lo, hi;
  attn_partition_range(static_cast<int32_t>(pos + 1), t.aux1, p.h.attn_partitions, p.h.attn_granule,
                       p.h.attn_single, &lo, &hi);
  int64_t end = hi - lo < L.chunk ? hi : lo + L.chunk;
  if (end > pos) end = pos;
  const uint16_t* kc = p.k_cache[t.layer] + int64_t(t.aux0) * p.max_cache_len * hd;
  const uint16_t* vc = p.v_cache[t.layer] + int64_t(t.aux0) * p.max_cache_len * hd;
  const int cpr = hd / 8, kstride = hd + 8;
  for (int i = threadIdx.x; i < (end - lo) * cpr; i += kThreads) {
    const int j = i / cpr, c = i - j * cpr;
    cp_async16(kb + j * kstride + c * 8, kc + (lo + j) * int64_t(hd) + c * 8);
    cp_async16(vb + j * attn_vstride(hd) + c * 8, vc + (lo + j) * int64_t(hd) + c * 8);
  }
  cp_async_commit();
}

// kOptAttnDoubleBuffer: cp.async of the cached K/V rows [c0, c0 + cn) into a chunk buffer (the layout of the
// __ldcg loop in attn_tile), as one commit group.
__device__ void attn_issue_chunk(const uint16_t* kc, const uint16_t* vc, int c0, int cn, int hd, uint16_t* kb,
                                 uint16_t* vb) {
  const int cpr = hd / 8, kstride = hd + 8;
  kc += int64_t(c0) * hd;
  vc += int64_t(c0) * hd;
  for (int i = threadIdx.x; i < cn * cpr; i += kThreads) {
#if TILES_ATTN_TC
    const int j = cpr == 8 ? i >> 3 : i / cpr, c = i - j * cpr;  // v63c: head_dim 64 (the warp path) without a divide
#else
    const int j = i / cpr, c = i - j * cpr;
#endif
    cp_async16(kb + j * kstride + c * 8, kc + i * 8);  // i * 8 = j * hd + c * 8: rows are contiguous in the cache
    cp_async16(vb + j * attn_vstride(hd) + c * 8, vc + i * 8);
  }
  cp_async_commit();
}

// Elements c*8 .. c*8+7 of a score q . k: the (low, high) bf16 halves of k8.x, .y against qa into acc0 and of
// k8.z, .w against qb into acc1 (two accumulators: half the dependent FMA chain). Both attention loops use it.
__device__ __forceinline__ void qk_piece(const uint4 k8, const float4 qa, const float4 qb, float& acc0, float& acc1) {
  acc0 = fmaf(qa.x, __uint_as_float(k8.x << 16), acc0);
  acc1 = fmaf(qb.x, __uint_as_float(k8.z << 16), acc1);
  acc0 = fmaf(qa.y, __uint_as_float(k8.x & 0xffff0000u), acc0);
  acc1 = fmaf(qb.y, __uint_as_float(k8.z & 0xffff0000u), acc1);
  acc0 = fmaf(qa.z, __uint_as_float(k8.y << 16), acc0);
  acc1 = fmaf(qb.z, __uint_as_float(k8.w << 16), acc1);
  acc0 = fmaf(qa.w, __uint_as_float(k8.y & 0xffff0000u), acc0);
  acc1 = fmaf(qb.w, __uint_as_float(k8.w & 0xffff0000u), acc1);
}

// The warp-owned attention paths (8 positions per warp and chunk): the warps that ever held a position of a tile with
// positions [lo, hi), those of its first chunk (the later chunks' positions go to the same warps first).
__device__ __forceinline__ int attn_warps_used(int32_t lo, int32_t hi, int32_t chunk) {
  const int span0 = hi - lo < chunk ? hi - lo : chunk;
  return span0 <= 0 ? 0 : ((span0 + 7) / 8 < kWarps ? (span0 + 7) / 8 : kWarps);
}

// The warp path (v45, v63): the first `wused` warps' states, (m, l) in sc [warp][G][2] and o in opart ([warp][G][hd];
// v63: attn_tc_oidx), combined by log-sum-exp in warp order (fixed: bit-identical runs) into of / ml, the layout
// MERGE and the partials' store read. A warp whose m is -inf held no position.
#if TILES_ATTN_TC
// v63's o slots: opart as [warp][n = d / 8][lane = 4g + (d % 8) / 2] float2 (hd 64).
__device__ __forceinline__ int attn_tc_oidx(int w, int g, int d, int G) {
  return ((w * 8 + (d >> 3)) * 4 * G + 4 * g + ((d & 7) >> 1)) * 2 + (d & 1);
}
#endif
__device__ __forceinline__ void attn_combine_warps(const float* sc, const float* opart, int G, int hd, int wused,
                                                   float* of, float* ml) {
  for (int i = threadIdx.x; i < G * hd; i += kThreads) {
#if TILES_ATTN_TC
    const int g = i >> 6;  // v63c: the warp paths' head_dim is 64 (attn_warps_fit): no runtime division
#else
    const int g = i / hd;
#endif
#ifndef TILES_FLAGS
    // v66: every warp's state loaded at once, unconditionally (the slots of all kWarps warps exist; those past wused
    // are not used), so that the 32 loads and 16 expf overlap instead of one dependent LDS -> expf -> FMA chain per
    // warp (3.05K of ~10K cycles per ATTN tile at 4064; -1.0% per token there, session 27). The same terms in the same
    // warp order: the same bits. Not in the flag variant, whose tile loop it made spill (24 / 16 bytes).
    float2 s[kWarps];
    float o[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      s[w] = reinterpret_cast<const float2*>(sc)[w * G + g];
#if TILES_ATTN_TC
      o[w] = opart[attn_tc_oidx(w, g, i - g * hd, G)];
#else
      o[w] = opart[(w * G + g) * hd + (i - g * hd)];
#endif
    }
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (w < wused) M = fmaxf(M, s[w].x);
    float Ls = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      // Branch-free, so that the 16 expf overlap: a term is added where the flag variant's loop adds it (w < wused, m
      // finite), as the FMA that its `Ls += f * l` contracts to; elsewhere f is computed and dropped.
      const bool use = w < wused && s[w].x != -INFINITY;
      float f = expf(s[w].x - M);
      asm volatile("" : "+f"(f));  // computed unconditionally: otherwise it sinks into a branch per warp again
      Ls = use ? fmaf(f, s[w].y, Ls) : Ls;
      O = use ? fmaf(f, o[w], O) : O;
    }
#else
    float M = -INFINITY;
    for (int w = 0; w < wused; ++w) M = fmaxf(M, sc[(w * G + g) * 2]);
    float Ls = 0.f, O = 0.f;
    for (int w = 0; w < wused && M != -INFINITY; ++w) {
      const float mw = sc[(w * G + g) * 2];
      if (mw != -INFINITY) {
        const float f = expf(mw - M);
        Ls += f * sc[(w * G + g) * 2 + 1];
#if TILES_ATTN_TC
        O += f * opart[attn_tc_oidx(w, g, i - g * hd, G)];
#else
        O += f * opart[(w * G + g) * hd + (i - g * hd)];
#endif
      }
    }
#endif
    of[i] = O;
    if (i - g * hd == 0) {
      ml[g] = M;
      ml[G + g] = Ls;
    }
  }
}

// `prestaged`: attn_prestage ran before the wait (RoPE tables ready, chunk 1 rows < pos in flight by cp.async).
// True when the tile kept its (m, l, o) in shared memory only (v44): partition 0 holds every position and the plan
// says its MERGE runs next on this worker (out_offset 1), which then merges locally (kOptLocalMerge) and adds this
// tile's counter increment after its own release (a release here would wait for the partials' stores, and the
// MERGE's release for this increment: call 1 of session 13).
template <bool kWarpPath>
__device__ __forceinline__ bool attn_tile_body(const KernelParams& p, const Tile& t, int64_t pos, uint8_t* smem,
                                               const SmemLayout& L, bool prestaged, uint32_t epoch) {
  const int hd = p.h.head_dim, G = p.h.num_heads / p.h.num_kv_heads, P = p.h.attn_partitions;
  const int kvh = t.aux0, part = t.aux1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* qf = reinterpret_cast<float*>(smem + L.qf);
  float* of = reinterpret_cast<float*>(smem + L.of);
  float* opart = reinterpret_cast<float*>(smem + L.opart);
  float* ml = reinterpret_cast<float*>(smem + L.ml);  // m[G], l[G], alpha[G]
  float* cs = reinterpret_cast<float*>(smem + L.cs);
  float* sc = reinterpret_cast<float*>(smem + L.sc);
  uint16_t* kb = reinterpret_cast<uint16_t*>(smem + L.kbuf);
  uint16_t* vb = reinterpret_cast<uint16_t*>(smem + L.vbuf);
  const int kstride = hd + 8;
  ATTN_PROF_DECL

  int32_t lo, hi;
  attn_partition_range(static_cast<int32_t>(pos + 1), part, P, p.h.attn_granule, p.h.attn_single, &lo, &hi);
  const uint16_t* q = reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in_buf));
  const uint16_t* knew = reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in2_buf));
  const uint16_t* vnew = reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in3_buf));
  uint16_t* kc = p.k_cache[t.layer] + int64_t(kvh) * p.max_cache_len * hd;
  uint16_t* vc = p.v_cache[t.layer] + int64_t(kvh) * p.max_cache_len * hd;

  if (!prestaged) {
    rope_tables(p, pos, cs);
    __syncthreads();
  }  // else: written before the wait, published by the wait's barrier
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i - g * hd;
    const int qh = kvh * G + g;
    // q is tiny: read through L2 directly (written by QKV tiles of this launch). rotate_half: pairs (d, d +- hd/2).
    const int half = hd / 2;
    const int dp = d < half ? d + half : d - half;
#ifdef TILES_FLAGS
    const int64_t qi[2] = {qh * hd + d, qh * hd + dp};
    uint16_t qv[2];
    fl_read_bf16<2>(p, q, qi, epoch, qv);
    const float x = bf2f(qv[0]), xp = bf2f(qv[1]);
#else
    const float x = bf2f(__ldcg(q + qh * hd + d)), xp = bf2f(__ldcg(q + qh * hd + dp));
#endif
    qf[g * (hd + 4) + d] = d < half ? x * cs[d] + (-xp) * cs[half + d] : x * cs[d - half] + xp * cs[half + (d - half)];
    of[i] = 0.f;
  }
#if TILES_TILE_TIMING && TILES_ATTN_SPLIT == 2
  TILES_MARK(kTimePhase1);
#endif
  if (tid < G) {
    ml[tid] = -INFINITY;
    ml[G + tid] = 0.f;
  }
  const bool first_local = prestaged && pos < lo + L.chunk;
  if (lo <= pos && pos < hi) {
    // This partition owns the new position: append the rotated k (rounded to bf16) and v to the cache.
    const int half = hd / 2;
    auto new_row = [&](int d) {
      const int dp = d < half ? d + half : d - half;
#ifdef TILES_FLAGS
      const int64_t ki[2] = {kvh * hd + d, kvh * hd + dp}, vi[1] = {kvh * hd + d};
      uint16_t kv2[2], vv1[1];
      fl_read_bf16<2>(p, knew, ki, epoch, kv2);
      fl_read_bf16<1>(p, vnew, vi, epoch, vv1);
      const float x = bf2f(kv2[0]), xp = bf2f(kv2[1]);
      const uint16_t vr = vv1[0];
#else
      const float x = bf2f(__ldcg(knew + kvh * hd + d)), xp = bf2f(__ldcg(knew + kvh * hd + dp));
      const uint16_t vr = __ldcg(vnew + kvh * hd + d);
#endif
      const float r = d < half ? x * cs[d] + (-xp) * cs[half + d] : x * cs[d - half] + xp * cs[half + (d - half)];
      const uint16_t kr = f2bf(r);
      kc[pos * hd + d] = kr;
      vc[pos * hd + d] = vr;
      if (first_local) {  // the staged first chunk gets the new row directly (same bf16 values)
        kb[(pos - lo) * kstride + d] = kr;
        vb[(pos - lo) * attn_vstride(hd) + d] = vr;
      }
    };
    // Threads past the q elements take the row, so that its reads and q's are one L2 round trip, not two.
    if (G * hd + hd <= kThreads) {
      if (tid >= G * hd && tid < G * hd + hd) new_row(tid - G * hd);
    } else {
      for (int d = tid; d < hd; d += kThreads) new_row(d);
    }
    // The row is read back below through L2 (ld.cg) by other threads of this block, unless it is staged.
    if (!first_local) __threadfence();
  }
  __syncthreads();
#if TILES_TILE_TIMING && TILES_ATTN_SPLIT == 1
  TILES_MARK(kTimePhase1);
#endif
  if (lo >= hi) TILES_MARK(kTimePhase1);  // (with positions: after the first chunk's rows have landed, below)
  ATTN_PROF(0);
#if TILES_ATTN_TC
  // v63: q's A fragments once per tile, hi and lo bf16 halves, entry (k-step ks, lane 4g + t) = {hi a0, lo a0, hi a2,
  // lo a2} of head g at dims 16ks + 2t (+ 8) (v63d: the lo half as row g + 8), after the warps' states in sc
  // (kWarps x G x 2 floats; sc holds G x (chunk + 8) floats, chunk 128). The chunk loop's first barrier publishes them.
  if (kWarpPath && tid < 16 * G && lo < hi) {
    const int ks = tid / (4 * G), l = tid - ks * 4 * G, g = l >> 2, t2 = (l & 3) * 2;
    const float* qr = qf + g * (hd + 4) + ks * 16 + t2;
    uint32_t h0, l0, h2, l2;
    split_bf16x2(qr[0], qr[1], h0, l0);
    split_bf16x2(qr[8], qr[9], h2, l2);
    reinterpret_cast<uint4*>(sc + kWarps * 2 * G)[tid] = make_uint4(h0, l0, h2, l2);  // A: rows g (hi), g + 8 (lo)
  }
#endif

  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int cpr = hd / 8;  // 16-byte chunks per row
  const int splits = L.splits;
#if TILES_ATTN_WARPS
  // The warp path (perf log v45): each warp owns 8 positions of every chunk, end to end on the CUDA cores. Lane
  // (position sj = lane / 4, head sg = lane % 4) scores one position for one head; the warp's online softmax runs in
  // registers (three shuffles per reduction); lane (head og, dims od0 .. od0 + 7) accumulates o from the staged V
  // rows. Two block barriers per chunk (rows landed, buffer free) instead of five, and the warps' (m, l, o) are
  // combined once per tile. The chunk loop's five steps took ~4.3 us per 128 positions at 16K (timing build,
  // TILES_ATTN_PROFILE: scores 1.0, softmax 0.8, o partials 1.4, combine 0.6 us) against ~1.1 us of bytes.
  // Shapes: attn_warps_fit (decode_kernel.h): G <= 4 and hd 64 (Llama-3.2-1B, SmolLM2).
  constexpr bool warp_ok = kWarpPath;  // attn_warps_fit (decode_kernel.h): attn_tile picks the instantiation
#if TILES_ATTN_TC
  // v63: fragment row fr (head; for the K / V tiles a position) and column pair ft. Lanes of rows >= G compute on
  // zero q and are never stored.
  const int fr = lane >> 2, ft = lane & 3;
  float wm = -INFINITY, wl = 0.f;  // this warp's running max and sum for head fr
  // Its o for head fr, dims 8n + 2ft, + 1, goes to opart as [warp][n][lane < 4G] float2 (attn_tc_oidx), so that the
  // 4G lanes' float2 of one n are contiguous (the [warp][G][hd] layout put the heads' rows on the same banks: 4
  // wavefronts per access). The flag variant keeps it there across the chunk loop (a load and a store per n and
  // chunk); the counter variant holds it in registers (oreg, v65) and stores it once, before the combine.
  float2* wop = reinterpret_cast<float2*>(opart) + warp * 8 * 4 * G + lane;
  const uint4* qfrag = reinterpret_cast<const uint4*>(sc + kWarps * 2 * G);  // written below, after qf
#ifndef TILES_FLAGS
  // v63e: q's fragments in registers from the tile's first chunk on (4 LDS.128 per warp and chunk fewer). Not in the
  // flag variant: there the same code made SmolLM2 9% slower (perf log, session 26); the values are the same.
  uint4 qreg[4];
  bool qloaded = false;
  // v65: its o in registers across the chunk loop (with v66's combine -2.5% per token at 16K, +0.3% at prompt 32:
  // perf log, session 27; 12 / 8 bytes of spills in the tile loop).
  float2 oreg[8];
#pragma unroll
  for (int n = 0; n < 8; ++n) oreg[n] = make_float2(0.f, 0.f);
#endif
#else
  const int sj = lane >> 2, sg = lane & 3;                     // scores layout
  const int og = lane / (hd / 8), od0 = (lane - og * (hd / 8)) * 8;  // o layout (og >= G: idle lane)
  float wm = -INFINITY, wl = 0.f;  // this warp's running max and sum for head sg
  float wo[8];                     // its o for head og, dims od0 ..
#pragma unroll
  for (int k = 0; k < 8; ++k) wo[k] = 0.f;
#endif
#endif
  const int scs = L.chunk + 8;  // sc row stride: [G][chunk + 8] (a warp's 8 positions x 4 heads hit distinct banks)
  // kOptAttnDoubleBuffer: chunk c is read from buffer c % 2; chunk c+1's copies are issued before chunk c is waited
  // for. Every row is final here: rows < pos before the step, row pos after the barrier above (in the cache, and in
  // the staged first chunk when first_local).
  // One signed element offset from the current buffer to the other (smem_layout keeps vbuf2 - vbuf = kbuf2 - kbuf;
  // one register, not two pointers: the kernel is at its 128-register bound); 0 = single buffer.
  int kv_delta = (OPT(p) & kOptAttnDoubleBuffer) && L.kbuf2 >= 0 ? (L.kbuf2 - L.kbuf) / 2 : 0;
  if (kv_delta != 0 && !prestaged && lo < hi)
    attn_issue_chunk(kc, vc, lo, hi - lo < L.chunk ? hi - lo : L.chunk, hd, kb, vb);
  for (int c0 = lo; c0 < hi; c0 += L.chunk) {
    const int cn = hi - c0 < L.chunk ? hi - c0 : L.chunk;
    if (kv_delta != 0) {
      // The next chunk goes to the other buffer, which the end-of-chunk barrier of the previous chunk freed.
      const int n0 = c0 + L.chunk;
      if (n0 < hi) {
        attn_issue_chunk(kc, vc, n0, hi - n0 < L.chunk ? hi - n0 : L.chunk, hd, kb + kv_delta, vb + kv_delta);
        ATTN_PROF(1);
        cp_async_wait_but_last();  // this chunk's rows (this thread's); the barrier below publishes everyone's
      } else {
        cp_async_wait_all();
      }
    } else if (prestaged && c0 == lo) {
      cp_async_wait_all();  // this thread's staged rows; the barrier below publishes everyone's
#if TILES_TILE_TIMING && TILES_ATTN_SPLIT == 3
      TILES_MARK(kTimePhase1);
#endif
    } else
    for (int i = tid; i < cn * cpr; i += kThreads) {
      const int j = i / cpr, c = i - j * cpr;
      const uint4 kv = __ldcg(reinterpret_cast<const uint4*>(kc + int64_t(c0 + j) * hd) + c);
      const uint4 vv = __ldcg(reinterpret_cast<const uint4*>(vc + int64_t(c0 + j) * hd) + c);
      *reinterpret_cast<uint4*>(kb + j * kstride + c * 8) = kv;
      *reinterpret_cast<uint4*>(vb + j * attn_vstride(hd) + c * 8) = vv;
    }
#if TILES_TILE_TIMING && defined(TILES_ATTN_LANDING)
    // After whichever path staged the first chunk (the double-buffer branch too: session 19 found the trace empty
    // when it sat in the single-buffer branch only).
    if (c0 == lo) {
      const unsigned long long now = global_ns();
      if (lane == 0) g_land[warp] = 0;
      __syncwarp();
      atomicMax(&g_land[warp], now);
    }
#endif
    __syncthreads();
    if (c0 == lo && TILES_ATTN_SPLIT == 0) TILES_MARK(kTimePhase1);  // ATTN "inputs": q, the new row, first chunk
#if TILES_TILE_TIMING && defined(TILES_ATTN_LANDING)
    if (prestaged && c0 == lo && tid == 0 && g_tile_times != nullptr && t.layer == p.h.num_layers - 1 && kvh == 0 &&
        part == 0) {
      const double w = double(g_tile_times[kTimeWaited]);
      printf("ATTNLAND pos %d rows %d: start->waited %.2f us; waited->landed per warp (us):", int(pos), int(cn),
             (w - double(g_tile_times[kTimeStart])) / 1e3);
      for (int k = 0; k < kWarps; ++k) printf(" %.2f", (double(g_land[k]) - w) / 1e3);
      printf("\n");
    }
#endif
    ATTN_PROF(2);
#if TILES_ATTN_WARPS
    if (warp_ok) {
      const int p0 = warp * 8;
      const int nv = cn - p0 < 8 ? cn - p0 : 8;  // this warp's positions in the chunk (warp-uniform)
      if (nv > 0) {
#if TILES_ATTN_TC
        // v63. Scores: D (heads x 8 positions) = q (A: head fr's hi half as row fr, its lo half as row fr + 8; 4
        // k-steps of 16 dims) x K^T (B: the K rows by ldmatrix, tile i = dims 8i .. 8i + 7). Rows past nv hold stale
        // K: their columns become -inf.
#ifndef TILES_FLAGS
        if (!qloaded) {  // after the first chunk's barrier, which published them
#pragma unroll
          for (int ks = 0; ks < 4; ++ks) qreg[ks] = fr < G ? qfrag[ks * 4 * G + lane] : make_uint4(0u, 0u, 0u, 0u);
          qloaded = true;
        }
#endif
        const uint16_t* krow = kb + (p0 + (lane & 7)) * kstride + (lane >> 3) * 8;
        // Two accumulator chains (dims halves), two MMAs deep; rows fr and fr + 8 hold the hi and lo products.
        float dh[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // dims 32h .. 32h + 31: two k-steps per ldmatrix
          uint32_t kf[4];
          ldsm_x4(kf, krow + 32 * h);
#pragma unroll
          for (int k2 = 0; k2 < 2; ++k2) {
#ifndef TILES_FLAGS
            const uint4 qw = qreg[2 * h + k2];
#else
            const uint4 qw = fr < G ? qfrag[(2 * h + k2) * 4 * G + lane] : make_uint4(0u, 0u, 0u, 0u);
#endif
            mma_bf16_16816(dh[h], qw.x, qw.y, qw.z, qw.w, kf[2 * k2], kf[2 * k2 + 1]);
          }
        }
        const float d[2] = {(dh[0][0] + dh[0][2]) + (dh[1][0] + dh[1][2]),
                            (dh[0][1] + dh[0][3]) + (dh[1][1] + dh[1][3])};
        // Online softmax for head fr: its 8 positions are in the quad's lanes (2ft, 2ft + 1 each).
        const bool in0 = 2 * ft < nv, in1 = 2 * ft + 1 < nv;
        const float s0 = in0 ? d[0] * scale : -INFINITY, s1 = in1 ? d[1] * scale : -INFINITY;
        float mx = fmaxf(s0, s1);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        ATTN_PROF(4);
        const float mn = fmaxf(wm, mx);  // finite: the warp's first position is in the chunk
        const float alpha = wm == -INFINITY ? 0.f : expf(wm - mn);
        const float e0 = in0 ? expf(s0 - mn) : 0.f, e1 = in1 ? expf(s1 - mn) : 0.f;
        float ls = e0 + e1;
        ls += __shfl_xor_sync(0xffffffffu, ls, 1);
        ls += __shfl_xor_sync(0xffffffffu, ls, 2);
        wl = wl * alpha + ls;
        wm = mn;
        ATTN_PROF(5);
        // o = o alpha + P V: P's A fragment is the scores' D fragment (m16n8k8: k = the 8 positions), hi in row fr,
        // lo in row fr + 8; V's B fragments by ldmatrix.trans (tile n = dims 8n .. 8n + 7). Stale V rows past nv are
        // zeroed (0 x NaN). o starts at the tile's first chunk (its slot holds an earlier tile's values).
        uint32_t ph, pl;
        split_bf16x2(e0, e1, ph, pl);
        const uint16_t* vrow = vb + (p0 + (lane & 7)) * attn_vstride(hd) + (lane >> 3) * 8;
        const uint32_t vm = nv < 8 ? (in0 ? 0xffffu : 0u) | (in1 ? 0xffff0000u : 0u) : 0xffffffffu;
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // dims 32h .. 32h + 31
          uint32_t vf[4];
          ldsm_x4_trans(vf, vrow + 32 * h);
#pragma unroll
          for (int n = 0; n < 4; ++n) {
#ifndef TILES_FLAGS
            float acc[4] = {oreg[4 * h + n].x * alpha, oreg[4 * h + n].y * alpha, 0.f, 0.f};
            mma_bf16_1688(acc, ph, pl, vf[n] & vm);
            oreg[4 * h + n] = make_float2(acc[0] + acc[2], acc[1] + acc[3]);
#else
            const int j = (4 * h + n) * 4 * G;
            const float2 o = fr < G && c0 != lo ? wop[j] : make_float2(0.f, 0.f);
            float acc[4] = {o.x * alpha, o.y * alpha, 0.f, 0.f};  // rows fr: o alpha + P_hi V; fr + 8: P_lo V
            mma_bf16_1688(acc, ph, pl, vf[n] & vm);
            if (fr < G) wop[j] = make_float2(acc[0] + acc[2], acc[1] + acc[3]);
#endif
          }
        }
#else
        float sv = -INFINITY;
        if (sj < nv && sg < G) {
          const uint4* kr = reinterpret_cast<const uint4*>(kb + (p0 + sj) * kstride);
          const float4* qg = reinterpret_cast<const float4*>(qf + sg * (hd + 4));
          float acc0 = 0.f, acc1 = 0.f;
          // The warp path's head_dim is 64 (attn_warps_fit): 8 pieces per row, fully unrolled (v46: Llama-1B ctx 32
          // -0.3%, SmolLM2 -0.9%, ctx 4064 +0.5% against a loop of 4 per pass).
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            qk_piece(kr[c], qg[2 * c], qg[2 * c + 1], acc0, acc1);
          }
          sv = (acc0 + acc1) * scale;
        }
        // Head sg's positions sit in lanes sg, sg + 4, ..., sg + 28.
        float mx = fmaxf(sv, __shfl_xor_sync(0xffffffffu, sv, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        ATTN_PROF(4);  // the warp path's sub-steps (thread 0, warp 0): 4 scores, 5 softmax, 7 o, 3 the end barrier
        const float mn = fmaxf(wm, mx);  // finite for a live head: the warp's first position is in the chunk
        const float alpha = wm == -INFINITY ? 0.f : expf(wm - mn);
        const float e = sv == -INFINITY ? 0.f : expf(sv - mn);
        float ls = e + __shfl_xor_sync(0xffffffffu, e, 4);
        ls += __shfl_xor_sync(0xffffffffu, ls, 8);
        ls += __shfl_xor_sync(0xffffffffu, ls, 16);
        wl = wl * alpha + ls;
        wm = mn;
        const int src = og & 3;  // lane og holds head og's alpha (scores layout, position 0)
        const float oa = __shfl_sync(0xffffffffu, alpha, src);
#pragma unroll
        for (int k = 0; k < 8; ++k) wo[k] *= oa;
        ATTN_PROF(5);
        // The warp's 8 positions unrolled (v46), so the shuffles and V loads of several positions overlap; a position
        // past nv adds nothing: its probability is 0 and its V row (possibly stale) is not read.
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
          const float pj = __shfl_sync(0xffffffffu, e, jj * 4 + src);
          const uint4 v8 = jj < nv ? *reinterpret_cast<const uint4*>(vb + (p0 + jj) * attn_vstride(hd) + od0)
                                   : make_uint4(0u, 0u, 0u, 0u);
          const uint32_t vw[4] = {v8.x, v8.y, v8.z, v8.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            wo[2 * k] = fmaf(pj, __uint_as_float(vw[k] << 16), wo[2 * k]);
            wo[2 * k + 1] = fmaf(pj, __uint_as_float(vw[k] & 0xffff0000u), wo[2 * k + 1]);
          }
        }
#endif
      }
      ATTN_PROF(7);
      __syncthreads();  // every warp is done with this buffer: it may receive chunk c+2
      ATTN_PROF(3);
    } else {
#endif
    // Scores: one (position, head) per thread.
    for (int i = tid; i < cn * G; i += kThreads) {
      const int j = i / G, g = i - j * G;
      const uint4* kr = reinterpret_cast<const uint4*>(kb + j * kstride);
      // q as float4 from rows padded to hd + 4 floats: the G heads a warp reads are in different banks (unpadded,
      // every head's element sat in the same bank: a G-way conflict on each of the hd scalar loads per score).
      const float4* qg = reinterpret_cast<const float4*>(qf + g * (hd + 4));
      // Two accumulators (elements 0-3 and 4-7 of each 8): half the dependent FMA chain.
      float acc0 = 0.f, acc1 = 0.f;
      for (int c = 0; c < cpr; ++c) {
        qk_piece(kr[c], qg[2 * c], qg[2 * c + 1], acc0, acc1);
      }
      sc[g * scs + j] = (acc0 + acc1) * scale;
    }
    __syncthreads();
    ATTN_PROF(3);
    // Online softmax update: warp g owns head g.
    if (warp < G) {
      const int g = warp;
      float cm = -INFINITY;
      for (int j = lane; j < cn; j += 32) cm = fmaxf(cm, sc[g * scs + j]);
      cm = warp_max(cm);
      const float m_old = ml[g];
      const float m_new = fmaxf(m_old, cm);
      float ls = 0.f;
      for (int j = lane; j < cn; j += 32) {
        const float e = expf(sc[g * scs + j] - m_new);
        sc[g * scs + j] = e;
        ls += e;
      }
      ls = warp_sum(ls);
      __syncwarp();  // every lane has read ml[g] (m_old) before lane 0 overwrites it (racecheck, 2026-11-30)
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        ml[2 * G + g] = alpha;
        ml[G + g] = ml[G + g] * alpha + ls;
        ml[g] = m_new;
      }
    }
    __syncthreads();
    ATTN_PROF(4);
    // o partials: thread (split, g, 8 dims) sums positions split, split + splits, ... with one 16-byte V read per
    // position into eight accumulators (one per dim), stored in a fixed order. Per-element 2-byte reads cost 8x the
    // shared-memory wavefronts (perf log v29: the attention -9% at 16K positions).
    // A short chunk takes fewer splits (at least 8 positions each), so that the combine below stays short: at
    // 32 positions, 16 splits of 2 cost 0.7% per token (perf log v29).
    int nsp = cn >= 8 * splits ? splits : (cn >= 16 ? cn / 8 : 1);
    {
      const int d8n = hd / 8, ngd = G * d8n;
      for (int i = tid; i < nsp * ngd; i += kThreads) {
        const int sp = i / ngd, gd = i - sp * ngd;
        const int g = gd / d8n, d0 = (gd - g * d8n) * 8;
        const float* sg = sc + g * scs;
        float a[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] = 0.f;
        for (int j = sp; j < cn; j += nsp) {
          const float pj = sg[j];
          const uint4 v8 = *reinterpret_cast<const uint4*>(vb + j * attn_vstride(hd) + d0);
          const uint32_t vw[4] = {v8.x, v8.y, v8.z, v8.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            a[2 * k] = fmaf(pj, __uint_as_float(vw[k] << 16), a[2 * k]);
            a[2 * k + 1] = fmaf(pj, __uint_as_float(vw[k] & 0xffff0000u), a[2 * k + 1]);
          }
        }
        float4* op = reinterpret_cast<float4*>(opart + sp * G * hd + g * hd + d0);
        op[0] = make_float4(a[0], a[1], a[2], a[3]);
        op[1] = make_float4(a[4], a[5], a[6], a[7]);
      }
    }
    __syncthreads();
    ATTN_PROF(5);
    for (int i = tid; i < G * hd; i += kThreads) {
      const int g = i / hd;
      float acc = of[i] * ml[2 * G + g];
      for (int sp = 0; sp < nsp; ++sp) acc += opart[sp * G * hd + i];
      of[i] = acc;
    }
    __syncthreads();
    ATTN_PROF(6);
#if TILES_ATTN_WARPS
    }
#endif
    if (kv_delta != 0) {  // the buffer just read receives chunk c+2
      kb += kv_delta;
      vb += kv_delta;
      kv_delta = -kv_delta;
    }
  }
#if TILES_ATTN_WARPS
  if (warp_ok) {
    // The warps' states (o in opart, (m, l) in sc), then one log-sum-exp combine in warp order (fixed: bit-identical
    // runs) into of / ml, the layout MERGE and the partial's store read. Warps past the first chunk's span never
    // held a position (their m is -inf): the combine leaves them out.
    const int wused = attn_warps_used(lo, hi, L.chunk);
    if (warp < wused) {
#if TILES_ATTN_TC
      if (fr < G && ft == 0) {  // (the flag variant's o is in opart already)
        sc[(warp * G + fr) * 2] = wm;
        sc[(warp * G + fr) * 2 + 1] = wl;
      }
#ifndef TILES_FLAGS
      if (fr < G) {
#pragma unroll
        for (int n = 0; n < 8; ++n) wop[n * 4 * G] = oreg[n];
      }
#endif
#else
      if (og < G) {
        float4* op = reinterpret_cast<float4*>(opart + (warp * G + og) * hd + od0);
        op[0] = make_float4(wo[0], wo[1], wo[2], wo[3]);
        op[1] = make_float4(wo[4], wo[5], wo[6], wo[7]);
      }
      if (sj == 0 && sg < G) {
        sc[(warp * G + sg) * 2] = wm;
        sc[(warp * G + sg) * 2 + 1] = wl;
      }
#endif
    }
    __syncthreads();
    attn_combine_warps(sc, opart, G, hd, wused, of, ml);
    __syncthreads();
    ATTN_PROF(6);
  }
#endif
  TILES_MARK(kTimePhase2);
#if defined(TILES_ATTN_PROFILE) && TILES_TILE_TIMING
  // Workers 0, 33, 66, 99 and every partition-0 tile (at short context those sit on the workers without qkv). The
  // warp path's sub-steps reuse slots 3-5 (3: its end-of-chunk barrier) and add 7; the names printed say which.
  if (threadIdx.x == 0 && t.layer == p.h.num_layers - 1 && ((blockIdx.x % 33) == 0 || part == 0)) {
    if (kWarpPath)
      printf("ATTNPROF w %d kvh %d part %d pos %d lo %d hi %d: pro %llu issue %llu wait %llu endbar %llu scores %llu "
             "softmax %llu combine %llu o %llu\n", int(blockIdx.x), kvh, part, int(pos), lo, hi, prof_[0], prof_[1],
             prof_[2], prof_[3], prof_[4], prof_[5], prof_[6], prof_[7]);
    else
      printf("ATTNPROF w %d kvh %d part %d pos %d lo %d hi %d: pro %llu issue %llu wait %llu scores %llu softmax %llu "
             "opart %llu combine %llu\n", int(blockIdx.x), kvh, part, int(pos), lo, hi, prof_[0], prof_[1], prof_[2],
             prof_[3], prof_[4], prof_[5], prof_[6]);
  }
#endif
  if ((OPT(p) & kOptLocalMerge) && t.out_offset == 1 && part == 0 && hi >= pos + 1) return true;
  float* out = reinterpret_cast<float*>(buffer_ptr(p, t.out_buf));
  for (int i = tid; i < G * (hd + 2); i += kThreads) {
    const int g = i / (hd + 2), k = i - g * (hd + 2);
    const int64_t base = (int64_t(kvh * P + part) * G + g) * (hd + 2);
    put_f32(out, base + k, k == 0 ? ml[g] : (k == 1 ? ml[G + g] : of[g * hd + (k - 2)]), epoch);
  }
  return false;
}

// attn_tile_body's instantiation for this shape. The default variants compile the warp path alone: inlined beside it, the five-step loop's ~1000 instructions cost
// Llama-1B +24% per token, and out of line (its Tile and layout passed through the stack) 320 bytes of stack and
// 72 / 120 bytes of spills in the kernel (perf log v45). launch_decode runs a shape the warp path does not take
// (attn_warps_fit) on the runtime-options kernel, which has both and picks by shape: the same bits as the default
// variant for every shape that runs there.
__device__ __forceinline__ bool attn_tile(const KernelParams& p, const Tile& t, int64_t pos, uint8_t* smem,
                                          const SmemLayout& L, bool prestaged, uint32_t epoch) {
#if TILES_ATTN_WARPS && defined(TILES_DEFAULT_VARIANT)
  return attn_tile_body<true>(p, t, pos, smem, L, prestaged, epoch);
#else
  if (attn_warps_fit(p.h)) return attn_tile_body<true>(p, t, pos, smem, L, prestaged, epoch);
  return attn_tile_body<false>(p, t, pos, smem, L, prestaged, epoch);
#endif
}

// Out of line (scalar arguments, so nothing of the caller's goes to the stack): at short context LocalMerge runs
// instead and this code only sat between the hot blocks; at long context a call per MERGE tile costs nothing
// (perf log v36). `sf`: L.msf.
__device__ TILES_OUTLINE void merge_tile(const KernelParams& p, int32_t kvh, int32_t in_buf, int32_t out_buf, float* sf,
                                        uint32_t epoch) {
  const int hd = p.h.head_dim, G = p.h.num_heads / p.h.num_kv_heads, P = p.h.attn_partitions;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* part = reinterpret_cast<const float*>(buffer_ptr(p, in_buf));
  uint16_t* out = reinterpret_cast<uint16_t*>(buffer_ptr(p, out_buf));  // sf: [G][P] exp(m_p - M) / L
#ifndef TILES_FLAGS
  // Thread (g, d) loads its o words of every partition before the scale factors are known, so that they travel in
  // the same L2 round trip as m and l (perf log, session 19: MERGE's main phase was a second round trip, ~1 us per
  // layer on the critical path at long context). The sum below keeps the loop's order and skips: the same bits.
  constexpr int kMergePre = 16;
  const bool pre = P <= kMergePre && G * hd <= kThreads;
  float ov[kMergePre];
  if (pre && tid < G * hd) {
    const int g = tid / hd, d = tid - g * hd;
#pragma unroll
    for (int pp = 0; pp < kMergePre; ++pp)
      ov[pp] = pp < P ? __ldcg(part + (int64_t(kvh * P + pp) * G + g) * (hd + 2) + 2 + d) : 0.f;
  }
#endif
  // Warp g: M = max m_p, L = sum l_p exp(m_p - M); scale factors for the o sums.
  for (int g = warp; g < G; g += kWarps) {
    if ((OPT(p) & kOptMergeOneTrip) && P <= 32) {
      // One partition per lane: m and l in one L2 round trip (the general loop below takes two: m, then m and l).
      // Same values and order as the general loop: one term per lane, then the same warp reductions.
      float m = -INFINITY, l = 0.f;
#ifdef TILES_FLAGS
      {
        const int64_t base = (int64_t(kvh * P + lane) * G + g) * (hd + 2);
        const int64_t idx[2] = {lane < P ? base : -1, lane < P ? base + 1 : -1};
        float ml2[2];
        fl_read_f32<2>(p, part, idx, epoch, ml2);
        if (lane < P) {
          m = ml2[0];
          l = ml2[1];
        }
      }
#else
      const float* r = part + (int64_t(kvh * P + lane) * G + g) * (hd + 2);
      if (lane < P) {
        m = __ldcg(r);
        l = __ldcg(r + 1);
      }
#endif
      const float M = warp_max(m);
      const float e = m == -INFINITY ? 0.f : expf(m - M);
      const float Ls = warp_sum(l * e);
      if (lane < P) sf[g * P + lane] = e / Ls;
      continue;
    }
    float M = -INFINITY;
    for (int pp = lane; pp < P; pp += 32)
      M = fmaxf(M, get_f32(p, part, (int64_t(kvh * P + pp) * G + g) * (hd + 2), epoch));
    M = warp_max(M);
    float Ls = 0.f;
    for (int pp = lane; pp < P; pp += 32) {
      const int64_t r = (int64_t(kvh * P + pp) * G + g) * (hd + 2);  // an element index (flagged words differ)
      const float m = get_f32(p, part, r, epoch);
      const float e = m == -INFINITY ? 0.f : expf(m - M);
      sf[g * P + pp] = e;
      Ls += get_f32(p, part, r + 1, epoch) * e;
    }
    Ls = warp_sum(Ls);
    for (int pp = lane; pp < P; pp += 32) sf[g * P + pp] /= Ls;
  }
  __syncthreads();
  TILES_MARK(kTimePhase1);
#ifndef TILES_FLAGS
  if (pre) {
    if (tid < G * hd) {
      const int g = tid / hd, d = tid - g * hd;
      float acc = 0.f;
#pragma unroll
      for (int pp = 0; pp < kMergePre; ++pp) {
        const float e = pp < P ? sf[g * P + pp] : 0.f;
        if (e != 0.f) acc = fmaf(ov[pp], e, acc);
      }
      put_bf16(out, (kvh * G + g) * hd + d, f2bf(acc), epoch);
    }
    TILES_MARK(kTimePhase2);
    return;
  }
#endif
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i - g * hd;
    float acc = 0.f;
#ifdef TILES_FLAGS
    // Eight partitions' words in flight at once (a loop of single polls would pay one round trip per partition;
    // sixteen, the default partition count, made the flag build's default variant spill: perf log, session 8).
    for (int pp0 = 0; pp0 < P; pp0 += 8) {
      int64_t idx[8];
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int pp = pp0 + j;
        idx[j] = pp < P && sf[g * P + pp] != 0.f ? (int64_t(kvh * P + pp) * G + g) * (hd + 2) + 2 + d : -1;
      }
      fl_read_f32<8>(p, part, idx, epoch, v);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (idx[j] >= 0) acc = fmaf(v[j], sf[g * P + pp0 + j], acc);
    }
#else
    for (int pp = 0; pp < P; ++pp) {
      const float e = sf[g * P + pp];
      if (e != 0.f) acc = fmaf(__ldcg(part + (int64_t(kvh * P + pp) * G + g) * (hd + 2) + 2 + d), e, acc);
    }
#endif
    put_bf16(out, (kvh * G + g) * hd + d, f2bf(acc), epoch);
  }
  TILES_MARK(kTimePhase2);
}

// kOptLocalMerge: the partition-0 ATTN tile of this KV head ran just before on this worker and held every position
// (the caller checks both), so its o and l are still in shared memory. MERGE's arithmetic for one live partition:
// M = m, e = 1, scale e / l, out = bf16(fmaf(o, scale, 0)); the same operations, so the same bits.
__device__ void merge_local(const KernelParams& p, const Tile& t, const uint8_t* smem, const SmemLayout& L,
                            uint32_t epoch) {
  const int hd = p.h.head_dim, G = p.h.num_heads / p.h.num_kv_heads;
  const float* of = reinterpret_cast<const float*>(smem + L.of);
  const float* ml = reinterpret_cast<const float*>(smem + L.ml);
  uint16_t* out = reinterpret_cast<uint16_t*>(buffer_ptr(p, t.out_buf));
  for (int i = threadIdx.x; i < G * hd; i += kThreads) {
    const float scale = 1.0f / ml[G + i / hd];
    put_bf16(out, t.aux0 * G * hd + i, f2bf(fmaf(of[i], scale, 0.f)), epoch);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------------------------
// The LM-head tile's partial (max, argmax) over its rows, from `rows` (shared memory) or else the logits row this
// block just wrote, into part[2 * slot], part[2 * slot + 1]. Out of line (scalar arguments): it runs once per step,
// and inlined its code sat between the hot blocks of the tile loop (perf log v36).
__device__ TILES_OUTLINE void lmhead_partial(int32_t row_begin, int32_t row_end, const float* logits, float* red,
                                            float* part, int32_t slot, uint32_t epoch, const float* rows) {
  const int tid = threadIdx.x;
  // Partial (max, argmax) over this tile's rows: from shared memory where emit kept them (v54, `rows`), else read
  // back (ld.cg, L2) from the logits row this block just wrote: the fence makes each writer's stores visible at L2
  // before the barrier.
  if (rows == nullptr) __threadfence();
  __syncthreads();
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int32_t r = row_begin + tid; r < row_end; r += kThreads) {
    const float v = rows != nullptr ? rows[r - row_begin] : __ldcg(logits + r);
    if (better(v, r, bv, bi)) {
      bv = v;
      bi = r;
    }
  }
  warp_argmax(bv, bi);
  float* wv = red;                                   // [kWarps] values
  int32_t* wi = reinterpret_cast<int32_t*>(red + kWarps);  // [kWarps] indices
  if ((tid & 31) == 0) {
    wv[tid >> 5] = bv;
    wi[tid >> 5] = bi;
  }
  __syncthreads();
  if (tid < 32) {
    bv = tid < kWarps ? wv[tid] : -INFINITY;
    bi = tid < kWarps ? wi[tid] : INT32_MAX;
    warp_argmax(bv, bi);
    if (tid == 0) {
      put_f32(part, 2 * slot, bv, epoch);
      put_f32(part, 2 * slot + 1, __int_as_float(bi), epoch);
    }
  }
}

struct StepCtx {
  uint32_t epoch;   // e = state[EPOCH] at launch + step + 1
  int32_t step;
  int64_t pos;
};

__device__ __forceinline__ bool is_eos(const KernelParams& p, int64_t tok) {
  for (int i = 0; i < p.num_eos; ++i)
    if (tok == p.eos[i]) return true;
  return false;
}

// Runs one tile. False when the worker must stop (an error was raised).
// `rec`: the tile's local plan record (kOptPlanSmem) or null.
// `times`: this tile's kTileTimes timestamps (TILES_TILE_TIMING builds) or null.
// `ahead`: kOptStageAhead, this matvec tile's batch, already staged by the caller (null otherwise); `ahead_pending`:
// the next matvec tile's batch was committed after it. `pc`: kOptPollPrefetch's cursor for this tile's wait, or null.
// `stream`: kOptStream's state (kStream instantiation, null when the stream does not run).
template <bool kExp, bool kStream>
__device__ bool run_tile(const KernelParams& p, int32_t ti, const Tile& t, const int32_t* rec, const StepCtx& sc,
                         int32_t worker, uint8_t* smem, const SmemLayout& L, int* s_flag, int64_t* s_tok,
                         unsigned long long* times, BulkCtx* bc, RingCtx* ring, uint8_t* ahead, bool ahead_pending,
                         PollCursor* pc, bool local_merge, const StreamCtx* stream, uint32_t& stream_n,
                         bool after_attn) {
  const int tid = threadIdx.x;
#if TILES_TILE_TIMING
  if (tid == 0) g_tile_times = times;
#endif
#ifdef TILES_FLAGS
  if (tid == 0) {
    g_fl_tile = ti;
    g_fl_step = sc.step;
  }
#endif
  TILES_MARK(kTimeStart);
  const bool is_matvec = op_is_matvec(t.op);
  const bool bulk = bc != nullptr && is_matvec;
  uint8_t* stage = ahead;
  if (stage == nullptr) {
    // The stream's instantiation (run only with bit 65536, whose layout has no stage) never stages: compile-time
    // dead code there, which keeps its register allocation free of spills.
    stage = !kStream && (OPT(p) & kOptStageWeights) && !bulk && bc == nullptr && ring == nullptr && is_matvec
                ? smem + L.stage
                : nullptr;
    if (stage != nullptr) {
      // v48 (TILES_PACE_O_CYCLES): an o-projection tile after an ATTN tile waits for the attention chain (~5 us at
      // short context), so its warps can issue their batches one after another instead of at once: the burst no
      // longer fills L2's queues while MERGE stores and releases (perf log, session 17: without O's staging MERGE's
      // span fell 2.1 -> 1.5 us). Warp w issues w x pace_cycles after the tile starts.
      if (!kFlags && after_attn && p.pace_cycles > 0 && t.op == kOpResid &&
          weight_cols(p, t.weight) != p.h.intermediate) {
        const long long t0 = clock64(), d = static_cast<long long>(threadIdx.x >> 5) * p.pace_cycles;
        while (clock64() - t0 < d) {
        }
      }
      stage_first_batch(p, t, stage);
    }
  }
  if (bulk && bc->armed != bc->k) {
    // Not staged by the previous matvec tile (the step's first one): stage it now, before the wait. The copy engine
    // moves it; the poll and the input loads do not queue behind it.
    bulk_consume(p, *bc);
    bulk_arm(p, *bc, t, bc->k);
  }
  const bool attn_pre = t.op == kOpAttn && (OPT(p) & kOptAttnPrestage);
  if (attn_pre) attn_prestage(p, t, sc.pos, smem, L);
  // A local MERGE's inputs are this block's shared memory: nothing to wait for. TILES_FLAGS builds poll every
  // scratch input where it is read; only EMBED (the previous step's token, in p.tokens) waits on a counter.
  if (!local_merge && (!kFlags || t.op == kOpEmbed) && !wait_tile<kExp>(p, t, sc.epoch, worker, ti, sc.step, rec, pc)) {
    if (stage != nullptr || attn_pre) cp_async_wait_all();  // no copy may land in a block that has exited
    return false;
  }
  // attn_prestage's RoPE tables are read by other threads: in counter builds the wait's barrier publishes them, a
  // flag build's ATTN tile has no wait (without this barrier: session 9's flag-build bit-identity failure, opt 64).
  if (kFlags && attn_pre) __syncthreads();
  TILES_MARK(kTimeWaited);
  if (kExp && (OPT(p) & kOptPrefetchAfterAttn) && t.op == kOpAttn && tid < 32 && g_pf_rec != nullptr)
    prefetch_rows(p, load_tile_rec(g_pf_rec), kWarps * kStageBytesPerWarp);
  uint16_t* vec = reinterpret_cast<uint16_t*>(smem + L.vec);
  float* red = reinterpret_cast<float*>(smem + L.red);
  bool kept_local = false;  // an ATTN tile that wrote no partials (attn_tile): its MERGE signals for it
  switch (t.op) {
    case kOpEmbed: {
      if (tid == 0) {
        const int64_t tok = sc.step == 0 ? __ldg(p.input_ids) : __ldcg(p.tokens + sc.step - 1);
        int ok = 1;
        if (tok < 0 || tok >= p.h.vocab) {
          raise_error(p, kErrorBadToken, worker, ti, sc.step, -1, static_cast<uint32_t>(tok),
                      static_cast<uint32_t>(p.h.vocab));
          ok = 0;
        }
        *s_tok = tok;
        *s_flag = ok;
      }
      __syncthreads();
      if (!*s_flag) return false;
      const int64_t tok = *s_tok;
      const uint16_t* row = p.weights[t.weight] + tok * p.h.hidden;
      float* out = reinterpret_cast<float*>(buffer_ptr(p, t.out_buf));
      for (int i = tid; i < p.h.hidden; i += kThreads) put_f32(out, i, bf2f(__ldg(row + i)), sc.epoch);
      break;
    }
    case kOpQkv:
    case kOpGateup:
    case kOpLmhead:
    case kOpResid: {
      const int32_t cols = weight_cols(p, t.weight);
      float* rsd = reinterpret_cast<float*>(smem + L.rsd);
      const bool resid_smem = t.op == kOpResid && (OPT(p) & kOptResidSmem);
      if (resid_smem) {
        // Issued together with the input vector's loads (one L2 round trip); the copy's barrier publishes them.
        const float* resid = reinterpret_cast<const float*>(buffer_ptr(p, t.in2_buf));
        for (int32_t r = tid; r < t.row_end - t.row_begin; r += kThreads)
          rsd[r] = get_f32(p, resid, t.out_offset + r, sc.epoch);
      }
      if (t.op == kOpResid) {
        copy_bf16_to_smem(p, reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in_buf)), cols, vec, sc.epoch);
      } else {
        rmsnorm_to_smem(p, reinterpret_cast<const float*>(buffer_ptr(p, t.in_buf)), p.weights[t.norm], cols, vec,
                        red, sc.epoch);
      }
      TILES_MARK(kTimePhase1);
      MatvecOut o;
      o.op = t.op;
      o.row_begin = t.row_begin;
      o.row_end = t.row_end;
      o.out_offset = t.out_offset;
      o.out_bf16 = nullptr;
      o.out_f32 = nullptr;
      o.resid = nullptr;
      o.resid_smem = resid_smem ? rsd : nullptr;
      o.logits = nullptr;
      o.epoch = sc.epoch;
#ifdef TILES_FLAGS
      o.params = &p;
#endif
      if (t.op == kOpQkv || t.op == kOpGateup) o.out_bf16 = reinterpret_cast<uint16_t*>(buffer_ptr(p, t.out_buf));
      if (t.op == kOpResid) {
        o.out_f32 = reinterpret_cast<float*>(buffer_ptr(p, t.out_buf));
        o.resid = reinterpret_cast<const float*>(buffer_ptr(p, t.in2_buf));
      }
      if (t.op == kOpLmhead) {
        o.logits = p.logits + int64_t(sc.step) * p.h.vocab;
        // v54: the rows in the residual's shared memory (unused by LMHEAD) where they fit, for lmhead_partial.
        if (t.row_end - t.row_begin <= p.h.hidden) o.out_f32 = rsd;
      }
      if (kStream && stream != nullptr) {
        matvec_stream(p, cols, vec, o, red, *stream, stream_n);
      } else {
        matvec(p, p.weights[t.weight], t.weight2 >= 0 ? p.weights[t.weight2] : nullptr, cols, vec, o, red, stage,
               bulk ? bc : nullptr, ring, ahead != nullptr && ahead_pending);
      }
#ifndef TILES_MARK_SPLIT
      TILES_MARK(kTimePhase2);
#endif
#ifdef TILES_PROBE_MLP_REDUCE
      // Timing bound only (scripts/wait_bound.py, perf log session 19): the fused MLP's epilogue cost, 2048 int64
      // red.add per GATEUP tile into one accumulator, before the release. The values are meaningless.
      if (t.op == kOpGateup) {
        for (int i = tid; i < 2048; i += kThreads)
          asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(g_probe_mlp_acc + i),
                       "l"(static_cast<unsigned long long>(vec[i])) : "memory");
      }
#endif
      if (t.op == kOpLmhead) lmhead_partial(t.row_begin, t.row_end, o.logits, red,
                                            reinterpret_cast<float*>(buffer_ptr(p, t.out_buf)), t.aux0, sc.epoch,
                                            o.out_f32);
      break;
    }
    case kOpAttn:
      kept_local = attn_tile(p, t, sc.pos, smem, L, attn_pre, sc.epoch);
      break;
    case kOpMerge:
      if (local_merge) {
        merge_local(p, t, smem, L, sc.epoch);
      } else {
        merge_tile(p, t.aux0, t.in_buf, t.out_buf, reinterpret_cast<float*>(smem + L.msf), sc.epoch);
      }
      break;
    case kOpArgmax: {
      if (tid < 32) {
        const float* part = reinterpret_cast<const float*>(buffer_ptr(p, t.in_buf));
        float bv = -INFINITY;
        int32_t bi = INT32_MAX;
#ifdef TILES_FLAGS
        // Eight partials per lane in flight at once (value and index words), in the plain loop's order.
        for (int k0 = tid; k0 < t.aux0; k0 += 8 * 32) {
          int64_t iv[8], ii[8];
          float v[8], vi[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int k = k0 + 32 * j;
            iv[j] = k < t.aux0 ? 2 * k : -1;
            ii[j] = k < t.aux0 ? 2 * k + 1 : -1;
          }
          fl_read_f32<8>(p, part, iv, sc.epoch, v);
          fl_read_f32<8>(p, part, ii, sc.epoch, vi);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            if (iv[j] >= 0 && better(v[j], __float_as_int(vi[j]), bv, bi)) {
              bv = v[j];
              bi = __float_as_int(vi[j]);
            }
          }
        }
#else
        for (int k = tid; k < t.aux0; k += 32) {
          const float v = __ldcg(part + 2 * k);
          const int32_t i = __ldcg(reinterpret_cast<const int32_t*>(part) + 2 * k + 1);
          if (better(v, i, bv, bi)) {
            bv = v;
            bi = i;
          }
        }
#endif
        warp_argmax(bv, bi);
        if (tid == 0) {
          p.tokens[sc.step] = bi;
          if (is_eos(p, bi) || sc.step + 1 == p.num_steps) {
            // The launch ends after this step: every tile of it is an ancestor of this one, and every worker read
            // EPOCH at start, so advancing it here is safe.
            p.state[kStateStepsDone] = static_cast<uint32_t>(sc.step + 1);
            p.state[kStateEpoch] = sc.epoch;
          }
        }
      }
      break;
    }
    default:
      break;
  }
  TILES_MARK(kTimeDone);
  if (kept_local) {
    __syncthreads();  // the local MERGE reads this tile's shared memory
  } else if (!kFlags || t.op == kOpArgmax) {
    signal_tile(p, t, local_merge && t.aux1 > 0 ? t.aux1 - 1 : -1);
  } else {
    __syncthreads();  // the next tile's staging reuses this one's shared memory
  }
  TILES_MARK(kTimeSignalled);
#ifdef TILES_FLAGS
  if (g_fl_abort) return false;  // a poll gave up (published by the barrier above)
#endif
  return true;
}

}  // namespace

// Five instantiations: kRing = the weight-ring path (kOptWeightRing), kAhead = kOptStageAhead, kPoll =
// kOptPollPrefetch and kOptPrefetchAfterAttn (experiments), kStream = kOptStream, each compiled separately so that
// its code does not change the register allocation of the default path (the kernel is at its 128-register bound;
// perf-log v7).
template <bool kRing, bool kAhead, bool kPoll, bool kStream>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const __grid_constant__ KernelParams p) {
  uint8_t* smem = g_smem;
  __shared__ int s_flag;
  __shared__ int s_stop;
  __shared__ uint32_t s_epoch0;
  __shared__ int64_t s_pos0;
  __shared__ int64_t s_tok;
  const int tid = threadIdx.x;
  const int32_t worker = blockIdx.x;
  // The launch filled it for this instantiation (launch_cooperative): constant-bank reads, no registers held. The flag
  // variant computes its own: with the parameter it ran SmolLM2 2.6% slower (perf log, session 16), and it had no
  // spills to remove.
#ifdef TILES_FLAGS
  const SmemLayout L = smem_layout(p.h, OPT(p) & ~kOptStream, p.stream_stages, p.stream_stage_bytes);
#else
  const SmemLayout& L = p.layout;
#endif

  if (tid == 0) {
    int bad = 0;
    if (ld_relaxed(p.state + kStateError) != 0u) {
      bad = 1;  // a poisoned state: do nothing (the host reports the recorded error)
    } else {
      const int32_t magic = p.plan[0];
      const int32_t total = p.plan[offsetof(Header, total_words) / 4];
      const int32_t ntiles = p.plan[offsetof(Header, num_tiles) / 4];
      const int64_t tok = p.input_ids[0];
      const int64_t pos = p.position[0];
      if (magic != p.h.magic || total != p.h.total_words || ntiles != p.h.num_tiles) {
        raise_error(p, kErrorBadPlan, worker, -1, -1, -1,
                    static_cast<uint32_t>(magic != p.h.magic ? magic : (total != p.h.total_words ? total : ntiles)),
                    static_cast<uint32_t>(magic != p.h.magic ? p.h.magic
                                                             : (total != p.h.total_words ? p.h.total_words
                                                                                         : p.h.num_tiles)));
        bad = 1;
      } else if (tok < 0 || tok >= p.h.vocab) {
        raise_error(p, kErrorBadToken, worker, -1, 0, -1, static_cast<uint32_t>(tok),
                    static_cast<uint32_t>(p.h.vocab));
        bad = 1;
      } else if (pos < 0 || pos >= p.max_cache_len) {
        raise_error(p, kErrorCacheFull, worker, -1, 0, -1, static_cast<uint32_t>(pos),
                    static_cast<uint32_t>(p.max_cache_len));
        bad = 1;
      }
      s_pos0 = pos;
    }
    s_epoch0 = p.state[kStateEpoch];
#ifdef TILES_FLAGS
    g_fl_abort = 0;
#endif
    s_flag = bad;
  }
  __syncthreads();
  if (s_flag) return;
  const uint32_t epoch0 = s_epoch0;
  const int64_t pos0 = s_pos0;
  __syncthreads();

  const int32_t tbeg = __ldg(p.plan + p.h.worker_offsets_offset + worker);
  const int32_t tend = __ldg(p.plan + p.h.worker_offsets_offset + worker + 1);
  // A worker without tiles has nothing to do (it would also read EPOCH without being an ancestor of ARGMAX).
  if (tend == tbeg) return;
  const int32_t* wtiles = p.plan + p.h.worker_tiles_offset;
  int32_t steps_done = p.num_steps;
  const bool plan_local = (OPT(p) & kOptPlanSmem) && load_plan_smem(p, L, tbeg, tend);
  const int32_t* recs = reinterpret_cast<const int32_t*>(smem + L.prec);
  // The weight ring needs the tile records in shared memory (its producer walks them for every batch).
  const bool use_ring = kRing && (OPT(p) & kOptWeightRing) && plan_local;
  // No stage with the stream (its instantiation runs only with bit 65536: compile-time dead code there).
  const bool bulk = !kStream && (OPT(p) & kOptBulkStage) != 0 && !use_ring;
  // kOptStageAhead: the slot (0/1) of the next staged tile and the index of the tile staged there (-1: none).
  int32_t ahead_slot = 0, ahead_k = -1;
  PollCursor pcur;  // kOptPollPrefetch (thread 0 uses it; every thread computes the same target)
  pcur.a = pcur.b = nullptr;
  pcur.off = pcur.len = 0;
  pcur.k = -1;
  RingCtx rg;
  {
    const int warp = tid >> 5;
    rg.slots = smem + L.stage + warp * kRingSlots * kRingSlotBytes;
    rg.bars = reinterpret_cast<uint64_t*>(smem + L.bars) + warp * kRingSlots;
    rg.cur = reinterpret_cast<RingCur*>(smem + L.rcur) + 2 * warp;
    rg.recs = recs;
    rg.tbeg = tbeg;
    rg.tend = tend;
    rg.taken = 0u;
  }
  RingCtx* ring = use_ring ? &rg : nullptr;
  // kOptStream: the host refuses a layout without two stages; a worker whose records are not local streams nothing.
  const bool use_stream = kStream && (OPT(p) & kOptStream) && plan_local && L.sstages >= 2;
  StreamCtx& stc = *reinterpret_cast<StreamCtx*>(smem + L.sslots + L.sstages * sizeof(StreamSlot));
  uint32_t stream_n = 0u;
  if (use_stream) {
    const uint16_t** wtab = reinterpret_cast<const uint16_t**>(smem + L.sslots + L.sstages * sizeof(StreamSlot) + 64);
    for (int32_t i = tid; i < p.h.num_weights; i += kThreads) wtab[i] = p.weights[i];
    __syncthreads();  // thread 0 issues the first stages from the table
    if (tid == 0) {
      stc.wptr = static_cast<int32_t>(reinterpret_cast<uint8_t*>(wtab) - smem);
      // A 1 KB boundary of the shared window (smem_layout's slack).
      stc.ring = L.sring - static_cast<int32_t>(smem_addr(smem + L.sring) & 1023u);
      stc.slots = L.sslots;
      stc.recs = L.prec;
      stc.tbeg = tbeg;
      stc.tend = tend;
      stc.ns = L.sstages;
      stc.sb = L.sstage_bytes;
      stc.desc = L.sdesc;
      stc.tmp = L.red;
    }
    stream_start(p, stc, L.sdesc_cap);
  }
  const StreamCtx* stream = use_stream ? &stc : nullptr;
  if (use_ring) {
    if (tid < kWarps * kRingSlots) mbar_init(reinterpret_cast<uint64_t*>(smem + L.bars) + tid, 1u);
    if ((tid & 31) == 0) {
      RingCur c;
      c.s = 0;
      c.k = tbeg;
      c.item = -1;
      c.base = -1;
      c.row = 0;
      c.bvalid = 0;
      c.n = 0;
      c.done = 0;
      rg.cur[0] = c;
      rg.cur[1] = c;
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    // The first batches stream from the start of the launch.
    if ((tid & 31) == 0) ring_fill_lane0(p, rg.recs, rg.tbeg, rg.tend, rg.cur, rg.slots, rg.bars, 0u);
    __syncwarp();
  }
  BulkCtx bc;
  bc.stage = smem + L.stage;
  bc.bars = reinterpret_cast<uint64_t*>(smem + L.bars);
  bc.phase = 0u;
  bc.armed = -1;
  bc.k = -1;
  bc.k2 = -1;
  bc.rec2 = nullptr;
  bc.tile2 = -1;
  if (bulk) {
    if (tid < kWarps) mbar_init(bc.bars + tid, 1u);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
  }
  // Op of the worker's k-th tile (kOptBulkStage's look-ahead; a local record read when the plan is in smem).
  auto op_k = [&](int32_t k) -> int32_t {
    if (plan_local) return recs[(k - tbeg) * kPlanRecWords + offsetof(Tile, op) / 4];
    return __ldg(p.plan + p.h.tiles_offset + __ldg(wtiles + k) * kTileWords + offsetof(Tile, op) / 4);
  };
  // The k-th tile of this worker (and its local record, or null).
  auto tile_k = [&](int32_t k, const int32_t** rec) -> Tile {
    if (plan_local) {
      *rec = recs + (k - tbeg) * kPlanRecWords;
      return load_tile_rec(*rec);
    }
    *rec = nullptr;
    return load_tile(p, __ldg(wtiles + k));
  };

  for (int32_t s = 0; s < p.num_steps; ++s) {
    StepCtx sc;
    sc.epoch = epoch0 + static_cast<uint32_t>(s) + 1u;
    sc.step = s;
    sc.pos = pos0 + s;
    // The first tile's weights stream while this worker learns whether the step runs.
    if (tid < 32 && !use_ring) {
      const int32_t* r0;
      if (!kStream) {
        prefetch_tile(p, tile_k(tbeg, &r0), sc.pos);
      } else {
        const Tile t0 = tile_k(tbeg, &r0);
        if (!(use_stream && op_is_matvec(t0.op))) prefetch_tile(p, t0, sc.pos);
      }
    }
    if (s > 0) {
      // Learn the previous step's token: every worker decides identically whether this step runs.
      if (tid == 0) {
        int stop = 0, ok = 1;
        if (!wait_counter(p, p.h.argmax_counter, epoch0 + static_cast<uint32_t>(s), worker, -1, s)) {
          ok = 0;
        } else if (is_eos(p, __ldcg(p.tokens + s - 1))) {
          stop = 1;
        } else if (sc.pos >= p.max_cache_len) {
          raise_error(p, kErrorCacheFull, worker, -1, s, -1, static_cast<uint32_t>(sc.pos),
                      static_cast<uint32_t>(p.max_cache_len));
          ok = 0;
        }
        s_flag = ok;
        s_stop = stop;
      }
      __syncthreads();
      const int ok = s_flag, stop = s_stop;
      __syncthreads();
      if (!ok) {
        bulk_consume(p, bc);  // no copy may land in a block that has exited
        if (use_ring) ring_drain(p, rg);
        if (use_stream) stream_drain(p, stc);
        return;
      }
      if (stop) {
        steps_done = s;
        break;
      }
    }
    // kOptLocalMerge: (layer, KV head) + 1 of the partition-0 ATTN tile just run on this worker, 0 otherwise; and
    // whether partition 0 holds every position of this step.
    int32_t attn0_key = 0;
    bool attn0_all = false;
    if (OPT(p) & kOptLocalMerge) {
      int32_t lo0, hi0;
      attn_partition_range(static_cast<int32_t>(sc.pos + 1), 0, p.h.attn_partitions, p.h.attn_granule,
                           p.h.attn_single, &lo0, &hi0);
      attn0_all = hi0 >= sc.pos + 1;
    }
    bool after_attn = false;  // the previous tile of this worker was an ATTN tile (TILES_PACE_O_CYCLES)
    for (int32_t k = tbeg; k < tend; ++k) {
      const int32_t* rec;
      const Tile t = tile_k(k, &rec);
      const int32_t key = t.layer * 1024 + t.aux0 + 1;
      const bool local_merge = attn0_all && t.op == kOpMerge && attn0_key == key;
      attn0_key = t.op == kOpAttn && t.aux1 == 0 ? key : 0;
      if (kPoll && (OPT(p) & kOptPrefetchAfterAttn) && t.op == kOpAttn && tid == 0) {
        g_pf_rec = nullptr;  // read by warp 0 after the tile's wait (its barrier publishes this)
        for (int32_t j = k + 1; plan_local && j < tend; ++j) {
          if (op_is_matvec(op_k(j))) {
            g_pf_rec = recs + (j - tbeg) * kPlanRecWords;
            break;
          }
        }
      }
      const int32_t ti = __ldg(wtiles + k);  // for error reports only (off the critical path)
      if (tid < 32 && !use_ring && !(use_stream && op_is_matvec(t.op))) {
        // Before the tile waits: its own weights (unless the previous tile already asked for them) and, with
        // prefetch_next, the next tile's.
        if (k > tbeg && !p.prefetch_next) prefetch_tile(p, t, sc.pos);
        if (p.prefetch_next && k + 1 < tend) {
          const int32_t* rn;
          prefetch_tile(p, tile_k(k + 1, &rn), sc.pos);
        }
      }
      unsigned long long* times = nullptr;
#if TILES_TILE_TIMING
      if (p.tile_times != nullptr && k - tbeg < p.tile_times_stride)
        times = p.tile_times +
                ((int64_t(s) * p.h.num_workers + worker) * p.tile_times_stride + (k - tbeg)) * kTileTimes;
#endif
      if (bulk) {
        bc.k = k;
        bc.k2 = -1;
        bc.rec2 = nullptr;
        bc.tile2 = -1;
        if (op_is_matvec(t.op) && !(OPT(p) & kOptBulkNoAhead)) {
          for (int32_t j = k + 1; j < tend; ++j) {
            if (op_is_matvec(op_k(j))) {
              bc.k2 = j;
              bc.rec2 = plan_local ? recs + (j - tbeg) * kPlanRecWords : nullptr;
              bc.tile2 = __ldg(wtiles + j);
              break;
            }
          }
        }
      }
      uint8_t* ahead = nullptr;
      bool ahead_pending = false;
      if (kAhead && op_is_matvec(t.op)) {
        // This tile's batch (staged by the previous matvec tile, else now), then the next matvec tile's batch into
        // the other slot. Not across steps: the next step may not run.
        uint8_t* slot0 = smem + L.stage;
        const int32_t slot_bytes = kWarps * kStageBytesPerWarp;
        ahead = slot0 + ahead_slot * slot_bytes;
        if (ahead_k != k) stage_first_batch(p, t, ahead);
        ahead_slot ^= 1;
        ahead_k = -1;
        for (int32_t j = k + 1; j < tend; ++j) {
          if (op_is_matvec(op_k(j))) {
            const int32_t* rj;
            stage_first_batch(p, tile_k(j, &rj), slot0 + ahead_slot * slot_bytes);
            ahead_k = j;
            ahead_pending = true;
            break;
          }
        }
      }
      PollCursor* pc = nullptr;
      if (kPoll && (OPT(p) & kOptPollPrefetch) && (t.op == kOpAttn || t.op == kOpMerge || t.op == kOpResid)) {
        // The latency-bound stages before this layer's GATEUP (a RESID tile followed by QKV is a DOWN tile: no
        // GATEUP of its layer follows, so nothing is prefetched then).
        if (pcur.k <= k) {
          pcur.k = -1;
          for (int32_t j = k + 1; j < tend; ++j) {
            const int32_t op = op_k(j);
            if (op == kOpGateup) {
              const int32_t* rj;
              const Tile g = tile_k(j, &rj);
              if (g.layer == t.layer) {
                const int64_t cols = weight_cols(p, g.weight);
                const int64_t bytes = int64_t(g.row_end - g.row_begin) * cols * 2;
                pcur.a = reinterpret_cast<const uint8_t*>(p.weights[g.weight] + int64_t(g.row_begin) * cols);
                pcur.b = reinterpret_cast<const uint8_t*>(p.weights[g.weight2] + int64_t(g.row_begin) * cols);
                pcur.off = 0;
                pcur.len = bytes < p.poll_cap ? bytes : p.poll_cap;
                pcur.k = j;
              }
              break;
            }
            if (op == kOpQkv) break;  // the next layer
          }
        }
        if (pcur.k > k) pc = &pcur;
      }
      if (!run_tile<kPoll, kStream>(p, ti, t, rec, sc, worker, smem, L, &s_flag, &s_tok, times,
                                    bulk ? &bc : nullptr, ring, ahead, ahead_pending, pc, local_merge, stream,
                                    stream_n, after_attn)) {
        if (kAhead) cp_async_wait_all();  // the next tile's batch may be in flight
        bulk_consume(p, bc);  // no copy may land in a block that has exited
        if (use_ring) ring_drain(p, rg);
        if (use_stream) stream_drain(p, stc);
        return;
      }
      after_attn = t.op == kOpAttn;
    }
  }

  // An early end (EOS) leaves the next step's first batches in flight.
  if (use_ring) ring_drain(p, rg);
  if (use_stream) stream_drain(p, stc);
  // Steps not executed: logits rows NaN, spread over the workers that have tiles (rank among them), tokens -1.
  if (steps_done < p.num_steps) {
    const int32_t W = p.h.num_workers;
    int nonempty = 0, rank = 0;
    for (int32_t base = 0; base < W; base += kThreads) {
      const int32_t w = base + tid;
      const bool has = w < W && __ldg(p.plan + p.h.worker_offsets_offset + w + 1) >
                                    __ldg(p.plan + p.h.worker_offsets_offset + w);
      nonempty += __syncthreads_count(has);
      rank += __syncthreads_count(has && w < worker);
    }
    const int64_t V = p.h.vocab;
    const int64_t lo = V * rank / nonempty, hi = V * (rank + 1) / nonempty;
    for (int32_t s = steps_done; s < p.num_steps; ++s)
      for (int64_t i = lo + tid; i < hi; i += kThreads) p.logits[int64_t(s) * V + i] = NAN;
    if (rank == 0)
      for (int32_t s = steps_done + tid; s < p.num_steps; s += kThreads) p.tokens[s] = -1;
  }
}

namespace {
// A cooperative launch of one instantiation: num_workers blocks, all co-resident, the layout's shared memory.
// The kernel's layout goes in its parameters: the stream's instantiation with every option bit, the others without
// kOptStream's (which they never run with: their layout code for it was dead).
template <typename Kernel>
cudaError_t launch_cooperative(const KernelParams& p0, Kernel kernel, cudaStream_t stream, bool stream_inst = false) {
  KernelParams p = p0;
  p.layout = smem_layout(p.h, stream_inst ? p.opt : (p.opt & ~kOptStream), p.stream_stages, p.stream_stage_bytes);
  const SmemLayout L = smem_layout(p.h, p.opt, p.stream_stages, p.stream_stage_bytes);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.h.num_workers);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = L.total;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}
}  // namespace

#ifdef TILES_DEFAULT_VARIANT
// decode_kernel_default.cu: the default option set as compile-time constants (TILES_LEAN_OPT = kOptDefault, or
// TILES_DEFAULT_OPT), one instantiation: the poll instantiation's when the set has one of its options. The host
// launches it whenever TILES_KERNEL_OPT is that set (launch_decode). decode_kernel_flags.cu compiles it again with
// flag-in-data hand-offs (TILES_FLAGS), exporting decode_flags_* instead of decode_default_*.
#ifdef TILES_FLAGS
#define TILES_VARIANT(name) decode_flags_##name
#else
#define TILES_VARIANT(name) decode_default_##name
#endif
namespace {
constexpr int32_t kVariantOpt = static_cast<int32_t>(TILES_LEAN_OPT);
static_assert((kVariantOpt & (kOptWeightRing | kOptStream)) == 0 && !stage_ahead(kVariantOpt),
              "the default variant compiles the plain or the poll instantiation only");
constexpr bool kVariantPoll = (kVariantOpt & (kOptPollPrefetch | kOptPrefetchAfterAttn | kOptPollAhead)) != 0;
}  // namespace

int32_t TILES_VARIANT(opt)() { return kVariantOpt; }

cudaError_t TILES_VARIANT(set_smem_limit)(int32_t bytes) {
  return cudaFuncSetAttribute(decode_kernel<false, false, kVariantPoll, false>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

cudaError_t TILES_VARIANT(blocks_per_sm)(int32_t smem_bytes, int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, decode_kernel<false, false, kVariantPoll, false>,
                                                       kThreads, smem_bytes);
}

cudaError_t TILES_VARIANT(launch)(const KernelParams& p, cudaStream_t stream) {
  return launch_cooperative(p, decode_kernel<false, false, kVariantPoll, false>, stream);
}
#undef TILES_VARIANT
#else
cudaError_t decode_set_smem_limit(int32_t bytes) {
  cudaError_t e =
      cudaFuncSetAttribute(decode_kernel<false, false, false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(decode_kernel<false, true, false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(decode_kernel<false, false, true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(decode_kernel<false, false, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(decode_kernel<true, false, false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) e = decode_default_set_smem_limit(bytes);
  if (e != cudaSuccess) return e;
  return decode_flags_set_smem_limit(bytes);
}

cudaError_t decode_blocks_per_sm(int32_t smem_bytes, int* blocks) {
  int n[7] = {0, 0, 0, 0, 0, 0, 0};
  cudaError_t e =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n[0], decode_kernel<false, false, false, false>, kThreads, smem_bytes);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n[1], decode_kernel<true, false, false, false>, kThreads, smem_bytes);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n[2], decode_kernel<false, true, false, false>, kThreads, smem_bytes);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n[3], decode_kernel<false, false, true, false>, kThreads, smem_bytes);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n[4], decode_kernel<false, false, false, true>, kThreads,
                                                      smem_bytes);
  if (e == cudaSuccess) e = decode_default_blocks_per_sm(smem_bytes, &n[5]);
  if (e == cudaSuccess) e = decode_flags_blocks_per_sm(smem_bytes, &n[6]);
  *blocks = n[0];
  for (int i = 1; i < 7; ++i)
    if (n[i] < *blocks) *blocks = n[i];
  return e;
}

cudaError_t launch_decode(const KernelParams& p, cudaStream_t stream, bool generic, bool flagged) {
  // Flag hand-offs exist in the default variant only (decode_kernel_flags.cu); the op refuses any other request
  // with a message before it gets here.
  if (flagged)
    return p.opt == decode_flags_opt() && !generic && p.prefetch_bytes <= 0 && default_variant_fits(p.h)
               ? decode_flags_launch(p, stream)
               : cudaErrorInvalidValue;
  // The default variant has no L2-prefetch code (prefetch_tile): a prefetch asked for by TILES_PREFETCH_BYTES runs
  // on the runtime-options kernel.
  if (p.opt == decode_default_opt() && !generic && p.prefetch_bytes <= 0 && default_variant_fits(p.h))
    return decode_default_launch(p, stream);
  if (p.opt & kOptWeightRing) return launch_cooperative(p, decode_kernel<true, false, false, false>, stream);
  if (p.opt & kOptStream) return launch_cooperative(p, decode_kernel<false, false, false, true>, stream, true);
  if (stage_ahead(p.opt)) return launch_cooperative(p, decode_kernel<false, true, false, false>, stream);
  if (p.opt & (kOptPollPrefetch | kOptPrefetchAfterAttn | kOptPollAhead))
    return launch_cooperative(p, decode_kernel<false, false, true, false>, stream);
  return launch_cooperative(p, decode_kernel<false, false, false, false>, stream);
}

#endif  // TILES_DEFAULT_VARIANT

}  // namespace cuda
}  // namespace tiles
