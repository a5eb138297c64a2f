// The benchmark's read pass (tiles::read_checksum, CUDA backend): one sweep over a buffer with the decode kernel's
// weight-load pattern. No torch headers: read_sweep.cu compiles standalone (tests/test_install.py, CI).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

namespace tiles {
namespace cuda {

// Reads `bytes` (a multiple of 16) from `data` (16-byte aligned) with `blocks` blocks and writes the sum of its
// 32-bit words (unsigned, exact in 64 bits) to *sum. Asynchronous on `stream`.
cudaError_t launch_read_sweep(const void* data, int64_t bytes, unsigned long long* sum, int blocks,
                              cudaStream_t stream);

}  // namespace cuda
}  // namespace tiles
