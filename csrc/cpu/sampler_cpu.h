// The CPU reference sampler: one logits row to one token, the recipe of planner/format.py ("Sampling") over the
// whole vocabulary, on csrc/sampler_math.h's arithmetic (the CUDA kernel's ARGMAX tile runs the same functions on
// the LMHEAD tiles' candidates, which hold every id this keeps).
#pragma once

#include <stdint.h>

#include <string>

namespace tiles {
namespace cpu {

struct RowPick {
  int64_t token = -1;
  int32_t bad = -1;   // BAD_LOGITS: the lowest id with a NaN or +inf score, -1 where no score is above -inf
  bool ok = false;
};

// The token for absolute position `position` from logits[0..vocab), with the sampler tensor's header words
// `settings` and its seen bitmap `seen`. kept (nullable, vocab bytes): 1 for the ids of the final kept set, in both
// modes. Does not set the token's seen bit.
RowPick pick_from_row(const float* logits, int32_t vocab, const int32_t* settings, const int32_t* seen,
                      int64_t position, uint8_t* kept);

// Why the sampler header's settings are outside what the executors define (empty: they are fine): the Python
// builder (tiles_ext.sampling) refuses the same settings by name before any launch.
std::string settings_problem(const int32_t* settings, int32_t vocab);

// Sets id's bit in the seen bitmap.
inline void mark_seen(int32_t* seen, int64_t id) {
  reinterpret_cast<uint32_t*>(seen)[id >> 5] |= 1u << (id & 31);
}

// "NAME (meaning): detail" of a sampler error code with its seen / wanted words, from the generated texts
// (planner/format.py), for the sample_logits ops (decode_step reports through the state's error words).
std::string sampler_error_text(int32_t code, int32_t seen, int32_t wanted);

// The LM tile count of a sampler tensor of `numel` words for a vocabulary of `vocab` (its size is
// sampler_words(vocab, lm_tiles)), or -1 where no lm_tiles >= 1 gives that size.
int64_t sampler_lm_tiles(int64_t numel, int64_t vocab);

}  // namespace cpu
}  // namespace tiles
