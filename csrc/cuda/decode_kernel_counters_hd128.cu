// The kernel with counter hand-offs for plans of head_dim 128 (Llama-3.x 3B / 8B, Mistral-7B, Qwen2.5-7B, Qwen3).
// Exports decode_counters_hd128_* (decode_kernel.h).
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_counters_hd128_##name
#include "cuda/decode_kernel.cuh"
