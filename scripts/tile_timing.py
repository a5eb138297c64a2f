#!/usr/bin/env python3
"""Where a decode step's time goes: per-tile timestamps of the persistent kernel, summarised per stage.

    python scripts/tile_timing.py [--model llama-3.2-1b] [--ctx 32] [--steps 8] [--handoff counters] [--json PATH]

Builds the kernels (csrc/cuda/decode_kernel_*.cu) with -DTILE_TIMING=1 plus scripts/tile_timing_launch.cu into
a shared library in --build-dir (nvcc, ~1 min; the product extension has no timing code), runs `steps` tokens of a
random-weight model on the plan, and reads %globaltimer at six points of every tile: start (before staging and the
wait), wait done, signalled, and three phase marks (decode_kernel.h kTileTimes). For each stage (all tiles of one op in one layer) it
reports, averaged over the layers and steps 1..:
  span     the stage's increment of the critical path: its last signal minus the last signal it waited for,
  handoff  median time from the producers' last signal to a waiting tile leaving its wait (counter latency),
  work     median / max over tiles of wait-done to signalled (the tile's own latency + streaming),
  late     fraction of tiles that started after their inputs were ready (their worker was still busy),
and the critical tile's work by phase: inputs (matvec: the input vector in shared memory; ATTN: q, the new row and
the first chunk's K/V rows in shared memory; MERGE: the scale factors), main (the arithmetic / chunk loop / output),
epilogue (up to the signal), signal, and waiting: its start to its wait done (how long before its inputs were ready
it started, and so issued its staged copies).
The timing build spills registers that the product build does not (ptxas), so its times run a little slower.
Needs a CUDA GPU and nvcc. Prints a table; writes JSON.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tiles_ext  # noqa: E402,F401
from tiles_ext.errors import check_state  # noqa: E402
from tiles_ext.models import load_config, random_model  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402
from tiles_ext.planner.format import SLOT, TILE  # noqa: E402
from tiles_ext.planner.graph import MIN_ROWS  # noqa: E402
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables  # noqa: E402

# Tile record columns (planner/format.py TILE)
C_OP, C_LAYER, C_WEIGHT, C_WAIT_BEGIN, C_WAIT_COUNT, C_SIGNAL, C_WEIGHT_BYTES = (
    TILE.index(f) for f in ("op", "layer", "weight", "wait_begin", "wait_count", "signal", "weight_bytes"))


def build_lib(out_dir: Path) -> Path:
    """The timing library: every kernel source compiled to its own object in parallel (one nvcc per source, as
    many at once as there are cores: serially the 24 sources take ~10 min), then linked."""
    lib = out_dir / "libtiles_timing.so"
    srcs = sorted((ROOT / "csrc/cuda").glob("decode_kernel_*.cu")) + [ROOT / "scripts/tile_timing_launch.cu"]
    deps = srcs + sorted((ROOT / "csrc/cuda").glob("*.cuh")) + [ROOT / "csrc/cuda/decode_kernel.h",
                                                             ROOT / "csrc/generated/plan_format.h"]
    if lib.exists() and all(lib.stat().st_mtime > s.stat().st_mtime for s in deps):
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = ["-std=c++17", "--expt-relaxed-constexpr", "-O3", "-DTILE_TIMING=1", "-gencode=arch=compute_90a,code=sm_90a",
             f"-I{ROOT / 'csrc'}", f"-I{ROOT / 'csrc/generated'}", "-Xcompiler", "-fPIC"]
    objs = [out_dir / f"{s.stem}.o" for s in srcs]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        jobs = [pool.submit(subprocess.run, ["nvcc", *flags, "-c", str(s), "-o", str(o)], check=True)
                for s, o in zip(srcs, objs)]
        for j in jobs:
            j.result()
    subprocess.run(["nvcc", "-shared", "-gencode=arch=compute_90a,code=sm_90a", *map(str, objs), "-o", str(lib)],
                   check=True)
    return lib


# Timestamps per tile (decode_kernel.h kTileTimes): start, wait done, signalled, phase 1, phase 2, before the signal.
TILE_TIMES = 6
# The order the tables print tile classes in (tile_classes' names).
CLASS_ORDER = ["EMBED", "QKV", "ATTN", "MERGE", "O", "GATEUP", "DOWN", "LMHEAD", "ARGMAX"]


def tile_classes(plan) -> list[str]:
    """Each tile's class by index: its op's name, RESID tiles as O or DOWN by their weight's slot (plan.weights:
    slot, layer, rows, cols)."""
    names = {1: "EMBED", 2: "QKV", 3: "ATTN", 4: "MERGE", 5: "RESID", 6: "GATEUP", 7: "LMHEAD", 8: "ARGMAX"}
    slots = np.asarray(plan.weights)[:, 0]
    out = []
    for t in np.asarray(plan.tiles):
        n = names.get(int(t[C_OP]), f"op{int(t[C_OP])}")
        if n == "RESID":
            n = "DOWN" if int(slots[int(t[C_WEIGHT])]) == SLOT["down"] else "O"
        out.append(n)
    return out


def run(lib, model, plan, ctx, steps, handoff="counters"):
    """The timestamps [steps, workers, stride, TILE_TIMES] of one `steps`-token launch from context ctx (after two
    warm-up launches), and the stride (the most tiles of a worker)."""
    dev = "cuda"
    # The flag kernels read a scratch arena with the flagged layout (every element beside its epoch): the runtime's.
    rt = TileRuntime(plan, dev, handoff=handoff)
    lib.tiles_timing_set_flagged(ctypes.c_int(int(rt.flagged)))
    w = [x.contiguous() for x in model_weights(model)]
    inv, scale = rope_tables(model)
    inv = inv.to(dev).contiguous()
    c = model.config
    kvh = c.num_key_value_heads
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    max_len = ctx + steps + 8
    k = [torch.randn(1, kvh, max_len, hd, device=dev, dtype=torch.bfloat16) for _ in range(c.num_hidden_layers)]
    v = [torch.randn(1, kvh, max_len, hd, device=dev, dtype=torch.bfloat16) for _ in range(c.num_hidden_layers)]
    ids = torch.tensor([1], device=dev)
    pos = torch.tensor([ctx], device=dev)
    h = plan.header
    W = h["num_workers"]
    offs = np.asarray(plan.worker_offsets)
    stride = int((offs[1:] - offs[:-1]).max())
    times = torch.zeros(steps * W * stride * TILE_TIMES, dtype=torch.int64, device=dev)
    logits = torch.empty(steps, h["vocab"], dtype=torch.float32, device=dev)
    tokens = torch.empty(steps, dtype=torch.int64, device=dev)
    hw = torch.tensor(rt.header, dtype=torch.int32)
    P = ctypes.c_void_p
    wp = (P * len(w))(*[x.data_ptr() for x in w])
    kp = (P * len(k))(*[x.data_ptr() for x in k])
    vp = (P * len(v))(*[x.data_ptr() for x in v])
    fn = lib.tiles_timing_run
    fn.restype = ctypes.c_int
    for _ in range(3):  # warm-up (module load, caches), then the measured launch
        times.zero_()
        rc = fn(P(rt.plan_tensor.data_ptr()), P(hw.data_ptr()), ctypes.c_int(hw.numel()), wp, kp, vp,
                ctypes.c_int(max_len), P(rt.scratch.data_ptr()), P(rt.state.data_ptr()), P(ids.data_ptr()),
                P(pos.data_ptr()), P(inv.data_ptr()), ctypes.c_float(scale), P(logits.data_ptr()),
                P(tokens.data_ptr()), ctypes.c_int(steps), P(times.data_ptr()), ctypes.c_int(stride))
        if rc != 0:
            raise RuntimeError(f"tiles_timing_run returned {rc} (scripts/tile_timing_launch.cu says what failed)")
        check_state(rt.state, plan)
    return times.view(steps, W, stride, TILE_TIMES).cpu().numpy().astype(np.int64), stride


def analyse(plan, T, stride):
    steps, W = T.shape[0], T.shape[1]
    tiles = np.asarray(plan.tiles)
    waits = np.asarray(plan.waits)
    offs = np.asarray(plan.worker_offsets)
    wt = np.asarray(plan.worker_tiles)
    cls = tile_classes(plan)
    ends = defaultdict(int)  # (step, counter) -> last signal time
    recs = []
    for s in range(steps):
        for w in range(W):
            for j in range(offs[w + 1] - offs[w]):
                if j >= stride:
                    break
                ti = int(wt[offs[w] + j])
                t0, t1, t2, m1, m2, m3 = (int(x) for x in T[s, w, j])
                if t2 == 0:
                    continue
                sig = int(tiles[ti, C_SIGNAL])
                ends[(s, sig)] = max(ends[(s, sig)], t2)
                recs.append((s, w, ti, t0, t1, t2, m1, m2, m3))
    stage_tiles = defaultdict(list)  # (step, name, layer) -> list of (t0, t1, t2, dep_end)
    stage_workers = defaultdict(list)  # the same keys -> (worker, weight bytes) per tile
    for s, w, ti, t0, t1, t2, m1, m2, m3 in recs:
        dep = 0
        for k in range(int(tiles[ti, C_WAIT_COUNT])):
            c, _, off = (int(x) for x in waits[int(tiles[ti, C_WAIT_BEGIN]) + k])
            if s + off >= 0 and (s + off, c) in ends:
                dep = max(dep, ends[(s + off, c)])
        name = cls[ti]
        stage_tiles[(s, name, int(tiles[ti, C_LAYER]))].append((t0, t1, t2, dep, m1, m2, m3))
        stage_workers[(s, name, int(tiles[ti, C_LAYER]))].append((w, int(tiles[ti, C_WEIGHT_BYTES])))
    per_name = defaultdict(lambda: defaultdict(list))
    # Per worker, matvec stages: streaming rate (weight bytes / work) with the step, to tell per-SM rate
    # differences that persist from noise, and whether the tile was its stage's last.
    per_worker = defaultdict(lambda: defaultdict(list))  # name -> worker -> [(step, rate GB/s, last)]
    for (s, name, layer), lst in stage_tiles.items():
        if s == 0:
            continue  # the first step includes the launch
        a = np.array(lst, dtype=np.int64)
        dep_end = a[:, 3].max()
        if dep_end == 0:
            continue
        if name in ("QKV", "O", "GATEUP", "DOWN", "LMHEAD"):
            last = int(a[:, 2].argmax())
            for k, (w, nbytes) in enumerate(stage_workers[(s, name, layer)]):
                work = a[k, 2] - a[k, 1]
                if work > 0 and nbytes > 0:
                    per_worker[name][w].append((s, nbytes / work, int(k == last)))
        end = a[:, 2].max()
        waited = a[a[:, 0] < a[:, 3]]
        late = a[a[:, 0] >= a[:, 3]]
        d = per_name[name]
        d["span_us"].append((end - dep_end) / 1e3)
        if len(waited):
            d["handoff_us"].append(float(np.median(waited[:, 1] - waited[:, 3])) / 1e3)
        d["work_med_us"].append(float(np.median(a[:, 2] - a[:, 1])) / 1e3)
        d["work_max_us"].append(float((a[:, 2] - a[:, 1]).max()) / 1e3)
        crit = a[a[:, 2].argmax()]
        d["crit_wait_exit_us"].append((crit[1] - max(crit[3], crit[0])) / 1e3)
        d["crit_waiting_us"].append((crit[1] - crit[0]) / 1e3)  # its start -> wait done: how early it staged
        d["crit_work_us"].append((crit[2] - crit[1]) / 1e3)
        d["late_frac"].append(len(late) / len(a))
        # Phases of the critical tile (0 = a mark the op does not set: that phase is folded into the next).
        if crit[4] and crit[5] and crit[6]:
            d["crit_phase1_us"].append((crit[4] - crit[1]) / 1e3)  # wait done -> inputs ready
            d["crit_phase2_us"].append((crit[5] - crit[4]) / 1e3)  # the main loop
            d["crit_phase3_us"].append((crit[6] - crit[5]) / 1e3)  # epilogue up to the signal
            d["crit_signal_us"].append((crit[2] - crit[6]) / 1e3)  # the signal itself
        d["count"].append(1)
    table = {}
    for name, d in per_name.items():
        row = {k: (statistics.mean(v) if k != "count" else len(v)) for k, v in d.items()}
        row["stages_per_token"] = len(d["span_us"]) / max(1, steps - 1)
        row["span_us_per_token"] = sum(d["span_us"]) / max(1, steps - 1)
        table[name] = row
    # Token time: ARGMAX signal to ARGMAX signal.
    arg_counter = plan.header["argmax_counter"]
    toks = [ends[(s, arg_counter)] - ends[(s - 1, arg_counter)] for s in range(1, steps)
            if (s, arg_counter) in ends and (s - 1, arg_counter) in ends]
    all_t = np.sort(np.unique(np.asarray([r[3:6] for r in recs]).ravel()))
    res = float(np.diff(all_t)[np.diff(all_t) > 0].min()) if len(all_t) > 2 else float("nan")
    workers = {}
    for name, by_w in per_worker.items():
        rate = np.full(W, np.nan)
        halves = np.full((2, W), np.nan)
        crit = np.zeros(W, dtype=np.int64)
        mid = 1 + (steps - 1) // 2
        for w, v in by_w.items():
            v = np.asarray(v)
            rate[w] = np.median(v[:, 1])
            crit[w] = int(v[:, 2].sum())
            for h, sel in enumerate((v[:, 0] < mid, v[:, 0] >= mid)):
                if sel.any():
                    halves[h, w] = np.median(v[sel, 1])
        ok = ~np.isnan(halves).any(axis=0)
        corr = float(np.corrcoef(halves[0, ok], halves[1, ok])[0, 1]) if ok.sum() > 2 else float("nan")
        workers[name] = {"rate_gbs": [None if np.isnan(x) else float(x) for x in rate],
                         "critical_count": crit.tolist(), "rate_half_corr": corr}
    return {"token_us": statistics.mean(toks) / 1e3 if toks else None, "stages": table,
            "timer_resolution_ns": res, "workers": workers}


def analyse_busy(plan, T, ref_gbs):
    """Where each worker's time goes, tile by tile. Per tile class, means over steps 1.. and workers: tiles per
    worker per token, the gap since the worker's previous tile, the tile's phases (pre: start to wait done, which
    holds the staging; inputs; main; epilogue; signal), its bytes, and its excess over bytes / ref_gbs. Per worker:
    the step's busy span (first start to last signal) against its bytes at ref_gbs."""
    steps, W = T.shape[0], T.shape[1]
    tiles = np.asarray(plan.tiles)
    offs = np.asarray(plan.worker_offsets)
    wt = np.asarray(plan.worker_tiles)
    cls = tile_classes(plan)
    acc = defaultdict(lambda: defaultdict(float))
    spans, wbytes = np.zeros((steps, W)), np.zeros(W)
    used = range(1, steps) if steps > 1 else range(steps)
    for s in used:
        for w in range(W):
            prev = None
            first = None
            for j in range(offs[w + 1] - offs[w]):
                if j >= T.shape[2]:
                    break
                ti = int(wt[offs[w] + j])
                t0, t1, t2, m1, m2, m3 = (int(x) for x in T[s, w, j])
                if t2 == 0:
                    continue
                first = t0 if first is None else first
                nb = int(tiles[ti, C_WEIGHT_BYTES])
                if s == used[0]:
                    wbytes[w] += nb
                d = acc[cls[ti]]
                d["n"] += 1
                d["gap"] += (t0 - prev) if prev is not None else 0
                d["dur"] += t2 - t0
                d["pre"] += t1 - t0
                if m1 and m2 and m3:
                    d["inputs"] += m1 - t1
                    d["main"] += m2 - m1
                    d["epi"] += m3 - m2
                    d["sig"] += t2 - m3
                    d["marked"] += 1
                d["bytes"] += nb
                prev = t2
            if first is not None:
                spans[s, w] = prev - first
    tok = len(used) * W
    out = {"ref_gbs": ref_gbs, "classes": {}, "workers": {}}
    for name, d in acc.items():
        n = d["n"]
        mk = max(1.0, d["marked"])
        out["classes"][name] = {
            "per_worker_token": n / tok, "gap_us": d["gap"] / n / 1e3, "dur_us": d["dur"] / n / 1e3,
            "pre_us": d["pre"] / n / 1e3, "inputs_us": d["inputs"] / mk / 1e3, "main_us": d["main"] / mk / 1e3,
            "epi_us": d["epi"] / mk / 1e3, "sig_us": d["sig"] / mk / 1e3, "kb": d["bytes"] / n / 1024,
            "excess_us": (d["dur"] / n - d["bytes"] / n / ref_gbs) / 1e3,
            # per worker and token: the class's excess plus the gaps before its tiles
            "cost_us_per_token": (d["dur"] - d["bytes"] / ref_gbs + d["gap"]) / tok / 1e3,
        }
    sp = np.median(spans[list(used)], axis=0) / 1e3
    ideal = wbytes / ref_gbs / 1e3
    slow = int(np.argmax(sp))
    out["workers"] = {"span_us": sp.tolist(), "ideal_us": ideal.tolist(), "slowest": slow}
    return out


