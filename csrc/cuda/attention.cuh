// Attention tiles: RoPE, the K/V chunks, the tensor-core warp path (one instantiation per head_dim), the partials.
// Part of the decode kernel: decode_kernel.cuh includes it inside its anonymous namespace (tiles::cuda), after
// matvec.cuh.
#pragma once

// ---------------------------------------------------------------------------------------------------------------
// Attention tiles
// ---------------------------------------------------------------------------------------------------------------
// RoPE tables at pos: cos/sin(float(pos) * inv_freq[i]) * rope_scale, i < hd/2 (rotate_half pairs i, i + hd/2).
__device__ void rope_tables(const KernelParams& p, int64_t pos, float* cs) {
  const int half = p.h.head_dim / 2;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float ang = static_cast<float>(pos) * __ldg(p.inv_freq + i);
    cs[i] = cosf(ang) * p.rope_scale;
    cs[half + i] = sinf(ang) * p.rope_scale;
  }
}

// Before the wait: the RoPE tables and the cached K/V rows [lo, min(pos, first chunk end)) of the first chunk
// (cp.async). Rows < pos are final before the step starts: the previous steps' ATTN tiles wrote them and
// are ancestors of the ARGMAX this worker waited for (or the host wrote them before the launch).
__device__ void attn_prestage(const KernelParams& p, const Tile& t, int64_t pos, uint8_t* smem, const SmemLayout& L) {
  const int hd = p.h.head_dim;
  float* cs = reinterpret_cast<float*>(smem + L.cs);
  uint16_t* kb = reinterpret_cast<uint16_t*>(smem + L.kbuf);
  uint16_t* vb = reinterpret_cast<uint16_t*>(smem + L.vbuf);
  rope_tables(p, pos, cs);
  int32_t lo, hi;
  attn_partition_range(static_cast<int32_t>(pos + 1), t.aux1, p.h.attn_partitions, p.h.attn_granule,
                       p.h.attn_single, &lo, &hi);
  int64_t end = hi - lo < L.chunk ? hi : lo + L.chunk;
  if (end > pos) end = pos;
  const uint16_t* kc = p.k_cache[t.layer] + int64_t(t.aux0) * p.max_cache_len * hd;
  const uint16_t* vc = p.v_cache[t.layer] + int64_t(t.aux0) * p.max_cache_len * hd;
  const int cpr = hd / 8, kstride = hd + 8;
  for (int i = threadIdx.x; i < (end - lo) * cpr; i += kThreads) {
    const int j = i / cpr, c = i - j * cpr;
    cp_async16(kb + j * kstride + c * 8, kc + (lo + j) * int64_t(hd) + c * 8);
    cp_async16(vb + j * attn_vstride(hd) + c * 8, vc + (lo + j) * int64_t(hd) + c * 8);
  }
  cp_async_commit();
}

// The double buffer's copies: cp.async of the cached K/V rows [c0, c0 + cn) into a chunk buffer (the layout of
// attn_stage_chunk's register copies), as one commit group.
__device__ void attn_issue_chunk(const uint16_t* kc, const uint16_t* vc, int c0, int cn, int hd, uint16_t* kb,
                                 uint16_t* vb) {
  const int cpr = hd / 8, kstride = hd + 8;
  kc += int64_t(c0) * hd;
  vc += int64_t(c0) * hd;
  for (int i = threadIdx.x; i < cn * cpr; i += kThreads) {
    const int j = cpr == 8 ? i >> 3 : i / cpr, c = i - j * cpr;  // head_dim 64 (the warp path) without a divide
    cp_async16(kb + j * kstride + c * 8, kc + i * 8);  // i * 8 = j * hd + c * 8: rows are contiguous in the cache
    cp_async16(vb + j * attn_vstride(hd) + c * 8, vc + i * 8);
  }
  cp_async_commit();
}

// The warp path (8 positions per warp and chunk): the warps that ever held a position of a tile with
// positions [lo, hi), those of its first chunk (the later chunks' positions go to the same warps first).
__device__ __forceinline__ int attn_warps_used(int32_t lo, int32_t hi, int32_t chunk) {
  const int span0 = hi - lo < chunk ? hi - lo : chunk;
  return span0 <= 0 ? 0 : ((span0 + 7) / 8 < kWarps ? (span0 + 7) / 8 : kWarps);
}

