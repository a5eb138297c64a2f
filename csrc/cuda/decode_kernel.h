// The persistent decode kernel's launch interface: plain C++ and CUDA runtime types only (no torch), so the kernel's
// translation unit compiles with nvcc alone and the torch glue (decode_step_cuda.cpp) only fills this struct.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "plan_format.h"

namespace tiles {
namespace cuda {

// Compile-time switch of the per-tile timestamps (off in the product build: no code, no cost).
#ifndef TILES_TILE_TIMING
#define TILES_TILE_TIMING 0
#endif

// The attention's warp path (perf log v45): each warp owns 8 positions of every K/V chunk end to end. On by default;
// TILES_ATTN_WARPS=0 (a build knob, setup.py) compiles the five-step chunk loop everywhere, for A/B measurements.
// TILES_ATTN_TC (perf log v63, v63e; the default since session 26): the warp path's scores and o update on the tensor
// cores (ldmatrix + mma.m16n8k16 / m16n8k8, q and the probabilities as hi + lo bf16 halves), the rest of the warp
// path unchanged. TILES_ATTN_TC=0 (a build knob, setup.py) compiles session 22's FFMA warp path, for A/B.
#ifndef TILES_ATTN_TC
#define TILES_ATTN_TC 1
#endif
#ifndef TILES_ATTN_WARPS
#define TILES_ATTN_WARPS 1
#endif

constexpr int kThreads = 512;          // threads per worker block (16 warps)
constexpr int kWarps = kThreads / 32;
constexpr int kMaxLayers = 64;         // bounds the by-value pointer tables below (kernel params up to 32 KB)
// Weight pointers passed by value: 9 per layer (Llama's slots) plus the model's 3 final ones. The op refuses a plan
// with more (h.num_weights).
constexpr int kMaxWeights = kMaxLayers * 9 + 3;
constexpr int kMaxGroup = kWarps;      // query heads per KV head: one warp per head in the softmax update
// kAttnChunkElems (plan_format.h): KV positions staged per attention chunk = kAttnChunkElems / head_dim.
// 16-byte weight chunks per lane and row issued before the first use: with two rows, kUnroll x 16 KB in flight per
// SM. TILES_KUNROLL (a build-time experiment knob: setup.py and scripts/tile_timing.py pass it) changes it.
// The flag-hand-off kernel (decode_kernel_flags.cu, given to small models) has its own value, TILES_FLAGS_KUNROLL:
// 3 there measured 1% faster on SmolLM2 (its stages are hand-off bound; perf log, session 12), while Llama-1B's
// counter kernel loses 5% at 3. The host sizes shared memory with kUnroll 4's stage, which holds the smaller one.
#ifndef TILES_KUNROLL
#define TILES_KUNROLL 4
#endif
#ifndef TILES_FLAGS_KUNROLL
#define TILES_FLAGS_KUNROLL 3
#endif
#ifdef TILES_FLAGS
constexpr int kUnroll = TILES_FLAGS_KUNROLL;
#else
constexpr int kUnroll = TILES_KUNROLL;
#endif
static_assert(kUnroll >= 2 && kUnroll <= 8, "TILES_KUNROLL, TILES_FLAGS_KUNROLL: 2 to 8");
// Per-tile timestamps (TILES_TILE_TIMING builds): start (before staging and the wait), wait done, signalled, then
// two phase marks inside the tile (matvec: input vector ready, arithmetic done; ATTN: q and the new row ready,
// chunk loop done; MERGE: scale factors ready, output written) and just before the signal. 0 = not reached.
constexpr int kTileTimes = 6;
enum : int { kTimeStart = 0, kTimeWaited = 1, kTimeSignalled = 2, kTimePhase1 = 3, kTimePhase2 = 4, kTimeDone = 5 };
constexpr int kNormRegs = 8;           // residual elements per thread held in registers by the one-read RMSNorm
constexpr int kStageBytesPerWarp = 2 * kUnroll * 32 * 16;  // one batch of two rows (kOptStageWeights)
// kOptWeightRing: a batch is one row's kRingChunks 16-byte chunks (4 per lane). Four slots per warp, so that while a
// warp computes one row pair the next pair is already in flight (with two 4 KB slots a warp's stream stopped at
// every pair: v6 in docs/perf-log.md).
constexpr int kRingChunks = 128;
constexpr int kRingSlots = 4;
constexpr int kRingSlotBytes = kRingChunks * 16;
constexpr int kRingCurWords = 16;                    // one RingCur (decode_kernel.cu) in shared memory
// Opt-in shared memory per block on sm_90 (227 KB), less 1 KB for the kernel's static shared variables.
constexpr int32_t kMaxSmemPerBlock = 227 * 1024 - 1024;

// Latency options, a bitmask (TILES_KERNEL_OPT; default kOptDefault; 0 = the v1 path). All verified on the H200
// on 2026-11-30 (docs/perf-log.md v3). Every option
// leaves every result bit-identical (same values, same reduction order); tests/test_cuda_kernel.py checks that.
constexpr int32_t kOptNormRegs = 1;      // RMSNorm reads the fp32 residual once (registers), not twice
constexpr int32_t kOptResidSmem = 2;     // RESID loads its residual rows together with its input vector
constexpr int32_t kOptStageWeights = 4;  // each warp's first weight batch is copied (cp.async) BEFORE the wait
constexpr int32_t kOptNoFence = 8;       // no __threadfence before the release increment (the release orders it)
constexpr int32_t kOptPlanSmem = 16;     // the worker's tile + wait records, buffer offsets, weight widths in smem
constexpr int32_t kOptPrefetchPastStage = 32;  // with StageWeights: the L2 prefetch starts after the staged rows
constexpr int32_t kOptAttnPrestage = 64;  // ATTN: RoPE tables + cached K/V rows < pos of chunk 1 staged before the wait
// Replaces 4's cp.async staging: each warp's first batch goes to shared memory by 1-D bulk copies (TMA engine,
// completing on a per-warp mbarrier), not through the LSU queue that the poll and the input loads use; and once a
// warp has read its staged batch it issues the batch of the worker's NEXT matvec tile into the same place, so
// those weights stream while the current tile computes (docs/perf-log.md v4).
// Measured (v4): 95|128 1.178 ms against 1.082 for 95: hand-offs back to ~0.5 us, but the look-ahead copies take the
// current tile's bandwidth (the next tile's 64-128 KB per SM land inside the current, critical tile).
constexpr int32_t kOptBulkStage = 128;
// With 128: no look-ahead; each matvec tile stages its own first batch by bulk copies just before its wait (after
// the previous tile's signal, when this SM streams nothing else): bit 4's timing through the copy engine. Not yet
// measured on the device (v4 in docs/perf-log.md).
constexpr int32_t kOptBulkNoAhead = 256;
// ATTN: the K/V rows of chunk c+1 are copied (cp.async) into a second buffer while chunk c is computed, so a tile's
// loads no longer wait for its arithmetic (at 16K positions the tile is latency-bound: docs/perf-log.md v5). Same
// chunk length, same arithmetic order: only where the bytes come from changes. The second buffer is the idle weight
// stage with bit 4 (not 128, not the ring), else appended where it fits in kMaxSmemPerBlock (else the single-buffer
// path runs).
constexpr int32_t kOptAttnDoubleBuffer = 512;
// The weight ring: every warp streams the weight rows of ITS work items, in the order it consumes them, through a
// ring of kRingSlots slots of kRingSlotBytes in shared memory filled by 1-D bulk copies (TMA engine), across tile,
// stage and step boundaries. A slot is refilled with the warp's next batch as soon as the arithmetic has read it, so
// an SM keeps its next kWarps x kRingSlots x kRingSlotBytes of weights in flight or landed, also while it waits on a
// dependency. Measured slower than plain loads (docs/perf-log.md v6): kept switchable, in its own instantiation.
// Replaces 4, 128, 256 and the L2 prefetch for matvec tiles. Needs the plan records in shared memory (16; without
// them the worker runs the path without the ring). TILES_RING_L2_AHEAD = n additionally prefetches into L2 the n
// batches per warp that follow the ring (deeper than shared memory allows).
constexpr int32_t kOptWeightRing = 1024;
// With 4 (not 128, not the ring): two stage slots. Before a matvec tile waits, each warp also stages the first batch
// of the worker's NEXT matvec tile into the other slot, so that tile's first weights stream during this tile's wait
// and work, i.e. across the ATTN/MERGE and o-projection stages where the memory system idles. Same values, same
// order: only where the bytes come from changes. Its own kernel instantiation. Measured slower (docs/perf-log.md
// v11: 2655 1.037 vs 607 0.998 ms at context 32): the extra burst at every boundary delays the hand-offs.
constexpr int32_t kOptStageAhead = 2048;
// While thread 0 polls a counter in an ATTN, MERGE or o-projection tile, each poll that finds the counter short
// also prefetches into L2 (cp.async.bulk.prefetch.L2) the next piece of this worker's GATEUP tile of the same layer:
// the memory system idles through those stages (docs/perf-log.md, session 3 phase table), and one piece per poll
// round trip paces the stream (no burst at a boundary, the failure of 95, 479, 2648 and prefetch-next).
// TILES_POLL_PREFETCH_BYTES (piece per poll, per matrix; default 8192) and TILES_POLL_PREFETCH_CAP (bytes per matrix
// and tile; default 262144). Its own kernel instantiation. Measured slower (docs/perf-log.md v12: 4703 1.049 vs 607
// 1.020 ms at context 32): even paced, the bytes lengthen the ATTN -> MERGE -> o chain they run beside.
constexpr int32_t kOptPollPrefetch = 4096;
// MERGE reads each partition's m and l in one L2 round trip when P <= 32 (two otherwise: m, then m and l). Same
// values, same order of operations. -1% at context 4064 (docs/perf-log.md v14).
constexpr int32_t kOptMergeOneTrip = 8192;
// A MERGE tile that runs right after the partition-0 ATTN tile of its KV head on the same worker (the planner puts
// it there), at a context that partition 0 holds alone (up to one chunk with the default granule), neither waits
// nor reads the partials: it normalises the ATTN tile's o and l still in shared memory (bf16(o * (1 / l)), MERGE's
// arithmetic for one live partition, so bit-identical). One dependent hand-off less per layer at short context.
constexpr int32_t kOptLocalMerge = 16384;
// When an ATTN tile's wait ends (its KV head's q, k, v rows are done, so the QKV stream is draining), warp 0
// prefetches into L2 the first kWarps * kStageBytesPerWarp bytes (per matrix) of the worker's next matvec tile (the o
// projection): the batch that tile stages before its own wait then comes from L2, not from a cold HBM queue
// (session 3: the o tile's main phase is 2.2 us although its rows are staged). Needs the plan in shared memory (16).
// Compiled into PollPrefetch's instantiation only (new code in the default one made it spill). Measured slower
// (docs/perf-log.md v16: +5.6% at context 32): the 8 MB burst delays the ATTN -> MERGE chain.
constexpr int32_t kOptPrefetchAfterAttn = 32768;
// The weight stream: one block-wide ring of sstages x sstage_bytes (32 KB) in shared memory, filled by 1-D bulk
// copies (TMA engine) of whole row groups, in the order the worker's matvec tiles read them, across tiles, stages
// and steps; a slot is refilled by whichever warp releases it last, so the ring refills as fast as the arithmetic
// frees it and fills up (then idles) while the block waits on a dependency: the next tiles' weights land during
// every hand-off, up to the ring's depth (~4 us of this SM's share of the bandwidth at 128 KB). The arithmetic
// reads each row's chunks in the same per-lane order as the plain loads: bit-identical. Replaces 4, 128, 1024, 2048
// and the matvec L2 prefetch. Needs the plan records in shared memory (16). TILES_STREAM_STAGES sets the ring's
// depth (2..kStreamMaxStages; 0 = kStreamDefaultStages, fewer where they do not fit). Its own instantiation.
// Why again after v6's per-warp ring lost: that ring moved 2 KB per copy and kept 128 KB in flight per warp group;
// this one moves 32 KB per copy, block-wide (the reference stream of 16-64 KB copies reads 4.54 TB/s).
// Measured 45% slower in session 5 (docs/perf-log.md v19: the LM head streamed at 2.97 TB/s where the standalone
// probe of the same protocol reads 4.5). Session 6's stage trace found why: the issuing lane also prepared the
// next fill (0.6 us), so one warp was last to release every stage and issued every fill; with the preparation
// moved to the first release, 13% slower than the plain path (1.05 against 0.93 ms, Llama-1B, context 32).
constexpr int32_t kOptStream = 65536;
// Thread 0 polls a short counter with three relaxed loads in flight, TILES_POLL_GAP SM cycles apart (default 0),
// instead of one acquire load per L2 round trip (decode_kernel.cu wait_counter_ahead says why and what orders the
// reads; TILES_POLL_FENCE=1 adds an acquire fence after the detection). PollPrefetch's instantiation. Measured
// (docs/perf-log.md v26): -1.3% (SmolLM2) / -1.6% (Llama-1B) at gap 0 against that instantiation with plain polling,
// which itself is 5-8% slower than the default one: an experiment, not a default.
constexpr int32_t kOptPollAhead = 131072;
constexpr int32_t kOptAll = 262143;
constexpr int32_t kStreamMinStageBytes = 32 * 1024;
constexpr int32_t kStreamMaxStages = 8;
// 3 x 32 KB: the best depth in two of session 5's calls (1.36 against 1.38 / 1.42 for 2 / 4 stages), and on
// Llama-1B it leaves room for the attention double buffer (kOptAttnDoubleBuffer), which 4 stages do not.
constexpr int32_t kStreamDefaultStages = 3;
// Stage-table entries at most (8 bytes each; a worker whose step has more stages walks its tile records instead).
constexpr int32_t kStreamMaxDesc = 1024;
// The set used when TILES_KERNEL_OPT is unset: the fastest set that passed every bit-identity and parity check on
// the H200 (docs/perf-log.md).
// 607 (v5, 2026-11-30 session 2): as 95 at context 32 (1.0837 vs 1.0839 ms), 1.258 vs 1.278 at 4064, 1.846 vs
// 1.969 at 16000 (Llama-1B, graph replay). With kUnroll 4 (session 3, v9-v11): 0.998 ms at 32, 1.178 at 4064;
// 603 (no staging) +2.4% / +1.6%, 2655 (StageAhead) +4% / +5%.
// 25183 = 607 + 8192 + 16384 (session 4): LocalMerge -5.3% (Llama-1B) / -11% (SmolLM2) at context 32 and 100,
// MergeOneTrip -1% at 4064 (docs/perf-log.md v13, v14).
constexpr int32_t kOptDefault = kOptNormRegs | kOptResidSmem | kOptStageWeights | kOptNoFence | kOptPlanSmem |
                                kOptAttnPrestage | kOptAttnDoubleBuffer | kOptMergeOneTrip | kOptLocalMerge;

// kOptPlanSmem: per local tile a record of kPlanRecWords: the Tile (18 words), then up to kPlanRecWaits Wait records
// (a tile with more waits reads them from the blob). 96 bytes, a multiple of 16.
constexpr int kPlanRecWaits = 2;
constexpr int kPlanRecWords = kTileWords + kPlanRecWaits * kWaitWords;
static_assert(kPlanRecWords % 4 == 0, "plan records are read as 16-byte vectors");

// Dynamic shared memory layout (bytes), identical on host (sizing) and device (carving).
struct SmemLayout {
  int32_t vec;      // bf16 input vector of a matvec tile [max_in]
  int32_t red;      // fp32 partials of k-split rows [2 * kWarps]
  int32_t qf;       // fp32 rotated q [G][hd + 4] (padded: the G heads' rows start in different banks)
  int32_t of;       // fp32 running o [G * hd]
  int32_t opart;    // fp32 o partials of the position groups [splits * G * hd]
  int32_t ml;       // fp32 m, l, alpha per head [4 * G]
  int32_t cs;       // fp32 cos, sin [hd]
  int32_t sc;       // fp32 scores / probabilities [chunk * G]
  int32_t kbuf;     // bf16 K chunk [chunk][hd + 8] (padded against bank conflicts)
  int32_t vbuf;     // bf16 V chunk [chunk][attn_vstride(hd)]
  int32_t kbuf2;    // kOptAttnDoubleBuffer: second K chunk (as kbuf); -1 when off or it does not fit
  int32_t vbuf2;    // kOptAttnDoubleBuffer: second V chunk (as vbuf); -1 when off or it does not fit
  int32_t msf;      // fp32 merge scale factors [G * P]
  int32_t rsd;      // fp32 residual rows of a RESID tile [hidden] (kOptResidSmem)
  int32_t stage;    // staged weight batches [kWarps][kStageBytesPerWarp] (kOptStageWeights / kOptBulkStage)
  int32_t bars;     // kOptBulkStage: one mbarrier (8 bytes) per warp; kOptWeightRing: one per slot; else empty
  int32_t rcur;     // kOptWeightRing: two cursors per warp (ring, L2 look-ahead) [kWarps][2][kRingCurWords]
  int32_t sring;    // kOptStream: the ring [sstages][sstage_bytes], then StreamSlot records [sstages]
  int32_t sslots;
  int32_t sstages;  // 0 when the stream is off or fewer than two stages fit
  int32_t sstage_bytes;
  int32_t sdesc;    // kOptStream: the worker's stage table [sdesc_cap] (8 bytes per stage of a step), last
  int32_t sdesc_cap;  // 0: no room (the stream then walks the tile records per fill)
  int32_t ptab;     // kOptPlanSmem: buffer byte offsets [num_buffers], then weight widths [num_weights]; at 0
  int32_t prec;     // kOptPlanSmem: the worker's tile records [tiles_cap][kPlanRecWords]
  int32_t tiles_cap;  // local tile records that fit (a worker with more reads its tiles from the blob)
  int32_t total;
  int32_t chunk;    // positions per attention chunk
  int32_t splits;   // position groups of the o update
};

// Everything the kernel reads, passed BY VALUE (one struct kernel parameter): a CUDA graph that captures the
// launch needs no host-to-device copy, and replays see the same pointers.
struct KernelParams {
  const int32_t* plan;        // the blob on the device
  uint8_t* scratch;           // scratch arena (buffers of the plan)
  uint32_t* state;            // epoch, error words, counters (monotonic, never reset by the host)
  const int64_t* input_ids;   // [1]
  const int64_t* position;    // [1]
  const float* inv_freq;      // [head_dim / 2]
  float* logits;              // [num_steps, vocab]
  int64_t* tokens;            // [num_steps]
  float rope_scale;
  float eps;
  int32_t num_steps;
  int32_t num_eos;
  int32_t eos[kMaxEos];
  int32_t max_cache_len;
  // Host copy of the header (the device blob is checked against magic / total_words / num_tiles at start).
  Header h;
  uint64_t timeout_ns;        // bound of every spin-wait
  int32_t prefetch_bytes;     // per-tile L2 prefetch cap (cp.async.bulk.prefetch.L2), 0 = off
  int32_t prefetch_next;      // 1 = also prefetch the worker's next tile once the current one may run
  int32_t opt;                // kOpt* bitmask
  int32_t ring_l2_ahead;      // kOptWeightRing: batches per warp prefetched into L2 beyond the ring (0 = none)
  int32_t ring_fence;         // kOptWeightRing: 1 = fence.proxy.async before each refill (0 = none; see ring_release)
  int32_t ring_slots;         // kOptWeightRing: batches per warp in flight or landed, 2..kRingSlots (bytes in flight)
  int32_t poll_piece;         // kOptPollPrefetch: bytes per matrix prefetched per unsuccessful poll
  int32_t poll_cap;           // kOptPollPrefetch: bytes per matrix and GATEUP tile at most
  int32_t poll_gap;           // kOptPollAhead: SM cycles between two polls of a counter
  int32_t poll_fence;         // kOptPollAhead: 1 = fence.acq_rel.gpu once the counter is seen
  int32_t stream_stages;      // kOptStream: ring stages asked for (0 = kStreamDefaultStages); smem_layout decides
  int32_t stream_stage_bytes; // kOptStream: stage size asked for (0 = the minimum: 32 KB or two rows of the widest)
  int32_t stream_probe;       // kOptStream timing probes (TILES_STREAM_PROBE): 1 = no arithmetic (wrong results),
                              // 4 = copies with an L2 evict_first hint, 16 = weight pointers from the kernel
                              // parameters (not the shared-memory copy), 32 = no stage table (the fills walk
                              // the tile records, as when the table does not fit). (2, 8: perf log v19.)
  int32_t stream_piece;       // kOptStream: bytes per bulk copy (TILES_STREAM_PIECE; 0 = one copy per stage part)
  // Per-tile timing (built with TILES_TILE_TIMING=1 only; scripts/tile_timing.py): kTileTimes %globaltimer values
  // at [((step * num_workers + worker) * tile_times_stride + k) * kTileTimes + i] for the worker's k-th tile (i:
  // kTime*). Null (and ignored) in the product build.
  unsigned long long* tile_times;
  int32_t tile_times_stride;
  // kOptStream trace (TILES_TILE_TIMING builds only): per worker and stream stage m < stream_trace_cap,
  // kStreamTraceCols values (kStreamTrace*). Null (and ignored) otherwise.
  int32_t stream_trace_cap;
  unsigned long long* stream_trace;
  const uint16_t* weights[kMaxWeights];  // bf16 bit patterns, plan weight order
  uint16_t* k_cache[kMaxLayers];         // per layer [num_kv_heads, max_cache_len, head_dim] bf16
  uint16_t* v_cache[kMaxLayers];
  // smem_layout of the launched instantiation, filled by the launch (launch_cooperative): the kernel reads the
  // offsets from the parameter (constant) bank where it uses them. Computed in the kernel, ~20 of them stayed live
  // in registers for the whole launch, and at the 128-register bound the allocator spilled some into the tile loop
  // (perf log, session 16).
  SmemLayout layout;
  int32_t pace_cycles;  // v48: an o-projection tile after an ATTN tile stages warp w's batch w x this late (cycles)
};
// v48's default pace (TILES_PACE_O_CYCLES overrides it; the op and the timing build read it the same way): 200
// measured best at ctx 32 against 0, 100-250 and 400 (perf log, session 17).
constexpr int32_t kPaceOCyclesDefault = 200;
constexpr int32_t kPaceOCyclesMax = 100000;
// Stream trace columns: the fill's issue, the stage's op, the issuing lane's preparation done and its warp; per
// warp: its (last) wait done, its arithmetic begun and ended (warps with an item in the stage), its release.
constexpr int32_t kStreamTraceIssue = 0;
constexpr int32_t kStreamTraceOp = 1;
constexpr int32_t kStreamTracePrepared = 2;
constexpr int32_t kStreamTraceIssuer = 3;
constexpr int32_t kStreamTraceWait = 4;
constexpr int32_t kStreamTraceBegin = 4 + kWarps;
constexpr int32_t kStreamTraceEnd = 4 + 2 * kWarps;
constexpr int32_t kStreamTraceRelease = 4 + 3 * kWarps;
constexpr int32_t kStreamTraceIssueNs = 4 + 4 * kWarps;  // %globaltimer at the issue (the others: clock64)
constexpr int32_t kStreamTraceCols = 5 + 4 * kWarps;
static_assert(sizeof(KernelParams) <= 32000, "kernel parameters are limited to 32 KB (CUDA 12.1+)");


// kOptStageAhead takes effect with 4 and without 128 and the ring (which own the stage then).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr bool stage_ahead(int32_t opt) {
  return (opt & kOptStageAhead) && (opt & kOptStageWeights) && !(opt & (kOptBulkStage | kOptWeightRing));
}

// Row stride (elements) of a staged V chunk. The tensor-core warp path (TILES_ATTN_TC) pads it as K's is: its
// ldmatrix.trans reads take 8 rows at once, conflict-free only with the pad.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int32_t attn_vstride(int32_t hd) {
#if TILES_ATTN_TC
  return hd + 8;
#else
  return hd;
#endif
}

