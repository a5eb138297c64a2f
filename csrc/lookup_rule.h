// Greedy prompt lookup's rules (planner/format.py "Prompt lookup"): the draft of a round, its fit into the launch, and
// the tokens a round accepts. One definition that the CPU reference executor and the CUDA rows kernel both compile, so
// that both run the same rounds; the drafting is Transformers' PromptLookupCandidateGenerator for greedy decoding, so
// that the rounds are those of Transformers' own prompt-lookup loop. Plain C++ (no torch, no CUDA headers).
#pragma once

#include <stdint.h>

#include "plan_format.h"

#if defined(__CUDACC__)
#define TILE_LOOKUP_FN __host__ __device__ __forceinline__
#else
#define TILE_LOOKUP_FN inline
#endif

namespace tiles {
namespace lookup {

// A round's draft: history[start, start + len) (len 0: no draft, the pass is the last accepted token alone).
struct Draft {
  int32_t start;
  int32_t len;
};

TILE_LOOKUP_FN bool is_eos(int64_t token, const int32_t* eos, int32_t num_eos) {
  for (int32_t e = 0; e < num_eos; ++e)
    if (token == eos[e]) return true;
  return false;
}

// Whether the g tokens that end the history (h[n - g, n)) occur at h[idx, idx + g).
TILE_LOOKUP_FN bool ngram_at(const int64_t* h, int32_t n, int32_t g, int32_t idx) {
  for (int32_t j = 0; j < g; ++j)
    if (h[idx + j] != h[n - g + j]) return false;
  return true;
}

// The draft a match at idx of a g-gram gives: its continuation of up to k tokens, inside the history; len 0 where the
// match is the history's own end (Transformers then tries the next match).
TILE_LOOKUP_FN Draft continuation(int32_t n, int32_t g, int32_t idx, int32_t k) {
  const int32_t start = idx + g, end = start + k < n ? start + k : n;
  return {start, start < end ? end - start : 0};
}

// The draft cut before its first EOS id: Transformers keeps the target from accepting an EOS id and what follows.
TILE_LOOKUP_FN Draft cut_at_eos(const int64_t* h, Draft d, const int32_t* eos, int32_t num_eos) {
  for (int32_t i = 0; i < d.len; ++i)
    if (is_eos(h[d.start + i], eos, num_eos)) return {d.start, i};
  return d;
}

// The largest n-gram the drafting tries first: min(ngram, n - 1), as Transformers bounds it.
TILE_LOOKUP_FN int32_t first_ngram(int32_t n, int32_t ngram) { return ngram < n - 1 ? ngram : n - 1; }

// The draft of a round over h[0, n): the first match (ascending idx) of the longest n-gram that has a continuation,
// cut at its first EOS id (a draft cut to nothing is no draft: Transformers stops looking there).
TILE_LOOKUP_FN Draft find_draft(const int64_t* h, int32_t n, int32_t ngram, int32_t k, const int32_t* eos,
                                int32_t num_eos) {
  for (int32_t g = first_ngram(n, ngram); g >= 1; --g) {
    for (int32_t idx = 0; idx + g <= n; ++idx) {
      if (!ngram_at(h, n, g, idx)) continue;
      const Draft d = continuation(n, g, idx, k);
      if (d.len > 0) return cut_at_eos(h, d, eos, num_eos);
    }
  }
  return {n, 0};
}

// The draft length the round runs with, or -1 where the launch ends before it: cut to the cache's room (the pass
// writes positions n - 1 .. n - 1 + len); a round that could accept more than the launch's budget has left waits
// for the next launch, except the launch's first, whose draft is cut to budget - 1 (so that rounds do not depend on
// where launches end).
TILE_LOOKUP_FN int32_t fit_draft(int32_t len, int32_t n, int64_t max_cache_len, int32_t accepted, int32_t budget) {
  if (accepted >= budget || n > max_cache_len) return -1;
  if (n + len > max_cache_len) len = static_cast<int32_t>(max_cache_len - n);
  if (accepted + len + 1 > budget) {
    if (accepted > 0) return -1;
    len = budget - 1;
  }
  return len;
}

// Tokens a round accepts from its pass's row tokens t[0 .. len] (t[i]: the argmax after row i) and its draft d[0 ..
// len): the matched prefix of the draft and the bonus token after it, cut after the first EOS id.
TILE_LOOKUP_FN int32_t accepted_count(const int64_t* d, const int64_t* t, int32_t len, const int32_t* eos,
                                      int32_t num_eos) {
  int32_t j = 0;
  while (j < len && d[j] == t[j]) ++j;
  for (int32_t i = 0; i < j; ++i)
    if (is_eos(t[i], eos, num_eos)) return i + 1;
  return j + 1;
}

}  // namespace lookup
}  // namespace tiles
