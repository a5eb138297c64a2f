// The CPU reference sampler (sampler_cpu.h) and the op tiles::sample_logits on CPU.
#include "cpu/sampler_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "plan_format.h"
#include "plan_names.h"
#include "sampler_math.h"

namespace tiles {
namespace cpu {

namespace sm = tiles::sampler;

RowPick pick_from_row(const float* logits, int32_t vocab, const int32_t* settings, const int32_t* seen,
                      int64_t position, uint8_t* kept) {
  const sm::Params p = sm::read_params(settings);
  RowPick out;
  std::vector<float> s(vocab);
  int64_t finite = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    s[i] = sm::process_score(logits[i], sm::is_seen(seen, i), sm::is_suppressed(p, position, i), p);
    if (out.bad < 0 && sm::bad_score(s[i])) out.bad = i;
    finite += s[i] > -INFINITY;
  }
  if (out.bad >= 0 || finite == 0) return out;
  out.ok = true;
  if (p.mode != kModeSample && kept == nullptr) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (s[i] > s[best]) best = i;
    out.token = best;
    return out;
  }
  // Step 4: the ids at or above the k-th largest score (ties kept); with top_k at or above the finite scores'
  // count the k-th is -inf (or beyond the vocabulary): every finite score stays.
  float kth = -INFINITY;
  if (p.top_k > 0 && int64_t(p.top_k) < finite) {
    std::vector<float> f;
    f.reserve(finite);
    for (float v : s)
      if (v > -INFINITY) f.push_back(v);
    std::nth_element(f.begin(), f.begin() + (p.top_k - 1), f.end(), std::greater<float>());
    kth = f[p.top_k - 1];
  }
  std::vector<uint64_t> keys;
  for (int32_t i = 0; i < vocab; ++i)
    if (s[i] > -INFINITY && s[i] >= kth) keys.push_back(sm::canonical_key(s[i], i));
  std::sort(keys.begin(), keys.end());
  const int32_t n = int32_t(keys.size());
  std::vector<int32_t> ids(n);
  std::vector<float> v(n), e(n), pr(n);
  std::vector<uint8_t> keep(n);
  for (int32_t j = 0; j < n; ++j) {
    ids[j] = int32_t(uint32_t(keys[j]));
    v[j] = s[ids[j]];
  }
  const float u = sm::uniform_at(position, p.seed_lo, p.seed_hi);
  const int32_t pick = sm::finish_kept(v.data(), n, p, u, e.data(), pr.data(), keep.data());
  out.token = ids[pick];
  if (kept != nullptr) {
    std::fill(kept, kept + vocab, uint8_t(0));
    for (int32_t j = 0; j < n; ++j) kept[ids[j]] = keep[j];
  }
  return out;
}

std::string settings_problem(const int32_t* settings, int32_t vocab) {
  const sm::Params p = sm::read_params(settings);
  const int32_t n = settings[offsetof(SamplerSettings, num_suppress) / 4];
  if (p.mode != kModeGreedy && p.mode != kModeSample) return c10::str("mode ", p.mode, " is not a SampleMode");
  if (p.top_k < 0) return c10::str("top_k ", p.top_k, " is negative");
  if (!(p.temperature > 0.0f) || std::isinf(p.temperature))
    return c10::str("temperature ", p.temperature, " is not a positive finite number");
  if (!(p.top_p_cut >= 0.0f && p.top_p_cut <= 1.0f))
    return c10::str("top_p_cut ", p.top_p_cut, " (1 - top_p) is outside [0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return c10::str("min_p ", p.min_p, " is outside [0, 1]");
  if (!(p.penalty > 0.0f) || std::isinf(p.penalty))
    return c10::str("repetition penalty ", p.penalty, " is not a positive finite number");
  if (n < 0 || n > kMaxEos) return c10::str("num_suppress ", n, " is outside 0..", kMaxEos);
  for (int32_t i = 0; i < n; ++i) {
    if (p.suppress_ids[i] < 0 || p.suppress_ids[i] >= vocab)
      return c10::str("suppressed id ", p.suppress_ids[i], " is outside the vocabulary [0, ", vocab, ")");
  }
  return "";
}

std::string sampler_error_text(int32_t code, int32_t seen, int32_t wanted) {
  if (!(code > kErrorOk && code < kNumErrorCodes)) return c10::str("error code ", code);
  return c10::str(kErrorNames[code], " (", kErrorTexts[code], "): ",
                  format_template(kErrorDetails[code], {{"seen", std::to_string(seen)},
                                                        {"wanted", std::to_string(wanted)},
                                                        {"seen_u", std::to_string(uint32_t(seen))},
                                                        {"wanted_u", std::to_string(uint32_t(wanted))}}));
}

int64_t sampler_lm_tiles(int64_t numel, int64_t vocab) {
  const int64_t rest = numel - kSamplerHeaderWords - seen_words(int32_t(vocab));
  if (rest < kCandSlotWords || rest % kCandSlotWords != 0) return -1;
  return rest / kCandSlotWords;
}

namespace {

std::tuple<at::Tensor, at::Tensor> sample_logits_cpu(const at::Tensor& logits, const at::Tensor& sampler,
                                                     int64_t position) {
  TORCH_CHECK(logits.device().is_cpu() && sampler.device().is_cpu(), "tiles::sample_logits: logits on ",
              logits.device(), " and sampler on ", sampler.device(), ": the CPU kernel takes CPU tensors");
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.is_contiguous() && logits.dim() >= 1 &&
                  logits.numel() == logits.size(-1) && logits.numel() >= 1 &&
                  logits.numel() <= std::numeric_limits<int32_t>::max(),
              "tiles::sample_logits: logits must be one contiguous float32 row ([vocab] or [1, vocab]); got ",
              logits.scalar_type(), " ", logits.sizes());
  TORCH_CHECK(sampler.scalar_type() == at::kInt && sampler.dim() == 1 && sampler.is_contiguous(),
              "tiles::sample_logits: sampler must be a contiguous 1-D int32 tensor; got ", sampler.scalar_type(),
              " ", sampler.sizes());
  TORCH_CHECK(position >= 0, "tiles::sample_logits: position ", position, " is negative");
  const int32_t vocab = int32_t(logits.numel());
  const int64_t lm_tiles = sampler_lm_tiles(sampler.numel(), vocab);
  TORCH_CHECK(lm_tiles >= 1, "tiles::sample_logits: sampler has ", sampler.numel(), " words, which is "
              "sampler_words(", vocab, ", lm_tiles) for no lm_tiles >= 1 (tiles_ext.sampling.make_sampler builds it)");
  const int32_t* w = sampler.data_ptr<int32_t>();
  const std::string problem = settings_problem(w, vocab);
  TORCH_CHECK(problem.empty(), "tiles::sample_logits: the sampler's settings are invalid: ", problem);
  auto kept = at::zeros(logits.sizes(), logits.options().dtype(at::kBool));
  const RowPick r = pick_from_row(logits.data_ptr<float>(), vocab, w, w + sampler_seen_offset(int32_t(lm_tiles)),
                                  position, reinterpret_cast<uint8_t*>(kept.data_ptr<bool>()));
  TORCH_CHECK(r.ok, "tiles::sample_logits: ", sampler_error_text(kErrorBadLogits, r.bad, int32_t(position)));
  auto token = at::full({1}, r.token, logits.options().dtype(at::kLong));
  return {kept, token};
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CPU, m) { m.impl("sample_logits", &sample_logits_cpu); }

}  // namespace cpu
}  // namespace tiles
