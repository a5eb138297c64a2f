// The kernel with flag-in-data hand-offs (flag_data.cuh: every scratch element carries the step's epoch, consumers
// poll their input words instead of counters) for plans of head_dim 64 (Llama-3.2-1B, SmolLM2, Qwen2.5-0.5B).
// A compilation of its own rather than a runtime switch, so that neither hand-off's code sits in the other's hot
// path. Exports decode_flags_hd64_* (decode_kernel.h).
#define TILE_FLAG_HANDOFF 1
#define TILE_HEAD_DIM 64
#define TILE_VARIANT(name) decode_flags_hd64_##name
#include "cuda/decode_kernel.cuh"
