// CUDA backend of tiles::decode_step: argument checks, the kernel's by-value parameter block, the launch on the
// current stream, and the asynchronous error report (no host sync in the hot path; safe inside CUDA-graph capture).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/decode_kernel.h"
#include "op_checks.h"
#include "plan_names.h"

namespace tiles {
namespace {

#define TILES_CUDA_CHECK(expr, what)                                                                            \
  do {                                                                                                          \
    const cudaError_t err__ = (expr);                                                                           \
    TORCH_CHECK(err__ == cudaSuccess, "tiles::decode_step (CUDA): ", what, " failed: ", cudaGetErrorString(err__)); \
  } while (0)

int64_t env_int(const char* name, int64_t dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  TORCH_CHECK(end != v && *end == '\0', "tiles::decode_step: environment variable ", name, "='", v,
              "' is not an integer");
  return x;
}

// Error words of a state tensor, mirrored into pinned host memory after each (non-captured) launch and read at the
// next call once the copy's event has completed.
struct ErrorMirror {
  int32_t* host = nullptr;  // kStateStepsDone + 1 words
  cudaEvent_t event = nullptr;
  bool pending = false;
};

std::mutex g_mirror_mu;
std::unordered_map<const void*, ErrorMirror>& mirrors() {
  static auto* m = new std::unordered_map<const void*, ErrorMirror>();
  return *m;
}

// Synchronous read of the error words (error path and TILES_SYNC_CHECK only) and the exception. The message is
// tiles_ext.errors.describe_error's (plan_names.h), the failing tile named from the device plan's tables.
void raise_if_error(const at::Tensor& plan, const Header& h, const at::Tensor& state, const char* when) {
  int32_t w[kStateStepsDone + 1];
  TILES_CUDA_CHECK(cudaMemcpy(w, state.data_ptr(), sizeof(w), cudaMemcpyDeviceToHost), "reading the error words");
  if (w[kStateError] == kErrorOk) return;
  const int32_t tile = w[kStateErrorTile];
  const int32_t* blob = plan.data_ptr<int32_t>();
  const bool named = tile >= 0 && tile < h.num_tiles && h.tiles_offset >= 0 &&
                     int64_t(h.tiles_offset) + int64_t(h.num_tiles) * kTileWords <= plan.numel();
  std::string name;
  if (named) {
    Tile t;
    TILES_CUDA_CHECK(cudaMemcpy(&t, blob + h.tiles_offset + int64_t(tile) * kTileWords, sizeof(Tile),
                                cudaMemcpyDeviceToHost),
                     "reading the failing tile");
    std::vector<Weight> table(h.num_weights);
    const bool has_table = h.weights_offset >= 0 &&
                           int64_t(h.weights_offset) + int64_t(h.num_weights) * kWeightWords <= plan.numel();
    if (has_table && !table.empty()) {
      TILES_CUDA_CHECK(cudaMemcpy(table.data(), blob + h.weights_offset, table.size() * sizeof(Weight),
                                  cudaMemcpyDeviceToHost),
                       "reading the weight table");
    }
    name = tile_name(h, t, has_table ? table.data() : nullptr);
  }
  TORCH_CHECK(false, "tiles::decode_step (CUDA): ", when, " failed: ", error_message(w, named ? &name : nullptr));
}

void check_previous_launch(const at::Tensor& plan, const Header& h, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g_mirror_mu);
  auto it = mirrors().find(state.data_ptr());
  if (it == mirrors().end() || !it->second.pending) return;
  ErrorMirror& m = it->second;
  const cudaError_t q = cudaEventQuery(m.event);
  if (q == cudaErrorNotReady) return;
  TILES_CUDA_CHECK(q, "querying the previous launch's error event");
  if (m.host[kStateError] != kErrorOk) {
    m.pending = false;
    raise_if_error(plan, h, state, "a previous launch on this state");  // confirms with a fresh read
  }
}

void record_error_words(const at::Tensor& state, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mirror_mu);
  ErrorMirror& m = mirrors()[state.data_ptr()];
  if (m.host == nullptr) {
    TILES_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&m.host), (kStateStepsDone + 1) * sizeof(int32_t),
                                   cudaHostAllocDefault),
                     "allocating the pinned error mirror");
    std::memset(m.host, 0, (kStateStepsDone + 1) * sizeof(int32_t));
    TILES_CUDA_CHECK(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming), "creating the error event");
  }
  TILES_CUDA_CHECK(cudaMemcpyAsync(m.host, state.data_ptr(), (kStateStepsDone + 1) * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream),
                   "copying the error words");
  TILES_CUDA_CHECK(cudaEventRecord(m.event, stream), "recording the error event");
  m.pending = true;
}

