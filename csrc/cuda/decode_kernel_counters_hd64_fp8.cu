// The kernel of FP8 plans (E4M3 layer matrices, kernel_config.cuh TILE_FP8) with counter hand-offs for head_dim 64
// (Llama-3.2-1B, SmolLM2, Qwen2.5-0.5B). Exports decode_counters_hd64_fp8_* (decode_kernel.h).
#define TILE_FP8 1
#define TILE_HEAD_DIM 64
#define TILE_VARIANT(name) decode_counters_hd64_fp8_##name
#include "cuda/decode_kernel.cuh"
