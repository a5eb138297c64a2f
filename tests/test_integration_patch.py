"""tiles_ext.patch / unpatch on small random Llama models (fast): what patch changes and restores, what it
refuses, plan caching, fallbacks that must give the unpatched answer, the cache-overflow guard, the version gate."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaModel, StaticCache

import tiles_ext
from integration_support import CACHE, count_op_calls, patched_copy, rel_err, tiny_config
from tiles_ext.integrations import (CacheFullError, TilesFallbackWarning, TransformersVersionError,
                                    UnsupportedModelError)
from tiles_ext.models import random_model
from tiles_ext.planner import UnsupportedConfig


@pytest.fixture(scope="module")
def tiny():
    return random_model(tiny_config(), seed=0)


@pytest.fixture
def ids():
    return torch.tensor([[1, 17, 42, 99, 7, 300]])


def test_patch_changes_only_the_instance_and_unpatch_restores_it(tiny, ids):
    model = copy.deepcopy(tiny)
    other = copy.deepcopy(tiny)
    keys_before = set(model.__dict__)
    config_before = model.generation_config.to_dict()
    forward_before = model.forward
    assert tiles_ext.patch(model, plan_cache_dir=False) is model
    assert tiles_ext.integrations.is_patched(model) and not tiles_ext.integrations.is_patched(other)
    assert type(model).forward is type(other).forward and "forward" not in other.__dict__
    with count_op_calls() as ops:
        model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert ops["calls"] == 3
    assert model.generation_config.to_dict() == config_before  # generate never edits it

    assert tiles_ext.unpatch(model) is model
    assert set(model.__dict__) == keys_before  # no leftover attribute (generate's static-cache bookkeeping too)
    assert model.forward == forward_before and model.forward.__func__ is type(model).forward
    assert model.generate.__func__ is type(model).generate
    assert model.generation_config.to_dict() == config_before
    with count_op_calls() as ops:  # PyTorch decode again
        out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert ops["calls"] == 0
    assert torch.equal(out, tiny.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0))
    assert tiles_ext.unpatch(model) is model  # unpatching an unpatched model is a no-op


def test_patch_twice_is_a_no_op(tiny):
    model = patched_copy(tiny)
    state = tiles_ext.integrations.patch_state(model)
    assert tiles_ext.patch(model) is model and tiles_ext.integrations.patch_state(model) is state


def test_decode_logits_match_pytorch(tiny, ids):
    # Teacher-forced: the op's logits for each decode step vs PyTorch's on the same cache contents.
    model = patched_copy(tiny)
    cache_op = StaticCache(config=model.config, max_cache_len=16)
    cache_pt = StaticCache(config=model.config, max_cache_len=16)
    tokens = [5, 77, 300, 2]
    with torch.no_grad():
        model(ids, **{CACHE: cache_op})
        tiny(ids, **{CACHE: cache_pt})
        for t in tokens:
            step = torch.tensor([[t]])
            got = model(step, **{CACHE: cache_op}).logits
            want = tiny(step, **{CACHE: cache_pt}).logits
            assert got.shape == want.shape == (1, 1, 512) and got.dtype == torch.float32
            assert rel_err(got, want) < 0.05
    # The op wrote K/V into the same StaticCache tensors PyTorch prefill filled, and advanced every counter.
    n = ids.shape[1] + len(tokens)
    for lo, lp in zip(cache_op.layers, cache_pt.layers):
        assert int(lo.cumulative_length) == n
        assert rel_err(lo.keys[:, :, :n], lp.keys[:, :, :n]) < 0.05
        assert rel_err(lo.values[:, :, :n], lp.values[:, :, :n]) < 0.05


def test_plan_is_cached_on_disk(tiny, tmp_path, monkeypatch):
    tiles_ext.patch(copy.deepcopy(tiny), plan_cache_dir=tmp_path)
    files = list(tmp_path.glob("*.tplan"))
    assert len(files) == 1 and "-w8-" in files[0].name  # CPU: 8 workers

    def no_build(*a, **k):
        raise AssertionError("plan rebuilt although it is cached")

    import tiles_ext.planner.planfile as planfile
    monkeypatch.setattr(planfile, "build_plan", no_build)
    model = tiles_ext.patch(copy.deepcopy(tiny), plan_cache_dir=tmp_path)
    assert tiles_ext.integrations.patch_state(model).decoder.plan.num_workers == 8


def test_unsupported_models_are_refused_by_name(tiny):
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=128)).to(torch.bfloat16)
    with pytest.raises(UnsupportedModelError, match=r"model_type 'gpt2'.*supported model types: llama"):
        tiles_ext.patch(gpt2)
    with pytest.raises(UnsupportedModelError, match="causal LM"):
        tiles_ext.patch(LlamaModel(tiny_config()).to(torch.bfloat16))
    with pytest.raises(UnsupportedModelError, match=r"float32.*only bfloat16 is supported"):
        tiles_ext.patch(copy.deepcopy(tiny).float())
    with pytest.raises(UnsupportedConfig, match=r"head_dim 32 \(supported: 64, 128\)"):
        tiles_ext.patch(random_model(tiny_config(head_dim=32)), plan_cache_dir=False)
    with pytest.raises(UnsupportedModelError, match=r"meta.*supported devices: cpu, cuda"):
        with torch.device("meta"):
            meta = type(tiny)(tiny_config()).to(torch.bfloat16)
        tiles_ext.patch(meta)


def test_version_gate(tiny, monkeypatch):
    import transformers
    monkeypatch.setattr(transformers, "__version__", "5.3.2")
    with pytest.raises(TransformersVersionError, match=r"transformers >= 5\.4.*found transformers 5\.3\.2"):
        tiles_ext.patch(copy.deepcopy(tiny))


def test_cache_overflow_raises_before_writing(tiny, ids):
    model = patched_copy(tiny)
    p = ids.shape[1]
    cache = StaticCache(config=model.config, max_cache_len=p + 1)
    with torch.no_grad():
        model(ids, **{CACHE: cache})
        model(torch.tensor([[3]]), **{CACHE: cache})  # fills the last slot
        keys = cache.layers[0].keys.clone()
        with pytest.raises(CacheFullError, match=rf"holds {p + 1} of its max_cache_len {p + 1}"):
            model(torch.tensor([[4]]), **{CACHE: cache})
    assert int(cache.get_seq_length()) == p + 1 and torch.equal(cache.layers[0].keys, keys)


@pytest.mark.parametrize("case", ["beams", "hidden_states", "padding", "dynamic_loop", "labels"])
def test_unserved_calls_give_the_unpatched_answer_with_one_warning(tiny, ids, case):
    model = patched_copy(tiny)
    mask = torch.ones_like(ids)
    if case == "beams":
        run = lambda m: m.generate(ids, max_new_tokens=3, num_beams=2, do_sample=False, pad_token_id=0)
    elif case == "hidden_states":
        run = lambda m: m.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0,
                                   return_dict_in_generate=True, output_hidden_states=True).sequences
    elif case == "padding":
        mask[0, 0] = 0
        run = lambda m: m.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    elif case == "dynamic_loop":
        def run(m):
            cache = DynamicCache(config=m.config)
            with torch.no_grad():
                out = m(ids, **{CACHE: cache})
                return m(out.logits[:, -1:].argmax(-1), **{CACHE: cache}).logits
    else:
        def run(m):
            with torch.no_grad():
                cache = StaticCache(config=m.config, max_cache_len=16)
                m(ids, **{CACHE: cache})
                return m(torch.tensor([[5]]), **{CACHE: cache}, labels=torch.tensor([[6]])).logits
    want = run(tiny)
    with pytest.warns(TilesFallbackWarning):
        with count_op_calls() as ops:
            got = run(model)
    assert ops["calls"] == 0
    assert torch.equal(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)  # once per model and reason
        run(model)


def test_user_loop_with_mask_and_positions(tiny, ids):
    # A hand-written loop passing attention_mask and position_ids: served by the op when they are what the op
    # assumes (all ones, position = cache length), PyTorch otherwise.
    model = patched_copy(tiny)
    p = ids.shape[1]
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        model(ids, **{CACHE: cache})
        with count_op_calls() as ops:
            model(torch.tensor([[5]]), attention_mask=torch.ones(1, p + 1, dtype=torch.long),
                  position_ids=torch.tensor([[p]]), **{CACHE: cache})
        assert ops["calls"] == 1
        with pytest.warns(TilesFallbackWarning, match="position_ids"):
            with count_op_calls() as ops:
                model(torch.tensor([[6]]), position_ids=torch.tensor([[p + 5]]), **{CACHE: cache})
        assert ops["calls"] == 0


def test_no_cache_name_deprecation_on_tiles_behalf(tiny, ids, monkeypatch):
    """Transformers 5.2x renamed the cache argument (past_key_values -> cache) and reports the old name as deprecated:
    the patched model passes the name the installed version expects, so that notice never comes from Tiles' code,
    even when the caller used the old name."""
    import transformers.utils.generic as generic
    said = []
    monkeypatch.setattr(generic.logger, "warning_once", lambda msg, *a, **k: said.append(str(msg)))
    model = patched_copy(tiny)
    fast = patched_copy(tiny, multi_token=True)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for m in (model, fast):
            out = m.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0, return_dict_in_generate=True)
            m.generate(out.sequences, max_new_tokens=2, do_sample=False, pad_token_id=0, **{CACHE: getattr(out, CACHE)})
        cache = StaticCache(config=model.config, max_cache_len=16)
        model(ids, past_key_values=cache)            # the old name, prefill (PyTorch)
        model(torch.tensor([[5]]), past_key_values=cache)  # and a decode step (the op)
        model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0,
                       past_key_values=StaticCache(config=model.config, max_cache_len=16))
    assert int(cache.get_seq_length()) == ids.shape[1] + 1
    said += [f"{w.filename}:{w.lineno}: {w.message}" for w in record]
    assert not [m for m in said if "deprecated" in m], said


@pytest.mark.parametrize("over, refused", [
    # head_dim 32 (some small models) and 16 (Transformers' own tiny test configs): the CPU executor runs any even
    # head_dim, the CUDA kernel is checked for 64 and 128 only, so the family serves those two.
    (dict(head_dim=32), r"head_dim 32 \(supported: 64, 128\)"),
    (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128),
     r"head_dim 16 \(supported: 64, 128\)"),
    (dict(hidden_act="gelu"), r"hidden_act 'gelu' \(supported: 'silu': the tile executors' MLP is SiLU-gated, so "
                              r"no model family serves 'gelu'\)"),
])
def test_unserved_shapes_are_refused_with_what_is_served(over, refused):
    model = random_model(tiny_config(**over))
    before = dict(model.__dict__)
    with pytest.raises(UnsupportedConfig, match=refused):
        tiles_ext.patch(model, plan_cache_dir=False)
    # Refused: left untouched.
    assert set(model.__dict__) == set(before) and all(model.__dict__[k] is v for k, v in before.items())


def test_transformers_tiny_test_config_names_every_problem():
    # The shape of LlamaModelTester's config in Transformers' own test suite: each refusal named in one message.
    from transformers import LlamaConfig
    config = LlamaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=37, hidden_act="gelu", max_position_embeddings=512)
    with pytest.raises(UnsupportedConfig, match=r"head_dim 8 \(supported: 64, 128\).*hidden_act 'gelu'.*"
                                                r"intermediate_size 37 must be multiples of 8"):
        tiles_ext.patch(random_model(config), plan_cache_dir=False)
