"""generate() on a patched SmolLM2-135M (CPU op) against the unpatched model: what users expect keeps working.

Decode steps run through tiles::decode_step; each test compares with the unpatched BF16 model. Greedy tokens must
match, or diverge only at a BF16 tie of the unpatched top-2 logits (integration_support.assert_greedy_match).
"""
from __future__ import annotations

import threading

import pytest
import torch
from transformers import (DynamicCache, LogitsProcessor, LogitsProcessorList, StaticCache, StoppingCriteria,
                          StoppingCriteriaList, TextIteratorStreamer, TextStreamer)

from integration_support import CACHE, assert_greedy_match, assert_logits_near_fp32, count_op_calls, patched_copy
from tiles_ext.integrations import CacheFullError, TilesFallbackWarning

pytestmark = pytest.mark.slow
NEW = 12


@pytest.fixture(scope="module")
def ref_model(default_model):
    return default_model[0]


@pytest.fixture(scope="module")
def tok(default_model):
    return default_model[1]


@pytest.fixture(scope="module")
def patched(default_model):
    return patched_copy(default_model[0])  # CPU default: one token per op launch


@pytest.fixture(scope="module")
def f32_model(ref_model):
    import copy
    return copy.deepcopy(ref_model).float()


@pytest.fixture(scope="module")
def prompt(tok):
    return tok("The capital of France is", return_tensors="pt")


@pytest.fixture(scope="module")
def greedy_ref(ref_model, prompt):
    return ref_model.generate(**prompt, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True,
                              output_scores=True, output_logits=True)


@pytest.fixture(scope="module")
def greedy_tiles(patched, prompt):
    with count_op_calls() as ops:
        out = patched.generate(**prompt, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True,
                               output_scores=True, output_logits=True)
    return out, ops["calls"]


def test_greedy_matches_unpatched(ref_model, f32_model, prompt, greedy_ref, greedy_tiles):
    out, _ = greedy_tiles
    assert_greedy_match(ref_model, prompt["input_ids"], greedy_ref.sequences, out.sequences, "greedy")
    p = prompt["input_ids"].shape[1]
    steps = out.sequences.shape[1] - p
    # output_logits / output_scores: fp32 rows, one per step, the logits generate fed its (empty) processor list.
    assert len(out.logits) == len(out.scores) == steps
    for i in range(steps):
        assert out.logits[i].dtype == torch.float32 and out.logits[i].shape == greedy_ref.logits[0].shape
        assert torch.equal(out.scores[i], out.logits[i])
    # The prefill is PyTorch's on the tile path's StaticCache: bit for bit the unpatched model's on a StaticCache of
    # the same size (some Transformers versions attend over the whole static cache, so a DynamicCache rounds apart).
    static = ref_model.generate(**prompt, max_new_tokens=NEW, do_sample=False, cache_implementation="static",
                                return_dict_in_generate=True, output_logits=True)
    assert torch.equal(out.logits[0], static.logits[0])
    assert_logits_near_fp32(f32_model, ref_model, out.sequences, p, out.logits, "greedy")


def test_every_decode_step_runs_the_op_once(prompt, greedy_tiles):
    out, calls = greedy_tiles
    steps = out.sequences.shape[1] - prompt["input_ids"].shape[1]
    assert calls == steps - 1  # the first new token comes from the PyTorch prefill


def test_generate_without_arguments_and_repeated_calls(patched, prompt, greedy_tiles):
    full = greedy_tiles[0].sequences
    p = prompt["input_ids"].shape[1]
    # Several calls on one model, a shorter one after a longer one: plain generate(**inputs), then
    # cache_implementation="static" with max_length instead of max_new_tokens and no attention mask.
    with count_op_calls() as ops:
        out = patched.generate(**prompt, max_new_tokens=4)
    assert torch.equal(out, full[:, :p + 4])
    assert ops["calls"] == 3
    out = patched.generate(prompt["input_ids"], max_length=p + 3, cache_implementation="static")
    assert torch.equal(out, full[:, :p + 3])


