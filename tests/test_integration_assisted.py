"""Assisted generation with a patched assistant, a patched main model, or both, on whatever Transformers is
installed (CPU op, tiny random Llama models).

Assisted generation rolls the assistant's and the main model's caches back (crop) after every round. A call that
brings no cache gets a CroppableStaticCache (its crop moves the length counter back) on every Transformers version:
the assistant drafts on the tile op and its cache grows between rounds as the DynamicCache it replaces would. The
main model verifies each round's draft in one pass of the op (several rows), and prompt lookup does the same;
greedy output is the patched model's plain greedy output. A caller's plain StaticCache is used where the installed
Transformers can crop it, else the call runs in PyTorch with one warning. Transformers 5.4's assisted decoding
refuses every StaticCache: there the main model's assisted calls run in PyTorch with one warning.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from integration_support import assert_greedy_match, patched_copy, prompt_lookup_and_plain, steps_executed, tiny_config
from tiles_ext.integrations import TilesFallbackWarning, is_patched, patch_state
from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.version import assisted_takes_static_cache
from tiles_ext.models import random_model

PROMPT = torch.tensor([[1, 17, 42, 99, 7, 300]])
NEW = 10
VERIFIES = pytest.mark.skipif(not assisted_takes_static_cache(),
                              reason="this Transformers' assisted decoding refuses every StaticCache")


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
        on_torch = [m for m in said if "assisted generation" in m and "assistant" not in m]
        if assisted_takes_static_cache():
            assert not on_torch, said
            assert steps_executed(main) >= 1  # each round's draft verified in one pass of the op
        else:
            assert len(on_torch) == 1 and "refuses every StaticCache" in on_torch[0], said
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


@VERIFIES
def test_prompt_lookup_greedy_is_plain_greedy_in_verify_passes(main_model):
    """Prompt lookup on a patched model: the same tokens as its plain greedy generate (every R-row pass gives the
    bits of R one-row steps), in fewer op passes, each counted; no fallback warning."""
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT, PROMPT, PROMPT[:, :3]], dim=1)
    plain, got, passes = prompt_lookup_and_plain(main, prompt)
    assert torch.equal(got, plain)
    assert 1 <= passes < 23, passes  # plain greedy takes 23 one-row steps after the prefill


@VERIFIES
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


@VERIFIES
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


@VERIFIES
def test_a_draft_longer_than_the_cache_is_refused_before_the_pass(main_model):
    from integration_support import CACHE
    from tiles_ext.integrations import CacheFullError
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT] * 2, dim=1)
    cache = kv.CroppableStaticCache(config=main.config, max_cache_len=prompt.shape[1] + 3)
    with pytest.raises(CacheFullError, match="this verify pass"):
        main.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, prompt_lookup_num_tokens=6,
                      **{CACHE: cache})


def _lookup(model, prompt, new, **kw):
    return model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0, prompt_lookup_num_tokens=5,
                          **kw)


@VERIFIES
def test_an_assisted_call_gets_a_croppable_cache_that_continues(main_model):
    """The cache an assisted call makes is a CroppableStaticCache on every Transformers version (so CI runs the path
    5.17 needs), cropped to the accepted tokens; passed back to a greedy call it grows as that class, and the
    continuation is plain greedy's. (Transformers' assisted decoding itself re-feeds the whole sequence when given
    a filled cache, so the continuation is a plain one.)"""
    from integration_support import CACHE
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT, PROMPT, PROMPT[:, :3]], dim=1)
    greedy = dict(do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    plain = main.generate(prompt, max_new_tokens=24, **greedy)
    plain = main.generate(plain.sequences, max_new_tokens=30, **greedy, **{CACHE: getattr(plain, CACHE)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)
        first = _lookup(main, prompt, 24, return_dict_in_generate=True)
    cache = getattr(first, CACHE)
    assert type(cache) is kv.CroppableStaticCache
    assert all(type(layer) is kv.CroppableStaticLayer for layer in cache.layers)
    assert kv.host_length(cache) == first.sequences.shape[1] - 1  # the last token is the next step's input
    again = main.generate(first.sequences, max_new_tokens=30, **greedy, **{CACHE: cache})
    assert type(getattr(again, CACHE)) is kv.CroppableStaticCache
    assert kv.capacity(getattr(again, CACHE)) > kv.capacity(cache)  # grown for the continuation
    assert torch.equal(again.sequences, plain.sequences)


@VERIFIES
def test_a_callers_plain_static_cache(main_model):
    """Where the installed Transformers crops a plain StaticCache (5.25), prompt lookup verifies on it on the op;
    where it cannot (5.17), the call runs in PyTorch with one warning, as unpatched Transformers would run it."""
    from transformers import StaticCache
    from integration_support import CACHE
    main = patched_copy(main_model)
    prompt = torch.cat([PROMPT, PROMPT, PROMPT[:, :3]], dim=1)

    def run(model):
        cache = StaticCache(config=model.config, max_cache_len=prompt.shape[1] + 30)
        try:
            return _lookup(model, prompt, 10, **{CACHE: cache})
        except ValueError as e:  # 5.17 refuses a StaticCache for assisted decoding
            return type(e)

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = run(main)
    said = _tiles_warnings(record)
    if kv.can_crop(StaticCache(config=main.config, max_cache_len=1)):
        assert not said, said
        assert torch.equal(got, main.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0))
        assert steps_executed(main) >= 1
    else:
        assert len(said) == 1 and "cannot crop a plain StaticCache" in said[0], said
        assert steps_executed(main) == 0
        want = run(main_model)
        assert got is want if isinstance(want, type) else torch.equal(got, want)


def test_crop_moves_only_the_length_counter(main_model):
    """Negative: remove that many tokens; positive: keep that many (the older absolute convention); the K/V
    tensors stay the same objects with the same contents."""
    from integration_support import CACHE
    main = patched_copy(main_model)
    cache = kv.CroppableStaticCache(config=main.config, max_cache_len=16)
    main(PROMPT, **{CACHE: cache})
    keys = [layer.keys for layer in cache.layers]
    before = [k.clone() for k in keys]
    lengths = []
    for n in (-2, 0, 9, 3, -3):
        cache.crop(n)
        lengths.append([int(layer.cumulative_length) for layer in cache.layers])
    assert lengths == [[4, 4], [4, 4], [4, 4], [3, 3], [0, 0]]
    assert kv.host_length(cache) == 0 and cache.get_seq_length() == 0
    assert all(a is layer.keys and torch.equal(a, b) for a, b, layer in zip(keys, before, cache.layers))


def test_rows_beyond_a_cropped_length_are_never_attended(main_model):
    """After a verify pass and a crop (a rejected draft), the rows beyond the cache length are never read: poisoned
    with NaN and huge values, the next verify pass gives the bits of a cache that never held them, and so does a
    PyTorch prefill over rows a rejected draft left (the mask of a StaticCache hides them)."""
    from integration_support import CACHE
    main = patched_copy(main_model)
    decoder = patch_state(main).decoder
    caches = [kv.CroppableStaticCache(config=main.config, max_cache_len=24) for _ in range(3)]
    for cache in caches:
        main(PROMPT, **{CACHE: cache})
    rejected, accepted, nxt = torch.tensor([5, 9, 11, 13, 2]), torch.tensor([5, 9]), torch.tensor([4, 8, 15])
    for cache in caches[:2]:
        decoder.verify(rejected, cache)
        cache.crop(-3)
    decoder.verify(accepted, caches[2])  # never held the rejected rows
    length = PROMPT.shape[1] + 2
    assert [kv.host_length(c) for c in caches] == [length] * 3
    for layer in caches[0].layers:
        for t in (layer.keys, layer.values):
            t[:, :, length:].fill_(float("nan"))
            t[:, :, length + 2:].fill_(3e38)
    stale = [decoder.verify(nxt, cache) for cache in caches]
    assert torch.equal(stale[0], stale[2]) and torch.equal(stale[1], stale[2])
    for a, b in zip(caches[0].layers, caches[2].layers):
        assert torch.equal(a.keys[:, :, :length + 3], b.keys[:, :, :length + 3])
        assert torch.equal(a.values[:, :, :length + 3], b.values[:, :, :length + 3])
    for cache in caches[1:]:
        cache.crop(-3)
    ids = nxt.view(1, -1)[:, :2]
    torch_rows = [main(ids, **{CACHE: cache}).logits for cache in caches[1:]]  # two tokens: a PyTorch prefill
    assert torch.equal(torch_rows[0], torch_rows[1])
