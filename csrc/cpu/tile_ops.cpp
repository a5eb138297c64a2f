// Tile ops of the reference executor. Reduction orders are fixed (docs/numerics.md) so that every run of the same
// plan on the same inputs gives bit-identical results, whatever the worker interleaving or thread count.
#include "cpu/tile_ops.h"
#include "cpu/weight_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

namespace tiles {
namespace cpu {

namespace {

// Round to nearest even, NaN stays NaN (same as c10::BFloat16 and CUDA __float2bfloat16_rn).
inline uint16_t f32_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

inline float dot_f(const float* a, const float* b, int64_t K) {
  float acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += a[k + j] * b[k + j];
  }
  for (; k < K; ++k) acc[k % kLanes] += a[k] * b[k];
  return lane_sum(acc);
}

// Matrix w of the weights list in the plan's weight format (its scales where it has them).
WeightRows matrix(const LaunchIO& io, int32_t w) {
  const bool scaled = io.scales[w] != nullptr;
  return WeightRows{io.weights[w], io.scales[w], scaled ? io.plan->h.scale_layout : kScaleNone,
                    io.plan->weights[w].cols};
}

template <typename T>
T* buf(const LaunchIO& io, int32_t id) {
  return reinterpret_cast<T*>(io.scratch + io.plan->buffers[id].offset_bytes);
}

// HF LlamaRMSNorm order: fp32 x * rsqrt(mean(x^2) + eps), rounded to bf16, times the bf16 weight, rounded.
// Output holds bf16 values widened to fp32 (exact), ready for dot_w.
void rmsnorm(const float* x, int64_t H, const uint16_t* w, float eps, float* out) {
  const float mean = dot_f(x, x, H) / float(H);
  const float r = 1.0f / std::sqrt(mean + eps);
  for (int64_t k = 0; k < H; ++k) out[k] = round_bf16(round_bf16(x[k] * r) * bf16_to_f32(w[k]));
}

// Rows [begin, end) of a matvec, split over threads when big enough to pay for it. Each row is reduced by one
// thread in the fixed order, so the thread count never changes a result.
template <typename F>
void for_rows(int64_t begin, int64_t end, int64_t cols, const F& f) {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1));
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) f(r);
  });
}

// a beats b for argmax: larger value, lowest index on ties; NaN beats numbers so that poisoned logits surface.
inline bool argmax_better(float v, int64_t i, float bv, int64_t bi) {
  const bool vn = std::isnan(v), bn = std::isnan(bv);
  if (vn || bn) return vn && (!bn || i < bi);
  return v > bv || (v == bv && i < bi);
}

void rope(const float* x, const float* cos, const float* sin, int64_t hd, float* out) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    out[i] = x1 * cos[i] - x2 * sin[i];
    out[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

// The bf16 head vector x (hd elements of `src`), widened to fp32 and, where the tile names a per-head RMSNorm
// weight (norm >= 0: q_norm / k_norm), normalised as any RMSNorm over the head: bf16 values again, exact in fp32.
void load_head(const LaunchIO& io, const uint16_t* src, int64_t hd, int32_t norm, float* x, float* tmp) {
  for (int64_t d = 0; d < hd; ++d) tmp[d] = bf16_to_f32(src[d]);
  if (norm < 0) {
    std::copy(tmp, tmp + hd, x);
    return;
  }
  rmsnorm(tmp, hd, io.weights[norm], io.eps, x);
}

// The partition that owns the new position normalises (k_norm) and rotates K_new and stores it with V_new before
// any partition reads the cache.
void attn_append_kv(const LaunchIO& io, const StepIO& st, const Tile& t, uint16_t* kc, uint16_t* vc) {
  const int64_t hd = io.plan->h.head_dim, kvh = t.aux0, pos = st.pos;
  std::vector<float> x(hd), tmp(hd), rot(hd);
  load_head(io, buf<uint16_t>(io, t.in2_buf) + kvh * hd, hd, t.weight2, x.data(), tmp.data());
  rope(x.data(), st.cos, st.sin, hd, rot.data());
  const uint16_t* vn = buf<uint16_t>(io, t.in3_buf) + kvh * hd;
  for (int64_t d = 0; d < hd; ++d) {
    kc[pos * hd + d] = f32_to_bf16(rot[d]);
    vc[pos * hd + d] = vn[d];
  }
}

// One q head over positions [lo, hi): the unnormalised partial (m, l, o[hd]) of docs/numerics.md.
void attn_head(const Header& h, const float* q_rot, const uint16_t* kc, const uint16_t* vc, int32_t lo, int32_t hi,
               float* out) {
  const int64_t hd = h.head_dim;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> scores(std::max<int64_t>(hi - lo, 0)), o(hd, 0.0f), kf(hd);
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  bool nan = false;
  for (int64_t j = lo; j < hi; ++j) {
    for (int64_t d = 0; d < hd; ++d) kf[d] = bf16_to_f32(kc[j * hd + d]);
    const float s = dot_f(q_rot, kf.data(), hd) * scale;
    scores[j - lo] = s;
    nan |= std::isnan(s);
    m = s > m ? s : m;
  }
  if (nan) m = std::numeric_limits<float>::quiet_NaN();
  for (int64_t j = lo; j < hi; ++j) {
    const float e = std::exp(scores[j - lo] - m);
    l += e;
    const uint16_t* v = vc + j * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] += e * bf16_to_f32(v[d]);
  }
  out[0] = m;
  out[1] = l;
  for (int64_t d = 0; d < hd; ++d) out[2 + d] = o[d];
}

