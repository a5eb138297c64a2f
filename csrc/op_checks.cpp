// Host-side argument checks for tiles::decode_step (CPU reference executor and CUDA glue share them).
#include "op_checks.h"

#include <string>

namespace tiles {

namespace {

std::string shape_str(const at::Tensor& t) { return c10::str(t.sizes()); }

// `name` is a callable giving the argument's name; TORCH_CHECK formats its message only on failure, so the
// per-call cost of checking ~180 tensors stays free of string building.
template <typename Name>
void check_tensor(const at::Tensor& t, const Name& name, at::ScalarType dtype, c10::Device device) {
  TORCH_CHECK(t.defined(), "tiles::decode_step: ", name(), " is undefined");
  TORCH_CHECK(t.scalar_type() == dtype, "tiles::decode_step: ", name(), " has dtype ", t.scalar_type(),
              ", expected ", dtype);
  TORCH_CHECK(t.device() == device, "tiles::decode_step: ", name(), " is on ", t.device(), ", expected ", device,
              " (all tensors must be on the plan's device)");
  TORCH_CHECK(t.is_contiguous(), "tiles::decode_step: ", name(), " must be contiguous (got strides ", t.strides(),
              " for shape ", t.sizes(), ")");
}

void check_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, c10::Device device) {
  check_tensor(t, [name] { return name; }, dtype, device);
}

// The int[] words as a Header, each word in int32 range.
Header header_words(c10::IntArrayRef plan_header) {
  TORCH_CHECK(static_cast<int64_t>(plan_header.size()) == kHeaderWords, "tiles::decode_step: plan_header has ",
              plan_header.size(), " words, expected ", kHeaderWords, " (plan format version ", kFormatVersion,
              "); rebuild the plan with this version of tiles_ext");
  Header h;
  int32_t* words = reinterpret_cast<int32_t*>(&h);
  for (int i = 0; i < kHeaderWords; ++i) {
    const int64_t v = plan_header[i];
    TORCH_CHECK(v >= INT32_MIN && v <= INT32_MAX, "tiles::decode_step: plan_header word ", i, " = ", v,
                " does not fit int32");
    words[i] = static_cast<int32_t>(v);
  }
  return h;
}

// A plan of this format and ABI: magic, versions, header size.
void check_header_identity(const Header& h) {
  TORCH_CHECK(h.magic == kMagic, "tiles::decode_step: plan_header is not a Tiles plan header (magic 0x",
              std::hex, static_cast<uint32_t>(h.magic), ", expected 0x", static_cast<uint32_t>(kMagic), ")");
  TORCH_CHECK(h.format_version == kFormatVersion, "tiles::decode_step: plan format version ", h.format_version,
              ", this build reads version ", kFormatVersion, "; rebuild the plan");
  TORCH_CHECK(h.abi_version == kAbiVersion, "tiles::decode_step: plan made for executor ABI ", h.abi_version,
              ", this build is ABI ", kAbiVersion, "; rebuild the plan");
  TORCH_CHECK(h.header_words == kHeaderWords, "tiles::decode_step: plan header_words ", h.header_words,
              ", expected ", kHeaderWords);
}

// The model dimensions the executors divide by and size their loops with, and the weights list they imply.
void check_header_dims(const Header& h) {
  TORCH_CHECK(h.num_layers >= 1 && h.hidden > 0 && h.num_heads > 0 && h.num_kv_heads > 0 && h.head_dim > 0 &&
                  h.intermediate > 0 && h.vocab > 0 && h.num_workers > 0 && h.num_tiles > 0,
              "tiles::decode_step: plan header has a non-positive dimension (layers ", h.num_layers, ", hidden ",
              h.hidden, ", heads ", h.num_heads, ", kv heads ", h.num_kv_heads, ", head_dim ", h.head_dim,
              ", intermediate ", h.intermediate, ", vocab ", h.vocab, ", workers ", h.num_workers, ", tiles ",
              h.num_tiles, ")");
  TORCH_CHECK(h.num_heads % h.num_kv_heads == 0, "tiles::decode_step: plan header num_heads ", h.num_heads,
              " is not a multiple of num_kv_heads ", h.num_kv_heads);
  TORCH_CHECK(h.head_dim % 2 == 0, "tiles::decode_step: plan header head_dim ", h.head_dim, " is odd");
  TORCH_CHECK(h.num_weights == num_weights(h), "tiles::decode_step: plan header says ", h.num_weights,
              " weights for ", h.num_layers, " layers with slot mask ", h.layer_slots, ", expected ", num_weights(h));
}

// The counters, partitions and partial slots the executors size the state and the partials with.
void check_header_counts(const Header& h) {
  TORCH_CHECK(h.counter_stride >= 1 && h.num_counters >= 1 &&
                  static_cast<int64_t>(h.state_words) >=
                      kStateHeaderWords + static_cast<int64_t>(h.num_counters) * h.counter_stride,
              "tiles::decode_step: plan header state_words ", h.state_words, " too small for ", h.num_counters,
              " counters with stride ", h.counter_stride);
  TORCH_CHECK(h.argmax_counter >= 0 && h.argmax_counter < h.num_counters,
              "tiles::decode_step: plan header argmax_counter ", h.argmax_counter, " out of range [0, ",
              h.num_counters, ")");
  TORCH_CHECK(h.attn_partitions >= 1 && h.attn_granule >= 1 && h.lm_tiles >= 1,
              "tiles::decode_step: plan header attn_partitions ", h.attn_partitions, ", attn_granule ",
              h.attn_granule, ", lm_tiles ", h.lm_tiles, " must all be >= 1");
  TORCH_CHECK(h.attn_single >= 0, "tiles::decode_step: plan header attn_single ", h.attn_single, " must be >= 0");
  TORCH_CHECK(h.max_rows >= 1 && h.max_rows <= kMaxRows && h.row_bytes >= 0 &&
                  int64_t(h.scratch_bytes) == int64_t(h.max_rows) * h.row_bytes,
              "tiles::decode_step: plan header max_rows ", h.max_rows, " (1..", kMaxRows, ") and row_bytes ",
              h.row_bytes, " do not make its scratch_bytes ", h.scratch_bytes, " (max_rows x row_bytes)");
}

std::string weight_name(const Header& h, int64_t i) {
  int32_t slot = -1, layer = -1;
  if (!weight_entry(h, i, &slot, &layer)) return c10::str("weights[", i, "]");
  return c10::str("weights[", i, "] (", kSlotNames[slot], layer >= 0 ? c10::str(", layer ", layer) : std::string(),
                  ")");
}

// Rows and columns (0: a vector) of entry i of the weights list, from the header alone (the generated layout
// rules, which the plan's weight table repeats); -1 for an index outside the list.
void expected_weight_shape(const Header& h, int64_t i, int64_t* rows, int64_t* cols) {
  int32_t slot = -1, layer = -1;
  if (!weight_entry(h, i, &slot, &layer)) {
    *rows = *cols = -1;
    return;
  }
  slot_shape(h, slot, rows, cols);
}

at::ScalarType scalar_type_of(int32_t dtype) {
  switch (dtype) {
    case kDTypeF32: return at::kFloat;
    case kDTypeF8e4m3: return at::kFloat8_e4m3fn;
    default: return at::kBFloat16;
  }
}

// The weight format: BF16 matrices without scales, or E4M3 matrices with a scale layout (both executors read both;
// the CUDA op checks the device's FP8 conversions and its kernels' limits itself: decode_step_cuda.cpp).
void check_weight_format(const Header& h, c10::Device) {
  const bool bf16 = h.weight_dtype == kDTypeBf16 && h.scale_layout == kScaleNone;
  const bool fp8 = h.weight_dtype == kDTypeF8e4m3 &&
                   (h.scale_layout == kScalePerChannel || h.scale_layout == kScaleBlock128);
  TORCH_CHECK(bf16 || fp8, "tiles::decode_step: plan header weight_dtype ", h.weight_dtype, " with scale_layout ",
              h.scale_layout, " is not a weight format this build serves (BF16 without scales, or E4M3 with "
              "per-channel or 128x128-block scales); rebuild the plan");
}

// Every weight is a tensor of its slot's dtype (planner/format.py WEIGHT_FORMATS) and shape.
void check_weights(const Header& h, at::TensorList weights, c10::Device device) {
  check_weight_format(h, device);
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == h.num_weights, "tiles::decode_step: weights has ",
              weights.size(), " tensors, the plan expects ", h.num_weights, " (", h.num_layers,
              " layers and the model's final slots; use tiles_ext.runtime.model_weights)");
  for (size_t i = 0; i < weights.size(); ++i) {
    const at::Tensor& w = weights[i];
    const auto name = [&h, i] { return weight_name(h, int64_t(i)); };
    int32_t slot = -1, layer = -1;
    weight_entry(h, int64_t(i), &slot, &layer);
    check_tensor(w, name, scalar_type_of(slot_dtype(h, slot)), device);
    int64_t rows, cols;
    expected_weight_shape(h, i, &rows, &cols);
    const bool ok = cols == 0 ? (w.dim() == 1 && w.size(0) == rows)
                              : (w.dim() == 2 && w.size(0) == rows && w.size(1) == cols);
    TORCH_CHECK(ok, "tiles::decode_step: ", name(), " has shape ", shape_str(w), ", the plan expects ",
                cols == 0 ? c10::str("[", rows, "]") : c10::str("[", rows, ", ", cols, "]"),
                " (plan made for another model?)");
  }
}

