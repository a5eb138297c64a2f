"""The sampler (planner/format.py "Sampling") on the CPU executor: the kept set equals what Transformers' warpers
keep, the draws follow the processed distribution, seeds repeat, and decode_step's sampled tokens do not depend on
how a launch is cut. CUDA comparisons: tests/test_sampling_cuda.py."""
from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from parity_helpers import Bound, cache_lists, prefill, tiny_config, tiny_model
from sampling_support import (PHILOX_KAT, chi2_pvalue, hf_processors, history, kept_difference, philox4x32_10)
from tiles_ext import sampling as S
from tiles_ext.errors import error_words
from tiles_ext.planner import build_plan
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import ErrorCode, SampleMode, StateWord

LM_TILES = 3  # sample_logits reads only the header and the bitmap; any slot count makes a valid tensor


def sample(logits, settings, position, seed=0, seen=()):
    smp = S.make_sampler(logits.numel(), LM_TILES, settings, seed, seen)
    kept, token = torch.ops.tiles.sample_logits(logits.float().contiguous(), smp, position)
    return kept, int(token)


# --- the layout and the settings ------------------------------------------------------------------------------

def test_sampler_layout_and_header_words():
    V, L = 1000, 7
    assert fmt.sampler_words(V, L) == fmt.SAMPLER_HEADER_WORDS + L * fmt.CAND_SLOT_WORDS + 32
    assert fmt.CAND_SLOT_WORDS == fmt.CANDIDATES.words + 2 * fmt.CAND_SLOT
    st = S.SamplerSettings(temperature=0.7, top_k=20, top_p=0.8, min_p=0.05, repetition_penalty=1.05,
                           suppress_until=40, suppress_ids=(2, 999))
    smp = S.make_sampler(V, L, st, seed=(5 << 32) | 0xFFFFFFFE, seen_ids=[0, 31, 32, 999, 31])
    assert smp.dtype == torch.int32 and smp.numel() == fmt.sampler_words(V, L)
    w = smp.tolist()
    lay = fmt.SAMPLER
    assert w[lay.index("mode")] == SampleMode.SAMPLE and w[lay.index("top_k")] == 20
    assert w[lay.index("eos_suppress_until")] == 40
    assert w[lay.index("seed_lo")] == -2 and w[lay.index("seed_hi")] == 5
    assert fmt.bits_float(w[lay.index("temperature_bits")]) == np.float32(0.7)
    assert w[lay.index("top_p_cut_bits")] == fmt.float_bits(1.0 - 0.8)  # double 1 - top_p, rounded once
    assert fmt.bits_float(w[lay.index("min_p_bits")]) == np.float32(0.05)
    assert fmt.bits_float(w[lay.index("penalty_bits")]) == np.float32(1.05)
    i = lay.index("suppress_ids")
    assert w[lay.index("num_suppress")] == 2 and w[i:i + 3] == [2, 999, 0]
    assert S.seen_ids(smp, V) == [0, 31, 32, 999]
    S.mark_seen(smp, V, 63)
    S.mark_seen(smp, V, 1)
    assert S.seen_ids(smp, V) == [0, 1, 31, 32, 63, 999]
    # Off values: top_p 1 leaves the cut at 0 (the filter off), not 1 - 1.
    off = S.SamplerSettings().header_words(0)
    assert off[lay.index("top_p_cut_bits")] == 0 and fmt.bits_float(off[lay.index("temperature_bits")]) == 1.0


@pytest.mark.parametrize("bad, name", [
    (dict(temperature=0.0), "temperature"), (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("inf")), "temperature"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(top_k=-1), "top_k"), (dict(top_k=2.5), "top_k"), (dict(min_p=1.5), "min_p"),
    (dict(repetition_penalty=0.0), "repetition_penalty"), (dict(suppress_ids=tuple(range(9))), "suppressed"),
    (dict(suppress_ids=(1000,)), "outside the vocabulary")])
def test_bad_settings_are_refused_by_name(bad, name):
    with pytest.raises(ValueError, match=name):
        S.make_sampler(1000, 2, S.SamplerSettings(**bad), 0)


def test_the_op_refuses_a_sampler_of_the_wrong_size_or_settings():
    lg = torch.zeros(50)
    with pytest.raises(RuntimeError, match="sampler_words"):
        torch.ops.tiles.sample_logits(lg, torch.zeros(10, dtype=torch.int32), 0)
    smp = S.make_sampler(50, 1, S.SamplerSettings(), 0)
    smp[fmt.SAMPLER.index("temperature_bits")] = fmt.float_bits(-1.0)
    with pytest.raises(RuntimeError, match="temperature"):
        torch.ops.tiles.sample_logits(lg, smp, 0)


