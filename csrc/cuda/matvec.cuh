// Matvec tiles (QKV, RESID, GATEUP, LMHEAD): the input vector into shared memory, the staged first batch, the weight
// loop and its epilogue. Part of the decode kernel: decode_kernel.cu includes it inside its anonymous namespace
// (tiles::cuda), after prefetch.cuh.
#pragma once

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

