"""Tile graph and schedule: any Llama-family config, balanced bytes per stage, LM head over all workers."""
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tiles_ext.planner import build_plan
from tiles_ext.families import shape_of
from tiles_ext.planner.format import ATTN_CHUNK_ELEMS, SLOTS, TILE, Op
from tiles_ext.planner.shape import UnsupportedConfig
from tiles_ext.planner.graph import floor_pieces, max_piece_rows
from tiles_ext.planner.plan import PLAN_REVISION, GpuTarget
from tiles_ext.planner.weights import WeightLayout
from tiles_ext.planner.summary import stage_stats

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
COL = {f: i for i, (f, _) in enumerate(TILE.fields)}


def cfg(name):
    return json.loads((CONFIGS / name).read_text())


def test_transformers_config_gives_the_same_plan():
    transformers = pytest.importorskip("transformers")
    d = cfg("smollm2-135m-config.json")
    a = build_plan(transformers.LlamaConfig(**d), 9)
    b = build_plan(d, 9)
    assert a.shape == b.shape and np.array_equal(a.to_blob(), b.to_blob())
    assert a.shape.rope_type == "default" and a.shape.tied_lm_head
    assert shape_of(transformers.LlamaConfig(**cfg("llama-3.2-1b-config.json"))).rope_type == "llama3"


@pytest.mark.parametrize("change,fragment", [
    (dict(head_dim=96), "head_dim 96"),
    (dict(model_type="gemma"), "model_type 'gemma'"),
    (dict(num_key_value_heads=4, num_attention_heads=6), "not a multiple"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}), "rope_type .yarn."),
    (dict(attention_bias=True), "bias"),
])
def test_unsupported_configs_name_the_field(change, fragment):
    d = dict(cfg("smollm2-135m-config.json"), **change)
    with pytest.raises(UnsupportedConfig, match=fragment):
        build_plan(d, 4)


@pytest.mark.parametrize("name,workers", [("llama-3.2-1b-config.json", 132), ("smollm2-135m-config.json", 77),
                                          ("smollm2-135m-config.json", 132)])
def test_matrix_stages_balanced_to_one_row(name, workers):
    """The busiest worker of each matrix stage holds at most ceil(rows / workers) rows' bytes (the o projection:
    ceil(rows / (workers - num_kv_heads)), cut off the MERGE workers by default; qkv likewise, cut into W - num_kv_heads
    pieces), or, where those would be small tiles (planner.graph.floor_pieces), the fewer pieces of >= 16 rows."""
    plan = build_plan(cfg(name), workers)
    s = plan.shape
    rows = {"qkv": ((s.num_heads + 2 * s.num_kv_heads) * s.head_dim, s.hidden * 2),
            "o": (s.hidden, s.num_heads * s.head_dim * 2), "gateup": (s.intermediate, 2 * s.hidden * 2),
            "down": (s.hidden, s.intermediate * 2), "lmhead": (s.vocab, s.hidden * 2)}
    # qkv pieces never straddle a KV group's q/k/v segment: the bound is the smallest R that fits in W pieces.
    qkv_segments = [s.group * s.head_dim, s.head_dim, s.head_dim] * s.num_kv_heads
    # attn0_off_qkv (default): W - num_kv_heads qkv pieces, so that partition-0 ATTN tiles find workers without one.
    qkv_pieces = workers - s.num_kv_heads if workers > 2 * s.num_kv_heads else workers
    qkv_rows = max_piece_rows(qkv_segments, floor_pieces(sum(qkv_segments), qkv_pieces, s.hidden * 2, 16))
    for st in stage_stats(plan):
        kind = st.name.split(".")[-1]
        if kind in rows:
            n, row_bytes = rows[kind]
            assert st.bytes == n * row_bytes
            pieces = workers
            if kind == "o" and workers > 2 * s.num_kv_heads:  # o_off_merge (default): W - num_kv_heads pieces
                pieces = workers - s.num_kv_heads
            if kind != "lmhead":
                pieces = floor_pieces(n, pieces, row_bytes, 16)
            bound = qkv_rows if kind == "qkv" else math.ceil(n / pieces)
            assert st.max_bytes <= bound * row_bytes, st


@pytest.mark.parametrize("name,workers", [("llama-3.2-1b-config.json", 132), ("smollm2-135m-config.json", 132),
                                          ("smollm2-135m-config.json", 13)])
def test_one_qkv_tile_per_worker_per_layer(name, workers):
    """A second tile on a worker costs a fixed per-tile latency on the GPU; qkv pieces stay within a segment."""
    plan = build_plan(cfg(name), workers)
    qkv0 = {i for i in range(plan.header["num_tiles"])
            if plan.tiles[i, COL["op"]] == Op.QKV and plan.tiles[i, COL["layer"]] == 0}
    per_worker = [sum(1 for i in plan.worker_list(w).tolist() if i in qkv0) for w in range(workers)]
    assert max(per_worker) == 1


