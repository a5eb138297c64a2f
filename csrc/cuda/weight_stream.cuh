// kOptStream: one block-wide ring of weight stages by bulk copies across tiles, stages and steps (runtime-options
// kernel). Part of the decode kernel: decode_kernel.cu includes it inside its anonymous namespace (tiles::cuda), after
// weight_ring.cuh.
#pragma once

// ---------------------------------------------------------------------------------------------------------------
// kOptStream: one block-wide ring of weight stages streamed by bulk copies across tiles, stages and steps
// ---------------------------------------------------------------------------------------------------------------
// The stream is the sequence of stages of the worker's matvec tiles (plan order, step after step). A tile's units
// (matvec_shape: two rows, or a gate and an up row) are cut into stages of ups = sstage_bytes / (2 x row bytes)
// units; a stage is one contiguous copy of its rows (GATEUP: the gate rows, then the up rows: two copies). Stage m
// lives in slot m % ns, whose mbarrier completes one phase per fill (parity (m / ns) & 1). Every warp passes every
// stage of a tile in order (waits for it, reads its items in it, releases it); once every warp has released a fill
// the slot is refilled with stage m + ns (stream_release says by whom). So nothing but the ring's depth throttles
// the stream: while the block waits on a counter, the ring fills up with the next tiles' weights.
// TILES_TILE_TIMING builds with a stream trace: one value for stage m (lane 0 of the caller writes it). SM clock
// cycles (clock64: cheap, per SM, 0.5 ns resolution against %globaltimer's 32 ns); the issue also records
// %globaltimer so that the analysis converts cycles to time.
__device__ __forceinline__ void stream_trace(const KernelParams& p, uint32_t m, int32_t col, uint64_t v) {
#if TILES_TILE_TIMING
  if (p.stream_trace != nullptr && m < static_cast<uint32_t>(p.stream_trace_cap))
    p.stream_trace[(int64_t(blockIdx.x) * p.stream_trace_cap + m) * kStreamTraceCols + col] = v;
#endif
}

struct StreamSlot {
  uint64_t full;      // mbarrier, count 1 (the issuing lane's arrive.expect_tx) and the copies' bytes
  int32_t s, k;       // the stage after the prepared one: step, worker-local tile index,
  int32_t st, nst;    // stage within that tile, the tile's stage count
  uint32_t released;  // kStreamEvents per fill: kWarps releases and the next fill's preparation (stream_release)
  uint32_t fills;     // fills issued
  const uint16_t* src;   // the prepared fill (computed while the current one is being read): first part,
  const uint16_t* src2;  // second part (GATEUP's up rows) or null,
  uint32_t bytes;        // bytes per part (0: the launch has no further stage for this slot)
  int32_t pad[3];
};
static_assert(sizeof(StreamSlot) == 64, "smem_layout sizes StreamSlot as 64 bytes");

// Lives in shared memory after the slots (written once at launch start; a local struct whose address the kernel
// passes around would live in local memory). It holds byte OFFSETS into the block's shared memory, not pointers:
// a pointer loaded from memory is generic to the compiler, and v19's measured version (pointers) compiled the
// release's atomicAdd to a generic GPU-scope ATOM and every slot access to generic LD/ST; addresses formed from
// g_smem compile to ATOMS / LDS / STS. The block's stage count consumed so far is a register of each thread.
struct StreamCtx {
  int32_t ring;   // the ring (1 KB aligned): stage slot i at ring + i * sb
  int32_t slots;  // StreamSlot[ns]
  int32_t recs;   // the worker's tile records (kOptPlanSmem)
  int32_t wptr;   // the weight pointers [num_weights] (a dynamically indexed kernel parameter is a constant-cache
                  // load that may miss)
  int32_t tbeg, tend, ns, sb;
  int32_t desc;   // the stage table [T] (int2 per stage of a step: stream_pack), valid when T > 0
  int32_t T;      // stages per step of this worker, or -1: no table (the fills walk the tile records)
  int32_t tmp;    // 16 ints of scratch for stream_start's scan (the k-split partials' area, idle then)
};
static_assert(sizeof(StreamCtx) <= 64, "smem_layout reserves 64 bytes for the StreamCtx");

