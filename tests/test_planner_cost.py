"""Cost model and summary: exact on cases computable by hand, consistent on real plans."""
import json
from pathlib import Path

import numpy as np
import pytest

from tiles_ext.planner import build_plan, cost
from tiles_ext.planner.format import TILE
from tiles_ext.planner.summary import dependency_depth, stage_stats, summarize

SMALL = dict(model_type="llama", hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             intermediate_size=256, vocab_size=1000, num_hidden_layers=3)


def test_one_worker_no_latency_is_bytes_over_bandwidth():
    p = build_plan(SMALL, 1)
    e = cost.estimate(p, bandwidth=1e9, hop_us=0.0, arrival_us=0.0)
    total = int(p.tiles[:, TILE.index("weight_bytes")].sum())
    assert e.us_per_token == pytest.approx(total / 1e9 * 1e6)
    assert e.efficiency == pytest.approx(1.0)


def test_zero_bytes_is_chain_of_hand_offs():
    p = build_plan(SMALL, 5)
    e = cost.estimate(p, bandwidth=1e30, hop_us=1.0, arrival_us=0.0)
    # Each hand-off on the longest chain costs one hop, plus the hop into the next step's EMBED.
    assert e.us_per_token == pytest.approx(dependency_depth(p), abs=1e-6)


def test_depth_of_llama_layers():
    # embed, then qkv/attn/merge/o/gateup/down per layer, then lmhead and argmax
    assert dependency_depth(build_plan(SMALL, 7)) == 1 + 6 * 3 + 2


def test_prefetch_is_a_lower_bound_and_floor_holds():
    p = build_plan(SMALL, 7)
    e = cost.estimate(p)
    ep = cost.estimate(p, prefetch=True)
    assert e.stream_us <= ep.us_per_token <= e.us_per_token


def test_stage_stats_sum_to_plan_bytes():
    p = build_plan(SMALL, 7)
    stats = stage_stats(p)
    assert sum(s.bytes for s in stats) == int(p.tiles[:, TILE.index("weight_bytes")].sum())
    assert sum(s.tiles for s in stats) == p.header["num_tiles"]
    names = [s.name for s in stats]
    assert names[0] == "embed" and names[-2:] == ["lmhead", "argmax"] and "L2.gateup" in names
    for s in stats:
        assert s.max_bytes >= s.mean_bytes


def test_summary_mentions_everything():
    p = build_plan(SMALL, 7)
    text = summarize(p, compare=build_plan(SMALL, 7, policy="waves"))
    for word in ("tiles per operator", "dependency depth", "bytes per worker", "imbalance", "L0-2.qkv",
                 "predicted (tiles", "predicted (waves", "us/token"):
        assert word in text, text
