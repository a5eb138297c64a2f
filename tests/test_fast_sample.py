"""generate() with sampling and with greedy processors on the multi-token path (integrations/fast_sample.py), on a
tiny patched model on the CPU op: seeded reproducibility, every draw the sampler's on the op's logits, the draws
distributed as Transformers' processors say, greedy + repetition_penalty / min_new_tokens exactly Transformers'
greedy on the op's logits, output_scores / output_logits as Transformers returns them, clear errors.

Seeded sampling is not token-for-token unpatched Transformers: the op draws with Philox at each token's position
(tiles_ext.sampling), Transformers with torch.multinomial. The distributions are the same; the tests compare those."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from integration_support import TIE_GAP, count_op_calls, patched_copy, tiny_config
from sampling_support import chi2_pvalue
from tiles_ext import sampling as S
from tiles_ext.integrations import patch_state
from tiles_ext.integrations.fast_sample import settings_from
from tiles_ext.models import random_model
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import ErrorCode

PROMPT = torch.tensor([[1, 17, 42, 99, 7]])
SAMPLE = dict(do_sample=True, temperature=1.4, top_k=40, top_p=0.95, repetition_penalty=1.1)


@pytest.fixture(scope="module")
def tiny():
    # No EOS id: every call runs its full length unless it names one.
    return random_model(tiny_config(eos_token_id=None, bos_token_id=1), seed=2)


@pytest.fixture(scope="module")
def pair(tiny):
    return patched_copy(tiny), patched_copy(tiny, multi_token=True)


def gen(model, ids=PROMPT, seed=None, **kw):
    kw.setdefault("pad_token_id", 0)
    if seed is not None:
        torch.manual_seed(seed)
    with count_op_calls() as ops:
        out = model.generate(ids, **kw)
    return out, ops["calls"]


def rows_kw():
    return dict(return_dict_in_generate=True, output_scores=True, output_logits=True)


def test_seeded_sampling_repeats_and_runs_many_tokens_per_launch(pair):
    _, fast = pair
    a, calls = gen(fast, seed=3, max_new_tokens=100, **SAMPLE)
    b, _ = gen(fast, seed=3, max_new_tokens=100, **SAMPLE)
    c, _ = gen(fast, seed=4, max_new_tokens=100, **SAMPLE)
    assert a.shape[1] == PROMPT.shape[1] + 100
    assert calls == 2  # 99 decode steps after the prefill's token: 64 + 35
    assert torch.equal(a, b)
    assert (a[0, 5:] != c[0, 5:]).sum() > 50


def replay(fast, out, settings, seed):
    """The token each step of `out` should have drawn: tiles::sample_logits on its raw logits, with the seen ids
    of the prompt and the tokens before it, at its position, with the call's seed."""
    plan = patch_state(fast).decoder.plan
    seq = out.sequences[0].tolist()
    p = PROMPT.shape[1]
    want = []
    for j, row in enumerate(out.logits):
        smp = S.plan_sampler(plan, settings, seed, seq[:p + j])
        want.append(int(torch.ops.tiles.sample_logits(row[0], smp, p + j)[1]))
    return seq[p:], want


def test_every_draw_is_the_samplers_pick_on_the_ops_logits(pair):
    _, fast = pair
    torch.manual_seed(8)
    seed = S.draw_seed()  # generate draws the call's seed the same way, once
    out, _ = gen(fast, seed=8, max_new_tokens=90, **SAMPLE, **rows_kw())
    settings = settings_from(fast._get_logits_processor(fast.generation_config.__class__(**SAMPLE), 5), True, 5,
                             512)
    assert settings == S.SamplerSettings(temperature=1.4, top_k=40, top_p=0.95, repetition_penalty=1.1)
    got, want = replay(fast, out, settings, seed)
    assert got == want
    # output_scores are Transformers' processors on the raw logits, the ids so far: what _sample returns.
    procs = fast._get_logits_processor(fast.generation_config.__class__(**SAMPLE), 5)
    for j, (score, row) in enumerate(zip(out.scores, out.logits)):
        assert torch.equal(score, procs(out.sequences[:, :5 + j], row))
        assert bool(score[0, got[j]] > -float("inf"))  # every draw is in Transformers' kept set
    assert len(out.scores) == len(out.logits) == 90


