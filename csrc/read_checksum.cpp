// Argument check of tiles::read_checksum (csrc/read_checksum.h), shared by both backends.
#include "read_checksum.h"

#include <cstdint>

namespace tiles {

void check_read_checksum_arg(const at::Tensor& x) {
  TORCH_CHECK(x.is_contiguous(), "tiles::read_checksum: x must be contiguous (got strides ", x.strides(), ")");
  const int64_t bytes = x.numel() * static_cast<int64_t>(x.element_size());
  TORCH_CHECK(bytes % 16 == 0, "tiles::read_checksum: x must hold a multiple of 16 bytes (got ", bytes, ")");
  TORCH_CHECK(bytes == 0 || reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0,
              "tiles::read_checksum: x's data must be 16-byte aligned (a view at an offset is not)");
}

}  // namespace tiles
