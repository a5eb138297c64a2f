#!/usr/bin/env python3
"""What each dependency boundary costs in the product kernel: a timing bound, wrong results (perf log, session 19).

For a boundary CONSUMER<PRODUCER, every wait of a CONSUMER tile on a counter that PRODUCER tiles signal is moved to
the previous step (step_offset -1, always satisfied), so the consumer runs as soon as its worker reaches it, on stale
inputs. Bytes, tiles and worker order stay the plan's. The time saved against the unchanged plan, in the same process
and alternating, is an upper bound on what removing that boundary can save (DOWN<GATEUP: the fused MLP of
docs/design/fused-mlp.md, before its reduction's cost). Never a product path: the validator rejects such plans.

Tile classes: EMBED QKV ATTN MERGE O DOWN GATEUP LMHEAD ARGMAX (RESID tiles are O or DOWN by their weight's width);
PRODUCER may be * (every wait of the consumer), CONSUMER * (every tile: the plan's stream with no dependency
within a step).
A variant may also (or instead) carry planner options, '@'-separated ints: "o_rows=16", "o_off_merge=0@DOWN<GATEUP":
then it is a same-process A/B of plans (results correct where no wait is dropped).
Usage: python scripts/wait_bound.py --variants "DOWN<GATEUP;O<MERGE+O<ATTN;o_rows=16" --models "llama-3.2-1b:32,4064"
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_check import Op, time_op  # noqa: E402
from tile_timing import tile_classes  # noqa: E402

from tiles_ext.models import load_config, random_model  # noqa: E402
from tiles_ext.planner.format import TILE, WAIT  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402


def planner_options(spec: str) -> dict:
    """build_plan options of a variant or --plan spec: its '@'-separated 'name=int' parts ("o_rows=16@min_rows=0")."""
    return {k: int(x) for k, x in (e.split("=") for e in spec.split("@") if "=" in e)}


def drop_waits(plan, spec: str) -> int:
    """Moves the waits named by spec ("C<P+C2<P2") to the previous step, in place; returns how many moved."""
    cls = tile_classes(plan)
    sig_i, wb_i, wc_i = TILE.index("signal"), TILE.index("wait_begin"), TILE.index("wait_count")
    ctr_i, off_i = WAIT.index("counter"), WAIT.index("step_offset")
    moved = 0
    for pair in spec.split("+"):
        consumer, producer = pair.split("<")
        ctrs = {int(t[sig_i]) for t, c in zip(plan.tiles, cls) if c == producer or producer == "*"}
        hits = 0
        for t, c in zip(plan.tiles, cls):
            if c != consumer and consumer != "*":
                continue
            for w in range(int(t[wb_i]), int(t[wb_i]) + int(t[wc_i])):
                if int(plan.waits[w, ctr_i]) in ctrs and int(plan.waits[w, off_i]) == 0:
                    plan.waits[w, off_i] = -1
                    hits += 1
        if hits == 0:
            raise SystemExit(f"{pair}: no {consumer} tile waits on a {producer} counter in this plan")
        moved += hits
    return moved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="DOWN<GATEUP", help="';'-separated drop specs, each 'C<P' joined by '+'")
    ap.add_argument("--models", default="llama-3.2-1b:32,4064;smollm2-135m:32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-cache", type=int, default=4096 + 256)
    ap.add_argument("--opt", default="25183")
    ap.add_argument("--handoff", choices=("counters", "flags", "auto"), default="counters",
                    help="the kernel every plan runs on (dropped waits are counter waits: use counters with them; "
                         "flags / auto for planner-option A/Bs on the kernel a model ships with)")
    args = ap.parse_args()
    os.environ["TILES_KERNEL_OPT"] = args.opt
    os.environ["TILES_HANDOFF"] = args.handoff
    gpu = GpuTarget.of_device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = []
    for spec in args.models.split(";"):
        name, ctxs = spec.split(":")
        cfg = load_config(name)
        model = random_model(cfg, device="cuda", seed=0)
        ops = {"base": Op(model, build_plan(cfg, workers=sms, gpu=gpu), args.max_cache)}
        for v in args.variants.split(";"):
            kw = planner_options(v)
            drops = "+".join(e for e in v.split("@") if "<" in e)
            plan = build_plan(cfg, workers=sms, gpu=gpu, **kw)
            if drops and args.handoff != "counters":
                raise SystemExit(f"{v}: dropped waits need --handoff counters (a flag kernel polls its inputs' data)")
            n = drop_waits(plan, drops) if drops else 0
            print(f"{name} {v}: planner options {kw}, {n} waits moved to the previous step", flush=True)
            ops[v] = Op(model, plan, args.max_cache)
        for ctx in [int(c) for c in ctxs.split(",")]:
            got = {k: [] for k in ops}
            for r in range(args.rounds):
                for k, op in ops.items():
                    t = time_op(op, ctx, 100)
                    got[k].append(t["multi64_ms_per_token"])
                    res.append({"model": name, "ctx": ctx, "variant": k, "handoff": op.rt.handoff, "round": r, **t})
            base = float(np.median(got["base"]))
            for k, v in got.items():
                m = float(np.median(v))
                print(f"BOUND {name} {ops[k].rt.handoff} ctx {ctx} {k:28s} {m:.4f} ms/token (x64 launches) "
                      f"{100 * (m / base - 1):+6.1f}% {(m - base) * 1e3 / cfg.num_hidden_layers:+6.2f} us/layer  "
                      "rounds " +
                      " ".join(f"{x:.4f}" for x in v), flush=True)
        del ops, model
        torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "wait_bound.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
