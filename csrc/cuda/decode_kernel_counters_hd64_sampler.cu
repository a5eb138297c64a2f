// The kernel with counter hand-offs for plans of head_dim 64 with the sampler (sampler.cuh: the LMHEAD and ARGMAX
// tiles take the op's sampler tensor), launched for calls that pass one. Exports decode_counters_hd64_sampler_*.
#define TILE_HEAD_DIM 64
#define TILE_VARIANT(name) decode_counters_hd64_sampler_##name
#define TILE_SAMPLER 1
#include "cuda/decode_kernel.cuh"
