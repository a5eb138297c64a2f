// The persistent decode kernel: one block per worker executes exactly its worker_tiles list of the plan, for every
// step of the launch. Semantics of every op: planner/format.py (docstring). Dependencies are the plan's monotonic
// counters (release/acquire at GPU scope) or, in the flag kernels, the epochs carried by the data words themselves;
// every spin-wait is bounded and reports through the state's error words.
//
// Weight streaming: plain 16-byte ld.global.nc loads, 8 in flight per lane (two rows x kUnroll = 4 chunks: 64 KB
// per SM; 128 KB cost 7%, queueing every hand-off behind the stream), each warp's first batch of a matvec tile staged
// into shared memory by cp.async before the tile waits on its dependencies (weights never depend on activations).
// docs/decisions.md records the alternatives measured (L2 prefetch, rings, bulk copies).
//
// Reads of data produced inside the launch (scratch buffers, KV cache, tokens) use ld.global.cg (L2, never a stale
// L1 line); weights use ld.global.nc. Reductions run in a fixed order, so results are bit-identical run to run.
//
// This file holds the tile loop (run_tile), the kernel and its launch; the tiles' code is in parts that it includes
// in this order, one job each: kernel_config.cuh (build switches, timing marks), device_helpers.cuh (PTX wrappers,
// reductions), plan_access.cuh, waits.cuh (errors, counter waits, release; flag_data.cuh in flag builds),
// matvec.cuh, attention.cuh, merge.cuh, sampler.cuh. Each kernel's translation unit
// (decode_kernel_<hand-off>_hd<head_dim>[_sampler].cu: counters or flags, one per head_dim of TILE_ATTN_HEAD_DIMS,
// each with and without the sampler) compiles it once, with TILE_FLAG_HANDOFF (or not), TILE_HEAD_DIM (the head_dim
// of its attention), TILE_SAMPLER (1: the LMHEAD and ARGMAX tiles take the op's sampler; 0 or undefined: the argmax
// of the logits) and TILE_VARIANT (the prefix of its exports) defined.
#if !defined(TILE_HEAD_DIM) || !defined(TILE_VARIANT)
#error "decode_kernel.cuh is compiled through decode_kernel_{counters,flags}_hd<head_dim>[_sampler].cu"
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/decode_kernel.h"
#include "sampler_math.h"

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
#include "cuda/sampler.cuh"