// The warp path: the first `wused` warps' states, (m, l) in sc [warp][G][2] and o in opart (attn_tc_oidx), combined
// by log-sum-exp in warp order (fixed: bit-identical runs) into of / ml, the layout MERGE and the partials' store
// read. A warp whose m is -inf held no position.
// The o slots: opart as [warp][n = d / 8][lane = 4g + (d % 8) / 2] float2, HD / 8 n-tiles per warp.
template <int HD>
__device__ __forceinline__ int attn_tc_oidx(int w, int g, int d, int G) {
  return ((w * (HD / 8) + (d >> 3)) * 4 * G + 4 * g + ((d & 7) >> 1)) * 2 + (d & 1);
}
// The head of element i >= 0 of a [G][HD] array: a shift at the power-of-two head_dims.
template <int HD>
__device__ __forceinline__ int attn_head_of(int i) {
  return HD == 64 ? i >> 6 : (HD == 128 ? i >> 7 : i / HD);
}
template <int HD>
#ifdef TILE_FLAG_HANDOFF
__device__ __noinline__
#else
__device__ __forceinline__
#endif
void attn_combine_warps(const float* sc, const float* opart, int G, int hd, int wused, float* of, float* ml) {
  constexpr int kSlots = attn_slot_warps(HD);  // the warps that can hold positions (16, 11, 8 at HD 64, 96, 128)
  for (int i = threadIdx.x; i < G * hd; i += kThreads) {
    const int g = attn_head_of<HD>(i);
    // Every slot warp's state loaded at once, unconditionally (the slots exist; those past wused are not used), so
    // that the loads and expf overlap instead of one dependent LDS -> expf -> FMA chain per warp (3.05K of ~10K
    // cycles per ATTN tile at context 4064; -1.0% per token there). The same terms in the same warp order: the same
    // bits. The flag kernel calls it out of line: inlined, it made its tile loop spill (24 / 16 bytes).
    float2 s[kSlots];
    float o[kSlots];
#pragma unroll
    for (int w = 0; w < kSlots; ++w) {
      s[w] = reinterpret_cast<const float2*>(sc)[w * G + g];
      o[w] = opart[attn_tc_oidx<HD>(w, g, i - g * hd, G)];
    }
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kSlots; ++w)
      if (w < wused) M = fmaxf(M, s[w].x);
    float Ls = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < kSlots; ++w) {
      // Branch-free, so that the expf overlap: a term is added where a loop over the used warps would add it
      // (w < wused, m finite), as the FMA that `Ls += f * l` contracts to; elsewhere f is computed and dropped.
      const bool use = w < wused && s[w].x != -INFINITY;
      float f = expf(s[w].x - M);
      asm volatile("" : "+f"(f));  // computed unconditionally: otherwise it sinks into a branch per warp
      Ls = use ? fmaf(f, s[w].y, Ls) : Ls;
      O = use ? fmaf(f, o[w], O) : O;
    }
    of[i] = O;
    if (i - g * hd == 0) {
      ml[g] = M;
      ml[G + g] = Ls;
    }
  }
}

// RoPE of element d (x) with its rotate_half partner (xp), as attn_rotate_q and attn_append_new_row write it (the
// compiler contracts it; the rows kernels call this same expression, so their rows round as these do).
__device__ __forceinline__ float attn_rope_pair(float x, float xp, int d, int half, const float* cs) {
  return d < half ? x * cs[d] + (-xp) * cs[half + d] : x * cs[d - half] + xp * cs[half + (d - half)];
}

// q of KV head kvh's G heads rotated into qf (fp32, rows of hd + 4), of zeroed, m = -inf and l = 0.
__device__ __forceinline__ void attn_rotate_q(const KernelParams& p, const uint16_t* q, int kvh, int G, int hd,
                                              const float* cs, float* qf, float* of, float* ml, uint32_t epoch) {
  const int tid = threadIdx.x;
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i - g * hd;
    const int qh = kvh * G + g;
    // q is tiny: read through L2 directly (written by QKV tiles of this launch). rotate_half: pairs (d, d +- hd/2).
    const int half = hd / 2;
    const int dp = d < half ? d + half : d - half;
#ifdef TILE_FLAG_HANDOFF
    const int64_t qi[2] = {qh * hd + d, qh * hd + dp};
    uint16_t qv[2];
    fl_read_bf16<2>(p, q, qi, epoch, qv);
    const float x = bf2f(qv[0]), xp = bf2f(qv[1]);
#else
    const float x = bf2f(__ldcg(q + qh * hd + d)), xp = bf2f(__ldcg(q + qh * hd + dp));
#endif
    qf[g * (hd + 4) + d] = attn_rope_pair(x, xp, d, half, cs);
    of[i] = 0.f;
  }
  if (tid < G) {
    ml[tid] = -INFINITY;
    ml[G + tid] = 0.f;
  }
}

