// The prompt-lookup kernel (rounds of draft, pass and acceptance in one launch, decode_rows.cuh with TILE_LOOKUP) for
// plans of head_dim 128. Exports decode_lookup_hd128_* (decode_kernel.h).
#define TILE_ROWS 1
#define TILE_LOOKUP 1
#define TILE_HEAD_DIM 128
#define TILE_VARIANT(name) decode_lookup_hd128_##name
#include "cuda/decode_rows.cuh"
