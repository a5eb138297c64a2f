// The rows of a weight matrix as the reference executor's matvecs read them: BF16, or E4M3 with fp32 scales per
// output row or per 128 x 128 block (docs/numerics.md, "FP8 weights"). Every row is reduced in the same fixed
// lane order, whatever its storage, so that an FP8 plan is as bit-reproducible as a BF16 one.
#pragma once

#include <stdint.h>

#include <cstring>

#include "plan_format.h"

namespace tiles {
namespace cpu {

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr int kLanes = 8;

// The fixed dot-product order: lane j accumulates the products k = j (mod 8) in increasing k, then the lanes
// are added pairwise ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
inline float lane_sum(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

inline float dot_w(const uint16_t* w, const float* x, int64_t K) {
  float acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += bf16_to_f32(w[k + j]) * x[k + j];
  }
  for (; k < K; ++k) acc[k % kLanes] += bf16_to_f32(w[k]) * x[k];
  return lane_sum(acc);
}

// An E4M3 row whose element k has the scale scales[k / block]: per block, each lane's exact products float(q) * x
// summed, then times the block's scale into the lane (weight_rows.cpp).
float dot_e4m3(const uint8_t* q, const float* scales, int64_t block, const float* x, int64_t K);

// One matrix of the weights list with what its format needs to read a row.
struct WeightRows {
  const void* data;       // [rows, cols]: bf16 bits, or E4M3 bytes
  const float* scales;    // null for BF16; per row [rows], or per block [ceil(rows/128), ceil(cols/128)]
  int32_t layout;         // kScaleNone, kScalePerChannel, kScaleBlock128
  int64_t cols;

  // Row r's dot product with the fp32 vector x[cols].
  float dot(int64_t r, const float* x) const {
    if (layout == kScaleNone) return dot_w(static_cast<const uint16_t*>(data) + r * cols, x, cols);
    const uint8_t* row = static_cast<const uint8_t*>(data) + r * cols;
    if (layout == kScalePerChannel) return dot_e4m3(row, scales + r, cols, x, cols);
    const int64_t blocks = (cols + kScaleBlockSize - 1) / kScaleBlockSize;
    return dot_e4m3(row, scales + (r / kScaleBlockSize) * blocks, kScaleBlockSize, x, cols);
  }
};

}  // namespace cpu
}  // namespace tiles
