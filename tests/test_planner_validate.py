"""validate_plan accepts real plans and refuses broken ones, naming the tile."""
import copy
import json
from pathlib import Path

import numpy as np
import pytest

from tiles_ext.planner import build_plan
from tiles_ext.planner.format import TILE, WAIT, Op
from tiles_ext.planner.plan import GpuTarget
from tiles_ext.planner.validate import PlanError, validate_plan

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def cfg(name):
    return json.loads((CONFIGS / name).read_text())


SMALL = dict(model_type="llama", hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=64,
             intermediate_size=200, vocab_size=301, num_hidden_layers=2, rms_norm_eps=1e-5,
             tie_word_embeddings=False)

COL = {f: i for i, (f, _) in enumerate(TILE.fields)}


@pytest.fixture(scope="module")
def small_plan():
    return build_plan(SMALL, 13)


def mutated(plan):
    p = copy.copy(plan)
    for name in ("tiles", "waits", "buffers", "worker_offsets", "worker_tiles", "weights"):
        setattr(p, name, getattr(plan, name).copy())
    p.header = dict(plan.header)
    return p


def find(plan, op, **fields):
    for i, t in enumerate(plan.tiles):
        if t[COL["op"]] == op and all(t[COL[k]] == v for k, v in fields.items()):
            return i
    raise LookupError


def refuse(plan, *fragments):
    with pytest.raises(PlanError) as e:
        validate_plan(plan)
    msg = str(e.value)
    for f in fragments:
        assert f in msg, msg
    return msg


def test_llama_1b_on_132_workers_validates():
    plan = build_plan(cfg("llama-3.2-1b-config.json"), 132, gpu=GpuTarget("NVIDIA H200", 132, 9, 0))
    validate_plan(plan)
    assert plan.header["num_tiles"] > 10000


@pytest.mark.parametrize("workers", [1, 7, 61, 133])
def test_smollm2_on_odd_worker_counts_validates(workers):
    validate_plan(build_plan(cfg("smollm2-135m-config.json"), workers))


def test_waves_policy_validates(small_plan):
    validate_plan(build_plan(SMALL, 13, policy="waves"))


def test_dropped_wait_names_the_reader(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.ATTN, aux0=1, aux1=0)
    p.tiles[i, COL["wait_count"]] = 0
    refuse(p, f"tile {i} ", "is not ordered before it", "a wait is missing")


def test_duplicate_row_names_both_tiles(small_plan):
    p = mutated(small_plan)
    w = p.tiles[find(p, Op.GATEUP), COL["weight"]]
    rows = sorted((t[COL["row_begin"]], i) for i, t in enumerate(p.tiles) if t[COL["weight"]] == w)
    i = rows[1][1]
    p.tiles[i, COL["row_begin"]] -= 1
    p.tiles[i, COL["out_offset"]] -= 1
    p.tiles[i, COL["weight_bytes"]] += 2 * SMALL["hidden_size"] * 2
    msg = refuse(p, "also computed by")
    assert f"tile {i} " in msg and f"tile {rows[0][1]} " in msg


def test_out_of_bounds_row(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.LMHEAD, aux0=p.header["lm_tiles"] - 1)
    p.tiles[i, COL["row_end"]] = SMALL["vocab_size"] + 1
    refuse(p, f"tile {i} ", "outside weight")


def test_missing_rows(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.LMHEAD, aux0=p.header["lm_tiles"] - 1)
    p.tiles[i, COL["row_end"]] -= 1
    p.tiles[i, COL["weight_bytes"]] -= SMALL["hidden_size"] * 2
    refuse(p, "computed by no tile")


def test_weight_bytes_must_match_rows(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.RESID)
    p.tiles[i, COL["weight_bytes"]] += 2
    refuse(p, f"tile {i} ", "weight_bytes")


@pytest.mark.parametrize("op,field", [(Op.QKV, "aux0"), (Op.ATTN, "row_end"), (Op.EMBED, "out_offset")])
def test_unused_fields_must_be_neutral(small_plan, op, field):
    p = mutated(small_plan)
    i = find(p, op)
    p.tiles[i, COL[field]] += 3
    refuse(p, f"tile {i} ", f"{field} = ")


def test_cycle_through_waits(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.QKV, layer=0)
    down0 = p.tiles[find(p, Op.RESID, layer=0, weight=8), COL["signal"]]
    n = int((p.tiles[:, COL["signal"]] == down0).sum())
    p.waits[p.tiles[i, COL["wait_begin"]]] = (down0, n, 0)   # layer 0's q now waits for layer 0's down
    refuse(p, "dependency cycle", "deadlock", "tile ")


def test_cycle_through_worker_order(small_plan):
    p = mutated(small_plan)
    w = 3
    a, b = p.worker_offsets[w], p.worker_offsets[w + 1]
    p.worker_tiles[a:b] = p.worker_tiles[a:b][::-1].copy()
    refuse(p, "dependency cycle", "runs after")


@pytest.mark.parametrize("delta,fragment", [(1, "wait forever"), (-1, "could run before all producers")])
def test_wait_count_must_equal_signalers(small_plan, delta, fragment):
    p = mutated(small_plan)
    i = find(p, Op.MERGE)
    p.waits[p.tiles[i, COL["wait_begin"]], 1] += delta
    refuse(p, f"tile {i} ", fragment)


def test_embed_must_wait_for_previous_argmax(small_plan):
    p = mutated(small_plan)
    e = find(p, Op.EMBED)
    p.waits[p.tiles[e, COL["wait_begin"]], 2] = 0
    refuse(p)   # a same-step wait on ARGMAX: a cycle


