"""The model families (tiles_ext/families): what each reads from a config, what it refuses and why, where its
weights live, and the sliding-window rule, each checked against the installed Transformers' own config classes,
caches and modules. Also: every shipped config of the zoo plans and validates for the H200's 132 workers and the
CPU's 8, and every GQA ratio 1-8 with head_dim 64, 96 and 128 plans and validates."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.cache_utils import StaticCache, StaticLayer, StaticSlidingWindowLayer, get_layer_types_and_kwargs

import tiles_ext
from tiles_ext import families
from tiles_ext.families import family_for, shape_of
from tiles_ext.models import available_configs, config_path, load_config
from tiles_ext.planner import build_plan
from tiles_ext.planner.plan import GpuTarget
from tiles_ext.planner.shape import ModelShape, UnsupportedConfig

H200 = GpuTarget("NVIDIA H200", 132, 9, 0)
ZOO = available_configs()

# What each shipped config must read as: (model_type, hidden, heads, kv heads, head_dim, tied, qkv_bias, qk_norm).
EXPECTED = {
    "llama-3.1-8b": ("llama", 4096, 32, 8, 128, False, False, False),
    "llama-3.2-1b": ("llama", 2048, 32, 8, 64, True, False, False),
    "llama-3.2-3b": ("llama", 3072, 24, 8, 128, True, False, False),
    "smollm2-135m": ("llama", 576, 9, 3, 64, True, False, False),
    "mistral-7b-v0.3": ("mistral", 4096, 32, 8, 128, False, False, False),
    "phi-3-mini-4k": ("phi3", 3072, 32, 32, 96, False, False, False),
    "qwen2.5-0.5b": ("qwen2", 896, 14, 2, 64, True, True, False),      # GQA 7
    "qwen2.5-7b": ("qwen2", 3584, 28, 4, 128, False, True, False),     # GQA 7
    "qwen3-0.6b": ("qwen3", 1024, 16, 8, 128, True, False, True),      # q width 2048 != hidden 1024
    "qwen3-8b": ("qwen3", 4096, 32, 8, 128, False, False, True),
}


def _dict(name):
    return json.loads(config_path(name).read_text())


def test_every_shipped_config_is_expected():
    assert set(ZOO) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_config_reads_as_expected(name):
    model_type, hidden, heads, kv, hd, tied, bias, qk = EXPECTED[name]
    d = _dict(name)
    s = shape_of(d)
    assert d["model_type"] == model_type
    assert (s.hidden, s.num_heads, s.num_kv_heads, s.head_dim, s.tied_lm_head, s.qkv_bias, s.qk_norm) == (
        hidden, heads, kv, hd, tied, bias, qk)
    # The config.json dict and Transformers' config object of it read the same.
    assert shape_of(load_config(name)) == s


@pytest.mark.parametrize("workers,gpu", [(132, H200), (8, GpuTarget())], ids=["h200-132", "cpu-8"])
@pytest.mark.parametrize("name", ZOO)
def test_zoo_plans_and_validates(name, workers, gpu):
    """Every shipped config (Llama, Qwen2.5, Qwen3, Mistral, Phi-3) plans and passes the validator."""
    plan = build_plan(_dict(name), workers, gpu=gpu)
    assert plan.header["num_workers"] == workers


# Fields a config.json may leave out, per model type: the family must read them as the Transformers config class
# defaults them (head_dim 128 for Qwen3, rms_norm_eps 1e-5 for Phi-3, sliding_window 4096 for Mistral, ...).
MINIMAL = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, intermediate_size=512,
               num_hidden_layers=2, vocab_size=1000)


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral", "phi3"])
@pytest.mark.parametrize("extra", [{}, {"max_position_embeddings": 64}, {"use_sliding_window": True},
                                   {"use_sliding_window": True, "max_window_layers": 1},
                                   {"sliding_window": None}, {"sliding_window": 512, "max_position_embeddings": 512}],
                         ids=["bare", "short", "use-sw", "use-sw-layer1", "sw-null", "sw-512"])
def test_config_dict_defaults_are_transformers_own(model_type, extra):
    d = dict(MINIMAL, model_type=model_type, **extra)
    config = AutoConfig.for_model(**d)
    family = family_for(model_type)
    assert family.shape(d) == family.shape(config)
    assert family.sliding_window(d) == family.sliding_window(config)
    if model_type != "llama":  # LlamaAttention has no window (a stray sliding_window field only shapes the cache)
        assert family.sliding_window(config) == _transformers_window(config)


def _transformers_window(config):
    """The smallest sliding window Transformers' StaticCache gives a layer of `config` (None: all full layers)."""
    types, kwargs = get_layer_types_and_kwargs(config)
    windows = [kw["sliding_window"] for t, kw in zip(types, kwargs) if t == "sliding_attention"]
    assert set(types) <= {"full_attention", "sliding_attention"}, types
    return min(windows) if windows else None