__device__ __forceinline__ StreamSlot& stream_slot(const StreamCtx& S, int32_t i) {
  return reinterpret_cast<StreamSlot*>(g_smem + S.slots)[i];
}
__device__ __forceinline__ uint8_t* stream_stage(const StreamCtx& S, uint32_t i) {
  return g_smem + S.ring + i * static_cast<uint32_t>(S.sb);
}
__device__ __forceinline__ const int32_t* stream_rec(const StreamCtx& S, int32_t k) {
  return reinterpret_cast<const int32_t*>(g_smem + S.recs) + (k - S.tbeg) * kPlanRecWords;
}
__device__ __forceinline__ const uint16_t* stream_wptr(const StreamCtx& S, int32_t w) {
  return reinterpret_cast<const uint16_t* const*>(g_smem + S.wptr)[w];
}

// Units per stage and stage count of a matvec tile (from its local record). Identical for producer and consumer.
__device__ __forceinline__ int32_t stream_ups(int32_t cols, int32_t sb) { return sb / (4 * cols); }
__device__ __forceinline__ int32_t stream_nst(const KernelParams& p, const int32_t* rec, int32_t sb) {
  const int32_t op = rec[offsetof(Tile, op) / 4];
  if (!op_is_matvec(op)) return 0;
  const int32_t rows = rec[offsetof(Tile, row_end) / 4] - rec[offsetof(Tile, row_begin) / 4];
  const int32_t units = op == kOpGateup ? rows : (rows + 1) / 2;
  const int32_t ups = stream_ups(weight_cols(p, rec[offsetof(Tile, weight) / 4]), sb);
  return (units + ups - 1) / ups;
}

// Moves a cursor to the next stage of the stream (s >= num_steps: none is left in this launch).
__device__ void stream_next(const KernelParams& p, const StreamCtx& S, int32_t& s, int32_t& k, int32_t& st,
                            int32_t& nst) {
  if (++st < nst) return;
  st = 0;
  for (int32_t n = 0; n <= S.tend - S.tbeg; ++n) {
    if (++k >= S.tend) {
      k = S.tbeg;
      ++s;
    }
    nst = stream_nst(p, stream_rec(S, k), S.sb);
    if (nst > 0) return;
  }
  s = p.num_steps;  // the worker has no matvec tile at all
}

// A stage's rows: the first row of its weight(s), the weight(s), the rows per part (GATEUP: gate rows, then as
// many up rows). Identical for the stage table and the record walk.
struct StreamDesc {
  int32_t row0, w, w2, nrows;  // w2 = -1: one part
};
__device__ __forceinline__ StreamDesc stream_desc(const KernelParams& p, const Tile& t, int32_t sb, int32_t st) {
  const int32_t ups = stream_ups(weight_cols(p, t.weight), sb);
  const int32_t u0 = st * ups;
  StreamDesc d;
  d.w = t.weight;
  if (t.op == kOpGateup) {
    const int32_t rows = t.row_end - t.row_begin;
    d.row0 = t.row_begin + u0;
    d.nrows = rows - u0 < ups ? rows - u0 : ups;
    d.w2 = t.weight2;
  } else {
    d.row0 = t.row_begin + 2 * u0;
    const int32_t r1 = d.row0 + 2 * ups < t.row_end ? d.row0 + 2 * ups : t.row_end;
    d.nrows = r1 - d.row0;
    d.w2 = -1;
  }
  return d;
}
// Table entries: (row0, w | (w2 + 1) << 10 | nrows << 20); stream_start checks the field widths.
__device__ __forceinline__ bool stream_packable(const StreamDesc& d) {
  return d.w >= 0 && d.w < 1023 && d.w2 + 1 < 1024 && d.nrows > 0 && d.nrows < 4096;
}
__device__ __forceinline__ int2 stream_pack(const StreamDesc& d) {
  return make_int2(d.row0, d.w | ((d.w2 + 1) << 10) | (d.nrows << 20));
}
__device__ __forceinline__ StreamDesc stream_unpack(int2 e) {
  StreamDesc d;
  d.row0 = e.x;
  d.w = e.y & 1023;
  d.w2 = ((e.y >> 10) & 1023) - 1;
  d.nrows = (e.y >> 20) & 4095;
  return d;
}

