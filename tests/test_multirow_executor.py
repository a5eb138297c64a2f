"""Several rows per pass on the CPU reference executor (planner/format.py "Rows"): a pass of R input ids gives the
bits of R one-row launches (logits, tokens, K/V), whatever the worker order and across attention partition bounds;
cache rows at or beyond the pass's position (a rejected draft's) are never attended; bad passes are refused before
anything runs."""
import pytest
import torch

from parity_helpers import Bound, cache_lists, prefill, tiny_config, tiny_model
from tiles_ext.planner import build_plan
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import StateWord
from tiles_ext.sampling import SamplerSettings, plan_sampler

PROMPT = 6
MAX_LEN = 40


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_config(264, 6, 2, 64, 456, 2, vocab=1000), seed=4)


@pytest.fixture(scope="module", params=["default", "partitions"])
def plan(request, model):
    if request.param == "default":
        return build_plan(model.config, workers=13)
    # Three partitions of 4-position granules from 4 positions on: the rows of one pass straddle partition bounds,
    # so row i's positions are cut unlike row i+1's.
    return build_plan(model.config, workers=7, attn_partitions=3, attn_granule=4, attn_single=4)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, 1000, (1, PROMPT), generator=torch.Generator().manual_seed(9))


def draft(n, seed=1):
    return torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(seed))


def pass_rows(bound, cache, tokens, position, order_seed=0):
    k, v = cache_lists(cache)
    return bound.runtime.step(bound.weights, k, v, tokens, torch.tensor([position]), bound.inv_freq,
                              bound.rope_scale, 1, (), order_seed)


def one_row_passes(bound, cache, tokens, position):
    out = [bound.step(cache, int(t), position + i) for i, t in enumerate(tokens.tolist())]
    return torch.cat([o[0] for o in out]), torch.cat([o[1] for o in out])


def assert_caches_equal(a, b, upto):
    for x, y in zip(sum(cache_lists(a), []), sum(cache_lists(b), [])):
        assert torch.equal(x[:, :, :upto], y[:, :, :upto])


@pytest.mark.parametrize("rows", [1, 2, 5, 8])
def test_a_pass_of_rows_gives_the_bits_of_one_row_passes(model, plan, prompt, rows):
    tokens = draft(rows)
    ref_bound, ref_cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    ref_logits, ref_tokens = one_row_passes(ref_bound, ref_cache, tokens, PROMPT)
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    logits, picked = pass_rows(bound, cache, tokens, PROMPT)
    assert logits.shape == (rows, 1000) and picked.shape == (rows,)
    assert torch.equal(logits, ref_logits)
    assert torch.equal(picked, ref_tokens) and torch.equal(picked, logits.argmax(-1))
    assert_caches_equal(cache, ref_cache, PROMPT + rows)
    assert int(bound.runtime.state[StateWord.EPOCH]) == 1  # one pass is one step


def test_passes_at_later_positions_and_random_worker_orders(model, plan, prompt):
    """Two passes in a row (the second attends the first's rows from the cache), in random worker orders."""
    tokens = draft(11, seed=3)
    ref_bound, ref_cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    ref_logits, _ = one_row_passes(ref_bound, ref_cache, tokens, PROMPT)
    for seed in (0, 1, 2):
        bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
        first, _ = pass_rows(bound, cache, tokens[:4], PROMPT, order_seed=seed)
        second, _ = pass_rows(bound, cache, tokens[4:], PROMPT + 4, order_seed=seed)
        assert torch.equal(torch.cat([first, second]), ref_logits), f"order_seed {seed}"
        assert_caches_equal(cache, ref_cache, PROMPT + 11)


def test_stale_rows_beyond_the_position_are_never_attended(model, plan, prompt):
    """A rejected draft leaves K/V rows beyond the cache length; the next pass from that length must not read them:
    rows at and beyond it are poisoned with NaN and huge values, and the logits are the clean cache's."""
    tokens = draft(6, seed=5)
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    clean, _ = pass_rows(bound, cache, tokens, PROMPT)
    poisoned_bound, poisoned = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    for t in sum(cache_lists(poisoned), []):
        t[:, :, PROMPT:].fill_(float("nan"))
        t[:, :, PROMPT + 3:].fill_(3e38)
    logits, _ = pass_rows(poisoned_bound, poisoned, tokens, PROMPT)
    assert torch.equal(logits, clean)
    assert_caches_equal(poisoned, cache, PROMPT + 6)  # the pass rewrote every row it attends