def test_generation_config_argument_keeps_the_tile_path(patched, prompt, greedy_tiles, monkeypatch):
    """A caller's GenerationConfig: the tile path still gets its StaticCache (set on a copy, not as a keyword
    beside the config, which Transformers reports as deprecated), and the caller's object is left as it was."""
    from transformers import GenerationConfig
    from transformers.generation import utils as generation_utils
    said = []
    monkeypatch.setattr(generation_utils.logger, "warning_once", lambda msg, *a, **k: said.append(str(msg)))
    full = greedy_tiles[0].sequences
    p = prompt["input_ids"].shape[1]
    config = GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=patched.generation_config.eos_token_id,
                              pad_token_id=patched.generation_config.pad_token_id)
    with count_op_calls() as ops:
        out = patched.generate(**prompt, generation_config=config)
    assert torch.equal(out, full[:, :p + 4])
    assert ops["calls"] == 3
    assert config.cache_implementation is None
    assert not [m for m in said if "together with generation-related" in m], said


def test_eos_ids_and_stopping_criteria(patched, prompt, greedy_tiles):
    full = greedy_tiles[0].sequences
    p = prompt["input_ids"].shape[1]
    gen = full[0, p:].tolist()
    # Several EOS ids: generation stops right after the first one produced (the unpatched rule).
    eos = [12345, gen[4], 999]
    stop = next(i for i, t in enumerate(gen) if t in eos)
    out = patched.generate(**prompt, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out, full[:, :p + stop + 1])

    class StopAtLength(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= p + 3, dtype=torch.bool)

    # A user stopping criterion together with a single EOS id that comes later.
    out = patched.generate(**prompt, max_new_tokens=NEW, eos_token_id=gen[6], pad_token_id=0,
                           stopping_criteria=StoppingCriteriaList([StopAtLength()]))
    assert torch.equal(out, full[:, :p + min(3, gen.index(gen[6]) + 1)])


def test_sampling(ref_model, f32_model, patched, prompt):
    # Sampling stays generate's own: its warpers process the op's logits, torch.multinomial draws. (Token-for-token
    # equality with the unpatched model is not expected: BF16-close logits can flip a draw.) Checked: every decode
    # step went through the op, the warpers were applied to the op's logits, the draws respect them, and the
    # logits are as close to the fp32 model as the unpatched BF16 model's are.
    kw = dict(do_sample=True, temperature=0.7, top_k=40, top_p=0.9, max_new_tokens=6,
              return_dict_in_generate=True, output_logits=True, output_scores=True)
    torch.manual_seed(1234)
    with count_op_calls() as ops:
        got = patched.generate(**prompt, **kw)
    p = prompt["input_ids"].shape[1]
    steps = got.sequences.shape[1] - p
    assert ops["calls"] == steps - 1
    for i in range(steps):
        kept = torch.isfinite(got.scores[i])
        assert 1 <= int(kept.sum()) <= 40, f"step {i}: top_k not applied"
        assert torch.allclose(got.scores[i][kept], got.logits[i][kept] / 0.7), f"step {i}: temperature not applied"
        assert int(got.sequences[0, p + i]) in kept.nonzero()[:, 1].tolist(), f"step {i}: sampled a filtered token"
    assert_logits_near_fp32(f32_model, ref_model, got.sequences, p, got.logits, "sampling")
    torch.manual_seed(1234)
    again = patched.generate(**prompt, **kw)
    assert torch.equal(again.sequences, got.sequences)  # same seed, same draws: the op is deterministic


def test_repetition_penalty_and_custom_processor(ref_model, patched, prompt):
    seen = []

    class Record(LogitsProcessor):
        def __call__(self, input_ids, scores):
            seen.append(scores.dtype)
            return scores

    kw = dict(max_new_tokens=6, do_sample=False, repetition_penalty=1.3, no_repeat_ngram_size=2)
    ref = ref_model.generate(**prompt, **kw)
    got = patched.generate(**prompt, **kw, logits_processor=LogitsProcessorList([Record()]))
    assert len(seen) == 6 and all(d == torch.float32 for d in seen)
    assert_greedy_match(ref_model, prompt["input_ids"], ref, got, "repetition_penalty")


