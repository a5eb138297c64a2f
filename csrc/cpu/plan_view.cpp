// Structural check of a plan blob (see plan_view.h). Runs once per launch; cost is linear in the blob.
// The steps, in order: the header and the sections, the weight table, the buffers, the worker lists, then every
// tile against the op it runs (its waits, and the buffers, weights and fields that op reads).
#include "cpu/plan_view.h"

#include <cstring>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "plan_names.h"

namespace tiles {
namespace cpu {

namespace {

int64_t dtype_bytes(int32_t dt) { return dt == kDTypeBf16 ? 2 : 4; }

std::string slot_name(int32_t slot) {
  return slot >= 0 && slot < kNumSlots ? kSlotNames[slot] : c10::str("slot ", slot);
}

// The weight table is the header's layout and shapes, entry by entry: the tile checks below then read shapes from
// the table alone.
void check_weight_table(const PlanView& p) {
  const Header& h = p.h;
  for (int64_t w = 0; w < h.num_weights; ++w) {
    int32_t slot = -1, layer = -1;
    int64_t r = -1, c = -1;
    if (weight_entry(h, w, &slot, &layer)) slot_shape(h, slot, &r, &c);
    const Weight& e = p.weights[w];
    TORCH_CHECK(e.slot == slot && e.layer == layer && e.rows == r && e.cols == c, "tiles::decode_step: bad plan: "
                "weight table entry ", w, " = (slot ", e.slot, ", layer ", e.layer, ", ", e.rows, " x ", e.cols,
                ") disagrees with the header (slot ", slot, ", layer ", layer, ", ", r, " x ", c, ")");
  }
}

void check_buffers(const PlanView& p) {
  const Header& h = p.h;
  for (int64_t b = 0; b < h.num_buffers; ++b) {
    const Buffer& buf = p.buffers[b];
    TORCH_CHECK(buf.dtype == kDTypeF32 || buf.dtype == kDTypeBf16 || buf.dtype == kDTypeI32,
                "tiles::decode_step: bad plan: buffer ", b, " has unknown dtype ", buf.dtype);
    TORCH_CHECK(buf.offset_bytes >= 0 && buf.offset_bytes % 4 == 0 && buf.numel >= 0 &&
                    int64_t(buf.offset_bytes) + buf.numel * dtype_bytes(buf.dtype) <= h.row_bytes,
                "tiles::decode_step: bad plan: buffer ", b, " (offset ", buf.offset_bytes, ", ", buf.numel,
                " elements) does not fit the ", h.row_bytes, "-byte row of the scratch arena");
  }
}

// The tiles before and after each tile on its worker (-1: none).
struct Neighbours {
  std::vector<int32_t> next, prev;
};

// Every tile belongs to exactly one worker. Returns each tile's neighbours on its worker: an ATTN tile's
// out_offset 1 promises its MERGE comes next, and the kernel then skips the partials at short context and that
// MERGE (aux1 = 1 + the ATTN tile's counter) releases the ATTN tile's counter too: a false promise would be a
// wrong answer or a stray increment, so the tile checks hold each promise against these lists.
Neighbours check_worker_lists(const PlanView& p) {
  const Header& h = p.h;
  TORCH_CHECK(p.worker_offsets[0] == 0 && p.worker_offsets[h.num_workers] == h.num_tiles,
              "tiles::decode_step: bad plan: worker_offsets must run from 0 to num_tiles");
  std::vector<char> seen(h.num_tiles, 0);
  for (int64_t w = 0; w < h.num_workers; ++w) {
    TORCH_CHECK(p.worker_offsets[w] <= p.worker_offsets[w + 1], "tiles::decode_step: bad plan: worker_offsets "
                "decrease at worker ", w);
  }
  for (int64_t k = 0; k < h.num_tiles; ++k) {
    const int32_t t = p.worker_tiles[k];
    TORCH_CHECK(t >= 0 && t < h.num_tiles && !seen[t], "tiles::decode_step: bad plan: worker_tiles[", k, "] = ", t,
                " is out of range or listed twice (every tile must belong to exactly one worker)");
    seen[t] = 1;
  }
  Neighbours n{std::vector<int32_t>(h.num_tiles, -1), std::vector<int32_t>(h.num_tiles, -1)};
  for (int64_t w = 0; w < h.num_workers; ++w)
    for (int32_t k = p.worker_offsets[w]; k + 1 < p.worker_offsets[w + 1]; ++k) {
      n.next[p.worker_tiles[k]] = p.worker_tiles[k + 1];
      n.prev[p.worker_tiles[k + 1]] = p.worker_tiles[k];
    }
  return n;
}

// The checks of one tile: the primitives (a buffer, a matrix, a vector, the rows, the layer) and one function per
// op naming what that op reads and writes (planner/format.py).
struct TileChecker {
  const PlanView& p;
  const Neighbours& nb;
  int64_t i;
  const Tile& t;

