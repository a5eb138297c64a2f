// MERGE tiles: the log-sum-exp merge of an attention's partitions, and the local merge from the partition-0 tile's
// shared memory. Part of the decode kernel: decode_kernel.cuh includes it inside its anonymous namespace
// (tiles::cuda), after attention.cuh.
#pragma once

// Out of line (scalar arguments, so nothing of the caller's goes to the stack): at short context the local merge
// runs instead and this code only sat between the hot blocks of the tile loop; at long context a call per MERGE tile
// costs nothing. `sf`: L.msf.
__device__ __noinline__ void merge_tile(const KernelParams& p, int32_t kvh, int32_t in_buf, int32_t out_buf, float* sf,
                                        uint32_t epoch) {
  const int hd = p.h.head_dim, G = p.h.num_heads / p.h.num_kv_heads, P = p.h.attn_partitions;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* part = reinterpret_cast<const float*>(buffer_ptr(p, in_buf));
  uint16_t* out = reinterpret_cast<uint16_t*>(buffer_ptr(p, out_buf));  // sf: [G][P] exp(m_p - M) / L
#ifndef TILE_FLAG_HANDOFF
  // Thread (g, d) loads its o words of every partition before the scale factors are known, so that they travel in
  // the same L2 round trip as m and l (otherwise MERGE's main phase is a second round trip, ~1 us per layer on the
  // critical path at long context). The sum below keeps the loop's order and skips: the same bits.
  constexpr int kMergePre = 16;
  const bool pre = P <= kMergePre && G * hd <= kThreads;
  float ov[kMergePre];
  if (pre && tid < G * hd) {
    const int g = tid / hd, d = tid - g * hd;
#pragma unroll
    for (int pp = 0; pp < kMergePre; ++pp)
      ov[pp] = pp < P ? __ldcg(part + (int64_t(kvh * P + pp) * G + g) * (hd + 2) + 2 + d) : 0.f;
  }
#endif
  // Warp g: M = max m_p, L = sum l_p exp(m_p - M); scale factors for the o sums.
  for (int g = warp; g < G; g += kWarps) {
    if (P <= 32) {
      // One partition per lane: m and l in one L2 round trip (the general loop below takes two: m, then m and l).
      // Same values and order as the general loop: one term per lane, then the same warp reductions.
      float m = -INFINITY, l = 0.f;
#ifdef TILE_FLAG_HANDOFF
      {
        const int64_t base = (int64_t(kvh * P + lane) * G + g) * (hd + 2);
        const int64_t idx[2] = {lane < P ? base : -1, lane < P ? base + 1 : -1};
        float ml2[2];
        fl_read_f32<2>(p, part, idx, epoch, ml2);
        if (lane < P) {
          m = ml2[0];
          l = ml2[1];
        }
      }
#else
      const float* r = part + (int64_t(kvh * P + lane) * G + g) * (hd + 2);
      if (lane < P) {
        m = __ldcg(r);
        l = __ldcg(r + 1);
      }
#endif
      const float M = warp_max(m);
      const float e = m == -INFINITY ? 0.f : expf(m - M);
      const float Ls = warp_sum(l * e);
      if (lane < P) sf[g * P + lane] = e / Ls;
      continue;
    }
    float M = -INFINITY;
    for (int pp = lane; pp < P; pp += 32)
      M = fmaxf(M, get_f32(p, part, (int64_t(kvh * P + pp) * G + g) * (hd + 2), epoch));
    M = warp_max(M);
    float Ls = 0.f;
    for (int pp = lane; pp < P; pp += 32) {
      const int64_t r = (int64_t(kvh * P + pp) * G + g) * (hd + 2);  // an element index (flagged words differ)
      const float m = get_f32(p, part, r, epoch);
      const float e = m == -INFINITY ? 0.f : expf(m - M);
      sf[g * P + pp] = e;
      Ls += get_f32(p, part, r + 1, epoch) * e;
    }
    Ls = warp_sum(Ls);
    for (int pp = lane; pp < P; pp += 32) sf[g * P + pp] /= Ls;
  }
  __syncthreads();
  TILE_MARK(kTimePhase1);
#ifndef TILE_FLAG_HANDOFF
  if (pre) {
    if (tid < G * hd) {
      const int g = tid / hd, d = tid - g * hd;
      float acc = 0.f;
#pragma unroll
      for (int pp = 0; pp < kMergePre; ++pp) {
        const float e = pp < P ? sf[g * P + pp] : 0.f;
        if (e != 0.f) acc = fmaf(ov[pp], e, acc);
      }
      put_bf16(out, (kvh * G + g) * hd + d, f2bf(acc), epoch);
    }
    TILE_MARK(kTimePhase2);
    return;
  }
#endif
  for (int i = tid; i < G * hd; i += kThreads) {
    const int g = i / hd, d = i - g * hd;
    float acc = 0.f;
#ifdef TILE_FLAG_HANDOFF
    // Eight partitions' words in flight at once (a loop of single polls would pay one round trip per partition;
    // sixteen, the default partition count, made the flag kernel spill).
    for (int pp0 = 0; pp0 < P; pp0 += 8) {
      int64_t idx[8];
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int pp = pp0 + j;
        idx[j] = pp < P && sf[g * P + pp] != 0.f ? (int64_t(kvh * P + pp) * G + g) * (hd + 2) + 2 + d : -1;
      }
      fl_read_f32<8>(p, part, idx, epoch, v);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (idx[j] >= 0) acc = fmaf(v[j], sf[g * P + pp0 + j], acc);
    }
#else
    for (int pp = 0; pp < P; ++pp) {
      const float e = sf[g * P + pp];
      if (e != 0.f) acc = fmaf(__ldcg(part + (int64_t(kvh * P + pp) * G + g) * (hd + 2) + 2 + d), e, acc);
    }
#endif
    put_bf16(out, (kvh * G + g) * hd + d, f2bf(acc), epoch);
  }
  TILE_MARK(kTimePhase2);
}

// The local merge: the partition-0 ATTN tile of this KV head ran just before on this worker and held every position
// (the caller checks both), so its o and l are still in shared memory. MERGE's arithmetic for one live partition:
// M = m, e = 1, scale e / l, out = bf16(fmaf(o, scale, 0)); the same operations, so the same bits.
__device__ void merge_local(const KernelParams& p, const Tile& t, const uint8_t* smem, const SmemLayout& L,
                            uint32_t epoch) {
  const int hd = p.h.head_dim, G = p.h.num_heads / p.h.num_kv_heads;
  const float* of = reinterpret_cast<const float*>(smem + L.of);
  const float* ml = reinterpret_cast<const float*>(smem + L.ml);
  uint16_t* out = reinterpret_cast<uint16_t*>(buffer_ptr(p, t.out_buf));
  for (int i = threadIdx.x; i < G * hd; i += kThreads) {
    const float scale = 1.0f / ml[G + i / hd];
    put_bf16(out, t.aux0 * G * hd + i, f2bf(fmaf(of[i], scale, 0.f)), epoch);
  }
}

