// The rows kernel: one launch decodes R consecutive positions of one sequence (a verify pass, planner/format.py
// "Rows"; 2 <= R <= the plan's max_rows), every tile once for all R rows, each row computed exactly as a one-row pass
// at its position computes it (docs/numerics.md "Rows on CUDA"), and its weights read once for all rows.
// docs/design/rows-per-pass-cuda.md gives the design and what it leaves out.
//
// - Matvec tiles (rows_matvec): the one-row kernels' work items (matvec_shape, the same k-split) and, per lane, the
//   same chunks in the same order; each 16-byte weight chunk, loaded once into registers, is dotted with the input
//   chunk of every row (dot8, fp32 FMAs on the CUDA cores), one accumulator pair per row. The inputs of all rows sit
//   in shared memory as column blocks (kRowsVecBytes / (2 R) columns each: all of them where they fit).
// - ATTN tiles (rows_attn): the new K/V rows of every row (k-norm, RoPE at the row's position, bf16), once per tile
//   into shared memory; then row by row the one-row warp path over the row's own partition, cached positions below
//   the pass's first position from the cache and the pass's own positions from the new rows, so that cache rows at or
//   beyond it (a rejected draft's) are never read. The tile that owns a row's position stores its K/V there.
// - MERGE, LMHEAD partials, ARGMAX: the one-row code row by row. The plan's local-merge marks are ignored (as by the
//   CPU executor): every ATTN tile writes its partials and signals.
// - No weight staging before the waits and no double-buffered K/V chunks: the one-row kernels' latency devices,
//   left out of this first version (the design note says why).
// - Prompt lookup (TILE_LOOKUP, decode_kernel_lookup_hd<head_dim>.cu; tiles::prompt_lookup): one launch runs pass
//   after pass. Every worker drafts the first round itself (the history is only read until the first ARGMAX); the
//   ARGMAX tile of each pass accepts (csrc/lookup_rule.h), appends to the history, drafts the next round and
//   publishes its rows in the state's LOOKUP_* words before its signal; every worker waits for that signal (ARGMAX's
//   counter at the pass's epoch) and reads them before its next pass's tiles. A kernel of its own, as the rows
//   kernel is: its loop changed the register allocation of the shared tiles (more spills in the matvec).
//   docs/design/prompt-lookup-in-kernel.md.
//
// Compiled by decode_kernel_rows_hd<head_dim>.cu with TILE_ROWS, TILE_HEAD_DIM and TILE_VARIANT defined.
#if !defined(TILE_HEAD_DIM) || !defined(TILE_VARIANT) || !defined(TILE_ROWS)
#error "decode_rows.cuh is compiled through decode_kernel_rows_hd<head_dim>.cu"
#endif
#ifndef TILE_LOOKUP
#define TILE_LOOKUP 0
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/decode_kernel.h"
#include "lookup_rule.h"

namespace tiles {
namespace cuda {

#include "cuda/kernel_config.cuh"

namespace {

#include "cuda/device_helpers.cuh"
#include "cuda/plan_access.cuh"
#include "cuda/waits.cuh"
#include "cuda/matvec.cuh"
#include "cuda/attention.cuh"
#include "cuda/merge.cuh"

#if TILE_LOOKUP
// A worker's view of its launch's rounds of prompt lookup (shared memory): the current pass's rows, and where the
// ARGMAX tile runs, the round's outcome so far.
struct LookupRound {
  int64_t ids[kMaxRows];    // the pass's input ids: the last accepted token, then the draft
  int64_t picks[kMaxRows];  // the pass's tokens, one per row (the ARGMAX tile's worker)
  int64_t pos;              // the pass's first position
  int32_t rows;
  int32_t n;                // history length (the ARGMAX tile's worker: after the pass's acceptance)
  int32_t accepted;         // tokens this launch accepted so far
  int32_t rounds;           // passes run so far
};

// The block's pass (its input ids: EMBED reads them) and prompt lookup's rounds. Beside RowsCtx, not in it: a larger
// RowsCtx made the matvec and attention tiles spill more.
__shared__ LookupRound g_round;
#endif

// What a pass's tiles need beside the plan and the parameters.
struct RowsCtx {
  uint32_t epoch;      // the pass's epoch (state[EPOCH] + 1): ARGMAX's counter
  uint32_t ctr_epoch;  // every other counter's: the epoch, or on a flagged arena state[ROWS_PASSES] + 1
  int64_t pos;         // row 0's position; row i is at pos + i
  int32_t rows;
};

// buffer_ptr addresses row `row` of every buffer from here on (all threads; barriers on both sides).
__device__ __forceinline__ void rows_view(const KernelParams& p, int32_t row) {
  __syncthreads();
  if (threadIdx.x == 0) g_row_off = int64_t(row) * p.h.row_bytes;
  __syncthreads();
}

// Row r of buffer b, whatever the view.
__device__ __forceinline__ uint8_t* row_ptr(const KernelParams& p, int32_t b, int32_t r) {
  return p.scratch + reinterpret_cast<const int32_t*>(g_smem)[b] + int64_t(r) * p.h.row_bytes;
}

// wait_tile with the counter's epoch: ARGMAX's counter runs on the epoch, every other on ctr_epoch.
__device__ bool rows_wait_tile(const KernelParams& p, const Tile& t, const RowsCtx& rc, int32_t worker, int32_t tile,
                               const int32_t* rec) {
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
      const uint32_t e = c == p.h.argmax_counter ? rc.epoch : rc.ctr_epoch;
      const uint32_t target = (e + static_cast<uint32_t>(off)) * static_cast<uint32_t>(count);
      ok = wait_counter(p, c, target, worker, tile, 0) ? 1 : 0;
    }
  }
  return __syncthreads_and(ok) != 0;
}

// EMBED: every row's embedding row as fp32 (the tokens were checked at the kernel's start), all rows' loads of an
// element in flight together.
__device__ __noinline__ void rows_embed(const KernelParams& p, const Tile& t, const RowsCtx& rc) {
  const uint16_t* emb = p.weights[t.weight];
  float* out = reinterpret_cast<float*>(row_ptr(p, t.out_buf, 0));
  const int64_t stride = p.h.row_bytes / 4;
  const uint16_t* row[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
#if TILE_LOOKUP
    row[r] = emb + (r < rc.rows ? g_round.ids[r] : 0) * p.h.hidden;  // the pass's ids, as its ARGMAX published them
#else
    row[r] = emb + (r < rc.rows ? __ldg(p.input_ids + r) : 0) * p.h.hidden;
#endif
  }
  for (int i = threadIdx.x; i < p.h.hidden; i += kThreads) {
    uint16_t v[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < rc.rows) v[r] = __ldg(row[r] + i);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < rc.rows) out[r * stride + i] = bf2f(v[r]);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Matvec tiles of R rows
// ---------------------------------------------------------------------------------------------------------------
// Staging reads a tile's inputs from L2 with kStageRegs 32-bit values per thread in flight at once, for the rows
// capacity RC (2, 4 or 8: the pass's rows rounded up; each staging function dispatches on it): an element loop that waits on each load before the next pays
// one L2 round trip (~0.5-1 us behind the weight stream) per kThreads elements, 16 of them for a 4096-wide RMSNorm
// and its fill, where these loops pay one or two.
constexpr int kStageRegs = 16;
__host__ __device__ constexpr int stage_batch(int n) { return n > 1 ? n : 1; }

// Every row's sum of squares of x (rows at `stride` floats) into ss: per thread x[tid + k kThreads] in k order, as
// the one-row RMSNorm adds them; kStageRegs / RC elements of each row loaded before any is added.
template <int RC>
__device__ __forceinline__ void rows_sum_squares(const float* x, int64_t stride, int32_t rows, int32_t n,
                                                 float (&ss)[kMaxRows]) {
  constexpr int U = stage_batch(kStageRegs / RC);
  for (int i0 = threadIdx.x; i0 < n; i0 += U * kThreads) {
    float v[U][RC];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RC; ++r) {
        const int i = i0 + u * kThreads;
        v[u][r] = r < rows && i < n ? __ldcg(x + r * stride + i) : 0.f;
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RC; ++r)
        if (r < rows && i0 + u * kThreads < n) ss[r] = fmaf(v[u][r], v[u][r], ss[r]);
  }
}

// Each row's RMSNorm scale r = 1 / sqrt(mean(x^2) + eps) into rs[row], with the one-row kernels' order for every
// row: per-thread fmaf over x[tid + k kThreads] in k order, then block_sum's (warp butterflies, the warps' sums added
// by one warp in warp order; here warp r adds row r's), and the same expression.
__device__ __noinline__ void rows_norm_scales(const KernelParams& p, const Tile& t, int32_t rows, int32_t n, float* red,
                                 float* rs) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* x = reinterpret_cast<const float*>(row_ptr(p, t.in_buf, 0));
  const int64_t stride = p.h.row_bytes / 4;
  float ss[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) ss[r] = 0.f;
  if (rows <= 2) rows_sum_squares<2>(x, stride, rows, n, ss);
  else if (rows <= 4) rows_sum_squares<4>(x, stride, rows, n, ss);
  else rows_sum_squares<kMaxRows>(x, stride, rows, n, ss);
  __syncthreads();  // red may still be read by a previous reduction
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    if (r < rows) {
      const float w = warp_sum(ss[r]);
      if (lane == 0) red[r * kWarps + warp] = w;
    }
  }
  __syncthreads();
  if (warp < rows) {
    float total = lane < kWarps ? red[warp * kWarps + lane] : 0.f;
    total = warp_sum(total);
    if (lane == 0) rs[warp] = 1.0f / sqrtf(total / static_cast<float>(n) + p.eps);
  }
  __syncthreads();
}