# --- Philox ----------------------------------------------------------------------------------------------------

def test_python_philox_matches_random123():
    for ctr, key, want in PHILOX_KAT:
        assert philox4x32_10(ctr, key) == want


def test_draws_use_philox_at_the_token_position():
    # Two equal logits: the draw takes id 0 exactly when u < 1/2, i.e. when Philox's x0 has its top bit clear.
    lg = torch.zeros(2)
    for seed in (0, 12345, (7 << 32) | 99):
        smp = S.make_sampler(2, 1, S.SamplerSettings(), seed)
        got = [int(torch.ops.tiles.sample_logits(lg, smp, p)[1]) for p in range(300)]
        want = [philox4x32_10((p, 0, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))[0] >> 31 for p in range(300)]
        assert got == want


# --- the kept set against Transformers' warpers ----------------------------------------------------------------

def random_case(rng, V):
    kind = rng.integers(4)
    scale = float(rng.choice([0.5, 2.0, 5.0]))
    lg = rng.standard_normal(V).astype(np.float32) * scale
    if kind == 1:
        lg = np.round(lg * 2) / 2  # many ties
    elif kind == 2:
        lg = -np.abs(lg)  # all negative: the penalty multiplies
    elif kind == 3:
        lg[rng.integers(V, size=max(1, V // 5))] = float(lg.max())  # ties at the top
    seen = rng.choice(V, size=int(rng.integers(1, V // 2 + 1)), replace=False).tolist()
    eos = rng.choice(V, size=int(rng.integers(1, 3)), replace=False).tolist()
    prompt_len = len(seen) + 1
    min_new = int(rng.choice([0, 0, 3]))
    st = S.SamplerSettings(
        temperature=float(rng.choice([1.0, 0.7, 1.3, 0.45])),
        top_k=int(rng.choice([0, 1, 3, 10, 40, V, V + 5])),
        top_p=float(rng.choice([1.0, 0.9, 0.5, 0.99, 0.3, 1e-9])),
        min_p=float(rng.choice([0.0, 0.0, 0.05, 0.3])),
        repetition_penalty=float(rng.choice([1.0, 1.3, 0.8])),
        suppress_until=prompt_len + min_new if min_new else 0, suppress_ids=tuple(eos) if min_new else ())
    return torch.from_numpy(lg), st, seen, prompt_len, min_new


def hf_kept(lg, st, seen, position, prompt_len, min_new):
    """Transformers' kept set (scores above -inf after every processor) and the scores after the temperature."""
    procs = hf_processors(st, prompt_len, min_new)
    ids = history(seen, position)
    scores = lg.view(1, -1).clone()
    warped = None
    for proc in procs:
        if type(proc).__name__ in ("TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper") and warped is None:
            warped = scores.clone()
        scores = proc(ids, scores)
    return scores[0] > -float("inf"), (warped if warped is not None else scores)[0]


def test_kept_set_matches_transformers_over_random_logits():
    rng = np.random.default_rng(41)
    tolerated = ties = 0
    for case in range(600):
        V = int(rng.choice([7, 50, 300]))
        lg, st, seen, prompt_len, min_new = random_case(rng, V)
        position = prompt_len + int(rng.integers(0, 6))  # sometimes inside the min_new_tokens window
        kept, token = sample(lg, st, position, seed=case, seen=seen)
        want, warped = hf_kept(lg, st, seen, position, prompt_len, min_new)
        bad, near = kept_difference(kept, want, warped, st)
        assert not bad, (f"case {case}: ids {bad} kept differently (ours {torch.nonzero(kept).reshape(-1).tolist()}, "
                         f"Transformers {torch.nonzero(want).reshape(-1).tolist()}) for {st}")
        tolerated += near
        ties += near == 0 and not torch.equal(kept, want)
        assert kept[token], f"case {case}: drew {token}, outside the kept set"
    # Ties at the top-p cut are common here (kind 1 rounds the logits); a rounding difference is rare.
    assert tolerated <= 6, f"{tolerated} ids differ at a cut within 1e-5: more than fp32 rounding explains"
    assert ties < 150


def test_filters_at_their_edges():
    lg = torch.tensor([3.0, 1.0, 1.0, 1.0, -2.0, 0.5])
    every = torch.ones(6, dtype=torch.bool)
    # top_p 1 and top_k beyond the vocabulary keep everything; top_k 1 keeps only the maximum.
    assert torch.equal(sample(lg, S.SamplerSettings(top_p=1.0), 6)[0], every)
    assert torch.equal(sample(lg, S.SamplerSettings(top_k=100), 6)[0], every)
    assert sample(lg, S.SamplerSettings(top_k=1), 6)[0].tolist() == [True] + [False] * 5
    # Ties at the k-th score are all kept.
    assert sample(lg, S.SamplerSettings(top_k=2), 6)[0].tolist() == [True, True, True, True, False, False]
    # The smallest top_p keeps the largest score only (min_tokens_to_keep 1).
    kept, token = sample(lg, S.SamplerSettings(top_p=1e-9), 6)
    assert kept.tolist() == [True] + [False] * 5 and token == 0
    # min_p 1 keeps the ids tied with the maximum.
    lg2 = torch.tensor([2.0, 2.0, 1.9])
    assert sample(lg2, S.SamplerSettings(min_p=1.0), 3)[0].tolist() == [True, True, False]


def test_penalty_and_suppression_follow_transformers():
    lg = torch.tensor([2.0, -2.0, 0.5, -0.5, 1.0, 0.0])
    st = S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=4.0)
    # Penalised: 2 / 4 = 0.5 (a tie with id 2: the lowest id wins), -2 * 4 = -8, 1 / 4 = 0.25.
    assert sample(lg, st, 5, seen=[0, 1, 4])[1] == 0
    assert sample(lg, S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=5.0), 5, seen=[0])[1] == 4
    # A penalty below 1 rewards: -0.5 * 0.1 = -0.05 beats -0.1.
    st = S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=0.1)
    assert sample(torch.tensor([-0.5, -0.1]), st, 3, seen=[0])[1] == 0
    assert sample(torch.tensor([-0.5, -0.1]), st, 3, seen=[1])[1] == 1
    # EOS suppression below suppress_until only.
    st = S.SamplerSettings(mode=SampleMode.GREEDY, suppress_until=10, suppress_ids=(0, 4))
    assert sample(lg, st, 9)[1] == 2 and sample(lg, st, 10)[1] == 0
    kept = sample(lg, S.SamplerSettings(suppress_until=10, suppress_ids=(0, 4)), 9)[0]
    assert kept.tolist() == [False, True, True, True, False, True]
    # Greedy = argmax of Transformers' processed scores, over random cases.
    rng = np.random.default_rng(7)
    for case in range(200):
        V = int(rng.choice([7, 50, 300]))
        lg, st, seen, prompt_len, min_new = random_case(rng, V)
        st = S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=st.repetition_penalty,
                               suppress_until=st.suppress_until, suppress_ids=st.suppress_ids)
        position = prompt_len + int(rng.integers(0, 6))
        scores = hf_processors(st, prompt_len, min_new)(history(seen, position), lg.view(1, -1).clone())
        assert sample(lg, st, position, seen=seen)[1] == int(torch.argmax(scores[0])), case


# --- the draws ---------------------------------------------------------------------------------------------------

DRAWS = 20000


@pytest.mark.parametrize("settings", [
    S.SamplerSettings(temperature=0.8, top_k=6, top_p=0.95, min_p=0.02, repetition_penalty=1.3),
    S.SamplerSettings(temperature=1.7),
    S.SamplerSettings(top_p=0.7, min_p=0.1)], ids=["all", "temperature", "top_p_min_p"])
def test_draws_follow_transformers_probabilities(settings):
    lg = torch.tensor([1.2, -0.3, 0.8, 2.0, -1.5, 0.1, 1.9, -0.2, 0.4, 1.0, -3.0, 0.6])
    seen = [3, 4, 7]
    smp = S.make_sampler(lg.numel(), 1, settings, seed=2024, seen_ids=seen)
    counts = collections.Counter(int(torch.ops.tiles.sample_logits(lg, smp, p)[1]) for p in range(DRAWS))
    scores = hf_processors(settings)(history(seen, 20), lg.view(1, -1).clone())[0]
    probs = torch.softmax(scores.double(), dim=-1).numpy()
    observed = [counts.get(i, 0) for i in range(lg.numel())]
    assert all(observed[i] == 0 for i in range(lg.numel()) if probs[i] == 0), (observed, probs)
    p = chi2_pvalue(observed, probs * DRAWS)
    assert p > 0.001, f"chi-square p = {p:.2g}: counts {observed}, expected {np.round(probs * DRAWS, 1).tolist()}"


def test_same_seed_same_tokens_other_seed_other_tokens():
    lg = torch.randn(300, generator=torch.Generator().manual_seed(3))
    st = S.SamplerSettings(temperature=1.5, top_k=50)
    a = [sample(lg, st, p, seed=99)[1] for p in range(100)]
    assert a == [sample(lg, st, p, seed=99)[1] for p in range(100)]
    b = [sample(lg, st, p, seed=100)[1] for p in range(100)]
    assert sum(x != y for x, y in zip(a, b)) > 50


def test_draw_seed_follows_torch_manual_seed():
    torch.manual_seed(5)
    a = S.draw_seed()
    torch.manual_seed(5)
    assert S.draw_seed() == a and 0 <= a < 1 << 64
    assert S.draw_seed() != a


# --- bad logits ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [SampleMode.SAMPLE, SampleMode.GREEDY])
def test_nan_and_inf_scores_are_refused_never_drawn(mode):
    detail = fmt.ERROR_DETAILS[ErrorCode.BAD_LOGITS]
    for bad in (float("nan"), float("inf")):
        lg = torch.tensor([0.0, 1.0, bad, 2.0, bad])
        with pytest.raises(RuntimeError, match=ErrorCode.BAD_LOGITS.name) as info:
            sample(lg, S.SamplerSettings(mode=mode, top_k=2), 17)
        assert detail.format(seen=2, wanted=17) in str(info.value)
    # Nothing above -inf: nothing to draw.
    with pytest.raises(RuntimeError, match=ErrorCode.BAD_LOGITS.name) as info:
        sample(torch.tensor([0.0, 1.0]), S.SamplerSettings(mode=mode, suppress_until=9, suppress_ids=(0, 1)), 3)
    assert detail.format(seen=-1, wanted=3) in str(info.value)
    # A NaN at a suppressed id is replaced by -inf first (MinNewTokensLengthLogitsProcessor's torch.where).
    lg = torch.tensor([float("nan"), 1.0, 0.0])
    assert sample(lg, S.SamplerSettings(mode=mode, suppress_until=9, suppress_ids=(0,)), 3)[1] in (1, 2)


# --- decode_step ----------------------------------------------------------------------------------------------------

PROMPT = 6
MAX_LEN = 80


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_config(264, 6, 2, 64, 456, 2, vocab=1000), seed=11)


@pytest.fixture(scope="module")
def plan(model):
    return build_plan(model.config, workers=13)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, 1000, (1, PROMPT), generator=torch.Generator().manual_seed(8))


