"""Greedy prompt lookup with the drafting inside the op: generate()'s decoding loop for greedy
`prompt_lookup_num_tokens=k` (generate's `custom_generate` hook, as fast_greedy.FastGreedy), launches of
tiles::prompt_lookup that each run up to MAX_LOOKUP_TOKENS accepted tokens with no host round trip between rounds.

Transformers' own prompt-lookup loop (`_assisted_decoding` with PromptLookupCandidateGenerator) runs a round per
forward call: draft by n-gram match over the sequence, score the last accepted token and the draft, keep the longest
matching prefix and the bonus token. Its first round drafts from the prompt alone and scores the prompt together
with the draft. Here the prefill is generate's own (PyTorch), whose last logits give the first token exactly as plain
greedy takes it; the first round's draft (drafted from the prompt by `find_draft`, the same rule) is verified on the
host by one R-row pass of the op (TileDecoder.verify) where its first token is that prefill token; every later round
runs inside the op (planner/format.py "Prompt lookup"). So the rounds are Transformers' rounds, one pass each, and the
tokens are plain greedy's of the patched model: every position the prefill did not compute comes from op rows that
are bit-identical to one-row steps.

What this loop cannot reproduce (scores or logits in the output, logits processors, other stopping criteria, a
cache already holding tokens) goes to Transformers' `_assisted_decoding`, which verifies each round on the op
(assisted.py); `lookup_problem` names the reason, kept in PatchState.lookup_fallback.
"""
from __future__ import annotations

import torch

from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.fast_greedy import FastGreedy
from tiles_ext.planner import format as fmt

DEFAULT_NGRAM = 2  # Transformers' max_matching_ngram_size when the config leaves it None


def find_draft(history: list[int], ngram: int, k: int, eos_ids=(), max_length: int | None = None) -> list[int]:
    """Transformers' PromptLookupCandidateGenerator.get_candidates for greedy decoding without logits processors
    (csrc/lookup_rule.h find_draft is the op's copy): the continuation of the first match (ascending) of the longest
    n-gram ending the history that has one, up to k tokens inside the history, cut before its first EOS id; [] where
    there is none, or where max_length leaves room for the bonus token alone."""
    n = len(history)
    if max_length is not None and max_length == n + 1:
        return []
    eos = set(eos_ids)
    for g in range(min(ngram, n - 1), 0, -1):
        tail = history[n - g:]
        for idx in range(n - g + 1):
            start = idx + g
            end = min(start + k, n)
            if start < end and history[idx:start] == tail:
                draft = history[start:end]
                return draft[:next((i for i, t in enumerate(draft) if t in eos), len(draft))]
    return []


def accept(draft: list[int], picks: list[int], eos_ids=(), room: int | None = None) -> list[int]:
    """The tokens a round accepts from its pass's picks (picks[i]: the token after row i; one more than the draft):
    the draft's matched prefix and the bonus token, at most `room`, cut after the first EOS id."""
    j = 0
    while j < len(draft) and draft[j] == picks[j]:
        j += 1
    kept = picks[:j + 1][:room]
    eos = set(eos_ids)
    return kept[:next((i + 1 for i, t in enumerate(kept) if t in eos), len(kept))]


def lookup_problem(state, generation_config, logits_processor) -> str | None:
    """Why greedy prompt lookup cannot run in the op for this call (None: it can)."""
    k = generation_config.prompt_lookup_num_tokens
    rows = state.decoder.runtime.max_rows
    if k is None or generation_config.do_sample:
        return "not greedy prompt lookup"
    if not state.decoder.runtime.lookup_in_op:
        return f"this plan on {state.decoder.device} (its rows kernels do not run prompt lookup)"
    if k > rows - 1:
        return f"prompt_lookup_num_tokens={k} (a round's pass holds at most {rows - 1} draft tokens here)"
    ngram = generation_config.max_matching_ngram_size or DEFAULT_NGRAM
    if ngram > fmt.MAX_LOOKUP_NGRAM:
        return f"max_matching_ngram_size={ngram} (the op matches n-grams of at most {fmt.MAX_LOOKUP_NGRAM})"
    if len(logits_processor or ()):
        return "logits processors (the op's acceptance takes the raw argmax)"
    if generation_config.return_dict_in_generate and (generation_config.output_scores
                                                      or generation_config.output_logits):
        return "output_scores / output_logits (the op returns tokens only)"
    return None


