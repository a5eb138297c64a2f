#!/usr/bin/env python3
"""A/B of kernel option sets, alternating to separate the difference from drift: ms/token (CUDA-graph replay, one
token per launch) per model and context. Usage: python scripts/opt_ab.py --opts 95,607 --rounds 2"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_check import Op, time_op  # noqa: E402

from tiles_ext.models import load_config, random_model  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--opts", default="95,607")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="smollm2-135m:32,2000,4064;llama-3.2-1b:32,4064")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    res = []
    for spec in args.models.split(";"):
        name, ctxs = spec.split(":")
        cfg = load_config(name)
        model = random_model(cfg, device="cuda", seed=0)
        plan = build_plan(cfg, workers=props.multi_processor_count, gpu=GpuTarget.of_device("cuda"))
        op = Op(model, plan, 4096 + 256)
        for ctx in [int(c) for c in ctxs.split(",")]:
            for r in range(args.rounds):
                for o in args.opts.split(","):
                    os.environ["TILES_KERNEL_OPT"] = o
                    ms = time_op(op, ctx, 100, graph_only=True)["graph_ms"]
                    res.append({"model": name, "ctx": ctx, "opt": int(o), "round": r, "graph_ms": ms})
                    print(f"{name} ctx {ctx} opt {o} round {r}: {ms:.4f} ms", flush=True)
        del op, model
        torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "opt_ab.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
