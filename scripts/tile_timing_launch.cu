// C entry point of the per-tile timing build (scripts/tile_timing.py compiles it with the kernels'
// csrc/cuda/decode_kernel_*.cu and -DTILE_TIMING=1 into a shared library and calls it through ctypes). It fills
// KernelParams from raw device pointers exactly as the torch glue does (csrc/cuda/decode_step_cuda.cpp) and adds the
// timestamp buffer. Not part of the product build (setup.py compiles csrc/ only).
#include <cstring>

#include "cuda/decode_kernel.h"

using namespace tiles;
using namespace tiles::cuda;

// 1: the flag-hand-off kernels (the scratch must have the flagged layout, as TileRuntime(handoff="flags") allocates
// it), 0: the counter kernels.
static int g_flagged = 0;

extern "C" void tiles_timing_set_flagged(int flagged) { g_flagged = flagged; }

// One launch of num_steps steps; 0, or what failed: -1 a header of another size, -2 a plan beyond the build's
// bounds, 1000 + the shared-memory limit's error, 2000 + the launch's, 3000 + the kernel's.
extern "C" int tiles_timing_run(const int32_t* plan, const int32_t* header_words, int n_header_words,
                                const void* const* weights, const void* const* k_cache, const void* const* v_cache,
                                int max_cache_len, void* scratch, void* state, const int64_t* input_ids,
                                const int64_t* position, const float* inv_freq, float rope_scale, float* logits,
                                int64_t* tokens, int num_steps, unsigned long long* tile_times,
                                int tile_times_stride) {
  if (n_header_words * 4 != static_cast<int>(sizeof(Header))) return -1;
  static KernelParams p;  // 32 KB: not on the stack
  std::memset(&p, 0, sizeof(p));
  std::memcpy(&p.h, header_words, sizeof(Header));
  if (p.h.num_weights > kMaxWeights || p.h.num_layers > kMaxLayers) return -2;
  p.plan = plan;
  p.scratch = static_cast<uint8_t*>(scratch);
  p.state = static_cast<uint32_t*>(state);
  p.input_ids = input_ids;
  p.position = position;
  p.inv_freq = inv_freq;
  p.logits = logits;
  p.tokens = tokens;
  p.rope_scale = rope_scale;
  std::memcpy(&p.eps, &p.h.eps_bits, sizeof(float));
  p.num_steps = num_steps;
  p.num_eos = 0;
  p.max_cache_len = max_cache_len;
  p.timeout_ns = 2000000000ull;
  p.tile_times = tile_times;
  p.tile_times_stride = tile_times_stride;
  for (int i = 0; i < p.h.num_weights; ++i) p.weights[i] = static_cast<const uint16_t*>(weights[i]);
  for (int l = 0; l < p.h.num_layers; ++l) {
    p.k_cache[l] = static_cast<uint16_t*>(const_cast<void*>(k_cache[l]));
    p.v_cache[l] = static_cast<uint16_t*>(const_cast<void*>(v_cache[l]));
  }
  cudaError_t e = decode_set_smem_limit(smem_layout(p.h).total);
  if (e != cudaSuccess) return 1000 + static_cast<int>(e);
  e = launch_decode(p, 0, g_flagged != 0);
  if (e != cudaSuccess) return 2000 + static_cast<int>(e);
  e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return 3000 + static_cast<int>(e);
  return 0;
}
