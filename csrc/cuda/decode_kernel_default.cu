// The persistent kernel's default path as its own compilation: decode_kernel.cu again, with the option bits fixed
// at kOptDefault at compile time, so the code of every option the default does not run is compiled out (perf log
// v27: the generic build's dead option code made the default path 4% slower on Llama-1B and 11% on SmolLM2, with
// bit-identical results). Exports decode_default_* (decode_kernel.h); decode_kernel_flags.cu includes this file again.
#include "cuda/decode_kernel.h"

// TILES_DEFAULT_OPT (build knob, setup.py): compile another option set as the default variant, to measure an option
// inside it (perf log, session 9: v16 and v26); the host then launches this variant for that set instead of kOptDefault.
#ifndef TILES_LEAN_OPT
#ifdef TILES_DEFAULT_OPT
#define TILES_LEAN_OPT (TILES_DEFAULT_OPT)
#else
#define TILES_LEAN_OPT tiles::cuda::kOptDefault
#endif
#endif
#define TILES_DEFAULT_VARIANT 1
#include "cuda/decode_kernel.cu"