// This partition owns the new position: the rotated k (rounded to bf16) and v of KV head kvh appended to the cache
// rows (kc, vc), and to the staged first chunk (kb, vb) when it holds the position (`first_local`: the same bf16
// values).
__device__ __forceinline__ void attn_append_new_row(const KernelParams& p, const uint16_t* knew, const uint16_t* vnew,
                                                    int kvh, int G, int hd, const float* cs, uint16_t* kc,
                                                    uint16_t* vc, uint16_t* kb, uint16_t* vb, int64_t pos, int32_t lo,
                                                    bool first_local, uint32_t epoch) {
  const int tid = threadIdx.x, kstride = hd + 8;
  const int half = hd / 2;
  auto new_row = [&](int d) {
    const int dp = d < half ? d + half : d - half;
#ifdef TILE_FLAG_HANDOFF
    const int64_t ki[2] = {kvh * hd + d, kvh * hd + dp}, vi[1] = {kvh * hd + d};
    uint16_t kv2[2], vv1[1];
    fl_read_bf16<2>(p, knew, ki, epoch, kv2);
    fl_read_bf16<1>(p, vnew, vi, epoch, vv1);
    const float x = bf2f(kv2[0]), xp = bf2f(kv2[1]);
    const uint16_t vr = vv1[0];
#else
    const float x = bf2f(__ldcg(knew + kvh * hd + d)), xp = bf2f(__ldcg(knew + kvh * hd + dp));
    const uint16_t vr = __ldcg(vnew + kvh * hd + d);
#endif
    const float r = attn_rope_pair(x, xp, d, half, cs);
    const uint16_t kr = f2bf(r);
    kc[pos * hd + d] = kr;
    vc[pos * hd + d] = vr;
    if (first_local) {  // the staged first chunk gets the new row directly (same bf16 values)
      kb[(pos - lo) * kstride + d] = kr;
      vb[(pos - lo) * attn_vstride(hd) + d] = vr;
    }
  };
  // Threads past the q elements take the row, so that its reads and q's are one L2 round trip, not two.
  if (G * hd + hd <= kThreads) {
    if (tid >= G * hd && tid < G * hd + hd) new_row(tid - G * hd);
  } else {
    for (int d = tid; d < hd; d += kThreads) new_row(d);
  }
  // The row is read back below through L2 (ld.cg) by other threads of this block, unless it is staged.
  if (!first_local) __threadfence();
}

// RoPE of element d (x) with its rotate_half partner (xp), attn_rotate_q's formula with the one product that is fused
// into an FMA named: the head_dim-128 counter kernel inlines attn_norm_rotate_body and the others call it, and the
// hand-offs' results must not depend on how the compiler contracts the same expression in two places.
__device__ __forceinline__ float attn_rope_explicit(float x, float xp, int d, int half, const float* cs) {
  return d < half ? fmaf(x, cs[d], __fmul_rn(-xp, cs[half + d])) : fmaf(x, cs[d - half], __fmul_rn(xp, cs[d]));
}

