// CUDA backend of tiles::read_checksum: the benchmark's read sweep (csrc/cuda/read_sweep.cu) on the current stream,
// one block per SM.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "cuda/read_sweep.h"
#include "read_checksum.h"

namespace tiles {
namespace {

at::Tensor read_checksum_cuda(const at::Tensor& x) {
  check_read_checksum_arg(x);
  const c10::cuda::CUDAGuard guard(x.device());
  int sms = 0;
  const cudaError_t q = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.device().index());
  TORCH_CHECK(q == cudaSuccess, "tiles::read_checksum (CUDA): querying the SM count failed: ", cudaGetErrorString(q));
  auto out = at::empty({}, x.options().dtype(at::kLong));
  const cudaError_t err = cuda::launch_read_sweep(
      x.data_ptr(), x.numel() * static_cast<int64_t>(x.element_size()),
      reinterpret_cast<unsigned long long*>(out.data_ptr<int64_t>()), sms,
      c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == cudaSuccess, "tiles::read_checksum (CUDA): the sweep failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CUDA, m) { m.impl("read_checksum", &read_checksum_cuda); }

}  // namespace tiles
