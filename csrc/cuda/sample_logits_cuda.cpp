// tiles::sample_logits on CUDA (sample_kernel.cu): the kernel tiles' sampler functions on one logits row. A test
// and first-token op: it syncs to report its outcome (an error raises here, with the generated texts).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <limits>
#include <string>
#include <tuple>

#include "cpu/sampler_cpu.h"
#include "cuda/decode_kernel.h"

namespace tiles {
namespace {

std::tuple<at::Tensor, at::Tensor> sample_logits_cuda(const at::Tensor& logits, const at::Tensor& sampler,
                                                      int64_t position) {
  TORCH_CHECK(logits.is_cuda() && sampler.device() == logits.device(), "tiles::sample_logits (CUDA): logits on ",
              logits.device(), " and sampler on ", sampler.device(), ": both must be on one CUDA device");
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.is_contiguous() && logits.dim() >= 1 &&
                  logits.numel() == logits.size(-1) && logits.numel() >= 1 &&
                  logits.numel() <= std::numeric_limits<int32_t>::max(),
              "tiles::sample_logits (CUDA): logits must be one contiguous float32 row ([vocab] or [1, vocab]); got ",
              logits.scalar_type(), " ", logits.sizes());
  TORCH_CHECK(sampler.scalar_type() == at::kInt && sampler.dim() == 1 && sampler.is_contiguous(),
              "tiles::sample_logits (CUDA): sampler must be a contiguous 1-D int32 tensor; got ",
              sampler.scalar_type(), " ", sampler.sizes());
  TORCH_CHECK(position >= 0, "tiles::sample_logits (CUDA): position ", position, " is negative");
  const int32_t vocab = static_cast<int32_t>(logits.numel());
  const int64_t lm_tiles = cpu::sampler_lm_tiles(sampler.numel(), vocab);
  TORCH_CHECK(lm_tiles >= 1 && lm_tiles <= 4096, "tiles::sample_logits (CUDA): sampler has ", sampler.numel(),
              " words, which is sampler_words(", vocab, ", lm_tiles) for no lm_tiles in 1..4096 "
              "(tiles_ext.sampling.make_sampler builds it)");
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor settings = sampler.narrow(0, 0, kSamplerHeaderWords).cpu();
  const std::string problem = cpu::settings_problem(settings.data_ptr<int32_t>(), vocab);
  TORCH_CHECK(problem.empty(), "tiles::sample_logits (CUDA): the sampler's settings are invalid: ", problem);
  // The candidate slots are the call's scratch: the caller's sampler is only read.
  at::Tensor work = sampler.clone();
  auto kept = at::zeros(logits.sizes(), logits.options().dtype(at::kBool));
  auto token = at::empty({1}, logits.options().dtype(at::kLong));
  auto status = at::zeros({3}, logits.options().dtype(at::kInt));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(logits.device().index()).stream();
  const cudaError_t e = cuda::sample_logits_launch(logits.data_ptr<float>(), vocab, static_cast<int32_t>(lm_tiles),
                                                   work.data_ptr<int32_t>(), position,
                                                   reinterpret_cast<uint8_t*>(kept.data_ptr<bool>()),
                                                   token.data_ptr<int64_t>(), status.data_ptr<int32_t>(), stream);
  TORCH_CHECK(e == cudaSuccess, "tiles::sample_logits (CUDA): launching the sampler kernels: ", cudaGetErrorString(e));
  const at::Tensor st = status.cpu();
  const int32_t* w = st.data_ptr<int32_t>();
  TORCH_CHECK(w[0] == kErrorOk, "tiles::sample_logits (CUDA): ", cpu::sampler_error_text(w[0], w[1], w[2]));
  return {kept, token};
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CUDA, m) { m.impl("sample_logits", &sample_logits_cuda); }

}  // namespace tiles
