// The kernel with counter hand-offs and the attention's warp path (attn_warps_fit shapes: Llama-3.2-1B, SmolLM2).
// Exports decode_counters_* (decode_kernel.h).
#define TILE_WARP_ATTENTION 1
#define TILE_VARIANT(name) decode_counters_##name
#include "cuda/decode_kernel.cuh"