// ---------------------------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------------------------
// The LM-head tile's partial (max, argmax) over its rows, from `rows` (shared memory) or else the logits row this
// block just wrote, into part[2 * slot], part[2 * slot + 1]. Out of line (scalar arguments): it runs once per step,
// and inlined its code sat between the hot blocks of the tile loop.
__device__ __noinline__ void lmhead_partial(int32_t row_begin, int32_t row_end, const float* logits, float* red,
                                           float* part, int32_t slot, uint32_t epoch, const float* rows) {
  const int tid = threadIdx.x;
  // Partial (max, argmax) over this tile's rows: from shared memory where emit kept them (`rows`), else read
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

// The shared-memory layout as this kernel carved it: the launch's (the counter kernels) or its own (the flag
// kernels compute theirs: smem_layout with their kUnroll).
__device__ __forceinline__ SmemLayout device_layout(const KernelParams& p) {
#ifdef TILE_FLAG_HANDOFF
  return smem_layout(p.h);
#else
  return p.layout;
#endif
}

// An LMHEAD tile with a sampler (sampler.cuh samp_lmhead): its processed scores, its candidates and slot header, then
// its partial (max, argmax) over the processed scores (GREEDY mode's token; in the flag kernels also the ARGMAX
// tile's sign that the candidates are there). `rows`: the raw logits in shared memory, or null (the logits row).
// Out of line: the tile loop's code and registers stay those of the kernel without a sampler.
__device__ __noinline__ void lmhead_sample(const KernelParams& p, int32_t row_begin, int32_t row_end,
                                           const float* logits, float* red, float* part, int32_t slot,
                                           uint32_t epoch, float* rows, int64_t pos) {
  const SmemLayout L = device_layout(p);
  uint32_t* hist = reinterpret_cast<uint32_t*>(g_smem + L.stage);
  int32_t* misc = reinterpret_cast<int32_t*>(hist + kSampHistWords);
  float* proc = rows != nullptr ? rows : reinterpret_cast<float*>(misc + kSampMiscWords);
  const int32_t capacity = rows != nullptr ? row_end - row_begin
                                           : kWarps * kStageBytesPerWarp / 4 - kSampHistWords - kSampMiscWords;
  // Every warp is past the matvec (the stage is free, rsd holds every row); the logits row, where it is read back,
  // is visible at L2.
  if (rows == nullptr) __threadfence();
  __syncthreads();
  samp_lmhead(p.sampler, samp_slot(p.sampler, slot), p.sampler + sampler_seen_offset(p.h.lm_tiles), pos + 1,
              row_begin, row_end, rows, logits, proc, capacity, hist, misc, true);
  // The flag kernels' ARGMAX tile learns from the flagged partial that this tile is done: every writer's candidate
  // and header stores are fenced before lmhead_partial's barrier and its flagged store.
  if (kFlags) __threadfence();
  lmhead_partial(row_begin, row_end, nullptr, red, part, slot, epoch, proc);
}

// An ARGMAX tile with a sampler: the LM tiles' partials (in the flag kernels, polled: their arrival says the
// candidates are there), then SAMPLE mode's merge, filters and draw (samp_merge) or GREEDY mode's argmax of the
// processed scores; the token's seen bit; the launch's end as without a sampler. An error (BAD_LOGITS,
// SAMPLER_OVERFLOW) is raised with the step, tokens[step] = -1, and false returned: the worker stops. Out of line,
// as lmhead_sample.
__device__ __noinline__ bool argmax_sample(const KernelParams& p, const float* part, int32_t nparts, uint32_t epoch,
                                           int32_t step, int64_t pos, int32_t ti) {
  const int tid = threadIdx.x;
  const int32_t worker = blockIdx.x;
  const int32_t mode = p.sampler[offsetof(SamplerSettings, mode) / 4];
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  // The partials: GREEDY mode's token, and in the flag kernels the LM tiles' sign of completion (the counter kernels
  // waited for them on the tile's counter already).
  if (tid < 32 && (kFlags || mode != kModeSample)) {
#ifdef TILE_FLAG_HANDOFF
    for (int k0 = tid; k0 < nparts; k0 += 8 * 32) {
      int64_t iv[8], ii[8];
      float v[8], vi[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int k = k0 + 32 * j;
        iv[j] = k < nparts ? 2 * k : -1;
        ii[j] = k < nparts ? 2 * k + 1 : -1;
      }
      fl_read_f32<8>(p, part, iv, epoch, v);
      fl_read_f32<8>(p, part, ii, epoch, vi);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (iv[j] >= 0 && better(v[j], __float_as_int(vi[j]), bv, bi)) {
          bv = v[j];
          bi = __float_as_int(vi[j]);
        }
      }
    }
#else
    for (int k = tid; k < nparts; k += 32) {
      const float v = __ldcg(part + 2 * k);
      const int32_t i = __ldcg(reinterpret_cast<const int32_t*>(part) + 2 * k + 1);
      if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
#endif
    warp_argmax(bv, bi);
  }
  // Flag kernels: the polls saw every LM tile's flagged partial, which each wrote after fencing its candidates.
  if (kFlags) __threadfence();
  __syncthreads();
#ifdef TILE_FLAG_HANDOFF
  if (g_fl_abort) return true;  // a poll gave up (its error is raised): run_tile stops the worker after its barrier
#endif
  const SmemLayout L = device_layout(p);
  uint8_t* region = g_smem + L.vec;
  SampOutcome* out = reinterpret_cast<SampOutcome*>(region);
  if (mode == kModeSample) {
    samp_merge(p.sampler, p.sampler, p.h.lm_tiles, pos + 1, p.h.vocab, region + kSampOutcomeBytes,
               L.total - L.vec - kSampOutcomeBytes, nullptr, out);
  } else {
    samp_greedy_check(p.sampler, p.h.lm_tiles, pos + 1, reinterpret_cast<int32_t*>(region + kSampOutcomeBytes),
                      out);
    if (tid == 0 && out->code == kErrorOk) {
      if (bv == -INFINITY) {
        *out = {kErrorBadLogits, -1, static_cast<int32_t>(pos + 1), -1};
      } else {
        out->token = bi;
      }
    }
    __syncthreads();
  }
  const SampOutcome r = *out;
  if (tid == 0) {
    if (r.code != kErrorOk) {
      p.tokens[step] = -1;
      raise_error(p, r.code, worker, ti, step, -1, static_cast<uint32_t>(r.seen), static_cast<uint32_t>(r.wanted));
    } else {
      uint32_t* seen = reinterpret_cast<uint32_t*>(p.sampler + sampler_seen_offset(p.h.lm_tiles));
      atomicOr(seen + (r.token >> 5), 1u << (r.token & 31));
      p.tokens[step] = r.token;
      if (is_eos(p, r.token) || step + 1 == p.num_steps) {
        // The launch ends after this step (as without a sampler: every tile of it is an ancestor of this one).
        p.state[kStateStepsDone] = static_cast<uint32_t>(step + 1);
        p.state[kStateEpoch] = epoch;
      }
    }
  }
  return r.code == kErrorOk;
}

// A matvec tile's first weight batches staged before its wait (stage_first_batch). An o-projection tile after an
// ATTN tile waits for the attention chain (~5 us at short context), so its warps can issue their batches one after
// another instead of at once: the burst no longer fills L2's queues while MERGE stores and releases (without O's
// staging MERGE's span fell 2.1 -> 1.5 us). Warp w issues w x kPaceOCycles after the tile starts.
__device__ __forceinline__ void stage_paced(const KernelParams& p, const Tile& t, uint8_t* stage, uint16_t* bias,
                                            bool after_attn) {
  if (!kFlags && after_attn && t.op == kOpResid && weight_cols(p, t.weight) != p.h.intermediate) {
    const long long t0 = clock64(), d = static_cast<long long>(threadIdx.x >> 5) * kPaceOCycles;
    while (clock64() - t0 < d) {
    }
  }
  if constexpr (kFp8) {
    if (tile_is_e4m3(t)) {
      stage_first_batch<true>(p, t, stage, bias);
      return;
    }
  }
  stage_first_batch<false>(p, t, stage, bias);
}

// A matvec tile's input vector into shared memory: RESID's bf16 input (and its residual rows, issued together: one
// L2 round trip; the copy's barrier publishes them), else the RMSNorm of the fp32 residual.
__device__ __forceinline__ void matvec_input(const KernelParams& p, const Tile& t, int32_t cols, uint16_t* vec,
                                             float* red, float* rsd, uint32_t epoch) {
  if (t.op == kOpResid) {
    const float* resid = reinterpret_cast<const float*>(buffer_ptr(p, t.in2_buf));
    for (int32_t r = threadIdx.x; r < t.row_end - t.row_begin; r += kThreads)
      rsd[r] = get_f32(p, resid, t.out_offset + r, epoch);
  }
  if (t.op == kOpResid) {
    copy_bf16_to_smem(p, reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in_buf)), cols, vec, epoch);
  } else {
    rmsnorm_to_smem(p, reinterpret_cast<const float*>(buffer_ptr(p, t.in_buf)), p.weights[t.norm], cols, vec, red,
                    epoch);
  }
}

