// The decode kernel's build configuration: the shared-memory base, the timing and profile marks, the option bits as the
// device sees them, the variant switches. Part of the decode kernel: decode_kernel.cu includes it first, inside
// namespace tiles::cuda.
#pragma once

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

