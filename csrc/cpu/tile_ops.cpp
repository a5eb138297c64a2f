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

// Row `row` of buffer `id`: the rows of a step repeat the buffer layout every row_bytes (format.py "Rows").
template <typename T>
T* buf(const LaunchIO& io, int32_t id, int64_t row = 0) {
  return reinterpret_cast<T*>(io.scratch + io.plan->buffers[id].offset_bytes + row * io.plan->h.row_bytes);
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

// K_new of head kvh for every row, normalised (k_norm) and rotated at the row's position, rounded to bf16 as the
// cache stores it; and V_new of the head. Rows are contiguous here: [rows, hd].
void new_kv_rows(const LaunchIO& io, const StepIO& st, const Tile& t, std::vector<uint16_t>* kn,
                 std::vector<uint16_t>* vn) {
  const int64_t hd = io.plan->h.head_dim, half = hd / 2, kvh = t.aux0;
  std::vector<float> x(hd), tmp(hd), rot(hd);
  kn->resize(st.rows * hd);
  vn->resize(st.rows * hd);
  for (int64_t i = 0; i < st.rows; ++i) {
    load_head(io, buf<uint16_t>(io, t.in2_buf, i) + kvh * hd, hd, t.weight2, x.data(), tmp.data());
    rope(x.data(), st.cos + i * half, st.sin + i * half, hd, rot.data());
    const uint16_t* v = buf<uint16_t>(io, t.in3_buf, i) + kvh * hd;
    for (int64_t d = 0; d < hd; ++d) {
      (*kn)[i * hd + d] = f32_to_bf16(rot[d]);
      (*vn)[i * hd + d] = v[d];
    }
  }
}

// The K/V rows a step attends: cached positions below the step's first (pos) from the cache, the step's own
// positions from its new rows, so that cache rows at or beyond pos (a rejected draft's) are never read.
struct KvRows {
  const uint16_t *kc, *vc, *kn, *vn;
  int64_t pos, hd;
  const uint16_t* k(int64_t j) const { return j < pos ? kc + j * hd : kn + (j - pos) * hd; }
  const uint16_t* v(int64_t j) const { return j < pos ? vc + j * hd : vn + (j - pos) * hd; }
};

// One q head over positions [lo, hi): the unnormalised partial (m, l, o[hd]) of docs/numerics.md.
void attn_head(const Header& h, const float* q_rot, const KvRows& kv, int32_t lo, int32_t hi, float* out) {
  const int64_t hd = h.head_dim;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> scores(std::max<int64_t>(hi - lo, 0)), o(hd, 0.0f), kf(hd);
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  bool nan = false;
  for (int64_t j = lo; j < hi; ++j) {
    const uint16_t* kj = kv.k(j);
    for (int64_t d = 0; d < hd; ++d) kf[d] = bf16_to_f32(kj[d]);
    const float s = dot_f(q_rot, kf.data(), hd) * scale;
    scores[j - lo] = s;
    nan |= std::isnan(s);
    m = s > m ? s : m;
  }
  if (nan) m = std::numeric_limits<float>::quiet_NaN();
  for (int64_t j = lo; j < hi; ++j) {
    const float e = std::exp(scores[j - lo] - m);
    l += e;
    const uint16_t* v = kv.v(j);
    for (int64_t d = 0; d < hd; ++d) o[d] += e * bf16_to_f32(v[d]);
  }
  out[0] = m;
  out[1] = l;
  for (int64_t d = 0; d < hd; ++d) out[2 + d] = o[d];
}

// Row i's partition of this tile: positions [lo, hi) of n = pos + i + 1, as a one-row step at pos + i cuts them.
// The tile that owns pos + i stores row i's K/V there, as that step would.
void run_attn(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const Header& h = io.plan->h;
  const int64_t hd = h.head_dim, half = hd / 2, G = h.num_heads / h.num_kv_heads, P = h.attn_partitions;
  const int64_t kvh = t.aux0, p = t.aux1;
  uint16_t* kc = io.k_cache[t.layer] + kvh * io.max_len * hd;
  uint16_t* vc = io.v_cache[t.layer] + kvh * io.max_len * hd;
  std::vector<uint16_t> kn, vn;
  new_kv_rows(io, st, t, &kn, &vn);
  const KvRows kv{kc, vc, kn.data(), vn.data(), st.pos, hd};
  std::vector<float> x(hd), tmp(hd), rot(hd);
  for (int64_t i = 0; i < st.rows; ++i) {
    const int64_t at = st.pos + i;
    int32_t lo, hi;
    attn_partition_range(int32_t(at + 1), int32_t(p), int32_t(P), h.attn_granule, h.attn_single, &lo, &hi);
    if (lo <= at && at < hi) {
      std::copy(kn.begin() + i * hd, kn.begin() + (i + 1) * hd, kc + at * hd);
      std::copy(vn.begin() + i * hd, vn.begin() + (i + 1) * hd, vc + at * hd);
    }
    const uint16_t* q = buf<uint16_t>(io, t.in_buf, i);
    float* parts = buf<float>(io, t.out_buf, i);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t qh = kvh * G + g;
      load_head(io, q + qh * hd, hd, t.norm, x.data(), tmp.data());
      rope(x.data(), st.cos + i * half, st.sin + i * half, hd, rot.data());
      attn_head(h, rot.data(), kv, lo, hi, parts + ((kvh * P + p) * G + g) * (hd + 2));
    }
  }
}