@pytest.mark.parametrize("model_type,extra,window", [
    ("mistral", {}, 4096),                                       # MistralConfig's default (v0.1: 4096)
    ("mistral", {"sliding_window": None}, None),                 # v0.3
    ("phi3", {"sliding_window": 2047, "max_position_embeddings": 4096}, 2047),   # Phi-3-mini-4k
    ("phi3", {}, None),
    ("qwen2", {"sliding_window": 4096}, None),                   # use_sliding_window off: Qwen2Config drops it
    ("qwen2", {"use_sliding_window": True, "sliding_window": 1024, "max_window_layers": 1}, 1024),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 1024, "max_window_layers": 2}, None),  # no layer >= 2
    ("qwen3", {"use_sliding_window": True, "sliding_window": 1024, "max_window_layers": 0}, 1024),
])
def test_sliding_window_is_what_transformers_applies(model_type, extra, window):
    config = AutoConfig.for_model(**dict(MINIMAL, model_type=model_type, **extra))
    family = family_for(model_type)
    assert family.sliding_window(config) == window == _transformers_window(config)
    # StaticCache builds a sliding layer exactly where the family sees a window.
    layers = StaticCache(config=config, max_cache_len=8).layers
    want = StaticSlidingWindowLayer if window is not None else StaticLayer
    assert any(type(layer) is want for layer in layers)


@pytest.mark.parametrize("model_type,extra,ok", [
    ("mistral", {"sliding_window": 4096, "max_position_embeddings": 32768}, False),   # Mistral-7B-v0.1
    ("mistral", {"sliding_window": 4096, "max_position_embeddings": 4096}, True),     # the window never binds
    ("mistral", {"sliding_window": None, "max_position_embeddings": 32768}, True),    # v0.3
    ("phi3", {"sliding_window": 2047, "max_position_embeddings": 4096}, False),       # Phi-3-mini-4k
    ("qwen2", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 1,
               "max_position_embeddings": 32768}, False),
    ("qwen2", {"use_sliding_window": False, "sliding_window": 4096, "max_position_embeddings": 32768}, True),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0}, False),
])
def test_window_check(model_type, extra, ok):
    config = AutoConfig.for_model(**dict(MINIMAL, model_type=model_type, **extra))
    family = family_for(model_type)
    if ok:
        family.check_window(config)
        return
    window = family.sliding_window(config)
    with pytest.raises(UnsupportedConfig, match=f"sliding_window {window} with max_position_embeddings") as e:
        family.check_window(config)
    assert family.window_off in str(e.value)
    family.shape(config)  # the shape (and so the plan) does not depend on the window


def test_phi3_mini_4k_window_refusal_says_how_to_proceed():
    family = family_for("phi3")
    with pytest.raises(UnsupportedConfig) as e:
        family.check_window(_dict("phi-3-mini-4k"))
    msg = str(e.value)
    assert "sliding_window 2047 with max_position_embeddings 4096" in msg
    assert "model.config.sliding_window = None" in msg and "exceeds 2047 positions" in msg


