// CPU reference executor of tiles::decode_step: runs a plan tile by tile, simulating the GPU's workers.
//
// Each worker walks its worker_tiles list once per step, like a thread block of the persistent kernel. A tile
// may run when every one of its waits holds under the monotonic epoch rule of planner/format.py; it then adds 1
// to its signal counter. The executor picks which ready worker advances next: round-robin (order_seed = 0) or
// uniformly at random (order_seed > 0). With a correct plan every interleaving gives bit-identical results;
// in random mode the scratch arena is filled with NaN at the start of each step so that a tile that reads a
// buffer before its producer ran (a missing or wrong wait) shows up as NaN or wrong logits. A state where no
// worker can advance is the CPU analogue of the GPU's spin-wait timeout and raises naming the worker and tile.
// A launch of R > 1 input ids is one step of R rows (a verify pass, planner/format.py "Rows"): each tile runs once
// for all of them.
// tiles::prompt_lookup runs its rounds here too (prompt_lookup_cpu): each round's pass is one such R-row step.
// With a sampler tensor the ARGMAX tile picks the step's token with the reference sampler (sampler_cpu.h) from the
// logits row its LMHEAD tiles wrote, and sets its seen bit.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "cpu/plan_view.h"
#include "cpu/sampler_cpu.h"
#include "cpu/tile_ops.h"
#include "lookup_rule.h"
#include "op_checks.h"
#include "plan_names.h"

namespace tiles {
namespace cpu {

namespace {

// "tile 12 (L0.attn[h0 p0])": the tile as every message names it (plan_names.h).
std::string tile_where(const PlanView& p, int32_t ti) {
  return format_template(kTileWhere, {{"tile", std::to_string(ti)}, {"tile_name", tile_name(p.h, p.tiles[ti],
                                                                                               p.weights)}});
}

struct Worker {
  int64_t begin, end;  // its slice of worker_tiles
  int64_t pc;          // next entry in the slice
  int64_t step;        // step of the next tile
};

// What one launch is asked to do, beside the plan and the tensors LaunchIO points at.
struct LaunchArgs {
  int64_t num_steps, rows, position;
  const int64_t* input_tokens;  // [rows]
  const float* inv_freq;
  float rope_scale;
  c10::IntArrayRef eos_ids;
  float* logits;
  int64_t* tokens;
  uint64_t order_seed;
  int64_t scratch_bytes;
  int32_t* sampler;  // the sampler tensor's words, or null: the ARGMAX tiles take the argmax of the raw logits
};

class Executor {
 public:
  Executor(const PlanView& plan, const LaunchIO& io, int32_t* state, const LaunchArgs& a)
      : p_(plan), io_(io), state_(state), num_steps_(a.num_steps), rows_(a.rows), position_(a.position),
        input_tokens_(a.input_tokens), eos_(a.eos_ids.begin(), a.eos_ids.end()), logits_(a.logits), tokens_(a.tokens),
        seed_(a.order_seed), scratch_bytes_(a.scratch_bytes), sampler_(a.sampler), rng_(a.order_seed) {
    epoch0_ = uint32_t(state_[kStateEpoch]);
    rope_tables(a.inv_freq, a.rope_scale);
    for (int64_t w = 0; w < p_.h.num_workers; ++w) {
      workers_.push_back({p_.worker_offsets[w], p_.worker_offsets[w + 1], p_.worker_offsets[w], 0});
    }
  }

  // Advances ready workers one tile at a time until every worker has run its steps; raises on a deadlock.
  int64_t run() {
    int64_t cursor = 0;
    const int64_t W = int64_t(workers_.size());
    while (true) {
      bool any_active = false;
      const int64_t pick = pick_worker(cursor, &any_active);
      if (!any_active) break;
      if (pick < 0) fail_stuck();
      advance(pick);
      cursor = (pick + 1) % W;
    }
    return stop_after_ + 1;
  }

 private:
  // cos/sin(float(pos) * inv_freq[i]) * rope_scale for every position the launch decodes (docs/numerics.md): step s
  // row i is at position + s + i (several steps have one row each, several rows make one step).
  void rope_tables(const float* inv_freq, float rope_scale) {
    const int64_t half = p_.h.head_dim / 2, positions = num_steps_ + rows_ - 1;
    cos_.resize(positions * half);
    sin_.resize(positions * half);
    for (int64_t s = 0; s < positions; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const float ang = float(position_ + s) * inv_freq[i];
        cos_[s * half + i] = std::cos(ang) * rope_scale;
        sin_[s * half + i] = std::sin(ang) * rope_scale;
      }
    }
  }