// The per-head q/k RMSNorm (an ATTN tile's norm = q_norm, weight2 = k_norm; Qwen3), in place of attn_rotate_q and
// attn_append_new_row: each q head and the new k head are normalised before RoPE, k before the cache append
// (docs/numerics.md). Warp g < G reads q head g, warp G the new k row and warp G + 1 the new v row (when this
// partition owns pos), HD / 32 elements per lane: the fp32 sum of squares of the bf16 values in lane order, then the
// butterfly (warp_sum), r = 1 / sqrt(ss / HD + eps), x' = bf16(bf16(x r) w); a head whose weight is -1 stays as read.
// The heads go as bf16 into the o slots (unused until the chunk loop), then q is rotated and the new row appended from
// there (attn_rope_explicit). run_tile calls it before attn_tile, after the RoPE tables are ready
// (attn_prestage); scalar arguments, the Tile's fields.
template <int HD>
__device__ __forceinline__ void attn_norm_rotate_body(const KernelParams& p, int32_t kvh, int32_t part, int32_t layer,
                                                      int32_t in_buf, int32_t in2_buf, int32_t in3_buf, int32_t qnorm,
                                                      int32_t knorm, int64_t pos, bool prestaged, uint32_t epoch) {
#ifdef TILE_FLAG_HANDOFF
  const SmemLayout L = smem_layout(p.h);  // as the flag kernel's own (decode_kernel)
#else
  const SmemLayout& L = p.layout;
#endif
  int32_t lo, hi;
  attn_partition_range(static_cast<int32_t>(pos + 1), part, p.h.attn_partitions, p.h.attn_granule, p.h.attn_single,
                       &lo, &hi);
  const bool first_local = prestaged && pos < lo + L.chunk;  // as attn_tile's
  constexpr int kPer = HD / 32, half = HD / 2;
  const int G = p.h.num_heads / p.h.num_kv_heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint8_t* smem = g_smem;
  const float* cs = reinterpret_cast<const float*>(smem + L.cs);
  float* qf = reinterpret_cast<float*>(smem + L.qf);
  float* of = reinterpret_cast<float*>(smem + L.of);
  float* ml = reinterpret_cast<float*>(smem + L.ml);
  uint16_t* st = reinterpret_cast<uint16_t*>(smem + L.opart);  // q [G][HD], then k [HD], v [HD]
  const bool owns = lo <= pos && pos < hi;
  if (warp < G + (owns ? 2 : 0)) {
    const int32_t buf = warp < G ? in_buf : (warp == G ? in2_buf : in3_buf);
    const int32_t wi = warp < G ? qnorm : (warp == G ? knorm : -1);
    const int64_t base = (warp < G ? int64_t(kvh) * G + warp : int64_t(kvh)) * HD;
    const uint16_t* src = reinterpret_cast<const uint16_t*>(buffer_ptr(p, buf));
    uint16_t x[kPer];
#ifdef TILE_FLAG_HANDOFF
    int64_t idx[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) idx[j] = base + lane + 32 * j;
    fl_read_bf16<kPer>(p, src, idx, epoch, x);
#else
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = __ldcg(src + base + lane + 32 * j);
#endif
    uint16_t* dst = st + warp * HD;  // q head g at row g, k at row G, v at row G + 1
    if (wi >= 0) {
      const uint16_t* w = p.weights[wi];
      float wv[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) wv[j] = bf2f(__ldg(w + lane + 32 * j));
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) ss = fmaf(bf2f(x[j]), bf2f(x[j]), ss);
      ss = warp_sum(ss);
      // mean + eps rounded twice, as the CPU's, whatever the compiler fuses: at the power-of-two head_dims the mean
      // is an exact scaling (the same bits as the division), at 96 a division.
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
  // attn_rotate_q from the staged heads. Two elements per thread at a time: unrolled as the compiler chooses, the
  // body inlined in the head_dim-128 counter kernel is a quarter longer; not unrolled, that kernel spills 8 bytes.
#pragma unroll 2
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
  if (owns) {  // attn_append_new_row from the staged k and v rows
    uint16_t* kc = p.k_cache[layer] + int64_t(kvh) * p.max_cache_len * HD;
    uint16_t* vc = p.v_cache[layer] + int64_t(kvh) * p.max_cache_len * HD;
    uint16_t* kb = reinterpret_cast<uint16_t*>(smem + L.kbuf);
    uint16_t* vb = reinterpret_cast<uint16_t*>(smem + L.vbuf);
    const uint16_t* kn = st + G * HD;
    const uint16_t* vn = st + (G + 1) * HD;
    for (int d = tid; d < HD; d += kThreads) {  // (one pass: HD < kThreads)
      const int dp = d < half ? d + half : d - half;
      const uint16_t kr = f2bf(attn_rope_explicit(bf2f(kn[d]), bf2f(kn[dp]), d, half, cs));
      kc[pos * HD + d] = kr;
      vc[pos * HD + d] = vn[d];
      if (first_local) {  // the staged first chunk gets the new row directly (same bf16 values)
        kb[(pos - lo) * (HD + 8) + d] = kr;
        vb[(pos - lo) * attn_vstride(HD) + d] = vn[d];
      }
    }
    // The row is read back through L2 (ld.cg) by other threads of this block, unless it is staged.
    if (!first_local) __threadfence();
  }
}

template <int HD>
__device__ __noinline__ void attn_norm_rotate_call(const KernelParams& p, int32_t kvh, int32_t part, int32_t layer,
                                                   int32_t in_buf, int32_t in2_buf, int32_t in3_buf, int32_t qnorm,
                                                   int32_t knorm, int64_t pos, bool prestaged, uint32_t epoch) {
  attn_norm_rotate_body<HD>(p, kvh, part, layer, in_buf, in2_buf, in3_buf, qnorm, knorm, pos, prestaged, epoch);
}
// Out of line (Llama's tiles never run it), except in the head_dim-128 counter kernel: there the call makes the tile
// loop spill 20 bytes and the inlined body spills nothing, while inlined in the other kernels it spills 8-24 bytes
// (ptxas, scripts/sass.sh).
template <int HD>
constexpr bool kAttnNormInline = !kFlags && HD == 128;
template <int HD>
__device__ __forceinline__ void attn_norm_rotate(const KernelParams& p, int32_t kvh, int32_t part, int32_t layer,
                                                 int32_t in_buf, int32_t in2_buf, int32_t in3_buf, int32_t qnorm,
                                                 int32_t knorm, int64_t pos, bool prestaged, uint32_t epoch) {
  if constexpr (kAttnNormInline<HD>)
    attn_norm_rotate_body<HD>(p, kvh, part, layer, in_buf, in2_buf, in3_buf, qnorm, knorm, pos, prestaged, epoch);
  else
    attn_norm_rotate_call<HD>(p, kvh, part, layer, in_buf, in2_buf, in3_buf, qnorm, knorm, pos, prestaged, epoch);
}

// The warp path's q A fragments once per tile, hi and lo bf16 halves, entry (k-step ks, lane 4g + t) = {hi a0, lo
// a0, hi a2, lo a2} of head g at dims 16ks + 2t (+ 8) (the lo half as row g + 8), after the warps' states in sc
// (kWarps x G x 2 floats; smem_layout sizes sc for both). Threads tid < (hd / 16) 4G; the chunk loop's first barrier
// publishes them.
__device__ __forceinline__ void attn_q_fragments(const float* qf, float* sc, int G, int hd) {
  const int tid = threadIdx.x;
  const int ks = tid / (4 * G), l = tid - ks * 4 * G, g = l >> 2, t2 = (l & 3) * 2;
  const float* qr = qf + g * (hd + 4) + ks * 16 + t2;
  uint32_t h0, l0, h2, l2;
  split_bf16x2(qr[0], qr[1], h0, l0);
  split_bf16x2(qr[8], qr[9], h2, l2);
  reinterpret_cast<uint4*>(sc + kWarps * 2 * G)[tid] = make_uint4(h0, l0, h2, l2);  // A: rows g (hi), g + 8 (lo)
}

// Chunk [c0, c0 + cn)'s K/V rows into (kb, vb), this thread's part; the caller's barrier publishes everyone's. With
// the double buffer (kv_delta != 0) the next chunk's copies go to the other buffer first (the previous chunk's
// end-of-chunk barrier freed it), then this chunk's are waited for; a prestaged first chunk is waited for; else the
// rows are copied through registers.
__device__ __forceinline__ void attn_stage_chunk(const SmemLayout& L, const uint16_t* kc, const uint16_t* vc, int c0,
                                                 int cn, int32_t lo, int32_t hi, int hd, int cpr, bool prestaged,
                                                 int kv_delta, uint16_t* kb, uint16_t* vb) {
  const int tid = threadIdx.x, kstride = hd + 8;
  if (kv_delta != 0) {
    // The next chunk goes to the other buffer, which the end-of-chunk barrier of the previous chunk freed.
    const int n0 = c0 + L.chunk;
    if (n0 < hi) {
      attn_issue_chunk(kc, vc, n0, hi - n0 < L.chunk ? hi - n0 : L.chunk, hd, kb + kv_delta, vb + kv_delta);
      cp_async_wait_but_last();  // this chunk's rows (this thread's)
    } else {
      cp_async_wait_all();
    }
  } else if (prestaged && c0 == lo) {
    cp_async_wait_all();  // this thread's staged rows
  } else {
    for (int i = tid; i < cn * cpr; i += kThreads) {
      const int j = i / cpr, c = i - j * cpr;
      const uint4 kv = __ldcg(reinterpret_cast<const uint4*>(kc + int64_t(c0 + j) * hd) + c);
      const uint4 vv = __ldcg(reinterpret_cast<const uint4*>(vc + int64_t(c0 + j) * hd) + c);
      *reinterpret_cast<uint4*>(kb + j * kstride + c * 8) = kv;
      *reinterpret_cast<uint4*>(vb + j * attn_vstride(hd) + c * 8) = vv;
    }
  }
}

// Where the warp path keeps q's fragments and its o across the chunk loop: in registers in the counter kernel at
// head_dim 64 (4 uint4 + 8 float2), else q's fragments read from sc per chunk and o in its slots (wop). At head_dim
// 96 / 128 the registers would be 6 / 8 uint4 and 12 / 16 float2, past what the 128-register kernel holds without
// spilling; the flag kernel keeps neither (with q's fragments in registers SmolLM2 ran 9% slower there).
template <int HD>
constexpr bool kAttnRegs = !kFlags && HD == 64;

// The warp path, one chunk of cn positions: warp w's positions 8w .. 8w + 7 (those in the chunk) scored on the
// tensor cores, its online softmax in registers, o = o alpha + P V on the tensor cores. wm, wl: its running max and
// sum for head fr; q's fragments and o in registers (qreg once qloaded, oreg: kAttnRegs) or in sc and the slots
// (wop). HD / 16 k-steps in HD / 32 ldmatrix x4 blocks for the scores, HD / 8 n-tiles of o.
template <int HD>
__device__ __forceinline__ void attn_warp_chunk(int c0, int cn, int32_t lo, int G, int hd, int kstride, float scale,
                                                const uint16_t* kb, const uint16_t* vb, const uint4* qfrag,
                                                float2* wop, float& wm, float& wl
#ifndef TILE_FLAG_HANDOFF
                                                , uint4 (&qreg)[4], bool& qloaded, float2 (&oreg)[8]
#endif
) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int fr = lane >> 2, ft = lane & 3;
  const int p0 = warp * 8;
  const int nv = cn - p0 < 8 ? cn - p0 : 8;  // this warp's positions in the chunk (warp-uniform)
  if (nv > 0) {
    // Scores: D (heads x 8 positions) = q (A: head fr's hi half as row fr, its lo half as row fr + 8; HD / 16
    // k-steps of 16 dims) x K^T (B: the K rows by ldmatrix, tile i = dims 8i .. 8i + 7). Rows past nv hold stale K:
    // their columns become -inf.
#ifndef TILE_FLAG_HANDOFF
    if constexpr (kAttnRegs<HD>) {
      if (!qloaded) {  // after the first chunk's barrier, which published them
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) qreg[ks] = fr < G ? qfrag[ks * 4 * G + lane] : make_uint4(0u, 0u, 0u, 0u);
        qloaded = true;
      }
    }
#endif
    const uint16_t* krow = kb + (p0 + (lane & 7)) * kstride + (lane >> 3) * 8;
    // Two accumulator chains (alternate 32-dim blocks), HD / 32 MMAs deep in all; rows fr and fr + 8 hold the hi
    // and lo products.
    float dh[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int h = 0; h < HD / 32; ++h) {  // dims 32h .. 32h + 31: two k-steps per ldmatrix
      uint32_t kf[4];
      ldsm_x4(kf, krow + 32 * h);
#pragma unroll
      for (int k2 = 0; k2 < 2; ++k2) {
        uint4 qw;
#ifndef TILE_FLAG_HANDOFF
        if constexpr (kAttnRegs<HD>)
          qw = qreg[2 * h + k2];
        else
#endif
          qw = fr < G ? qfrag[(2 * h + k2) * 4 * G + lane] : make_uint4(0u, 0u, 0u, 0u);
        mma_bf16_16816(dh[h & 1], qw.x, qw.y, qw.z, qw.w, kf[2 * k2], kf[2 * k2 + 1]);
      }
    }
    const float d[2] = {(dh[0][0] + dh[0][2]) + (dh[1][0] + dh[1][2]),
                        (dh[0][1] + dh[0][3]) + (dh[1][1] + dh[1][3])};
    // Online softmax for head fr: its 8 positions are in the quad's lanes (2ft, 2ft + 1 each).
    const bool in0 = 2 * ft < nv, in1 = 2 * ft + 1 < nv;
    const float s0 = in0 ? d[0] * scale : -INFINITY, s1 = in1 ? d[1] * scale : -INFINITY;
    float mx = fmaxf(s0, s1);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(wm, mx);  // finite: the warp's first position is in the chunk
    const float alpha = wm == -INFINITY ? 0.f : expf(wm - mn);
    const float e0 = in0 ? expf(s0 - mn) : 0.f, e1 = in1 ? expf(s1 - mn) : 0.f;
    float ls = e0 + e1;
    ls += __shfl_xor_sync(0xffffffffu, ls, 1);
    ls += __shfl_xor_sync(0xffffffffu, ls, 2);
    wl = wl * alpha + ls;
    wm = mn;
    // o = o alpha + P V: P's A fragment is the scores' D fragment (m16n8k8: k = the 8 positions), hi in row fr,
    // lo in row fr + 8; V's B fragments by ldmatrix.trans (tile n = dims 8n .. 8n + 7). Stale V rows past nv are
    // zeroed (0 x NaN). o starts at the tile's first chunk (its slot holds an earlier tile's values).
    uint32_t ph, pl;
    split_bf16x2(e0, e1, ph, pl);
    const uint16_t* vrow = vb + (p0 + (lane & 7)) * attn_vstride(hd) + (lane >> 3) * 8;
    const uint32_t vm = nv < 8 ? (in0 ? 0xffffu : 0u) | (in1 ? 0xffff0000u : 0u) : 0xffffffffu;
#pragma unroll
    for (int h = 0; h < HD / 32; ++h) {  // dims 32h .. 32h + 31: n-tiles 4h .. 4h + 3
      uint32_t vf[4];
      ldsm_x4_trans(vf, vrow + 32 * h);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#ifndef TILE_FLAG_HANDOFF
        if constexpr (kAttnRegs<HD>) {
          float acc[4] = {oreg[4 * h + n].x * alpha, oreg[4 * h + n].y * alpha, 0.f, 0.f};
          mma_bf16_1688(acc, ph, pl, vf[n] & vm);
          oreg[4 * h + n] = make_float2(acc[0] + acc[2], acc[1] + acc[3]);
        } else
#endif
        {
          const int j = (4 * h + n) * 4 * G;
          const float2 o = fr < G && c0 != lo ? wop[j] : make_float2(0.f, 0.f);
          float acc[4] = {o.x * alpha, o.y * alpha, 0.f, 0.f};  // rows fr: o alpha + P_hi V; fr + 8: P_lo V
          mma_bf16_1688(acc, ph, pl, vf[n] & vm);
          if (fr < G) wop[j] = make_float2(acc[0] + acc[2], acc[1] + acc[3]);
        }
      }
    }
  }
}

