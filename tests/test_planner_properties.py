"""Property tests: random Llama-family configs on random worker counts build, validate and round-trip."""
import copy

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from tiles_ext.planner import build_plan
from tiles_ext.planner.format import TILE, Op
from tiles_ext.planner.plan import GpuTarget
from tiles_ext.planner.planfile import PlanFileCorrupt, PlanMismatch, decode_plan, encode_plan
from tiles_ext.planner.validate import PlanError, validate_plan

import pytest


@st.composite
def llama_configs(draw):
    kv = draw(st.integers(1, 4))
    group = draw(st.sampled_from([1, 2, 3, 4, 8]))
    cfg = dict(
        model_type="llama",
        hidden_size=8 * draw(st.integers(2, 32)),
        num_attention_heads=kv * group,
        num_key_value_heads=kv,
        head_dim=draw(st.sampled_from([64, 128])),
        intermediate_size=8 * draw(st.integers(1, 64)),
        vocab_size=draw(st.integers(1, 3000)),
        num_hidden_layers=draw(st.integers(1, 3)),
        rms_norm_eps=draw(st.sampled_from([1e-5, 1e-6, 9.999999747378752e-06])),
        tie_word_embeddings=draw(st.booleans()),
    )
    if draw(st.booleans()):
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    return cfg


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cfg=llama_configs(), workers=st.integers(1, 140), policy=st.sampled_from(["tiles", "waves"]))
def test_build_validates_and_round_trips(cfg, workers, policy):
    gpu = GpuTarget("prop GPU", 140, 9, 0)
    plan = build_plan(cfg, workers, policy=policy, gpu=gpu)        # validates
    data = encode_plan(plan)
    back = decode_plan(data, expect_shape=cfg, expect_gpu=gpu)       # validates again
    assert np.array_equal(back.to_blob(), plan.to_blob())
    assert back.header == plan.header and back.policy == policy
    # every LM head row and every weight byte is accounted for exactly once
    t = plan.tiles
    lm = t[t[:, TILE.index("op")] == Op.LMHEAD]
    assert int((lm[:, TILE.index("row_end")] - lm[:, TILE.index("row_begin")]).sum()) == cfg["vocab_size"]
    assert plan.header["lm_tiles"] == min(workers, cfg["vocab_size"])


@SETTINGS
@given(cfg=llama_configs(), workers=st.integers(1, 140), data=st.data())
def test_any_flipped_byte_is_refused(cfg, workers, data):
    plan = build_plan(cfg, workers)
    raw = bytearray(encode_plan(plan))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(PlanFileCorrupt):
        decode_plan(bytes(raw))


@SETTINGS
@given(cfg=llama_configs(), workers=st.integers(1, 140), data=st.data())
def test_dropping_a_wait_is_caught_unless_redundant(cfg, workers, data):
    """Oracle: in the tiles policy a tile's waits name exactly its producers' counters, so dropping them is
    safe only if all those producers still reach the tile through worker order and others' waits (checked
    here by a plain graph search, independent of the validator's bitsets)."""
    plan = build_plan(cfg, workers)
    i = data.draw(st.integers(1, plan.header["num_tiles"] - 1))    # any tile but EMBED
    p = copy.copy(plan)
    p.tiles = plan.tiles.copy()
    p.tiles[i, TILE.index("wait_count")] = 0
    try:
        validate_plan(p)
        accepted = True
    except PlanError as e:
        assert f"tile {i} " in str(e)
        accepted = False
    assert accepted == _producers_still_before(plan, i)


def _producers_still_before(plan, i):
    col = {f: k for k, (f, _) in enumerate(TILE.fields)}
    n = plan.header["num_tiles"]
    signal = plan.tiles[:, col["signal"]]

    def waits(j):
        b, c = plan.tiles[j, col["wait_begin"]], plan.tiles[j, col["wait_count"]]
        return [int(w[0]) for w in plan.waits[b:b + c] if w[2] == 0]

    prev = {}
    for w in range(plan.num_workers):
        lst = plan.worker_list(w).tolist()
        prev.update(zip(lst[1:], lst[:-1]))
    producers = {j for c in waits(i) for j in np.nonzero(signal == c)[0].tolist()}
    seen, stack = set(), [prev[i]] if i in prev else []
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        if j in prev:
            stack.append(prev[j])
        for c in waits(j):
            stack.extend(np.nonzero(signal == c)[0].tolist())
    return producers <= seen


@settings(max_examples=15, deadline=None)
@given(cfg=llama_configs(), workers=st.integers(1, 140))
def test_other_config_or_gpu_refused(cfg, workers):
    gpu = GpuTarget("prop GPU", 140, 9, 0)
    data = encode_plan(build_plan(cfg, workers, gpu=gpu))
    other = dict(cfg, vocab_size=cfg["vocab_size"] + 1)
    with pytest.raises(PlanMismatch) as e:
        decode_plan(data, expect_shape=other)
    assert e.value.kind == "config"
    with pytest.raises(PlanMismatch) as e:
        decode_plan(data, expect_gpu=GpuTarget("prop GPU", 132, 9, 0))
    assert e.value.kind == "gpu"


@SETTINGS
@given(cfg=llama_configs(), workers=st.integers(1, 140), data=st.data())
def test_corrupting_a_tile_field_is_caught(cfg, workers, data):
    """Shifting a row bound, re-routing a buffer or a signal, or moving a tile to another layer always breaks
    a plan; the validator must say so (naming the tile, or the rows left uncovered)."""
    plan = build_plan(cfg, workers)
    col = {f: k for k, (f, _) in enumerate(TILE.fields)}
    i = data.draw(st.integers(0, plan.header["num_tiles"] - 1))
    op = int(plan.tiles[i, col["op"]])
    fields = ["signal", "layer"] if op not in (Op.EMBED, Op.ARGMAX) else ["signal"]
    if op in (Op.QKV, Op.RESID, Op.GATEUP, Op.LMHEAD):
        fields += ["row_end", "row_begin"]
    if op != Op.EMBED:
        fields.append("in_buf")
    if op != Op.ARGMAX:
        fields.append("out_buf")
    field = data.draw(st.sampled_from(fields))
    old = int(plan.tiles[i, col[field]])
    limit = {"signal": plan.header["num_counters"], "layer": plan.shape.num_layers,
             "in_buf": plan.header["num_buffers"], "out_buf": plan.header["num_buffers"]}.get(field)
    new = data.draw(st.integers(-1, limit - 1) if limit else st.sampled_from([old - 1, old + 1]))
    if new == old or (field == "signal" and plan.header["num_counters"] == 1):
        return
    p = copy.copy(plan)
    p.tiles = plan.tiles.copy()
    p.tiles[i, col[field]] = new
    with pytest.raises(PlanError, match=r"tile \d+ |computed by no tile"):
        validate_plan(p)