// RESID's bf16 input chunks [c0, c0 + cpk) of every row into vec as read ([rows][cpk] chunks), kStageRegs / (4 RC)
// chunks of each row loaded before any is stored.
template <int RC>
__device__ __forceinline__ void rows_copy_chunks(const uint4* src, int64_t stride, int32_t rows, int32_t cpk,
                                                 uint4* dst) {
  constexpr int U = stage_batch(kStageRegs / (4 * RC));
  for (int i0 = threadIdx.x; i0 < cpk; i0 += U * kThreads) {
    uint4 v[U][RC];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RC; ++r) {
        const int i = i0 + u * kThreads;
        if (r < rows && i < cpk) v[u][r] = __ldcg(src + r * stride + i);
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RC; ++r) {
        const int i = i0 + u * kThreads;
        if (r < rows && i < cpk) dst[r * cpk + i] = v[u][r];
      }
  }
}

// Columns [0, kn) of every row's normed input (x and w from the block's first column) into vec as [rows][kn] bf16:
// h = bf16(bf16(x r) w), the one-row RMSNorm's element expression; kStageRegs / (2 RC) columns of every row (and of w)
// loaded before any is stored.
template <int RC>
__device__ __forceinline__ void rows_fill_normed(const float* x, int64_t stride, const uint16_t* w, int32_t rows,
                                                 int32_t kn, uint16_t* vec, const float* rs) {
  constexpr int U = stage_batch(kStageRegs / (2 * RC));
  for (int i0 = threadIdx.x; i0 < kn; i0 += U * kThreads) {
    float v[U][RC], wv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kThreads;
      wv[u] = i < kn ? bf2f(__ldg(w + i)) : 0.f;
#pragma unroll
      for (int r = 0; r < RC; ++r) v[u][r] = r < rows && i < kn ? __ldcg(x + r * stride + i) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < RC; ++r)
        if (r < rows && i < kn) vec[r * kn + i] = f2bf(round_bf(v[u][r] * rs[r]) * wv[u]);
    }
  }
}

// Columns [k0, k0 + kn) of every row's input into vec as [rows][kn] bf16: RESID's bf16 input as read, else the
// RMSNorm's h.
__device__ __noinline__ void rows_fill_inputs(const KernelParams& p, const Tile& t, int32_t rows, int32_t k0, int32_t kn,
                                 uint16_t* vec, const float* rs) {
  if (t.op == kOpResid) {
    const uint4* src = reinterpret_cast<const uint4*>(row_ptr(p, t.in_buf, 0)) + k0 / 8;
    const int64_t stride = p.h.row_bytes / 16;
    uint4* dst = reinterpret_cast<uint4*>(vec);
    if (rows <= 2) rows_copy_chunks<2>(src, stride, rows, kn / 8, dst);
    else if (rows <= 4) rows_copy_chunks<4>(src, stride, rows, kn / 8, dst);
    else rows_copy_chunks<kMaxRows>(src, stride, rows, kn / 8, dst);
    return;
  }
  const uint16_t* w = p.weights[t.norm] + k0;
  const float* x = reinterpret_cast<const float*>(row_ptr(p, t.in_buf, 0)) + k0;
  const int64_t stride = p.h.row_bytes / 4;
  if (rows <= 2) rows_fill_normed<2>(x, stride, w, rows, kn, vec, rs);
  else if (rows <= 4) rows_fill_normed<4>(x, stride, w, rows, kn, vec, rs);
  else rows_fill_normed<kMaxRows>(x, stride, w, rows, kn, vec, rs);
}

