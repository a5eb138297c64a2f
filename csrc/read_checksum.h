// tiles::read_checksum: the benchmark's read pass (tiles_ext/bench/bandwidth.py). The sum of a buffer's 32-bit words
// as unsigned integers, exact in 64 bits, so that a test can tell that every byte was read. Its argument check is
// shared by the CPU and CUDA backends.
#pragma once

#include <ATen/ATen.h>

namespace tiles {

// x: contiguous, any dtype, a multiple of 16 bytes, its data 16-byte aligned (the CUDA sweep's 16-byte loads).
// Throws with TORCH_CHECK naming what is wrong.
void check_read_checksum_arg(const at::Tensor& x);

}  // namespace tiles
