"""generate() conformance of a patched model, modelled on Transformers' GenerationTesterMixin: greedy, seeded
sampling, static caches, continuing from a cache and from inputs_embeds, return_dict_in_generate outputs, stopping
criteria and torch.compile of the decode step. Tiny Llama configs the op serves (GQA head_dim 64, MHA head_dim 128),
batch 1, patched (per-token path, and the multi-token fast path) against unpatched, on the CPU executor.

What "the same" means (integration_support):
- tokens: greedy tokens equal the unpatched model's, or diverge first where the unpatched top-2 logits are a BF16
  tie (assert_greedy_match);
- logits: each op step is within the unpatched BF16 model's own error against the fp32 model (assert_logits_near_fp32);
  the first new token's logits come from the PyTorch prefill and are the unpatched model's bit for bit;
- caches: the op writes K/V for decode positions that differ from PyTorch's by up to one bf16 step, so a cache
  filled partly by the op and partly by a PyTorch prefill (every continuation) is not the unpatched model's cache.
  The rule: caches are judged against the fp32 model's K/V for the same tokens, within CACHE_REL_FACTOR of the
  unpatched BF16 cache's own error (assert_cache_near_fp32), and a continuation's tokens and logits follow the
  token and logits rules above. Tolerances come from the measured BF16-vs-fp32 error, computed in each test.

The models' LM heads are scaled up (x32) so that greedy picks are decided far beyond BF16 noise, as in a trained
model; random heads give near-ties at almost every step.
"""
from __future__ import annotations

import copy

import pytest
import torch
from transformers import CompileConfig, StaticCache, StoppingCriteria, StoppingCriteriaList

import tiles_ext
from integration_support import (CACHE, assert_cache_near_fp32, assert_greedy_match, assert_logits_near_fp32,
                                 steps_executed, tiny_config)
from tiles_ext.models import random_model

CONFIGS = {
    "gqa-hd64": tiny_config(),
    "mha-hd128": tiny_config(hidden_size=256, intermediate_size=512, num_attention_heads=2, num_key_value_heads=2,
                             head_dim=128),
}
PROMPT = torch.tensor([[1, 17, 42, 99, 7, 300, 12]])
P = PROMPT.shape[1]
NEW = 8


class Models:
    def __init__(self, config, seed):
        self.ref = random_model(config, seed=seed)
        with torch.no_grad():
            self.ref.lm_head.weight.mul_(32.0)
        self.f32 = copy.deepcopy(self.ref).float()
        self.per_token = tiles_ext.patch(copy.deepcopy(self.ref), multi_token=False, plan_cache_dir=False)
        self.fast = tiles_ext.patch(copy.deepcopy(self.ref), multi_token=True, plan_cache_dir=False)


@pytest.fixture(scope="module", params=list(CONFIGS))
def models(request):
    return Models(CONFIGS[request.param], seed=list(CONFIGS).index(request.param))


@pytest.fixture(params=["per_token", "fast"])
def patched(request, models):
    return getattr(models, request.param)


def gen(model, *args, **kw):
    kw.setdefault("do_sample", False)
    kw.setdefault("pad_token_id", 0)
    return model.generate(*args, **kw)


def dict_kw(**kw):
    return dict(return_dict_in_generate=True, output_scores=True, output_logits=True, **kw)


# ---------------------------------------------------------------------------------------------- decoding modes


def test_greedy(models, patched):
    want = gen(models.ref, PROMPT, max_new_tokens=NEW, **dict_kw())
    before = steps_executed(patched)
    got = gen(patched, PROMPT, max_new_tokens=NEW, **dict_kw())
    assert steps_executed(patched) - before == NEW - 1  # every decode step on the op
    assert_greedy_match(models.ref, PROMPT, want.sequences, got.sequences, "greedy")
    assert_logits_near_fp32(models.f32, models.ref, got.sequences, P, got.logits, "greedy")
    # The prefill is PyTorch's, on the StaticCache the tile path gives it: its logits bit for bit those of the
    # unpatched model on a StaticCache of the same size (some Transformers versions attend over the whole cache).
    static = gen(models.ref, PROMPT, max_new_tokens=NEW, cache_implementation="static", **dict_kw())
    assert torch.equal(got.logits[0], static.logits[0])
    # The dict output: the unpatched output's class and fields, one fp32 [1, vocab] row per new token.
    assert type(got) is type(want)
    assert got.sequences.shape == want.sequences.shape and got.sequences.dtype == want.sequences.dtype
    assert len(got.scores) == len(got.logits) == len(want.scores) == NEW
    for s, l, w in zip(got.scores, got.logits, want.logits):
        assert s.shape == l.shape == w.shape and s.dtype == l.dtype == torch.float32
        assert torch.equal(s, l)  # no logits processor: scores are the logits
    assert got.attentions is None and got.hidden_states is None
    cache = getattr(got, CACHE)
    assert isinstance(cache, StaticCache) and int(cache.get_seq_length()) == P + NEW - 1
    assert_cache_near_fp32(models.f32, models.ref, got.sequences, cache, P, P + NEW - 1, "greedy cache")
    # Without return_dict_in_generate: the sequences tensor.
    assert torch.equal(gen(patched, PROMPT, max_new_tokens=NEW), got.sequences)