// EMBED: the step's token (the launch's input, else the previous step's ARGMAX) checked against the vocabulary
// (thread 0, published through s_flag / s_tok), then its embedding row as fp32. False on a bad token.
__device__ __forceinline__ bool embed_tile(const KernelParams& p, const Tile& t, const StepCtx& sc, int32_t worker,
                                           int32_t ti, int* s_flag, int64_t* s_tok) {
  const int tid = threadIdx.x;
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
  return true;
}

// An FP8 plan's matvec over E4M3 rows (FP8 kernels only): the tile's matrices and their scales (KernelParams
// scale_of), in the plan's scale layout. Out of line: one call per tile, and it keeps the E4M3 loops' registers out
// of the tile loop.
__device__ __forceinline__ void matvec_e4m3(const KernelParams& p, const Tile& t, int32_t cols, const uint16_t* vec,
                                         const MatvecOut& o, float* red, const uint8_t* stage) {
  if constexpr (kFp8) {
    const bool pair = t.op == kOpGateup;
    MatvecScales s;
    s.a = reinterpret_cast<const float*>(p.weights[p.scale_of[t.weight]]);
    s.b = pair ? reinterpret_cast<const float*>(p.weights[p.scale_of[t.weight2]]) : s.a;
    s.blocks = (cols + kScaleBlockSize - 1) / kScaleBlockSize;
    const uint16_t* W2 = pair ? p.weights[t.weight2] : nullptr;  // QKV's weight2 is its BF16 bias (o.bias)
    if (p.h.scale_layout == kScalePerChannel) {
      matvec<kWE4m3Row>(p, p.weights[t.weight], W2, cols, vec, o, red, stage, s);
    } else {
      matvec<kWE4m3Block>(p, p.weights[t.weight], W2, cols, vec, o, red, stage, s);
    }
  }
}