// The warp path's end: the warps' states (o in opart, (m, l) in sc), then one log-sum-exp combine in warp order
// (fixed: bit-identical runs) into of / ml, the layout MERGE and the partial's store read. Warps past the first
// chunk's span never held a position (their m is -inf): the combine leaves them out.
template <int HD>
__device__ __forceinline__ void attn_warps_end(int32_t lo, int32_t hi, int chunk, int G, int hd, int fr, int ft,
                                               float* sc, float* opart, float* of, float* ml, float2* wop, float wm,
                                               float wl
#ifndef TILE_FLAG_HANDOFF
                                               , const float2 (&oreg)[8]
#endif
) {
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int wused = attn_warps_used(lo, hi, chunk);
  if (warp < wused) {
    if (fr < G && ft == 0) {  // (without kAttnRegs the o is in opart already)
      sc[(warp * G + fr) * 2] = wm;
      sc[(warp * G + fr) * 2 + 1] = wl;
    }
#ifndef TILE_FLAG_HANDOFF
    if constexpr (kAttnRegs<HD>) {
      if (fr < G) {
#pragma unroll
        for (int n = 0; n < 8; ++n) wop[n * 4 * G] = oreg[n];
      }
    }
#endif
  }
  __syncthreads();
  attn_combine_warps<HD>(sc, opart, G, hd, wused, of, ml);
  __syncthreads();
}

