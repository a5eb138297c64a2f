// The sampler's arithmetic: one definition that the CPU reference executor and the CUDA kernel both compile, so
// that both executors keep the same ids and draw the same token from the same logits (planner/format.py,
// "Sampling", is the recipe). Every float operation is a named IEEE operation: on the device the _rn intrinsics,
// which nvcc never contracts into an FMA, on the host plain operators (ISO C++ builds do not contract either);
// fmaf where a fused operation is meant. Plain C++ (no torch, no CUDA headers): both builds include it.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "plan_format.h"

#if defined(__CUDACC__)
#define TILE_SAMPLER_FN __host__ __device__ __forceinline__
#else
#define TILE_SAMPLER_FN inline
#endif

namespace tiles {
namespace sampler {

TILE_SAMPLER_FN float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

TILE_SAMPLER_FN float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

TILE_SAMPLER_FN float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

TILE_SAMPLER_FN float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

TILE_SAMPLER_FN float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}

TILE_SAMPLER_FN float bits_f32(int32_t b) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(b);
#else
  float f;
  memcpy(&f, &b, 4);
  return f;
#endif
}

TILE_SAMPLER_FN uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__float_as_int(f));
#else
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Randomness: Philox4x32-10 (Salmon et al., Random123), counter (position, 0, 0, 0), key (seed_lo, seed_hi)
// ---------------------------------------------------------------------------------------------------------------
TILE_SAMPLER_FN void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = uint32_t(p1);
    c[2] = n2;
    c[3] = uint32_t(p0);
  }
}

// The draw's uniform in [0, 1) for the token at absolute position `position`: 24 random bits, exact in fp32.
TILE_SAMPLER_FN float uniform_at(int64_t position, uint32_t seed_lo, uint32_t seed_hi) {
  uint32_t c[4] = {uint32_t(uint64_t(position)), uint32_t(uint64_t(position) >> 32), 0u, 0u};
  philox4x32_10(c, seed_lo, seed_hi);
  return mul_rn(float(c[0] >> 8), 5.9604644775390625e-08f);  // 2^-24
}

// ---------------------------------------------------------------------------------------------------------------
// The settings and the per-id processing (steps 1-3)
// ---------------------------------------------------------------------------------------------------------------
struct Params {
  int32_t mode;
  int32_t top_k;
  int32_t eos_suppress_until;
  uint32_t seed_lo, seed_hi;
  float temperature, top_p_cut, min_p, penalty;
  int32_t num_suppress;
  int32_t suppress_ids[kMaxEos];
};

// The header words of a sampler tensor (host or device memory the caller may read directly).
TILE_SAMPLER_FN Params read_params(const int32_t* w) {
  Params p;
  p.mode = w[offsetof(SamplerSettings, mode) / 4];
  p.top_k = w[offsetof(SamplerSettings, top_k) / 4];
  p.eos_suppress_until = w[offsetof(SamplerSettings, eos_suppress_until) / 4];
  p.seed_lo = static_cast<uint32_t>(w[offsetof(SamplerSettings, seed_lo) / 4]);
  p.seed_hi = static_cast<uint32_t>(w[offsetof(SamplerSettings, seed_hi) / 4]);
  p.temperature = bits_f32(w[offsetof(SamplerSettings, temperature_bits) / 4]);
  p.top_p_cut = bits_f32(w[offsetof(SamplerSettings, top_p_cut_bits) / 4]);
  p.min_p = bits_f32(w[offsetof(SamplerSettings, min_p_bits) / 4]);
  p.penalty = bits_f32(w[offsetof(SamplerSettings, penalty_bits) / 4]);
  int32_t n = w[offsetof(SamplerSettings, num_suppress) / 4];
  p.num_suppress = n < 0 ? 0 : (n > kMaxEos ? kMaxEos : n);
  for (int i = 0; i < kMaxEos; ++i) p.suppress_ids[i] = w[offsetof(SamplerSettings, suppress_ids) / 4 + i];
  return p;
}