  // Model sizes the ops' buffers are made of.
  int64_t hd() const { return p.h.head_dim; }
  int64_t group() const { return p.h.num_heads / p.h.num_kv_heads; }
  int64_t q_width() const { return int64_t(p.h.num_heads) * p.h.head_dim; }
  int64_t kv_width() const { return int64_t(p.h.num_kv_heads) * p.h.head_dim; }
  int64_t partials() const { return int64_t(p.h.num_kv_heads) * p.h.attn_partitions * group() * (hd() + 2); }
  int64_t rows_n() const { return int64_t(t.row_end) - t.row_begin; }

  void fail_if(bool bad, const char* what) const {
    TORCH_CHECK(!bad, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op), ", layer ", t.layer, "): ",
                what);
  }
  // Buffer `b` exists, has dtype `dt` and at least `need` elements.
  void buffer(int32_t b, int32_t dt, int64_t need, const char* field) const {
    TORCH_CHECK(b >= 0 && b < p.h.num_buffers, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op),
                ") ", field, " = ", b, " is not a buffer id [0, ", p.h.num_buffers, ")");
    const Buffer& buf = p.buffers[b];
    TORCH_CHECK(buf.dtype == dt && buf.numel >= need, "tiles::decode_step: bad plan: tile ", i, " (",
                op_name(t.op), ") ", field, " = buffer ", b, " has dtype ", buf.dtype, " and ", buf.numel,
                " elements, the op needs dtype ", dt, " and at least ", need);
  }
  // Weight `w` is a matrix with `cols` columns and at least `rows` rows.
  void matrix(int32_t w, int64_t rows, int64_t cols, const char* field) const {
    TORCH_CHECK(w >= 0 && w < p.h.num_weights, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op), ") ",
                field, " = ", w, " is not a weight index [0, ", p.h.num_weights, ")");
    const Weight& e = p.weights[w];
    TORCH_CHECK(e.cols == cols && e.rows >= rows, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op),
                ") ", field, " = weight ", w, " is [", e.rows, ", ", e.cols, "], the tile needs ", cols,
                " columns and ", rows, " rows");
  }
  void vector(int32_t w, int64_t n, const char* field) const {
    TORCH_CHECK(w >= 0 && w < p.h.num_weights, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op), ") ",
                field, " = ", w, " is not a weight index");
    const Weight& e = p.weights[w];
    TORCH_CHECK(e.cols == 0 && e.rows == n, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op), ") ",
                field, " = weight ", w, " is not a norm vector of ", n, " elements");
  }
  // Weight `w` is the `slot` vector of this tile's layer, of `n` elements.
  void layer_vector(int32_t w, int32_t slot, int64_t n, const char* field) const {
    TORCH_CHECK(w >= 0 && w < p.h.num_weights, "tiles::decode_step: bad plan: tile ", i, " (", op_name(t.op), ") ",
                field, " = ", w, " is not a weight index [0, ", p.h.num_weights, ")");
    const Weight& e = p.weights[w];
    TORCH_CHECK(e.slot == slot && e.layer == t.layer && e.cols == 0 && e.rows == n, "tiles::decode_step: bad plan: "
                "tile ", i, " (", op_name(t.op), ", layer ", t.layer, ") ", field, " = weight ", w, " is ",
                slot_name(e.slot), " of layer ", e.layer, " [", e.rows, ", ", e.cols, "], the tile needs ",
                slot_name(slot), " of its layer, a vector of ", n, " elements");
  }
  void rows() const { fail_if(t.row_begin < 0 || t.row_end <= t.row_begin, "empty or negative row range"); }
  void layer() const { fail_if(t.layer < 0 || t.layer >= p.h.num_layers, "layer out of range"); }

  void waits_and_signal() const {
    fail_if(t.wait_count < 0 || t.wait_begin < 0 || int64_t(t.wait_begin) + t.wait_count > p.h.num_waits,
            "wait records out of range");
    for (int32_t k = 0; k < t.wait_count; ++k) {
      const Wait& wt = p.waits[t.wait_begin + k];
      fail_if(wt.counter < 0 || wt.counter >= p.h.num_counters, "waits on a counter out of range");
      fail_if(wt.count < 1, "waits for fewer than one arrival per step");
      fail_if(wt.step_offset != 0 && wt.step_offset != -1, "wait step_offset is not 0 or -1");
    }
    fail_if(t.signal < 0 || t.signal >= p.h.num_counters, "signal counter out of range");
  }

  void embed() const {
    matrix(t.weight, p.h.vocab, p.h.hidden, "weight");
    buffer(t.out_buf, kDTypeF32, p.h.hidden, "out_buf");
  }
  // QKV and GATEUP: the same normed-input matvec; GATEUP streams the up rows beside the gate rows.
  void normed_matvec() const {
    rows(); layer();
    matrix(t.weight, t.row_end, p.h.hidden, t.op == kOpGateup ? "weight (gate)" : "weight");
    if (t.op == kOpGateup) matrix(t.weight2, t.row_end, p.h.hidden, "weight2 (up)");
    vector(t.norm, p.h.hidden, "norm");
    buffer(t.in_buf, kDTypeF32, p.h.hidden, "in_buf");
    fail_if(t.out_offset < 0, "negative out_offset");
    buffer(t.out_buf, kDTypeBf16, int64_t(t.out_offset) + rows_n(), "out_buf");
  }
  // QKV weight2: -1, or the bias vector of the weight's q/k/v rows (q_bias for q, ...), of the same layer.
  void qkv_bias() const {
    if (t.weight2 == -1) return;
    const Weight& w = p.weights[t.weight];
    const int32_t slot = w.slot == kSlotQ ? kSlotQBias : w.slot == kSlotK ? kSlotKBias
                       : w.slot == kSlotV ? kSlotVBias : -1;
    fail_if(slot < 0, "weight2 (bias) is set, but the weight is not a q, k or v projection");
    layer_vector(t.weight2, slot, w.rows, "weight2 (bias)");
  }
  void qkv() const {
    normed_matvec();
    qkv_bias();
  }
  // ATTN norm / weight2: -1, or the per-head RMSNorm weight of q / of k (q_norm / k_norm of the tile's layer).
  void attn_norms() const {
    if (t.norm != -1) layer_vector(t.norm, kSlotQNorm, hd(), "norm (q_norm)");
    if (t.weight2 != -1) layer_vector(t.weight2, kSlotKNorm, hd(), "weight2 (k_norm)");
  }
  void attn() const {
    layer();
    fail_if(t.aux0 < 0 || t.aux0 >= p.h.num_kv_heads, "kv head (aux0) out of range");
    fail_if(t.aux1 < 0 || t.aux1 >= p.h.attn_partitions, "partition (aux1) out of range");
    buffer(t.in_buf, kDTypeBf16, q_width(), "in_buf (Q)");
    buffer(t.in2_buf, kDTypeBf16, kv_width(), "in2_buf (K_new)");
    buffer(t.in3_buf, kDTypeBf16, kv_width(), "in3_buf (V_new)");
    buffer(t.out_buf, kDTypeF32, partials(), "out_buf (partials)");
    attn_norms();
    if (t.out_offset != 0) {
      const int32_t j = nb.next[i];
      fail_if(t.out_offset != 1 || t.aux1 != 0 || j < 0 || p.tiles[j].op != kOpMerge || p.tiles[j].layer != t.layer ||
                  p.tiles[j].aux0 != t.aux0 || p.tiles[j].aux1 != t.signal + 1,
              "out_offset (MERGE next) is set, but the tile is not a partition-0 ATTN tile followed on its "
              "worker by the MERGE of its layer and KV head marked with its counter (aux1)");
    }
  }
  void merge() const {
    layer();
    fail_if(t.aux0 < 0 || t.aux0 >= p.h.num_kv_heads, "kv head (aux0) out of range");
    buffer(t.in_buf, kDTypeF32, partials(), "in_buf (partials)");
    buffer(t.out_buf, kDTypeBf16, q_width(), "out_buf");
    if (t.aux1 != 0) {
      const int32_t j = nb.prev[i];
      fail_if(j < 0 || p.tiles[j].op != kOpAttn || p.tiles[j].out_offset != 1 || p.tiles[j].signal != t.aux1 - 1,
              "aux1 (the counter of a marked ATTN tile before it) is set, but the tile before it on its worker "
              "is not that ATTN tile");
    }
  }
  void resid() const {
    rows(); layer();
    fail_if(t.weight < 0 || t.weight >= p.h.num_weights, "weight out of range");
    const int64_t cols = p.weights[t.weight].cols;
    matrix(t.weight, t.row_end, cols, "weight");
    fail_if(cols == 0, "weight is a vector");
    buffer(t.in_buf, kDTypeBf16, cols, "in_buf");
    fail_if(t.out_offset < 0, "negative out_offset");
    buffer(t.in2_buf, kDTypeF32, int64_t(t.out_offset) + rows_n(), "in2_buf (residual)");
    buffer(t.out_buf, kDTypeF32, int64_t(t.out_offset) + rows_n(), "out_buf");
  }
  void lmhead() const {
    rows();
    matrix(t.weight, t.row_end, p.h.hidden, "weight");
    fail_if(t.row_end > p.h.vocab, "rows beyond the vocabulary");
    vector(t.norm, p.h.hidden, "norm");
    buffer(t.in_buf, kDTypeF32, p.h.hidden, "in_buf");
    fail_if(t.aux0 < 0 || t.aux0 >= p.h.lm_tiles, "partial slot (aux0) out of range");
    buffer(t.out_buf, kDTypeF32, 2 * (int64_t(t.aux0) + 1), "out_buf (partials)");
  }
  void argmax() const {
    fail_if(t.aux0 < 1 || t.aux0 > p.h.lm_tiles, "partial count (aux0) outside 1..lm_tiles");
    buffer(t.in_buf, kDTypeF32, 2 * int64_t(t.aux0), "in_buf (partials)");
    fail_if(t.signal != p.h.argmax_counter, "ARGMAX must signal the header's argmax_counter");
  }

  void check() const {
    waits_and_signal();
    switch (t.op) {
      case kOpEmbed: return embed();
      case kOpQkv: return qkv();
      case kOpGateup: return normed_matvec();
      case kOpAttn: return attn();
      case kOpMerge: return merge();
      case kOpResid: return resid();
      case kOpLmhead: return lmhead();
      case kOpArgmax: return argmax();
      default: fail_if(true, "unknown op code");
    }
  }
};