// The tile's partial for its MERGE (KV head kvh, partition part of P): per head m, l, then o [hd].
__device__ __forceinline__ void attn_store_partial(const KernelParams& p, const Tile& t, int kvh, int part, int P,
                                                   int G, int hd, const float* ml, const float* of, uint32_t epoch) {
  float* out = reinterpret_cast<float*>(buffer_ptr(p, t.out_buf));
  for (int i = static_cast<int>(threadIdx.x); i < G * (hd + 2); i += kThreads) {
    const int g = i / (hd + 2), k = i - g * (hd + 2);
    const int64_t base = (int64_t(kvh * P + part) * G + g) * (hd + 2);
    put_f32(out, base + k, k == 0 ? ml[g] : (k == 1 ? ml[G + g] : of[g * hd + (k - 2)]), epoch);
  }
}

// One ATTN tile: q rotated, the new row appended, the chunk loop over the partition's positions on the warp path,
// then the partial for MERGE. HD: the kernel's head_dim (the launch picks the kernel; p.h.head_dim == HD).
// `prestaged`: attn_prestage ran before the wait (RoPE tables ready, chunk 1 rows < pos in flight by cp.async).
// True when the tile kept its (m, l, o) in shared memory only: partition 0 holds every position and the plan says
// its MERGE runs next on this worker (out_offset 1), which then merges locally and adds this tile's counter
// increment after its own release (a release here would wait for the partials' stores, and the MERGE's release for
// this increment).
template <int HD>
__device__ __forceinline__ bool attn_tile(const KernelParams& p, const Tile& t, int64_t pos, uint8_t* smem,
                                          const SmemLayout& L, bool prestaged, uint32_t epoch) {
  const int hd = p.h.head_dim, G = p.h.num_heads / p.h.num_kv_heads, P = p.h.attn_partitions;
  const int kvh = t.aux0, part = t.aux1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* qf = reinterpret_cast<float*>(smem + L.qf);
  float* of = reinterpret_cast<float*>(smem + L.of);
  float* opart = reinterpret_cast<float*>(smem + L.opart);
  float* ml = reinterpret_cast<float*>(smem + L.ml);  // m[G], l[G]
  float* cs = reinterpret_cast<float*>(smem + L.cs);
  float* sc = reinterpret_cast<float*>(smem + L.sc);
  uint16_t* kb = reinterpret_cast<uint16_t*>(smem + L.kbuf);
  uint16_t* vb = reinterpret_cast<uint16_t*>(smem + L.vbuf);
  const int kstride = hd + 8;

  int32_t lo, hi;
  attn_partition_range(static_cast<int32_t>(pos + 1), part, P, p.h.attn_granule, p.h.attn_single, &lo, &hi);
  if (!prestaged) {
    rope_tables(p, pos, cs);
    __syncthreads();
  }  // else: written before the wait, published by the wait's barrier
  const bool first_local = prestaged && pos < lo + L.chunk;
  const uint16_t* q = reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in_buf));
  const uint16_t* knew = reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in2_buf));
  const uint16_t* vnew = reinterpret_cast<const uint16_t*>(buffer_ptr(p, t.in3_buf));
  uint16_t* kc = p.k_cache[t.layer] + int64_t(kvh) * p.max_cache_len * hd;
  uint16_t* vc = p.v_cache[t.layer] + int64_t(kvh) * p.max_cache_len * hd;
  if (t.norm < 0 && t.weight2 < 0) {  // else: attn_norm_rotate ran (run_tile)
    attn_rotate_q(p, q, kvh, G, hd, cs, qf, of, ml, epoch);
    if (lo <= pos && pos < hi)
      attn_append_new_row(p, knew, vnew, kvh, G, hd, cs, kc, vc, kb, vb, pos, lo, first_local, epoch);
  }
  __syncthreads();
  if (lo >= hi) TILE_MARK(kTimePhase1);  // (with positions: after the first chunk's rows have landed, below)
  if (tid < (HD / 16) * 4 * G && lo < hi) attn_q_fragments(qf, sc, G, hd);

  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int cpr = hd / 8;  // 16-byte chunks per row
  // The warp path: each warp owns 8 positions of every chunk, end to end. Its scores and o update run on the tensor
  // cores (ldmatrix + mma.m16n8k16 / m16n8k8, q and the probabilities as hi + lo bf16 halves); the warp's online
  // softmax runs in registers (two shuffles per reduction). Two block barriers per chunk (rows landed, buffer free),
  // and the warps' (m, l, o) are combined once per tile. (A loop with a block barrier after each of scores, softmax,
  // o partials and their sum took ~4.3 us per 128 positions at 16K against ~1.1 us of bytes.)
  // A chunk is kAttnChunkElems / HD positions, so that its K and V rows take the same bytes at every head_dim: at
  // HD 128 its 64 positions occupy 8 of the 16 warps. The other 8 only stage rows and meet the barriers. That costs
  // little: with the double buffer a chunk takes max(its bytes, one warp's chain), and one warp's 8 positions x 128
  // dims (8 k-steps in two MMA chains, 16 independent o n-tiles) take less than the chunk's 34 KB at an SM's share
  // of the bandwidth; only a single short chunk (short contexts) sees the longer chain, ~0.2 us. The alternative,
  // warp pairs that split a position group's dims (scores summed through shared memory, a pair barrier per chunk),
  // would halve that chain at the price of the exchange.
  // Fragment row fr (head; for the K / V tiles a position) and column pair ft. Lanes of rows >= G compute on zero q
  // and are never stored.
  const int fr = lane >> 2, ft = lane & 3;
  // Its o for head fr, dims 8n + 2ft, + 1, goes to opart as [warp][n][lane < 4G] float2 (attn_tc_oidx), so that the
  // 4G lanes' float2 of one n are contiguous (a [warp][G][hd] layout puts the heads' rows on the same banks: 4
  // wavefronts per access). Without kAttnRegs it stays there across the chunk loop (a load and a store per n and
  // chunk); with them it is held in registers (oreg) and stored once, before the combine.
  float2* wop = reinterpret_cast<float2*>(opart) + warp * (HD / 8) * 4 * G + lane;
  const uint4* qfrag = reinterpret_cast<const uint4*>(sc + kWarps * 2 * G);  // written below, after qf
