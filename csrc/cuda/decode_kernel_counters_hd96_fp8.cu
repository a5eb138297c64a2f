// The kernel of FP8 plans (E4M3 layer matrices, kernel_config.cuh TILE_FP8) with counter hand-offs for head_dim 96
// (Phi-3). Exports decode_counters_hd96_fp8_* (decode_kernel.h).
#define TILE_FP8 1
#define TILE_HEAD_DIM 96
#define TILE_VARIANT(name) decode_counters_hd96_fp8_##name
#include "cuda/decode_kernel.cuh"