def test_draws_follow_transformers_distribution(pair):
    """Randomised probability integral transform over 1,600 draws of four calls: with p_j Transformers' processed
    distribution at step j (its processors on the op's raw logits) and t_j the drawn id, F_j(t_j-) + v p_j(t_j)
    (v uniform, ids in a fixed order) is uniform on [0, 1) exactly when every t_j follows p_j."""
    _, fast = pair
    rng = np.random.default_rng(0)
    kw = dict(do_sample=True, temperature=1.2, top_k=30, top_p=0.9, min_p=0.02)
    procs = fast._get_logits_processor(fast.generation_config.__class__(**kw), 5)
    u = []
    for seed in range(4):
        out, _ = gen(fast, seed=100 + seed, max_new_tokens=400, **kw, **rows_kw())
        seq = out.sequences
        for j, row in enumerate(out.logits):
            p = torch.softmax(procs(seq[:, :5 + j], row)[0].double(), dim=-1).numpy()
            t = int(seq[0, 5 + j])
            assert p[t] > 0
            u.append(p[:t].sum() + rng.random() * p[t])
    observed = np.histogram(u, bins=16, range=(0, 1))[0]
    pval = chi2_pvalue(observed, np.full(16, len(u) / 16))
    assert pval > 0.001, f"PIT histogram {observed.tolist()}: p = {pval:.2g}"


def test_greedy_processors_equal_the_per_token_path(pair):
    per_token, fast = pair
    for kw in (dict(repetition_penalty=1.5), dict(repetition_penalty=0.7, min_new_tokens=30),
               dict(min_new_tokens=12)):
        free, _ = gen(per_token, max_new_tokens=40, **kw)
        # An EOS id the call produces early: min_new_tokens holds it back, and the launch stops at it after.
        eos = int(free[0, 8])
        kw = dict(kw, eos_token_id=eos, max_new_tokens=80, do_sample=False, **rows_kw())
        want, calls_want = gen(per_token, **kw)
        got, calls_got = gen(fast, **kw)
        assert torch.equal(got.sequences, want.sequences), kw
        assert calls_got < calls_want and calls_got <= 2, (calls_got, calls_want)
        assert len(got.scores) == len(want.scores)
        for a, b in zip(got.logits, want.logits):
            assert torch.equal(a, b)
        for a, b in zip(got.scores, want.scores):
            assert torch.equal(a, b)


def test_greedy_repetition_penalty_matches_unpatched_transformers_except_near_ties(tiny, pair):
    _, fast = pair
    kw = dict(do_sample=False, repetition_penalty=1.3, max_new_tokens=40)
    want, _ = gen(tiny, **kw)
    got, _ = gen(fast, **kw)
    ref, mine = want[0, 5:].tolist(), got[0, 5:].tolist()
    procs = tiny._get_logits_processor(tiny.generation_config.__class__(repetition_penalty=1.3), 5)
    for i, (a, b) in enumerate(zip(ref, mine)):
        if a == b:
            continue
        ctx = want[:, :5 + i]
        with torch.no_grad():
            scores = procs(ctx, tiny(ctx).logits[:, -1].float())[0]
        top2 = torch.topk(scores, 2)
        gap = float(top2.values[0] - top2.values[1])
        assert gap < TIE_GAP and b in top2.indices.tolist(), (i, a, b, gap)
        break


def test_bad_settings_raise_before_any_launch(pair):
    _, fast = pair
    for kw, name in ((dict(top_p=0.0), "top_p"), (dict(temperature=0.0), "temperature"),
                     (dict(top_k=-1), "top_k")):
        before = int(patch_state(fast).decoder.runtime.state[0])
        with pytest.raises(ValueError, match=name):
            gen(fast, do_sample=True, max_new_tokens=5, **kw)
        assert int(patch_state(fast).decoder.runtime.state[0]) == before


def test_nan_logits_raise_naming_the_position(tiny):
    broken = patched_copy(tiny, multi_token=True)
    with torch.no_grad():
        broken.lm_head.weight[7] = float("nan")
    for kw in (dict(do_sample=True, top_k=20), dict(do_sample=False, repetition_penalty=1.2)):
        with pytest.raises(RuntimeError, match=ErrorCode.BAD_LOGITS.name) as info:
            gen(broken, max_new_tokens=5, **kw)
        # The first new token (position 5) is picked from the prefill's logits: they hold the NaN already.
        assert fmt.ERROR_DETAILS[ErrorCode.BAD_LOGITS].format(seen=7, wanted=5) in str(info.value)


def test_other_processors_keep_the_per_token_path(pair):
    _, fast = pair
    out, calls = gen(fast, seed=1, max_new_tokens=12, do_sample=True, no_repeat_ngram_size=2)
    assert out.shape[1] == 17 and calls == 11
    out, calls = gen(fast, seed=1, max_new_tokens=12, do_sample=True, typical_p=0.9)
    assert calls == 11


def test_sampling_streams_every_token(pair):
    _, fast = pair
    seen = []

    class Collect:
        def put(self, value):
            seen.append(value.tolist())

        def end(self):
            seen.append("end")

    out, calls = gen(fast, seed=5, max_new_tokens=20, streamer=Collect(), **SAMPLE)
    assert calls == 1
    assert seen[0] == PROMPT.tolist() and seen[-1] == "end"
    assert [t for v in seen[1:-1] for t in v] == out[0, 5:].tolist()