def launch(bound, cache, token, position, steps, sampler, eos=()):
    k, v = cache_lists(cache)
    return bound.runtime.step(bound.weights, k, v, torch.tensor([int(token)]), torch.tensor([int(position)]),
                              bound.inv_freq, bound.rope_scale, steps, eos, 0, sampler)


def run_cut(model, plan, prompt, settings, first, cuts, seed=77, eos=()):
    """Decode sum(cuts) tokens after `first` (the token at position PROMPT) in launches of the given sizes."""
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    smp = S.plan_sampler(plan, settings, seed, prompt[0].tolist() + [first])
    tokens, logits, token, pos = [], [], first, PROMPT
    for n in cuts:
        lg, tk = launch(bound, cache, token, pos, n, smp, eos)
        done = int((tk >= 0).sum())
        tokens += tk[:done].tolist()
        logits.append(lg[:done])
        token, pos = tokens[-1], pos + done
        if done < n:
            break
    return tokens, torch.cat(logits), smp, bound


SETTINGS = {
    "sample": S.SamplerSettings(temperature=1.2, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.3),
    "greedy_penalty": S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=1.8),
    "top_p_only": S.SamplerSettings(temperature=0.9, top_p=0.9),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_decode_step_draws_do_not_depend_on_the_launch_cut(model, plan, prompt, name):
    st = SETTINGS[name]
    one, lg1, smp1, _ = run_cut(model, plan, prompt, st, 17, [20])
    single, lgs, smps, _ = run_cut(model, plan, prompt, st, 17, [1] * 20)
    mixed, lgm, smpm, _ = run_cut(model, plan, prompt, st, 17, [7, 1, 12])
    assert one == single == mixed
    assert torch.equal(lg1, lgs) and torch.equal(lg1, lgm)
    assert torch.equal(smp1, smps) and torch.equal(smp1, smpm)
    # Each step's token is the sampler's pick from that step's logits row at the token's position, with the seen
    # ids of the prompt, the input token and the tokens before it.
    seen = prompt[0].tolist() + [17]
    for i, tok in enumerate(one):
        smp = S.plan_sampler(plan, st, 77, seen)
        kept, want = torch.ops.tiles.sample_logits(lg1[i], smp, PROMPT + 1 + i)
        assert tok == int(want), i
        seen.append(tok)
    assert S.seen_ids(smp1, plan.header["vocab"]) == sorted(set(seen))
    other, _, _, _ = run_cut(model, plan, prompt, st, 17, [20], seed=78)
    if st.mode == SampleMode.SAMPLE:
        assert other != one


