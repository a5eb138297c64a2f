// Typed view of a plan blob in host memory, with a structural check of every table (the reference executor
// indexes scratch, weights and counters with these fields, so a corrupt plan must fail here, not segfault).
#pragma once

#include <stdint.h>

#include "plan_format.h"

namespace tiles {
namespace cpu {

struct PlanView {
  Header h;
  const Buffer* buffers;
  const Tile* tiles;
  const Wait* waits;
  const int32_t* worker_offsets;  // [num_workers + 1]
  const int32_t* worker_tiles;    // [num_tiles]
  const Weight* weights;          // [num_weights]: (slot, layer, rows, cols)
};

// Checks the blob against the host header (the one the caller launched with) and every table entry against the
// header's dimensions; throws (TORCH_CHECK) naming the table, entry and field. `blob` has `words` int32 words.
PlanView view_plan(const int32_t* blob, int64_t words, const Header& host_header);

// Only the first step of view_plan: the blob's header equals the host header and every section lies inside the
// blob. Enough for reading names (plan_names.h reads only in-range entries), not for executing the plan.
PlanView plan_sections(const int32_t* blob, int64_t words, const Header& host_header);

}  // namespace cpu
}  // namespace tiles
