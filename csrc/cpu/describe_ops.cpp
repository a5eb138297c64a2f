// CPU kernels of tiles::describe_tiles and tiles::describe_error: the C++ names and messages (plan_names.h) as
// UTF-8 bytes, so that tests compare them with the Python rules they must equal (tests/test_plan_names.py).
#include <cstring>
#include <string>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "cpu/plan_view.h"
#include "op_checks.h"
#include "plan_names.h"

namespace tiles {
namespace cpu {

namespace {

at::Tensor utf8_bytes(const std::string& s) {
  at::Tensor out = at::empty({int64_t(s.size())}, at::TensorOptions().dtype(at::kByte));
  if (!s.empty()) std::memcpy(out.data_ptr<uint8_t>(), s.data(), s.size());
  return out;
}

// Only the sections are checked (plan_sections), not the tiles: a test may corrupt a tile's fields to see how
// its name reads, and tile_name reads nothing out of range.
PlanView sections_of(const at::Tensor& plan, c10::IntArrayRef plan_header, const char* op) {
  const Header h = header_from_list(plan_header);
  TORCH_CHECK(plan.device().is_cpu() && plan.scalar_type() == at::kInt && plan.dim() == 1 && plan.is_contiguous(),
              "tiles::", op, ": plan must be a contiguous 1-D int32 CPU tensor");
  return plan_sections(plan.data_ptr<int32_t>(), plan.numel(), h);
}

// The name of every tile of the plan, in tile order, '\n'-separated.
at::Tensor describe_tiles_cpu(const at::Tensor& plan, c10::IntArrayRef plan_header) {
  const PlanView p = sections_of(plan, plan_header, "describe_tiles");
  std::string names;
  for (int64_t i = 0; i < p.h.num_tiles; ++i) {
    if (i > 0) names += '\n';
    names += tile_name(p.h, p.tiles[i], p.weights);
  }
  return utf8_bytes(names);
}

// The message of the error words in `state` (empty for no error), naming the failing tile from the plan.
at::Tensor describe_error_cpu(const at::Tensor& plan, c10::IntArrayRef plan_header, const at::Tensor& state) {
  const PlanView p = sections_of(plan, plan_header, "describe_error");
  TORCH_CHECK(state.device().is_cpu() && state.scalar_type() == at::kInt && state.dim() == 1 &&
                  state.is_contiguous() && state.numel() > kStateStepsDone,
              "tiles::describe_error: state must be a contiguous 1-D int32 CPU tensor of more than ",
              kStateStepsDone, " words");
  return utf8_bytes(error_message(p.h, state.data_ptr<int32_t>(), p.tiles, p.weights));
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CPU, m) {
  m.impl("describe_tiles", &describe_tiles_cpu);
  m.impl("describe_error", &describe_error_cpu);
}

}  // namespace cpu
}  // namespace tiles