def test_decode_step_suppresses_eos_until_min_new_tokens(model, plan, prompt):
    free, _, _, _ = run_cut(model, plan, prompt, SETTINGS["greedy_penalty"], 17, [12])
    eos = free[2]
    stop = free.index(eos)
    # Stopping at eos without suppression; with it suppressed for the first 6 new tokens, never before.
    got, _, _, _ = run_cut(model, plan, prompt, SETTINGS["greedy_penalty"], 17, [12], eos=[eos])
    assert got == free[:stop + 1]
    st = S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=1.8, suppress_until=PROMPT + 1 + 6,
                           suppress_ids=(eos,))
    got, lg, _, _ = run_cut(model, plan, prompt, st, 17, [12], eos=[eos])
    assert eos not in got[:6]
    procs = hf_processors(st, PROMPT + 1, 6)
    seq = prompt[0].tolist() + [17]
    for i, tok in enumerate(got):
        want = int(torch.argmax(procs(torch.tensor([seq]), lg[i].view(1, -1).clone())[0]))
        assert tok == want, i
        seq.append(tok)


@pytest.mark.parametrize("mode", [SampleMode.SAMPLE, SampleMode.GREEDY])
def test_decode_step_names_the_step_of_nan_logits(model, plan, prompt, mode):
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    lm = next(i for i, (slot, _, _, _) in enumerate(plan.weights.tolist()) if slot == fmt.SLOT["lm_head"])
    broken = bound.weights[lm].clone()
    broken[7] = float("nan")
    bound.weights = list(bound.weights)
    bound.weights[lm] = broken
    smp = S.plan_sampler(plan, S.SamplerSettings(mode=mode, top_k=5), 3, prompt[0].tolist())
    with pytest.raises(RuntimeError, match=ErrorCode.BAD_LOGITS.name) as info:
        launch(bound, cache, 17, PROMPT, 4, smp)
    assert fmt.ERROR_DETAILS[ErrorCode.BAD_LOGITS].format(seen=7, wanted=PROMPT + 1) in str(info.value)
    words = error_words(bound.runtime.state)
    assert words["error"] == ErrorCode.BAD_LOGITS and words["error_step"] == 0
    assert int(bound.runtime.state[int(StateWord.STEPS_DONE)]) == 0