def test_sample_seeded(models):
    patched = models.per_token
    kw = dict(do_sample=True, top_k=8, temperature=0.8, max_new_tokens=NEW)
    torch.manual_seed(11)
    before = steps_executed(patched)
    got = gen(patched, PROMPT, **dict_kw(**kw))
    assert steps_executed(patched) - before == NEW - 1
    torch.manual_seed(11)
    assert torch.equal(gen(patched, PROMPT, **kw), got.sequences)  # same seed, same draws: the op is deterministic
    for i in range(NEW):
        kept = torch.isfinite(got.scores[i])
        assert 1 <= int(kept.sum()) <= 8, f"step {i}: top_k not applied"
        assert torch.allclose(got.scores[i][kept], got.logits[i][kept] / 0.8), f"step {i}: temperature not applied"
        assert bool(kept[0, got.sequences[0, P + i]]), f"step {i}: sampled a filtered token"
    assert_logits_near_fp32(models.f32, models.ref, got.sequences, P, got.logits, "sampling")
    # top_k=1 sampling is greedy decoding.
    one = gen(patched, PROMPT, do_sample=True, top_k=1, max_new_tokens=NEW)
    assert torch.equal(one, gen(patched, PROMPT, max_new_tokens=NEW))


@pytest.mark.parametrize("how", ["cache_implementation", "user_cache"])
def test_static_cache(models, patched, how):
    want = gen(patched, PROMPT, max_new_tokens=NEW)
    before = steps_executed(patched)
    if how == "cache_implementation":
        got = gen(patched, PROMPT, max_new_tokens=NEW, cache_implementation="static")
    else:
        cache = StaticCache(config=patched.config, max_cache_len=64)
        got = gen(patched, PROMPT, max_new_tokens=NEW, **{CACHE: cache})
        assert int(cache.get_seq_length()) == P + NEW - 1
    assert steps_executed(patched) - before == NEW - 1
    assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------- continuations


def test_continue_from_past_key_values(models, patched):
    # As GenerationTesterMixin.test_generate_continue_from_past_key_values: generate 3 tokens, then 1 more from the
    # returned cache; the result is the 4-token generation.
    full = gen(patched, PROMPT, max_new_tokens=4, **dict_kw())
    part = gen(patched, PROMPT, max_new_tokens=3, **dict_kw())
    more = gen(patched, part.sequences, max_new_tokens=1, **dict_kw(**{CACHE: getattr(part, CACHE)}))
    assert_greedy_match(models.ref, PROMPT, full.sequences, more.sequences, "continued")
    grown = getattr(more, CACHE)
    assert isinstance(grown, StaticCache) and int(grown.get_seq_length()) == P + 3
    # The continuation's one uncached token is a 1-token forward on a StaticCache: a decode step on the op, as in
    # the full run. Both caches within the rule.
    for name, out in (("full", full), ("continued", more)):
        assert_cache_near_fp32(models.f32, models.ref, full.sequences, getattr(out, CACHE), P, P + 3, name)
    # Its one new token's logits: a PyTorch prefill over a cache the op partly wrote, within the logits rule.
    assert_logits_near_fp32(models.f32, models.ref, full.sequences, P + 2, (None, more.logits[0]), "continued")


def test_continuation_grows_the_cache_it_was_given(models, patched):
    # A call without a cache gets a StaticCache from the tile path, sized for that call, where the unpatched model
    # gets a DynamicCache. Passed back for a longer continuation it grows as the DynamicCache would have.
    model = tiles_ext.patch(copy.deepcopy(models.ref), multi_token=patched._tiles.multi_token, plan_cache_dir=False)
    part = gen(model, PROMPT, max_new_tokens=3, return_dict_in_generate=True)
    small = getattr(part, CACHE)
    assert small.layers[0].keys.shape[2] < P + 3 + NEW - 1  # sized for its own call: too small for the next
    before = steps_executed(model)
    more = gen(model, part.sequences, max_new_tokens=NEW, return_dict_in_generate=True, **{CACHE: small})
    assert steps_executed(model) - before == NEW  # the prompt's one uncached token is a decode step too
    grown = getattr(more, CACHE)
    assert grown is not small and grown.layers[0].keys.shape[2] >= P + 3 + NEW - 1
    assert int(grown.get_seq_length()) == P + 3 + NEW - 1
    assert int(small.get_seq_length()) == P + 2  # the passed cache is left as it was: still a valid prefix
    want = gen(models.ref, PROMPT, max_new_tokens=3 + NEW)
    assert_greedy_match(models.ref, PROMPT, want, more.sequences, "grown continuation")
    again = gen(model, more.sequences, max_new_tokens=NEW, **{CACHE: grown})  # and again
    assert again.shape[1] == P + 3 + 2 * NEW


