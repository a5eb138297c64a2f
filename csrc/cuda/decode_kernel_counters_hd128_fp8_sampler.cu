// The kernel of FP8 plans (E4M3 layer matrices, kernel_config.cuh TILE_FP8) with counter hand-offs for head_dim 128,
// with the sampler (sampler.cuh), launched for calls that pass one. Exports decode_counters_hd128_fp8_sampler_*.
#define TILE_FP8 1
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_counters_hd128_fp8_sampler_##name
#define TILE_SAMPLER 1
#include "cuda/decode_kernel.cuh"