// One bf16 [1, kv, max_len, head_dim] k and v tensor per layer, with the same max_len in every layer.
void check_caches(const Header& h, at::TensorList k_cache, at::TensorList v_cache, c10::Device device) {
  TORCH_CHECK(static_cast<int64_t>(k_cache.size()) == h.num_layers &&
                  static_cast<int64_t>(v_cache.size()) == h.num_layers,
              "tiles::decode_step: k_cache/v_cache have ", k_cache.size(), "/", v_cache.size(),
              " layers, the plan expects ", h.num_layers);
  const int64_t max_len = k_cache[0].dim() == 4 ? k_cache[0].size(2) : -1;
  for (int64_t l = 0; l < h.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const at::Tensor& c = kv == 0 ? k_cache[l] : v_cache[l];
      const auto name = [kv, l] { return c10::str(kv == 0 ? "k_cache[" : "v_cache[", l, "]"); };
      check_tensor(c, name, at::kBFloat16, device);
      TORCH_CHECK(c.dim() == 4 && c.size(0) == 1 && c.size(1) == h.num_kv_heads && c.size(2) == max_len &&
                      c.size(3) == h.head_dim,
                  "tiles::decode_step: ", name(), " has shape ", shape_str(c), ", expected [1, ", h.num_kv_heads,
                  ", max_cache_len, ", h.head_dim, "] with the same max_cache_len (", max_len,
                  ") for every layer (batch 1 only)");
    }
  }
  TORCH_CHECK(max_len >= 1, "tiles::decode_step: KV cache has max_cache_len ", max_len);
}

