// The sampler on the GPU (planner/format.py "Sampling"): an LM-head tile's scores and candidates, and the merge,
// filters and draw of the ARGMAX tile, on csrc/sampler_math.h's arithmetic. Block-wide functions (kThreads threads,
// every thread calls them); they take pointers and sizes only, so the decode kernels' tiles (decode_kernel.cuh) and
// the sample_logits kernels (sample_kernel.cu) run the same code. Included inside namespace tiles::cuda's anonymous
// namespace; the includer includes decode_kernel.h and sampler_math.h first, at file scope.
//
// Why the candidates hold the answer: an id kept by top_k has a score >= the k-th largest of the vocabulary, and so
// >= the k-th largest of its own tile (a tile with k scores above it would make k scores above it in all). Each LM
// tile hands over its rows at or above its local k-th score (at most CAND_SLOT, ties included); the k-th largest of
// those is the vocabulary's, and the kept set is the candidates at or above it. Its canonical order (score
// descending, id ascending) comes from a sort on (score, id), never from the order the atomics wrote them in.
#pragma once

namespace sm = ::tiles::sampler;

// Words of an LM tile's candidate slot, and the pair layout after its header: (score bits, id).
__device__ __forceinline__ int32_t* samp_slot(int32_t* sampler, int32_t slot) {
  return sampler + sampler_cand_offset(slot);
}
__device__ __forceinline__ const int32_t* samp_slot(const int32_t* sampler, int32_t slot) {
  return sampler + sampler_cand_offset(slot);
}

// The threshold key T of the k-th largest of n keys (1 <= k <= n): {i: key_at(i) >= T} is exactly the ids at or above
// the k-th largest (ties included). Radix select, 8 bits per pass from the top: each pass counts the keys that match
// the bits found so far, per next digit (warp-aggregated shared atomics), and warp 0 finds the digit holding the
// k-th (lane l owns digits 8l .. 8l+7; suffix sums over lanes by shuffles). When every key of that digit's bin is
// needed, the bin's lowest possible key is the threshold and the remaining passes are skipped. kFromCommon: the
// passes start at the byte of the first bit where the smallest and the largest key differ (the bits above are the
// same in every key: one pass over the keys without atomics finds them); the ARGMAX tile's candidates, each tile's
// top scores, usually share their sign and exponent byte.
// hist: kSampHistWords words; misc: kSampMiscWords words (uses misc[0..2]).
template <bool kFromCommon, class KeyAt>
__device__ uint32_t samp_kth_threshold(KeyAt key_at, int32_t n, int32_t k, uint32_t* hist, int32_t* misc) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t prefix = 0;
  int32_t krem = k;
  int first = 0;
  if (kFromCommon) {
    uint32_t lo = 0xffffffffu, hi = 0u;
    for (int32_t i = tid; i < n; i += kThreads) {
      const uint32_t key = key_at(i);
      lo = key < lo ? key : lo;
      hi = key > hi ? key : hi;
    }
    lo = __reduce_min_sync(0xffffffffu, lo);
    hi = __reduce_max_sync(0xffffffffu, hi);
    if (lane == 0) {
      hist[2 * warp] = lo;
      hist[2 * warp + 1] = hi;
    }
    __syncthreads();
    lo = hist[0];
    hi = hist[1];
    for (int w = 1; w < kWarps; ++w) {
      lo = hist[2 * w] < lo ? hist[2 * w] : lo;
      hi = hist[2 * w + 1] > hi ? hist[2 * w + 1] : hi;
    }
    if (lo == hi) return lo;  // every key the same: it is the k-th
    first = __clz(lo ^ hi) / 8;
    prefix = first == 0 ? 0u : lo >> (32 - 8 * first);
    __syncthreads();  // hist is cleared below
  }
  for (int pass = first; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = tid; i < kSampHistWords; i += kThreads) hist[i] = 0u;
    __syncthreads();
    for (int32_t base = warp * 32; base < n; base += kThreads) {
      const int32_t i = base + lane;
      int32_t d = -1;
      if (i < n) {
        const uint32_t key = key_at(i);
        if (pass == 0 || (key >> (shift + 8)) == prefix) d = static_cast<int32_t>((key >> shift) & 255u);
      }
      const unsigned same = __match_any_sync(0xffffffffu, d);
      if (d >= 0 && lane == __ffs(same) - 1) atomicAdd(hist + d, static_cast<uint32_t>(__popc(same)));
    }
    __syncthreads();
    if (warp == 0) {
      uint32_t c[8], s = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = hist[lane * 8 + j];
        s += c[j];
      }
      uint32_t incl = s;  // keys in the digits of lanes >= lane
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_down_sync(0xffffffffu, incl, o);
        if (lane + o < 32) incl += t;
      }
      const uint32_t above = incl - s;  // keys in higher digits than this lane's
      const uint32_t want = static_cast<uint32_t>(krem);
      if (above < want && want <= incl) {  // exactly one lane: the intervals (above, incl] tile (0, total]
        uint32_t cum = above;
        for (int j = 7; j >= 0; --j) {
          if (cum + c[j] >= want) {
            misc[0] = lane * 8 + j;
            misc[1] = static_cast<int32_t>(want - cum);
            misc[2] = static_cast<int32_t>(c[j]);
            break;
          }
          cum += c[j];
        }
      }
    }
    __syncthreads();
    const uint32_t digit = static_cast<uint32_t>(misc[0]);
    krem = misc[1];
    const int32_t in_bin = misc[2];
    prefix = (prefix << 8) | digit;
    if (in_bin == krem || pass == 3) return prefix << shift;
  }
  return 0u;  // not reached
}

