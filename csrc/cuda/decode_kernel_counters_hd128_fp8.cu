// The kernel of FP8 plans (E4M3 layer matrices, kernel_config.cuh TILE_FP8) with counter hand-offs for head_dim 128
// (Llama-3.x 3B / 8B, Mistral-7B, Qwen2.5-7B, Qwen3). Exports decode_counters_hd128_fp8_* (decode_kernel.h).
#define TILE_FP8 1
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_counters_hd128_fp8_##name
#include "cuda/decode_kernel.cuh"
