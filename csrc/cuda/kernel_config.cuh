// The decode kernel's build configuration: the shared-memory base, the per-tile timing marks, the hand-off switch.
// Part of the decode kernel: decode_kernel.cuh includes it first, inside namespace tiles::cuda.
#pragma once

// The block's dynamic shared memory (layout: smem_layout). At namespace scope so that the plan-table helpers can
// read the tables at offset 0 without being handed the layout.
extern __shared__ __align__(16) uint8_t g_smem[];

// TILE_TIMING builds: the current tile's timestamps (thread 0 writes the pointer and the marks), so that the phase
// marks inside attn_tile / merge_tile need no parameter. The product build compiles the marks to nothing.
#if TILE_TIMING
namespace {
__shared__ unsigned long long* g_tile_times;
}
#define TILE_MARK(i)                                                                           \
  do {                                                                                         \
    if (threadIdx.x == 0 && g_tile_times != nullptr) g_tile_times[(i)] = global_ns();         \
  } while (0)
#else
#define TILE_MARK(i) \
  do {               \
  } while (0)
#endif

// TILE_FLAG_HANDOFF (defined by decode_kernel_flags*.cu): hand-offs by flag-in-data words instead of counters
// (flag_data.cuh).
#ifdef TILE_FLAG_HANDOFF
constexpr bool kFlags = true;
#else
constexpr bool kFlags = false;
#endif

// TILE_FP8 (defined 1 by decode_kernel_counters_hd<head_dim>_fp8[_sampler].cu): the kernels of FP8 plans, whose
// layer matrices are E4M3 with fp32 scales (docs/numerics.md "FP8 weights"; the LM head, norms and biases stay
// BF16). Kernels of their own, so that the BF16 kernels keep their code exactly; counter hand-offs only (FP8 halves
// the bytes of a layer, so no served model is small enough for the flag hand-off to pay: runtime.choose_handoff).
#if defined(TILE_FP8) && TILE_FP8
constexpr bool kFp8 = true;
#ifdef TILE_FLAG_HANDOFF
#error "the FP8 kernels hand off by counters (kernel_config.cuh)"
#endif
#else
constexpr bool kFp8 = false;
#endif

// With a cp.async-staged first batch, the item's next batch is loaded before the staged batch's arithmetic (matvec).
// Not in the flag kernels: their polls hold more registers, and there it made the tile loop spill.
constexpr bool kPreloadNext = !kFlags;

// TILE_SAMPLER (defined 1 by decode_kernel_*_sampler.cu): the kernels that take the op's sampler tensor (sampler.cuh;
// KernelParams::sampler is never null there). A kernel of their own, so that the kernels without a sampler keep their
// code and registers exactly.
#if defined(TILE_SAMPLER) && TILE_SAMPLER
constexpr bool kSampler = true;
#else
constexpr bool kSampler = false;
#endif

// TILE_ROWS (defined 1 by decode_kernel_rows_hd<head_dim>.cu): the rows kernels, a pass of several rows
// (decode_rows.cuh): counter hand-offs, BF16 plans, no sampler. Kernels of their own, so that the one-row kernels keep
// their code exactly. g_row_off: the byte offset of the row that buffer_ptr addresses (rows_view), 0 outside the
// attention and MERGE tiles, which run their rows one after another through the one-row code.
#if defined(TILE_ROWS) && TILE_ROWS
#if defined(TILE_FLAG_HANDOFF) || (defined(TILE_FP8) && TILE_FP8) || (defined(TILE_SAMPLER) && TILE_SAMPLER)
#error "the rows kernels hand off by counters, read BF16 weights and take no sampler (kernel_config.cuh)"
#endif
namespace {
__shared__ int64_t g_row_off;
}
#endif