@pytest.mark.parametrize("vocab,workers", [(128256, 132), (49152, 7), (37, 140), (1, 3)])
def test_lm_head_over_all_workers(vocab, workers):
    d = dict(cfg("smollm2-135m-config.json"), vocab_size=vocab, num_hidden_layers=1)
    plan = build_plan(d, workers)
    lm = [i for i in range(plan.header["num_tiles"]) if plan.tiles[i, COL["op"]] == Op.LMHEAD]
    assert len(lm) == plan.header["lm_tiles"] == min(vocab, workers)
    owners = {w for w in range(workers) for i in plan.worker_list(w).tolist() if i in set(lm)}
    assert len(owners) == len(lm)              # one LM tile per worker
    argmax = [i for i in range(plan.header["num_tiles"]) if plan.tiles[i, COL["op"]] == Op.ARGMAX]
    assert len(argmax) == 1 and plan.tiles[argmax[0], COL["aux0"]] == len(lm)


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gqa_ratios_and_attention_partitions(group, head_dim):
    kv = 2
    d = dict(model_type="llama", hidden_size=8 * 20, num_attention_heads=kv * group, num_key_value_heads=kv,
             head_dim=head_dim, intermediate_size=8 * 9, vocab_size=999, num_hidden_layers=2)
    plan = build_plan(d, 23)
    P = plan.header["attn_partitions"]
    assert P == 23 // kv
    attn = plan.tiles[plan.tiles[:, COL["op"]] == Op.ATTN]
    got = sorted(zip(attn[:, COL["layer"]].tolist(), attn[:, COL["aux0"]].tolist(), attn[:, COL["aux1"]].tolist()))
    assert got == [(l, h, p) for l in range(2) for h in range(kv) for p in range(P)]
    buf = plan.buffers[attn[0, COL["out_buf"]]]
    assert buf[1] == kv * P * group * (head_dim + 2)


@pytest.mark.parametrize("name,workers,expected", [("smollm2-135m", 132, 16), ("smollm2-135m", 40, 13),
                                                    ("llama-3.2-1b", 132, 16), ("llama-3.2-1b", 60, 7)])
def test_default_attention_partitions_capped_at_16(name, workers, expected):
    """W // kv_heads partitions per KV head, at most 16 (SmolLM2's 44 cost 15% at short context), unless the
    off-qkv rule places them off the qkv workers (attn_off_qkv=False here; the rule's test is below); an explicit
    count is kept as given."""
    d = cfg(f"{name}-config.json")
    assert build_plan(d, workers, attn_off_qkv=False).header["attn_partitions"] == expected
    assert build_plan(d, workers, attn_partitions=44).header["attn_partitions"] == 44


def test_waves_policy_waits_on_the_whole_previous_stage():
    d = cfg("smollm2-135m-config.json")
    t, w = build_plan(d, 12), build_plan(d, 12, policy="waves")
    assert np.array_equal(t.tiles[:, COL["row_begin"]], w.tiles[:, COL["row_begin"]])
    first_attn = int(np.argmax(w.tiles[:, COL["op"]] == Op.ATTN))
    n_waves = w.tiles[first_attn, COL["wait_count"]]
    n_tiles = t.tiles[first_attn, COL["wait_count"]]
    assert n_waves == d["num_key_value_heads"] and n_tiles == 1   # all qkv groups vs only its own


@pytest.mark.parametrize("name,workers", [("llama-3.2-1b-config.json", 132), ("smollm2-135m-config.json", 132),
                                          ("smollm2-135m-config.json", 9)])
def test_merge_runs_right_after_its_partition_0_attention_tile(name, workers):
    """The kernel's LocalMerge (MERGE from the ATTN tile's shared memory) applies only when a MERGE tile directly
    follows its KV head's partition-0 ATTN tile on the same worker: the scheduler must keep them adjacent."""
    plan = build_plan(cfg(name), workers)
    T = np.asarray(plan.tiles)
    merges = 0
    for w in range(workers):
        lst = plan.worker_list(w).tolist()
        for k, i in enumerate(lst):
            if T[i, COL["op"]] != Op.MERGE:
                continue
            merges += 1
            prev = lst[k - 1]
            assert k > 0 and T[prev, COL["op"]] == Op.ATTN and T[prev, COL["aux1"]] == 0, (w, k)
            assert T[prev, COL["layer"]] == T[i, COL["layer"]] and T[prev, COL["aux0"]] == T[i, COL["aux0"]]
    shape = plan.shape
    assert merges == shape.num_layers * shape.num_kv_heads
    assert plan.header["attn_single"] == ATTN_CHUNK_ELEMS // shape.head_dim and plan.header["attn_granule"] == 32