// One lane: computes the slot's next fill (src, src2, bytes; bytes 0 when the launch has no further stage for the
// slot) and moves the slot's cursor ns stages on. With the stage table (T > 0) the cursor is (step, entry): one
// shared-memory read. Without it, the cursor walks the tile records (load, shape, stage count per tile crossed).
// Runs in the FIRST release of the slot's current fill (a warp that is ahead), off the path from the last release
// to the copy: v19's trace (session 6) found the issuing lane preparing too, by the record walk (0.6 us per fill),
// which made its warp the last to release the next stage as well, so one warp issued every fill and capped the
// stream at ~1.3 us per 32 KB stage on every SM. The walk still cost the preparing warp ~0.8 us (trace, call 6),
// enough to delay the next group of warps by that much: hence the table.
__device__ void stream_prepare(const KernelParams& p, const StreamCtx& S, int32_t slot) {
  StreamSlot& q = stream_slot(S, slot);
  q.bytes = 0u;
  if (q.s >= p.num_steps) return;
  StreamDesc d;
  if (S.T > 0) {
    d = stream_unpack(reinterpret_cast<const int2*>(g_smem + S.desc)[q.k]);
    int32_t s = q.s, k = q.k + S.ns;
    while (k >= S.T) {
      k -= S.T;
      ++s;
    }
    q.s = s;
    q.k = k;
  } else {
    d = stream_desc(p, load_tile_rec(stream_rec(S, q.k)), S.sb, q.st);
    int32_t s = q.s, k = q.k, st = q.st, nst = q.nst;
    for (int32_t i = 0; i < S.ns; ++i) stream_next(p, S, s, k, st, nst);
    q.s = s;
    q.k = k;
    q.st = st;
    q.nst = nst;
  }
  const int64_t cols = weight_cols(p, d.w);
  // Probe 16 reads the weight pointers from the kernel parameters instead of the shared-memory copy.
  auto weight = [&](int32_t w) { return (p.stream_probe & 16) ? p.weights[w] : stream_wptr(S, w); };
  q.src = weight(d.w) + int64_t(d.row0) * cols;
  q.src2 = d.w2 >= 0 ? weight(d.w2) + int64_t(d.row0) * cols : nullptr;
  q.bytes = static_cast<uint32_t>(int64_t(d.nrows) * cols * 2);
}

// One lane (the last event of the slot's current fill, or the launch start): issues the slot's prepared fill, if
// any. The preparing warp's fields are visible here: its release add follows its writes, and this lane's add read a
// later value of the same counter and then fenced (acquire).
__device__ void stream_issue(const KernelParams& p, const StreamCtx& S, int32_t slot) {
  StreamSlot& q = stream_slot(S, slot);
  const uint32_t bytes = q.bytes;
  if (bytes == 0u) return;
  const uint16_t* src = q.src;
  const uint16_t* src2 = q.src2;
  uint8_t* dst = stream_stage(S, static_cast<uint32_t>(slot));
  const uint32_t traced = q.fills * static_cast<uint32_t>(S.ns) + static_cast<uint32_t>(slot);
  stream_trace(p, traced, kStreamTraceIssue, clock64());
  stream_trace(p, traced, kStreamTraceIssueNs, global_ns());
  stream_trace(p, traced, kStreamTraceIssuer, threadIdx.x >> 5);
  ++q.fills;
  mbar_arrive_expect_tx(&q.full, src2 != nullptr ? 2u * bytes : bytes);
  const uint32_t piece = p.stream_piece > 0 ? static_cast<uint32_t>(p.stream_piece) : bytes;
  for (int part = 0; part < (src2 != nullptr ? 2 : 1); ++part) {
    const uint8_t* g = reinterpret_cast<const uint8_t*>(part ? src2 : src);
    uint8_t* d = dst + part * bytes;
    for (uint32_t off = 0; off < bytes; off += piece) {
      const uint32_t n = bytes - off < piece ? bytes - off : piece;
      if (p.stream_probe & 4) {
        bulk_copy_g2s_evict_first(d + off, g + off, n, &q.full);
      } else {
        bulk_copy_g2s(d + off, g + off, n, &q.full);
      }
    }
  }
}

