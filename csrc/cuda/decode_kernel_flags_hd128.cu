// The kernel with flag-in-data hand-offs (flag_data.cuh: every scratch element carries the step's epoch, consumers
// poll their input words instead of counters) for plans of head_dim 128 (Llama-3.x 3B / 8B, Mistral-7B,
// Qwen2.5-7B, Qwen3). A compilation of its own rather than a runtime switch, so that neither hand-off's code sits in
// the other's hot path. Exports decode_flags_hd128_* (decode_kernel.h).
#define TILE_FLAG_HANDOFF 1
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_flags_hd128_##name
#include "cuda/decode_kernel.cuh"