def _untouched(bound, cache, before):
    assert int(bound.runtime.state[StateWord.EPOCH]) == 0 and int(bound.runtime.state[StateWord.ERROR]) == 0
    assert all(torch.equal(a, b) for a, b in zip(sum(cache_lists(cache), []), before))


@pytest.mark.parametrize("case, message", [
    ("too_many_rows", "decodes at most 8 rows per pass"),
    ("no_room", "KV cache full: a pass of 5 rows"),
    ("bad_token", r"\(row 2\) is outside the vocabulary"),
])
def test_bad_passes_are_refused_before_anything_runs(model, prompt, case, message):
    plan = build_plan(model.config, workers=13)
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    before = [t.clone() for t in sum(cache_lists(cache), [])]
    tokens, position = draft(5), PROMPT
    if case == "too_many_rows":
        tokens = draft(plan.header["max_rows"] + 1)
    elif case == "no_room":
        position = MAX_LEN - 4
    else:
        tokens[2] = 1000
    with pytest.raises(RuntimeError, match=message):
        pass_rows(bound, cache, tokens, position)
    _untouched(bound, cache, before)


def test_a_pass_is_one_step_without_a_sampler(model, prompt):
    plan = build_plan(model.config, workers=13)
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    before = [t.clone() for t in sum(cache_lists(cache), [])]
    k, v = cache_lists(cache)
    args = (bound.weights, k, v, draft(3), torch.tensor([PROMPT]), bound.inv_freq, bound.rope_scale)
    with pytest.raises(RuntimeError, match="a verify pass\\) is one step; pass num_steps=1"):
        bound.runtime.step(*args, 2)
    sampler = plan_sampler(plan, SamplerSettings(top_k=5), seed=1)
    with pytest.raises(RuntimeError, match="takes no sampler"):
        bound.runtime.step(*args, 1, sampler=sampler)
    _untouched(bound, cache, before)


def test_the_plan_records_its_row_limit(model):
    plan = build_plan(model.config, workers=13)
    h = plan.header
    assert h["max_rows"] == fmt.MAX_ROWS and h["scratch_bytes"] == fmt.MAX_ROWS * h["row_bytes"]
    one = build_plan(model.config, workers=13, max_rows=1)
    assert one.header["scratch_bytes"] == one.header["row_bytes"] == h["row_bytes"]
    assert (one.buffers == plan.buffers).all()  # row 0 lies where a one-row plan's arena has it
    with pytest.raises(ValueError, match="max_rows 9 outside 1..8"):
        build_plan(model.config, workers=13, max_rows=fmt.MAX_ROWS + 1)
    bound = Bound.of(model, one)
    cache = prefill(model, torch.tensor([[1, 2, 3]]), 16)
    with pytest.raises(RuntimeError, match="decodes at most 1 rows per pass"):
        pass_rows(bound, cache, draft(2), 3)


def test_fake_kernel_shapes_a_pass(model, prompt):
    """torch.compile sees [R, vocab] logits and [R] tokens for R input ids (tiles_ext/ops.py)."""
    plan = build_plan(model.config, workers=13)
    bound, cache = Bound.of(model, plan), prefill(model, prompt, MAX_LEN)
    k, v = cache_lists(cache)
    position = torch.tensor([PROMPT])

    def verify(tokens):
        return torch.ops.tiles.decode_step(bound.runtime.plan_tensor, bound.runtime.header, bound.weights, k, v,
                                           bound.runtime.scratch, bound.runtime.state, tokens, position,
                                           bound.inv_freq, bound.rope_scale, 1, [], 0, None)

    eager = verify(draft(4))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        logits, tokens = verify(mode.from_tensor(draft(4)))
    assert tuple(logits.shape) == tuple(eager[0].shape) == (4, 1000) and tuple(tokens.shape) == (4,)
