// The kernel with flag-in-data hand-offs (flag_data.cuh: every scratch element carries the step's epoch, consumers
// poll their input words instead of counters) and the attention's warp path. A compilation of its own rather than a
// runtime switch, so that neither hand-off's code sits in the other's hot path. Exports decode_flags_*.
#define TILE_FLAG_HANDOFF 1
#define TILE_WARP_ATTENTION 1
#define TILE_VARIANT(name) decode_flags_##name
#include "cuda/decode_kernel.cuh"