// All threads, at kernel start (the plan records are in shared memory; thread 0 has written S's offsets): builds
// the stage table (dcap entries fit; a block-wide scan of the tiles' stage counts, then every thread writes its
// tile's entries), then slot i takes stage i and the first ns stages are issued at once, so the first weights stream
// while the step's first waits run. Ends with a barrier.
__device__ void stream_start(const KernelParams& p, StreamCtx& S, int32_t dcap) {
  __syncthreads();  // S's offsets
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t ntl = S.tend - S.tbeg;
  bool table = dcap > 0 && ntl <= kThreads && !(p.stream_probe & 32);  // probe 32: the record walk (tests)
  Tile t;
  int32_t cnt = 0;
  if (table && tid < ntl) {
    t = load_tile_rec(stream_rec(S, S.tbeg + tid));
    cnt = stream_nst(p, stream_rec(S, S.tbeg + tid), S.sb);
  }
  int32_t incl = cnt;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  int32_t* wsum = reinterpret_cast<int32_t*>(g_smem + S.tmp);
  if (lane == 31) wsum[warp] = incl;
  __syncthreads();
  int32_t before = 0, total = 0;
  for (int i = 0; i < kWarps; ++i) {
    if (i < warp) before += wsum[i];
    total += wsum[i];
  }
  table = table && total > 0 && total <= dcap;  // uniform: every thread summed the same partials
  bool bad = false;
  if (table) {
    int2* desc = reinterpret_cast<int2*>(g_smem + S.desc);
    for (int32_t st = 0; st < cnt; ++st) {
      const StreamDesc d = stream_desc(p, t, S.sb, st);
      bad = bad || !stream_packable(d);
      desc[before + incl - cnt + st] = stream_pack(d);
    }
  }
  table = !__syncthreads_or(bad) && table;
  if (tid == 0) {
    S.T = table ? total : -1;
    int32_t s = 0, k = S.tbeg - 1, st = 0, nst = 0;
    if (!table) stream_next(p, S, s, k, st, nst);
    for (int32_t i = 0; i < S.ns; ++i) {
      StreamSlot& q = stream_slot(S, i);
      if (table) {
        q.s = i / total;
        q.k = i % total;
      } else {
        q.s = s;
        q.k = k;
        q.st = st;
        q.nst = nst;
        stream_next(p, S, s, k, st, nst);
      }
      q.released = 0u;
      q.fills = 0u;
      mbar_init(&q.full, 1u);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int32_t i = 0; i < S.ns; ++i) {
      stream_prepare(p, S, i);
      stream_issue(p, S, i);
    }
  }
  __syncthreads();
}

// Warp-level: waits (bounded) until stage m has landed; returns its slot.
__device__ const uint8_t* stream_wait(const KernelParams& p, const StreamCtx& S, uint32_t m) {
  const uint32_t slot = m % static_cast<uint32_t>(S.ns);
  const uint32_t parity = (m / static_cast<uint32_t>(S.ns)) & 1u;
  wait_copy_phase(p, &stream_slot(S, static_cast<int32_t>(slot)).full, parity, -4, m);
  if ((threadIdx.x & 31) == 0) stream_trace(p, m, kStreamTraceWait + (threadIdx.x >> 5), clock64());
  return stream_stage(S, slot);
}