def test_streamers(patched, tok, prompt, greedy_tiles):
    p = prompt["input_ids"].shape[1]
    want = tok.decode(greedy_tiles[0].sequences[0, p:p + 4], skip_special_tokens=True)
    streamer = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
    t = threading.Thread(target=patched.generate, kwargs=dict(**prompt, max_new_tokens=4, streamer=streamer))
    t.start()
    text = "".join(streamer)
    t.join()
    assert text == want

    printed = []

    class Capture(TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            printed.append(text)

    patched.generate(**prompt, max_new_tokens=4, streamer=Capture(tok, skip_prompt=True, skip_special_tokens=True))
    assert "".join(printed) == want


def test_chat_template(ref_model, patched, tok):
    msgs = [{"role": "user", "content": "Name a color."}]
    inputs = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ref = ref_model.generate(**inputs, max_new_tokens=4, do_sample=False)
    got = patched.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert_greedy_match(ref_model, inputs["input_ids"], ref, got, "chat template")


def test_user_loop_with_static_cache(ref_model, patched, prompt, greedy_tiles):
    full = greedy_tiles[0].sequences
    ids = prompt["input_ids"]
    p = ids.shape[1]
    cache = StaticCache(config=patched.config, max_cache_len=p + 6)
    with torch.no_grad():
        out = patched(ids, **{CACHE: cache})
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token]
        with count_op_calls() as ops:
            for _ in range(5):
                out = patched(token, **{CACHE: cache})
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(token)
        assert ops["calls"] == 5
        assert int(cache.get_seq_length()) == p + 5
        assert torch.equal(torch.cat([ids] + tokens, -1), full[:, :p + 6])
        # One more step fits (the cache holds p + 5 of p + 6); the next would overflow and raises first.
        out = patched(token, **{CACHE: cache})
        with pytest.raises(CacheFullError, match="max_cache_len"):
            patched(out.logits[:, -1].argmax(-1, keepdim=True), **{CACHE: cache})
        assert int(cache.get_seq_length()) == p + 6


def test_user_static_cache_in_generate(patched, prompt, greedy_tiles):
    p = prompt["input_ids"].shape[1]
    cache = StaticCache(config=patched.config, max_cache_len=64)
    with count_op_calls() as ops:
        out = patched.generate(**prompt, max_new_tokens=6, **{CACHE: cache})
    assert ops["calls"] == 5
    assert torch.equal(out, greedy_tiles[0].sequences[:, :p + 6])


def test_dynamic_cache_falls_back_with_one_warning(ref_model, patched, prompt, greedy_ref):
    p = prompt["input_ids"].shape[1]
    with pytest.warns(TilesFallbackWarning, match="DynamicCache"):
        with count_op_calls() as ops:
            out = patched.generate(**prompt, max_new_tokens=3, **{CACHE: DynamicCache(config=patched.config)})
    assert ops["calls"] == 0
    assert torch.equal(out, greedy_ref.sequences[:, :p + 3])  # PyTorch both ways: identical
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilesFallbackWarning)  # once per model
        patched.generate(**prompt, max_new_tokens=1, **{CACHE: DynamicCache(config=patched.config)})


def test_batch_with_left_padding_falls_back_to_the_unpatched_answer(ref_model, tok, patched):
    # More fallbacks (beams, hidden states, padding in batch 1, user DynamicCache loops) on a tiny model:
    # tests/test_integration_patch.py.
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        inputs = tok(["Hi", "The capital of France is"], return_tensors="pt", padding=True)
    finally:
        tok.padding_side = side
    ref = ref_model.generate(**inputs, max_new_tokens=2, do_sample=False)
    with pytest.warns(TilesFallbackWarning, match="batch size 2"):
        with count_op_calls() as ops:
            got = patched.generate(**inputs, max_new_tokens=2, do_sample=False)
    assert ops["calls"] == 0
    assert torch.equal(got, ref)