void check_tiles(const PlanView& p, const Neighbours& nb) {
  int argmax_tiles = 0;
  for (int64_t i = 0; i < p.h.num_tiles; ++i) {
    TileChecker{p, nb, i, p.tiles[i]}.check();
    argmax_tiles += p.tiles[i].op == kOpArgmax;
  }
  TORCH_CHECK(argmax_tiles == 1, "tiles::decode_step: bad plan: ", argmax_tiles, " ARGMAX tiles, expected 1");
}

}  // namespace

PlanView plan_sections(const int32_t* blob, int64_t words, const Header& host) {
  TORCH_CHECK(words >= kHeaderWords, "tiles::decode_step: bad plan: ", words, " words, fewer than the header");
  PlanView p;
  std::memcpy(&p.h, blob, sizeof(Header));
  TORCH_CHECK(std::memcmp(&p.h, &host, sizeof(Header)) == 0,
              "tiles::decode_step: the plan tensor's header differs from plan_header (the plan tensor and the "
              "header list come from different plans)");
  const Header& h = p.h;
  TORCH_CHECK(h.total_words == words, "tiles::decode_step: bad plan: total_words ", h.total_words, " but ", words,
              " words given");
  auto section = [&](int32_t off, int64_t n, const char* name) {
    TORCH_CHECK(n >= 0 && off >= kHeaderWords && int64_t(off) + n <= words, "tiles::decode_step: bad plan: ", name,
                " section [", off, ", +", n, ") outside the blob of ", words, " words");
    return blob + off;
  };
  p.buffers = reinterpret_cast<const Buffer*>(section(h.buffers_offset, int64_t(h.num_buffers) * kBufferWords,
                                                      "buffers"));
  p.tiles = reinterpret_cast<const Tile*>(section(h.tiles_offset, int64_t(h.num_tiles) * kTileWords, "tiles"));
  p.waits = reinterpret_cast<const Wait*>(section(h.waits_offset, int64_t(h.num_waits) * kWaitWords, "waits"));
  p.worker_offsets = section(h.worker_offsets_offset, int64_t(h.num_workers) + 1, "worker_offsets");
  p.worker_tiles = section(h.worker_tiles_offset, h.num_tiles, "worker_tiles");
  p.weights = reinterpret_cast<const Weight*>(section(h.weights_offset, int64_t(h.num_weights) * kWeightWords,
                                                      "weights"));
  return p;
}

PlanView view_plan(const int32_t* blob, int64_t words, const Header& host) {
  const PlanView p = plan_sections(blob, words, host);
  check_weight_table(p);
  check_buffers(p);
  const Neighbours nb = check_worker_lists(p);
  check_tiles(p, nb);
  return p;
}

}  // namespace cpu
}  // namespace tiles