@pytest.mark.parametrize("name", ["llama-3.2-1b-config.json", "smollm2-135m-config.json"])
def test_o_projection_can_avoid_the_merge_workers(name):
    """o_off_merge: the o tiles of a layer never share a worker with that layer's MERGE tiles (the last tiles to
    finish before o), and the stage is cut into workers - num_kv_heads pieces (min_rows=0: SmolLM2's o tiles would
    otherwise be floored to 36 pieces of 16 rows, which avoid the MERGE workers too)."""
    plan = build_plan(cfg(name), 132, o_off_merge=True, min_rows=0)
    T = np.asarray(plan.tiles)
    shape = plan.shape
    o_tiles = 0
    for w in range(132):
        lst = plan.worker_list(w).tolist()
        merge_layers = {T[i, COL["layer"]] for i in lst if T[i, COL["op"]] == Op.MERGE}
        o_layers = [T[i, COL["layer"]] for i in lst if T[i, COL["op"]] == Op.RESID and T[i, COL["weight"]] ==
                    WeightLayout(shape).index(T[i, COL["layer"]], "o")]
        assert not merge_layers & set(o_layers), w
        o_tiles += len(o_layers)
    assert o_tiles == shape.num_layers * (132 - shape.num_kv_heads)


def test_negative_min_rows_is_refused():
    with pytest.raises(ValueError, match="min_rows -1 must be >= 0"):
        build_plan(cfg("smollm2-135m-config.json"), 132, min_rows=-1)


def slot_name(plan, w):
    return SLOTS[int(plan.weights[w][0])]


MATVEC_KIND = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "o", "gate": "gateup", "down": "down"}


def matvec_tiles(plan, layer):
    """{stage kind: [(row_begin, row_end), ...]} of one layer's qkv, o, gate/up and down tiles (by weight slot)."""
    T = np.asarray(plan.tiles)
    out = {"qkv": [], "o": [], "gateup": [], "down": []}
    for t in T[T[:, COL["layer"]] == layer]:
        kind = MATVEC_KIND.get(slot_name(plan, int(t[COL["weight"]])))
        if kind:
            out[kind].append((int(t[COL["row_begin"]]), int(t[COL["row_end"]])))
    return out


def test_small_matvec_tiles_are_cut_into_fewer_pieces_of_16_rows():
    """SmolLM2 on 132 workers: one piece per worker would give tiles of 4-12 rows (5-27 KB, each paying ~2 us of
    hand-off and input reads), so every matvec stage is cut into pieces of 16 rows or more instead; min_rows=0
    restores one piece per worker (the o projection: 132 - 3 MERGE workers)."""
    d = cfg("smollm2-135m-config.json")
    floored, plain = build_plan(d, 132), build_plan(d, 132, min_rows=0)
    for layer in (0, 29):
        got, old = matvec_tiles(floored, layer), matvec_tiles(plain, layer)
        for kind, tiles in got.items():
            assert min(b - a for a, b in tiles) >= 16, kind
            assert len(tiles) < len(old[kind])
        assert len(got["o"]) == 576 // 16 and len(old["o"]) == 129
        assert len(got["down"]) == 576 // 16 and len(got["gateup"]) == 1536 // 16


def test_large_matvec_tiles_keep_one_piece_per_worker():
    """Llama-1B's matvec tiles are 67-508 KB on 132 workers: the floor leaves the plan as it was (a 16-row floor on
    its down cut, 15.5 rows per worker, idled 4 workers and cost 1.4%)."""
    d = cfg("llama-3.2-1b-config.json")
    assert np.array_equal(build_plan(d, 132).to_blob(), build_plan(d, 132, min_rows=0).to_blob())



@pytest.mark.parametrize("name", ["llama-3.2-1b-config.json", "smollm2-135m-config.json"])
def test_partition_0_attention_can_avoid_the_qkv_workers(name):
    """attn0_off_qkv: every partition-0 ATTN tile runs on a worker without a qkv tile of its layer (its K/V rows
    are then staged while the qkv stage runs), its MERGE still right after it. The default (measured -1.3 to -2.7%);
    the plan without it differs."""
    plan = build_plan(cfg(name), 132, attn0_off_qkv=True)
    T = np.asarray(plan.tiles)
    seen = 0
    for w in range(132):
        lst = plan.worker_list(w).tolist()
        qkv_layers = {T[i, COL["layer"]] for i in lst if T[i, COL["op"]] == Op.QKV}
        for k, i in enumerate(lst):
            if T[i, COL["op"]] == Op.ATTN and T[i, COL["aux1"]] == 0:
                seen += 1
                assert T[i, COL["layer"]] not in qkv_layers, (w, i)
                assert T[lst[k + 1], COL["op"]] == Op.MERGE
    assert seen == plan.shape.num_layers * plan.shape.num_kv_heads
    assert np.array_equal(plan.to_blob(), build_plan(cfg(name), 132).to_blob())  # the default
    assert not np.array_equal(plan.to_blob(), build_plan(cfg(name), 132, attn0_off_qkv=False).to_blob())