def print_busy(b):
    print(f"where a worker's time goes (means per tile; excess = duration - bytes at {b['ref_gbs']:.1f} GB/s):")
    print(f"{'class':<8}{'n/tok':>7}{'gap':>7}{'dur':>8}{'pre':>7}{'inputs':>8}{'main':>8}{'epi':>7}{'sig':>7}"
          f"{'KB':>8}{'excess':>8}{'+gaps/tok':>11}   (us)")
    tot = 0.0
    for name in CLASS_ORDER:
        c = b["classes"].get(name)
        if not c:
            continue
        per_tok = c["cost_us_per_token"]
        tot += per_tok
        print(f"{name:<8}{c['per_worker_token']:>7.2f}{c['gap_us']:>7.2f}{c['dur_us']:>8.2f}{c['pre_us']:>7.2f}"
              f"{c['inputs_us']:>8.2f}{c['main_us']:>8.2f}{c['epi_us']:>7.2f}{c['sig_us']:>7.2f}{c['kb']:>8.1f}"
              f"{c['excess_us']:>8.2f}{per_tok:>11.1f}")
    sp, ideal = np.asarray(b["workers"]["span_us"]), np.asarray(b["workers"]["ideal_us"])
    w = b["workers"]["slowest"]
    print(f"excess + gaps per worker-token: {tot:.1f} us. Worker spans (us): min {sp.min():.1f} "
          f"med {np.median(sp):.1f} "
          f"max {sp.max():.1f} (worker {w}: its bytes take {ideal[w]:.1f}); bytes at the reference rate: min "
          f"{ideal.min():.1f} med {np.median(ideal):.1f} max {ideal.max():.1f}")