struct DeviceInfo {
  int sm_count = 0, cc_major = 0, cc_minor = 0;
};

DeviceInfo device_info(int dev) {
  static std::mutex mu;
  static std::unordered_map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  DeviceInfo d;
  TILES_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, dev), "querying the SM count");
  TILES_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev), "querying the CC");
  TILES_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev), "querying the CC");
  cache[dev] = d;
  return d;
}

// Shared-memory limit and occupancy, once per (device, size). The limit is only ever raised (a lower setting would
// break launches of a larger layout seen earlier); the answers are cached so that calls inside a CUDA-graph capture
// make no attribute or occupancy calls.
int prepared_blocks_per_sm(int dev, int32_t smem_bytes) {
  static std::mutex mu;
  static std::unordered_map<int64_t, int> blocks_cache;
  static std::unordered_map<int, int32_t> limit;
  std::lock_guard<std::mutex> lock(mu);
  if (smem_bytes > limit[dev]) {
    TILES_CUDA_CHECK(cuda::decode_set_smem_limit(smem_bytes), "raising the kernel's shared-memory limit");
    limit[dev] = smem_bytes;
  }
  const int64_t key = (int64_t(dev) << 32) | smem_bytes;
  auto it = blocks_cache.find(key);
  if (it != blocks_cache.end()) return it->second;
  int blocks = 0;
  TILES_CUDA_CHECK(cuda::decode_blocks_per_sm(smem_bytes, &blocks), "the occupancy query");
  blocks_cache[key] = blocks;
  return blocks;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::tuple<at::Tensor, at::Tensor> decode_step_cuda(const at::Tensor& plan, c10::IntArrayRef plan_header,
                                                    at::TensorList weights, at::TensorList k_cache,
                                                    at::TensorList v_cache, const at::Tensor& scratch,
                                                    const at::Tensor& state, const at::Tensor& input_ids,
                                                    const at::Tensor& position, const at::Tensor& rope_inv_freq,
                                                    double rope_scale, int64_t num_steps, c10::IntArrayRef eos_ids,
                                                    int64_t order_seed) {
  const Header h = header_from_list(plan_header);
  TORCH_CHECK(plan.is_cuda(), "tiles::decode_step (CUDA): plan is on ", plan.device(), ", expected a CUDA device");
  check_decode_step_args(h, plan, weights, k_cache, v_cache, scratch, state, input_ids, position, rope_inv_freq,
                         num_steps, eos_ids, plan.device());
  TORCH_CHECK(order_seed == 0, "tiles::decode_step (CUDA): order_seed ", order_seed,
              " is a CPU reference-executor test hook; the CUDA kernel runs the plan's one schedule (pass 0)");
  const c10::cuda::CUDAGuard guard(plan.device());
  const int dev = plan.device().index();
  const DeviceInfo di = device_info(dev);
  TORCH_CHECK(di.cc_major == 9, "tiles::decode_step (CUDA): this build targets sm_90a (H100/H200); device ", dev,
              " has compute capability ", di.cc_major, ".", di.cc_minor);
  TORCH_CHECK(h.sm_count == 0 || h.sm_count == di.sm_count, "tiles::decode_step (CUDA): plan made for a GPU with ",
              h.sm_count, " SMs, device ", dev, " has ", di.sm_count, "; rebuild the plan for this GPU");
  TORCH_CHECK(h.cc_major == 0 || (h.cc_major == di.cc_major && h.cc_minor == di.cc_minor),
              "tiles::decode_step (CUDA): plan made for compute capability ", h.cc_major, ".", h.cc_minor,
              ", device ", dev, " is ", di.cc_major, ".", di.cc_minor, "; rebuild the plan for this GPU");
  TORCH_CHECK(h.num_workers <= di.sm_count, "tiles::decode_step (CUDA): plan has ", h.num_workers,
              " workers, device ", dev, " has ", di.sm_count, " SMs (one worker per SM)");
  TORCH_CHECK(h.num_layers <= cuda::kMaxLayers, "tiles::decode_step (CUDA): ", h.num_layers,
              " layers, this build supports at most ", cuda::kMaxLayers, " (cuda::kMaxLayers)");
  TORCH_CHECK(h.num_weights <= cuda::kMaxWeights, "tiles::decode_step (CUDA): ", h.num_weights,
              " weights, this build passes at most ", cuda::kMaxWeights, " (cuda::kMaxWeights)");
  const int G = h.num_heads / h.num_kv_heads;
  TORCH_CHECK(G <= cuda::kMaxGroup, "tiles::decode_step (CUDA): ", G, " query heads per KV head, at most ",
              cuda::kMaxGroup, " supported");
  TORCH_CHECK(h.head_dim % 8 == 0 && h.head_dim <= 256 && h.hidden % 8 == 0 && h.intermediate % 8 == 0,
              "tiles::decode_step (CUDA): head_dim (", h.head_dim, "), hidden (", h.hidden, ") and intermediate (",
              h.intermediate, ") must be multiples of 8 (16-byte rows), head_dim <= 256");
  const int64_t max_len = max_cache_len(k_cache);
  TORCH_CHECK(max_len < (int64_t(1) << 31) / h.head_dim, "tiles::decode_step (CUDA): max_cache_len ", max_len,
              " too large");

  const int64_t opt = env_int("TILES_KERNEL_OPT", cuda::kOptDefault);
  TORCH_CHECK(opt >= 0 && (opt & ~int64_t(cuda::kOptAll)) == 0, "tiles::decode_step (CUDA): TILES_KERNEL_OPT=", opt,
              " has bits outside ", cuda::kOptAll, " (bitmask of the kernel's latency options, decode_kernel.h)");
#ifdef TILES_LEAN_OPT
  TORCH_CHECK(opt == TILES_LEAN_OPT, "tiles::decode_step (CUDA): this is an experiment build with the kernel options "
              "fixed at ", TILES_LEAN_OPT, " (TILES_LEAN_OPT); TILES_KERNEL_OPT=", opt, " needs a build without it");
#endif
  // The arena's size names its layout: the plan's scratch_bytes for counter hand-offs, twice that for flag-in-data
  // hand-offs (every element carries its epoch: flag_data.cuh), which TileRuntime chooses per model
  // (tiles_ext/runtime.py choose_handoff). Only the default option set runs on a flagged arena (its own
  // compilation, decode_kernel_flags.cu): a runtime bound that way refuses any other set rather than mix hand-offs,
  // whose counters would then never catch up.
  const bool flagged = scratch.numel() == 2 * int64_t(h.scratch_bytes);
  TORCH_CHECK(flagged || scratch.numel() == h.scratch_bytes, "tiles::decode_step (CUDA): scratch has ",
              scratch.numel(), " bytes; the plan's arena is ", h.scratch_bytes, " bytes (counter hand-offs) or ",
              2 * int64_t(h.scratch_bytes), " (flag hand-offs)");
  const bool generic = env_int("TILES_GENERIC_KERNEL", 0) != 0;
  TORCH_CHECK(!flagged || (opt == cuda::decode_flags_opt() && !generic),
              "tiles::decode_step (CUDA): this runtime hands off by flag-in-data words (its scratch arena is twice the "
              "plan's), which only the default kernel option set ", cuda::decode_flags_opt(), " runs; TILES_KERNEL_OPT=",
              opt, generic ? " with TILES_GENERIC_KERNEL=1" : "", " needs a runtime bound with counter hand-offs "
              "(TileRuntime(..., handoff='counters') or TILES_HANDOFF=counters when it is made)");
  TORCH_CHECK(!flagged || cuda::default_variant_fits(h),
              "tiles::decode_step (CUDA): this runtime hands off by flag-in-data words, which only the default kernel "
              "variant runs, and that variant's attention takes G <= ", kAttnWarpsMaxGroup, " query heads per KV head "
              "and head_dim ", kAttnWarpsHeadDim, " (this plan: ", h.num_heads, " heads over ", h.num_kv_heads,
              " KV heads, head_dim ", h.head_dim, "); bind the runtime with counter hand-offs "
              "(TileRuntime(..., handoff='counters') or TILES_HANDOFF=counters)");
  int32_t stream_stages = 0, stream_stage_bytes = 0, stream_probe = 0, stream_piece = 0;
  if (opt & cuda::kOptStream) {  // read only when the stream runs
    const int64_t v = env_int("TILES_STREAM_STAGES", 0);
    TORCH_CHECK(v >= 0 && v <= cuda::kStreamMaxStages, "tiles::decode_step (CUDA): TILES_STREAM_STAGES=", v,
                " outside 0..", cuda::kStreamMaxStages, " (0 = ", cuda::kStreamDefaultStages, " or as many as fit)");
    stream_stages = static_cast<int32_t>(v);
    const int64_t b = env_int("TILES_STREAM_STAGE_BYTES", 0);
    TORCH_CHECK(b >= 0 && b <= 192 * 1024, "tiles::decode_step (CUDA): TILES_STREAM_STAGE_BYTES=", b,
                " outside 0..196608");
    stream_stage_bytes = static_cast<int32_t>(b);
    stream_probe = static_cast<int32_t>(env_int("TILES_STREAM_PROBE", 0));
    stream_piece = static_cast<int32_t>(env_int("TILES_STREAM_PIECE", 0));
    TORCH_CHECK(stream_piece >= 0 && stream_piece % 16 == 0, "tiles::decode_step (CUDA): TILES_STREAM_PIECE=",
                stream_piece, " must be a multiple of 16 (bytes per bulk copy)");
  }
  const cuda::SmemLayout layout =
      cuda::smem_layout(h, static_cast<int32_t>(opt), stream_stages, stream_stage_bytes);
  const int32_t smem_bytes = layout.total;
  TORCH_CHECK(!(opt & cuda::kOptStream) || (opt & cuda::kOptWeightRing) || layout.sstages >= 2,
              "tiles::decode_step (CUDA): TILES_KERNEL_OPT=", opt, " asks for the weight stream, but fewer than two ",
              layout.sstage_bytes, "-byte stages fit in shared memory beside this model's other buffers "
              "(decode_kernel.h smem_layout); leave out bit ", cuda::kOptStream);
  // Checked before the attribute call, whose own failure ("invalid argument") would not say why.
  TORCH_CHECK(smem_bytes <= cuda::kMaxSmemPerBlock, "tiles::decode_step (CUDA): TILES_KERNEL_OPT=", opt,
              " needs ", smem_bytes, " bytes of shared memory per worker block for this model, more than the ",
              cuda::kMaxSmemPerBlock, " the kernel may use (decode_kernel.h smem_layout); choose fewer options");
  const int blocks_per_sm = prepared_blocks_per_sm(dev, smem_bytes);
  TORCH_CHECK(blocks_per_sm >= 1, "tiles::decode_step (CUDA): a worker block (", cuda::kThreads, " threads, ",
              smem_bytes, " bytes of shared memory) does not fit on an SM");

  cuda::KernelParams p;
  std::memset(&p, 0, sizeof(p));
  p.plan = plan.data_ptr<int32_t>();
  p.scratch = scratch.data_ptr<uint8_t>();
  p.state = reinterpret_cast<uint32_t*>(state.data_ptr<int32_t>());
  p.input_ids = input_ids.data_ptr<int64_t>();
  p.position = position.data_ptr<int64_t>();
  p.inv_freq = rope_inv_freq.data_ptr<float>();
  p.rope_scale = static_cast<float>(rope_scale);
  float eps;
  std::memcpy(&eps, &h.eps_bits, sizeof(eps));
  p.eps = eps;
  p.num_steps = static_cast<int32_t>(num_steps);
  p.num_eos = static_cast<int32_t>(eos_ids.size());
  for (size_t i = 0; i < eos_ids.size(); ++i) p.eos[i] = static_cast<int32_t>(eos_ids[i]);
  p.max_cache_len = static_cast<int32_t>(max_len);
  p.h = h;
  p.timeout_ns = static_cast<uint64_t>(env_int("TILES_WAIT_TIMEOUT_MS", 2000)) * 1000000ull;
  {
    // v48 (perf log, session 17): the o projection's staging, after an ATTN tile, paced warp by warp so that its
    // burst does not queue ahead of MERGE's stores and release.
    const int64_t pace = env_int("TILES_PACE_O_CYCLES", cuda::kPaceOCyclesDefault);
    TORCH_CHECK(pace >= 0 && pace <= cuda::kPaceOCyclesMax, "tiles::decode_step (CUDA): TILES_PACE_O_CYCLES=", pace,
                " is outside 0..", cuda::kPaceOCyclesMax);
    p.pace_cycles = static_cast<int32_t>(pace);
  }
  // Default L2 prefetch window: none when StageWeights / BulkStage copies the first batches before the wait (the
  // window would only duplicate them and compete with the critical path: 1.114 vs 1.131 ms, H200 2026-11-30), else
  // 64 KB.
  p.prefetch_bytes = static_cast<int32_t>(env_int(
      "TILES_PREFETCH_BYTES", (opt & (cuda::kOptStageWeights | cuda::kOptBulkStage)) ? 0 : 65536));
  TORCH_CHECK(!flagged || p.prefetch_bytes <= 0, "tiles::decode_step (CUDA): TILES_PREFETCH_BYTES=",
              p.prefetch_bytes, " runs on the runtime-options kernel, which hands off by counters; this runtime hands "
              "off by flag-in-data words (bind it with handoff='counters' to measure the prefetch)");
  p.prefetch_next = static_cast<int32_t>(env_int("TILES_PREFETCH_NEXT", 0));
  p.ring_slots = cuda::kRingSlots;
  if (opt & cuda::kOptWeightRing) {  // the ring's knobs are read only when it runs (no per-call work otherwise)
    p.prefetch_bytes = 0;  // the ring streams every matvec tile's weights itself
    const int64_t l2_ahead = env_int("TILES_RING_L2_AHEAD", 0);
    TORCH_CHECK(l2_ahead >= 0 && l2_ahead <= 64, "tiles::decode_step (CUDA): TILES_RING_L2_AHEAD=", l2_ahead,
                " outside 0..64 (batches per warp)");
    p.ring_l2_ahead = static_cast<int32_t>(l2_ahead);
    p.ring_fence = env_int("TILES_RING_FENCE", 0) != 0 ? 1 : 0;
    const int64_t ring_slots = env_int("TILES_RING_SLOTS", cuda::kRingSlots);
    TORCH_CHECK(ring_slots >= 2 && ring_slots <= cuda::kRingSlots, "tiles::decode_step (CUDA): TILES_RING_SLOTS=",
                ring_slots, " outside 2..", cuda::kRingSlots, " (a warp reads a row pair from two slots at once)");
    p.ring_slots = static_cast<int32_t>(ring_slots);
  }
  if (opt & cuda::kOptPollPrefetch) {  // read only when the option runs
    const int64_t piece = env_int("TILES_POLL_PREFETCH_BYTES", 8192);
    const int64_t cap = env_int("TILES_POLL_PREFETCH_CAP", 262144);
    TORCH_CHECK(piece >= 16 && piece <= (int64_t(1) << 20) && piece % 16 == 0 && cap >= 0 && cap < (int64_t(1) << 31),
                "tiles::decode_step (CUDA): TILES_POLL_PREFETCH_BYTES=", piece, " must be a multiple of 16 in 16..1 MiB"
                " and TILES_POLL_PREFETCH_CAP=", cap, " in 0..2 GiB");
    p.poll_piece = static_cast<int32_t>(piece);
    p.poll_cap = static_cast<int32_t>(cap);
  }
  if (opt & cuda::kOptPollAhead) {  // read only when the option runs
    const int64_t gap = env_int("TILES_POLL_GAP", 0);  // 0 measured best (perf log v26)
    TORCH_CHECK(gap >= 0 && gap <= 100000, "tiles::decode_step (CUDA): TILES_POLL_GAP=", gap,
                " outside 0..100000 (SM cycles between two polls of a counter)");
    p.poll_gap = static_cast<int32_t>(gap);
    p.poll_fence = env_int("TILES_POLL_FENCE", 0) != 0 ? 1 : 0;
  }
  if (flagged) {  // the flag polls' knobs (experiments, perf log v28), read only when they run
    const int64_t ns = env_int("TILES_FLAG_SLEEP_NS", 0);
    TORCH_CHECK(ns >= 0 && ns <= 10000, "tiles::decode_step (CUDA): TILES_FLAG_SLEEP_NS=", ns,
                " outside 0..10000 (nanoseconds between two polls of a flagged input)");
    p.poll_gap = static_cast<int32_t>(ns);
    const int64_t mode = env_int("TILES_FLAG_MODE", 0);
    TORCH_CHECK(mode == 0 || mode == 1, "tiles::decode_step (CUDA): TILES_FLAG_MODE=", mode,
                " must be 0 (poll every input word) or 1 (each thread polls its first word, then reads)");
    p.poll_fence = static_cast<int32_t>(mode);
  }
  p.stream_stages = stream_stages;
  p.stream_stage_bytes = stream_stage_bytes;
  p.stream_probe = stream_probe;
  p.stream_piece = stream_piece;
  if (opt & cuda::kOptStream) p.prefetch_bytes = 0;  // the stream moves every matvec tile's weights itself
  p.opt = static_cast<int32_t>(opt);
  for (int64_t i = 0; i < h.num_weights; ++i) {
    TORCH_CHECK(aligned16(weights[i].data_ptr()), "tiles::decode_step (CUDA): weights[", i,
                "] is not 16-byte aligned (the kernel reads 16-byte vectors)");
    p.weights[i] = reinterpret_cast<const uint16_t*>(weights[i].data_ptr());
  }
  for (int64_t l = 0; l < h.num_layers; ++l) {
    TORCH_CHECK(aligned16(k_cache[l].data_ptr()) && aligned16(v_cache[l].data_ptr()),
                "tiles::decode_step (CUDA): k_cache/v_cache[", l, "] is not 16-byte aligned");
    p.k_cache[l] = reinterpret_cast<uint16_t*>(k_cache[l].data_ptr());
    p.v_cache[l] = reinterpret_cast<uint16_t*>(v_cache[l].data_ptr());
  }

  auto logits = at::empty({num_steps, h.vocab}, plan.options().dtype(at::kFloat));
  auto tokens = at::empty({num_steps}, plan.options().dtype(at::kLong));
  p.logits = logits.data_ptr<float>();
  p.tokens = tokens.data_ptr<int64_t>();

  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TILES_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "querying the stream capture status");
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (!capturing) check_previous_launch(plan, h, state);

  // TILES_GENERIC_KERNEL=1: the default option set on the runtime-options kernel (perf log v27), for A/B.
  TILES_CUDA_CHECK(cuda::launch_decode(p, stream, generic, flagged), "launching the persistent kernel");

  if (!capturing) {
    if (env_int("TILES_SYNC_CHECK", 0) != 0) {
      // Debug mode: report this launch's error from this call (host sync).
      TILES_CUDA_CHECK(cudaStreamSynchronize(stream), "the kernel");
      raise_if_error(plan, h, state, "this launch");
    } else {
      record_error_words(state, stream);
    }
  }
  return {logits, tokens};
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CUDA, m) { m.impl("decode_step", &decode_step_cuda); }

}  // namespace tiles