#if defined(__CUDACC__)
__host__ __device__
#endif
inline SmemLayout smem_layout(const Header& h, int32_t opt, int32_t stream_stages = 0,
                              int32_t stream_stage_bytes = 0) {
  auto up16 = [](int32_t x) { return (x + 15) / 16 * 16; };
  SmemLayout s;
  const int32_t G = h.num_heads / h.num_kv_heads, hd = h.head_dim;
  int32_t max_in = h.hidden;
  if (h.num_heads * hd > max_in) max_in = h.num_heads * hd;
  if (h.intermediate > max_in) max_in = h.intermediate;
  s.chunk = kAttnChunkElems / hd;
  // attn_tile's o partials: one thread per (split, head, 8 dims); the splits cover a chunk's positions.
  s.splits = G * hd / 8 >= kThreads ? 1 : kThreads / (G * hd / 8);
  int32_t o = 0;
  // The plan tables come first (offset 0): buffer_ptr / weight_cols find them without the layout.
  const bool plan_smem = (opt & kOptPlanSmem) != 0;
  s.ptab = o; o += plan_smem ? up16((h.num_buffers + h.num_weights) * 4) : 0;
  {
    const int32_t per = (h.num_tiles + h.num_workers - 1) / (h.num_workers > 0 ? h.num_workers : 1);
    int32_t cap = per + per / 2 + 16;
    if (cap > 1024) cap = 1024;
    s.tiles_cap = plan_smem ? cap : 0;
  }
  s.prec = o; o += s.tiles_cap * kPlanRecWords * 4;
  s.vec = o; o += up16(max_in * 2);
  s.red = o; o += up16(2 * kWarps * 4);
  s.qf = o; o += up16(G * (hd + 4) * 4);
  s.of = o; o += up16(G * hd * 4);
  s.opart = o; o += up16(s.splits * G * hd * 4);
  s.ml = o; o += up16(4 * G * 4);
  s.cs = o; o += up16(hd * 4);
  s.sc = o; o += up16(G * (s.chunk + 8) * 4);
  s.kbuf = o; o += up16(s.chunk * (hd + 8) * 2);
  s.vbuf = o; o += up16(s.chunk * attn_vstride(hd) * 2);
  s.msf = o; o += up16(G * h.attn_partitions * 4);
  s.rsd = o; o += up16(h.hidden * 4);
  // The weight ring's slots take the place of the stage (128 KB; 4, 128 and 256 are off with it).
  const bool ring = (opt & kOptWeightRing) != 0;
  const bool stream = (opt & kOptStream) != 0 && !ring;  // replaces the stage (4, 128, 2048); the ring wins
  const bool ahead = stage_ahead(opt) && !stream;
  s.stage = o;
  o += ring     ? kWarps * kRingSlots * kRingSlotBytes
       : stream ? 0
                : (opt & (kOptStageWeights | kOptBulkStage)) ? (ahead ? 2 : 1) * kWarps * kStageBytesPerWarp : 0;
  // The stream's ring: a stage holds whole units (two rows, or a gate and an up row), so a stage is
  // two rows of the widest matrix at least (2 x 2 bytes x max_in).
  s.sring = s.sslots = o;
  s.sstages = 0;
  s.sstage_bytes = up16(4 * max_in) > kStreamMinStageBytes ? up16(4 * max_in) : kStreamMinStageBytes;
  if (up16(stream_stage_bytes) > up16(4 * max_in)) s.sstage_bytes = up16(stream_stage_bytes);
  else if (stream_stage_bytes > 0) s.sstage_bytes = up16(4 * max_in);
  if (stream) {
    constexpr int32_t kSlotRec = 64;  // sizeof(StreamSlot), decode_kernel.cu
    int32_t want = stream_stages > 0 ? stream_stages : kStreamDefaultStages;
    if (want > kStreamMaxStages) want = kStreamMaxStages;
    int32_t fit = (kMaxSmemPerBlock - o - 1024 - 64 - up16(h.num_weights * 8)) / (s.sstage_bytes + kSlotRec);
    s.sstages = want < fit ? want : fit;
    if (s.sstages < 2) s.sstages = 0;
    // The kernel starts the ring at the next 1 KB boundary of the shared window (bulk copies into 16-byte aligned
    // but not 128-byte aligned destinations were the first suspect for v19's slow stream).
    s.sring = o + 1024;
    o += s.sstages ? 1024 + s.sstages * s.sstage_bytes : 0;
    s.sslots = o;
    o += s.sstages * kSlotRec + 64 + up16(h.num_weights * 8);  // then the StreamCtx and the weight pointers
  }
  s.bars = o; o += ring ? up16(kWarps * kRingSlots * 8) : ((opt & kOptBulkStage) ? up16(kWarps * 8) : 0);
  s.rcur = o; o += ring ? kWarps * 2 * kRingCurWords * 4 : 0;
  // kOptAttnDoubleBuffer's second K/V chunk. With bit 4 (and neither 128 nor the ring) it reuses the weight stage:
  // bit 4 stages only a matvec tile's own batch and consumes it within that tile, so the stage is idle during an ATTN
  // tile (with 128 or the ring, bulk copies may be landing there). Else it is appended last (every other offset
  // unchanged), where it fits. Both ways vbuf2 - vbuf = kbuf2 - kbuf (attn_tile swaps the buffers by one offset).
  const int32_t kv2 = up16(s.chunk * (hd + 8) * 2) + up16(s.chunk * attn_vstride(hd) * 2);
  s.kbuf2 = s.vbuf2 = -1;
  if (opt & kOptAttnDoubleBuffer) {
    if ((opt & kOptStageWeights) && !(opt & (kOptBulkStage | kOptWeightRing | kOptStream)) && !ahead &&
        kv2 <= kWarps * kStageBytesPerWarp) {
      s.kbuf2 = s.stage;
    } else if (o + kv2 <= kMaxSmemPerBlock) {
      s.kbuf2 = o;
      o += kv2;
    }
    if (s.kbuf2 >= 0) s.vbuf2 = s.kbuf2 + up16(s.chunk * (hd + 8) * 2);
  }
  // The stream's stage table takes what is left, up to kStreamMaxDesc entries (Llama-1B needs ~620).
  s.sdesc = o;
  s.sdesc_cap = 0;
  if (stream && s.sstages) {
    int32_t cap = (kMaxSmemPerBlock - o) / 8;
    if (cap > kStreamMaxDesc) cap = kStreamMaxDesc;
    s.sdesc_cap = cap >= 64 ? cap : 0;
    o += s.sdesc_cap * 8;
  }
  s.total = o;
  return s;
}