  uint32_t& counter(int32_t c) {
    return reinterpret_cast<uint32_t*>(state_)[kStateHeaderWords + int64_t(c) * p_.h.counter_stride];
  }

  bool active(int64_t w) const {
    const Worker& k = workers_[w];
    if (k.begin == k.end) return false;
    if (k.step >= num_steps_) return false;
    return stop_after_ < 0 || k.step <= stop_after_;
  }

  // The worker to advance next, or -1 when none is ready. Round-robin looks from the cursor on and stops at the
  // first ready worker; random mode picks uniformly among all ready ones.
  int64_t pick_worker(int64_t cursor, bool* any_active) {
    const int64_t W = int64_t(workers_.size());
    ready_.clear();
    for (int64_t k = 0; k < W; ++k) {
      const int64_t w = seed_ == 0 ? (cursor + k) % W : k;
      if (!active(w)) continue;
      *any_active = true;
      if (!is_ready(w)) continue;
      if (seed_ == 0) return w;
      ready_.push_back(w);
    }
    if (ready_.empty()) return -1;
    return ready_[std::uniform_int_distribution<int64_t>(0, int64_t(ready_.size()) - 1)(rng_)];
  }

  // format.py: wait until (int32)(counter - (e + step_offset) * count) >= 0 with e = epoch0 + step + 1.
  bool wait_holds(const Wait& wt, int64_t step, uint32_t* seen, uint32_t* wanted) {
    const uint32_t e = epoch0_ + uint32_t(step) + 1u;
    const uint32_t want = (e + uint32_t(wt.step_offset)) * uint32_t(wt.count);
    const uint32_t have = counter(wt.counter);
    if (seen) *seen = have, *wanted = want;
    return int32_t(have - want) >= 0;
  }

  bool is_ready(int64_t w) {
    const Worker& k = workers_[w];
    const Tile& t = p_.tiles[p_.worker_tiles[k.pc]];
    for (int32_t i = 0; i < t.wait_count; ++i) {
      if (!wait_holds(p_.waits[t.wait_begin + i], k.step, nullptr, nullptr)) return false;
    }
    return true;
  }

  // The first tile of step s poisons the scratch arena in random mode (all-ones bits: NaN in f32 and bf16), so a
  // tile that reads before its producer ran shows up.
  void begin_step(int64_t s) {
    if (s <= started_step_) return;
    started_step_ = s;
    if (seed_ != 0) std::memset(io_.scratch, 0xFF, scratch_bytes_);
  }

  StepIO step_io(int64_t s) {
    StepIO st;
    st.step = s;
    st.rows = rows_;
    st.pos = position_ + s;
    st.tokens = s == 0 ? input_tokens_ : tokens_ + (s - 1);  // several steps: one row each
    const int64_t half = p_.h.head_dim / 2;
    st.cos = cos_.data() + s * half;
    st.sin = sin_.data() + s * half;
    st.logits = logits_ + s * rows_ * p_.h.vocab;
    picked_.assign(rows_, -1);
    st.picked = picked_.data();
    return st;
  }

  void advance(int64_t w) {
    Worker& k = workers_[w];
    const int32_t ti = p_.worker_tiles[k.pc];
    const Tile& t = p_.tiles[ti];
    const int64_t s = k.step;
    begin_step(s);
    const StepIO st = step_io(s);
    if (t.op == kOpEmbed) check_embed_tokens(w, ti, st);
    if (t.op == kOpArgmax && sampler_ != nullptr) {
      st.picked[0] = sample_token(w, ti, st);  // a sampler serves one-row steps only (decode_step_cpu)
    } else {
      run_tile(io_, st, t);
    }
    if (t.op == kOpArgmax) finish_argmax(w, ti, st);
    counter(t.signal) += 1u;
    if (++k.pc == k.end) {
      k.pc = k.begin;
      ++k.step;
    }
  }

  void check_embed_tokens(int64_t w, int32_t ti, const StepIO& st) {
    for (int64_t i = 0; i < st.rows; ++i) {
      const int64_t token = st.tokens[i];
      if (token >= 0 && token < p_.h.vocab) continue;
      set_error(kErrorBadToken, w, ti, st.step, -1, uint32_t(token), uint32_t(p_.h.vocab));
      TORCH_CHECK(false, "tiles::decode_step: worker ", w, " ", tile_where(p_, ti), " at step ", st.step,
                  " embeds token ", token, ", outside the vocabulary [0, ", p_.h.vocab, ") (the previous step's "
                  "ARGMAX had not run: the plan is missing a dependency)");
    }
  }

