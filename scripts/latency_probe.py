#!/usr/bin/env python3
"""Loaded L2 round-trip latency against bytes in flight per SM (docs/perf-log.md, "Next" item 1).

    python scripts/latency_probe.py [--blocks N] [--mb-per-block 16] [--passes 2] [--quiet-mod 4] [--json PATH]

Builds scripts/latency_probe.cu with nvcc (~10 s) into a shared library and runs it for U = 0 (idle), 1, 2, 4, 8, 16
16-byte loads in flight per lane: 15 streaming warps per SM, so U x 7.5 KB in flight per SM. Prints, per U, the read
bandwidth and the median / 90th-percentile time of one dependent ld.acquire.gpu round trip to L2 measured by a 16th
warp while the others stream, and the same for blocks that stream nothing themselves (every --quiet-mod-th block:
the other SMs' traffic only; 0 = none). Needs a CUDA GPU and nvcc; writes JSON to --json or $OUT/latency_probe.json.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(out_dir: Path) -> Path:
    lib = out_dir / "liblatency_probe.so"
    src = ROOT / "scripts" / "latency_probe.cu"
    arch = os.environ.get("TILES_TIMING_ARCH", "90a")
    subprocess.run(["nvcc", "-std=c++17", "-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-Xcompiler",
                    "-fPIC", "-shared", str(src), "-o", str(lib)], check=True)
    return lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=0, help="0 = one per SM")
    ap.add_argument("--mb-per-block", type=float, default=16.0)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--quiet-mod", type=int, default=4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    blocks = args.blocks
    if blocks <= 0:
        import torch
        blocks = torch.cuda.get_device_properties(0).multi_processor_count
    lib = ctypes.CDLL(str(build(Path(tempfile.mkdtemp()))))
    lib.probe_run.restype = ctypes.c_int
    rows = []
    print(f"{'Q':>3}{'U':>3}{'KB in flight/SM':>17}{'TB/s':>8}{'L2 RTT med ns':>15}{'p90 ns':>9}{'samples':>9}"
          f"{'quiet SM med ns':>17}")
    for qm in sorted({0, args.quiet_mod}):
        for u in (0, 1, 2, 4, 8, 16):
            bw, med, p90, n, qmed = (ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_int(),
                                     ctypes.c_double())
            rc = lib.probe_run(u, blocks, ctypes.c_longlong(int(args.mb_per_block * 2 ** 20)), args.passes, qm,
                               ctypes.byref(bw), ctypes.byref(med), ctypes.byref(p90), ctypes.byref(n),
                               ctypes.byref(qmed))
            if rc != 0:
                raise SystemExit(f"probe_run(U={u}, quiet_mod={qm}) failed with code {rc}")
            row = {"quiet_mod": qm, "loads_per_lane": u, "kb_in_flight_per_sm": u * 15 * 32 * 16 / 1024,
                   "read_tbs": bw.value, "l2_rtt_median_ns": med.value, "l2_rtt_p90_ns": p90.value,
                   "samples": n.value, "quiet_sm_l2_rtt_median_ns": qmed.value}
            rows.append(row)
            print(f"{qm:>3}{u:>3}{row['kb_in_flight_per_sm']:>17.1f}{bw.value:>8.2f}{med.value:>15.0f}"
                  f"{p90.value:>9.0f}{n.value:>9}{qmed.value:>17.0f}")
    paths = [Path(args.json)] if args.json else []
    if os.environ.get("OUT"):
        paths.append(Path(os.environ["OUT"]) / "latency_probe.json")
    for p in paths:
        p.write_text(json.dumps({"blocks": blocks, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
