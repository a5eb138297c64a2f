// The kernel with counter hand-offs for plans of head_dim 96 (Phi-3-mini).
// Exports decode_counters_hd96_* (decode_kernel.h).
#define TILE_HEAD_DIM 96
#define TILE_VARIANT(name) decode_counters_hd96_##name
#include "cuda/decode_kernel.cuh"
