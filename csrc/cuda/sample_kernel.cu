// tiles::sample_logits on the GPU: the sampler's LMHEAD share on even slices of one logits row (one block each),
// then its ARGMAX merge (one block), with the decode kernels' device functions (sampler.cuh). The slices need not be
// the plan's LM tiles: the kept set and the draw do not depend on how the row is cut (sampler.cuh says why), which
// the tests check against the CPU reference and against decode_step.
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/decode_kernel.h"
#include "sampler_math.h"

namespace tiles {
namespace cuda {
namespace {

#include "cuda/sampler.cuh"

extern __shared__ __align__(16) uint8_t s_sample[];

// Block `slot`: rows [vocab * slot / lm_tiles, vocab * (slot + 1) / lm_tiles), read from `logits`, processed into
// shared memory (capacity rows), their candidates into the sampler copy's slot.
__global__ void __launch_bounds__(kThreads, 1)
    sample_lmhead_kernel(const float* logits, int32_t vocab, int32_t lm_tiles, int32_t* sampler, int64_t position,
                         int32_t capacity) {
  const int32_t slot = blockIdx.x;
  const int32_t rb = static_cast<int32_t>(int64_t(vocab) * slot / lm_tiles);
  const int32_t re = static_cast<int32_t>(int64_t(vocab) * (slot + 1) / lm_tiles);
  uint32_t* hist = reinterpret_cast<uint32_t*>(s_sample);
  int32_t* misc = reinterpret_cast<int32_t*>(hist + kSampHistWords);
  float* proc = reinterpret_cast<float*>(misc + kSampMiscWords);
  samp_lmhead(sampler, samp_slot(sampler, slot), sampler + sampler_seen_offset(lm_tiles), position, rb, re, nullptr,
              logits, proc, capacity, hist, misc, false);
}

// One block: the merge, filters and draw; kept (vocab bytes, zeroed) gets the kept set, token[0] the id, status
// (ErrorCode, seen, wanted) the outcome.
__global__ void __launch_bounds__(kThreads, 1)
    sample_merge_kernel(const int32_t* sampler, int32_t vocab, int32_t lm_tiles, int64_t position,
                        int32_t region_bytes, uint8_t* kept, int64_t* token, int32_t* status) {
  SampOutcome* out = reinterpret_cast<SampOutcome*>(s_sample);
  samp_merge(sampler, sampler, lm_tiles, position, vocab, s_sample + kSampOutcomeBytes, region_bytes, kept, out);
  if (threadIdx.x == 0) {
    status[0] = out->code;
    status[1] = out->seen;
    status[2] = out->wanted;
    token[0] = out->token;
  }
}

}  // namespace

cudaError_t sample_logits_launch(const float* logits, int32_t vocab, int32_t lm_tiles, int32_t* sampler,
                                 int64_t position, uint8_t* kept, int64_t* token, int32_t* status,
                                 cudaStream_t stream) {
  // Shared memory: the slice's processed scores (up to the block's limit: a longer slice reports SAMPLER_OVERFLOW),
  // and the merge's tables and keys (every slot full, or what the limit leaves).
  const int64_t fixed = 4 * (kSampHistWords + kSampMiscWords);
  const int64_t rows = (int64_t(vocab) + lm_tiles - 1) / lm_tiles;
  int64_t capacity = (kMaxSmemPerBlock - fixed) / 4;
  if (rows < capacity) capacity = rows;
  const int32_t lm_bytes = static_cast<int32_t>(fixed + 4 * capacity);
  int64_t region = samp_merge_layout(lm_tiles).keys + int64_t(8) * lm_tiles * kCandSlot;
  if (region > kMaxSmemPerBlock - kSampOutcomeBytes) region = kMaxSmemPerBlock - kSampOutcomeBytes;
  const int32_t merge_bytes = static_cast<int32_t>(kSampOutcomeBytes + region);
  cudaError_t e = cudaFuncSetAttribute(sample_lmhead_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, lm_bytes);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(sample_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, merge_bytes);
  if (e != cudaSuccess) return e;
  sample_lmhead_kernel<<<lm_tiles, kThreads, lm_bytes, stream>>>(logits, vocab, lm_tiles, sampler, position,
                                                                 static_cast<int32_t>(capacity));
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  sample_merge_kernel<<<1, kThreads, merge_bytes, stream>>>(sampler, vocab, lm_tiles, position,
                                                            static_cast<int32_t>(region), kept, token, status);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace tiles
