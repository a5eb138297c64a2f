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

#define TILE_CUDA_CHECK(expr, what)                                                                             \
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
  TILE_CUDA_CHECK(cudaMemcpy(w, state.data_ptr(), sizeof(w), cudaMemcpyDeviceToHost), "reading the error words");
  if (w[kStateError] == kErrorOk) return;
  const int32_t tile = w[kStateErrorTile];
  const int32_t* blob = plan.data_ptr<int32_t>();
  const bool named = tile >= 0 && tile < h.num_tiles && h.tiles_offset >= 0 &&
                     int64_t(h.tiles_offset) + int64_t(h.num_tiles) * kTileWords <= plan.numel();
  std::string name;
  if (named) {
    Tile t;
    TILE_CUDA_CHECK(cudaMemcpy(&t, blob + h.tiles_offset + int64_t(tile) * kTileWords, sizeof(Tile),
                                cudaMemcpyDeviceToHost),
                     "reading the failing tile");
    std::vector<Weight> table(h.num_weights);
    const bool has_table = h.weights_offset >= 0 &&
                           int64_t(h.weights_offset) + int64_t(h.num_weights) * kWeightWords <= plan.numel();
    if (has_table && !table.empty()) {
      TILE_CUDA_CHECK(cudaMemcpy(table.data(), blob + h.weights_offset, table.size() * sizeof(Weight),
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
  TILE_CUDA_CHECK(q, "querying the previous launch's error event");
  if (m.host[kStateError] != kErrorOk) {
    m.pending = false;
    raise_if_error(plan, h, state, "a previous launch on this state");  // confirms with a fresh read
  }
}

void record_error_words(const at::Tensor& state, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mirror_mu);
  ErrorMirror& m = mirrors()[state.data_ptr()];
  if (m.host == nullptr) {
    TILE_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&m.host), (kStateStepsDone + 1) * sizeof(int32_t),
                                   cudaHostAllocDefault),
                     "allocating the pinned error mirror");
    std::memset(m.host, 0, (kStateStepsDone + 1) * sizeof(int32_t));
    TILE_CUDA_CHECK(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming), "creating the error event");
  }
  TILE_CUDA_CHECK(cudaMemcpyAsync(m.host, state.data_ptr(), (kStateStepsDone + 1) * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream),
                   "copying the error words");
  TILE_CUDA_CHECK(cudaEventRecord(m.event, stream), "recording the error event");
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
  TILE_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, dev), "querying the SM count");
  TILE_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev), "querying the CC");
  TILE_CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev), "querying the CC");
  cache[dev] = d;
  return d;
}

// Shared-memory limit and occupancy, once per (device, size). The limit is only ever raised (a lower setting would
// break launches of a larger layout seen earlier); the answers are cached so that calls inside a CUDA-graph capture
// make no attribute or occupancy calls.
// `kind`: which kernels (the one-row ones, the rows kernels of decode_rows.cuh, or its prompt-lookup kernels).
enum class KernelKind : int { kOneRow = 0, kRows = 1, kLookup = 2 };

cudaError_t set_smem_limit(KernelKind kind, int32_t bytes) {
  switch (kind) {
    case KernelKind::kRows: return cuda::decode_rows_set_smem_limit(bytes);
    case KernelKind::kLookup: return cuda::decode_lookup_set_smem_limit(bytes);
    default: return cuda::decode_set_smem_limit(bytes);
  }
}

cudaError_t blocks_per_sm(KernelKind kind, int32_t bytes, int* blocks) {
  switch (kind) {
    case KernelKind::kRows: return cuda::decode_rows_blocks_per_sm(bytes, blocks);
    case KernelKind::kLookup: return cuda::decode_lookup_blocks_per_sm(bytes, blocks);
    default: return cuda::decode_blocks_per_sm(bytes, blocks);
  }
}