#ifndef TILE_FLAG_HANDOFF
  // q's fragments in registers from the tile's first chunk on (4 LDS.128 per warp and chunk fewer), kAttnRegs only.
  // Not in the flag kernel: there the same code made SmolLM2 9% slower; the values are the same.
  uint4 qreg[4];
  bool qloaded = false;
  // Its o in registers across the chunk loop (with the combine's overlapped loads -2.5% per token at 16K, +0.3% at
  // prompt 32; 12 / 8 bytes of spills in the tile loop).
  float2 oreg[8];
#pragma unroll
  for (int n = 0; n < 8; ++n) oreg[n] = make_float2(0.f, 0.f);
#endif
  float wl = 0.f, wm = -INFINITY;  // this warp's running sum and max for head fr
  // The double buffer: chunk c is read from buffer c % 2; chunk c+1's copies are issued before chunk c is waited
  // for. Every row is final here: rows < pos before the step, row pos after the barrier above (in the cache, and in
  // the staged first chunk when first_local).
  // One signed element offset from the current buffer to the other (smem_layout keeps vbuf2 - vbuf = kbuf2 - kbuf;
  // one register, not two pointers: the kernel is at its 128-register bound); 0 = single buffer.
  int kv_delta = L.kbuf2 >= 0 ? (L.kbuf2 - L.kbuf) / 2 : 0;
  if (kv_delta != 0 && !prestaged && lo < hi)
    attn_issue_chunk(kc, vc, lo, hi - lo < L.chunk ? hi - lo : L.chunk, hd, kb, vb);
  for (int c0 = lo; c0 < hi; c0 += L.chunk) {
    const int cn = hi - c0 < L.chunk ? hi - c0 : L.chunk;
    attn_stage_chunk(L, kc, vc, c0, cn, lo, hi, hd, cpr, prestaged, kv_delta, kb, vb);
    __syncthreads();
    if (c0 == lo) TILE_MARK(kTimePhase1);  // ATTN "inputs": q, the new row, first chunk
#ifndef TILE_FLAG_HANDOFF
    attn_warp_chunk<HD>(c0, cn, lo, G, hd, kstride, scale, kb, vb, qfrag, wop, wm, wl, qreg, qloaded, oreg);
#else
    attn_warp_chunk<HD>(c0, cn, lo, G, hd, kstride, scale, kb, vb, qfrag, wop, wm, wl);
#endif
    __syncthreads();  // every warp is done with this buffer: it may receive chunk c+2
    if (kv_delta != 0) {  // the buffer just read receives chunk c+2
      kb += kv_delta;
      vb += kv_delta;
      kv_delta = -kv_delta;
    }
  }
#ifndef TILE_FLAG_HANDOFF
  attn_warps_end<HD>(lo, hi, L.chunk, G, hd, fr, ft, sc, opart, of, ml, wop, wm, wl, oreg);
#else
  attn_warps_end<HD>(lo, hi, L.chunk, G, hd, fr, ft, sc, opart, of, ml, wop, wm, wl);
#endif
  TILE_MARK(kTimePhase2);
  if (t.out_offset == 1 && part == 0 && hi >= pos + 1) return true;
  attn_store_partial(p, t, kvh, part, P, G, hd, ml, of, epoch);
  return false;
}