// An LM-head tile's share of a SAMPLE-mode step (and its BAD_LOGITS check in both modes): the processed scores of
// rows [row_begin, row_end) into proc (shared memory; in place where proc == rows), then, with 1 <= top_k <=
// CAND_CAP, its candidates (finite rows at or above the local k-th score, in any order; not for GREEDY mode when
// greedy_partials) and its slot header. rows: the raw logits in shared memory, or null (read from `logits`, which
// this block wrote: the caller fenced and synchronised). The slot header's count exceeds CAND_SLOT where the
// candidates do not fit (no pairs are meaningful then); `capacity`: the rows proc can hold (more: the count says so,
// and proc is not written). Ends with a barrier.
__device__ void samp_lmhead(const int32_t* settings, int32_t* slot_words, const int32_t* seen, int64_t position,
                            int32_t row_begin, int32_t row_end, const float* rows, const float* logits, float* proc,
                            int32_t capacity, uint32_t* hist, int32_t* misc, bool greedy_partials) {
  const int tid = threadIdx.x;
  const sm::Params sp = sm::read_params(settings);
  const int32_t n = row_end - row_begin;
  if (tid == 0) {
    misc[3] = INT32_MAX;  // lowest bad id
    misc[4] = 0;          // candidates
  }
  __syncthreads();
  if (n > capacity) {
    if (tid == 0) {
      slot_words[0] = n;
      slot_words[1] = -1;
      slot_words[2] = 0;
      slot_words[3] = 0;
    }
    __syncthreads();
    return;
  }
  for (int32_t r = tid; r < n; r += kThreads) {
    const int32_t id = row_begin + r;
    const float x = rows != nullptr ? rows[r] : __ldcg(logits + id);
    const int32_t word = __ldcg(seen + (id >> 5));  // set by earlier steps' ARGMAX tiles: L2, never a stale L1 line
    const float v = sm::process_score(x, sm::seen_in_word(word, id), sm::is_suppressed(sp, position, id), sp);
    proc[r] = v;
    if (sm::bad_score(v)) atomicMin(misc + 3, id);
  }
  __syncthreads();
  const int32_t bad = misc[3];
  uint32_t threshold = 0u;
  // GREEDY-mode decode steps take the token from the tiles' partials (greedy_partials): no candidates needed.
  const bool candidates = sp.mode == kModeSample || !greedy_partials;
  if (candidates && bad == INT32_MAX && sp.top_k >= 1 && sp.top_k <= kCandCap) {
    const int32_t k = sp.top_k < n ? sp.top_k : n;
    if (n > k)
      threshold = samp_kth_threshold<false>([&](int32_t i) { return sm::order_key(proc[i]); }, n, k, hist, misc);
    for (int32_t r = tid; r < n; r += kThreads) {
      const float v = proc[r];
      if (v > -INFINITY && sm::order_key(v) >= threshold) {
        const int32_t at = atomicAdd(misc + 4, 1);
        if (at < kCandSlot) {
          int2 pair;
          pair.x = static_cast<int32_t>(sm::f32_bits(v));
          pair.y = row_begin + r;
          reinterpret_cast<int2*>(slot_words + kCandidatesWords)[at] = pair;
        }
      }
    }
    __syncthreads();
  }
  if (tid == 0) {
    slot_words[0] = misc[4];
    slot_words[1] = bad == INT32_MAX ? -1 : bad;
    slot_words[2] = static_cast<int32_t>(threshold);
    slot_words[3] = 0;
  }
  __syncthreads();
}

