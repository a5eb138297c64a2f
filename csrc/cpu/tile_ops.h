// The numeric work of each tile op on the CPU (docs/numerics.md is the recipe; planner/format.py the semantics).
#pragma once

#include <stdint.h>

#include "cpu/plan_view.h"

namespace tiles {
namespace cpu {

// Everything a tile reads or writes, fixed for one launch.
struct LaunchIO {
  const PlanView* plan;
  uint8_t* scratch;
  const uint16_t* const* weights;  // weights[i] in plan weight order: bf16 bit patterns, E4M3 bytes for an FP8
                                   // matrix, fp32 for a scale (the header's weight_dtype / scale_layout)
  const float* const* scales;      // scales[i]: the scale tensor of FP8 matrix i, null for every other weight
  uint16_t* const* k_cache;        // per layer, [num_kv_heads, max_len, head_dim] bf16
  uint16_t* const* v_cache;
  int64_t max_len;
  float eps;
};

// What changes from step to step. A step decodes `rows` consecutive positions (format.py "Rows"): row i holds
// tokens[i] at position pos + i; a one-token step has one row.
struct StepIO {
  int64_t step;
  int64_t rows;         // 1..max_rows
  int64_t pos;          // cache index of row 0; row i writes and attends up to (inclusive) pos + i
  const int64_t* tokens;  // [rows] EMBED inputs
  const float* cos;     // [rows, head_dim / 2] RoPE tables at pos + i (already times rope_scale)
  const float* sin;
  float* logits;        // this step's rows of the logits output [rows, vocab]
  int64_t* picked;      // [rows] the ARGMAX tile's tokens
};

// Runs one tile for every row of the step (an ARGMAX tile writes step.picked).
void run_tile(const LaunchIO& io, const StepIO& step, const Tile& t);

}  // namespace cpu
}  // namespace tiles