// One item's chunks in column block [b0, b1) (16-byte chunks), for every row: the lane's chunks c0 + lane + 32 k of
// the item, in increasing order as the one-row matvec takes them, each weight chunk loaded once and dotted with every
// row's input chunk (vec: [rows][b1 - b0] chunks).
__device__ __forceinline__ void rows_item_block(const MatvecItem& it, int32_t b0, int32_t b1, int lane,
                                                const uint4* vec, int32_t rows, float (&a0)[kMaxRows],
                                                float (&a1)[kMaxRows]) {
  const int32_t lo = it.c0 > b0 ? it.c0 : b0, hi = it.c1 < b1 ? it.c1 : b1, bn = b1 - b0;
  int32_t c = it.c0 + lane;
  if (c < lo) c += (lo - c + 31) / 32 * 32;
  for (; c < hi; c += 32 * kUnroll) {
    uint4 wa[kUnroll], wb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t cc = c + 32 * u;
      wa[u] = cc < hi ? ld_weight(it.A + int64_t(cc) * 8) : make_uint4(0, 0, 0, 0);
      wb[u] = cc < hi && it.bvalid ? ld_weight(it.B + int64_t(cc) * 8) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t cc = c + 32 * u;
      if (cc < hi) {
#pragma unroll
        for (int r = 0; r < kMaxRows; ++r) {
          if (r < rows) {
            const uint4 x = vec[r * bn + (cc - b0)];
            a0[r] = dot8(wa[u], x, a0[r]);
            a1[r] = dot8(wb[u], x, a1[r]);
          }
        }
      }
    }
  }
}

// The emit target of row r (matvec.cuh emit): the row's buffers, QKV's bias from the weight itself (bias[row]),
// LMHEAD's logits row r.
__device__ __forceinline__ MatvecOut rows_out(const KernelParams& p, const Tile& t, int32_t r, uint32_t epoch) {
  MatvecOut o;
  o.op = t.op;
  o.row_begin = t.row_begin;
  o.row_end = t.row_end;
  o.out_offset = t.out_offset;
  o.out_bf16 = nullptr;
  o.out_f32 = nullptr;
  o.resid = nullptr;
  o.resid_smem = nullptr;
  o.bias = nullptr;
  o.logits = nullptr;
  o.epoch = epoch;
  if (t.op == kOpQkv || t.op == kOpGateup) o.out_bf16 = reinterpret_cast<uint16_t*>(row_ptr(p, t.out_buf, r));
  if (t.op == kOpQkv && t.weight2 >= 0) o.bias = p.weights[t.weight2] + (t.row_begin & ~1);
  if (t.op == kOpResid) {
    o.out_f32 = reinterpret_cast<float*>(row_ptr(p, t.out_buf, r));
    o.resid = reinterpret_cast<const float*>(row_ptr(p, t.in2_buf, r));
  }
  if (t.op == kOpLmhead) o.logits = p.logits + int64_t(r) * p.h.vocab;
  return o;
}

// A matvec tile (QKV, RESID, GATEUP, LMHEAD) for all rows. Work items in rounds of kWarps (round j: item warp +
// j kWarps); within a round the input column blocks in order (staged by the whole block; one block holds all columns
// where kRowsVecBytes allows, staged once for all rounds). Per row: the one-row warp sums, k-split order and emit.
__device__ __noinline__ void rows_matvec(const KernelParams& p, const Tile& t, const RowsCtx& rc, uint8_t* smem,
                            const SmemLayout& L) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t rows = rc.rows, cols = weight_cols(p, t.weight), nchunks = cols / 8;
  float* red = reinterpret_cast<float*>(smem + L.red);  // [row][2 kWarps] k-split partials, then rs
  float* rs = red + 2 * kWarps * kMaxRows;
  uint16_t* vec = reinterpret_cast<uint16_t*>(smem + L.vec);
  if (t.op != kOpResid) rows_norm_scales(p, t, rows, cols, red, rs);
  int32_t bch = (L.total - L.vec) / (16 * rows);  // chunks of a column block
  if (bch > nchunks) bch = nchunks;
  const int32_t nblocks = (nchunks + bch - 1) / bch;
  const uint16_t* W = p.weights[t.weight];
  const uint16_t* W2 = t.op == kOpGateup ? p.weights[t.weight2] : nullptr;
  const MatvecShape m = matvec_shape(t.op, t.row_end - t.row_begin, nchunks);
  const int32_t rounds = (m.items + kWarps - 1) / kWarps;
  for (int32_t round = 0; round < rounds; ++round) {
    const int32_t item = warp + round * kWarps;
    const bool valid = item < m.items;
    const MatvecItem it = matvec_item(m, W, W2, t.row_begin, t.row_end, cols, valid ? item : 0);
    float a0[kMaxRows], a1[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) a0[r] = a1[r] = 0.f;
    for (int32_t b = 0; b < nblocks; ++b) {
      const int32_t b0 = b * bch, b1 = b0 + bch < nchunks ? b0 + bch : nchunks;
      if (round == 0 || nblocks > 1) {
        __syncthreads();  // every warp is done with the previous block
        rows_fill_inputs(p, t, rows, b0 * 8, (b1 - b0) * 8, vec, rs);
        __syncthreads();
      }
      if (valid) rows_item_block(it, b0, b1, lane, reinterpret_cast<const uint4*>(vec), rows, a0, a1);
    }
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r < rows) {
        a0[r] = warp_sum(a0[r]);
        a1[r] = warp_sum(a1[r]);
      }
    }
    if (valid && lane == 0) {
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        if (r < rows) {
          if (m.ksplit == 1) {
            emit(rows_out(p, t, r, rc.epoch), it.unit, a0[r], a1[r]);
          } else {
            red[r * 2 * kWarps + 2 * item] = a0[r];
            red[r * 2 * kWarps + 2 * item + 1] = a1[r];
          }
        }
      }
    }
  }
  if (m.ksplit > 1) {
    __syncthreads();
    for (int32_t r = 0; r < rows; ++r) ksplit_sum(m, red + r * 2 * kWarps, rows_out(p, t, r, rc.epoch));
  }
}

// The LM-head tile's partial (max, argmax) of every row into its slot aux0 of the row's partials, from the logits
// rows this block just wrote (read back through L2 after the fence, as the one-row lmhead_partial does).
__device__ __noinline__ void rows_lmhead_partials(const KernelParams& p, const Tile& t, const RowsCtx& rc, float* red) {
  const int tid = threadIdx.x;
  __threadfence();
  for (int32_t r = 0; r < rc.rows; ++r) {
    __syncthreads();  // the logits' stores (fenced), and red free
    const float* logits = p.logits + int64_t(r) * p.h.vocab;
    float bv = -INFINITY;
    int32_t bi = INT32_MAX;
    for (int32_t i = t.row_begin + tid; i < t.row_end; i += kThreads) {
      const float v = __ldcg(logits + i);
      if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    warp_argmax(bv, bi);
    float* wv = red;
    int32_t* wi = reinterpret_cast<int32_t*>(red + kWarps);
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
        float* part = reinterpret_cast<float*>(row_ptr(p, t.out_buf, r));
        part[2 * t.aux0] = bv;
        part[2 * t.aux0 + 1] = __int_as_float(bi);
      }
    }
  }
}