constexpr uint32_t kStreamEvents = kWarps + 1;

// Warp-level, after the warp's last read of stage m. No proxy fence for this write-after-read (CUTLASS's TMA
// pipelines: consumer release, then the producer's copy). The increment is relaxed: the refill's ordering after this
// warp's reads of the stage rests on its shared-memory accesses being performed in order (racecheck, which does not
// model atomics, flags it: perf log, session 6); a release add per warp would make it formal (not yet measured).
__device__ __forceinline__ void stream_release(const KernelParams& p, const StreamCtx& S, uint32_t m) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    stream_trace(p, m, kStreamTraceRelease + (threadIdx.x >> 5), clock64());
    const int32_t slot = static_cast<int32_t>(m % static_cast<uint32_t>(S.ns));
    // A fill counts kStreamEvents increments: kWarps releases and one "prepared" (the first release prepares the
    // slot's next fill, then increments again, releasing). The last increment, whichever it is, acquires and issues
    // the next fill.
    uint32_t* released = &stream_slot(S, slot).released;
    uint32_t old = atom_add_relaxed_cta(released, 1u);
    if (old % kStreamEvents == 0u) {
      stream_prepare(p, S, slot);
      stream_trace(p, m, kStreamTracePrepared, clock64());
      old = atom_add_release_cta(released, 1u);
    }
    if (old % kStreamEvents == kStreamEvents - 1) {
      fence_acquire_cta();
      stream_issue(p, S, slot);
    }
  }
}

// All threads, on every way out of the launch: waits for the fills still in flight (no copy may land in a block
// that has exited). The callers have passed a block barrier, so no release is racing.
__device__ void stream_drain(const KernelParams& p, const StreamCtx& S) {
  if (threadIdx.x < S.ns) {
    const uint32_t f = stream_slot(S, threadIdx.x).fills;
    uint64_t* bar = &stream_slot(S, threadIdx.x).full;
    if (f > 0u) {
      const uint64_t t0 = global_ns();
      while (!mbar_try_wait(bar, (f - 1u) & 1u)) {
        if (global_ns() - t0 > p.timeout_ns) break;
      }
    }
  }
  __syncthreads();
}