def test_decode_step_refuses_a_sampler_of_another_plan(model, plan, prompt):
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    smp = S.make_sampler(plan.header["vocab"], plan.header["lm_tiles"] + 1, S.SamplerSettings(), 0)
    with pytest.raises(RuntimeError, match="sampler_words"):
        launch(bound, cache, 17, PROMPT, 1, smp)


def test_decode_step_without_a_sampler_is_unchanged(model, plan, prompt):
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    lg, tk = launch(bound, cache, 17, PROMPT, 6, None)
    bound2, cache2 = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    lg2, tk2 = bound2.step(cache2, 17, PROMPT, num_steps=6)
    assert torch.equal(tk, tk2) and torch.equal(lg, lg2)
    assert tk.tolist() == torch.argmax(lg, dim=-1).tolist()


def test_ops_pass_opcheck(model, plan, prompt):
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    smp = S.plan_sampler(plan, SETTINGS["sample"], 5, prompt[0].tolist())
    k, v = cache_lists(cache)
    rt = bound.runtime
    args = (rt.plan_tensor, list(rt.header), bound.weights, k, v, rt.scratch, rt.state, torch.tensor([17]),
            torch.tensor([PROMPT]), bound.inv_freq, bound.rope_scale, 2, [])
    torch.library.opcheck(torch.ops.tiles.decode_step.default, args, {"order_seed": 0, "sampler": smp})
    lg = torch.randn(1000)
    torch.library.opcheck(torch.ops.tiles.sample_logits.default, (lg, smp, 9))