class FastLookup(FastGreedy):
    """A generate() decoding method for greedy prompt lookup (same signature as GenerationMixin._sample)."""

    def __call__(self, model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                 synced_gpus=False, streamer=None, **model_kwargs):
        streamer = streamer if streamer is not None else self.streamer
        problem = lookup_problem(self.state, generation_config, logits_processor)
        plan = None if problem else self._limits(input_ids, logits_processor, stopping_criteria, generation_config,
                                                 synced_gpus, model_kwargs)
        if plan is not None:
            problem = self._room_problem(model_kwargs[self.state.cache_field], plan[0],
                                         generation_config.prompt_lookup_num_tokens)
            plan = None if problem else plan
        if plan is None:  # Transformers' loop, each round verified on the op (assisted.py)
            self.state.lookup_fallback = problem or ("stopping criteria or a cache this loop does not reproduce "
                                                     "(fast_greedy.FastGreedy._limits)")
            return type(model)._assisted_decoding(model, input_ids, logits_processor=logits_processor,
                                                  stopping_criteria=stopping_criteria,
                                                  generation_config=generation_config, synced_gpus=synced_gpus,
                                                  streamer=streamer, **model_kwargs)
        self.state.lookup_fallback = None
        max_length, eos_ids = plan
        return self._lookup(model, input_ids, generation_config, streamer, max_length, eos_ids, model_kwargs)

    @staticmethod
    def _room_problem(cache, max_length: int, k: int) -> str | None:
        """A cache too small for Transformers' last drafts (a round at length max_length - 2 verifies k draft rows)
        would cut the op's drafts where Transformers' loop raises: that loop runs instead."""
        need = max_length + k - 2
        room = cache.layers[0].max_cache_len
        if room < need:
            return f"a cache of {room} positions (greedy prompt lookup in the op needs max_length + k - 2 = {need})"
        return None

    def _lookup(self, model, input_ids, generation_config, streamer, max_length, eos_ids, model_kwargs):
        decoder = self.state.decoder
        cache = model_kwargs[self.state.cache_field]
        k = generation_config.prompt_lookup_num_tokens
        ngram = generation_config.max_matching_ngram_size or DEFAULT_NGRAM
        outputs = model._prefill(input_ids, generation_config, model_kwargs)
        first = int(torch.argmax(outputs.logits[0, -1].float()))  # as plain greedy takes it
        del outputs
        prompt = input_ids[0].tolist()
        got = self._first_round(prompt, first, cache, k, ngram, eos_ids, max_length)
        self._stream(streamer, got, input_ids.device)
        history = torch.empty(max_length, dtype=torch.long, device=decoder.device)  # n + budget <= max_length
        history[:len(prompt) + len(got)] = torch.tensor(prompt + got, dtype=torch.long)
        n, rounds, eos = len(prompt) + len(got), 1, set(eos_ids)
        while got[-1] not in eos and n < max_length:
            kv.check_room(cache, 1, "the next prompt-lookup round")
            got, r = decoder.lookup(history, n, cache, k, min(fmt.MAX_LOOKUP_TOKENS, max_length - n), eos_ids, ngram)
            if not got:
                decoder.check_error()
                raise RuntimeError("tiles::prompt_lookup accepted no token and reported no error")
            self._stream(streamer, got, input_ids.device)
            n, rounds = n + len(got), rounds + r
        self.state.lookup_rounds = rounds
        sequences = history[:n].view(1, -1).to(device=input_ids.device, dtype=input_ids.dtype)
        if streamer is not None:
            streamer.end()
        if not generation_config.return_dict_in_generate:
            return sequences
        from transformers.generation.utils import GenerateDecoderOnlyOutput
        return GenerateDecoderOnlyOutput(sequences=sequences, scores=None, logits=None, attentions=None,
                                         hidden_states=None, **{self.state.cache_field: cache})

    def _first_round(self, prompt, first, cache, k, ngram, eos_ids, max_length) -> list[int]:
        """Transformers' first round: the draft from the prompt, checked against the prefill's token and, where that
        matches, verified by one R-row pass of the op at the positions after the prompt. The cache ends holding
        every accepted token but the last."""
        length = len(prompt)
        draft = find_draft(prompt, ngram, k, eos_ids, max_length)
        picks = [first]
        if draft and draft[0] == first:
            logits = self.state.decoder.verify(torch.tensor(draft, device=self.state.decoder.device), cache)
            picks += torch.argmax(logits, dim=-1).tolist()
        got = accept(draft, picks, eos_ids, max_length - length)
        kv.set_length(cache, length + len(got) - 1)
        return got
