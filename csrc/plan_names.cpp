// Tile names and error messages (plan_names.h): Python's rules, line for line, over the generated texts.
#include "plan_names.h"

#include <cstring>

namespace tiles {

namespace {

// Python's // (floor division), so that a corrupt negative field names the same group in both languages.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t at_least_one(int64_t x) { return x > 1 ? x : 1; }

std::string rows_of(const Tile& t) {
  return "rows " + std::to_string(t.row_begin) + ":" + std::to_string(t.row_end);
}

// QKV and RESID tiles are named by the slot of their weight ("q", "o", "down"), q/k/v with their KV-head group.
std::string matvec_name(const Header& h, const Tile& t, const Weight* table, const std::string& where) {
  const int32_t w = t.weight;
  if (table == nullptr || w < 0 || w >= h.num_weights || table[w].slot < 0 || table[w].slot >= kNumSlots) {
    return where + op_name(t.op) + "[w" + std::to_string(w) + "] " + rows_of(t);
  }
  const int32_t slot = table[w].slot;
  const bool qkv = slot == kSlotQ || slot == kSlotK || slot == kSlotV;
  const int64_t hd = at_least_one(h.head_dim);
  const int64_t group = slot == kSlotQ ? hd * at_least_one(floor_div(h.num_heads, at_least_one(h.num_kv_heads)))
                                       : hd;
  const std::string g = qkv ? "[g" + std::to_string(floor_div(t.row_begin, group)) + "]" : std::string();
  return where + kSlotNames[slot] + g + " " + rows_of(t);
}

std::string value_of(const std::vector<std::pair<const char*, std::string>>& values, const std::string& key,
                     bool* found) {
  for (const auto& kv : values) {
    if (key == kv.first) {
      *found = true;
      return kv.second;
    }
  }
  *found = false;
  return std::string();
}

// describe_error's {where}: the failing tile, the step-boundary wait (a WAIT_TIMEOUT outside a tile) or none.
std::string error_where(const int32_t* w, const std::string* tile_name) {
  const int32_t tile = w[kStateErrorTile];
  const std::string t = std::to_string(tile);
  if (tile >= 0) {
    return tile_name != nullptr ? format_template(kTileWhere, {{"tile", t}, {"tile_name", *tile_name}})
                                : format_template(kUnnamedTileWhere, {{"tile", t}});
  }
  return w[kStateError] == kErrorWaitTimeout ? kStepWaitWhere : kNoTileWhere;
}

}  // namespace

std::string op_name(int32_t op) {
  if (op >= 0 && op < kNumOpNames && kOpNames[op] != nullptr) return kOpNames[op];
  return "op" + std::to_string(op);
}

std::string tile_name(const Header& h, const Tile& t, const Weight* table) {
  if (!(t.op >= 0 && t.op < kNumOpNames && kOpNames[t.op] != nullptr)) return op_name(t.op);
  const std::string where = t.layer >= 0 ? "L" + std::to_string(t.layer) + "." : std::string();
  const std::string op = kOpNames[t.op];
  switch (t.op) {
    case kOpAttn: return where + op + "[h" + std::to_string(t.aux0) + " p" + std::to_string(t.aux1) + "]";
    case kOpMerge: return where + op + "[h" + std::to_string(t.aux0) + "]";
    case kOpGateup:
    case kOpLmhead: return where + op + " " + rows_of(t);
    case kOpQkv:
    case kOpResid: return matvec_name(h, t, table, where);
    default: return where + op;
  }
}

std::string format_template(const char* tmpl, const std::vector<std::pair<const char*, std::string>>& values) {
  std::string out;
  for (const char* p = tmpl; *p != '\0';) {
    const char* close = *p == '{' ? std::strchr(p, '}') : nullptr;
    if (close == nullptr) {
      out += *p++;
      continue;
    }
    const std::string key(p + 1, close);
    bool found = false;
    const std::string v = value_of(values, key, &found);
    out += found ? v : std::string(p, close + 1);
    p = close + 1;
  }
  return out;
}

std::string error_message(const int32_t* w, const std::string* tile_name) {
  const int32_t code = w[kStateError];
  if (code == kErrorOk) return std::string();
  const std::vector<std::pair<const char*, std::string>> values = {
      {"code", std::to_string(code)},
      {"counter", std::to_string(w[kStateErrorCounter])},
      {"seen", std::to_string(w[kStateErrorSeen])},
      {"wanted", std::to_string(w[kStateErrorWanted])},
      {"seen_u", std::to_string(static_cast<uint32_t>(w[kStateErrorSeen]))},
      {"wanted_u", std::to_string(static_cast<uint32_t>(w[kStateErrorWanted]))},
  };
  const bool known = code > kErrorOk && code < kNumErrorCodes;
  const std::string name = known ? kErrorNames[code] : format_template(kUnknownErrorName, values);
  const char* meaning = known ? kErrorTexts[code] : kUnknownErrorText;
  const char* detail = known ? kErrorDetails[code] : kUnknownErrorDetail;
  if (code == kErrorWaitTimeout && w[kStateErrorCounter] == kFlagWaitCounter) detail = kFlagWaitDetail;
  return format_template(kErrorMessage, {{"name", name},
                                         {"meaning", meaning},
                                         {"worker", std::to_string(w[kStateErrorWorker])},
                                         {"where", error_where(w, tile_name)},
                                         {"step", std::to_string(w[kStateErrorStep])},
                                         {"detail", format_template(detail, values)}});
}

std::string error_message(const Header& h, const int32_t* w, const Tile* tiles, const Weight* table) {
  const int32_t tile = w[kStateErrorTile];
  if (tiles == nullptr || tile < 0 || tile >= h.num_tiles) return error_message(w, nullptr);
  const std::string name = tile_name(h, tiles[tile], table);
  return error_message(w, &name);
}

}  // namespace tiles
