"""A patched model under what users do to models: copies (deepcopy, copy.copy, pickle, save_pretrained) and
weights that change after patch() (in place, replaced, resized, re-tied, loaded with assign=True, cast away from
bfloat16 and back). CPU op, tiny random Llama models.

The rule for weights (tiles_ext.patch's docstring): in-place edits reach the op by construction; any other change is
found before the next decode step (once per generate() call, once per eager forward() outside generate) and
re-bound, re-planned, or refused by name. Never silently ignored: after each change the patched model must give
exactly what a model freshly patched from the same weights gives (same op, same weights: bit-identical).
"""
from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from transformers import LlamaForCausalLM, StaticCache

import tiles_ext
from integration_support import CACHE, count_op_calls, patched_copy, steps_executed, tiny_config
from tiles_ext.integrations import UnsupportedModelError, is_patched, patch_state
from tiles_ext.integrations.bindings import Bindings
from tiles_ext.models import random_model

PROMPT = torch.tensor([[1, 17, 42, 99, 7, 300]])
FED = (5, 77, 300, 2)


@pytest.fixture(scope="module")
def tiny():
    return random_model(tiny_config(), seed=3)


def fresh(model):
    """A model freshly patched from `model`'s current config, weights and buffers (RoPE's inv_freq is not in the
    state dict, and model.to(torch.bfloat16) rounds it), built without copying `model` itself."""
    config = copy.deepcopy(model.config)
    config.tie_word_embeddings = model.lm_head.weight is model.model.embed_tokens.weight
    clone = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16).eval()
    clone.load_state_dict(model.state_dict())
    for name, buf in model.named_buffers():
        owner, _, attr = name.rpartition(".")
        clone.get_submodule(owner)._buffers[attr] = buf.detach().clone()
    return tiles_ext.patch(clone, plan_cache_dir=False)


def decode_logits(model, prompt=PROMPT, fed=FED):
    """Teacher-forced decode-step logits of a user's own loop (bare forward calls on a StaticCache)."""
    cache = StaticCache(config=model.config, max_cache_len=prompt.shape[1] + len(fed) + 1)
    with torch.no_grad():
        model(prompt, **{CACHE: cache})
        return torch.cat([model(torch.tensor([[t]]), **{CACHE: cache}).logits for t in fed])


def generated(model, n=6):
    out = model.generate(PROMPT, max_new_tokens=n, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                         output_logits=True)
    return out.sequences, torch.cat(out.logits)


def assert_same_as_fresh(model, note):
    """Decode steps of `model`, in generate() and in a bare loop, equal those of a freshly patched model."""
    ref = fresh(model)
    before = steps_executed(model)
    got_seq, got_logits = generated(model)
    want_seq, want_logits = generated(ref)
    assert steps_executed(model) == before + 5, f"{note}: generate did not decode on the op"
    assert torch.equal(got_seq, want_seq), f"{note}: tokens differ from a freshly patched model"
    assert torch.equal(got_logits, want_logits), f"{note}: logits differ from a freshly patched model"
    assert torch.equal(decode_logits(model), decode_logits(ref)), f"{note}: bare forward differs"


# ---------------------------------------------------------------------------------------------- copies