def _tiny(model_type, **extra):
    from parity_helpers import family_config, tiny_model
    return tiny_model(family_config(model_type, 128, 2, 1, 64, 256, 1, vocab=256, **extra))


def _untouched(model):
    assert not tiles_ext.integrations.is_patched(model)
    assert "forward" not in model.__dict__ and "generate" not in model.__dict__
    assert not [k for k in model.__dict__ if "tiles" in k]


def test_patch_refuses_a_window_the_cache_can_outgrow_and_leaves_the_model_untouched():
    model = _tiny("phi3", sliding_window=16, max_position_embeddings=64)
    with pytest.raises(UnsupportedConfig, match="sliding_window 16 with max_position_embeddings 64"):
        tiles_ext.patch(model, plan_cache_dir=False)
    _untouched(model)
    # The documented way on: no window (every sequence of this test stays within 16 positions).
    model.config.sliding_window = None
    tiles_ext.patch(model, plan_cache_dir=False)
    assert tiles_ext.integrations.is_patched(model)
    tiles_ext.unpatch(model)


@pytest.mark.parametrize("model_type,change,fragment", [
    ("phi3", {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32,
                               "original_max_position_embeddings": 4096}, "max_position_embeddings": 131072},
     "rope_type 'longrope' .Transformers switches from the short to the long"),   # Phi-3-mini-128k, Phi-3.5-mini
    ("phi3", {"rope_scaling": {"type": "su", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32}},
     "rope_type 'su' .Phi3Config reads it as 'longrope'"),
    ("phi3", {"partial_rotary_factor": 0.75}, "partial_rotary_factor 0.75"),        # Phi-4-mini
    ("qwen3", {"attention_bias": True}, "attention_bias=True"),
    ("qwen2", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic' .Transformers recomputes"),
    ("mistral", {"head_dim": 32}, "head_dim 32 .supported: 64, 96, 128"),
    ("qwen2", {"hidden_act": "gelu"}, "hidden_act 'gelu'"),
])
def test_refusals_name_the_field(model_type, change, fragment):
    d = dict(MINIMAL, model_type=model_type, head_dim=64)
    d.update(change)
    with pytest.raises(UnsupportedConfig, match=fragment):
        shape_of(d)


