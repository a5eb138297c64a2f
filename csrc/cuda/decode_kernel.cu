// The persistent decode kernel: one block per worker executes exactly its worker_tiles list of the plan, for every
// step of the launch. Semantics of every op: planner/format.py (docstring). Dependencies are the plan's monotonic
// counters (release/acquire at GPU scope); every spin-wait is bounded and reports through the state's error words.
//
// Weight streaming: plain 16-byte ld.global.nc loads, 8 in flight per lane (two rows x kUnroll = 4 chunks: 64 KB
// per SM; 128 KB cost 7%, queueing every hand-off behind the stream: docs/perf-log.md v9), each warp's first batch
// of a matvec tile staged into shared memory by cp.async before the tile waits on its dependencies (weights never
// depend on activations). docs/perf-log.md records the alternatives measured (L2 prefetch, rings, bulk copies).
//
// Reads of data produced inside the launch (scratch buffers, KV cache, tokens) use ld.global.cg (L2, never a stale
// L1 line); weights use ld.global.nc. Reductions run in a fixed order, so results are bit-identical run to run.
//
// This file holds the tile loop (run_tile), the kernel and its launches; the tiles' code is in parts that it includes
// in this order, one job each: kernel_config.cuh (build switches, timing marks), device_helpers.cuh (PTX wrappers,
// reductions), plan_access.cuh, waits.cuh (errors, counter waits, release; flag_data.cuh in flag builds),
// prefetch.cuh, matvec.cuh, weight_ring.cuh and weight_stream.cuh (runtime-options kernel only), attention.cuh,
// merge.cuh. decode_kernel_default.cu and decode_kernel_flags.cu compile this file again as the default variants.
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

#include "cuda/kernel_config.cuh"

namespace {

#include "cuda/device_helpers.cuh"
#include "cuda/plan_access.cuh"
#include "cuda/waits.cuh"
#include "cuda/prefetch.cuh"
#include "cuda/matvec.cuh"
#include "cuda/weight_ring.cuh"
#include "cuda/weight_stream.cuh"
#include "cuda/attention.cuh"
#include "cuda/merge.cuh"

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
