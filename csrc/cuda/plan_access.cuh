// Plan access: tile and wait records, buffer and counter pointers, the KernelParams views the tiles use. Part of the
// decode kernel: decode_kernel.cuh includes it inside its anonymous namespace (tiles::cuda), after device_helpers.cuh.
#pragma once

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

// These read the tables copied to shared memory at kernel start (load_plan_smem). Why: every ld.acquire of a wait
// invalidates L1, so each plan word read after a wait is an L2 round trip on the stage's critical path.
// Flag builds: every offset doubled (each element carries its epoch; flag_data.cuh).
__device__ __forceinline__ uint8_t* buffer_ptr(const KernelParams& p, int32_t b) {
  const int64_t off = reinterpret_cast<const int32_t*>(g_smem)[b];
#if defined(TILE_ROWS) && TILE_ROWS
  return p.scratch + off + g_row_off;  // the rows kernels: the row rows_view chose (kernel_config.cuh)
#else
  return p.scratch + (kFlags ? 2 * off : off);
#endif
}

__device__ __forceinline__ int32_t weight_cols(const KernelParams& p, int32_t w) {
  return reinterpret_cast<const int32_t*>(g_smem)[p.h.num_buffers + w];
}

// Tile from a local record (load_plan_smem): 16-byte shared-memory reads.
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
  for (int i = threadIdx.x; i < nw; i += kThreads)
    tab[nb + i] = __ldg(p.plan + p.h.weights_offset + i * kWeightWords + offsetof(Weight, cols) / 4);
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