  // With a sampler, the ARGMAX tile's token: the sampler's pick from the step's logits row (every LMHEAD tile of the
  // step wrote its rows before this tile could run), its seen bit set for the later steps. NaN / +inf scores, or none
  // above -inf, raise BAD_LOGITS naming the step; nothing is drawn from them.
  int64_t sample_token(int64_t w, int32_t ti, const StepIO& st) {
    int32_t* seen = sampler_ + sampler_seen_offset(p_.h.lm_tiles);
    const int64_t position = st.pos + 1;  // the token's index in the sequence
    const RowPick r = pick_from_row(st.logits, p_.h.vocab, sampler_, seen, position, nullptr);
    if (!r.ok) {
      set_error(kErrorBadLogits, w, ti, st.step, -1, uint32_t(r.bad), uint32_t(position));
      TORCH_CHECK(false, "tiles::decode_step: ", error_message(p_.h, state_, p_.tiles, p_.weights));
    }
    mark_seen(seen, r.token);
    return r.token;
  }

  // The step's tokens (one per row); the launch's last ARGMAX (an EOS id, or the last step) publishes the steps
  // done, and the epoch advances by them (monotonic, never reset).
  void finish_argmax(int64_t w, int32_t ti, const StepIO& st) {
    const int64_t s = st.step;
    for (int64_t i = 0; i < st.rows; ++i) {
      const int64_t tok = st.picked[i];
      if (tok < 0 || tok >= p_.h.vocab) {
        set_error(kErrorBadToken, w, ti, s, -1, uint32_t(tok), uint32_t(p_.h.vocab));
        TORCH_CHECK(false, "tiles::decode_step: worker ", w, " ", tile_where(p_, ti), " at step ", s,
                    " produced token ", tok, " outside the vocabulary (LM head partials were not written: the plan "
                    "is missing a dependency)");
      }
      tokens_[s * st.rows + i] = tok;
    }
    bool eos = false;
    for (int64_t e : eos_) eos |= e == tokens_[s];  // one-row steps; a pass of several rows is the only step
    if (eos || s + 1 == num_steps_) {
      stop_after_ = s;
      state_[kStateStepsDone] = int32_t(s + 1);
      state_[kStateEpoch] = int32_t(epoch0_ + uint32_t(s + 1));
    }
  }

  void set_error(int32_t code, int64_t w, int32_t ti, int64_t s, int32_t c, uint32_t seen, uint32_t wanted) {
    state_[kStateError] = code;
    state_[kStateErrorWorker] = int32_t(w);
    state_[kStateErrorTile] = ti;
    state_[kStateErrorStep] = int32_t(s);
    state_[kStateErrorCounter] = c;
    state_[kStateErrorSeen] = int32_t(seen);
    state_[kStateErrorWanted] = int32_t(wanted);
  }

  // Every active worker is blocked: the most upstream one (earliest step, then lowest tile index: the planner
  // numbers tiles in stage order), since the others usually wait on it transitively. Also counts the blocked.
  int64_t most_upstream_blocked(int64_t* blocked) const {
    int64_t best = -1;
    *blocked = 0;
    for (int64_t w = 0; w < int64_t(workers_.size()); ++w) {
      if (!active(w)) continue;
      ++*blocked;
      const Worker& k = workers_[w];
      if (best < 0 || k.step < workers_[best].step ||
          (k.step == workers_[best].step && p_.worker_tiles[k.pc] < p_.worker_tiles[workers_[best].pc])) {
        best = w;
      }
    }
    return best;
  }

  [[noreturn]] void fail_stuck() {
    int64_t blocked = 0;
    const int64_t best = most_upstream_blocked(&blocked);
    TORCH_CHECK(best >= 0, "tiles::decode_step: internal error: no worker ready but none blocked");
    const Worker& k = workers_[best];
    const int32_t ti = p_.worker_tiles[k.pc];
    const Tile& t = p_.tiles[ti];
    for (int32_t i = 0; i < t.wait_count; ++i) {
      const Wait& wt = p_.waits[t.wait_begin + i];
      uint32_t seen, wanted;
      if (!wait_holds(wt, k.step, &seen, &wanted)) {
        set_error(kErrorWaitTimeout, best, ti, k.step, wt.counter, seen, wanted);
        TORCH_CHECK(false, "tiles::decode_step: plan deadlock: worker ", best, " waits forever at ",
                    tile_where(p_, ti), ", step ", k.step, ": counter ", wt.counter, " is ", seen, ", needs ", wanted,
                    " (", wt.count, " arrivals per step, step_offset ", wt.step_offset, "); ", blocked,
                    " workers blocked, none can advance. The plan's waits cannot be satisfied.");
      }
    }
    TORCH_CHECK(false, "tiles::decode_step: internal error: blocked worker ", best, " has no unsatisfied wait");
  }

