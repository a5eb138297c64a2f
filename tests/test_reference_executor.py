"""The CPU reference executor: schedule independence, multi-token mode, the epoch/counter rule, dependency bugs
caught by randomized worker orders, and clear errors for bad input."""
import numpy as np
import pytest
import torch

from parity_helpers import Bound, cache_lists, prefill, tiny_config, tiny_model
from tiles_ext.errors import TileKernelError, error_words
from tiles_ext.planner import build_plan
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import TILE, WAIT, Op, StateWord

PROMPT = 5
MAX_LEN = 48
TF = {f: i for i, (f, _) in enumerate(TILE.fields)}
WF = {f: i for i, (f, _) in enumerate(WAIT.fields)}


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_config(264, 6, 2, 64, 456, 2, vocab=1000), seed=3)


@pytest.fixture(scope="module")
def plan(model):
    return build_plan(model.config, workers=13)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, 1000, (1, PROMPT), generator=torch.Generator().manual_seed(5))


def fresh(model, plan, prompt):
    """A new runtime (state, scratch) and a StaticCache holding the prompt."""
    return Bound.of(model, plan), prefill(model, prompt, MAX_LEN)


def run_single_steps(bound, cache, token, n, order_seed=0):
    """n greedy single-step launches; returns (logits [n, V], tokens [n])."""
    logits, tokens = [], []
    for i in range(n):
        lg, tk = bound.step(cache, token, PROMPT + i, order_seed=order_seed)
        logits.append(lg[0])
        tokens.append(int(tk[0]))
        token = tokens[-1]
    return torch.stack(logits), torch.tensor(tokens)


def tile_word(plan, tile, field):
    return plan.header["tiles_offset"] + tile * TILE.words + TF[field]


def wait_word(plan, wait, field):
    return plan.header["waits_offset"] + wait * WAIT.words + WF[field]


def test_state_counters_follow_epoch_rule(model, plan, prompt):
    bound, cache = fresh(model, plan, prompt)
    run_single_steps(bound, cache, 7, 3)
    state = bound.runtime.state
    assert int(state[StateWord.EPOCH]) == 3 and int(state[StateWord.STEPS_DONE]) == 1
    assert int(state[StateWord.ERROR]) == 0
    # Every counter holds (steps so far) x (arrivals per step): never reset, only advanced.
    arrivals = np.bincount(plan.tiles[:, TF["signal"]], minlength=plan.header["num_counters"])
    counters = state[fmt.STATE_HEADER_WORDS::fmt.COUNTER_STRIDE_WORDS][: plan.header["num_counters"]]
    assert counters.tolist() == (3 * arrivals).tolist()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_worker_orders_are_bit_identical(model, plan, prompt, seed):
    ref_bound, ref_cache = fresh(model, plan, prompt)
    ref_logits, ref_tokens = run_single_steps(ref_bound, ref_cache, 11, 4)
    bound, cache = fresh(model, plan, prompt)
    logits, tokens = run_single_steps(bound, cache, 11, 4, order_seed=seed)
    assert torch.equal(tokens, ref_tokens)
    assert torch.equal(logits, ref_logits)
    for a, b in zip(cache_lists(cache)[0] + cache_lists(cache)[1], cache_lists(ref_cache)[0] +
                    cache_lists(ref_cache)[1]):
        assert torch.equal(a, b)


def test_multi_token_equals_single_steps(model, plan, prompt):
    n = 12
    bound, cache = fresh(model, plan, prompt)
    single_logits, single_tokens = run_single_steps(bound, cache, 11, n)
    mbound, mcache = fresh(model, plan, prompt)
    logits, tokens = mbound.step(mcache, 11, PROMPT, num_steps=n)
    assert torch.equal(tokens, single_tokens)
    assert torch.equal(logits, single_logits)
    for a, b in zip(cache_lists(cache)[0] + cache_lists(cache)[1], cache_lists(mcache)[0] + cache_lists(mcache)[1]):
        assert torch.equal(a, b)
    st = mbound.runtime.state
    assert int(st[StateWord.EPOCH]) == n and int(st[StateWord.STEPS_DONE]) == n
    # Shuffled multi-token launch: same bits.
    sbound, scache = fresh(model, plan, prompt)
    slogits, stokens = sbound.step(scache, 11, PROMPT, num_steps=n, order_seed=9)
    assert torch.equal(stokens, single_tokens) and torch.equal(slogits, single_logits)


