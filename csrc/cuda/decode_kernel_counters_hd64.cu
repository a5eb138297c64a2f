// The kernel with counter hand-offs for plans of head_dim 64 (Llama-3.2-1B, SmolLM2, Qwen2.5-0.5B).
// Exports decode_counters_hd64_* (decode_kernel.h).
#define TILE_HEAD_DIM 64
#define TILE_VARIANT(name) decode_counters_hd64_##name
#include "cuda/decode_kernel.cuh"