#if TILE_LOOKUP
// ---------------------------------------------------------------------------------------------------------------
// Prompt lookup's rounds (planner/format.py "Prompt lookup"; the rules: csrc/lookup_rule.h)
// ---------------------------------------------------------------------------------------------------------------
// lookup::find_draft by one warp: lane l tests the matches at idx = base + l, and the lowest matching lane of the first
// window with any is the first match in ascending order, as the serial rule finds it. The history is read with plain
// loads: only the ARGMAX tile's worker writes it during the launch (its own L1 sees its writes), and the other workers
// read only its first n ids, which nobody writes.
__device__ lookup::Draft warp_find_draft(const int64_t* h, int32_t n, int32_t ngram, int32_t k, const int32_t* eos,
                                         int32_t num_eos) {
  const int lane = threadIdx.x & 31;
  for (int32_t g = lookup::first_ngram(n, ngram); g >= 1; --g) {
    for (int32_t base = 0; base + g <= n; base += 32) {
      const int32_t idx = base + lane;
      const bool hit = idx + g <= n && lookup::continuation(n, g, idx, k).len > 0 && lookup::ngram_at(h, n, g, idx);
      const unsigned mask = __ballot_sync(0xffffffffu, hit);
      if (mask != 0u) {
        const int32_t first = base + __ffs(mask) - 1;
        return lookup::cut_at_eos(h, lookup::continuation(n, g, first, k), eos, num_eos);
      }
    }
  }
  return {n, 0};
}

// Warp 0: the rows of the round that follows `accepted` tokens at history length n (rows 0: the launch ends there),
// into lr: the last accepted token and the draft fitted into the cache and the budget.
__device__ void lookup_draft_pass(const KernelParams& p, LookupRound& lr, int32_t n, int32_t accepted) {
  const lookup::Draft d = warp_find_draft(p.history, n, p.lookup_ngram, p.lookup_draft, p.eos, p.num_eos);
  const int32_t len = lookup::fit_draft(d.len, n, p.max_cache_len, accepted, p.lookup_budget);
  if ((threadIdx.x & 31) != 0) return;
  lr.rows = len < 0 ? 0 : len + 1;
  lr.pos = n - 1;
  lr.ids[0] = p.history[n - 1];
  for (int32_t i = 1; i < lr.rows; ++i) lr.ids[i] = p.history[d.start + i - 1];
}

// Warp 0 of the ARGMAX tile's worker, after the pass's tokens: the round's accepted tokens appended to the history and
// the outputs, then the next round drafted and published in the state's LOOKUP_* words (LOOKUP_ROWS 0: the launch ends,
// lookup_rounds[0] then holds the rounds run). The caller's release (signal_tile) publishes them.
__device__ void lookup_round_end(const KernelParams& p, LookupRound& lr, int32_t rows) {
  const int lane = threadIdx.x & 31;
  int stop = 0;
  if (lane == 0) {
    const int32_t a = lookup::accepted_count(lr.ids + 1, lr.picks, rows - 1, p.eos, p.num_eos);
    for (int32_t i = 0; i < a; ++i) {
      p.history[lr.n + i] = lr.picks[i];
      p.tokens[lr.accepted + i] = lr.picks[i];
    }
    stop = lookup::is_eos(lr.picks[a - 1], p.eos, p.num_eos) ? 1 : 0;
    lr.n += a;
    lr.accepted += a;
    lr.rounds += 1;
  }
  stop = __shfl_sync(0xffffffffu, stop, 0);
  __syncwarp();  // lane 0's history and lr writes, before every lane's reads
  if (stop) {
    if (lane == 0) lr.rows = 0;
  } else {
    lookup_draft_pass(p, lr, lr.n, lr.accepted);
  }
  __syncwarp();
  if (lane != 0) return;
  p.state[kStateLookupPos] = static_cast<uint32_t>(lr.pos);
  for (int32_t i = 0; i < lr.rows; ++i) p.state[kStateLookupIds + i] = static_cast<uint32_t>(lr.ids[i]);
  p.state[kStateLookupRows] = static_cast<uint32_t>(lr.rows);
  if (lr.rows == 0) p.lookup_rounds[0] = lr.rounds;
}
#endif

