// The kernel with counter hand-offs and the five-step chunk loop: the shapes the attention's warp path does not take
// (attn_warps_fit: G > 4 or head_dim != 64, e.g. Llama-3.2-3B / 8B). Exports decode_counters_fivestep_*.
#define TILE_WARP_ATTENTION 0
#define TILE_VARIANT(name) decode_counters_fivestep_##name
#include "cuda/decode_kernel.cuh"