// Whether id's bit is set in its seen-bitmap word (word id >> 5).
TILE_SAMPLER_FN bool seen_in_word(int32_t word, int32_t id) {
  return ((static_cast<uint32_t>(word) >> (id & 31)) & 1u) != 0u;
}

TILE_SAMPLER_FN bool is_seen(const int32_t* seen, int32_t id) { return seen_in_word(seen[id >> 5], id); }

// Whether the token at absolute position `position` sees `id` at -inf (min_new_tokens).
// The loop runs over all kMaxEos entries (num_suppress masks the rest), so that the ids stay in registers.
TILE_SAMPLER_FN bool is_suppressed(const Params& p, int64_t position, int32_t id) {
  if (position >= p.eos_suppress_until) return false;
  bool hit = false;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int i = 0; i < kMaxEos; ++i) hit |= i < p.num_suppress && p.suppress_ids[i] == id;
  return hit;
}

// Steps 1-3 on one logit: the repetition penalty, the EOS suppression, the temperature. -0 becomes +0 (x + 0), so
// that the order keys below agree with float comparisons; no later operation tells the two zeros apart.
TILE_SAMPLER_FN float process_score(float logit, bool seen, bool suppressed, const Params& p) {
  float v = logit;
  if (seen && p.penalty != 1.0f) v = v < 0.0f ? mul_rn(v, p.penalty) : div_rn(v, p.penalty);
  if (suppressed) v = -INFINITY;
  if (p.temperature != 1.0f) v = div_rn(v, p.temperature);
  return add_rn(v, 0.0f);
}

// A score the sampler refuses to draw from (BAD_LOGITS).
TILE_SAMPLER_FN bool bad_score(float v) { return v != v || v == INFINITY; }