// Sets the kernel's dynamic shared-memory limit on the current device (the glue only ever raises it, once per new
// maximum, so no attribute call happens inside a CUDA-graph capture once a size has been seen).
cudaError_t decode_set_smem_limit(int32_t bytes);

// Blocks of the kernel that fit on one SM with `smem_bytes` of dynamic shared memory (0 = none).
cudaError_t decode_blocks_per_sm(int32_t smem_bytes, int* blocks);

// Launches the persistent kernel (cooperative: all num_workers blocks co-resident) on `stream`. The shared-memory
// limit must already allow smem_layout(p.h, p.opt).total. The default option set runs on its own compilation
// (decode_default_launch, below) unless `generic` (TILES_GENERIC_KERNEL=1: same bits, for A/B measurements).
// `flagged`: the scratch arena has the flagged layout (every element with its epoch, twice the plan's bytes), and
// hand-offs go by flag-in-data words: only the default option set runs so (decode_flags_launch).
// The attention's warp path takes G <= kAttnWarpsMaxGroup query heads per KV head and head_dim kAttnWarpsHeadDim
// (plan_format.h, from planner/format.py, whose attn_warps_fit is this rule for Python): 8 positions per warp in a
// chunk, one lane per 8 dims of o, the 16 warps' states where the o partials go. Llama-3.2-1B (G 4), SmolLM2 (G 3).
// Other shapes run the five-step chunk loop.
static_assert(kAttnChunkElems / kAttnWarpsHeadDim == 8 * kWarps, "the warp path takes 8 positions per warp");
static_assert(kAttnWarpsMaxGroup * kAttnWarpsHeadDim / 8 <= 32 && kAttnWarpsMaxGroup <= 4,
              "the warp path keeps one lane per 8 dims of o and 4 heads x 8 positions in a warp's scores");
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr bool attn_warps_fit(const Header& h) {
  return TILES_ATTN_WARPS && h.num_kv_heads > 0 && h.num_heads % h.num_kv_heads == 0 &&
         h.num_heads / h.num_kv_heads <= kAttnWarpsMaxGroup && h.head_dim == kAttnWarpsHeadDim;
}
// Whether the default variants (decode_kernel_default.cu, decode_kernel_flags.cu) run this model's plan: they compile
// the warp path alone (launch_decode runs other shapes on the runtime-options kernel; flag hand-offs refuse them).
inline bool default_variant_fits(const Header& h) { return !TILES_ATTN_WARPS || attn_warps_fit(h); }
cudaError_t launch_decode(const KernelParams& p, cudaStream_t stream, bool generic = false, bool flagged = false);