void run_attn(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const Header& h = io.plan->h;
  const int64_t hd = h.head_dim, G = h.num_heads / h.num_kv_heads, P = h.attn_partitions;
  const int64_t kvh = t.aux0, p = t.aux1, pos = st.pos;
  int32_t lo, hi;
  attn_partition_range(int32_t(pos + 1), int32_t(p), int32_t(P), h.attn_granule, h.attn_single, &lo, &hi);
  uint16_t* kc = io.k_cache[t.layer] + kvh * io.max_len * hd;
  uint16_t* vc = io.v_cache[t.layer] + kvh * io.max_len * hd;
  if (lo <= pos && pos < hi) attn_append_kv(io, st, t, kc, vc);
  const uint16_t* q = buf<uint16_t>(io, t.in_buf);
  float* parts = buf<float>(io, t.out_buf);
  std::vector<float> x(hd), tmp(hd), rot(hd);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t qh = kvh * G + g;
    load_head(io, q + qh * hd, hd, t.norm, x.data(), tmp.data());
    rope(x.data(), st.cos, st.sin, hd, rot.data());
    attn_head(h, rot.data(), kc, vc, lo, hi, parts + ((kvh * P + p) * G + g) * (hd + 2));
  }
}

void run_merge(const LaunchIO& io, const Tile& t) {
  const Header& h = io.plan->h;
  const int64_t hd = h.head_dim, G = h.num_heads / h.num_kv_heads, P = h.attn_partitions, kvh = t.aux0;
  const float* parts = buf<float>(io, t.in_buf);
  uint16_t* out = buf<uint16_t>(io, t.out_buf);
  std::vector<float> o(hd);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t qh = kvh * G + g;
    auto part = [&](int64_t p) { return parts + ((kvh * P + p) * G + g) * (hd + 2); };
    float M = -std::numeric_limits<float>::infinity();
    bool nan = false;
    for (int64_t p = 0; p < P; ++p) {
      const float m = part(p)[0];
      nan |= std::isnan(m) || std::isnan(part(p)[1]);
      M = m > M ? m : M;
    }
    float L = 0.0f;
    std::fill(o.begin(), o.end(), 0.0f);
    for (int64_t p = 0; p < P; ++p) {
      const float* pp = part(p);
      if (pp[0] == -std::numeric_limits<float>::infinity()) continue;  // empty partition
      const float c = std::exp(pp[0] - M);
      L += pp[1] * c;
      for (int64_t d = 0; d < hd; ++d) o[d] += pp[2 + d] * c;
    }
    const float inv = nan ? std::numeric_limits<float>::quiet_NaN() : 1.0f / L;
    for (int64_t d = 0; d < hd; ++d) out[qh * hd + d] = f32_to_bf16(o[d] * inv);
  }
}

void run_embed(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  const uint16_t* row = io.weights[t.weight] + st.token * H;
  float* x = buf<float>(io, t.out_buf);
  for (int64_t k = 0; k < H; ++k) x[k] = bf16_to_f32(row[k]);
}

// The tile's normed input h = rmsnorm(in_buf, norm) (QKV, GATEUP, LMHEAD).
std::vector<float> normed_input(const LaunchIO& io, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  std::vector<float> hn(H);
  rmsnorm(buf<float>(io, t.in_buf), H, io.weights[t.norm], io.eps, hn.data());
  return hn;
}

