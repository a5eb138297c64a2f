"""scripts/tile_timing.py's host-side logic, on CPU: the per-worker busy table (where each worker's time goes, tile
by tile) adds up on synthetic timestamps."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tiles_ext.planner import build_plan
from tiles_ext.planner.format import TILE

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
COL = {f: i for i, (f, _) in enumerate(TILE.fields)}


def _script(name):
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan():
    return build_plan(json.loads((CONFIGS / "llama-3.2-1b-config.json").read_text()), 132)


def test_busy_table_adds_up():
    tt = _script("tile_timing") if importlib.util.find_spec("torch") else pytest.skip("torch missing")
    p = plan()
    offs = np.asarray(p.worker_offsets)
    steps, W, stride = 3, 132, int((offs[1:] - offs[:-1]).max())
    T = np.zeros((steps, W, stride, 6), dtype=np.int64)
    for s in range(steps):
        for w in range(W):
            t = 10_000_000 * s
            for j in range(offs[w + 1] - offs[w]):
                nb = int(p.tiles[p.worker_tiles[offs[w] + j], COL["weight_bytes"]])
                d = int(nb / 32.0) + 1000  # 1 us beyond its bytes at 32 GB/s
                T[s, w, j] = [t, t + 300, t + d, t + 500, t + d - 300, t + d - 100]
                t += d + 200  # 0.2 us between tiles
    b = tt.analyse_busy(p, T, 32.0)
    for name, c in b["classes"].items():
        assert abs(c["excess_us"] - 1.0) < 0.01, name
        assert abs(c["inputs_us"] - 0.2) < 1e-9 and abs(c["sig_us"] - 0.1) < 1e-9
        # the class's excess and the gaps before its tiles, per worker and token
        gaps = c["gap_us"] * c["per_worker_token"]
        assert abs(c["cost_us_per_token"] - (c["excess_us"] * c["per_worker_token"] + gaps)) < 1e-6, name
    n = sum(c["per_worker_token"] for c in b["classes"].values())
    per_w = (offs[1:] - offs[:-1]).mean()
    assert abs(n - per_w) < 1e-9
    ideal = np.asarray(b["workers"]["ideal_us"])
    span = np.asarray(b["workers"]["span_us"])
    tiles_w = offs[1:] - offs[:-1]
    assert np.allclose(span, ideal + tiles_w * 1.0 + (tiles_w - 1) * 0.2, atol=0.05)

