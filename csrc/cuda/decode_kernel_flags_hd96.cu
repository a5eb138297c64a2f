// The kernel with flag-in-data hand-offs (flag_data.cuh: every scratch element carries the step's epoch, consumers
// poll their input words instead of counters) for plans of head_dim 96 (Phi-3-mini). A compilation of its own
// rather than a runtime switch, so that neither hand-off's code sits in the other's hot path.
// Exports decode_flags_hd96_* (decode_kernel.h).
#define TILE_FLAG_HANDOFF 1
#define TILE_HEAD_DIM 96
#define TILE_VARIANT(name) decode_flags_hd96_##name
#include "cuda/decode_kernel.cuh"
