// Errors and waits: the error words, bounded counter waits, the tile's release, scratch-element access (plain or
// flagged). Part of the decode kernel: decode_kernel.cuh includes it inside its anonymous namespace (tiles::cuda),
// after plan_access.cuh.
#pragma once

// ---------------------------------------------------------------------------------------------------------------
// Errors and waits
// ---------------------------------------------------------------------------------------------------------------
// First error wins (atomicCAS on ERROR); the winner fills in the details. Inlined: out of line (with lmhead_partial
// and merge_tile) it made the counter kernel spill 52 bytes.
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

#ifdef TILE_FLAG_HANDOFF
#include "cuda/flag_data.cuh"
#endif

// Scratch-buffer element access: flagged words in flag builds (flag_data.cuh), plain otherwise.
// get_f32 reads an element produced in this launch (ld.cg: L2, never a stale L1 line; flagged: polled
// until it carries `epoch`).
__device__ __forceinline__ void put_f32(float* b, int64_t i, float v, uint32_t epoch) {
#ifdef TILE_FLAG_HANDOFF
  st_flag_f32(b, i, v, epoch);
#else
  b[i] = v;
#endif
}

__device__ __forceinline__ void put_bf16(uint16_t* b, int64_t i, uint16_t v, uint32_t epoch) {
#ifdef TILE_FLAG_HANDOFF
  st_flag_bf16(b, i, v, epoch);
#else
  b[i] = v;
#endif
}

__device__ __forceinline__ float get_f32(const KernelParams& p, const float* b, int64_t i, uint32_t epoch) {
#ifdef TILE_FLAG_HANDOFF
  return fl_get_f32(p, b, i, epoch);
#else
  return __ldcg(b + i);
#endif
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
// another worker has raised an error (this worker must then exit).
__device__ bool wait_counter(const KernelParams& p, int32_t c, uint32_t target, int32_t worker, int32_t tile,
                             int32_t step) {
  const uint32_t* ctr = counter_ptr(p, c);
  uint32_t v = ld_acquire(ctr);
  if (static_cast<int32_t>(v - target) >= 0) return true;
  const uint64_t t0 = global_ns();
  for (uint32_t iter = 1;; ++iter) {
    v = ld_acquire(ctr);
    if (static_cast<int32_t>(v - target) >= 0) return true;
    if ((iter & 15u) == 0u) {
      if (wait_gives_up(p, t0, c, v, target, worker, tile, step)) return false;
      if (iter > 2048u) __nanosleep(128);
    }
  }
}

// Block-level: thread 0 waits for every Wait record of the tile, then the block proceeds (or all exit).
// `rec`: the tile's local record (load_plan_smem) or null. One barrier (__syncthreads_and) publishes the outcome.
__device__ bool wait_tile(const KernelParams& p, const Tile& t, uint32_t epoch, int32_t worker, int32_t tile,
                          int32_t step, const int32_t* rec) {
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
      ok = wait_counter(p, c, target, worker, tile, step) ? 1 : 0;
    }
  }
  return __syncthreads_and(ok) != 0;
}

// All writes of the tile by all threads happen before the release increment: the barrier orders them before thread
// 0's release, which needs no fence of its own. `also` >= 0: a second counter that only advances (the increment of
// the marked ATTN tile before a local MERGE, which published nothing that the counter's waiters read), added after
// the release so that the release does not wait for it.
__device__ __forceinline__ void signal_tile(const KernelParams& p, const Tile& t, int32_t also = -1) {
  __syncthreads();
  if (threadIdx.x == 0) {
    red_release_add(counter_ptr(p, t.signal), 1u);
    if (also >= 0) red_relaxed_add(counter_ptr(p, also), 1u);
  }
}

