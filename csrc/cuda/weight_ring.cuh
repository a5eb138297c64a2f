// kOptWeightRing: per-warp rings of weight batches by bulk copies across tiles, stages and steps (runtime-options
// kernel). Part of the decode kernel: decode_kernel.cu includes it inside its anonymous namespace (tiles::cuda), after
// matvec.cuh.
#pragma once

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