// The scratch arena and the state, sized by the header.
void check_arena_and_state(const Header& h, const at::Tensor& scratch, const at::Tensor& state, c10::Device device) {
  check_tensor(scratch, "scratch", at::kByte, device);
  TORCH_CHECK(scratch.dim() == 1 && scratch.numel() >= h.scratch_bytes, "tiles::decode_step: scratch has shape ",
              shape_str(scratch), ", the plan needs at least [", h.scratch_bytes, "] bytes");
  check_tensor(state, "state", at::kInt, device);
  TORCH_CHECK(state.dim() == 1 && state.numel() == h.state_words, "tiles::decode_step: state has shape ",
              shape_str(state), ", expected [", h.state_words, "] (state_words in plan_header)");
}

// The RoPE table and the EOS ids, as every op that decodes takes them; `op` names the op in the errors.
void check_rope_and_eos(const char* op, const Header& h, const at::Tensor& rope_inv_freq, c10::IntArrayRef eos_ids,
                        c10::Device device) {
  check_tensor(rope_inv_freq, "rope_inv_freq", at::kFloat, device);
  TORCH_CHECK(rope_inv_freq.dim() == 1 && rope_inv_freq.size(0) == h.head_dim / 2, op, ": rope_inv_freq has shape ",
              shape_str(rope_inv_freq), ", expected [", h.head_dim / 2, "] (head_dim / 2)");
  TORCH_CHECK(static_cast<int64_t>(eos_ids.size()) <= kMaxEos, op, ": ", eos_ids.size(), " eos_ids given, at most ",
              kMaxEos, " supported");
  for (int64_t e : eos_ids) {
    TORCH_CHECK(e >= 0 && e < h.vocab, op, ": eos id ", e, " outside the vocabulary [0, ", h.vocab, ")");
  }
}

