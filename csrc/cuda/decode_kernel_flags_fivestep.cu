// The kernel with flag-in-data hand-offs and the five-step chunk loop (the shapes the warp path does not take).
// Exports decode_flags_fivestep_*.
#define TILE_FLAG_HANDOFF 1
#define TILE_WARP_ATTENTION 0
#define TILE_VARIANT(name) decode_flags_fivestep_##name
#include "cuda/decode_kernel.cuh"