def print_run(r, title):
    print(f"\n{title}: {r['token_us']:.1f} us/token (ARGMAX to ARGMAX), "
          f"timer resolution {r['timer_resolution_ns']:.0f} ns")
    print(f"{'stage':<8}{'n/tok':>6}{'span':>8}{'sum/tok':>9}{'handoff':>9}{'work med':>9}{'work max':>9}"
          f"{'crit exit':>10}{'crit work':>10}{'late':>6}   (us)")
    for name in CLASS_ORDER + sorted(set(r["stages"]) - set(CLASS_ORDER)):
        s = r["stages"].get(name)
        if not s:
            continue
        print(f"{name:<8}{s['stages_per_token']:>6.0f}{s['span_us']:>8.2f}{s['span_us_per_token']:>9.1f}"
              f"{s.get('handoff_us', float('nan')):>9.2f}{s['work_med_us']:>9.2f}{s['work_max_us']:>9.2f}"
              f"{s['crit_wait_exit_us']:>10.2f}{s['crit_work_us']:>10.2f}{s['late_frac']:>6.2f}")
    print(f"critical tile's work by phase (us): {'stage':<8}{'inputs':>8}{'main':>8}{'epilogue':>9}{'signal':>8}"
          f"{'waiting':>9}")
    for name in CLASS_ORDER:
        s = r["stages"].get(name)
        if s and "crit_phase1_us" in s:
            print(f"{'':36}{name:<8}{s['crit_phase1_us']:>8.2f}{s['crit_phase2_us']:>8.2f}"
                  f"{s['crit_phase3_us']:>9.2f}{s['crit_signal_us']:>8.2f}{s['crit_waiting_us']:>9.2f}")
    print(f"per worker (medians over layers and steps): {'stage':<8}{'rate GB/s min':>14}{'p10':>7}{'med':>7}"
          f"{'p90':>7}{'max':>7}{'half corr':>10}   most often last (worker: times)")
    for name in CLASS_ORDER:
        q = r["workers"].get(name)
        if q:
            v = np.asarray([x for x in q["rate_gbs"] if x is not None])
            cc = np.asarray(q["critical_count"])
            top = ", ".join(f"{int(w)}: {int(cc[w])}" for w in np.argsort(-cc)[:4] if cc[w] > 0)
            print(f"{'':44}{name:<8}{v.min():>14.1f}{np.percentile(v, 10):>7.1f}{np.median(v):>7.1f}"
                  f"{np.percentile(v, 90):>7.1f}{v.max():>7.1f}{q['rate_half_corr']:>10.2f}   {top}")
    print_busy(r["busy"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--handoff", choices=("counters", "flags"), default="counters",
                    help="the kernels to time: counter hand-offs, or flag-in-data words (their tiles poll their "
                         "inputs' data words where they read them, so 'handoff' is not measured and the inputs "
                         "phase holds the poll)")
    ap.add_argument("--single", type=int, default=-1,
                    help="positions up to which partition 0 holds them all (-1: the planner's)")
    ap.add_argument("--o-off-merge", type=int, default=1,
                    help="1 (the planner's default): the o projection off the MERGE workers")
    ap.add_argument("--attn0-off-qkv", type=int, default=1,
                    help="1 (the planner's default): partition-0 ATTN tiles off the qkv workers")
    ap.add_argument("--min-rows", type=int, default=MIN_ROWS,
                    help="planner.graph's matvec floor (build_plan min_rows; 0: one piece per worker)")
    ap.add_argument("--ref-gbs", type=float, default=4250.0 / 132,
                    help="per-SM streaming rate the excess is measured against (GB/s; default 4.25 TB/s / 132)")
    ap.add_argument("--build-dir", default="/tmp/tiles_timing", help="where the timing library is built (and reused)")
    ap.add_argument("--json", default=None, help="also write the result here (and to $OUT when it is set)")
    args = ap.parse_args()
    out_dir = Path(args.build_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = ctypes.CDLL(str(build_lib(out_dir)))
    cfg = load_config(args.model)
    model = random_model(cfg, device="cuda", seed=0)
    plan = build_plan(cfg, workers=torch.cuda.get_device_properties(0).multi_processor_count,
                      gpu=GpuTarget.of_device("cuda"),
                      attn_single=None if args.single < 0 else args.single, o_off_merge=bool(args.o_off_merge),
                      attn0_off_qkv=bool(args.attn0_off_qkv), min_rows=args.min_rows)
    T, stride = run(lib, model, plan, args.ctx, args.steps, args.handoff)
    r = analyse(plan, T, stride)
    r["busy"] = analyse_busy(plan, T, args.ref_gbs)
    result = {"model": args.model, "ctx": args.ctx, "steps": args.steps, "single": plan.header["attn_single"],
              "o_off_merge": args.o_off_merge, "attn0_off_qkv": args.attn0_off_qkv, "min_rows": args.min_rows,
              "handoff": args.handoff, "attn_partitions": plan.header["attn_partitions"], "run": r}
    print_run(r, f"{args.model} ctx {args.ctx} single {plan.header['attn_single']} {args.handoff}")
    paths = [Path(args.json)] if args.json else []
    if os.environ.get("OUT"):
        paths.append(Path(os.environ["OUT"]) / f"tile_timing-{args.model}.json")
    for p in paths:
        p.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