  const PlanView& p_;
  const LaunchIO& io_;
  int32_t* state_;
  int64_t num_steps_, rows_, position_;
  const int64_t* input_tokens_;
  std::vector<int64_t> eos_;
  float* logits_;
  int64_t* tokens_;
  uint64_t seed_;
  int64_t scratch_bytes_;
  int32_t* sampler_;
  std::mt19937_64 rng_;
  uint32_t epoch0_ = 0;
  std::vector<float> cos_, sin_;
  std::vector<Worker> workers_;
  std::vector<int64_t> ready_;
  std::vector<int64_t> picked_;  // the current tile's step: its ARGMAX tokens
  int64_t stop_after_ = -1;
  int64_t started_step_ = -1;
};

// What a launch checks before it runs a tile: a state without an earlier error (its counters would be
// inconsistent), a position and the positions it writes (steps, or the rows of a pass) that fit the cache, and
// input tokens inside the vocabulary.
void check_launch(const PlanView& view, const int32_t* st, int64_t pos, const int64_t* tokens, int64_t rows,
                  int64_t num_steps, int64_t max_len) {
  const Header& h = view.h;
  TORCH_CHECK(st[kStateError] == kErrorOk, "tiles::decode_step: the state tensor holds an error from an earlier "
              "launch, so its counters are inconsistent: make a new state (a new TileRuntime). ",
              error_message(h, st, view.tiles, view.weights));
  TORCH_CHECK(pos >= 0, "tiles::decode_step: position ", pos, " is negative");
  const int64_t span = num_steps + rows - 1;
  TORCH_CHECK(pos + span <= max_len, "tiles::decode_step: KV cache full: ",
              rows > 1 ? c10::str("a pass of ", rows, " rows") : c10::str(num_steps, " step(s)"), " from position ",
              pos, " would write cache index ", pos + span - 1, " but max_cache_len is ", max_len,
              rows > 1 ? " (verify a shorter draft, or allocate a larger StaticCache)"
                       : " (allocate a larger StaticCache)");
  for (int64_t i = 0; i < rows; ++i) {
    TORCH_CHECK(tokens[i] >= 0 && tokens[i] < h.vocab, "tiles::decode_step: input token id ", tokens[i],
                rows > 1 ? c10::str(" (row ", i, ")") : std::string(), " is outside the vocabulary [0, ", h.vocab,
                ")");
  }
}

// The raw pointers a launch's tiles read and write (LaunchIO points into these).
struct LaunchPointers {
  std::vector<const uint16_t*> weights;
  std::vector<const float*> scales;  // per weight: its scale tensor (an FP8 matrix), else null
  std::vector<uint16_t*> k_cache, v_cache;

