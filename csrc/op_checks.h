// Host-side argument checks for tiles::decode_step, shared by the CPU reference executor and the CUDA glue.
// Everything here runs on the host and never touches device memory (no syncs).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include "plan_format.h"

namespace tiles {

// Host copy of the plan header from the op's int[] argument; checks magic/format/abi/header size.
Header header_from_list(c10::IntArrayRef plan_header);

// Everything checkable without touching device memory: dtypes, devices (all on `device`), shapes against the
// header (hidden, heads, kv, head_dim, intermediate, vocab, num_layers, list lengths), contiguity, cache shapes
// [1, kv, max_len, head_dim] and dtype, scratch size, state size, num_steps in 1..kMaxSteps, eos count <= kMaxEos,
// plan tensor int32 size == total_words, input_ids of 1..max_rows elements (rows; several only with num_steps 1).
// Throws with TORCH_CHECK and a message naming the argument, what was given and what is expected.
void check_decode_step_args(const Header& h, const at::Tensor& plan, at::TensorList weights, at::TensorList k_cache,
                            at::TensorList v_cache, const at::Tensor& scratch, const at::Tensor& state,
                            const at::Tensor& input_ids, const at::Tensor& position, const at::Tensor& rope_inv_freq,
                            int64_t num_steps, c10::IntArrayRef eos_ids, c10::Device device);

// tiles::prompt_lookup's arguments (planner/format.py "Prompt lookup"), before any launch: the plan tensors as for
// decode_step, a plan of at least 2 rows, draft_tokens in 1..max_rows - 1, ngram in 1..kMaxLookupNgram, budget in
// 1..kMaxLookupTokens, an int64 history of at least length + budget ids (the launch appends at most budget), a cache with room for the first round's first row (length - 1), and the EOS ids.
void check_prompt_lookup_args(const Header& h, const at::Tensor& plan, at::TensorList weights,
                              at::TensorList k_cache, at::TensorList v_cache, const at::Tensor& scratch,
                              const at::Tensor& state, const at::Tensor& history, int64_t length,
                              const at::Tensor& rope_inv_freq, int64_t draft_tokens, int64_t ngram, int64_t budget,
                              c10::IntArrayRef eos_ids, c10::Device device);

// The decode_step sampler: a contiguous 1-D int32 tensor of sampler_words(vocab, lm_tiles) words on `device`.
void check_sampler(const Header& h, const at::Tensor& sampler, c10::Device device);

// Max cache length (dim 2 of every k/v cache tensor); valid after check_decode_step_args.
inline int64_t max_cache_len(at::TensorList k_cache) { return k_cache[0].size(2); }

// Rows of the pass (input_ids' elements); valid after check_decode_step_args.
inline int64_t pass_rows(const at::Tensor& input_ids) { return input_ids.numel(); }

}  // namespace tiles
