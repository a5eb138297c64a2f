"""A user's checkpoint of each family: a small random model saved with save_pretrained, loaded back with
tiles_ext.models.load_model, patched and generating like the unpatched model (every decode step through the op)."""
from __future__ import annotations

import pytest
import torch

import tiles_ext
from integration_support import assert_greedy_match, count_op_calls
from parity_helpers import family_config, tiny_model
from tiles_ext.models import load_model

NEW = 8

# model_type: (hidden, heads, kv, head_dim, intermediate, layers, tied)
CHECKPOINTS = {
    "llama": (128, 4, 2, 64, 256, 2, False),
    "qwen2": (448, 7, 1, 64, 256, 2, True),    # GQA 7, tied head
    "qwen3": (128, 4, 2, 64, 256, 2, False),   # q width 256 != hidden 128
    "mistral": (256, 2, 1, 128, 256, 2, False),
    "phi3": (192, 2, 2, 96, 256, 2, False),
}


@pytest.mark.parametrize("model_type", list(CHECKPOINTS))
def test_saved_checkpoint_loads_patches_and_generates(model_type, tmp_path):
    h, nh, kv, hd, inter, layers, tied = CHECKPOINTS[model_type]
    source = tiny_model(family_config(model_type, h, nh, kv, hd, inter, layers, vocab=512, tied=tied,
                                      sliding_window=None), seed=3)
    source.save_pretrained(tmp_path)
    model, tokenizer = load_model(tmp_path)
    assert tokenizer is None and type(model) is type(source) and model.dtype == torch.bfloat16
    src, got = source.state_dict(), model.state_dict()
    assert src.keys() == got.keys() and all(torch.equal(src[k], got[k]) for k in src)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    prompt = torch.randint(0, 512, (1, 5), generator=torch.Generator().manual_seed(6))
    kw = dict(max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        ref = model.generate(prompt, **kw)
    tiles_ext.patch(model, plan_cache_dir=False)
    with count_op_calls() as ops:
        out = model.generate(prompt, **kw)
    assert ops["calls"] == NEW - 1  # the first new token comes from the PyTorch prefill
    assert_greedy_match(source, prompt, ref, out, f"{model_type} checkpoint")
