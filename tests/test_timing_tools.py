"""The measurement scripts' host-side logic, on CPU: scripts/wait_bound.py's wait dropping (a plan whose named waits
point at the previous step, for timing bounds on the GPU) and scripts/tile_timing.py's per-worker busy table."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tiles_ext.planner import build_plan
from tiles_ext.planner.format import TILE, WAIT

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
COL = {f: i for i, (f, _) in enumerate(TILE.fields)}


def _script(name):
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def wait_bound():
    pytest.importorskip("torch")
    return _script("wait_bound")


def plan():
    return build_plan(json.loads((CONFIGS / "llama-3.2-1b-config.json").read_text()), 132)


def test_drop_waits_moves_exactly_the_named_boundary(wait_bound):
    p, base = plan(), plan()
    cls = wait_bound.tile_classes(p)
    assert cls.count("DOWN") == cls.count("GATEUP") == 16 * 132 and cls.count("O") > 0
    n = wait_bound.drop_waits(p, "DOWN<GATEUP")
    assert n == 16 * 132
    off = WAIT.index("step_offset")
    changed = np.nonzero(p.waits[:, off] != base.waits[:, off])[0]
    assert len(changed) == n and (p.waits[changed, off] == -1).all()
    # Only DOWN tiles' waits moved, and the rest of the plan is untouched.
    owner = {w: c for t, c in zip(p.tiles, cls)
             for w in range(t[COL["wait_begin"]], t[COL["wait_begin"]] + t[COL["wait_count"]])}
    assert {owner[int(w)] for w in changed} == {"DOWN"}
    assert np.array_equal(p.tiles, base.tiles) and np.array_equal(p.worker_tiles, base.worker_tiles)


def test_drop_all_keeps_the_step_order_and_refuses_unknown_pairs(wait_bound):
    p = plan()
    n = wait_bound.drop_waits(p, "*<*")
    off = WAIT.index("step_offset")
    assert n == len(p.waits) - 1 and (p.waits[:, off] == -1).all()  # EMBED's wait was on the previous step already
    with pytest.raises(SystemExit, match="no O tile waits on a ATTN counter"):
        wait_bound.drop_waits(plan(), "O<ATTN")


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


def test_ncu_lines_maps_sass_rows_to_source_lines():
    nl = _script("ncu_lines")
    sass = """\t.text._ZN5tiles4cuda13decode_kernelILb1ELb0ELb0ELb0EEEvNS0_12KernelParamsE:
        /*0000*/                   NOP ;
\t.text._ZN5tiles4cuda13decode_kernelILb0ELb0ELb0ELb0EEEvNS0_12KernelParamsE:
\t//## File "/x/csrc/cuda/decode_kernel.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "/x/csrc/cuda/decode_kernel.cu", line 20
        /*0010*/                   LDS.128 R4, [R2] ;
        /*0020*/                   FFMA R5, R4, R4, R5 ;
""".splitlines()
    m = nl.parse_sass(sass)
    assert m == {0: ("LDC R1, c[0x0][0x28]", "decode_kernel.cu", 10),
                 0x10: ("LDS.128 R4, [R2]", "decode_kernel.cu", 20),
                 0x20: ("FFMA R5, R4, R4, R5", "decode_kernel.cu", 20)}
    hdr = ('"Address","Source","# Samples","Instructions Executed","L1 Wavefronts Shared",'
           '"L1 Wavefronts Shared Ideal","stall_barrier","stall_short_sb"')
    csv_text = ['"Kernel Name","decode_kernel"', hdr,
                '"0x7f0000000100","      LDC R1, c[0x0][0x28]","3","10","0","0","3","0"',
                '"0x7f0000000110","      LDS.128 R4, [R2]","5","100","400","200","0","4"',
                '"0x7f0000000120","      MOV R5, R4","2","100","0","0","0","2"']
    col, body = nl.parse_csv(csv_text)
    agg, bad = nl.per_line(col, body, m)
    assert bad == 1  # the third row's opcode is not the local build's: a different build was profiled
    assert agg[("decode_kernel.cu", 20)]["samples"] == 7 and agg[("decode_kernel.cu", 20)]["stall_short_sb"] == 6
    assert nl.region(agg, 5, 15)["stall_barrier"] == 3 and nl.region(agg, 5, 25)["samples"] == 10
    (row,) = nl.lds_rows(col, body, m, 15, 25)
    assert row[:3] == (0x10, 20, "LDS.128 R4, [R2]") and row[4] == 4.0 and row[5] == 2.0
    # The kernel's parts (attention.cuh, ...) number their lines from 1 too: a range is of one file only.
    assert nl.region(agg, 5, 25, "attention.cuh")["samples"] == 0 and not nl.lds_rows(col, body, m, 15, 25, "merge.cuh")
    # --base: two builds' lines, largest sample difference first (a line only one build has counts from zero).
    other = {("decode_kernel.cu", 10): {"samples": 3.0, "instr": 10.0}, ("decode_kernel.cu", 30): {"samples": 4.0}}
    rows = nl.compare(other, agg, 3)
    assert [r[2][1] for r in rows] == [20, 30, 10] and rows[0][:2] == (7.0, 200.0) and rows[1][0] == -4.0
    assert rows[2][:2] == (0.0, 0.0)


def test_sass_count_counts_opcodes_of_the_line_ranges():
    sc = _script("sass_count")
    assert sc.opcode("@!P0 LDS.128 R4, [R2]") == "LDS" and sc.opcode("FFMA R5, R4, R4, R5") == "FFMA"  # ncu_lines'

    sass = {0: ("LDC R1, c[0x0][0x28]", "decode_kernel.cu", 10), 0x10: ("LDS.128 R4, [R2]", "decode_kernel.cu", 20),
            0x20: ("@P1 LDS R5, [R3]", "decode_kernel.cu", 21), 0x30: ("FFMA R5, R4, R4, R5", "other.cuh", 20)}
    assert sc.count(sass, [(20, 21)]) == {"LDS": 2}
    assert sc.count(sass, [(5, 10), (21, 30)]) == {"LDC": 1, "LDS": 1}
    assert sc.count(sass, [(20, 21)], "other.cuh") == {"FFMA": 1}