def test_a_returned_cache_is_the_callers(models, patched):
    # A later call never reuses (and resets) a cache an earlier call returned, as it would not a DynamicCache.
    first = gen(patched, PROMPT, max_new_tokens=3, return_dict_in_generate=True)
    cache = getattr(first, CACHE)
    gen(patched, torch.tensor([[4, 8, 15, 16, 23]]), max_new_tokens=NEW, return_dict_in_generate=True)
    assert int(cache.get_seq_length()) == P + 2
    more = gen(patched, first.sequences, max_new_tokens=2, **{CACHE: cache})
    assert_greedy_match(models.ref, PROMPT, gen(models.ref, PROMPT, max_new_tokens=5), more, "after another call")


def test_continue_from_inputs_embeds(models, patched):
    # As GenerationTesterMixin.test_generate_continue_from_inputs_embeds.
    embed = patched.get_input_embeddings()
    with torch.no_grad():
        embeds = embed(PROMPT)
        full = gen(patched, inputs_embeds=embeds, max_new_tokens=4, **dict_kw())
        part = gen(patched, inputs_embeds=embeds, max_new_tokens=3, **dict_kw())
        longer = torch.cat([embeds, embed(part.sequences)], dim=1)
    before = steps_executed(patched)
    more = gen(patched, inputs_embeds=longer, max_new_tokens=1, **dict_kw(**{CACHE: getattr(part, CACHE)}))
    # The uncached position P + 2 came from the op in the full run and from a PyTorch prefill (of embeddings) here:
    # the mixed cache the rule is for.
    assert steps_executed(patched) == before
    # inputs_embeds alone: generate returns the new tokens only.
    assert full.sequences.shape == (1, 4) and more.sequences.shape == (1, 1)
    combined = torch.cat([part.sequences, more.sequences], dim=1)
    want = gen(models.ref, PROMPT, max_new_tokens=4)
    assert_greedy_match(models.ref, PROMPT, want, torch.cat([PROMPT, combined], dim=1), "embeds continued")
    assert_greedy_match(models.ref, PROMPT, want, torch.cat([PROMPT, full.sequences], dim=1), "embeds")
    sequence = torch.cat([PROMPT, full.sequences], dim=1)
    for name, out in (("full", full), ("continued", more)):
        assert_cache_near_fp32(models.f32, models.ref, sequence, getattr(out, CACHE), P, P + 3, name)


# ---------------------------------------------------------------------------------------------- stopping


def test_stopping_criteria(models, patched):
    full = gen(patched, PROMPT, max_new_tokens=NEW)
    new = full[0, P:].tolist()
    assert torch.equal(gen(patched, PROMPT, max_length=P + 3), full[:, :P + 3])  # max_length
    stop = new.index(new[4])
    assert torch.equal(gen(patched, PROMPT, max_new_tokens=NEW, eos_token_id=new[4]), full[:, :P + stop + 1])
    eos = [509, new[5], new[3]]  # several EOS ids: stop after the first one produced
    first = min(new.index(t) for t in eos if t in new)
    assert torch.equal(gen(patched, PROMPT, max_new_tokens=NEW, eos_token_id=eos), full[:, :P + first + 1])

    class StopAfter(StoppingCriteria):
        def __init__(self, n):
            self.n = n

        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= P + self.n, dtype=torch.bool)

    before = steps_executed(patched)
    got = gen(patched, PROMPT, max_new_tokens=NEW, stopping_criteria=StoppingCriteriaList([StopAfter(5)]))
    assert torch.equal(got, full[:, :P + 5])
    assert steps_executed(patched) - before == 4
    # min_new_tokens masks the EOS until then (a logits processor on the op's logits): the full length.
    kw = dict(max_new_tokens=NEW, min_new_tokens=NEW, eos_token_id=new[1])
    got = gen(patched, PROMPT, **kw)
    assert got.shape[1] == P + NEW
    assert_greedy_match(models.ref, PROMPT, gen(models.ref, PROMPT, **kw), got, "min_new_tokens")


# ---------------------------------------------------------------------------------------------- compile


def test_compiled_decode_step(models):
    torch._dynamo.reset()
    patched = models.per_token
    compiled = torch.compile(patched, fullgraph=True, backend="aot_eager")
    caches = []
    for _ in range(2):
        cache = StaticCache(config=patched.config, max_cache_len=P + 4)
        with torch.no_grad():
            patched(PROMPT, **{CACHE: cache})
        caches.append(cache)
    with torch.no_grad():
        for t in (5, 77, 300):
            step = torch.tensor([[t]])
            want = patched(step, **{CACHE: caches[0]}).logits
            before = steps_executed(patched)
            got = compiled(input_ids=step, **{CACHE: caches[1]}).logits
            assert steps_executed(patched) == before + 1
            assert torch.equal(got, want)
    # generate()'s own decode compilation (forced on for CPU here: on CUDA Transformers does it by itself).
    config = copy.deepcopy(patched.generation_config)
    config.compile_config = CompileConfig(backend="aot_eager", fullgraph=True)
    config.compile_config._compile_all_devices = True
    eager = gen(patched, PROMPT, max_new_tokens=NEW)
    before = steps_executed(patched)
    assert torch.equal(gen(patched, PROMPT, generation_config=config, max_new_tokens=NEW), eager)
    assert steps_executed(patched) - before == NEW - 1 and "_compiled_call" in patched.__dict__