// The same kernel compiled with the default option set as constants (decode_kernel_default.cu): dead option code
// costs the default path registers and instruction fetch (perf log v27: 4% on Llama-1B, 11% on SmolLM2), so
// launch_decode runs this one whenever p.opt is kOptDefault. decode_set_smem_limit / decode_blocks_per_sm cover it.
int32_t decode_default_opt();  // the option set it was compiled for (kOptDefault unless TILES_DEFAULT_OPT)
cudaError_t decode_default_set_smem_limit(int32_t bytes);
cudaError_t decode_default_blocks_per_sm(int32_t smem_bytes, int* blocks);
cudaError_t decode_default_launch(const KernelParams& p, cudaStream_t stream);

// The default variant again with flag-in-data hand-offs (decode_kernel_flags.cu, TILES_FLAGS; flag_data.cuh, perf
// log v28): no counter release / acquire per dependent stage, but every consumer reads its inputs' epoch words too.
// It wins where hand-offs dominate (SmolLM2 -11%) and loses where weight streams do (Llama-1B +9.5% in session 13),
// so the runtime chooses per model (tiles_ext/runtime.py choose_handoff).
int32_t decode_flags_opt();
cudaError_t decode_flags_set_smem_limit(int32_t bytes);
cudaError_t decode_flags_blocks_per_sm(int32_t smem_bytes, int* blocks);
cudaError_t decode_flags_launch(const KernelParams& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace tiles