// What the ARGMAX merge found: kErrorOk and the token, or an error code with its seen / wanted words.
struct SampOutcome {
  int32_t code;
  int32_t seen;
  int32_t wanted;
  int32_t token;
};

// The ARGMAX tile's SAMPLE-mode step (and sample_logits): the LM tiles' slot headers (the lowest bad id:
// BAD_LOGITS; top_k outside 1..CAND_CAP, a slot over CAND_SLOT, more candidates than `region` holds, or more than
// KEPT_CAP at or above the k-th: SAMPLER_OVERFLOW; no candidate at all: BAD_LOGITS with id -1), their candidates'
// keys and ids (into shared memory), the k-th largest (samp_kth_threshold), the kept set in canonical order (a rank
// sort of (score, id)), then
// steps 5-7 on warp 0 with sampler_math.h's functions in finish_kept's order (elementwise work across the lanes, the
// in-order sums on lane 0). region: free shared memory of region_bytes (16-byte aligned). kept (nullable, vocab
// bytes, zeroed): the final kept set. The outcome lands in *out (shared memory) for every thread; ends with a
// barrier. GREEDY mode: the kept set's first id.
__device__ void samp_merge(const int32_t* settings, const int32_t* sampler, int32_t lm_tiles, int64_t position,
                           int32_t vocab, uint8_t* region, int32_t region_bytes, uint8_t* kept, SampOutcome* out) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const sm::Params sp = sm::read_params(settings);
  const SampMergeLayout ml = samp_merge_layout(lm_tiles);
  uint32_t* hist = reinterpret_cast<uint32_t*>(region + ml.hist);
  int32_t* misc = reinterpret_cast<int32_t*>(region + ml.misc);
  int32_t* counts = reinterpret_cast<int32_t*>(region + ml.counts);  // [lm_tiles] slot counts
  int32_t* offs = reinterpret_cast<int32_t*>(region + ml.offs);      // [lm_tiles + 1] their candidates' offsets
  int32_t* qoffs = reinterpret_cast<int32_t*>(region + ml.qoffs);    // [lm_tiles + 1] their quads' offsets
  uint64_t* skey = reinterpret_cast<uint64_t*>(region + ml.skey);    // [KEPT_CAP] survivors' canonical keys
  float* v = reinterpret_cast<float*>(region + ml.v);                // [KEPT_CAP] kept scores, canonical order
  int32_t* ids = reinterpret_cast<int32_t*>(region + ml.ids);        // [KEPT_CAP] their ids
  float* e = reinterpret_cast<float*>(region + ml.e);                // [KEPT_CAP] weights
  float* pr = reinterpret_cast<float*>(region + ml.pr);              // [KEPT_CAP] probabilities
  uint8_t* keep = region + ml.keep;                                  // [KEPT_CAP]
  uint32_t* keys = reinterpret_cast<uint32_t*>(region + ml.keys);    // the candidates' keys
  // keys[0..total) and ids[0..total): the candidates, slot after slot.
  const int32_t key_cap = (region_bytes - ml.keys) / 8;
  int32_t* cids = reinterpret_cast<int32_t*>(keys + key_cap);
  if (tid == 0) {
    misc[3] = INT32_MAX;  // lowest bad id
    misc[4] = 0;          // largest slot count
    misc[5] = 0;          // survivors
  }
  __syncthreads();
  for (int32_t j = tid; j < lm_tiles; j += kThreads) {
    const int32_t* s = samp_slot(sampler, j);
    const int32_t c = __ldcg(s);
    const int32_t b = __ldcg(s + 1);
    counts[j] = c;
    if (b >= 0) atomicMin(misc + 3, b);
    atomicMax(misc + 4, c);
  }
  __syncthreads();
  // Where each slot's candidates go (offs) and where its 16-byte quads (two pairs each) start in a flat numbering
  // of all slots' quads (qoffs): warp 0 scans the counts 32 at a time. A count above CAND_SLOT (an error, below)
  // counts as none.
  if (warp == 0) {
    int32_t carry = 0, qcarry = 0;
    for (int32_t base = 0; base < lm_tiles; base += 32) {
      const int32_t j = base + lane;
      const int32_t raw = j < lm_tiles ? counts[j] : 0;
      const int32_t c = raw <= kCandSlot ? raw : 0;
      const int32_t q = (c + 1) / 2;
      int32_t incl = c, qincl = q;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t t = __shfl_up_sync(0xffffffffu, incl, o);
        const int32_t qt = __shfl_up_sync(0xffffffffu, qincl, o);
        if (lane >= o) {
          incl += t;
          qincl += qt;
        }
      }
      if (j < lm_tiles) {
        offs[j] = carry + incl - c;
        qoffs[j] = qcarry + qincl - q;
      }
      carry += __shfl_sync(0xffffffffu, incl, 31);
      qcarry += __shfl_sync(0xffffffffu, qincl, 31);
    }
    if (lane == 0) {
      offs[lm_tiles] = carry;
      qoffs[lm_tiles] = qcarry;
    }
  }
  __syncthreads();
  const int32_t total = offs[lm_tiles];
  SampOutcome o = {kErrorOk, 0, 0, -1};
  if (misc[3] != INT32_MAX) {
    o = {kErrorBadLogits, misc[3], static_cast<int32_t>(position), -1};
  } else if (sp.top_k < 1 || sp.top_k > kCandCap) {
    o = {kErrorSamplerOverflow, sp.top_k < 1 ? vocab : sp.top_k, kCandCap, -1};
  } else if (misc[4] > kCandSlot) {
    o = {kErrorSamplerOverflow, misc[4], kCandSlot, -1};
  } else if (total == 0) {
    o = {kErrorBadLogits, -1, static_cast<int32_t>(position), -1};
  } else if (total > key_cap) {
    o = {kErrorSamplerOverflow, total, key_cap, -1};
  }
  if (o.code != kErrorOk) {
    if (tid == 0) *out = o;
    __syncthreads();
    return;
  }
  // The candidates: quad g of the flat numbering is quad h = g - qoffs[j] of slot j (the last slot with qoffs[j] <=
  // g; an empty slot's successor starts at the same quad, so the search lands on a slot that holds g). Eight 16-byte
  // loads in flight per thread before any store.
  const int32_t nquads = qoffs[lm_tiles];
  for (int32_t g0 = tid; g0 < nquads; g0 += 4 * kThreads) {
    uint4 w[4];
    int32_t dst[4], left[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int32_t g = g0 + u * kThreads;
      dst[u] = -1;
      left[u] = 0;
      w[u] = make_uint4(0u, 0u, 0u, 0u);
      if (g < nquads) {
        int32_t lo = 0, hi = lm_tiles;  // qoffs[lo] <= g < qoffs[hi]
        while (hi - lo > 1) {
          const int32_t mid = (lo + hi) >> 1;
          if (qoffs[mid] <= g) {
            lo = mid;
          } else {
            hi = mid;
          }
        }
        const int32_t h = g - qoffs[lo];
        w[u] = __ldcg(reinterpret_cast<const uint4*>(samp_slot(sampler, lo) + kCandidatesWords) + h);
        dst[u] = offs[lo] + 2 * h;
        left[u] = counts[lo] - 2 * h;
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (dst[u] < 0) continue;
      keys[dst[u]] = sm::order_key(sm::bits_f32(static_cast<int32_t>(w[u].x)));
      cids[dst[u]] = static_cast<int32_t>(w[u].y);
      if (left[u] > 1) {
        keys[dst[u] + 1] = sm::order_key(sm::bits_f32(static_cast<int32_t>(w[u].z)));
        cids[dst[u] + 1] = static_cast<int32_t>(w[u].w);
      }
    }
  }
  __syncthreads();
  const int32_t k = sp.top_k;
  const uint32_t threshold =
      total > k ? samp_kth_threshold<true>([&](int32_t i) { return keys[i]; }, total, k, hist, misc) : 0u;
  for (int32_t i = tid; i < total; i += kThreads) {
    if (keys[i] >= threshold) {
      const int32_t at = atomicAdd(misc + 5, 1);
      if (at < kKeptCap) skey[at] = (uint64_t(~keys[i]) << 32) | static_cast<uint32_t>(cids[i]);
    }
  }
  __syncthreads();
  const int32_t n = misc[5];
  if (n > kKeptCap) {
    if (tid == 0) *out = {kErrorSamplerOverflow, n, kKeptCap, -1};
    __syncthreads();
    return;
  }
  // Rank sort: the keys are distinct (ids are), so the ranks are a permutation.
  for (int32_t j = tid; j < n; j += kThreads) {
    const uint64_t mine = skey[j];
    int32_t rank = 0;
    for (int32_t l = 0; l < n; ++l) rank += skey[l] < mine;
    v[rank] = sm::key_value(~static_cast<uint32_t>(mine >> 32));
    ids[rank] = static_cast<int32_t>(static_cast<uint32_t>(mine));
  }
  __syncthreads();
  // Steps 5-7 (sampler_math.h finish_kept, phase by phase).
  if (warp == 0) {
    float* shared_f = reinterpret_cast<float*>(misc + 6);  // misc[6]: S, misc[7]: S'
    for (int32_t j = lane; j < n; j += 32) e[j] = sm::weight_of(v[j], v[0]);
    __syncwarp();
    int32_t m = n;
    if (sp.top_p_cut > 0.0f) {
      if (lane == 0) shared_f[0] = sm::sum_in_order(e, n);
      __syncwarp();
      const float s = shared_f[0];
      for (int32_t j = lane; j < n; j += 32) pr[j] = sm::prob_of(e[j], s);
      __syncwarp();
      if (lane == 0) misc[8] = sm::top_p_keep(pr, n, sp.top_p_cut);
      __syncwarp();
      m = misc[8];
    }
    for (int32_t j = lane; j < n; j += 32) keep[j] = j < m ? 1 : 0;
    __syncwarp();
    if (sp.min_p > 0.0f) {
      if (lane == 0) shared_f[1] = sm::sum_in_order(e, m);
      __syncwarp();
      const float s = shared_f[1];
      const float thr = sm::min_p_threshold(s, sp.min_p);
      for (int32_t j = lane; j < m; j += 32)
        if (j >= 1) keep[j] = sm::min_p_keeps(e[j], s, thr) ? 1 : 0;
      __syncwarp();
    }
    if (lane == 0) {
      const float u = sm::uniform_at(position, sp.seed_lo, sp.seed_hi);
      const int32_t pick = sp.mode == kModeSample ? sm::draw_index(e, keep, n, u) : 0;
      *out = {kErrorOk, 0, 0, ids[pick]};
    }
    if (kept != nullptr)
      for (int32_t j = lane; j < n; j += 32) kept[ids[j]] = keep[j];
  }
  __syncthreads();
}

