"""The multi-token greedy fast path (patch(model, multi_token=True); on by default on CUDA) returns exactly what
the per-token path returns, with up to 64 tokens per op launch, on the CPU op."""
from __future__ import annotations

import pytest
import torch
from transformers import StaticCache, TextStreamer

from integration_support import CACHE, count_op_calls, patched_copy, steps_executed, tiny_config
from tiles_ext.models import random_model


@pytest.fixture(scope="module")
def tiny():
    return random_model(tiny_config(), seed=2)


@pytest.fixture(scope="module")
def tiny_pair(tiny):
    return patched_copy(tiny), patched_copy(tiny, multi_token=True)


def _gen(model, ids, **kw):
    kw.setdefault("pad_token_id", 0)
    kw.setdefault("do_sample", False)
    with count_op_calls() as ops:
        out = model.generate(ids, **kw)
    return out, ops["calls"]


def test_fast_path_equals_per_token_path_over_several_launches(tiny_pair):
    per_token, fast = tiny_pair
    ids = torch.tensor([[1, 17, 42, 99, 7]])
    kw = dict(max_new_tokens=140, return_dict_in_generate=True, output_logits=True, output_scores=True)
    want, calls_want = _gen(per_token, ids, **kw)
    before = steps_executed(fast)
    got, calls_got = _gen(fast, ids, **kw)
    assert torch.equal(got.sequences, want.sequences)
    assert calls_want == 139 and calls_got == 3  # 139 decode steps: 64 + 64 + 11 per launch
    assert steps_executed(fast) - before == 139
    assert len(got.logits) == len(want.logits) == 140
    for a, b in zip(got.logits, want.logits):
        assert torch.equal(a, b)  # same op, same math per step: bit-identical logits
    assert all(torch.equal(s, l) for s, l in zip(got.scores, got.logits))
    assert int(getattr(got, CACHE).get_seq_length()) == ids.shape[1] + 139


def test_fast_path_stops_at_eos_inside_a_launch(tiny_pair):
    per_token, fast = tiny_pair
    ids = torch.tensor([[3, 5, 8, 13]])
    full, _ = _gen(per_token, ids, max_new_tokens=40)
    gen = full[0, 4:].tolist()
    eos = [next(t for t in gen[10:] if t not in gen[:10]), 511]  # a token first produced mid-launch
    stop = min(i for i, t in enumerate(gen) if t in eos)
    want, _ = _gen(per_token, ids, max_new_tokens=40, eos_token_id=eos)
    got, calls = _gen(fast, ids, max_new_tokens=40, eos_token_id=eos)
    assert torch.equal(got, want) and got.shape[1] == 4 + stop + 1
    assert calls == 1
    for n, launches in ((1, 0), (2, 1), (65, 1), (66, 2)):  # the first token is the prefill's; then <= 64/launch
        want, _ = _gen(per_token, ids, max_new_tokens=n)
        got, calls = _gen(fast, ids, max_new_tokens=n)
        assert torch.equal(got, want), n
        assert calls == launches, n


def test_fast_path_streams_every_token(tiny_pair, tiny):
    _, fast = tiny_pair
    ids = torch.tensor([[1, 2, 3]])
    seen = []

    class Collect(TextStreamer):
        def __init__(self):
            pass

        def put(self, value):
            seen.append(value.tolist())

        def end(self):
            seen.append("end")

    out, calls = _gen(fast, ids, max_new_tokens=10, streamer=Collect())
    assert calls == 1
    # generate puts the prompt, then each new token once, then end(): as the per-token loop does.
    assert seen[0] == [[1, 2, 3]] and seen[-1] == "end"
    assert [t for v in seen[1:-1] for t in v] == out[0, 3:].tolist()


def test_calls_the_fast_path_cannot_reproduce_run_per_token(tiny_pair):
    per_token, fast = tiny_pair
    ids = torch.tensor([[1, 17, 42, 99, 7]])
    # A logits processor the op does not apply (no_repeat_ngram_size) needs every step's logits: the per-token path
    # runs. (A repetition penalty runs in the op: tests/test_fast_sample.py.)
    want, _ = _gen(per_token, ids, max_new_tokens=8, no_repeat_ngram_size=2)
    got, calls = _gen(fast, ids, max_new_tokens=8, no_repeat_ngram_size=2)
    assert torch.equal(got, want) and calls == 7
    got, calls = _gen(fast, ids, max_new_tokens=8, repetition_penalty=1.5)
    assert torch.equal(got, _gen(per_token, ids, max_new_tokens=8, repetition_penalty=1.5)[0]) and calls == 1
    # A user's StaticCache: per-token path on that cache.
    cache = StaticCache(config=fast.config, max_cache_len=32)
    want, _ = _gen(per_token, ids, max_new_tokens=8)
    got, calls = _gen(fast, ids, max_new_tokens=8, **{CACHE: cache})
    assert torch.equal(got, want) and calls == 7


@pytest.mark.slow
def test_fast_path_on_smollm2(default_model):
    model, tok = default_model
    per_token, fast = patched_copy(model), patched_copy(model, multi_token=True)
    inputs = tok("The capital of France is", return_tensors="pt")
    want = per_token.generate(**inputs, max_new_tokens=10, do_sample=False)
    with count_op_calls() as ops:
        got = fast.generate(**inputs, max_new_tokens=10, do_sample=False)
    assert torch.equal(got, want)
    assert ops["calls"] == 1