def test_embed_without_waits(small_plan):
    p = mutated(small_plan)
    e = find(p, Op.EMBED)
    p.tiles[e, COL["wait_count"]] = 0
    refuse(p, f"tile {e} ", "previous step's ARGMAX")


def test_wrong_buffer_dtype(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.MERGE)
    p.tiles[i, COL["out_buf"]] = p.tiles[i, COL["in_buf"]]
    refuse(p, f"tile {i} ", "dtype F32, op needs BF16")


def test_wrong_layer_weight(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.QKV, layer=1)
    p.tiles[i, COL["weight"]] -= 9      # same slot of layer 0
    refuse(p, f"tile {i} ", "of layer 1")


def test_miswired_input(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.ATTN, layer=0)
    p.tiles[i, COL["in2_buf"]], p.tiles[i, COL["in3_buf"]] = p.tiles[i, COL["in3_buf"]], p.tiles[i, COL["in2_buf"]]
    refuse(p, f"tile {i} ", "the model needs L0.k")


def test_overlapping_buffers(small_plan):
    p = mutated(small_plan)
    p.buffers[1, 0] = p.buffers[0, 0]
    refuse(p, "overlap")


def test_buffer_out_of_scratch(small_plan):
    p = mutated(small_plan)
    p.header["row_bytes"] -= 256
    p.header["scratch_bytes"] = p.header["max_rows"] * p.header["row_bytes"]
    refuse(p, "exceed row_bytes")


def test_arena_that_does_not_hold_its_rows(small_plan):
    p = mutated(small_plan)
    p.header["scratch_bytes"] -= 256
    refuse(p, "max_rows x row_bytes")
    p = mutated(small_plan)
    p.header["max_rows"] = 9
    refuse(p, "max_rows 9")


def test_tile_on_two_workers(small_plan):
    p = mutated(small_plan)
    p.worker_tiles[0] = p.worker_tiles[-1]
    refuse(p, "times in worker lists")


def test_header_must_match_shape(small_plan):
    p = mutated(small_plan)
    p.header["hidden"] += 8
    refuse(p, "hidden")


def test_negative_attn_single_is_refused(small_plan):
    p = mutated(small_plan)
    p.header["attn_single"] = -1
    refuse(p, "attn_single = -1")
    with pytest.raises(ValueError, match="attn_single -1"):
        build_plan(SMALL, 13, attn_single=-1)


def test_more_workers_than_sms():
    p = build_plan(SMALL, 13, gpu=GpuTarget("x", 13, 9, 0))
    p = mutated(p)
    p.gpu = GpuTarget("x", 12, 9, 0)
    p.header["sm_count"] = 12
    refuse(p, "13 workers", "12 SMs", "deadlock")


def test_error_is_value_error(small_plan):
    assert issubclass(PlanError, ValueError)


def test_merge_next_marks_exactly_the_adjacent_pairs(small_plan):
    """out_offset 1 on an ATTN tile is a promise the kernel acts on (it skips the partials at short context): the
    planner sets it on every partition-0 tile whose MERGE is the next tile of its worker, and nowhere else."""
    lists = [small_plan.worker_list(w).tolist() for w in range(small_plan.num_workers)]
    nxt = {a: b for lst in lists for a, b in zip(lst, lst[1:])}
    T = small_plan.tiles
    marked = 0
    for i, t in enumerate(T):
        if t[COL["op"]] != Op.ATTN:
            continue
        j = nxt.get(i, -1)
        adjacent = (t[COL["aux1"]] == 0 and j >= 0 and T[j, COL["op"]] == Op.MERGE
                    and T[j, COL["layer"]] == t[COL["layer"]] and T[j, COL["aux0"]] == t[COL["aux0"]])
        assert t[COL["out_offset"]] == int(adjacent), small_plan.tile_name(i)
        if adjacent:
            assert T[j, COL["aux1"]] == t[COL["signal"]] + 1, small_plan.tile_name(j)
        marked += int(adjacent)
    assert marked == SMALL["num_hidden_layers"] * SMALL["num_key_value_heads"]
    unmarked = build_plan(SMALL, 13, merge_next=False)
    assert not unmarked.tiles[unmarked.tiles[:, COL["op"]] == Op.ATTN, COL["out_offset"]].any()
    assert not unmarked.tiles[unmarked.tiles[:, COL["op"]] == Op.MERGE, COL["aux1"]].any()
    validate_plan(unmarked)


def test_false_merge_next_promise_is_refused(small_plan):
    p = mutated(small_plan)
    i = find(p, Op.ATTN, layer=0, aux0=0, aux1=1)   # a partition whose MERGE runs elsewhere
    p.tiles[i, COL["out_offset"]] = 1
    refuse(p, f"tile {i} ", "out_offset = 1", "partition-0")
    p = mutated(small_plan)
    i = find(p, Op.ATTN, layer=0, aux0=0, aux1=0)
    a, b = find(p, Op.MERGE, layer=0, aux0=0), find(p, Op.MERGE, layer=0, aux0=1)
    ka, kb = int(np.argwhere(p.worker_tiles == a)[0][0]), int(np.argwhere(p.worker_tiles == b)[0][0])
    p.worker_tiles[ka], p.worker_tiles[kb] = b, a   # the two MERGE tiles trade workers: both promises break
    refuse(p, f"tile {i} ", "says the MERGE of its KV head runs next")
    p = mutated(small_plan)
    p.tiles[a, COL["aux1"]] += 1   # the MERGE would release another counter than its ATTN tile's
    refuse(p, f"tile {a} ", "aux1 = ", "counter")
