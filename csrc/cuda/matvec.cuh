// Matvec tiles (QKV, RESID, GATEUP, LMHEAD): the input vector into shared memory, the staged first batch, the weight
// loop and its epilogue. Part of the decode kernel: decode_kernel.cuh includes it inside its anonymous namespace
// (tiles::cuda), after waits.cuh.
#pragma once

// ---------------------------------------------------------------------------------------------------------------
// Input vectors of matvec tiles (into shared memory, bf16)
// ---------------------------------------------------------------------------------------------------------------
// h = bf16(bf16(x * rsqrt(mean(x^2) + eps)) * w): HF's RMSNorm order, fp32 residual in, bf16 out.
// `epoch`: the step's (flag builds poll x's words until they carry it).
// RMSNorm for vectors longer than kThreads * kNormRegs: two reads of x. Out of line: no served model takes it, and
// inlined it sat between the hot blocks of the tile loop.
__device__ __noinline__ void rmsnorm_general(const KernelParams& p, const float* x, const uint16_t* w, int n,
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
  if (n <= kThreads * kNormRegs) {
    // One read of x (and w) into registers: one L2 round trip instead of two. Same order of operations.
    float xv[kNormRegs], wv[kNormRegs];
#ifdef TILE_FLAG_HANDOFF
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
#ifdef TILE_FLAG_HANDOFF
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
  float* out_f32;       // RESID; LMHEAD: the tile's rows [row - row_begin] in shared memory too, or null
  const float* resid;   // RESID in2
  const float* resid_smem;  // RESID residual rows [row - row_begin] in shared memory, or null
  // QKV with a bias (weight2 >= 0): the 4-byte words of its bf16 bias holding rows [row_begin & ~1, ...) in shared
  // memory (stage_first_batch), or null
  const uint16_t* bias;
  float* logits;        // LMHEAD row of this step
  uint32_t epoch;       // the step's (flagged stores and reads of flag builds)
#ifdef TILE_FLAG_HANDOFF
  const KernelParams* params;  // for the polls of RESID's residual rows read from the scratch
#endif
};

__device__ __forceinline__ void emit(const MatvecOut& o, int32_t unit, float a0, float a1) {
  switch (o.op) {
    case kOpQkv: {
      const int32_t r = o.row_begin + 2 * unit;
      if (o.bias != nullptr) {  // bf16(dot + bias[r]): the fp32 add before the one rounding; none without a bias
        const uint16_t* b = o.bias + (r - (o.row_begin & ~1));
        a0 += bf2f(b[0]);
        if (r + 1 < o.row_end) a1 += bf2f(b[1]);
      }
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
#ifdef TILE_FLAG_HANDOFF
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
// the ~20-instruction dependent sequence of a 32-bit integer division by a runtime value (two of them per matvec item
// on the critical path). (a + 0.5) / b lies at least 0.5 / b from an integer, and rcp.approx errs by
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

// `nchunks`: 16-byte chunks per row (cols / 8 for BF16 rows, cols / 16 for E4M3 rows).
__device__ __forceinline__ MatvecShape matvec_shape(int op, int32_t nrows, int32_t nchunks) {
  MatvecShape m;
  m.pair = (op == kOpGateup);
  m.nunits = m.pair ? nrows : (nrows + 1) / 2;
  m.nchunks = nchunks;
  m.ksplit = 1;
  if (m.nunits < kWarps) {
    m.ksplit = div_small(kWarps, m.nunits);  // nunits < kWarps
    const int32_t maxk = (m.nchunks + kSplitMinChunks - 1) / kSplitMinChunks;
    if (m.ksplit > maxk) m.ksplit = maxk;
    if (m.ksplit < 1) m.ksplit = 1;
  }
  m.slice = div_small(m.nchunks + m.ksplit - 1, m.ksplit);  // nchunks <= cols / 8 < 2^16, ksplit <= kWarps
  m.items = m.nunits * m.ksplit;
  return m;
}

struct MatvecItem {
  const uint16_t* A;
  const uint16_t* B;
  bool bvalid;
  int32_t unit, c0, c1;
};

// `stride`: the row stride in 16-bit units (cols for BF16 rows, cols / 2 for E4M3 rows).
__device__ __forceinline__ MatvecItem matvec_item(const MatvecShape& m, const uint16_t* W, const uint16_t* W2,
                                                  int32_t row_begin, int32_t row_end, int32_t stride, int32_t item) {
  MatvecItem it;
  it.unit = div_small(item, m.ksplit);  // item < nunits * ksplit < 2^16
  const int32_t ks = item - it.unit * m.ksplit;
  it.c0 = ks * m.slice;
  it.c1 = it.c0 + m.slice < m.nchunks ? it.c0 + m.slice : m.nchunks;
  if (m.pair) {
    const int64_t r = row_begin + it.unit;
    it.A = W + r * stride;
    it.B = W2 + r * stride;
    it.bvalid = true;
  } else {
    const int64_t r = row_begin + 2 * it.unit;
    it.A = W + r * stride;
    it.bvalid = r + 1 < row_end;
    it.B = it.bvalid ? it.A + stride : it.A;
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

// Before the tile waits, each warp copies the first batch of its first item into its stage
// (cp.async, asynchronous): weights never depend on activations, so they stream while the inputs are produced.
// Each lane later reads back exactly the 16-byte chunks it copied itself (no cross-lane hand-off).
// `bias`: a QKV tile's bias destination (weight2 >= 0) or null: the 4-byte words of the bias vector that hold rows
// [row_begin, row_end) go there in the same commit group (4-byte copies: a tile's rows need not start at a 16-byte
// boundary; the vector, q, k or v rows, has an even length); matvec publishes them with a barrier before its first
// emit.
// How a matvec tile's rows are stored: E4M3 (16 columns per 16-byte chunk) for the layer matrices of an FP8 plan,
// BF16 (8 per chunk) for everything else, the LM head included.
__device__ __forceinline__ bool tile_is_e4m3(const Tile& t) {
  return kFp8 && t.op != kOpLmhead;
}
__device__ __forceinline__ int32_t row_chunks(bool e4m3, int32_t cols) {
  return e4m3 ? cols / 16 : cols / 8;
}
__device__ __forceinline__ int32_t row_stride16(bool e4m3, int32_t cols) {
  return e4m3 ? cols / 2 : cols;
}

// E4m3: the tile's rows are E4M3 (tile_is_e4m3), a template argument so that the BF16 kernels' code is not touched
// by the choice (a run-time false there still changed their code generation).
template <bool E4m3>
__device__ void stage_first_batch(const KernelParams& p, const Tile& t, uint8_t* stage, uint16_t* bias) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (bias != nullptr) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(p.weights[t.weight2]) + (t.row_begin >> 1);
    const int32_t words = ((t.row_end + 1) >> 1) - (t.row_begin >> 1);
#pragma unroll 1
    for (int32_t i = threadIdx.x; i < words; i += kThreads) cp_async4(bias + 2 * i, src + i);
  }
  const int32_t cols = weight_cols(p, t.weight);
  const MatvecShape m = matvec_shape(t.op, t.row_end - t.row_begin, row_chunks(E4m3, cols));
  if (warp < m.items) {
    const MatvecItem it = matvec_item(m, p.weights[t.weight], t.weight2 >= 0 ? p.weights[t.weight2] : nullptr,
                                      t.row_begin, t.row_end, row_stride16(E4m3, cols), warp);
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
  // Every thread commits one group per staged tile, possibly empty.
  cp_async_commit();
}

__device__ __forceinline__ bool op_is_matvec(int32_t op) {
  return op == kOpQkv || op == kOpResid || op == kOpGateup || op == kOpLmhead;
}


// The weight formats of a matvec's rows (docs/numerics.md "FP8 weights"): BF16; E4M3 with one fp32 scale per row
// (applied to the row's sum, or to each k-split slice of it); E4M3 with one per 128 x 128 block (applied to each
// chunk's 16-column partial sum: a chunk lies in one block). Both E4M3 ways factor the scale out of sums of exact
// products: for the power-of-two scales of patch(weights="fp8") that equals the CPU executor's dequantize-then-add
// up to the summation order, for a checkpoint's scales it adds one rounding per chunk or row.
enum WeightFormat : int { kWBf16 = 0, kWE4m3Row = 1, kWE4m3Block = 2 };

// The scales of a matvec's E4M3 matrices (null for BF16): A's (the tile's weight) and B's (GATEUP's up weight).
struct MatvecScales {
  const float* a;
  const float* b;
  int32_t blocks;  // kWE4m3Block: scale columns per block row, ceil(cols / 128)
};

// One item's scales: per row, its rows' (the unit's second row B, the pair's up row); per block, its rows' block
// rows (two rows of one unit share a block row: units start at even rows).
struct ItemScales {
  const float* a;
  const float* b;
};

template <int F>
__device__ __forceinline__ ItemScales item_scales(const MatvecScales& s, const MatvecShape& m, int32_t row_begin,
                                                  int32_t unit) {
  ItemScales r{nullptr, nullptr};
  if constexpr (F != kWBf16) {
    const int32_t row = m.pair ? row_begin + unit : row_begin + 2 * unit;
    const int64_t at = F == kWE4m3Row ? row : int64_t(row / kScaleBlockSize) * s.blocks;
    r.a = s.a + at;
    r.b = m.pair ? s.b + at : (F == kWE4m3Row ? r.a + 1 : r.a);
  }
  return r;
}

// Chunk c of both rows of an item (wa, wb) times the input vector, into a0 / a1.
template <int F>
__device__ __forceinline__ void chunk_dot(const uint4* hv, int32_t c, uint4 wa, uint4 wb, const ItemScales& sc,
                                          float& a0, float& a1) {
  if constexpr (F == kWBf16) {
    const uint4 x = hv[c];
    a0 = dot8(wa, x, a0);
    a1 = dot8(wb, x, a1);
  } else {
    const uint4 x0 = hv[2 * c], x1 = hv[2 * c + 1];
    if constexpr (F == kWE4m3Row) {
      a0 = dot16_e4m3(wa, x0, x1, a0);
      a1 = dot16_e4m3(wb, x0, x1, a1);
    } else {
      const int32_t blk = c >> 3;  // 8 chunks of 16 columns per 128-column block
      a0 = fmaf(dot16_e4m3(wa, x0, x1, 0.f), __ldg(sc.a + blk), a0);
      a1 = fmaf(dot16_e4m3(wb, x0, x1, 0.f), __ldg(sc.b + blk), a1);
    }
  }
}

// The tile's rows times the input vector h (shared memory), emitted through `o`. `stage`: this block's first weight
// batches, copied before the wait (stage_first_batch), or null. F: the rows' WeightFormat, `scales` its scales.
template <int F = kWBf16>
__device__ void matvec(const KernelParams& p, const uint16_t* W, const uint16_t* W2, int32_t cols, const uint16_t* h,
                       const MatvecOut& o, float* red, const uint8_t* stage, const MatvecScales scales = {}) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr bool e4m3 = F != kWBf16;
  const MatvecShape m = matvec_shape(o.op, o.row_end - o.row_begin, row_chunks(e4m3, cols));
  const uint4* hv = reinterpret_cast<const uint4*>(h);
  if (stage != nullptr) cp_async_wait_all();
  if (o.bias != nullptr) __syncthreads();  // every thread's bias words (stage_first_batch) landed
  for (int32_t item = warp; item < m.items; item += kWarps) {
    const MatvecItem it = matvec_item(m, W, W2, o.row_begin, o.row_end, row_stride16(e4m3, cols), item);
    const ItemScales isc = item_scales<F>(scales, m, o.row_begin, it.unit);
    float a0 = 0.f, a1 = 0.f;
    // With a cp.async-staged first batch the weight registers take the item's NEXT batch while the staged one is
    // computed straight from shared memory.
    uint4 wa[kUnroll], wb[kUnroll];
    bool preloaded = false;
    for (int32_t base = it.c0; base < it.c1; base += 32 * kUnroll) {
      const bool staged = stage != nullptr && item == warp && base == it.c0;
      if (kPreloadNext && staged) {
        // The item's next batch is issued before the staged batch's arithmetic. That arithmetic takes 16 warps
        // ~0.5 us of issue, and the SM's weight stream used to start only after it. Within the item only: a preload
        // across items keeps the registers live through the warp sums and stores, and the kernel spills. Same
        // chunks, same fmaf order: bit-identical.
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
            const uint4 sa = *reinterpret_cast<const uint4*>(sw + (u * 32 + lane) * 16);
            if constexpr (F == kWBf16) {  // the input chunk read first: the BF16 kernels' code as it was measured
              const uint4 x = hv[c];
              a0 = dot8(sa, x, a0);
              a1 = dot8(it.bvalid ? *reinterpret_cast<const uint4*>(sw + ((kUnroll + u) * 32 + lane) * 16)
                                  : make_uint4(0, 0, 0, 0), x, a1);
            } else {
              chunk_dot<F>(hv, c, sa,
                           it.bvalid ? *reinterpret_cast<const uint4*>(sw + ((kUnroll + u) * 32 + lane) * 16)
                                     : make_uint4(0, 0, 0, 0),
                           isc, a0, a1);
            }
          }
        }
      } else {
        if (staged) {
          const uint8_t* sw = stage + warp * kStageBytesPerWarp;
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
          if (c < it.c1) chunk_dot<F>(hv, c, wa[u], wb[u], isc, a0, a1);
        }
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      if constexpr (F == kWE4m3Row) {
        a0 *= __ldg(isc.a);
        a1 = it.bvalid ? a1 * __ldg(isc.b) : a1;
      }
      if (m.ksplit == 1) {
        emit(o, it.unit, a0, a1);
      } else {
        red[2 * item] = a0;
        red[2 * item + 1] = a1;
      }
    }
  }
  ksplit_sum(m, red, o);
}
