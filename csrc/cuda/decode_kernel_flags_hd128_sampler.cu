// The kernel with flag-in-data hand-offs for plans of head_dim 128 with the sampler (sampler.cuh: the LMHEAD and ARGMAX
// tiles take the op's sampler tensor), launched for calls that pass one. Exports decode_flags_hd128_sampler_*.
#define TILE_FLAG_HANDOFF 1
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_flags_hd128_sampler_##name
#define TILE_SAMPLER 1
#include "cuda/decode_kernel.cuh"