// ARGMAX: every row's token from its LM-head partials (the one-row order), then the pass's end: one step done (in
// prompt lookup: the round's acceptance and the next round's rows), the epoch (and on a flagged arena ROWS_PASSES)
// advanced. Every tile of the pass is an ancestor of this one and every worker read those words (and the LOOKUP_*
// ones) before its first tile of the pass, so writing them here is safe.
__device__ __noinline__ void rows_argmax(const KernelParams& p, const Tile& t, const RowsCtx& rc) {
  const int tid = threadIdx.x;
  if (tid >= 32) return;
  for (int32_t r = 0; r < rc.rows; ++r) {
    const float* part = reinterpret_cast<const float*>(row_ptr(p, t.in_buf, r));
    float bv = -INFINITY;
    int32_t bi = INT32_MAX;
    for (int k = tid; k < t.aux0; k += 32) {
      const float v = __ldcg(part + 2 * k);
      const int32_t i = __ldcg(reinterpret_cast<const int32_t*>(part) + 2 * k + 1);
      if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    warp_argmax(bv, bi);
#if TILE_LOOKUP
    if (tid == 0) g_round.picks[r] = bi;
#else
    if (tid == 0) p.tokens[r] = bi;
#endif
  }
#if TILE_LOOKUP
  __syncwarp();
  lookup_round_end(p, g_round, rc.rows);
#endif
  if (tid == 0) {
#if TILE_LOOKUP
    p.state[kStateStepsDone] = static_cast<uint32_t>(g_round.rounds);
#else
    p.state[kStateStepsDone] = 1u;
#endif
    if (p.rows_flagged) p.state[kStateRowsPasses] = rc.ctr_epoch;
    p.state[kStateEpoch] = rc.epoch;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// ATTN tiles of R rows
// ---------------------------------------------------------------------------------------------------------------
// The new K rows (k-normed where the model has a k norm, rotated at the row's position, bf16) and V rows of KV head
// kvh for every row, into kn / vn [kMaxRows][HD]: the one-row kernels' arithmetic for the row they append
// (attn_append_new_row; with q/k norms attn_norm_rotate_body, staging the normed rows in kx). Ends with a barrier.
template <int HD>
__device__ void rows_new_kv(const KernelParams& p, const Tile& t, const RowsCtx& rc, const float* csr, uint16_t* kn,
                            uint16_t* vn, uint16_t* kx, bool norm_path) {
  constexpr int half = HD / 2, kPer = HD / 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kvh = t.aux0;
  if (!norm_path) {
    // attn_append_new_row's arithmetic (attn_rope_pair: the same expression, so the same FMA contraction), every
    // row at once.
    for (int i = tid; i < rc.rows * HD; i += kThreads) {
      const int r = i / HD, d = i - r * HD;
      const int dp = d < half ? d + half : d - half;
      const uint16_t* knew = reinterpret_cast<const uint16_t*>(row_ptr(p, t.in2_buf, r)) + kvh * HD;
      const uint16_t* vnew = reinterpret_cast<const uint16_t*>(row_ptr(p, t.in3_buf, r)) + kvh * HD;
      const float x = bf2f(__ldcg(knew + d)), xp = bf2f(__ldcg(knew + dp));
      const uint16_t vr = __ldcg(vnew + d);
      kn[i] = f2bf(attn_rope_pair(x, xp, d, half, csr + r * HD));
      vn[i] = vr;
    }
    __syncthreads();
    return;
  }
  // Warp r < rows: row r's k head, normed in lane order as attn_norm_rotate_body's warp G does; warp kMaxRows + r
  // its v head.
  if (warp < rc.rows) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row_ptr(p, t.in2_buf, warp)) + int64_t(kvh) * HD;
    uint16_t x[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = __ldcg(src + lane + 32 * j);
    uint16_t* dst = kx + warp * HD;
    if (t.weight2 >= 0) {
      const uint16_t* w = p.weights[t.weight2];
      float wv[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) wv[j] = bf2f(__ldg(w + lane + 32 * j));
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) ss = fmaf(bf2f(x[j]), bf2f(x[j]), ss);
      ss = warp_sum(ss);
      constexpr bool kPow2 = (HD & (HD - 1)) == 0;
      const float mean = kPow2 ? __fmul_rn(ss, 1.0f / HD) : __fdiv_rn(ss, static_cast<float>(HD));
      const float r = 1.0f / sqrtf(__fadd_rn(mean, p.eps));
#pragma unroll
      for (int j = 0; j < kPer; ++j) dst[lane + 32 * j] = f2bf(round_bf(bf2f(x[j]) * r) * wv[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kPer; ++j) dst[lane + 32 * j] = x[j];
    }
  } else if (warp >= kMaxRows && warp - kMaxRows < rc.rows) {
    const int r = warp - kMaxRows;
    const uint16_t* src = reinterpret_cast<const uint16_t*>(row_ptr(p, t.in3_buf, r)) + int64_t(kvh) * HD;
#pragma unroll
    for (int j = 0; j < kPer; ++j) vn[r * HD + lane + 32 * j] = __ldcg(src + lane + 32 * j);
  }
  __syncthreads();
  for (int i = tid; i < rc.rows * HD; i += kThreads) {
    const int r = i / HD, d = i - r * HD;
    const int dp = d < half ? d + half : d - half;
    kn[i] = f2bf(attn_rope_explicit(bf2f(kx[r * HD + d]), bf2f(kx[r * HD + dp]), d, half, csr + r * HD));
  }
  __syncthreads();
}

// Every row's q heads of KV head kvh rotated into qf [row][G][HD + 4]: attn_rotate_q's arithmetic (attn_rope_pair),
// kQBatch elements per thread in flight at once. The warp path's combine writes of and ml, which attn_rotate_q also
// initialises; nothing reads them before.
template <int HD>
__device__ void rows_rotate_q(const KernelParams& p, const Tile& t, const RowsCtx& rc, const float* csr, float* qf) {
  constexpr int half = HD / 2, kQBatch = 4;
  const int G = p.h.num_heads / p.h.num_kv_heads, n = rc.rows * G * HD;
  for (int i0 = threadIdx.x; i0 < n; i0 += kQBatch * kThreads) {
    float x[kQBatch], xp[kQBatch];
#pragma unroll
    for (int k = 0; k < kQBatch; ++k) {
      const int i = i0 + k * kThreads;
      if (i < n) {
        const int r = i / (G * HD), j = i - r * G * HD, d = j % HD;
        const int dp = d < half ? d + half : d - half;
        const uint16_t* q = reinterpret_cast<const uint16_t*>(row_ptr(p, t.in_buf, r)) + int64_t(t.aux0) * G * HD;
        x[k] = bf2f(__ldcg(q + j));
        xp[k] = bf2f(__ldcg(q + (j - d) + dp));
      }
    }
#pragma unroll
    for (int k = 0; k < kQBatch; ++k) {
      const int i = i0 + k * kThreads;
      if (i < n) {
        const int r = i / (G * HD), j = i - r * G * HD, g = j / HD, d = j - g * HD;
        qf[(r * G + g) * (HD + 4) + d] = attn_rope_pair(x[k], xp[k], d, half, csr + r * HD);
      }
    }
  }
}

// Row's q heads normed (q norm, where the model has one) and rotated into qf, of zeroed, m = -inf and l = 0:
// attn_norm_rotate_body's q half (warp g < G normalises head g into the o slots as bf16, then RoPE from there).
template <int HD>
__device__ void rows_norm_rotate_q(const KernelParams& p, const Tile& t, const uint16_t* q, const float* cs,
                                   float* qf, float* of, float* ml, uint16_t* st) {
  constexpr int kPer = HD / 32, half = HD / 2;
  const int G = p.h.num_heads / p.h.num_kv_heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (warp < G) {
    const int64_t base = (int64_t(t.aux0) * G + warp) * HD;
    uint16_t x[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = __ldcg(q + base + lane + 32 * j);
    uint16_t* dst = st + warp * HD;
    if (t.norm >= 0) {
      const uint16_t* w = p.weights[t.norm];
      float wv[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) wv[j] = bf2f(__ldg(w + lane + 32 * j));
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) ss = fmaf(bf2f(x[j]), bf2f(x[j]), ss);
      ss = warp_sum(ss);
      constexpr bool kPow2 = (HD & (HD - 1)) == 0;
      const float mean = kPow2 ? __fmul_rn(ss, 1.0f / HD) : __fdiv_rn(ss, static_cast<float>(HD));
      const float r = 1.0f / sqrtf(__fadd_rn(mean, p.eps));
#pragma unroll
      for (int j = 0; j < kPer; ++j) dst[lane + 32 * j] = f2bf(round_bf(bf2f(x[j]) * r) * wv[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kPer; ++j) dst[lane + 32 * j] = x[j];
    }
  }
  __syncthreads();
  for (int i = tid; i < G * HD; i += kThreads) {
    const int g = i / HD, d = i - g * HD;
    const int dp = d < half ? d + half : d - half;
    qf[g * (HD + 4) + d] = attn_rope_explicit(bf2f(st[g * HD + d]), bf2f(st[g * HD + dp]), d, half, cs);
    of[i] = 0.f;
  }
  if (tid < G) {
    ml[tid] = -INFINITY;
    ml[G + tid] = 0.f;
  }
}

// Chunk [c0, c0 + cn)'s K/V rows j0 .. cn - 1 into (kb, vb): positions below pos0 from the cache, the pass's own from
// the new rows.
template <int HD>
__device__ __forceinline__ void rows_stage_chunk(const uint16_t* kc, const uint16_t* vc, const uint16_t* kn,
                                                 const uint16_t* vn, int32_t c0, int32_t cn, int32_t j0, int64_t pos0,
                                                 uint16_t* kb, uint16_t* vb) {
  constexpr int cpr = HD / 8, kstride = HD + 8;
  for (int i = threadIdx.x; i < (cn - j0) * cpr; i += kThreads) {
    const int j = j0 + i / cpr, c = i % cpr;
    const int64_t at = c0 + j;
    uint4 kv, vv;
    if (at < pos0) {
      kv = __ldcg(reinterpret_cast<const uint4*>(kc + at * HD) + c);
      vv = __ldcg(reinterpret_cast<const uint4*>(vc + at * HD) + c);
    } else {
      kv = reinterpret_cast<const uint4*>(kn + (at - pos0) * HD)[c];
      vv = reinterpret_cast<const uint4*>(vn + (at - pos0) * HD)[c];
    }
    *reinterpret_cast<uint4*>(kb + j * kstride + c * 8) = kv;
    *reinterpret_cast<uint4*>(vb + j * attn_vstride(HD) + c * 8) = vv;
  }
}

// An ATTN tile for all rows: the new K/V rows once, then per row its partition [lo, hi) of pos + r + 1 positions on
// the one-row warp path (attn_warp_chunk, attn_warps_end: the same chunks from lo, the same arithmetic), its K/V
// stored where this tile owns pos + r, and its partial into the row's partials.
template <int HD>
__device__ __noinline__ void rows_attn(const KernelParams& p, const Tile& t, const RowsCtx& rc, uint8_t* smem,
                          const SmemLayout& L) {
  const int hd = HD, G = p.h.num_heads / p.h.num_kv_heads, P = p.h.attn_partitions;
  const int kvh = t.aux0, part = t.aux1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* qf = reinterpret_cast<float*>(smem + L.qf);
  float* of = reinterpret_cast<float*>(smem + L.of);
  float* opart = reinterpret_cast<float*>(smem + L.opart);
  float* ml = reinterpret_cast<float*>(smem + L.ml);
  float* csr = reinterpret_cast<float*>(smem + L.cs);  // [row][HD]
  float* sc = reinterpret_cast<float*>(smem + L.sc);
  uint16_t* kb = reinterpret_cast<uint16_t*>(smem + L.kbuf);
  uint16_t* vb = reinterpret_cast<uint16_t*>(smem + L.vbuf);
  uint16_t* kn = reinterpret_cast<uint16_t*>(smem + L.rsd);
  uint16_t* vn = kn + kMaxRows * HD;
  uint16_t* kx = vn + kMaxRows * HD;
  for (int32_t r = 0; r < rc.rows; ++r) rope_tables(p, rc.pos + r, csr + r * HD);
  __syncthreads();
  const bool norm_path = t.norm >= 0 || t.weight2 >= 0;
  rows_new_kv<HD>(p, t, rc, csr, kn, vn, kx, norm_path);
  uint16_t* kc = p.k_cache[t.layer] + int64_t(kvh) * p.max_cache_len * hd;
  uint16_t* vc = p.v_cache[t.layer] + int64_t(kvh) * p.max_cache_len * hd;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int kstride = hd + 8;
  const int fr = lane >> 2, ft = lane & 3;
  float2* wop = reinterpret_cast<float2*>(opart) + warp * (HD / 8) * 4 * G + lane;
  const uint4* qfrag = reinterpret_cast<const uint4*>(sc + kWarps * 2 * G);
  if (!norm_path) rows_rotate_q<HD>(p, t, rc, csr, qf);  // published by rows_view's barriers below
  // The cached positions [st_c0, st_end) in kb / vb: a row whose chunk starts where the staged one does finds them
  // there (short contexts: every row's one chunk) and stages only the pass's own positions.
  int32_t st_c0 = -1, st_end = -1;
  for (int32_t r = 0; r < rc.rows; ++r) {
    const int64_t at = rc.pos + r;
    int32_t lo, hi;
    attn_partition_range(static_cast<int32_t>(at + 1), part, P, p.h.attn_granule, p.h.attn_single, &lo, &hi);
    // Read again only by later passes (this one reads its own positions from kn / vn).
    if (lo <= at && at < hi) {
      for (int d = tid; d < HD; d += kThreads) {
        kc[at * HD + d] = kn[r * HD + d];
        vc[at * HD + d] = vn[r * HD + d];
      }
    }
    rows_view(p, r);  // attn_store_partial writes row r's partials
    float* qfr = qf + r * G * (HD + 4);
    if (norm_path) {
      rows_norm_rotate_q<HD>(p, t, reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in_buf)), csr + r * HD, qfr, of,
                             ml, reinterpret_cast<uint16_t*>(opart));
      __syncthreads();
    }
    if (tid < (HD / 16) * 4 * G && lo < hi) attn_q_fragments(qfr, sc, G, hd);
    uint4 qreg[4];
    bool qloaded = false;
    float2 oreg[8];
#pragma unroll
    for (int n = 0; n < 8; ++n) oreg[n] = make_float2(0.f, 0.f);
    float wl = 0.f, wm = -INFINITY;
    for (int c0 = lo; c0 < hi; c0 += L.chunk) {
      const int cn = hi - c0 < L.chunk ? hi - c0 : L.chunk;
      const int32_t cend = c0 + cn < rc.pos ? c0 + cn : static_cast<int32_t>(rc.pos);  // its cached positions' end
      int32_t j0 = 0;
      if (c0 == st_c0 && cend <= st_end) {
        j0 = rc.pos > c0 ? static_cast<int32_t>(rc.pos) - c0 : 0;
      } else {
        st_c0 = c0;
        st_end = cend > c0 ? cend : c0;
      }
      rows_stage_chunk<HD>(kc, vc, kn, vn, c0, cn, j0, rc.pos, kb, vb);
      __syncthreads();
      attn_warp_chunk<HD>(c0, cn, lo, G, hd, kstride, scale, kb, vb, qfrag, wop, wm, wl, qreg, qloaded, oreg);
      __syncthreads();
    }
    attn_warps_end<HD>(lo, hi, L.chunk, G, hd, fr, ft, sc, opart, of, ml, wop, wm, wl, oreg);
    attn_store_partial(p, t, kvh, part, P, G, hd, ml, of, rc.epoch);
  }
  rows_view(p, 0);
}

// MERGE for every row: the one-row merge_tile through the row's view.
__device__ __noinline__ void rows_merge(const KernelParams& p, const Tile& t, const RowsCtx& rc, uint8_t* smem,
                           const SmemLayout& L) {
  for (int32_t r = 0; r < rc.rows; ++r) {
    rows_view(p, r);
    merge_tile(p, t.aux0, t.in_buf, t.out_buf, reinterpret_cast<float*>(smem + L.msf), rc.epoch);
  }
  rows_view(p, 0);
}

// One tile for all rows, between its wait and its signal.
template <int HD>
__device__ void rows_tile(const KernelParams& p, const Tile& t, const RowsCtx& rc, uint8_t* smem,
                          const SmemLayout& L) {
  switch (t.op) {
    case kOpEmbed:
      rows_embed(p, t, rc);
      break;
    case kOpQkv:
    case kOpGateup:
    case kOpResid:
    case kOpLmhead:
      rows_matvec(p, t, rc, smem, L);
      if (t.op == kOpLmhead) rows_lmhead_partials(p, t, rc, reinterpret_cast<float*>(smem + L.red));
      break;
    case kOpAttn:
      rows_attn<HD>(p, t, rc, smem, L);
      break;
    case kOpMerge:
      rows_merge(p, t, rc, smem, L);
      break;
    case kOpArgmax:
      rows_argmax(p, t, rc);
      break;
    default:
      break;
  }
}

// Thread 0 at the start: whether the launch may run (no earlier error, the plan as the host saw it, every row's
// token in the vocabulary, every row's position in the cache); raises the error otherwise.
__device__ bool rows_launch_ok(const KernelParams& p, int32_t worker, int64_t pos) {
  if (ld_relaxed(p.state + kStateError) != 0u) return false;
  const int32_t magic = p.plan[0];
  const int32_t total = p.plan[offsetof(Header, total_words) / 4];
  const int32_t ntiles = p.plan[offsetof(Header, num_tiles) / 4];
  if (magic != p.h.magic || total != p.h.total_words || ntiles != p.h.num_tiles) {
    raise_error(p, kErrorBadPlan, worker, -1, -1, -1,
                static_cast<uint32_t>(magic != p.h.magic ? magic : (total != p.h.total_words ? total : ntiles)),
                static_cast<uint32_t>(magic != p.h.magic ? p.h.magic
                                                         : (total != p.h.total_words ? p.h.total_words
                                                                                     : p.h.num_tiles)));
    return false;
  }
  for (int32_t r = 0; r < p.rows; ++r) {
    const int64_t tok = p.input_ids[r];
    if (tok < 0 || tok >= p.h.vocab) {
      raise_error(p, kErrorBadToken, worker, -1, 0, -1, static_cast<uint32_t>(tok), static_cast<uint32_t>(p.h.vocab));
      return false;
    }
  }
  if (pos < 0 || pos + p.rows > p.max_cache_len) {
    raise_error(p, kErrorCacheFull, worker, -1, 0, -1, static_cast<uint32_t>(pos + p.rows - 1),
                static_cast<uint32_t>(p.max_cache_len));
    return false;
  }
  return true;
}

#if TILE_LOOKUP
// Thread 0 at the start of a prompt-lookup launch: no earlier error, the plan as the host saw it (rows_launch_ok's
// checks without its rows).
__device__ bool lookup_launch_ok(const KernelParams& p, int32_t worker) {
  if (ld_relaxed(p.state + kStateError) != 0u) return false;
  const int32_t magic = p.plan[0];
  const int32_t total = p.plan[offsetof(Header, total_words) / 4];
  const int32_t ntiles = p.plan[offsetof(Header, num_tiles) / 4];
  if (magic != p.h.magic || total != p.h.total_words || ntiles != p.h.num_tiles) {
    raise_error(p, kErrorBadPlan, worker, -1, -1, -1, static_cast<uint32_t>(magic), static_cast<uint32_t>(p.h.magic));
    return false;
  }
  return true;
}

// Thread 0: whether the first pass may run (every row's token in the vocabulary, every row's position in the cache);
// raises the error otherwise.
__device__ bool rows_pass_ok(const KernelParams& p, int32_t worker, const LookupRound& lr) {
  for (int32_t r = 0; r < lr.rows; ++r) {
    const int64_t tok = lr.ids[r];
    if (tok < 0 || tok >= p.h.vocab) {
      raise_error(p, kErrorBadToken, worker, -1, 0, -1, static_cast<uint32_t>(tok), static_cast<uint32_t>(p.h.vocab));
      return false;
    }
  }
  if (lr.rows < 1 || lr.pos < 0 || lr.pos + lr.rows > p.max_cache_len) {
    raise_error(p, kErrorCacheFull, worker, -1, 0, -1, static_cast<uint32_t>(lr.pos + lr.rows - 1),
                static_cast<uint32_t>(p.max_cache_len));
    return false;
  }
  return true;
}

// The whole block at the start of a prompt-lookup launch: every history id in the vocabulary (the drafts come from
// there; a bad one raises BAD_TOKEN), then warp 0 drafts the first round into lr, as every worker does for itself.
__device__ bool lookup_first_pass(const KernelParams& p, int32_t worker, LookupRound& lr) {
  int bad = 0;
  for (int32_t i = threadIdx.x; i < p.lookup_length; i += kThreads) {
    const int64_t tok = p.history[i];
    if (tok < 0 || tok >= p.h.vocab) {
      raise_error(p, kErrorBadToken, worker, -1, 0, -1, static_cast<uint32_t>(tok), static_cast<uint32_t>(p.h.vocab));
      bad = 1;
    }
  }
  if (__syncthreads_or(bad)) return false;
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      lr.n = p.lookup_length;
      lr.accepted = 0;
      lr.rounds = 0;
    }
    __syncwarp();
    lookup_draft_pass(p, lr, p.lookup_length, 0);
  }
  __syncthreads();
  return true;
}