int prepared_blocks_per_sm(int dev, int32_t smem_bytes, KernelKind kind) {
  static std::mutex mu;
  static std::unordered_map<int64_t, int> blocks_cache;
  static std::unordered_map<int, int32_t> limit;
  std::lock_guard<std::mutex> lock(mu);
  const int lkey = 3 * dev + static_cast<int>(kind);
  if (smem_bytes > limit[lkey]) {
    TILE_CUDA_CHECK(set_smem_limit(kind, smem_bytes), "raising the kernel's shared-memory limit");
    limit[lkey] = smem_bytes;
  }
  const int64_t key = (int64_t(lkey) << 32) | smem_bytes;
  auto it = blocks_cache.find(key);
  if (it != blocks_cache.end()) return it->second;
  int blocks = 0;
  TILE_CUDA_CHECK(blocks_per_sm(kind, smem_bytes, &blocks), "the occupancy query");
  blocks_cache[key] = blocks;
  return blocks;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The device and the kernel's build limits take this plan.
void check_device_and_plan(const Header& h, int dev, const DeviceInfo& di) {
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
  // The attention's warp path (decode_kernel.h attn_warps_fit): a kernel per served head_dim, G query heads per KV
  // head as its fragment rows (check_decode_step_args checked that the KV heads divide the heads).
  bool head_dim_served = false;
#define TILE_SERVED(HD) head_dim_served = head_dim_served || h.head_dim == (HD);
  TILE_ATTN_HEAD_DIMS(TILE_SERVED)
#undef TILE_SERVED
  TORCH_CHECK(head_dim_served, "tiles::decode_step (CUDA): head_dim ", h.head_dim,
              "; this build's kernel serves head_dim ", kAttnWarpsHeadDimsText);
  const int G = h.num_heads / h.num_kv_heads;
  TORCH_CHECK(G <= kAttnWarpsMaxGroup, "tiles::decode_step (CUDA): ", G, " query heads per KV head; this build's "
              "kernel serves at most ", kAttnWarpsMaxGroup);
  TORCH_CHECK(h.hidden % 8 == 0 && h.intermediate % 8 == 0, "tiles::decode_step (CUDA): hidden (", h.hidden,
              ") and intermediate (", h.intermediate, ") must be multiples of 8 (16-byte rows)");
  if (h.weight_dtype == kDTypeF8e4m3) {
    // E4M3 rows are read as 16-byte chunks of 16 columns: the matrices' widths (hidden, q width, intermediate).
    const int32_t q_width = h.num_heads * h.head_dim;
    TORCH_CHECK(h.hidden % 16 == 0 && q_width % 16 == 0 && h.intermediate % 16 == 0, "tiles::decode_step (CUDA): "
                "an FP8 plan's matrix widths (hidden ", h.hidden, ", heads x head_dim ", q_width, ", intermediate ",
                h.intermediate, ") must be multiples of 16 (16-byte rows of E4M3); run this model in BF16");
  }
}

// Whether the arena has the flagged layout. Its size names it: the plan's scratch_bytes for counter hand-offs, twice
// that for flag-in-data hand-offs (every element carries its epoch: flag_data.cuh), which TileRuntime chooses per
// model (tiles_ext/runtime.py choose_handoff).
bool flagged_arena(const Header& h, const at::Tensor& scratch) {
  const bool flagged = scratch.numel() == 2 * int64_t(h.scratch_bytes);
  TORCH_CHECK(flagged || scratch.numel() == h.scratch_bytes, "tiles::decode_step (CUDA): scratch has ",
              scratch.numel(), " bytes; the plan's arena is ", h.scratch_bytes, " bytes (counter hand-offs) or ",
              2 * int64_t(h.scratch_bytes), " (flag hand-offs)");
  TORCH_CHECK(!(flagged && h.weight_dtype == kDTypeF8e4m3), "tiles::decode_step (CUDA): an FP8 plan runs with "
              "counter hand-offs only (the FP8 kernels, decode_kernel.h); pass a scratch of the plan's ",
              h.scratch_bytes, " bytes (TileRuntime(handoff='counters'))");
  return flagged;
}

// The kernel's shared memory for this plan, checked against the per-block limit and the SM (once per size). The rows
// and prompt-lookup kernels have the rows layout (smem_layout_rows).
void prepare_shared_memory(const Header& h, int dev, KernelKind kind) {
  const bool rows = kind != KernelKind::kOneRow;
  const int32_t smem_bytes = rows ? cuda::smem_layout_rows(h).total : cuda::smem_layout(h).total;
  // Checked before the attribute call, whose own failure ("invalid argument") would not say why.
  TORCH_CHECK(smem_bytes <= cuda::kMaxSmemPerBlock, "tiles::decode_step (CUDA): the kernel needs ", smem_bytes,
              " bytes of shared memory per worker block for this model, more than the ", cuda::kMaxSmemPerBlock,
              " it may use (decode_kernel.h smem_layout)");
  const int blocks_per_sm = prepared_blocks_per_sm(dev, smem_bytes, kind);
  TORCH_CHECK(blocks_per_sm >= 1, "tiles::decode_step (CUDA): a worker block (", cuda::kThreads, " threads, ",
              smem_bytes, " bytes of shared memory) does not fit on an SM");
}

// The kernel's by-value parameter block: the tensors' device pointers (weights and caches checked for the 16-byte
// alignment of the kernel's vector reads), the scalars and the header.
cuda::KernelParams kernel_params(const Header& h, const at::Tensor& plan, at::TensorList weights,
                                 at::TensorList k_cache, at::TensorList v_cache, const at::Tensor& scratch,
                                 const at::Tensor& state, const at::Tensor& rope_inv_freq, double rope_scale,
                                 int64_t num_steps, c10::IntArrayRef eos_ids, int64_t max_len) {
  cuda::KernelParams p;
  std::memset(&p, 0, sizeof(p));
  p.plan = plan.data_ptr<int32_t>();
  p.scratch = scratch.data_ptr<uint8_t>();
  p.state = reinterpret_cast<uint32_t*>(state.data_ptr<int32_t>());
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
  // The spin-wait bound (2 s; compute-sanitizer runs need more).
  p.timeout_ns = static_cast<uint64_t>(env_int("TILES_WAIT_TIMEOUT_MS", 2000)) * 1000000ull;
  for (int64_t i = 0; i < h.num_weights; ++i) {
    TORCH_CHECK(aligned16(weights[i].data_ptr()), "tiles::decode_step (CUDA): weights[", i,
                "] is not 16-byte aligned (the kernel reads 16-byte vectors)");
    p.weights[i] = reinterpret_cast<const uint16_t*>(weights[i].data_ptr());
    p.scale_of[i] = -1;
    int32_t slot = -1, layer = -1;
    if (h.weight_dtype == kDTypeF8e4m3 && weight_entry(h, i, &slot, &layer) && kScaleSlotOf[slot] >= 0)
      p.scale_of[i] = static_cast<int16_t>(weight_index(h, kScaleSlotOf[slot], layer));
  }
  for (int64_t l = 0; l < h.num_layers; ++l) {
    TORCH_CHECK(aligned16(k_cache[l].data_ptr()) && aligned16(v_cache[l].data_ptr()),
                "tiles::decode_step (CUDA): k_cache/v_cache[", l, "] is not 16-byte aligned");
    p.k_cache[l] = reinterpret_cast<uint16_t*>(k_cache[l].data_ptr());
    p.v_cache[l] = reinterpret_cast<uint16_t*>(v_cache[l].data_ptr());
  }
  return p;
}

// The sampler tensor's words for the sampler kernels (decode_kernel_*_sampler.cu): its size against the plan, its
// alignment (the ARGMAX tile reads the candidate slots as 16-byte vectors) and the shared memory the ARGMAX tile's
// merge needs after the plan tables (counted on the flag kernels' layout, whose weight stage is the smaller).
int32_t* checked_sampler(const Header& h, const at::Tensor& sampler, c10::Device device) {
  check_sampler(h, sampler, device);
  TORCH_CHECK(aligned16(sampler.data_ptr()), "tiles::decode_step (CUDA): the sampler is not 16-byte aligned (the "
              "kernel reads its candidate slots as 16-byte vectors; pass a fresh tensor, not a view)");
  const cuda::SmemLayout L = cuda::smem_layout(h);
  const int64_t stage_gap = int64_t(cuda::kWarps) * 2 * 32 * 16;  // a batch per warp: kUnroll 4 against 3
  const int64_t region = int64_t(L.total) - L.vec - cuda::kSampOutcomeBytes - stage_gap;
  TORCH_CHECK(region >= cuda::samp_merge_bytes(h.lm_tiles), "tiles::decode_step (CUDA): the ARGMAX tile's sampler "
              "merge needs ", cuda::samp_merge_bytes(h.lm_tiles), " bytes of shared memory for ", h.lm_tiles,
              " LM tiles and this layout leaves ", region, "; sample through Transformers' processors instead");
  return sampler.data_ptr<int32_t>();
}

// The launch on the current stream, and its error report: asynchronous (the error words mirrored to the host, read
// at the next call) unless the stream is being captured into a CUDA graph (no host work then) or TILES_SYNC_CHECK
// asks for this call's own error (a host sync).
// p.lookup_budget > 0: the prompt-lookup kernel; else p.rows > 1: the rows kernel.
void launch_and_report(const cuda::KernelParams& p, bool flagged, const at::Tensor& plan, const Header& h,
                       const at::Tensor& state, int dev) {
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TILE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "querying the stream capture status");
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (!capturing) check_previous_launch(plan, h, state);
  TILE_CUDA_CHECK(p.lookup_budget > 0 ? cuda::launch_decode_lookup(p, stream)
                  : p.rows > 1        ? cuda::launch_decode_rows(p, stream)
                                      : cuda::launch_decode(p, stream, flagged),
                  "launching the persistent kernel");
  if (capturing) return;
  if (env_int("TILES_SYNC_CHECK", 0) != 0) {
    TILE_CUDA_CHECK(cudaStreamSynchronize(stream), "the kernel");
    raise_if_error(plan, h, state, "this launch");
  } else {
    record_error_words(state, stream);
  }
}