  LaunchPointers(const Header& h, at::TensorList w, at::TensorList k, at::TensorList v)
      : weights(w.size()), scales(w.size(), nullptr), k_cache(k.size()), v_cache(v.size()) {
    for (size_t i = 0; i < w.size(); ++i) weights[i] = reinterpret_cast<const uint16_t*>(w[i].data_ptr());
    for (size_t i = 0; i < w.size() && h.weight_dtype == kDTypeF8e4m3; ++i) {
      int32_t slot, layer;
      if (!weight_entry(h, int64_t(i), &slot, &layer) || kScaleSlotOf[slot] < 0) continue;
      scales[i] = w[weight_index(h, kScaleSlotOf[slot], layer)].data_ptr<float>();
    }
    for (size_t l = 0; l < k.size(); ++l) {
      k_cache[l] = reinterpret_cast<uint16_t*>(k[l].data_ptr());
      v_cache[l] = reinterpret_cast<uint16_t*>(v[l].data_ptr());
    }
  }
};

// What every launch reads and writes besides its arguments: the plan, the scratch arena, the weights and caches.
LaunchIO launch_io(const PlanView& view, const LaunchPointers& ptrs, const at::Tensor& scratch, int64_t max_len) {
  float eps;
  std::memcpy(&eps, &view.h.eps_bits, 4);
  return LaunchIO{&view,          scratch.data_ptr<uint8_t>(), ptrs.weights.data(), ptrs.scales.data(),
                  ptrs.k_cache.data(), ptrs.v_cache.data(),       max_len,             eps};
}

std::tuple<at::Tensor, at::Tensor> decode_step_cpu(const at::Tensor& plan, c10::IntArrayRef plan_header,
                                                   at::TensorList weights, at::TensorList k_cache,
                                                   at::TensorList v_cache, const at::Tensor& scratch,
                                                   const at::Tensor& state, const at::Tensor& input_ids,
                                                   const at::Tensor& position, const at::Tensor& rope_inv_freq,
                                                   double rope_scale, int64_t num_steps, c10::IntArrayRef eos_ids,
                                                   int64_t order_seed, const std::optional<at::Tensor>& sampler) {
  const Header h = header_from_list(plan_header);
  check_decode_step_args(h, plan, weights, k_cache, v_cache, scratch, state, input_ids, position, rope_inv_freq,
                         num_steps, eos_ids, c10::Device(c10::kCPU));
  TORCH_CHECK(order_seed >= 0, "tiles::decode_step: order_seed ", order_seed, " must be >= 0");
  const int64_t rows = pass_rows(input_ids);
  int32_t* sampler_words = nullptr;
  TORCH_CHECK(rows == 1 || !sampler.has_value(), "tiles::decode_step: a pass of ", rows, " rows (a verify pass) "
              "takes no sampler: it returns every row's logits, to which the caller applies its processors");
  if (sampler.has_value()) {
    check_sampler(h, *sampler, c10::Device(c10::kCPU));
    sampler_words = sampler->data_ptr<int32_t>();
    const std::string problem = settings_problem(sampler_words, h.vocab);
    TORCH_CHECK(problem.empty(), "tiles::decode_step: the sampler's settings are invalid: ", problem);
  }
  const PlanView view = view_plan(plan.data_ptr<int32_t>(), plan.numel(), h);
  int32_t* st = state.data_ptr<int32_t>();
  const int64_t pos = position.item<int64_t>();
  const int64_t* input_tokens = input_ids.data_ptr<int64_t>();
  const int64_t max_len = max_cache_len(k_cache);
  check_launch(view, st, pos, input_tokens, rows, num_steps, max_len);

  auto logits = at::full({num_steps * rows, h.vocab}, std::numeric_limits<float>::quiet_NaN(),
                         at::TensorOptions().dtype(at::kFloat));
  auto tokens = at::full({num_steps * rows}, -1, at::TensorOptions().dtype(at::kLong));
  const LaunchPointers ptrs(h, weights, k_cache, v_cache);
  const LaunchIO io = launch_io(view, ptrs, scratch, max_len);
  const LaunchArgs args{num_steps, rows, pos, input_tokens, rope_inv_freq.data_ptr<float>(), float(rope_scale), eos_ids,
                        logits.data_ptr<float>(), tokens.data_ptr<int64_t>(), uint64_t(order_seed), h.scratch_bytes,
                        sampler_words};
  Executor(view, io, st, args).run();
  return {logits, tokens};
}

// Every id of history[0, length) inside the vocabulary: the drafts and the first pass's row come from there.
void check_history_tokens(const Header& h, const int64_t* hist, int64_t length) {
  for (int64_t i = 0; i < length; ++i) {
    TORCH_CHECK(hist[i] >= 0 && hist[i] < h.vocab, "tiles::prompt_lookup: history[", i, "] = ", hist[i],
                " is outside the vocabulary [0, ", h.vocab, ")");
  }
}

// One launch of greedy prompt lookup (planner/format.py "Prompt lookup"): the rounds' drafts, fits and acceptance
// by lookup_rule.h, each round's pass one R-row step of the executor.
class LookupLaunch {
 public:
  LookupLaunch(const PlanView& view, const LaunchIO& io, int32_t* state, int64_t* history, int64_t length,
               const float* inv_freq, float rope_scale, c10::IntArrayRef eos_ids, int64_t* tokens)
      : view_(view), io_(io), state_(state), hist_(history), n_(int32_t(length)), inv_freq_(inv_freq),
        rope_scale_(rope_scale), eos_(eos_ids.begin(), eos_ids.end()), tokens_(tokens),
        logits_(size_t(kMaxRows) * view.h.vocab) {}