// After a worker's tiles of a prompt-lookup pass: thread 0 waits for the pass's ARGMAX (its counter at the pass's
// epoch) and reads the next pass's rows from the LOOKUP_* words into lr. False when the launch ends (no next pass,
// or an error: a timeout raises it).
__device__ bool lookup_next_pass(const KernelParams& p, const RowsCtx& rc, int32_t worker,
                                 LookupRound& lr) {
  int more = 0;
  if (threadIdx.x == 0 && wait_counter(p, p.h.argmax_counter, rc.epoch, worker, -1, -1)) {
    lr.rows = static_cast<int32_t>(ld_relaxed(p.state + kStateLookupRows));
    lr.pos = static_cast<int32_t>(ld_relaxed(p.state + kStateLookupPos));
    for (int32_t i = 0; i < lr.rows; ++i) lr.ids[i] = static_cast<int32_t>(ld_relaxed(p.state + kStateLookupIds + i));
    more = lr.rows > 0 ? 1 : 0;
  }
  return __syncthreads_or(more) != 0;
}
#endif

}  // namespace

#if !TILE_LOOKUP
// The rows kernel for plans of head_dim HD: every worker runs its tiles once, for all p.rows rows.
template <int HD>
__global__ void __launch_bounds__(kThreads, 1) decode_rows_kernel(const __grid_constant__ KernelParams p) {
  uint8_t* smem = g_smem;
  __shared__ int s_flag;
  __shared__ uint32_t s_epoch0, s_ctr0;
  __shared__ int64_t s_pos0;
  const int tid = threadIdx.x;
  const int32_t worker = blockIdx.x;
  const SmemLayout& L = p.layout;
  if (tid == 0) {
#if TILE_TIMING
    g_tile_times = nullptr;  // no per-tile marks in the rows kernels
#endif
    g_row_off = 0;
    const int64_t pos = p.position[0];
    s_flag = rows_launch_ok(p, worker, pos) ? 0 : 1;
    s_pos0 = pos;
    s_epoch0 = p.state[kStateEpoch];
    s_ctr0 = p.rows_flagged ? p.state[kStateRowsPasses] : s_epoch0;
  }
  __syncthreads();
  if (s_flag) return;
  RowsCtx rc;
  rc.epoch = s_epoch0 + 1u;
  rc.ctr_epoch = s_ctr0 + 1u;
  rc.pos = s_pos0;
  rc.rows = p.rows;
  const int32_t tbeg = __ldg(p.plan + p.h.worker_offsets_offset + worker);
  const int32_t tend = __ldg(p.plan + p.h.worker_offsets_offset + worker + 1);
  if (tend == tbeg) return;
  const int32_t* wtiles = p.plan + p.h.worker_tiles_offset;
  const bool plan_local = load_plan_smem(p, L, tbeg, tend);
  const int32_t* recs = reinterpret_cast<const int32_t*>(smem + L.prec);
  for (int32_t k = tbeg; k < tend; ++k) {
    const int32_t* rec = plan_local ? recs + (k - tbeg) * kPlanRecWords : nullptr;
    const Tile t = plan_local ? load_tile_rec(rec) : load_tile(p, __ldg(wtiles + k));
    const int32_t ti = __ldg(wtiles + k);
    if (!rows_wait_tile(p, t, rc, worker, ti, rec)) return;
    rows_tile<HD>(p, t, rc, smem, L);
    signal_tile(p, t);
  }
}

