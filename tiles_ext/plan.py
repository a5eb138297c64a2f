"""Command line for plans.

    python -m tiles_ext.plan build --config CONFIG.json | --model DIR --workers N --out FILE
                                   [--policy tiles|waves] [--gpu-name NAME --sm-count N --cc 9.0]
    python -m tiles_ext.plan check FILE [--config CONFIG.json | --model DIR] [--summary]

`build` prints a summary (tiles per operator, dependency depth, bytes per worker and per stage, predicted
us/token for the plan's policy and, for comparison, the other policy) and writes a validated plan file.
`check` re-validates a plan file; it exits 1 with the reason on a corrupted, mismatched or inconsistent one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tiles_ext.planner import cost
from tiles_ext.planner.graph import POLICIES
from tiles_ext.planner.plan import GpuTarget, build_plan
from tiles_ext.planner.planfile import PlanMismatch, load_plan, save_plan
from tiles_ext.families import shape_of
from tiles_ext.planner.shape import UnsupportedConfig
from tiles_ext.planner.summary import summarize
from tiles_ext.planner.validate import PlanError


def _config(args):
    if args.config and args.model:
        raise SystemExit("error: give --config or --model, not both")
    path = Path(args.config) if args.config else Path(args.model) / "config.json" if args.model else None
    if path is None:
        return None
    try:
        return shape_of(json.loads(path.read_text()))
    except FileNotFoundError:
        raise SystemExit(f"error: no config file {path}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: {path} is not valid JSON ({e})")
    except UnsupportedConfig as e:
        raise SystemExit(f"error: {path}: {e}")


def _gpu(args) -> GpuTarget:
    if args.sm_count is None:
        if args.gpu_name or args.cc:
            raise SystemExit("error: --gpu-name/--cc need --sm-count")
        return GpuTarget()
    major, minor = 0, 0
    if args.cc:
        try:
            major, minor = (int(x) for x in args.cc.split("."))
        except ValueError:
            raise SystemExit(f"error: --cc {args.cc!r}: expected MAJOR.MINOR, e.g. 9.0")
    return GpuTarget(args.gpu_name or "unnamed GPU", args.sm_count, major, minor)


def cmd_build(args) -> int:
    shape = _config(args)
    if shape is None:
        raise SystemExit("error: build needs --config CONFIG.json or --model DIR")
    gpu = _gpu(args)
    workers = args.workers or gpu.sm_count
    if not workers:
        raise SystemExit("error: give --workers N (or --sm-count N to use one worker per SM)")
    kw = dict(gpu=gpu, attn_partitions=args.attn_partitions, context_hint=args.context)
    try:
        plan = build_plan(shape, workers, policy=args.policy, **kw)
        other = build_plan(shape, workers, policy="waves" if args.policy != "waves" else "tiles", validate=False, **kw)
    except (ValueError, PlanError) as e:
        raise SystemExit(f"error: {e}")
    print(summarize(plan, args.bandwidth * 1e12, args.hop_us, compare=other))
    path = save_plan(plan, args.out)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


def cmd_check(args) -> int:
    shape = _config(args)
    try:
        plan = load_plan(args.file, expect_shape=shape)
    except FileNotFoundError:
        print(f"error: no plan file {args.file}", file=sys.stderr)
        return 2
    except PlanMismatch as e:
        print(f"error ({e.kind} mismatch): {e}", file=sys.stderr)
        return 1
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid plan, {plan.header['num_tiles']} tiles on {plan.num_workers} workers, policy "
          f"{plan.policy}, GPU {plan.gpu.name} (sm_count {plan.gpu.sm_count}), config {plan.shape.config_hash()[:16]}")
    if args.summary:
        print(summarize(plan, args.bandwidth * 1e12, args.hop_us))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tiles_ext.plan", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def model_args(p):
        p.add_argument("--config", help="a Llama-family config.json")
        p.add_argument("--model", help="a model directory (reads DIR/config.json)")

    def cost_args(p):
        p.add_argument("--bandwidth", type=float, default=cost.H200_BANDWIDTH / 1e12,
                       help="read bandwidth in TB/s for the prediction (default: %(default)s, H200 measured)")
        p.add_argument("--hop-us", type=float, default=cost.HOP_US, help="us per dependency hand-off")

    b = sub.add_parser("build", help="build, validate, summarise and save a plan")
    model_args(b)
    b.add_argument("--workers", type=int, help="workers (one per SM); default --sm-count")
    b.add_argument("--out", required=True, help="plan file to write")
    b.add_argument("--policy", choices=POLICIES, default="tiles")
    b.add_argument("--gpu-name", help="GPU name the plan is bound to")
    b.add_argument("--sm-count", type=int, help="SM count of that GPU (plans bind to it)")
    b.add_argument("--cc", help="compute capability MAJOR.MINOR, e.g. 9.0")
    b.add_argument("--attn-partitions", type=int, help="KV-position partitions per KV head")
    b.add_argument("--context", type=int, default=512, help="positions assumed for attention bytes")
    cost_args(b)
    b.set_defaults(func=cmd_build)

    c = sub.add_parser("check", help="validate a plan file")
    c.add_argument("file")
    model_args(c)
    c.add_argument("--summary", action="store_true", help="also print the plan summary")
    cost_args(c)
    c.set_defaults(func=cmd_check)

    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
