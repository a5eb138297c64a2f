// The kernel with counter hand-offs for plans of head_dim 96 with the sampler (sampler.cuh: the LMHEAD and ARGMAX
// tiles take the op's sampler tensor), launched for calls that pass one. Exports decode_counters_hd96_sampler_*.
#define TILE_HEAD_DIM 96
#define TILE_VARIANT(name) decode_counters_hd96_sampler_##name
#define TILE_SAMPLER 1
#include "cuda/decode_kernel.cuh"