#else
// The worker's tiles of one pass, in its list's order. False where a wait gave up (an error: the launch ends).
template <int HD>
__device__ __forceinline__ bool rows_pass(const KernelParams& p, const RowsCtx& rc, int32_t worker, int32_t tbeg, int32_t tend,
                          bool plan_local, uint8_t* smem, const SmemLayout& L) {
  const int32_t* wtiles = p.plan + p.h.worker_tiles_offset;
  const int32_t* recs = reinterpret_cast<const int32_t*>(smem + L.prec);
  for (int32_t k = tbeg; k < tend; ++k) {
    const int32_t* rec = plan_local ? recs + (k - tbeg) * kPlanRecWords : nullptr;
    const Tile t = plan_local ? load_tile_rec(rec) : load_tile(p, __ldg(wtiles + k));
    const int32_t ti = __ldg(wtiles + k);
    if (!rows_wait_tile(p, t, rc, worker, ti, rec)) return false;
    rows_tile<HD>(p, t, rc, smem, L);
    signal_tile(p, t);
  }
  return true;
}

// The prompt-lookup kernel for plans of head_dim HD: every worker runs its tiles once per round, the rows of each pass
// as the previous pass's ARGMAX published them (the first pass's as every worker drafts it).
template <int HD>
__global__ void __launch_bounds__(kThreads, 1) decode_rows_kernel(const __grid_constant__ KernelParams p) {
  uint8_t* smem = g_smem;
  __shared__ int s_flag;
  __shared__ uint32_t s_epoch0, s_ctr0;
  const int tid = threadIdx.x;
  const int32_t worker = blockIdx.x;
  const SmemLayout& L = p.layout;
  if (tid == 0) {
#if TILE_TIMING
    g_tile_times = nullptr;  // no per-tile marks in the rows kernels
#endif
    g_row_off = 0;
    s_flag = lookup_launch_ok(p, worker) ? 0 : 1;
    s_epoch0 = p.state[kStateEpoch];
    s_ctr0 = p.rows_flagged ? p.state[kStateRowsPasses] : s_epoch0;
  }
  __syncthreads();
  if (s_flag) return;
  if (!lookup_first_pass(p, worker, g_round)) return;
  if (tid == 0) s_flag = rows_pass_ok(p, worker, g_round) ? 0 : 1;
  __syncthreads();
  if (s_flag) return;
  const int32_t tbeg = __ldg(p.plan + p.h.worker_offsets_offset + worker);
  const int32_t tend = __ldg(p.plan + p.h.worker_offsets_offset + worker + 1);
  if (tend == tbeg) return;
  const bool plan_local = load_plan_smem(p, L, tbeg, tend);
  // Few live values across the passes (rc; the pass's rows in g_round): more made the noinline tiles spill more.
  RowsCtx rc;
  rc.epoch = s_epoch0 + 1u;
  rc.ctr_epoch = s_ctr0 + 1u;
  for (;;) {
    rc.pos = g_round.pos;
    rc.rows = g_round.rows;
    if (!rows_pass<HD>(p, rc, worker, tbeg, tend, plan_local, smem, L)) return;
    if (!lookup_next_pass(p, rc, worker, g_round)) return;
    ++rc.epoch;
    ++rc.ctr_epoch;
  }
}
#endif

namespace {
template <typename Kernel>
cudaError_t launch_rows_cooperative(const KernelParams& p0, Kernel kernel, cudaStream_t stream) {
  KernelParams p = p0;
  p.layout = smem_layout_rows(p.h);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.h.num_workers);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = p.layout.total;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

constexpr int kRowsHeadDim = TILE_HEAD_DIM;
static_assert(attn_warps_fit(1, 1, kRowsHeadDim), "a kernel per head_dim of TILE_ATTN_HEAD_DIMS (plan_format.h)");
}  // namespace

cudaError_t TILE_VARIANT(set_smem_limit)(int32_t bytes) {
  return cudaFuncSetAttribute(decode_rows_kernel<kRowsHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

cudaError_t TILE_VARIANT(blocks_per_sm)(int32_t smem_bytes, int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, decode_rows_kernel<kRowsHeadDim>, kThreads,
                                                       smem_bytes);
}

cudaError_t TILE_VARIANT(launch)(const KernelParams& p, cudaStream_t stream) {
  return launch_rows_cooperative(p, decode_rows_kernel<kRowsHeadDim>, stream);
}

}  // namespace cuda
}  // namespace tiles
