#!/usr/bin/env python3
"""A/B of kernel option sets, alternating to separate the difference from drift: ms/token per model and context, as
a CUDA-graph replay of one token per launch and (--mode both, the default) as launches of 64 tokens, the mode of
generate()'s greedy fast path; the two can disagree (perf log v28: flags even in the first, -4.5% in steady state).
Usage: python scripts/opt_ab.py --opts 95,607 --rounds 2
An entry of --opts may carry environment settings of the glue: 607@TILES_PREFETCH_NEXT=1@TILES_PREFETCH_BYTES=65536."""
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
    ap.add_argument("--partitions", default="0", help="attention partitions per KV head to plan with (0: planner's)")
    ap.add_argument("--singles", default="-1",
                    help="positions up to which partition 0 holds them all, to plan with (-1: planner's)")
    ap.add_argument("--o-off-merge", default="1", help="0,1: plan the o projection off the MERGE workers (default 1)")
    ap.add_argument("--attn0-off-qkv", default="1",
                    help="0,1: plan partition-0 ATTN tiles off the qkv workers (default 1)")
    ap.add_argument("--merge-next", default="1",
                    help="0,1: mark partition-0 ATTN tiles whose MERGE runs next (default 1; perf log v44)")
    ap.add_argument("--workers", default="0", help="workers to plan for, comma-separated (0: one per SM)")
    ap.add_argument("--max-cache", type=int, default=4096 + 256, help="KV cache positions (> the largest context)")
    ap.add_argument("--models", default="smollm2-135m:32,2000,4064;llama-3.2-1b:32,4064")
    ap.add_argument("--mode", choices=("graph", "both"), default="both",
                    help="graph: one-token CUDA-graph replays only; both: also 64-token launches (ms per token)")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    res = []
    for spec in args.models.split(";"):
        name, ctxs = spec.split(":")
        cfg = load_config(name)
        model = random_model(cfg, device="cuda", seed=0)
        for parts in [int(x) for x in args.partitions.split(",")]:
            variants = [(int(x), int(y), int(z), int(m)) for x in args.singles.split(",")
                        for y in args.o_off_merge.split(",") for z in args.attn0_off_qkv.split(",")
                        for m in args.merge_next.split(",")]
            for (single, ooff, aoff, mnext), nw in [(v, int(w)) for v in variants for w in args.workers.split(",")]:
                plan = build_plan(cfg, workers=nw or props.multi_processor_count, gpu=GpuTarget.of_device("cuda"),
                                  attn_partitions=parts or None, attn_single=None if single < 0 else single,
                                  o_off_merge=bool(ooff), attn0_off_qkv=bool(aoff), merge_next=bool(mnext))
                print(f"plan: single {plan.header['attn_single']}, o off the MERGE workers {bool(ooff)}, "
                      f"partition-0 ATTN off the qkv workers {bool(aoff)}, merge-next {bool(mnext)}", flush=True)
                op = Op(model, plan, args.max_cache)
                run_contexts(args, name, op, ctxs, parts, res, plan.header["attn_single"], ooff, aoff, mnext)
                del op
        del model
        torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "opt_ab.json").write_text(json.dumps(res, indent=1))


def run_contexts(args, name, op, ctxs, parts, res, single, ooff=0, aoff=0, mnext=1):
    """Times every option set at every context, alternating rounds (drift shows as round-to-round change)."""
    for ctx in [int(c) for c in ctxs.split(",")]:
        for r in range(args.rounds):
            for o in args.opts.split(","):
                opt, *env = o.split("@")
                saved = {k: os.environ.get(k) for k, _ in (e.split("=", 1) for e in env)}
                os.environ["TILES_KERNEL_OPT"] = opt
                os.environ.update(dict(e.split("=", 1) for e in env))
                op.bind()  # counters or flags, as the entry's environment chooses (runtime.py choose_handoff)
                t = time_op(op, ctx, 100, graph_only=args.mode == "graph")
                ms, multi = t["graph_ms"], t.get("multi64_ms_per_token")
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                res.append({"model": name, "ctx": ctx, "opt": o, "workers": op.plan.num_workers, "partitions": parts,
                            "single": single,
                            "o_off_merge": ooff, "attn0_off_qkv": aoff, "merge_next": mnext,
                            "handoff": op.rt.handoff, "round": r,
                            "graph_ms": ms, "multi64_ms_per_token": multi})
                tail = "" if multi is None else f" (x64 launches: {multi:.4f} ms)"
                nw = "" if op.plan.num_workers == torch.cuda.get_device_properties(0).multi_processor_count \
                    else f" W {op.plan.num_workers}"
                print(f"{name}{nw} ctx {ctx} P {parts or 'plan'} single {single} o-off {ooff} a0-off {aoff} mn {mnext} opt {o} "
                      f"{op.rt.handoff} round {r}: {ms:.4f} ms{tail}", flush=True)


if __name__ == "__main__":
    main()