// GREEDY mode (decode_step): the LM tiles' headers for BAD_LOGITS, and for a tile whose rows its scratch could not
// hold (SAMPLER_OVERFLOW: its partial is not its scores'). Their partials carry the processed scores' maximum, which
// the caller merges as without a sampler. *out: kErrorOk or the error; ends with a barrier.
__device__ void samp_greedy_check(const int32_t* sampler, int32_t lm_tiles, int64_t position, int32_t* misc,
                                  SampOutcome* out) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    misc[3] = INT32_MAX;
    misc[4] = 0;
  }
  __syncthreads();
  for (int32_t j = tid; j < lm_tiles; j += kThreads) {
    const int32_t b = __ldcg(samp_slot(sampler, j) + 1);
    if (b >= 0) atomicMin(misc + 3, b);
    atomicMax(misc + 4, __ldcg(samp_slot(sampler, j)));
  }
  __syncthreads();
  if (tid == 0) {
    if (misc[3] != INT32_MAX) {
      *out = {kErrorBadLogits, misc[3], static_cast<int32_t>(position), -1};
    } else if (misc[4] > kCandSlot) {
      *out = {kErrorSamplerOverflow, misc[4], kCandSlot, -1};
    } else {
      *out = {kErrorOk, 0, 0, -1};
    }
  }
  __syncthreads();
}
