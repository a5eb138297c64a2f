// The kernel with flag-in-data hand-offs, the attention's warp path and the sampler (sampler.cuh: the LMHEAD and ARGMAX
// tiles take the op's sampler tensor), launched for calls that pass one. Exports decode_flags_sampler_*.
#define TILE_FLAG_HANDOFF 1
#define TILE_WARP_ATTENTION 1
#define TILE_VARIANT(name) decode_flags_sampler_##name
#define TILE_SAMPLER 1
#include "cuda/decode_kernel.cuh"