def test_phi4_mini_config_object_is_refused_by_name():
    """Phi-4-mini's config (longrope and partial_rotary_factor 0.75) as Transformers reads it."""
    d = dict(model_type="phi3", hidden_size=3072, num_attention_heads=24, num_key_value_heads=8,
             intermediate_size=8192, num_hidden_layers=2, vocab_size=200064, partial_rotary_factor=0.75,
             max_position_embeddings=131072, original_max_position_embeddings=4096, tie_word_embeddings=True,
             rope_scaling={"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48})
    with pytest.raises(UnsupportedConfig) as e:
        shape_of(AutoConfig.for_model(**d))
    assert "partial_rotary_factor 0.75" in str(e.value) and "rope_type 'longrope'" in str(e.value)


def test_other_model_types_list_the_served_ones():
    with pytest.raises(UnsupportedConfig) as e:
        shape_of(dict(MINIMAL, model_type="gemma"))
    msg = str(e.value)
    assert "model_type 'gemma' is not supported" in msg
    for t in ("llama", "qwen2", "qwen3", "mistral", "phi3"):
        assert f"{t} (" in msg, t
    assert set(families.SERVED_MODEL_TYPES) == {"llama", "qwen2", "qwen3", "mistral", "phi3"}


def test_patch_refuses_an_unserved_model_untouched():
    from tiles_ext.integrations import UnsupportedModelError
    config = AutoConfig.for_model("gemma", hidden_size=64, intermediate_size=128, num_attention_heads=2,
                                  num_key_value_heads=1, head_dim=32, num_hidden_layers=1, vocab_size=128)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    with pytest.raises(UnsupportedModelError, match="qwen2, .*phi3|supported model types: llama"):
        tiles_ext.patch(model, plan_cache_dir=False)
    _untouched(model)


# --------------------------------------------------------------------------- where the weights live


def _shape_and_weights(model):
    family = family_for(model.config.model_type)
    shape = family.shape(model.config)
    return shape, family.weights(model, shape)


def test_phi3_fused_weights_are_row_views_in_place():
    """q, k, v are rows of qkv_proj in that order and gate, up rows of gate_up_proj (Phi3Attention slices
    qkv[..., :q], [q:q+kv], [q+kv:]; Phi3MLP chunks gate, up): views of the parameter, never copies."""
    from parity_helpers import family_config, tiny_model
    model = tiny_model(family_config("phi3", 192, 2, 1, 96, 256, 2, vocab=256))
    shape, weights = _shape_and_weights(model)
    from tiles_ext.planner.weights import WeightLayout
    index = WeightLayout(shape).index
    for layer in range(2):
        attn, mlp = model.model.layers[layer].self_attn, model.model.layers[layer].mlp
        qkv, gate_up = attn.qkv_proj.weight, mlp.gate_up_proj.weight
        q, k, v = (weights[index(layer, s)] for s in ("q", "k", "v"))
        gate, up = (weights[index(layer, s)] for s in ("gate", "up"))
        assert torch.equal(torch.cat([q, k, v]), qkv) and torch.equal(torch.cat([gate, up]), gate_up)
        assert q.shape == (shape.q_dim, 192) and k.shape == v.shape == (shape.kv_dim, 192)
        for t, base in ((q, qkv), (k, qkv), (v, qkv), (gate, gate_up), (up, gate_up)):
            assert t.is_contiguous() and t.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        # The module's own split agrees with the slot rows (the order Transformers uses).
        h = torch.randn(1, 192, dtype=torch.bfloat16)
        out = attn.qkv_proj(h)
        torch.testing.assert_close(out[:, shape.q_dim:shape.q_dim + shape.kv_dim], h @ k.t())
        g, u = mlp.gate_up_proj(h).chunk(2, dim=-1)
        torch.testing.assert_close(g, h @ gate.t())
        torch.testing.assert_close(u, h @ up.t())


@pytest.mark.parametrize("model_type,slots,param", [
    ("qwen2", ("q_bias", "k_bias", "v_bias"), lambda a: (a.q_proj.bias, a.k_proj.bias, a.v_proj.bias)),
    ("qwen3", ("q_norm", "k_norm"), lambda a: (a.q_norm.weight, a.k_norm.weight)),
])
def test_feature_weights_are_the_modules_own(model_type, slots, param):
    from parity_helpers import family_config, tiny_model
    model = tiny_model(family_config(model_type, 128, 4, 2, 64, 256, 2, vocab=256))
    shape, weights = _shape_and_weights(model)
    from tiles_ext.planner.weights import WeightLayout
    index = WeightLayout(shape).index
    for layer in range(2):
        for slot, p in zip(slots, param(model.model.layers[layer].self_attn)):
            assert weights[index(layer, slot)].data_ptr() == p.data_ptr(), (layer, slot)


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("head_dim", [64, 96, 128])
@pytest.mark.parametrize("group", range(1, 9))
def test_gqa_and_head_dims_plan_and_validate(group, head_dim):
    """Every GQA ratio 1-8 with each served head_dim, q width != hidden, on the CPU's 8 workers and 132."""
    kv = 2
    shape = ModelShape(num_layers=2, hidden=256, num_heads=kv * group, num_kv_heads=kv, head_dim=head_dim,
                       intermediate=512, vocab=1000, eps=1e-6, tied_lm_head=False, rope_type="default",
                       rope_theta=1e6, qkv_bias=group % 2 == 1, qk_norm=group % 2 == 0)
    for workers, gpu in ((8, GpuTarget()), (132, H200)):
        build_plan(shape, workers, gpu=gpu)
