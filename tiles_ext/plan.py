"""Command line for plans.

    python -m tiles_ext.plan build --config CONFIG.json | --model DIR --workers N --out FILE
                                   [--policy tiles|waves] [--gpu-name NAME --sm-count N --cc 9.0]
    python -m tiles_ext.plan check FILE [--config CONFIG.json | --model DIR] [--summary]

`build` prints a summary (tiles per operator, dependency depth, bytes per worker and per stage, predicted
us/token for the plan's policy and, for comparison, the other policy) and writes a validated plan file.
`check` re-validates a plan file; it exits 1 with the reason on a corrupted, mismatched or inconsistent one.

Every refusal is one line on stderr, `error: <what is wrong>; <what to do>`, with exit status 2 for a bad
argument or input and 1 for a plan file that is not valid.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from tiles_ext.planner import cost
from tiles_ext.planner.graph import POLICIES
from tiles_ext.planner.plan import GpuTarget, build_plan
from tiles_ext.planner.planfile import PlanMismatch, load_plan, save_plan
from tiles_ext.families import served, shape_of
from tiles_ext.planner.shape import UnsupportedConfig
from tiles_ext.planner.summary import summarize
from tiles_ext.planner.validate import PlanError

# A worker is one persistent block on one SM; the largest GPUs have fewer than 200 SMs. Above this bound a plan
# is not a plan for any device, and planning it takes minutes.
MAX_WORKERS = 1024
EXAMPLE_CONFIG = "configs/smollm2-135m-config.json"


class CliError(Exception):
    """A refusal of the command line: printed as `error: <message>`, exit status `status`."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _config(args):
    if args.config and args.model:
        raise CliError("give --config or --model, not both")
    if args.config:
        path = Path(args.config)
        if path.is_dir():
            raise CliError(f"--config {path} is a directory; give its config.json file, or use --model {path}")
    elif args.model:
        model = Path(args.model)
        if model.is_file():
            raise CliError(f"--model {model} is a file; give the checkpoint folder, or use --config {model}")
        path = model / "config.json"
    else:
        return None
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CliError(f"no config file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {path} ({e})") from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} holds a JSON {type(data).__name__}, not a model config object; give a Hugging "
                       f"Face config.json (e.g. {EXAMPLE_CONFIG})")
    if "model_type" not in data:
        raise CliError(f"{path} has no \"model_type\"; add the model's type (served: {served()})")
    try:
        return shape_of(data)
    except UnsupportedConfig as e:
        raise CliError(f"{path}: {e}") from None
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
        # A field of the wrong kind that the family's reader does not name itself (a list for an integer, a zero
        # head count): say which file, and what a complete config looks like.
        raise CliError(f"{path}: cannot read this config ({type(e).__name__}: {e}); compare it with "
                       f"{EXAMPLE_CONFIG}") from None


def _count(name: str, value, low: int = 1, high: int | None = None):
    if value is None:
        return None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise CliError(f"{name} {value}: must be {bound}")
    return value


def _gpu(args) -> GpuTarget:
    sm_count = _count("--sm-count", args.sm_count, 1, MAX_WORKERS)
    if sm_count is None:
        if args.gpu_name or args.cc:
            raise CliError("--gpu-name/--cc need --sm-count")
        return GpuTarget()
    major, minor = 0, 0
    if args.cc:
        try:
            major, minor = (int(x) for x in args.cc.split("."))
        except ValueError:
            raise CliError(f"--cc {args.cc!r}: expected MAJOR.MINOR, e.g. 9.0") from None
    return GpuTarget(args.gpu_name or "unnamed GPU", sm_count, major, minor)


def _workers(args, gpu: GpuTarget) -> int:
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise CliError(f"--workers {args.workers}: must be between 1 and {MAX_WORKERS} (a worker is one SM of the "
                       f"GPU the plan runs on: give its SM count, e.g. 132 for an H100 or H200)")
    workers = args.workers or gpu.sm_count
    if not workers:
        raise CliError("give --workers N (or --sm-count N to use one worker per SM)")
    return workers


def _check_writable(out: Path) -> None:
    """Refuses an output the plan could not be written to, before any planning is done: a directory, a path below
    a file, or a folder this process may not create or write. Makes the missing folders, then writes and removes
    a probe file where the plan will go."""
    if out.is_dir():
        raise CliError(f"--out {out} is a directory; give a file name, e.g. --out {out / 'model.tplan'}")
    parent = out.parent
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CliError(f"--out {out}: {existing} is a file, not a folder; choose another path for the plan")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"--out {out}: cannot create the folder {parent} ({e.strerror or e}); choose a writable "
                       f"folder") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=out.name + ".", suffix=".probe", dir=parent)
    except OSError as e:
        raise CliError(f"--out {out}: cannot write in {parent} ({e.strerror or e}); choose a writable "
                       f"folder") from None
    os.close(fd)
    os.unlink(probe)


def _positive_floats(args) -> None:
    for name in ("bandwidth", "hop_us"):
        if getattr(args, name) <= 0:
            raise CliError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be positive")


def cmd_build(args) -> int:
    shape = _config(args)
    if shape is None:
        raise CliError("build needs --config CONFIG.json or --model DIR")
    gpu = _gpu(args)
    workers = _workers(args, gpu)
    _count("--attn-partitions", args.attn_partitions, 1, 4096)
    _count("--context", args.context, 1, 1 << 24)
    _positive_floats(args)
    if not args.out.strip():
        raise CliError("--out is empty; give the plan file to write, e.g. --out smollm2.tplan")
    out = Path(args.out)
    _check_writable(out)
    kw = dict(gpu=gpu, attn_partitions=args.attn_partitions, context_hint=args.context)
    try:
        plan = build_plan(shape, workers, policy=args.policy, **kw)
        other = build_plan(shape, workers, policy="waves" if args.policy != "waves" else "tiles", validate=False, **kw)
    except (ValueError, PlanError) as e:
        raise CliError(str(e)) from None
    print(summarize(plan, args.bandwidth * 1e12, args.hop_us, compare=other))
    try:
        path = save_plan(plan, out)
    except OSError as e:  # the folder changed since the check above
        raise CliError(f"--out {out}: cannot write the plan ({e.strerror or e}); choose a writable folder") from None
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


def cmd_check(args) -> int:
    shape = _config(args)
    _positive_floats(args)
    file = Path(args.file)
    if file.is_dir():
        plans = sorted(p.name for p in file.glob("*.tplan"))
        hint = f"; it holds {len(plans)} plan file(s), e.g. {file / plans[0]}" if plans else ""
        raise CliError(f"{file} is a directory, not a plan file: give one .tplan file{hint}")
    try:
        plan = load_plan(file, expect_shape=shape)
    except FileNotFoundError:
        raise CliError(f"no plan file {file}") from None
    except OSError as e:
        raise CliError(f"cannot read {file} ({e.strerror or e})") from None
    except PlanMismatch as e:
        raise CliError(f"({e.kind} mismatch) {e}", status=1) from None
    except PlanError as e:
        raise CliError(str(e), status=1) from None
    print(f"{file}: valid plan, {plan.header['num_tiles']} tiles on {plan.num_workers} workers, policy "
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
    b.add_argument("--workers", type=int, help=f"workers (one per SM, at most {MAX_WORKERS}); default --sm-count")
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
    try:
        return args.func(args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.status


if __name__ == "__main__":
    sys.exit(main())
