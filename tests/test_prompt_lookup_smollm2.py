"""Greedy prompt lookup inside the op on the real SmolLM2-135M-Instruct (CPU executor), on a copy-heavy chat prompt
(repeat a paragraph): the tokens of plain greedy of the patched model and of the unpatched model (up to BF16 ties),
and exactly as many rounds as Transformers' own prompt-lookup loop runs forward calls on the same tokens."""
from __future__ import annotations

import warnings

import pytest
import torch

from integration_support import assert_greedy_match, patched_copy
from test_prompt_lookup_op import transformers_rounds
from tiles_ext.integrations import TilesFallbackWarning, patch_state

PARAGRAPH = ("The river bends twice before it reaches the town. At the first bend stands an old mill, and at the "
             "second a stone bridge that the children cross every morning on their way to school.")
NEW = 40


@pytest.fixture(scope="module")
def prompt(default_model):
    _, tok = default_model
    messages = [{"role": "user", "content": f"Repeat this paragraph word for word:\n\n{PARAGRAPH}"}]
    return tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                   return_dict=True)["input_ids"]


@pytest.mark.parametrize("k", [3, 7])
def test_smollm2_prompt_lookup_in_the_op(default_model, prompt, k):
    model, tok = default_model
    main = patched_copy(model)
    kw = dict(max_new_tokens=NEW, do_sample=False)
    plain = main.generate(prompt, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)
        got = main.generate(prompt, prompt_lookup_num_tokens=k, **kw)
    state = patch_state(main)
    assert state.lookup_fallback is None
    assert torch.equal(got, plain)
    assert_greedy_match(model, prompt, model.generate(prompt, **kw), got, f"SmolLM2 k={k}")
    loop = patched_copy(model, multi_token=False)  # Transformers' loop, each round one op pass
    want, calls = transformers_rounds(loop, prompt, k, NEW)
    assert torch.equal(want, got)
    assert state.lookup_rounds == calls
    assert calls <= NEW // 2, (calls, tok.decode(got[0, prompt.shape[1]:]))  # the copy is drafted and accepted