// The token, the position, the RoPE frequencies, the step count and the EOS ids.
void check_small_args(const Header& h, const at::Tensor& input_ids, const at::Tensor& position,
                      const at::Tensor& rope_inv_freq, int64_t num_steps, c10::IntArrayRef eos_ids,
                      c10::Device device) {
  check_tensor(input_ids, "input_ids", at::kLong, device);
  const int64_t rows = input_ids.numel();
  TORCH_CHECK(input_ids.dim() <= 1 && rows >= 1, "tiles::decode_step: input_ids has shape ", shape_str(input_ids),
              ", expected [R] (batch 1: one token, or the R rows of a verify pass)");
  TORCH_CHECK(rows <= h.max_rows, "tiles::decode_step: ", rows, " input ids (rows) in one pass, but the plan "
              "decodes at most ", h.max_rows, " rows per pass (its max_rows); verify a draft of at most ",
              h.max_rows - 1, " tokens per pass, or split it into several passes");
  TORCH_CHECK(rows == 1 || num_steps == 1, "tiles::decode_step: ", rows, " rows with num_steps ", num_steps,
              ": a pass of several rows (a verify pass) is one step; pass num_steps=1");
  check_tensor(position, "position", at::kLong, device);
  TORCH_CHECK(position.numel() == 1, "tiles::decode_step: position has shape ", shape_str(position),
              ", expected one element");
  TORCH_CHECK(num_steps >= 1 && num_steps <= kMaxSteps, "tiles::decode_step: num_steps ", num_steps,
              " outside 1..", kMaxSteps);
  check_rope_and_eos("tiles::decode_step", h, rope_inv_freq, eos_ids, device);
}

// The plan and the tensors it addresses (weights, K/V caches, scratch arena, state), as every op that runs a plan
// takes them; `op` names the op in the errors.
void check_plan_tensors(const char* op, const Header& h, const at::Tensor& plan, at::TensorList weights,
                        at::TensorList k_cache, at::TensorList v_cache, const at::Tensor& scratch,
                        const at::Tensor& state, c10::Device device) {
  check_tensor(plan, "plan", at::kInt, device);
  TORCH_CHECK(plan.dim() == 1 && plan.numel() == h.total_words, op, ": plan has shape ", shape_str(plan),
              ", expected [", h.total_words, "] (total_words in plan_header)");
  check_weights(h, weights, device);
  check_caches(h, k_cache, v_cache, device);
  check_arena_and_state(h, scratch, state, device);
}

}  // namespace

Header header_from_list(c10::IntArrayRef plan_header) {
  const Header h = header_words(plan_header);
  check_header_identity(h);
  check_header_dims(h);
  check_header_counts(h);
  return h;
}

