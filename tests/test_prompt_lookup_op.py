"""Greedy prompt lookup inside the op (tiles::prompt_lookup, planner/format.py "Prompt lookup") on the CPU executor.

- generate(prompt_lookup_num_tokens=k) on a patched model runs its rounds in the op (fast_lookup.FastLookup): the
  tokens of plain greedy of the patched model, the unpatched model's greedy tokens (up to BF16 ties), and as many
  rounds as Transformers' own prompt-lookup loop runs forward calls on the same tokens (tiny Llama and Qwen3);
- the op itself: its tokens are the op's one-row greedy steps bit for bit, its rounds those of the drafting rule
  (fast_lookup.find_draft, Transformers' rule) replayed over them, whatever the launch budgets;
- rejected drafts' cache rows are never read (poisoned with NaN / huge values, the same tokens and K/V bits);
- bad arguments are refused before any launch with the fix in the message.
The real SmolLM2-135M-Instruct: tests/test_prompt_lookup_smollm2.py.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from integration_support import CACHE, assert_greedy_match, patched_copy, steps_executed
from integration_support import tiny_config as llama_config
from parity_helpers import family_config, tiny_model
from tiles_ext.integrations import TilesFallbackWarning, patch_state
from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.fast_lookup import accept, find_draft
from tiles_ext.planner.format import StateWord

CASES = {
    "llama": lambda: tiny_model(llama_config(), seed=5),
    "qwen3": lambda: tiny_model(family_config("qwen3", 128, 4, 2, 64, 256, 2, vocab=512), seed=3),
}
BASE = [1, 17, 42, 99, 7, 300, 5, 88, 23]
PROMPT = torch.tensor([BASE * 3 + BASE[:4]])  # copy-heavy: prompt lookup finds drafts
NEW = 40


@pytest.fixture(scope="module", params=list(CASES))
def model(request):
    return CASES[request.param]()


def _greedy(model, prompt, new=NEW, **kw):
    return model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0, **kw)


def transformers_rounds(model, prompt, k, new=NEW):
    """Transformers' own prompt-lookup loop on `model`: its output and its forward calls (one per round)."""
    calls = []
    forward = model.forward

    def counting(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    model.forward = counting
    try:
        out = _greedy(model, prompt, new, prompt_lookup_num_tokens=k)
    finally:
        del model.forward
        if model.forward != forward:  # the patched forward lived in the instance dict
            model.forward = forward
    return out, len(calls)


def replayed_rounds(prompt: list[int], tokens: list[int], k: int, max_length: int, ngram: int = 2) -> int:
    """The rounds the drafting rule takes to accept `tokens` (the greedy continuation) after `prompt`."""
    history, rounds, i = list(prompt), 0, 0
    while i < len(tokens):
        draft = find_draft(history, ngram, k, (), max_length)
        got = accept(draft, tokens[i:i + len(draft) + 1], (), max_length - len(history))
        history += got
        i += len(got)
        rounds += 1
    return rounds


@pytest.mark.parametrize("k", [1, 3, 7])
def test_generate_runs_the_rounds_in_the_op(model, k):
    """Plain greedy's tokens, unpatched greedy's (up to BF16 ties), and Transformers' rounds, with no fallback."""
    main = patched_copy(model)
    plain = _greedy(main, PROMPT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)
        got = _greedy(main, PROMPT, prompt_lookup_num_tokens=k)
    state = patch_state(main)
    assert state.lookup_fallback is None
    assert torch.equal(got, plain)
    assert_greedy_match(model, PROMPT, _greedy(model, PROMPT), got, f"k={k}")
    # Transformers' loop on the same model (patch(multi_token=False): each round verified in one op pass), on the
    # same tokens: one forward call per round.
    loop = patched_copy(model, multi_token=False)
    want, calls = transformers_rounds(loop, PROMPT, k)
    assert torch.equal(want, got)
    assert patch_state(loop).lookup_rounds is None  # that loop was Transformers'
    assert state.lookup_rounds == calls
    assert calls < NEW  # the copy-heavy prompt makes rounds accept several tokens
    ref, ref_calls = transformers_rounds(model, PROMPT, k)  # unpatched: the same rounds where its tokens agree
    if torch.equal(ref, got):
        assert ref_calls == calls


def test_eos_and_max_length_end_the_rounds(model):
    """An EOS id ends generation right after it (the draft never carries one); max_new_tokens caps the last round."""
    main = patched_copy(model)
    plain = _greedy(main, PROMPT)
    new = plain[0, PROMPT.shape[1]:].tolist()
    eos = new[len(new) // 2]
    stop = new.index(eos) + 1
    got = _greedy(main, PROMPT, prompt_lookup_num_tokens=5, eos_token_id=eos)
    assert got[0, PROMPT.shape[1]:].tolist() == new[:stop]
    for n in (1, 2, 9):
        assert torch.equal(_greedy(main, PROMPT, n, prompt_lookup_num_tokens=5), plain[:, :PROMPT.shape[1] + n])


class Launch:
    """A patched model's decoder after a PyTorch prefill of all prompt ids but the last (the op's first round runs
    the last one), with a history tensor."""

    def __init__(self, model, prompt: torch.Tensor, room: int = 160):
        self.main = patched_copy(model)
        self.decoder = patch_state(self.main).decoder
        self.cache = kv.CroppableStaticCache(config=self.main.config, max_cache_len=room)
        with torch.no_grad():
            self.main(prompt[:, :-1], **{CACHE: self.cache})
        self.length = prompt.shape[1]
        self.history = torch.zeros(room + 64, dtype=torch.long)
        self.history[:self.length] = prompt[0]

    def run(self, k, budget, eos=()):
        got, rounds = self.decoder.lookup(self.history, self.length, self.cache, k, budget, eos)
        self.length += len(got)
        return got, rounds

    def one_row_greedy(self, steps):
        """The op's one-row greedy steps from the same state (the reference the rows must match bit for bit)."""
        token, out = self.history[self.length - 1:self.length], []
        for _ in range(steps):
            logits = self.decoder.step(token, self.cache)
            token = torch.argmax(logits, dim=-1)
            out.append(int(token))
        return out


@pytest.mark.parametrize("budgets", [[64], [5, 7, 64], [4, 4, 9, 64], [1, 1, 2, 3, 64]])
def test_the_op_is_one_row_greedy_in_the_drafting_rules_rounds(model, budgets):
    ref = Launch(model, PROMPT).one_row_greedy(NEW)
    op = Launch(model, PROMPT)
    tokens, rounds = [], 0
    for budget in budgets:
        budget = min(budget, NEW - len(tokens))
        if budget < 1:
            break
        got, r = op.run(3, budget)
        assert 1 <= len(got) <= budget
        tokens, rounds = tokens + got, rounds + r
    while len(tokens) < NEW:
        got, r = op.run(3, min(64, NEW - len(tokens)))
        tokens, rounds = tokens + got, rounds + r
    assert tokens == ref
    assert op.history[:op.length].tolist() == PROMPT[0].tolist() + ref
    assert kv.host_length(op.cache) == op.length - 1
    assert int(op.decoder.runtime.state[StateWord.EPOCH]) == rounds  # one pass per round
    if min(budgets) >= 3 + 1:  # every round fits a launch: the drafting rule's rounds, wherever launches end
        assert rounds == replayed_rounds(PROMPT[0].tolist(), ref, 3, 10 ** 6)


def test_an_eos_ends_the_launch(model):
    ref = Launch(model, PROMPT).one_row_greedy(NEW)
    eos = ref[20]
    got, _ = Launch(model, PROMPT).run(5, 64, [eos, 511])
    assert got == ref[:ref.index(eos) + 1]


def test_rejected_rows_are_never_read(model):
    """Cache rows at and beyond the first pass's position poisoned (NaN, then huge values): the same tokens and the
    same K/V bits at every accepted position as an unpoisoned launch, though rounds rejected drafts there."""
    clean, poisoned = Launch(model, PROMPT), Launch(model, PROMPT)
    start = PROMPT.shape[1] - 1
    for layer in poisoned.cache.layers:
        for t in (layer.keys, layer.values):
            t[:, :, start:].fill_(float("nan"))
            t[:, :, start + 5:].fill_(3e38)
    a, ra = clean.run(5, 64)
    b, rb = poisoned.run(5, 64)
    assert a == b and ra == rb
    assert ra < len(a)  # several tokens per round: drafts were verified (and some rejected) in those rows
    end = clean.length - 1
    for x, y in zip(clean.cache.layers, poisoned.cache.layers):
        assert torch.equal(x.keys[:, :, :end].view(torch.int16), y.keys[:, :, :end].view(torch.int16))
        assert torch.equal(x.values[:, :, :end].view(torch.int16), y.values[:, :, :end].view(torch.int16))
    c, _ = poisoned.run(5, 20)  # and the next launch, over the stale rows of the last rejected draft
    d, _ = clean.run(5, 20)
    assert c == d


@pytest.mark.parametrize("args, match", [
    (dict(draft_tokens=8), r"draft_tokens 8 outside 1\.\.7.*prompt_lookup_num_tokens <= 7"),
    (dict(draft_tokens=0), r"draft_tokens 0 outside 1\.\.7"),
    (dict(budget=65), r"budget 65 outside 1\.\.64.*launch again"),
    (dict(budget=0), r"budget 0 outside 1\.\.64"),
    (dict(history=40), r"history holds 40 ids.*at least length \+ budget = 95"),
    (dict(ngram=9), r"ngram 9 outside 1\.\.8"),
    (dict(length=201), r"length 201 outside 1\.\.200"),
    (dict(bad_token=True), r"history\[3\] = 9999 is outside the vocabulary"),
])
def test_bad_arguments_are_refused_before_any_launch(args, match):
    model = tiny_model(llama_config(), seed=5)
    op = Launch(model, PROMPT)
    history = torch.zeros(args.get("history", 200), dtype=torch.long)
    history[:min(op.length, history.numel())] = PROMPT[0, :history.numel()]
    if args.get("bad_token"):
        history[3] = 9999
    rt, keys = op.decoder.runtime, kv.layer_tensors(op.cache)
    with pytest.raises(RuntimeError, match=match):
        rt.prompt_lookup(op.decoder.weights, *keys, history, args.get("length", op.length), op.decoder.inv_freq,
                         op.decoder.rope_scale, args.get("draft_tokens", 3), args.get("budget", 64),
                         ngram=args.get("ngram", 2))
    assert int(rt.state[StateWord.EPOCH]) == 0 and int(rt.state[StateWord.ERROR]) == 0
    assert steps_executed(op.main) == 0


def test_draft_tokens_over_the_plans_rows_fall_back_with_the_reason():
    """k beyond max_rows - 1 keeps Transformers' loop (drafts verified in several passes), and says why."""
    model = tiny_model(llama_config(), seed=5)
    main = patched_copy(model)
    got = _greedy(main, PROMPT, 12, prompt_lookup_num_tokens=12)
    assert "prompt_lookup_num_tokens=12" in patch_state(main).lookup_fallback
    assert torch.equal(got, _greedy(main, PROMPT, 12))


def test_the_drafting_rule_is_transformers():
    """find_draft (the op's rule, in Python) against Transformers' PromptLookupCandidateGenerator itself."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
    gen = torch.Generator().manual_seed(0)
    for trial in range(300):
        n = int(torch.randint(1, 24, (1,), generator=gen))
        ids = torch.randint(0, 4, (n,), generator=gen).tolist()
        k, ngram = int(torch.randint(1, 8, (1,), generator=gen)), int(torch.randint(1, 4, (1,), generator=gen))
        eos = [int(torch.randint(0, 6, (1,), generator=gen))]
        max_length = n + int(torch.randint(1, 4, (1,), generator=gen))
        ref = PromptLookupCandidateGenerator(eos_token_id=torch.tensor(eos), num_output_tokens=k,
                                             max_matching_ngram_size=ngram, max_length=max_length)
        cand, _ = ref.get_candidates(torch.tensor([ids]))
        assert find_draft(ids, ngram, k, eos, max_length) == cand[0, n:].tolist(), (ids, k, ngram, eos, max_length)


def test_opcheck_cpu():
    """Schema (the history, caches, scratch and state it mutates), fake kernel and dispatch of the op."""
    op = Launch(tiny_model(llama_config(), seed=5), PROMPT)
    rt, d = op.decoder.runtime, op.decoder
    keys, values = kv.layer_tensors(op.cache)
    args = (rt.plan_tensor, list(rt.header), d.weights, keys, values, rt.scratch, rt.state, op.history, op.length,
            d.inv_freq, d.rope_scale, 3, 2, 8, [])
    torch.library.opcheck(torch.ops.tiles.prompt_lookup.default, args)


def test_a_streamer_sees_every_token_once(model):
    from transformers.generation.streamers import BaseStreamer

    class Collect(BaseStreamer):
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, value):
            self.puts.append(value.reshape(-1).tolist())

        def end(self):
            self.ended = True

    main = patched_copy(model)
    streamer = Collect()
    got = _greedy(main, PROMPT, prompt_lookup_num_tokens=5, streamer=streamer)
    assert patch_state(main).lookup_fallback is None
    assert streamer.puts[0] == PROMPT[0].tolist()  # generate's own put of the prompt
    assert sum(streamer.puts[1:], []) == got[0, PROMPT.shape[1]:].tolist() and streamer.ended


def test_a_stopping_criterion_it_cannot_reproduce_runs_transformers_loop(model):
    """A caller's StoppingCriteria: Transformers' loop (each round still one op pass), with the reason kept."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class AtLength(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= PROMPT.shape[1] + 12, dtype=torch.bool)

    main = patched_copy(model)
    criteria = StoppingCriteriaList([AtLength()])
    got = _greedy(main, PROMPT, prompt_lookup_num_tokens=5, stopping_criteria=criteria)
    assert "stopping criteria" in patch_state(main).lookup_fallback
    plain = _greedy(main, PROMPT)
    assert PROMPT.shape[1] + 12 <= got.shape[1] < plain.shape[1] and torch.equal(got, plain[:, :got.shape[1]])