def test_deepcopy_is_a_patched_model_of_its_own(tiny):
    model = patched_copy(tiny)
    clone = copy.deepcopy(model)
    assert is_patched(clone)
    assert clone.forward.__self__ is clone and clone.generate.__self__ is clone
    a, b = patch_state(model), patch_state(clone)
    assert a is not b and a.decoder is not b.decoder
    assert b.decoder.plan is a.decoder.plan  # the plan is immutable: shared
    for x, y in ((a.decoder.runtime.scratch, b.decoder.runtime.scratch),
                 (a.decoder.runtime.state, b.decoder.runtime.state)):
        assert x.data_ptr() != y.data_ptr()  # scratch and state words are per model
    # Bound to the copy's own weights, ready at once (no re-bind at its first call).
    assert b.decoder.bindings is not None and b.decoder.bindings.current()
    assert b.decoder.weights[-1].data_ptr() == clone.model.embed_tokens.weight.data_ptr()
    assert b.decoder.weights[-1].data_ptr() != model.model.embed_tokens.weight.data_ptr()

    want = decode_logits(model)
    with torch.no_grad():
        clone.model.embed_tokens.weight.zero_()
    before = steps_executed(model), steps_executed(clone)
    got = decode_logits(clone)
    assert steps_executed(model) == before[0] and steps_executed(clone) == before[1] + len(FED)
    assert not torch.equal(got, want)
    assert torch.equal(decode_logits(model), want)  # the original is untouched
    assert torch.equal(got, decode_logits(fresh(clone)))


def test_deepcopy_runs_its_own_forward(tiny, monkeypatch):
    # The copy's forward is its own: an attention implementation set on the copy is the one its prefill uses.
    from transformers.models.llama import modeling_llama
    model = patched_copy(tiny)
    clone = copy.deepcopy(model)
    clone.set_attn_implementation("eager")
    calls = []
    eager = modeling_llama.eager_attention_forward
    monkeypatch.setattr(modeling_llama, "eager_attention_forward", lambda *a, **k: calls.append(1) or eager(*a, **k))
    with torch.no_grad():
        model(PROMPT)
        assert not calls and model.config._attn_implementation != "eager"
        clone(PROMPT)
    assert len(calls) == tiny.config.num_hidden_layers


