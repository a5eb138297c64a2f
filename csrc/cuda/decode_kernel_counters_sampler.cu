// The kernel with counter hand-offs, the attention's warp path and the sampler (sampler.cuh: the LMHEAD and ARGMAX
// tiles take the op's sampler tensor), launched for calls that pass one. Exports decode_counters_sampler_*.
#define TILE_WARP_ATTENTION 1
#define TILE_VARIANT(name) decode_counters_sampler_##name
#define TILE_SAMPLER 1
#include "cuda/decode_kernel.cuh"