  // Rounds until the budget, an EOS id or the cache's room ends the launch; returns the rounds run.
  int64_t run(int32_t draft_tokens, int32_t ngram, int32_t budget, int64_t max_len) {
    int64_t rounds = 0;
    for (bool stop = false; !stop; ++rounds) {
      const lookup::Draft d = lookup::find_draft(hist_, n_, ngram, draft_tokens, eos_.data(), num_eos());
      const int32_t m = lookup::fit_draft(d.len, n_, max_len, accepted_, budget);
      if (m < 0) break;
      stop = run_round(d.start, m, max_len);
    }
    return rounds;
  }

 private:
  int32_t num_eos() const { return int32_t(eos_.size()); }

  // The pass of h[n - 1] and the draft h[start, start + m), then its accepted tokens appended to the history and the
  // outputs; true where an EOS id ends the launch.
  bool run_round(int32_t start, int32_t m, int64_t max_len) {
    const int64_t rows = m + 1, pos = n_ - 1;
    ids_[0] = hist_[pos];
    for (int32_t i = 0; i < m; ++i) ids_[1 + i] = hist_[start + i];
    check_launch(view_, state_, pos, ids_, rows, 1, max_len);
    const LaunchArgs args{1, rows, pos, ids_, inv_freq_, rope_scale_, c10::IntArrayRef(), logits_.data(), picks_,
                          0, view_.h.scratch_bytes, nullptr};
    Executor(view_, io_, state_, args).run();
    const int32_t a = lookup::accepted_count(ids_ + 1, picks_, m, eos_.data(), num_eos());
    for (int32_t i = 0; i < a; ++i) {
      hist_[n_ + i] = picks_[i];
      tokens_[accepted_ + i] = picks_[i];
    }
    n_ += a;
    accepted_ += a;
    return lookup::is_eos(picks_[a - 1], eos_.data(), num_eos());
  }

  const PlanView& view_;
  const LaunchIO& io_;
  int32_t* state_;
  int64_t* hist_;
  int32_t n_;
  int32_t accepted_ = 0;
  const float* inv_freq_;
  float rope_scale_;
  std::vector<int32_t> eos_;
  int64_t* tokens_;
  std::vector<float> logits_;  // the pass's logits rows (not returned: the tokens are)
  int64_t ids_[kMaxRows];      // the pass's input ids
  int64_t picks_[kMaxRows];    // its tokens, one per row
};

std::tuple<at::Tensor, at::Tensor> prompt_lookup_cpu(const at::Tensor& plan, c10::IntArrayRef plan_header,
                                                     at::TensorList weights, at::TensorList k_cache,
                                                     at::TensorList v_cache, const at::Tensor& scratch,
                                                     const at::Tensor& state, const at::Tensor& history,
                                                     int64_t length, const at::Tensor& rope_inv_freq,
                                                     double rope_scale, int64_t draft_tokens, int64_t ngram,
                                                     int64_t budget, c10::IntArrayRef eos_ids) {
  const Header h = header_from_list(plan_header);
  check_prompt_lookup_args(h, plan, weights, k_cache, v_cache, scratch, state, history, length, rope_inv_freq,
                           draft_tokens, ngram, budget, eos_ids, c10::Device(c10::kCPU));
  int64_t* hist = history.data_ptr<int64_t>();
  check_history_tokens(h, hist, length);
  const PlanView view = view_plan(plan.data_ptr<int32_t>(), plan.numel(), h);
  const int64_t max_len = max_cache_len(k_cache);
  auto tokens = at::full({budget}, -1, at::TensorOptions().dtype(at::kLong));
  auto rounds = at::zeros({1}, at::TensorOptions().dtype(at::kLong));
  const LaunchPointers ptrs(h, weights, k_cache, v_cache);
  const LaunchIO io = launch_io(view, ptrs, scratch, max_len);
  LookupLaunch launch(view, io, state.data_ptr<int32_t>(), hist, length, rope_inv_freq.data_ptr<float>(),
                      float(rope_scale), eos_ids, tokens.data_ptr<int64_t>());
  rounds[0] = launch.run(int32_t(draft_tokens), int32_t(ngram), int32_t(budget), max_len);
  return {tokens, rounds};
}

}  // namespace

TORCH_LIBRARY_IMPL(tiles, CPU, m) {
  m.impl("decode_step", &decode_step_cpu);
  m.impl("prompt_lookup", &prompt_lookup_cpu);
}

}  // namespace cpu
}  // namespace tiles
