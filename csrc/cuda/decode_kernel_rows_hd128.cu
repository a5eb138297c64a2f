// The rows kernel (a pass of several rows, decode_rows.cuh) for plans of head_dim 128 (Llama-3.1-8B, Qwen3, Mistral).
// Exports decode_rows_hd128_* (decode_kernel.h).
#define TILE_ROWS 1
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_rows_hd128_##name
#include "cuda/decode_rows.cuh"