std::tuple<at::Tensor, at::Tensor> decode_step_cuda(const at::Tensor& plan, c10::IntArrayRef plan_header,
                                                    at::TensorList weights, at::TensorList k_cache,
                                                    at::TensorList v_cache, const at::Tensor& scratch,
                                                    const at::Tensor& state, const at::Tensor& input_ids,
                                                    const at::Tensor& position, const at::Tensor& rope_inv_freq,
                                                    double rope_scale, int64_t num_steps, c10::IntArrayRef eos_ids,
                                                    int64_t order_seed, const std::optional<at::Tensor>& sampler) {
  const Header h = header_from_list(plan_header);
  TORCH_CHECK(plan.is_cuda(), "tiles::decode_step (CUDA): plan is on ", plan.device(), ", expected a CUDA device");
  check_decode_step_args(h, plan, weights, k_cache, v_cache, scratch, state, input_ids, position, rope_inv_freq,
                         num_steps, eos_ids, plan.device());
  // A verify pass (several rows) runs on the rows kernels (decode_rows.cuh): BF16 plans only.
  const int64_t rows = pass_rows(input_ids);
  TORCH_CHECK(rows == 1 || h.weight_dtype != kDTypeF8e4m3, "tiles::decode_step (CUDA): ", rows, " input ids (a "
              "verify pass of several rows) on an FP8 plan; the CUDA rows kernel reads BF16 weights only: pass one "
              "input id per launch, or verify in BF16");
  TORCH_CHECK(rows == 1 || !sampler.has_value(), "tiles::decode_step: a pass of ", rows, " rows (a verify pass) "
              "takes no sampler: it returns every row's logits, to which the caller applies its processors");
  TORCH_CHECK(order_seed == 0, "tiles::decode_step (CUDA): order_seed ", order_seed,
              " is a CPU reference-executor test hook; the CUDA kernel runs the plan's one schedule (pass 0)");
  const c10::cuda::CUDAGuard guard(plan.device());
  const int dev = plan.device().index();
  check_device_and_plan(h, dev, device_info(dev));
  const int64_t max_len = max_cache_len(k_cache);
  TORCH_CHECK(max_len < (int64_t(1) << 31) / h.head_dim, "tiles::decode_step (CUDA): max_cache_len ", max_len,
              " too large");
  const bool flagged = flagged_arena(h, scratch);
  prepare_shared_memory(h, dev, rows > 1 ? KernelKind::kRows : KernelKind::kOneRow);
  cuda::KernelParams p = kernel_params(h, plan, weights, k_cache, v_cache, scratch, state, rope_inv_freq, rope_scale,
                                       num_steps, eos_ids, max_len);
  p.input_ids = input_ids.data_ptr<int64_t>();
  p.position = position.data_ptr<int64_t>();
  if (sampler.has_value()) p.sampler = checked_sampler(h, *sampler, plan.device());
  p.rows = static_cast<int32_t>(rows);
  p.rows_flagged = rows > 1 && flagged ? 1 : 0;
  // On a flagged arena the rows kernel's unflagged rows lie past the flagged words of row 0 (the one-row flag
  // kernels' only ones): max_rows rows from 2 * row_bytes fit in twice max_rows rows.
  if (p.rows_flagged) p.scratch += 2 * int64_t(h.row_bytes);
  auto logits = at::empty({num_steps * rows, h.vocab}, plan.options().dtype(at::kFloat));
  auto tokens = at::empty({num_steps * rows}, plan.options().dtype(at::kLong));
  p.logits = logits.data_ptr<float>();
  p.tokens = tokens.data_ptr<int64_t>();
  launch_and_report(p, flagged, plan, h, state, dev);
  return {logits, tokens};
}