def test_unpatch_works_on_a_copy(tiny):
    model = patched_copy(tiny)
    clone = tiles_ext.unpatch(copy.deepcopy(model))
    plain = copy.deepcopy(tiny)
    assert not is_patched(clone) and is_patched(model)
    assert set(clone.__dict__) == set(plain.__dict__)
    assert clone.forward.__func__ is type(clone).forward and clone.generate.__func__ is type(clone).generate
    with torch.no_grad():
        assert torch.equal(clone(PROMPT).logits, plain(PROMPT).logits)
    with count_op_calls() as ops:
        out = clone.generate(PROMPT, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert ops["calls"] == 0
    assert torch.equal(out, plain.generate(PROMPT, max_new_tokens=3, do_sample=False, pad_token_id=0))


def test_deepcopy_after_compiled_generate_compiles_its_own(tiny):
    # generate() keeps a compiled __call__ of the instance; a copy must not inherit the original's.
    from transformers import CompileConfig
    torch._dynamo.reset()
    model = patched_copy(tiny)
    config = copy.deepcopy(model.generation_config)
    config.compile_config = CompileConfig(backend="aot_eager", fullgraph=True)
    config.compile_config._compile_all_devices = True
    kw = dict(generation_config=config, max_new_tokens=4, do_sample=False, pad_token_id=0)
    want = model.generate(PROMPT, **kw)
    assert "_compiled_call" in model.__dict__
    clone = copy.deepcopy(model)
    assert "_compiled_call" not in clone.__dict__
    before = steps_executed(model), steps_executed(clone)
    assert torch.equal(clone.generate(PROMPT, **kw), want)
    assert steps_executed(model) == before[0] and steps_executed(clone) == before[1] + 3
    assert clone.__dict__["_compiled_call"] is not model.__dict__["_compiled_call"]


@pytest.mark.parametrize("how", ["torch.save", "pickle", "copy.copy"])
def test_pickle_and_shallow_copy_give_the_plain_model(tiny, how):
    model = patched_copy(tiny)
    if how == "torch.save":
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
    elif how == "pickle":
        loaded = pickle.loads(pickle.dumps(model))
    else:
        loaded = copy.copy(model)
        assert loaded.lm_head.weight is model.lm_head.weight  # shallow: the same parameters
    assert not is_patched(loaded) and is_patched(model)
    assert set(loaded.__dict__) == set(tiny.__dict__)
    assert loaded.forward.__func__ is type(loaded).forward
    with count_op_calls() as ops:
        out = loaded.generate(PROMPT, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert ops["calls"] == 0
    assert torch.equal(out, tiny.generate(PROMPT, max_new_tokens=3, do_sample=False, pad_token_id=0))
    assert steps_executed(tiles_ext.patch(loaded, plan_cache_dir=False)) == 0  # patches again like any model


def test_save_pretrained_saves_the_plain_model(tiny, tmp_path):
    model = patched_copy(tiny)
    model.save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert not is_patched(loaded) and is_patched(model)
    want = tiny.state_dict()
    got = loaded.state_dict()
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert torch.equal(decode_logits(model), decode_logits(tiles_ext.patch(loaded, plan_cache_dir=False)))


# ---------------------------------------------------------------------------------------------- weights


def test_in_place_edits_reach_the_op_without_a_rebind(tiny):
    model = patched_copy(tiny)
    bindings = patch_state(model).decoder.bindings
    before = decode_logits(model)
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)
        model.model.layers[0].mlp.down_proj.weight.add_(0.01)
    model.load_state_dict(model.state_dict())  # assign=False copies into the same storage
    assert patch_state(model).decoder.bindings is bindings and bindings.current()
    assert not torch.equal(decode_logits(model), before)
    assert_same_as_fresh(model, "in place")
    assert patch_state(model).decoder.bindings is bindings


def test_a_replaced_parameter_is_rebound(tiny):
    model = patched_copy(tiny)
    plan = patch_state(model).decoder.plan
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    assert not patch_state(model).decoder.bindings.current()
    assert patch_state(model).decoder.bindings.changed(model) == ["lm_head.weight"]
    assert_same_as_fresh(model, "replaced lm_head.weight")
    assert patch_state(model).decoder.plan is plan  # same shapes: re-bound, not re-planned
    # A replaced module (a new Linear in place of one projection) is found the same way.
    old = model.model.layers[1].self_attn.o_proj
    new = torch.nn.Linear(old.in_features, old.out_features, bias=False, dtype=torch.bfloat16)
    model.model.layers[1].self_attn.o_proj = new
    assert_same_as_fresh(model, "replaced o_proj module")


def test_a_bare_forward_rebinds_too(tiny):
    model = patched_copy(tiny)
    decode_logits(model)
    model.model.norm.weight = torch.nn.Parameter(model.model.norm.weight.detach() * 3)
    assert torch.equal(decode_logits(model), decode_logits(fresh(model)))


def test_resize_token_embeddings_replans(tiny):
    model = patched_copy(tiny)
    model.resize_token_embeddings(640, mean_resizing=False)
    assert_same_as_fresh(model, "resized")
    plan = patch_state(model).decoder.plan
    assert plan.shape.vocab == 640 and generated(model)[1].shape[-1] == 640


def test_load_state_dict_with_assign_rebinds(tiny):
    model = patched_copy(tiny)
    state = {k: v.detach().clone() * 1.25 for k, v in tiny.state_dict().items()}
    model.load_state_dict(state, assign=True)
    assert_same_as_fresh(model, "load_state_dict(assign=True)")


def test_tying_and_untying_rebinds():
    tied = random_model(tiny_config(tie_word_embeddings=True), seed=4)
    model = tiles_ext.patch(tied, plan_cache_dir=False)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() * 0.5)  # untied
    assert_same_as_fresh(model, "untied")
    model.lm_head.weight = model.model.embed_tokens.weight  # tied again
    assert_same_as_fresh(model, "re-tied")


