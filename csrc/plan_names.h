// Tile names and error messages as the C++ op prints them. The rules are Python's
// (tiles_ext.planner.plan.describe_tile, tiles_ext.errors.describe_error) and every text comes from the generated
// header (planner/format.py), so a tile or an error reads the same from the planner, the validator, the reference
// executor and the CUDA op; tests/test_plan_names.py compares the two languages over whole plans.
// Host code only.
#pragma once

#include <stdint.h>

#include <string>
#include <utility>
#include <vector>

#include "plan_format.h"

namespace tiles {

// kOpNames[op], or "op<N>" for a code outside the table (describe_tile's name of an unknown op).
std::string op_name(int32_t op);

// A tile's name: "L3.q[g1] rows 128:192", "L0.attn[h2 p1]", "lmhead rows 0:4096". `table`: the plan's weight
// table of h.num_weights records, or nullptr (QKV/RESID tiles are then named by weight index). Reads only in-range
// table entries, so a corrupt tile yields a name, never a bad read.
std::string tile_name(const Header& h, const Tile& t, const Weight* table);

// `tmpl` with every {key} replaced by its value (the format.py templates' str.format subset: no format specs, no
// escaped braces). A key without a value stays as written.
std::string format_template(const char* tmpl, const std::vector<std::pair<const char*, std::string>>& values);

// The error report of a state's error words (state_words[kStateError .. kStateErrorWanted]), or "" for kErrorOk.
// `tile_name`: the name of the failing tile (state_words[kStateErrorTile]), or nullptr where it is not known.
std::string error_message(const int32_t* state_words, const std::string* tile_name);

// The same, naming the failing tile from the plan's tables when it is one of its h.num_tiles tiles.
std::string error_message(const Header& h, const int32_t* state_words, const Tile* tiles, const Weight* table);

}  // namespace tiles