void check_decode_step_args(const Header& h, const at::Tensor& plan, at::TensorList weights, at::TensorList k_cache,
                            at::TensorList v_cache, const at::Tensor& scratch, const at::Tensor& state,
                            const at::Tensor& input_ids, const at::Tensor& position, const at::Tensor& rope_inv_freq,
                            int64_t num_steps, c10::IntArrayRef eos_ids, c10::Device device) {
  check_plan_tensors("tiles::decode_step", h, plan, weights, k_cache, v_cache, scratch, state, device);
  check_small_args(h, input_ids, position, rope_inv_freq, num_steps, eos_ids, device);
}

void check_prompt_lookup_args(const Header& h, const at::Tensor& plan, at::TensorList weights,
                              at::TensorList k_cache, at::TensorList v_cache, const at::Tensor& scratch,
                              const at::Tensor& state, const at::Tensor& history, int64_t length,
                              const at::Tensor& rope_inv_freq, int64_t draft_tokens, int64_t ngram, int64_t budget,
                              c10::IntArrayRef eos_ids, c10::Device device) {
  check_plan_tensors("tiles::prompt_lookup", h, plan, weights, k_cache, v_cache, scratch, state, device);
  TORCH_CHECK(h.max_rows >= 2, "tiles::prompt_lookup: the plan decodes ", h.max_rows, " row per pass (its "
              "max_rows); prompt lookup verifies a draft in one pass of several rows: build the plan with max_rows "
              ">= 2");
  TORCH_CHECK(draft_tokens >= 1 && draft_tokens <= h.max_rows - 1, "tiles::prompt_lookup: draft_tokens ",
              draft_tokens, " outside 1..", h.max_rows - 1, ": a round's pass holds the last accepted token and the "
              "draft, at most the plan's max_rows ", h.max_rows, " rows; pass prompt_lookup_num_tokens <= ",
              h.max_rows - 1);
  TORCH_CHECK(ngram >= 1 && ngram <= kMaxLookupNgram, "tiles::prompt_lookup: ngram ", ngram, " outside 1..",
              kMaxLookupNgram, " (max_matching_ngram_size; Transformers' default is 2)");
  TORCH_CHECK(budget >= 1 && budget <= kMaxLookupTokens, "tiles::prompt_lookup: budget ", budget, " outside 1..",
              kMaxLookupTokens, ": one launch accepts 1 to ", kMaxLookupTokens, " tokens; launch again for more");
  check_tensor(history, "history", at::kLong, device);
  TORCH_CHECK(history.dim() == 1, "tiles::prompt_lookup: history has shape ", shape_str(history), ", expected [N] "
              "(the prompt and the accepted tokens of one sequence)");
  TORCH_CHECK(length >= 1 && length <= history.numel(), "tiles::prompt_lookup: length ", length, " outside 1..",
              history.numel(), " (the history's ids so far, at least the last accepted token)");
  TORCH_CHECK(history.numel() >= length + budget, "tiles::prompt_lookup: history holds ", history.numel(),
              " ids, and a launch from length ", length, " with budget ", budget, " writes up to index ",
              length + budget - 1, ": allocate the history with at least length + budget = ", length + budget,
              " ids");
  const int64_t max_len = max_cache_len(k_cache);
  TORCH_CHECK(length <= max_len, "tiles::prompt_lookup: KV cache full: the first round's pass writes position ",
              length - 1, " but max_cache_len is ", max_len, " (allocate a larger StaticCache)");
  check_rope_and_eos("tiles::prompt_lookup", h, rope_inv_freq, eos_ids, device);
}

void check_sampler(const Header& h, const at::Tensor& sampler, c10::Device device) {
  check_tensor(sampler, "sampler", at::kInt, device);
  const int64_t words = sampler_words(h.vocab, h.lm_tiles);
  TORCH_CHECK(sampler.dim() == 1 && sampler.numel() == words, "tiles::decode_step: sampler has shape ",
              shape_str(sampler), ", expected [", words, "] (sampler_words(vocab ", h.vocab, ", lm_tiles ",
              h.lm_tiles, "): tiles_ext.sampling.make_sampler builds it for the plan)");
}

}  // namespace tiles