// The matvec of one tile from the stream: the same items, chunks and fmaf order per lane as matvec(), so the same
// values. Every thread advances n (the stages consumed so far) by the tile's stage count.
__device__ void matvec_stream(const KernelParams& p, int32_t cols, const uint16_t* h, const MatvecOut& o, float* red,
                              const StreamCtx& S, uint32_t& n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t rows = o.row_end - o.row_begin;
  const MatvecShape m = matvec_shape(o.op, rows, cols);
  const int32_t ups = stream_ups(cols, S.sb);
  const int32_t nst = (m.nunits + ups - 1) / ups;
  const int64_t rowbytes = int64_t(cols) * 2;
  const uint4* hv = reinterpret_cast<const uint4*>(h);
  const uint32_t base = n;
  int32_t passed = 0;
  for (int32_t item = warp; item < m.items; item += kWarps) {
    const int32_t unit = item / m.ksplit;
    const int32_t ks = item - unit * m.ksplit;
    const int32_t c0 = ks * m.slice;
    const int32_t c1 = c0 + m.slice < m.nchunks ? c0 + m.slice : m.nchunks;
    const int32_t j = unit / ups;
    for (; passed < j; ++passed) {
      stream_wait(p, S, base + passed);
      stream_release(p, S, base + passed);
    }
    const uint8_t* slot = stream_wait(p, S, base + j);
    if (lane == 0) stream_trace(p, base + j, kStreamTraceBegin + warp, clock64());
    const int32_t ju = unit - j * ups;
    const uint4* A;
    const uint4* B;
    bool bvalid;
    if (m.pair) {
      const int32_t nin = m.nunits - j * ups < ups ? m.nunits - j * ups : ups;
      A = reinterpret_cast<const uint4*>(slot + ju * rowbytes);
      B = reinterpret_cast<const uint4*>(slot + (nin + ju) * rowbytes);
      bvalid = true;
    } else {
      A = reinterpret_cast<const uint4*>(slot + 2 * ju * rowbytes);
      B = A + cols / 8;
      bvalid = 2 * unit + 1 < rows;
    }
    float a0 = 0.f, a1 = 0.f;
    // Unrolled so that the next chunks' shared-memory reads overlap this chunk's FMA chain (same fmaf order).
#pragma unroll 4
    for (int32_t c = c0 + lane; c < c1 && !(p.stream_probe & 1); c += 32) {
      const uint4 x = hv[c];
      a0 = dot8(A[c], x, a0);
      a1 = dot8(bvalid ? B[c] : make_uint4(0, 0, 0, 0), x, a1);
    }
    if (lane == 0) stream_trace(p, base + j, kStreamTraceEnd + warp, clock64());
    // The stage's last read by this warp is done: release it now, before the warp sums and the stores (the slot's
    // refill waits for the last release: session 6's trace), unless the warp's next item reads the same stage.
    const int32_t next = item + kWarps;
    if (next >= m.items || (next / m.ksplit) / ups > j) {
      for (; passed <= j; ++passed) {
        stream_wait(p, S, base + passed);
        stream_release(p, S, base + passed);
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      if (m.ksplit == 1) {
        emit(o, unit, a0, a1);
      } else {
        red[2 * item] = a0;
        red[2 * item + 1] = a1;
      }
    }
  }
  for (; passed < nst; ++passed) {
    stream_wait(p, S, base + passed);
    stream_release(p, S, base + passed);
  }
  n = base + static_cast<uint32_t>(nst);
  if (threadIdx.x == 0)
    for (int32_t j = 0; j < nst; ++j) stream_trace(p, base + j, kStreamTraceOp, (uint64_t(cols) << 8) | uint64_t(o.op));
  ksplit_sum(m, red, o);
}

// `stage`: this block's first weight batches copied before the wait (kOptStageWeights) or null.
// `bc`: kOptBulkStage state (null otherwise): this warp's batch, when armed for this tile, is read from its region
// after the warp's mbarrier wait; after the warp's first batch the region takes the next matvec tile's batch.
// `ring`: kOptWeightRing state of this warp (null otherwise): every batch comes from the warp's ring.
__device__ void matvec(const KernelParams& p, const uint16_t* W, const uint16_t* W2, int32_t cols, const uint16_t* h,
                       const MatvecOut& o, float* red, const uint8_t* stage, BulkCtx* bc, RingCtx* ring,
                       bool ahead_pending) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const MatvecShape m = matvec_shape(o.op, o.row_end - o.row_begin, cols);
  const uint4* hv = reinterpret_cast<const uint4*>(h);
  if (stage != nullptr) {
    if (ahead_pending) {
      cp_async_wait_but_last();  // kOptStageAhead: the next tile's batch, committed last, may stay in flight
    } else {
      cp_async_wait_all();
    }
  }
#if defined(TILES_MARK_SPLIT) && (TILES_MARK_SPLIT == 1 || TILES_MARK_SPLIT == 4)
  // Timing experiment (tile_timing.py with TILES_TIMING_DEFINES=-DTILES_MARK_SPLIT[=1|2|3|4]): a matvec tile's main
  // phase ends where the split says, the rest falls into the epilogue. 1: thread 0's staged copies have landed;
  // 4: every lane's of its warp (is 1 -> 2 the arithmetic, or the warp's other copies landing? perf log, session 8);
  // 2: its warp's first item's arithmetic is done; 3: and its warp sums (perf log v25).
#if TILES_MARK_SPLIT == 4
  __syncwarp();
#endif
  TILES_MARK(kTimePhase2);
#endif
  const uint8_t* bstage = bc != nullptr && bc->armed == bc->k ? bc->stage : nullptr;
  bool next_done = bc == nullptr;
  for (int32_t item = warp; item < m.items; item += kWarps) {
    const MatvecItem it = matvec_item(m, W, W2, o.row_begin, o.row_end, cols, item);
    float a0 = 0.f, a1 = 0.f;
    // With a cp.async-staged first batch the weight registers take the item's NEXT batch (v38) while the staged
    // one is computed straight from shared memory.
    uint4 wa[kUnroll], wb[kUnroll];
    bool preloaded = false;
    if (ring != nullptr) {
      // Straight from the slots, chunk base + u * 32 + lane at (u * 32 + lane) * 16 of its slot: per lane the same
      // chunks in the same order as the loads below, so the same fmaf sequence per accumulator. The slots are
      // refilled after the arithmetic, so no weight register is live across the refill.
      for (int32_t base = it.c0; base < it.c1; base += kRingChunks) {
        const uint8_t* sa = ring_wait(p, *ring, 0);
        const uint8_t* sb = it.bvalid ? ring_wait(p, *ring, 1) : sa;
#pragma unroll
        for (int u = 0; u < kRingChunks / 32; ++u) {
          const int32_t c = base + u * 32 + lane;
          if (c < it.c1) {
            const uint4 x = hv[c];
            a0 = dot8(*reinterpret_cast<const uint4*>(sa + (u * 32 + lane) * 16), x, a0);
            if (it.bvalid) a1 = dot8(*reinterpret_cast<const uint4*>(sb + (u * 32 + lane) * 16), x, a1);
          }
        }
        ring_release(p, *ring, it.bvalid ? 2u : 1u);
      }
    }
    for (int32_t base = it.c0; ring == nullptr && base < it.c1; base += 32 * kUnroll) {
      const bool from_bulk = bstage != nullptr && item == warp && base == it.c0;
      const bool staged = (stage != nullptr || from_bulk) && item == warp && base == it.c0;
      if (kPreloadNext && staged && !from_bulk) {
        // v38: the item's next batch is issued before the staged batch's arithmetic. That arithmetic takes 16
        // warps ~0.5 us of issue (perf log v25 split 2), and the SM's weight stream used to start only after it.
        // Within the item only: a preload across items keeps the registers live through the warp sums and stores,
        // and the kernel spills. Same chunks, same fmaf order: bit-identical.
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
            const uint4 x = hv[c];
            a0 = dot8(*reinterpret_cast<const uint4*>(sw + (u * 32 + lane) * 16), x, a0);
            a1 = dot8(it.bvalid ? *reinterpret_cast<const uint4*>(sw + ((kUnroll + u) * 32 + lane) * 16)
                                : make_uint4(0, 0, 0, 0), x, a1);
          }
        }
      } else {
        if (staged) {
          if (from_bulk) bulk_consume(p, *bc);
          const uint8_t* sw = (from_bulk ? bstage : stage) + warp * kStageBytesPerWarp;
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
          if (c < it.c1) {
            const uint4 x = hv[c];
            a0 = dot8(wa[u], x, a0);
            a1 = dot8(wb[u], x, a1);
          }
        }
      }
      if (!next_done) {  // the staged batch has been used: the region takes the next tile's batch
        bulk_next(p, *bc);
        next_done = true;
      }
    }
#if defined(TILES_MARK_SPLIT) && TILES_MARK_SPLIT == 2
    if (item == warp) TILES_MARK(kTimePhase2);
#endif
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
#if defined(TILES_MARK_SPLIT) && TILES_MARK_SPLIT == 3
    if (item == warp) TILES_MARK(kTimePhase2);
#endif
    if (lane == 0) {
      if (m.ksplit == 1) {
        emit(o, it.unit, a0, a1);
      } else {
        red[2 * item] = a0;
        red[2 * item + 1] = a1;
      }
    }
  }
  if (!next_done) bulk_next(p, *bc);  // warps without items (or with empty slices) in this tile
  ksplit_sum(m, red, o);
}

