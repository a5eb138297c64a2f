// The rows kernel (a pass of several rows, decode_rows.cuh) for plans of head_dim 64 (Llama-3.2-1B, SmolLM2, Qwen2.5-0.5B).
// Exports decode_rows_hd64_* (decode_kernel.h).
#define TILE_ROWS 1
#define TILE_HEAD_DIM 64
#define TILE_VARIANT(name) decode_rows_hd64_##name
#include "cuda/decode_rows.cuh"
