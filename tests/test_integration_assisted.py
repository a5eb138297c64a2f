"""Assisted generation with a patched assistant, a patched main model, or both, on whatever Transformers is
installed (CPU op, tiny random Llama models).

Assisted generation rolls the assistant's and the main model's caches back (crop) after every round. A call that
brings no cache gets a CroppableStaticCache (its crop moves the length counter back) on every Transformers version:
the assistant drafts on the tile op and its cache grows between rounds as the DynamicCache it replaces would. The
main model verifies each round's draft in one pass of the op (several rows), and prompt lookup does the same;
greedy output is the patched model's plain greedy output. A caller's plain StaticCache is used where the installed
Transformers can crop it, else the call runs in PyTorch with one warning.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from integration_support import assert_greedy_match, patched_copy, steps_executed, tiny_config
from tiles_ext.integrations import TilesFallbackWarning, is_patched
from tiles_ext.integrations import cache as kv
from tiles_ext.models import random_model

PROMPT = torch.tensor([[1, 17, 42, 99, 7, 300]])
NEW = 10


@pytest.fixture(scope="module")
def main_model():
    return random_model(tiny_config(), seed=5)


@pytest.fixture(scope="module")
def draft_model():
    # A smaller assistant of the same vocabulary that drafts several tokens a round (no confidence cut-off, which
    # would stop a random model's drafts after one token), so that rounds take decode steps and crops.
    model = random_model(tiny_config(num_hidden_layers=1), seed=6)
    model.generation_config.assistant_confidence_threshold = 0.0
    model.generation_config.num_assistant_tokens = 4
    model.generation_config.num_assistant_tokens_schedule = "constant"
    return model


def _assisted(main, draft, **kw):
    return main.generate(PROMPT, assistant_model=draft, max_new_tokens=NEW, do_sample=False, pad_token_id=0, **kw)


def _tiles_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, TilesFallbackWarning)]


@pytest.mark.parametrize("patched", ["assistant", "main", "both"])
def test_assisted_generation_gives_the_unpatched_answer(main_model, draft_model, patched):
    want = _assisted(main_model, draft_model)
    main = patched_copy(main_model) if patched in ("main", "both") else main_model
    draft = patched_copy(draft_model) if patched in ("assistant", "both") else copy.deepcopy(draft_model)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = _assisted(main, draft)
    said = _tiles_warnings(record)
    assert got.shape == want.shape
    assert_greedy_match(main_model, PROMPT, want, got, f"patched {patched}")
    if is_patched(main):
        assert not [m for m in said if "assisted generation" in m and "assistant" not in m], said
        assert steps_executed(main) >= 1  # each round's draft verified in one pass of the op
    if is_patched(draft):
        assert not [m for m in said if "assistant of assisted generation" in m], said
        assert steps_executed(draft) >= NEW // 2  # drafts decoded on the op, over several rounds
    assert len(said) == len(set(said))  # each reason once
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)  # once per model and reason
        again = _assisted(main, draft)
    assert torch.equal(again, got)


def test_assisted_sampling_with_a_patched_assistant(main_model, draft_model):
    draft = patched_copy(draft_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TilesFallbackWarning)
        torch.manual_seed(7)
        a = main_model.generate(PROMPT, assistant_model=draft, max_new_tokens=NEW, do_sample=True, top_k=20,
                                pad_token_id=0)
        torch.manual_seed(7)
        b = main_model.generate(PROMPT, assistant_model=draft, max_new_tokens=NEW, do_sample=True, top_k=20,
                                pad_token_id=0)
    assert a.shape == (1, PROMPT.shape[1] + NEW) and torch.equal(a, b)
    assert torch.equal(a[:, :PROMPT.shape[1]], PROMPT)


def test_prompt_lookup_greedy_is_plain_greedy_in_verify_passes(main_model):
    """Prompt lookup on a patched model: the same tokens as its plain greedy generate (every R-row pass gives the
    bits of R one-row steps), in fewer op passes, each counted; no fallback warning."""
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT, PROMPT, PROMPT[:, :3]], dim=1)
    plain = main.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0)
    before = steps_executed(main)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)
        got = main.generate(prompt, max_new_tokens=24, do_sample=False, pad_token_id=0, prompt_lookup_num_tokens=5)
    passes = steps_executed(main) - before
    assert torch.equal(got, plain)
    assert 1 <= passes < 23, passes  # plain greedy takes 23 one-row steps after the prefill


def test_prompt_lookup_sampling_on_the_op(main_model):
    main = patched_copy(main_model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)
        torch.manual_seed(3)
        a = main.generate(PROMPT, max_new_tokens=NEW, do_sample=True, top_k=20, pad_token_id=0,
                          prompt_lookup_num_tokens=3)
        torch.manual_seed(3)
        b = main.generate(PROMPT, max_new_tokens=NEW, do_sample=True, top_k=20, pad_token_id=0,
                          prompt_lookup_num_tokens=3)
    assert a.shape == (1, PROMPT.shape[1] + NEW) and torch.equal(a, b)
    assert steps_executed(main) >= 1


def test_a_long_draft_verifies_in_several_passes(main_model):
    """A draft longer than the plan's rows per pass (max_rows - 1) is verified in passes of at most max_rows rows."""
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT] * 4, dim=1)
    plain = main.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
    got = main.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0, prompt_lookup_num_tokens=12)
    assert torch.equal(got, plain)


def test_an_assistant_with_another_vocabulary_is_refused_before_any_pass(main_model):
    """Transformers' own rule for assistants of another vocabulary stays; nothing runs on the op."""
    main = patched_copy(main_model)
    other = random_model(tiny_config(num_hidden_layers=1, vocab_size=640), seed=8)
    with pytest.raises(ValueError):
        main.generate(PROMPT, assistant_model=other, max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    assert steps_executed(main) == 0


def test_a_draft_longer_than_the_cache_is_refused_before_the_pass(main_model):
    from transformers import StaticCache
    from integration_support import CACHE
    from tiles_ext.integrations import CacheFullError
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT] * 2, dim=1)
    cache = StaticCache(config=main.config, max_cache_len=prompt.shape[1] + 3)
    with pytest.raises(CacheFullError, match="this verify pass"):
        main.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, prompt_lookup_num_tokens=6,
                      **{CACHE: cache})