def test_eos_stops_the_launch_and_the_next_launch_continues(model, plan, prompt):
    n = 12
    bound, cache = fresh(model, plan, prompt)
    single_logits, single_tokens = run_single_steps(bound, cache, 11, n)
    stop = 4
    eos = int(single_tokens[stop])
    stop = int((single_tokens == eos).nonzero()[0])  # first occurrence
    mbound, mcache = fresh(model, plan, prompt)
    logits, tokens = mbound.step(mcache, 11, PROMPT, num_steps=n, eos_ids=[999 if eos != 999 else 998, eos])
    assert torch.equal(tokens[: stop + 1], single_tokens[: stop + 1])
    assert (tokens[stop + 1:] == -1).all()
    assert torch.equal(logits[: stop + 1], single_logits[: stop + 1])
    assert torch.isnan(logits[stop + 1:]).all()
    st = mbound.runtime.state
    assert int(st[StateWord.STEPS_DONE]) == stop + 1 and int(st[StateWord.EPOCH]) == stop + 1
    # The counters are consistent: the next launch resumes the same greedy sequence.
    logits2, tokens2 = mbound.step(mcache, eos, PROMPT + stop + 1, num_steps=n - stop - 1)
    assert torch.equal(tokens2, single_tokens[stop + 1:])
    assert torch.equal(logits2, single_logits[stop + 1:])
    assert int(st[StateWord.EPOCH]) == n


def _attn_tile(plan, layer):
    """Index of the (layer, kv head 0, partition 0) ATTN tile: partition 0 always holds positions."""
    for i, t in enumerate(plan.tiles):
        if t[TF["op"]] == Op.ATTN and t[TF["layer"]] == layer and t[TF["aux0"]] == 0 and t[TF["aux1"]] == 0:
            return i
    raise AssertionError("no ATTN tile")


def _break_remove_wait(plan, blob):
    i = _attn_tile(plan, 1)
    blob[tile_word(plan, i, "wait_count")] = 0


def _break_wrong_counter(plan, blob):
    # Point the ATTN tile's wait at the EMBED counter (1 arrival per step): satisfiable, but far too early.
    i = _attn_tile(plan, 1)
    embed = next(j for j, t in enumerate(plan.tiles) if t[TF["op"]] == Op.EMBED)
    w = int(plan.tiles[i][TF["wait_begin"]])
    blob[wait_word(plan, w, "counter")] = int(plan.tiles[embed][TF["signal"]])
    blob[wait_word(plan, w, "count")] = 1


@pytest.mark.parametrize("breakage", [_break_remove_wait, _break_wrong_counter], ids=["no-wait", "wrong-counter"])
def test_shuffled_orders_catch_a_missing_dependency(model, plan, prompt, breakage):
    steps = 3
    ref_bound, ref_cache = fresh(model, plan, prompt)
    ref_logits, ref_tokens = ref_bound.step(ref_cache, 11, PROMPT, num_steps=steps)

    def shuffled_run(broken, seed):
        bound, cache = fresh(model, plan, prompt)
        if broken:
            breakage(plan, bound.runtime.plan_tensor)
        try:
            logits, tokens = bound.step(cache, 11, PROMPT, num_steps=steps, order_seed=seed)
        except RuntimeError as e:  # a broken plan may also surface as a bad token or deadlock: still caught
            return f"error: {e}"
        return None if torch.equal(logits, ref_logits) and torch.equal(tokens, ref_tokens) else "wrong logits"

    seeds = range(1, 7)
    assert all(shuffled_run(False, s) is None for s in seeds), "the correct plan must pass in every order"
    caught = [s for s in seeds if shuffled_run(True, s) is not None]
    assert caught, f"{breakage.__name__}: no shuffled order exposed the broken dependency"


def test_unsatisfiable_wait_raises_naming_worker_and_tile(model, plan, prompt):
    bound, cache = fresh(model, plan, prompt)
    i = _attn_tile(plan, 0)
    w = int(plan.tiles[i][TF["wait_begin"]])
    bound.runtime.plan_tensor[wait_word(plan, w, "count")] = 1000
    with pytest.raises(RuntimeError, match=r"deadlock: worker \d+ waits forever at tile \d+ \(L0\.attn\[h0 p0\]\)"):
        bound.step(cache, 11, PROMPT)
    err = error_words(bound.runtime.state)
    assert err["error"] == fmt.ErrorCode.WAIT_TIMEOUT and err["error_tile"] == i
    with pytest.raises(TileKernelError, match=rf"WAIT_TIMEOUT .* tile {i} \(L0\.attn\[h0 p0\]\)"):
        bound.runtime.check_error()
    # The counters are now inconsistent: the state refuses further launches instead of computing garbage.
    with pytest.raises(RuntimeError, match=r"holds an error .*WAIT_TIMEOUT"):
        bound.step(cache, 11, PROMPT)


def test_cache_full_raises_before_writing(model, plan, prompt):
    bound, cache = fresh(model, plan, prompt)
    before = [t.clone() for t in cache_lists(cache)[0]]
    with pytest.raises(RuntimeError, match="KV cache full"):
        bound.step(cache, 11, MAX_LEN - 2, num_steps=3)
    with pytest.raises(RuntimeError, match="KV cache full"):
        bound.step(cache, 11, MAX_LEN)
    assert all(torch.equal(a, b) for a, b in zip(before, cache_lists(cache)[0]))
    assert int(bound.runtime.state[StateWord.EPOCH]) == 0
    bound.step(cache, 11, MAX_LEN - 1)  # the last slot is usable


