// CPU backend of tiles::read_checksum: the reference the CUDA sweep is tested against.
#include <torch/library.h>

#include <cstdint>
#include <cstring>

#include "read_checksum.h"

namespace tiles {
namespace cpu {
namespace {

at::Tensor read_checksum_cpu(const at::Tensor& x) {
  check_read_checksum_arg(x);
  const int64_t words = x.numel() * static_cast<int64_t>(x.element_size()) / 4;
  const auto* p = static_cast<const uint8_t*>(x.data_ptr());
  uint64_t sum = 0;
  for (int64_t i = 0; i < words; ++i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    sum += w;
  }
  return at::scalar_tensor(static_cast<int64_t>(sum), x.options().dtype(at::kLong));
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CPU, m) { m.impl("read_checksum", &read_checksum_cpu); }

}  // namespace cpu
}  // namespace tiles