def test_dtype_changes_are_refused_until_bfloat16_again(tiny):
    model = patched_copy(tiny)
    model.to(torch.float32)
    with pytest.raises(UnsupportedModelError, match=r"changed after patch\(\).*float32.*model\.to\(torch\.bfloat16\)"
                                                    r".*tiles_ext\.unpatch\(model\)"):
        model.generate(PROMPT, max_new_tokens=3, do_sample=False, pad_token_id=0)
    with pytest.raises(UnsupportedModelError, match="changed after patch"):  # refused every time, never served
        model.generate(PROMPT, max_new_tokens=3, do_sample=False, pad_token_id=0)
    model.to(torch.bfloat16)  # (Transformers' cast rounds the RoPE frequencies to bf16 too; the op follows)
    assert model.model.rotary_emb.inv_freq.dtype == torch.bfloat16
    assert_same_as_fresh(model, "bf16 again")


def test_the_check_runs_once_per_generate_call(tiny, monkeypatch):
    model = patched_copy(tiny)
    checks = []
    current = Bindings.current
    monkeypatch.setattr(Bindings, "current", lambda self: checks.append(1) or current(self))
    model.generate(PROMPT, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert len(checks) == 1  # not per token: 7 decode steps ran
    checks.clear()
    decode_logits(model)
    assert len(checks) == len(FED)  # a bare forward outside generate: once per call


def test_binding_check_costs_host_metadata_only(tiny):
    # The check reads no tensor data: it passes on a model whose weights live on the meta device.
    with torch.device("meta"):
        meta = type(tiny)(tiny_config()).to(torch.bfloat16)
    from tiles_ext.families import family_for
    from tiles_ext.integrations.bindings import weight_paths
    shape = family_for("llama").shape(meta.config)
    bindings = Bindings(meta, weight_paths(family_for("llama"), shape))
    assert bindings.current()
    meta.lm_head.weight = torch.nn.Parameter(torch.empty_like(meta.lm_head.weight))
    assert not bindings.current()


def test_a_bare_decode_step_reads_no_tensor_value(tiny, monkeypatch):
    # What makes a host sync on CUDA is reading a tensor's value from Python: after the first step (which reads the
    # counter the prefill moved), a bare decode step, its binding check included, reads none.
    # (tests/test_integration_cuda.py checks the same with torch.cuda.set_sync_debug_mode.)
    model = patched_copy(tiny)
    cache = StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        out = model(PROMPT, **{CACHE: cache})
        token = out.logits[:, -1:].argmax(-1)
        out = model(token, **{CACHE: cache})
        token = out.logits[:, -1:].argmax(-1)
        reads = []
        for name in ("item", "tolist", "__bool__", "__int__", "__index__", "__float__"):
            real = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name,
                                lambda self, *a, _real=real, _name=name: reads.append(_name) or _real(self, *a))
        for _ in range(3):
            out = model(token, **{CACHE: cache})
            token = out.logits[:, -1:].argmax(-1)
        monkeypatch.undo()
    assert reads == []
    assert int(cache.get_seq_length()) == PROMPT.shape[1] + 4


def test_a_device_the_op_cannot_run_is_refused_by_name(tiny):
    model = patched_copy(tiny)
    model.to("meta")
    with pytest.raises(UnsupportedModelError, match=r"changed after patch\(\).*is on meta; supported devices: cpu, "
                                                    r"cuda.*tiles_ext\.unpatch\(model\)"):
        model.generate(PROMPT.to("meta"), max_new_tokens=2, do_sample=False, pad_token_id=0)


def test_a_replaced_module_of_another_shape_is_refused_by_name(tiny):
    model = patched_copy(tiny)
    model.lm_head = torch.nn.Linear(128, 600, bias=False, dtype=torch.bfloat16)  # the config still says 512
    with pytest.raises(UnsupportedModelError, match=r"changed after patch\(\).*\(lm_head\).*\(600, 128\); the plan "
                                                    r"needs contiguous bfloat16 \(512, 128\).*resize_token_embeddings"):
        model.generate(PROMPT, max_new_tokens=2, do_sample=False, pad_token_id=0)