def test_bad_arguments_have_clear_errors(model, plan, prompt):
    bound, cache = fresh(model, plan, prompt)
    with pytest.raises(RuntimeError, match="input token id 1000 is outside the vocabulary"):
        bound.step(cache, 1000, PROMPT)
    with pytest.raises(RuntimeError, match="num_steps 0 outside 1..64"):
        bound.step(cache, 1, PROMPT, num_steps=0)
    with pytest.raises(RuntimeError, match="num_steps 65 outside"):
        bound.step(cache, 1, PROMPT, num_steps=65)
    with pytest.raises(RuntimeError, match="9 eos_ids given, at most 8"):
        bound.step(cache, 1, PROMPT, eos_ids=list(range(9)))
    with pytest.raises(RuntimeError, match="order_seed -1"):
        bound.step(cache, 1, PROMPT, order_seed=-1)
    good = bound.weights
    bound.weights = list(good)
    bound.weights[1] = good[1].float()
    with pytest.raises(RuntimeError, match=r"weights\[1\] \(q, layer 0\) has dtype Float, expected BFloat16"):
        bound.step(cache, 1, PROMPT)
    bound.weights[1] = good[1][:, :-8].contiguous()
    with pytest.raises(RuntimeError, match=r"weights\[1\] \(q, layer 0\) has shape \[384, 256\], the plan expects "
                                           r"\[384, 264\]"):
        bound.step(cache, 1, PROMPT)
    bound.weights = good
    k, v = cache_lists(cache)
    with pytest.raises(RuntimeError, match=r"k_cache\[1\] has shape"):
        bound.runtime.step(bound.weights, [k[0], k[1][:, :1]], v, torch.tensor([1]), torch.tensor([PROMPT]),
                           bound.inv_freq, bound.rope_scale)
    with pytest.raises(RuntimeError, match="position -1 is negative"):
        bound.step(cache, 1, -1)
    assert int(bound.runtime.state[StateWord.EPOCH]) == 0 and int(bound.runtime.state[StateWord.ERROR]) == 0


def test_plan_for_another_model_is_refused(model, plan, prompt):
    other = build_plan(tiny_config(288, 6, 2, 64, 456, 2, vocab=1000), workers=13)
    bound, cache = fresh(model, other, prompt)
    with pytest.raises(RuntimeError, match=r"weights\[0\] \(input_norm, layer 0\) has shape \[264\], the plan "
                                           r"expects \[288\]"):
        bound.step(cache, 1, PROMPT)
    # Plan tensor and header list from different plans.
    bound, cache = fresh(model, plan, prompt)
    bound.runtime.header = list(bound.runtime.header)
    blob = bound.runtime.plan_tensor
    bound.runtime.plan_tensor = blob.clone()
    bound.runtime.plan_tensor[fmt.HEADER.index("attn_granule")] += 1
    with pytest.raises(RuntimeError, match="differs from plan_header"):
        bound.step(cache, 1, PROMPT)


def test_corrupt_plan_fields_are_refused(model, plan, prompt):
    bound, cache = fresh(model, plan, prompt)
    i = _attn_tile(plan, 0)
    bound.runtime.plan_tensor[tile_word(plan, i, "out_buf")] = 10_000
    with pytest.raises(RuntimeError, match=rf"bad plan: tile {i} \(attn\) out_buf \(partials\) = 10000 is not a "
                                           "buffer id"):
        bound.step(cache, 1, PROMPT)
    bound, cache = fresh(model, plan, prompt)
    bound.runtime.plan_tensor[plan.header["worker_tiles_offset"]] = plan.worker_tiles[1]
    with pytest.raises(RuntimeError, match="listed twice"):
        bound.step(cache, 1, PROMPT)
    # A "MERGE next" mark (out_offset 1) on a partition whose MERGE runs elsewhere: the kernel would skip partials
    # that MERGE reads, so the op refuses the blob as it does a broken one.
    bound, cache = fresh(model, plan, prompt)
    j = next(k for k, t in enumerate(plan.tiles) if t[0] == fmt.Op.ATTN and t[fmt.TILE.index("aux1")] == 1)
    bound.runtime.plan_tensor[tile_word(plan, j, "out_offset")] = 1
    with pytest.raises(RuntimeError, match=rf"bad plan: tile {j} \(attn, layer \d+\): out_offset \(MERGE next\)"):
        bound.step(cache, 1, PROMPT)
    bound, cache = fresh(model, plan, prompt)
    bound.runtime.header = list(bound.runtime.header)
    bound.runtime.header[fmt.HEADER.index("magic")] = 1
    with pytest.raises(RuntimeError, match="not a Tiles plan header"):
        bound.step(cache, 1, PROMPT)