// Runs one tile. False when the worker must stop (an error was raised).
// `rec`: the tile's local plan record (load_plan_smem) or null.
// `times`: this tile's kTileTimes timestamps (TILE_TIMING builds) or null.
// `after_attn`: the worker's previous tile was an ATTN tile.
// The matvec epilogue's setup and the ARGMAX case stay inline: moved into helpers, even forced inline, they change
// the flag kernel's code generation (scripts/sass.sh).
template <int HD>
__device__ bool run_tile(const KernelParams& p, int32_t ti, const Tile& t, const int32_t* rec, const StepCtx& sc,
                         int32_t worker, uint8_t* smem, const SmemLayout& L, int* s_flag, int64_t* s_tok,
                         unsigned long long* times, bool local_merge, bool after_attn) {
  const int tid = threadIdx.x;
#if TILE_TIMING
  if (tid == 0) g_tile_times = times;
#endif
#ifdef TILE_FLAG_HANDOFF
  if (tid == 0) {
    g_fl_tile = ti;
    g_fl_step = sc.step;
  }
#endif
  TILE_MARK(kTimeStart);
  const bool is_matvec = op_is_matvec(t.op);
  uint8_t* stage = is_matvec ? smem + L.stage : nullptr;
  // A QKV tile's bias words go to the RESID rows' shared memory (unused by QKV), staged with its weights.
  uint16_t* bias = t.op == kOpQkv && t.weight2 >= 0 ? reinterpret_cast<uint16_t*>(smem + L.rsd) : nullptr;
  if (stage != nullptr) stage_paced(p, t, stage, bias, after_attn);
  const bool attn_pre = t.op == kOpAttn;
  if (attn_pre) attn_prestage(p, t, sc.pos, smem, L);
  // A local MERGE's inputs are this block's shared memory: nothing to wait for. Flag builds poll every scratch input
  // where it is read; only EMBED (the previous step's token, in p.tokens) waits on a counter.
  if (!local_merge && (!kFlags || t.op == kOpEmbed) && !wait_tile(p, t, sc.epoch, worker, ti, sc.step, rec)) {
    if (stage != nullptr || attn_pre) cp_async_wait_all();  // no copy may land in a block that has exited
    return false;
  }
  // attn_prestage's RoPE tables are read by other threads: in counter builds the wait's barrier publishes them, a
  // flag build's ATTN tile has no wait.
  if (kFlags && attn_pre) __syncthreads();
  TILE_MARK(kTimeWaited);
  uint16_t* vec = reinterpret_cast<uint16_t*>(smem + L.vec);
  float* red = reinterpret_cast<float*>(smem + L.red);
  bool kept_local = false;  // an ATTN tile that wrote no partials (attn_tile): its MERGE signals for it
  switch (t.op) {
    case kOpEmbed:
      if (!embed_tile(p, t, sc, worker, ti, s_flag, s_tok)) return false;
      break;
    case kOpQkv:
    case kOpGateup:
    case kOpLmhead:
    case kOpResid: {
      const int32_t cols = weight_cols(p, t.weight);
      float* rsd = reinterpret_cast<float*>(smem + L.rsd);
      const bool resid_smem = t.op == kOpResid;
      matvec_input(p, t, cols, vec, red, rsd, sc.epoch);
      TILE_MARK(kTimePhase1);
      MatvecOut o;
      o.op = t.op;
      o.row_begin = t.row_begin;
      o.row_end = t.row_end;
      o.out_offset = t.out_offset;
      o.out_bf16 = nullptr;
      o.out_f32 = nullptr;
      o.resid = nullptr;
      o.resid_smem = resid_smem ? rsd : nullptr;
      o.bias = bias;
      o.logits = nullptr;
      o.epoch = sc.epoch;
#ifdef TILE_FLAG_HANDOFF
      o.params = &p;
#endif
      if (t.op == kOpQkv || t.op == kOpGateup) o.out_bf16 = reinterpret_cast<uint16_t*>(buffer_ptr(p, t.out_buf));
      if (t.op == kOpResid) {
        o.out_f32 = reinterpret_cast<float*>(buffer_ptr(p, t.out_buf));
        o.resid = reinterpret_cast<const float*>(buffer_ptr(p, t.in2_buf));
      }
      if (t.op == kOpLmhead) {
        o.logits = p.logits + int64_t(sc.step) * p.h.vocab;
        // The rows in the residual's shared memory (unused by LMHEAD) where they fit, for lmhead_partial.
        if (t.row_end - t.row_begin <= p.h.hidden) o.out_f32 = rsd;
      }
      if constexpr (kFp8) {
        if (tile_is_e4m3(t)) {
          matvec_e4m3(p, t, cols, vec, o, red, stage);
        } else {
          matvec(p, p.weights[t.weight], nullptr, cols, vec, o, red, stage);  // the BF16 LM head
        }
      } else {
        matvec(p, p.weights[t.weight], t.weight2 >= 0 ? p.weights[t.weight2] : nullptr, cols, vec, o, red, stage);
      }
      TILE_MARK(kTimePhase2);
      if (t.op == kOpLmhead) {
        if (kSampler) {
          lmhead_sample(p, t.row_begin, t.row_end, o.logits, red, reinterpret_cast<float*>(buffer_ptr(p, t.out_buf)),
                        t.aux0, sc.epoch, o.out_f32, sc.pos);
        } else {
          lmhead_partial(t.row_begin, t.row_end, o.logits, red, reinterpret_cast<float*>(buffer_ptr(p, t.out_buf)),
                         t.aux0, sc.epoch, o.out_f32);
        }
      }
      break;
    }
    case kOpAttn:
      // Per-head q/k norms (Qwen3): q rotated and the new row appended here, before attn_tile (called inside it, the
      // head_dim-64 counter kernel's stack frame is 8 bytes larger).
      if (t.norm >= 0 || t.weight2 >= 0)
        attn_norm_rotate<HD>(p, t.aux0, t.aux1, t.layer, t.in_buf, t.in2_buf, t.in3_buf, t.norm, t.weight2, sc.pos,
                             attn_pre, sc.epoch);
      kept_local = attn_tile<HD>(p, t, sc.pos, smem, L, attn_pre, sc.epoch);
      break;
    case kOpMerge:
      if (local_merge) {
        merge_local(p, t, smem, L, sc.epoch);
      } else {
        merge_tile(p, t.aux0, t.in_buf, t.out_buf, reinterpret_cast<float*>(smem + L.msf), sc.epoch);
      }
      break;
    case kOpArgmax: {
      if (kSampler) {
        if (!argmax_sample(p, reinterpret_cast<const float*>(buffer_ptr(p, t.in_buf)), t.aux0, sc.epoch, sc.step,
                           sc.pos, ti))
          return false;
        break;
      }
      if (tid < 32) {
        const float* part = reinterpret_cast<const float*>(buffer_ptr(p, t.in_buf));
        float bv = -INFINITY;
        int32_t bi = INT32_MAX;
#ifdef TILE_FLAG_HANDOFF
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
  TILE_MARK(kTimeDone);
  if (kept_local) {
    __syncthreads();  // the local MERGE reads this tile's shared memory
  } else if (!kFlags || t.op == kOpArgmax) {
    signal_tile(p, t, local_merge && t.aux1 > 0 ? t.aux1 - 1 : -1);
  } else {
    __syncthreads();  // the next tile's staging reuses this one's shared memory
  }
  TILE_MARK(kTimeSignalled);
#ifdef TILE_FLAG_HANDOFF
  if (g_fl_abort) return false;  // a poll gave up (published by the barrier above)
#endif
  return true;
}

// Whether attention partition 0 holds every position of the step at `pos` (the local merge's condition).
__device__ __forceinline__ bool partition0_holds_all(const KernelParams& p, int64_t pos) {
  int32_t lo0, hi0;
  attn_partition_range(static_cast<int32_t>(pos + 1), 0, p.h.attn_partitions, p.h.attn_granule, p.h.attn_single,
                       &lo0, &hi0);
  return hi0 >= pos + 1;
}

// Thread 0 before step s > 0: the previous step's token (ARGMAX's counter), so that every worker decides alike
// whether the step runs. Publishes s_flag (0: an error, the worker exits) and s_stop (1: EOS, the launch ends).
__device__ __forceinline__ void step_boundary(const KernelParams& p, int32_t s, uint32_t epoch0, int64_t pos,
                                              int32_t worker, int* s_flag, int* s_stop) {
  int stop = 0, ok = 1;
  if (!wait_counter(p, p.h.argmax_counter, epoch0 + static_cast<uint32_t>(s), worker, -1, s)) {
    ok = 0;
  } else if (is_eos(p, __ldcg(p.tokens + s - 1))) {
    stop = 1;
  } else if (pos >= p.max_cache_len) {
    raise_error(p, kErrorCacheFull, worker, -1, s, -1, static_cast<uint32_t>(pos),
                static_cast<uint32_t>(p.max_cache_len));
    ok = 0;
  }
  *s_flag = ok;
  *s_stop = stop;
}

// After an early stop (EOS), the steps not executed: their logits rows NaN, spread over the workers that have tiles
// (rank among them), their tokens -1. All threads of every worker with tiles.
__device__ __forceinline__ void fill_steps_not_run(const KernelParams& p, int32_t worker, int32_t steps_done) {
  const int tid = threadIdx.x;
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

}  // namespace

// The persistent kernel for plans of head_dim HD; each translation unit instantiates one.
template <int HD>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const __grid_constant__ KernelParams p) {
  uint8_t* smem = g_smem;
  __shared__ int s_flag;
  __shared__ int s_stop;
  __shared__ uint32_t s_epoch0;
  __shared__ int64_t s_pos0;
  __shared__ int64_t s_tok;
  const int tid = threadIdx.x;
  const int32_t worker = blockIdx.x;
  // The launch filled it (launch_cooperative): constant-bank reads, no registers held. The flag kernels compute their
  // own: with the parameter SmolLM2 ran 2.6% slower, and they had no spills to remove.
#ifdef TILE_FLAG_HANDOFF
  const SmemLayout L = smem_layout(p.h);
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
#ifdef TILE_FLAG_HANDOFF
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
  const bool plan_local = load_plan_smem(p, L, tbeg, tend);
  const int32_t* recs = reinterpret_cast<const int32_t*>(smem + L.prec);
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
    if (s > 0) {
      // Learn the previous step's token: every worker decides identically whether this step runs.
      if (tid == 0) step_boundary(p, s, epoch0, sc.pos, worker, &s_flag, &s_stop);
      __syncthreads();
      const int ok = s_flag, stop = s_stop;
      __syncthreads();
      if (!ok) return;
      if (stop) {
        steps_done = s;
        break;
      }
    }
    // The local merge: (layer, KV head) + 1 of the partition-0 ATTN tile just run on this worker, 0 otherwise; and
    // whether partition 0 holds every position of this step.
    int32_t attn0_key = 0;
    const bool attn0_all = partition0_holds_all(p, sc.pos);
    bool after_attn = false;  // the previous tile of this worker was an ATTN tile (run_tile's pace)
    for (int32_t k = tbeg; k < tend; ++k) {
      const int32_t* rec;
      const Tile t = tile_k(k, &rec);
      const int32_t key = t.layer * 1024 + t.aux0 + 1;
      const bool local_merge = attn0_all && t.op == kOpMerge && attn0_key == key;
      attn0_key = t.op == kOpAttn && t.aux1 == 0 ? key : 0;
      const int32_t ti = __ldg(wtiles + k);  // for error reports only (off the critical path)
      unsigned long long* times = nullptr;
#if TILE_TIMING
      if (p.tile_times != nullptr && k - tbeg < p.tile_times_stride)
        times = p.tile_times +
                ((int64_t(s) * p.h.num_workers + worker) * p.tile_times_stride + (k - tbeg)) * kTileTimes;
#endif
      if (!run_tile<HD>(p, ti, t, rec, sc, worker, smem, L, &s_flag, &s_tok, times, local_merge, after_attn))
        return;
      after_attn = t.op == kOpAttn;
    }
  }

  if (steps_done < p.num_steps) fill_steps_not_run(p, worker, steps_done);
}

namespace {
// The cooperative launch: num_workers blocks, all co-resident, the layout's shared memory. The layout goes in the
// kernel's parameters.
template <typename Kernel>
cudaError_t launch_cooperative(const KernelParams& p0, Kernel kernel, cudaStream_t stream) {
  KernelParams p = p0;
  p.layout = smem_layout(p.h);
  const SmemLayout L = smem_layout(p.h);
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

constexpr int kVariantHeadDim = TILE_HEAD_DIM;
static_assert(attn_warps_fit(1, 1, kVariantHeadDim), "a kernel per head_dim of TILE_ATTN_HEAD_DIMS (plan_format.h)");
}  // namespace

// This translation unit's exports (decode_kernel.h): TILE_VARIANT(name) = decode_<hand-off>_hd<head_dim>_<name>.
cudaError_t TILE_VARIANT(set_smem_limit)(int32_t bytes) {
  return cudaFuncSetAttribute(decode_kernel<kVariantHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              bytes);
}

cudaError_t TILE_VARIANT(blocks_per_sm)(int32_t smem_bytes, int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, decode_kernel<kVariantHeadDim>, kThreads,
                                                       smem_bytes);
}

cudaError_t TILE_VARIANT(launch)(const KernelParams& p, cudaStream_t stream) {
  return launch_cooperative(p, decode_kernel<kVariantHeadDim>, stream);
}

}  // namespace cuda
}  // namespace tiles