# Blob hashes of the default plans (plan format 6: the header's max_rows and row_bytes, an arena of MAX_ROWS rows;
# the cut is revision 4's, tile by tile the same as under formats 3 to 5).
DEFAULT_PLAN_MD5 = {6: {"llama-3.2-1b-config.json": "9affef22eeb50b4cc862292446285dc2",
                        "smollm2-135m-config.json": "869a0682500892fb333a090c4c9334b1"}}


@pytest.mark.parametrize("name", ["llama-3.2-1b-config.json", "smollm2-135m-config.json"])
def test_default_plans_change_only_with_the_planner_revision(name):
    """Plan caches are keyed by PLAN_REVISION (planfile.cache_path): a change of the default plans that does not bump
    it would leave every cached plan of the old planner in use. If this fails after an intended planner change, bump
    planner.plan.PLAN_REVISION and record the new hashes here."""
    blob = build_plan(cfg(name), 132, gpu=GpuTarget("NVIDIA H200", 132, 9, 0)).to_blob()
    assert PLAN_REVISION in DEFAULT_PLAN_MD5, f"no recorded hashes for PLAN_REVISION {PLAN_REVISION}"
    assert hashlib.md5(blob.tobytes()).hexdigest() == DEFAULT_PLAN_MD5[PLAN_REVISION][name]


def same_layer_pairs(plan, first, second) -> int:
    """How many tiles matching `second` share a worker with a tile matching `first` of the same layer."""
    T = np.asarray(plan.tiles)
    n = 0
    for w in range(plan.header["num_workers"]):
        rows = T[plan.worker_list(w)]
        layers = {t[COL["layer"]] for t in rows if first(t)}
        n += sum(1 for t in rows if second(t) and t[COL["layer"]] in layers)
    return n


def is_op(op):
    return lambda t: t[COL["op"]] == op


def test_attention_partitions_off_the_qkv_workers_where_they_fit():
    """SmolLM2 on 132 workers (60 qkv pieces) leaves 72 workers without a qkv tile, room for 24 partitions of
    each of its 3 KV heads: the default plan takes 24 partitions and no ATTN tile shares a worker with a qkv tile of
    its layer (attn_off_qkv=False gives the plan without the rule: 16 partitions, most but not all off). Llama-1B (124 qkv
    pieces, 8 free workers for 128 ATTN tiles): the rule cannot apply and nothing changes. An explicit partition
    count is kept as given."""
    def attn_on_qkv_workers(plan):
        return same_layer_pairs(plan, is_op(Op.QKV), is_op(Op.ATTN))

    d = cfg("smollm2-135m-config.json")
    plan = build_plan(d, 132)
    assert plan.header["attn_partitions"] == 24
    assert attn_on_qkv_workers(plan) == 0
    old = build_plan(d, 132, attn_off_qkv=False)
    assert old.header["attn_partitions"] == 16 and attn_on_qkv_workers(old) > 0
    assert build_plan(d, 132, attn_partitions=8).header["attn_partitions"] == 8
    forced = build_plan(d, 132, attn_off_qkv=True)  # the default count, every tile off: the option's old meaning
    assert forced.header["attn_partitions"] == 16 and attn_on_qkv_workers(forced) == 0
    d = cfg("llama-3.2-1b-config.json")
    plan = build_plan(d, 132)
    assert plan.header["attn_partitions"] == 16
    assert np.array_equal(plan.to_blob(), build_plan(d, 132, attn_off_qkv=False).to_blob())
    assert np.array_equal(plan.to_blob(), build_plan(d, 132, attn_off_qkv=True).to_blob())


def test_gateup_avoids_the_o_workers_where_they_fit():
    """On SmolLM2 (36 o and 96 gate/up pieces on 132 workers) the default plan puts no gate/up tile on a worker with
    an o tile of its layer, which gateup_off_o=False does ~6 times per layer; on Llama-1B (124 o and 132 gate/up
    pieces) the rule cannot apply and the plan is the same either way."""
    def gateup_on_o_workers(plan):
        is_o = lambda t: slot_name(plan, int(t[COL["weight"]])) == "o"  # noqa: E731
        return same_layer_pairs(plan, is_o, is_op(Op.GATEUP))

    d = cfg("smollm2-135m-config.json")
    assert gateup_on_o_workers(build_plan(d, 132, gateup_off_o=False)) > 0
    assert gateup_on_o_workers(build_plan(d, 132)) == 0
    d = cfg("llama-3.2-1b-config.json")
    assert np.array_equal(build_plan(d, 132, gateup_off_o=False).to_blob(), build_plan(d, 132).to_blob())
