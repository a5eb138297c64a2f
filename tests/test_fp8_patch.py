"""patch(weights="fp8") and FP8 checkpoints: quantizing a BF16 model in place and restoring it exactly, serving an
FP8 checkpoint as stored, and the refusals, each leaving the model untouched. CPU op, tiny random Llama models."""
import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

import tiles_ext
from fp8_checkpoints import write_fp8_checkpoint
from fp8_support import dequantized_twin, quantized_paths
from parity_helpers import rel_err, tiny_config, tiny_model
from tiles_ext.fp8 import Fp8Linear
from tiles_ext.integrations import UnsupportedModelError, causal_lm
from tiles_ext.models import load_model

IDS = torch.tensor([[1, 17, 42, 99, 5, 300]])


@pytest.fixture
def tiny():
    return tiny_model(tiny_config(256, 4, 2, 64, 512, 2, tied=True))


def decode_logits(model, steps=12):
    """The op's logits of `steps` greedy decode steps after IDS, and the sequence."""
    out = model.generate(IDS, max_new_tokens=steps + 1, do_sample=False, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
    return torch.cat(out.logits[1:]), out.sequences


def reference_error(model_fp8, logits, sequences) -> float:
    """The op's logits against Transformers fp32 on the same dequantized weights."""
    with torch.no_grad():
        ref = dequantized_twin(model_fp8)(sequences).logits[0, IDS.shape[1]:-1]
    return rel_err(logits, ref)


def snapshot(model):
    return {name: (module, {k: v.clone() for k, v in module.state_dict().items()})
            for name, module in model.named_modules()}


def assert_same(model, before):
    now = dict(model.named_modules())
    assert now.keys() == before.keys()
    for name, (module, state) in before.items():
        assert now[name] is module, name
        assert all(torch.equal(state[k], v) for k, v in module.state_dict().items()), name


def test_patch_fp8_quantizes_in_place_and_unpatch_restores_exactly(tiny):
    before = snapshot(tiny)
    with torch.no_grad():
        want = tiny(IDS).logits
    tiles_ext.patch(tiny, weights="fp8", plan_cache_dir=False)
    assert all(isinstance(tiny.get_submodule(p), Fp8Linear) for p in quantized_paths(tiny))
    assert tiny._tiles.decoder.plan.shape.weight_format == "fp8"
    logits, seq = decode_logits(tiny)
    assert reference_error(tiny, logits, seq) < 0.02
    tiles_ext.unpatch(tiny)
    assert_same(tiny, before)
    with torch.no_grad():
        assert torch.equal(tiny(IDS).logits, want)


def test_patch_fp8_prefill_uses_the_dequantized_weights_exactly(tiny):
    """Power-of-two scales: the BF16 dequantized weight is float(q) * scale exactly, the op's value."""
    tiles_ext.patch(tiny, weights="fp8", plan_cache_dir=False)
    layer = tiny.model.layers[0].mlp.down_proj
    w = layer.weight.float() * layer.weight_scale_inv[:, None]
    assert torch.equal(w.to(torch.bfloat16).float(), w)


@pytest.mark.parametrize("bad", ["FP8", "int8", "bf16", 8])
def test_unknown_weights_value_is_refused_before_anything_changes(tiny, bad):
    before = snapshot(tiny)
    with pytest.raises(UnsupportedModelError, match=rf"weights={bad!r} is not a weight option; use weights=None"):
        tiles_ext.patch(tiny, weights=bad, plan_cache_dir=False)
    assert_same(tiny, before)
    assert not tiles_ext.integrations.is_patched(tiny)


def test_partly_quantized_model_is_refused(tiny):
    path = quantized_paths(tiny)[3]
    parent, _, name = path.rpartition(".")
    from tiles_ext.fp8 import quantize_per_channel
    linear = tiny.get_submodule(path)
    setattr(tiny.get_submodule(parent), name, Fp8Linear(*quantize_per_channel(linear.weight)))
    before = snapshot(tiny)
    for weights in (None, "fp8"):
        with pytest.raises(UnsupportedModelError, match=r"partly or unservably quantized \(not FP8: 13 layers .*; fp8: "
                                                        r"1 layers \(e\.g\. model\.layers\.0\.self_attn\.o_proj\)"):
            tiles_ext.patch(tiny, weights=weights, plan_cache_dir=False)
        assert_same(tiny, before)


def test_fp8_on_a_gpu_without_fp8_conversions_is_refused(tiny, monkeypatch):
    """E4M3 conversions need compute capability 8.9: an older GPU is refused by name before the model is
    quantized."""
    before = snapshot(tiny)
    monkeypatch.setattr(causal_lm, "model_device", lambda model, weight_format="bf16": torch.device("cuda", 0))
    monkeypatch.setattr(causal_lm, "device_capability", lambda device: (8, 0))
    with pytest.raises(UnsupportedModelError, match=r"cuda:0 \(compute capability 8\.0\) with FP8 weights, but that "
                                                    r"GPU has no FP8 conversion instructions"):
        tiles_ext.patch(tiny, weights="fp8", plan_cache_dir=False)
    assert_same(tiny, before)


@pytest.mark.parametrize("weight_format", ["fp8_block128", "fp8"])
def test_fp8_checkpoint_is_patched_as_stored(tiny, tmp_path, weight_format):
    """load_model keeps the checkpoint's E4M3 layers (Transformers' FP8Linear for block scales, Fp8Linear for FBGEMM
    per-row scales); patch serves them without a BF16 copy: the op's weights are the layers' own tensors."""
    written = write_fp8_checkpoint(tiny, weight_format, tmp_path)
    model, tokenizer = load_model(tmp_path)
    assert tokenizer is None
    q, stored = model.model.layers[0].self_attn.q_proj, written.model.layers[0].self_attn.q_proj
    assert q.weight.dtype == torch.float8_e4m3fn
    assert torch.equal(q.weight.view(torch.uint8), stored.weight.view(torch.uint8))
    tiles_ext.patch(model, plan_cache_dir=False)
    assert model._tiles.decoder.plan.shape.weight_format == weight_format
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert all(w.untyped_storage().data_ptr() in storages for w in model._tiles.decoder.weights)
    logits, seq = decode_logits(model)
    assert reference_error(written, logits, seq) < 0.02
    tiles_ext.unpatch(model)
    assert "forward" not in q.__dict__


def test_transformers_dequantizes_a_fine_grained_fp8_checkpoint_on_a_cpu(tiny, tmp_path):
    """Why load_model builds FP8 checkpoints itself: from_pretrained on a machine without a GPU gives BF16 layers
    (Transformers 5.25), which patch serves as BF16."""
    write_fp8_checkpoint(tiny, "fp8_block128", tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16


def test_casting_a_patched_fp8_model_is_refused_at_the_next_step(tiny):
    """model.to(dtype) casts the E4M3 weights too (they are floating point); the next decode step refuses the model
    instead of running BF16 matrices without their scales."""
    tiles_ext.patch(tiny, weights="fp8", plan_cache_dir=False)
    tiny.to(torch.bfloat16)
    with pytest.raises(UnsupportedModelError, match=r"changed after patch\(\).*bfloat16 weights beside "
                                                    r"weight_scale_inv \(an FP8 layer whose weight was cast"):
        decode_logits(tiny, steps=1)


def test_deepcopy_of_a_patched_fp8_model_runs_on_its_own_layers(tiny):
    tiles_ext.patch(tiny, weights="fp8", plan_cache_dir=False)
    clone = copy.deepcopy(tiny)
    assert clone.model.layers[0].mlp.up_proj is not tiny.model.layers[0].mlp.up_proj
    assert torch.equal(decode_logits(clone)[0], decode_logits(tiny)[0])
    tiles_ext.unpatch(clone)
    assert type(clone.model.layers[0].mlp.up_proj) is torch.nn.Linear


def test_deepcopy_of_a_patched_fp8_checkpoint_unpatches_its_own_layers(tiny, tmp_path):
    """The prefill forwards patch gives a checkpoint's FP8Linear layers belong to the copy's layers in a deep copy:
    unpatch(copy) takes them off the copy and leaves the original patched model as it was."""
    write_fp8_checkpoint(tiny, "fp8_block128", tmp_path)
    model, _ = load_model(tmp_path)
    tiles_ext.patch(model, plan_cache_dir=False)
    expected = decode_logits(model)[0]
    clone = copy.deepcopy(model)
    assert torch.equal(decode_logits(clone)[0], expected)
    tiles_ext.unpatch(clone)
    assert not any("forward" in m.__dict__ for m in clone.modules())
    assert torch.equal(decode_logits(model)[0], expected)
    tiles_ext.unpatch(model)
    assert not any("forward" in m.__dict__ for m in model.modules())


@pytest.mark.parametrize("source", ["patch_fp8", "checkpoint"])
def test_torch_save_of_a_patched_fp8_model_loads_as_the_plain_fp8_model(tiny, tmp_path, source):
    """torch.save of a patched FP8 model gives the plain model with its E4M3 layers (the same bits), whose PyTorch
    forward dequantizes; patching the loaded model serves it on the op again with the same logits."""
    if source == "checkpoint":
        write_fp8_checkpoint(tiny, "fp8_block128", tmp_path)
        model, _ = load_model(tmp_path)
        tiles_ext.patch(model, plan_cache_dir=False)
    else:
        model = tiles_ext.patch(tiny, weights="fp8", plan_cache_dir=False)
    expected = decode_logits(model)[0]
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    assert not tiles_ext.integrations.is_patched(loaded)
    q, stored = loaded.model.layers[0].self_attn.q_proj, model.model.layers[0].self_attn.q_proj
    assert q.weight.dtype == torch.float8_e4m3fn
    assert torch.equal(q.weight.view(torch.uint8), stored.weight.view(torch.uint8))
    with torch.no_grad():
        prefill = loaded(IDS).logits
    assert torch.isfinite(prefill).all()
    tiles_ext.patch(loaded, plan_cache_dir=False)
    assert torch.equal(decode_logits(loaded)[0], expected)