// An order-preserving key: a > b as floats (neither NaN, zeros canonical) exactly when key(a) > key(b).
TILE_SAMPLER_FN uint32_t order_key(float v) {
  const uint32_t b = f32_bits(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

TILE_SAMPLER_FN float key_value(uint32_t k) {
  return bits_f32(static_cast<int32_t>((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k));
}

// The canonical order (score descending, id ascending) as one ascending 64-bit key.
TILE_SAMPLER_FN uint64_t canonical_key(float v, int32_t id) {
  return (uint64_t(~order_key(v)) << 32) | uint32_t(id);
}

// ---------------------------------------------------------------------------------------------------------------
// The shared exp and steps 5-7 over the kept ids in canonical order, L[0..n) (their scores v[0..n))
// ---------------------------------------------------------------------------------------------------------------
// exp(x) for x <= 0 (x = L_j - L_0): Cody-Waite reduction to |r| <= ln2 / 2 and a degree-7 Taylor polynomial in
// Horner form with fused steps (about 1 ulp). Below -86, where 2^n would leave fp32's normal range, 0: those
// weights are under 1e-37 of the largest. exp(0) is exactly 1.
TILE_SAMPLER_FN float exp_neg(float x) {
  if (!(x >= -86.0f)) return 0.0f;  // -inf too
  const float n = rintf(mul_rn(x, 1.44269502735137939453125f));
  float r = fma_rn(n, -0.693145751953125f, x);
  r = fma_rn(n, -1.428606765330187045e-06f, r);
  float q = 1.98412698412698413e-04f;  // 1/5040
  q = fma_rn(q, r, 1.38888888888888889e-03f);
  q = fma_rn(q, r, 8.33333333333333333e-03f);
  q = fma_rn(q, r, 4.16666666666666667e-02f);
  q = fma_rn(q, r, 1.66666666666666667e-01f);
  q = fma_rn(q, r, 0.5f);
  q = fma_rn(q, r, 1.0f);
  q = fma_rn(q, r, 1.0f);
  const float scale = bits_f32((static_cast<int32_t>(n) + 127) << 23);
  return mul_rn(q, scale);
}

// Step 5's weight of L_j (elementwise: the CUDA tile computes them across a warp).
TILE_SAMPLER_FN float weight_of(float vj, float v0) { return exp_neg(sub_rn(vj, v0)); }

// e[0] + ... + e[n-1] in this order (one thread).
TILE_SAMPLER_FN float sum_in_order(const float* e, int32_t n) {
  float s = 0.0f;
  for (int32_t j = 0; j < n; ++j) s = add_rn(s, e[j]);
  return s;
}

// Step 5's probability p_j = e_j / S (elementwise).
TILE_SAMPLER_FN float prob_of(float ej, float s) { return div_rn(ej, s); }

// Step 5's cut: m = 1 + #{j >= 1: c_j > cut}, c_j = p[n-1] + ... + p[j] summed from the end (one thread). The suffix
// sums only grow towards j = 0, so the first j from the end whose sum passes the cut fixes m.
TILE_SAMPLER_FN int32_t top_p_keep(const float* p, int32_t n, float cut) {
  float c = 0.0f;
  for (int32_t j = n - 1; j >= 1; --j) {
    c = add_rn(c, p[j]);
    if (c > cut) return j + 1;
  }
  return 1;
}

// Step 6's threshold from S' = e_0 + ... + e_{m-1}: min_p * (e_0 / S'), e_0 = 1.
TILE_SAMPLER_FN float min_p_threshold(float s, float min_p) { return mul_rn(min_p, div_rn(1.0f, s)); }

// Step 6's test for j >= 1 (elementwise): kept unless e_j / S' < threshold.
TILE_SAMPLER_FN bool min_p_keeps(float ej, float s, float threshold) { return !(div_rn(ej, s) < threshold); }

// Step 7 (one thread): the position in L of the drawn id. keep[j] != 0 marks the kept ids of L[0..n).
TILE_SAMPLER_FN int32_t draw_index(const float* e, const uint8_t* keep, int32_t n, float u) {
  float s = 0.0f;
  for (int32_t j = 0; j < n; ++j)
    if (keep[j]) s = add_rn(s, e[j]);
  const float target = mul_rn(u, s);
  float c = 0.0f;
  int32_t last = 0;
  for (int32_t j = 0; j < n; ++j) {
    if (!keep[j]) continue;
    c = add_rn(c, e[j]);
    if (e[j] > 0.0f) last = j;
    if (c > target) return j;
  }
  return last;
}

// Steps 5-7 on one thread, in the order the CUDA ARGMAX tile runs them (its elementwise phases across a warp, the
// in-order sums on one lane): v[0..n) the kept scores in canonical order (n >= 1), e / p scratch of n floats,
// keep[0..n) the result (1: kept). Returns the position in L of the drawn id (kModeSample) or 0 (kModeGreedy).
TILE_SAMPLER_FN int32_t finish_kept(const float* v, int32_t n, const Params& p, float u, float* e, float* pr,
                                    uint8_t* keep) {
  for (int32_t j = 0; j < n; ++j) e[j] = weight_of(v[j], v[0]);
  int32_t m = n;
  if (p.top_p_cut > 0.0f) {
    const float s = sum_in_order(e, n);
    for (int32_t j = 0; j < n; ++j) pr[j] = prob_of(e[j], s);
    m = top_p_keep(pr, n, p.top_p_cut);
  }
  for (int32_t j = 0; j < n; ++j) keep[j] = j < m ? 1 : 0;
  if (p.min_p > 0.0f) {
    const float s = sum_in_order(e, m);
    const float thr = min_p_threshold(s, p.min_p);
    for (int32_t j = 1; j < m; ++j) keep[j] = min_p_keeps(e[j], s, thr) ? 1 : 0;
  }
  return p.mode == kModeSample ? draw_index(e, keep, n, u) : 0;
}

}  // namespace sampler
}  // namespace tiles
