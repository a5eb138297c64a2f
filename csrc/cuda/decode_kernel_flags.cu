// The default variant (decode_kernel_default.cu) with flag-in-data hand-offs: every scratch element carries the
// step's epoch and consumers poll their input words instead of counters (flag_data.cuh, perf log v28). A second
// compilation rather than a runtime switch, so that neither hand-off's code sits in the other's hot path (perf log
// v27, v35). Exports decode_flags_* (decode_kernel.h); the runtime picks it per model (tiles_ext/runtime.py).
#define TILES_FLAGS 1
#include "cuda/decode_kernel_default.cu"
