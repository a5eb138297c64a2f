// C entry point of the per-tile timing build (scripts/tile_timing.py compiles it with csrc/cuda/decode_kernel.cu and
// -DTILES_TILE_TIMING=1 into a shared library and calls it through ctypes). It fills KernelParams from raw device
// pointers exactly as the torch glue does (csrc/cuda/decode_step_cuda.cpp) and adds the timestamp buffer. Not part
// of the product build (setup.py compiles csrc/ only).
#include <cstdlib>
#include <cstring>

#include "cuda/decode_kernel.h"

using namespace tiles;
using namespace tiles::cuda;

// kOptStream trace buffer (tiles_timing_set_stream_trace; null: no trace).
static unsigned long long* g_stream_trace = nullptr;
static int g_stream_trace_cap = 0;

extern "C" void tiles_timing_set_stream_trace(unsigned long long* trace, int cap) {
  g_stream_trace = trace;
  g_stream_trace_cap = cap;
}

// 1: launch the flag-hand-off kernel (decode_kernel_flags.cu; the scratch must have the flagged layout, as
// TileRuntime(handoff="flags") allocates it), 0: the counter kernels.
static int g_flagged = 0;

extern "C" void tiles_timing_set_flagged(int flagged) { g_flagged = flagged; }

extern "C" int tiles_timing_run(const int32_t* plan, const int32_t* header_words, int n_header_words,
                                const void* const* weights, const void* const* k_cache, const void* const* v_cache,
                                int max_cache_len, void* scratch, void* state, const int64_t* input_ids,
                                const int64_t* position, const float* inv_freq, float rope_scale, float* logits,
                                int64_t* tokens, int num_steps, int opt, int prefetch_bytes,
                                unsigned long long* tile_times, int tile_times_stride) {
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
  p.prefetch_bytes = prefetch_bytes;
  p.prefetch_next = 0;
  p.opt = opt;
  if (const char* a = std::getenv("TILES_RING_L2_AHEAD")) p.ring_l2_ahead = std::atoi(a);
  if (const char* a = std::getenv("TILES_RING_FENCE")) p.ring_fence = std::atoi(a);
  p.ring_slots = kRingSlots;
  if (const char* a = std::getenv("TILES_RING_SLOTS")) p.ring_slots = std::atoi(a);
  if (p.ring_slots < 2 || p.ring_slots > kRingSlots) return -3;
  p.poll_piece = 8192;
  p.poll_cap = 262144;
  if (const char* a = std::getenv("TILES_POLL_PREFETCH_BYTES")) p.poll_piece = std::atoi(a);
  if (const char* a = std::getenv("TILES_POLL_PREFETCH_CAP")) p.poll_cap = std::atoi(a);
  if (p.poll_piece < 16 || p.poll_piece % 16 != 0) return -4;
  p.poll_gap = 0;
  if (const char* a = std::getenv("TILES_POLL_GAP")) p.poll_gap = std::atoi(a);
  if (const char* a = std::getenv("TILES_POLL_FENCE")) p.poll_fence = std::atoi(a) != 0;
  p.pace_cycles = kPaceOCyclesDefault;  // v48, as the op sets it
  if (const char* a = std::getenv("TILES_PACE_O_CYCLES")) p.pace_cycles = std::atoi(a);
  if (p.pace_cycles < 0 || p.pace_cycles > kPaceOCyclesMax) return -5;
  if (const char* a = std::getenv("TILES_STREAM_STAGES")) p.stream_stages = std::atoi(a);
  if (const char* a = std::getenv("TILES_STREAM_STAGE_BYTES")) p.stream_stage_bytes = std::atoi(a);
  if (const char* a = std::getenv("TILES_STREAM_PROBE")) p.stream_probe = std::atoi(a);  // as the op reads it
  if (opt & kOptStream) p.prefetch_bytes = 0;
  p.tile_times = tile_times;
  p.tile_times_stride = tile_times_stride;
  p.stream_trace = g_stream_trace;
  p.stream_trace_cap = g_stream_trace_cap;
  for (int i = 0; i < p.h.num_weights; ++i) p.weights[i] = static_cast<const uint16_t*>(weights[i]);
  for (int l = 0; l < p.h.num_layers; ++l) {
    p.k_cache[l] = static_cast<uint16_t*>(const_cast<void*>(k_cache[l]));
    p.v_cache[l] = static_cast<uint16_t*>(const_cast<void*>(v_cache[l]));
  }
  const SmemLayout L = smem_layout(p.h, opt, p.stream_stages, p.stream_stage_bytes);
  if ((opt & kOptStream) && !(opt & kOptWeightRing) && L.sstages < 2) return -5;
  const int32_t smem = L.total;
  cudaError_t e = decode_set_smem_limit(smem);
  if (e != cudaSuccess) return 1000 + static_cast<int>(e);
  const char* generic = std::getenv("TILES_GENERIC_KERNEL");  // as the op
  e = launch_decode(p, 0, generic != nullptr && std::atoi(generic) != 0, g_flagged != 0);
  if (e != cudaSuccess) return 2000 + static_cast<int>(e);
  e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return 3000 + static_cast<int>(e);
  return 0;
}