// weight2 >= 0: the bias of the weight's rows, added to the fp32 dot before the one rounding. Without a bias no
// add at all, so that a -0.0 dot keeps its sign (Llama plans stay bit-identical).
void run_qkv(const LaunchIO& io, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  const std::vector<float> hn = normed_input(io, t);
  const WeightRows w = matrix(io, t.weight);
  uint16_t* out = buf<uint16_t>(io, t.out_buf) + t.out_offset - t.row_begin;
  if (t.weight2 < 0) {
    for_rows(t.row_begin, t.row_end, H, [&](int64_t r) { out[r] = f32_to_bf16(w.dot(r, hn.data())); });
    return;
  }
  const uint16_t* bias = io.weights[t.weight2];
  for_rows(t.row_begin, t.row_end, H, [&](int64_t r) {
    out[r] = f32_to_bf16(w.dot(r, hn.data()) + bf16_to_f32(bias[r]));
  });
}

void run_resid(const LaunchIO& io, const Tile& t) {
  const int64_t K = io.plan->weights[t.weight].cols;
  const uint16_t* in = buf<uint16_t>(io, t.in_buf);
  std::vector<float> x(K);
  for (int64_t k = 0; k < K; ++k) x[k] = bf16_to_f32(in[k]);
  const WeightRows w = matrix(io, t.weight);
  const float* res = buf<float>(io, t.in2_buf) + t.out_offset - t.row_begin;
  float* out = buf<float>(io, t.out_buf) + t.out_offset - t.row_begin;
  for_rows(t.row_begin, t.row_end, K, [&](int64_t r) { out[r] = res[r] + w.dot(r, x.data()); });
}

void run_gateup(const LaunchIO& io, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  const std::vector<float> hn = normed_input(io, t);
  const WeightRows wg = matrix(io, t.weight);
  const WeightRows wu = matrix(io, t.weight2);
  uint16_t* out = buf<uint16_t>(io, t.out_buf) + t.out_offset - t.row_begin;
  for_rows(t.row_begin, t.row_end, 2 * H, [&](int64_t r) {
    const float g = wg.dot(r, hn.data());
    const float u = wu.dot(r, hn.data());
    out[r] = f32_to_bf16(g / (1.0f + std::exp(-g)) * u);
  });
}

// The tile's logits rows, and their (max, argmax) into its partial slot aux0.
void run_lmhead(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  const std::vector<float> hn = normed_input(io, t);
  const uint16_t* w = io.weights[t.weight];
  float* logits = st.logits;
  for_rows(t.row_begin, t.row_end, H, [&](int64_t r) { logits[r] = dot_w(w + r * H, hn.data(), H); });
  float best = logits[t.row_begin];
  int64_t bi = t.row_begin;
  for (int64_t r = t.row_begin + 1; r < t.row_end; ++r) {
    if (argmax_better(logits[r], r, best, bi)) best = logits[r], bi = r;
  }
  float* part = buf<float>(io, t.out_buf) + 2 * t.aux0;
  const int32_t idx = int32_t(bi);
  part[0] = best;
  std::memcpy(part + 1, &idx, 4);
}

int64_t run_argmax(const LaunchIO& io, const Tile& t) {
  const float* parts = buf<float>(io, t.in_buf);
  float best = 0.0f;
  int64_t bi = -1;
  for (int64_t i = 0; i < t.aux0; ++i) {
    int32_t idx;
    std::memcpy(&idx, parts + 2 * i + 1, 4);
    if (bi < 0 || argmax_better(parts[2 * i], idx, best, bi)) best = parts[2 * i], bi = idx;
  }
  return bi;
}

}  // namespace

int64_t run_tile(const LaunchIO& io, const StepIO& st, const Tile& t) {
  switch (t.op) {
    case kOpEmbed: run_embed(io, st, t); return -1;
    case kOpQkv: run_qkv(io, t); return -1;
    case kOpAttn: run_attn(io, st, t); return -1;
    case kOpMerge: run_merge(io, t); return -1;
    case kOpResid: run_resid(io, t); return -1;
    case kOpGateup: run_gateup(io, t); return -1;
    case kOpLmhead: run_lmhead(io, st, t); return -1;
    case kOpArgmax: return run_argmax(io, t);
  }
  TORCH_CHECK(false, "tiles::decode_step: unknown op ", t.op);  // view_plan rejects these first
}

}  // namespace cpu
}  // namespace tiles
