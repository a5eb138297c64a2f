// E4M3 decoding and the FP8 row dot product of the reference executor (weight_rows.h).
#include "cpu/weight_rows.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace tiles {
namespace cpu {

namespace {

// Bit pattern -> value: sign, 4 exponent bits (bias 7, 0 = subnormal: m x 2^-9), 3 mantissa bits; 0x7F and 0xFF
// are NaN (the format has no infinities).
float decode_e4m3(uint8_t q) {
  const int exp = (q >> 3) & 0xF, man = q & 0x7;
  const float sign = (q & 0x80) ? -1.0f : 1.0f;
  if (exp == 0xF && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(float(man), -9);
  return sign * std::ldexp(float(8 + man), exp - 10);
}

// E4M3 (OCP "fn") to fp32 for all 256 patterns, built once: the conversion runs for every weight element of every
// FP8 matvec.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = decode_e4m3(uint8_t(i));
    return t;
  }();
  return table;
}

}  // namespace

// Blocks start at multiples of `block` (128, or K for one scale per row), so every group of kLanes elements lies
// in one block and lane j still takes exactly the elements k = j (mod 8). Within a block each lane sums its exact
// products float(q) * x (4 x 8 significant bits: exact in fp32), then adds that partial times the block's scale:
// the CUDA kernel's recipe (a scale per partial sum of exact products, there a 16-column chunk's), and for a
// power-of-two scale bit for bit the dequantize-then-add order.
float dot_e4m3(const uint8_t* q, const float* scales, int64_t block, const float* x, int64_t K) {
  const float* table = e4m3_table().data();
  float acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t b0 = 0; b0 < K; b0 += block) {
    const float s = scales[b0 / block];
    const int64_t b1 = std::min(K, b0 + block);
    float part[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = b0;
    for (; k + kLanes <= b1; k += kLanes) {
      float w[kLanes];  // the lookups first, so that the arithmetic below runs on whole vectors
      for (int j = 0; j < kLanes; ++j) w[j] = table[q[k + j]];
      for (int j = 0; j < kLanes; ++j) part[j] += w[j] * x[k + j];
    }
    for (; k < b1; ++k) part[k % kLanes] += table[q[k]] * x[k];
    for (int j = 0; j < kLanes; ++j) acc[j] += part[j] * s;
  }
  return lane_sum(acc);
}

}  // namespace cpu
}  // namespace tiles