// Greedy prompt lookup (planner/format.py "Prompt lookup") in one launch of the rows kernel (decode_rows.cuh): BF16
// plans, the arguments checked on the host first (check_prompt_lookup_args); the history's ids are checked by the
// kernel (a host check would read device memory).
std::tuple<at::Tensor, at::Tensor> prompt_lookup_cuda(const at::Tensor& plan, c10::IntArrayRef plan_header,
                                                      at::TensorList weights, at::TensorList k_cache,
                                                      at::TensorList v_cache, const at::Tensor& scratch,
                                                      const at::Tensor& state, const at::Tensor& history,
                                                      int64_t length, const at::Tensor& rope_inv_freq,
                                                      double rope_scale, int64_t draft_tokens, int64_t ngram,
                                                      int64_t budget, c10::IntArrayRef eos_ids) {
  const Header h = header_from_list(plan_header);
  TORCH_CHECK(plan.is_cuda(), "tiles::prompt_lookup (CUDA): plan is on ", plan.device(), ", expected a CUDA device");
  check_prompt_lookup_args(h, plan, weights, k_cache, v_cache, scratch, state, history, length, rope_inv_freq,
                           draft_tokens, ngram, budget, eos_ids, plan.device());
  TORCH_CHECK(h.weight_dtype != kDTypeF8e4m3, "tiles::prompt_lookup (CUDA): an FP8 plan; the CUDA rows kernel reads "
              "BF16 weights only: run prompt lookup in BF16, or through Transformers' loop");
  TORCH_CHECK(draft_tokens <= kMaxRows - 1, "tiles::prompt_lookup (CUDA): draft_tokens ", draft_tokens,
              " beyond the rows kernel's ", kMaxRows - 1);
  const c10::cuda::CUDAGuard guard(plan.device());
  const int dev = plan.device().index();
  check_device_and_plan(h, dev, device_info(dev));
  const int64_t max_len = max_cache_len(k_cache);
  TORCH_CHECK(max_len < (int64_t(1) << 31) / h.head_dim, "tiles::prompt_lookup (CUDA): max_cache_len ", max_len,
              " too large");
  const bool flagged = flagged_arena(h, scratch);
  prepare_shared_memory(h, dev, KernelKind::kLookup);
  cuda::KernelParams p = kernel_params(h, plan, weights, k_cache, v_cache, scratch, state, rope_inv_freq, rope_scale,
                                       1, eos_ids, max_len);
  p.rows_flagged = flagged ? 1 : 0;
  if (p.rows_flagged) p.scratch += 2 * int64_t(h.row_bytes);  // past the flagged words of row 0, as decode_step
  auto logits = at::empty({kMaxRows, h.vocab}, plan.options().dtype(at::kFloat));  // each pass's rows, not returned
  auto tokens = at::full({budget}, -1, plan.options().dtype(at::kLong));
  auto rounds = at::zeros({1}, plan.options().dtype(at::kLong));
  p.logits = logits.data_ptr<float>();
  p.tokens = tokens.data_ptr<int64_t>();
  p.history = history.data_ptr<int64_t>();
  p.lookup_rounds = rounds.data_ptr<int64_t>();
  p.lookup_length = static_cast<int32_t>(length);
  p.lookup_budget = static_cast<int32_t>(budget);
  p.lookup_draft = static_cast<int32_t>(draft_tokens);
  p.lookup_ngram = static_cast<int32_t>(ngram);
  launch_and_report(p, flagged, plan, h, state, dev);
  return {tokens, rounds};
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CUDA, m) {
  m.impl("decode_step", &decode_step_cuda);
  m.impl("prompt_lookup", &prompt_lookup_cuda);
}

}  // namespace tiles