// MERGE of one row's partials.
void merge_row(const LaunchIO& io, const Tile& t, int64_t row) {
  const Header& h = io.plan->h;
  const int64_t hd = h.head_dim, G = h.num_heads / h.num_kv_heads, P = h.attn_partitions, kvh = t.aux0;
  const float* parts = buf<float>(io, t.in_buf, row);
  uint16_t* out = buf<uint16_t>(io, t.out_buf, row);
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

void run_merge(const LaunchIO& io, const StepIO& st, const Tile& t) {
  for (int64_t i = 0; i < st.rows; ++i) merge_row(io, t, i);
}

void run_embed(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  for (int64_t i = 0; i < st.rows; ++i) {
    const uint16_t* row = io.weights[t.weight] + st.tokens[i] * H;
    float* x = buf<float>(io, t.out_buf, i);
    for (int64_t k = 0; k < H; ++k) x[k] = bf16_to_f32(row[k]);
  }
}

// The tile's normed inputs h_i = rmsnorm(in_buf row i, norm) (QKV, GATEUP, LMHEAD): [rows, hidden].
std::vector<float> normed_inputs(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  std::vector<float> hn(st.rows * H);
  for (int64_t i = 0; i < st.rows; ++i) {
    rmsnorm(buf<float>(io, t.in_buf, i), H, io.weights[t.norm], io.eps, hn.data() + i * H);
  }
  return hn;
}

// weight2 >= 0: the bias of the weight's rows, added to the fp32 dot before the one rounding. Without a bias no
// add at all, so that a -0.0 dot keeps its sign (Llama plans stay bit-identical). Each weight row serves every
// row of the step while it is in cache.
void run_qkv(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  const std::vector<float> hn = normed_inputs(io, st, t);
  const WeightRows w = matrix(io, t.weight);
  const uint16_t* bias = t.weight2 < 0 ? nullptr : io.weights[t.weight2];
  for_rows(t.row_begin, t.row_end, H * st.rows, [&](int64_t r) {
    for (int64_t i = 0; i < st.rows; ++i) {
      uint16_t* out = buf<uint16_t>(io, t.out_buf, i) + t.out_offset - t.row_begin;
      const float dot = w.dot(r, hn.data() + i * H);
      out[r] = f32_to_bf16(bias == nullptr ? dot : dot + bf16_to_f32(bias[r]));
    }
  });
}

void run_resid(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t K = io.plan->weights[t.weight].cols;
  std::vector<float> x(st.rows * K);
  for (int64_t i = 0; i < st.rows; ++i) {
    const uint16_t* in = buf<uint16_t>(io, t.in_buf, i);
    for (int64_t k = 0; k < K; ++k) x[i * K + k] = bf16_to_f32(in[k]);
  }
  const WeightRows w = matrix(io, t.weight);
  for_rows(t.row_begin, t.row_end, K * st.rows, [&](int64_t r) {
    for (int64_t i = 0; i < st.rows; ++i) {
      const float* res = buf<float>(io, t.in2_buf, i) + t.out_offset - t.row_begin;
      float* out = buf<float>(io, t.out_buf, i) + t.out_offset - t.row_begin;
      out[r] = res[r] + w.dot(r, x.data() + i * K);
    }
  });
}

void run_gateup(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const int64_t H = io.plan->h.hidden;
  const std::vector<float> hn = normed_inputs(io, st, t);
  const WeightRows wg = matrix(io, t.weight);
  const WeightRows wu = matrix(io, t.weight2);
  for_rows(t.row_begin, t.row_end, 2 * H * st.rows, [&](int64_t r) {
    for (int64_t i = 0; i < st.rows; ++i) {
      uint16_t* out = buf<uint16_t>(io, t.out_buf, i) + t.out_offset - t.row_begin;
      const float g = wg.dot(r, hn.data() + i * H);
      const float u = wu.dot(r, hn.data() + i * H);
      out[r] = f32_to_bf16(g / (1.0f + std::exp(-g)) * u);
    }
  });
}

// The tile's logits rows of every step row, and each row's (max, argmax) into its partial slot aux0.
void run_lmhead(const LaunchIO& io, const StepIO& st, const Tile& t) {
  const Header& h = io.plan->h;
  const int64_t H = h.hidden;
  const std::vector<float> hn = normed_inputs(io, st, t);
  const uint16_t* w = io.weights[t.weight];
  for_rows(t.row_begin, t.row_end, H * st.rows, [&](int64_t r) {
    for (int64_t i = 0; i < st.rows; ++i) st.logits[i * h.vocab + r] = dot_w(w + r * H, hn.data() + i * H, H);
  });
  for (int64_t i = 0; i < st.rows; ++i) {
    const float* logits = st.logits + i * h.vocab;
    float best = logits[t.row_begin];
    int64_t bi = t.row_begin;
    for (int64_t r = t.row_begin + 1; r < t.row_end; ++r) {
      if (argmax_better(logits[r], r, best, bi)) best = logits[r], bi = r;
    }
    float* part = buf<float>(io, t.out_buf, i) + 2 * t.aux0;
    const int32_t idx = int32_t(bi);
    part[0] = best;
    std::memcpy(part + 1, &idx, 4);
  }
}

void run_argmax(const LaunchIO& io, const StepIO& st, const Tile& t) {
  for (int64_t i = 0; i < st.rows; ++i) {
    const float* parts = buf<float>(io, t.in_buf, i);
    float best = 0.0f;
    int64_t bi = -1;
    for (int64_t k = 0; k < t.aux0; ++k) {
      int32_t idx;
      std::memcpy(&idx, parts + 2 * k + 1, 4);
      if (bi < 0 || argmax_better(parts[2 * k], idx, best, bi)) best = parts[2 * k], bi = idx;
    }
    st.picked[i] = bi;
  }
}

}  // namespace

void run_tile(const LaunchIO& io, const StepIO& st, const Tile& t) {
  switch (t.op) {
    case kOpEmbed: run_embed(io, st, t); return;
    case kOpQkv: run_qkv(io, st, t); return;
    case kOpAttn: run_attn(io, st, t); return;
    case kOpMerge: run_merge(io, st, t); return;
    case kOpResid: run_resid(io, st, t); return;
    case kOpGateup: run_gateup(io, st, t); return;
    case kOpLmhead: run_lmhead(io, st, t); return;
    case kOpArgmax: run_argmax(io, st, t); return;
  }
  TORCH_CHECK(false, "tiles::decode_step: unknown op ", t.op);  // view_plan rejects these first
}

}  // namespace cpu
}  // namespace tiles
