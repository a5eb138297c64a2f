// The rows kernel (a pass of several rows, decode_rows.cuh) for plans of head_dim 96 (Phi-3-mini).
// Exports decode_rows_hd96_* (decode_kernel.h).
#define TILE_ROWS 1
#define TILE_HEAD_DIM 96
#define TILE_VARIANT(name) decode_rows_hd96_##name
#include "cuda/decode_rows.cuh"
