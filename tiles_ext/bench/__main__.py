"""python -m tiles_ext.bench: batch-1 decode benchmark of Tiles against Transformers and llama.cpp.

  --gpu            the README run on one CUDA GPU: read bandwidth and floors; Llama-3.2-1B (random BF16) and
                   SmolLM2-135M (real weights where `gguf` is installed, else random), prompts 32 and 4096,
                   128 new tokens; Transformers eager / static cache + torch.compile / compiled step as a CUDA
                   graph / llama.cpp / Tiles generate / Tiles op alone. Writes docs/results/ and README.md.
  --context-sweep  adds ms/token against context 32..16K (Llama-3.2-1B) for Tiles and the CUDA-graph step.
  --quick          CPU smoke run on the embedded SmolLM2: Transformers eager beside Tiles (CPU executor), few
                   tokens, about two minutes; writes the same JSON/markdown/PNG to --out.
  --zoo            with --gpu: the shapes users run (workloads.ZOO: Llama 1B/3B/8B, Qwen2.5 0.5B/7B, Qwen3
                   0.6B/8B, Mistral-7B, Phi-3-mini; random BF16 weights) beside the CUDA-graph step and HF
                   compile. The whole zoo does not fit one 10-minute device call: pick models with --models.
  --sample SPEC    the sampling rows' settings (default temperature=0.7,top_p=0.9,top_k=50).
  --speculative    the verify passes of speculative decoding (system tiles-op-rows): the op's pass of R = 1..8 rows
                   timed per model and prompt (default Llama-3.2-1B and Llama-3.1-8B, random BF16), its ratio to
                   the one-row pass, and rows derived from those times: prompt lookup's ms per token at the
                   acceptance measured on the CPU (--acceptance, from `python -m tiles_ext.bench.acceptance`) against
                   plain greedy, and assisted generation's cost per round and break-even acceptance for a 1B draft
                   of an 8B target. Alone it runs only these (add --systems for others); with --gpu it fits one
                   device call: `python -m tiles_ext.bench --gpu --speculative`.

The Tiles rows run in a child process (a crash or a hang of the kernel cannot take the baselines with it; a
hang is cut by a timeout). A time budget (--budget-s) skips what no longer fits, saying so in the row, so a run
always ends with results written.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import rows as R
from .workloads import MODEL_LABELS, ZOO, Workload, floor_info, floor_ms, shape_of

REPO = Path(__file__).resolve().parents[2]
GPU_SWEEP = [32, 256, 1024, 2048, 4096, 8192, 16384]
BASELINES = ("hf-eager", "hf-static-compile", "hf-compile-sample", "graph-step", "llama.cpp")
TILES = ("tiles-generate", "tiles-generate-sample", "tiles-op-multi", "tiles-op-single", "tiles-generate-fp8",
         "tiles-op-fp8")
ZOO_SYSTEMS = ("tiles-generate", "tiles-op-multi", "graph-step", "hf-static-compile")
DEFAULT_SAMPLE = "temperature=0.7,top_p=0.9,top_k=50"
VERIFY = "tiles-op-rows"  # the verify-pass system: its records are per (model, prompt, R), not per workload
SPECULATIVE_MODELS = ["llama-3.2-1b", "llama-3.1-8b"]
DEFAULT_ACCEPTANCE = REPO / "docs" / "results" / "acceptance-smollm2-cpu.json"


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tiles_ext.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--gpu", action="store_true", help="the full run on a CUDA GPU (README results)")
    mode.add_argument("--quick", action="store_true", help="CPU smoke run on the embedded SmolLM2")
    mode.add_argument("--from-json", type=Path, metavar="JSON",
                      help="re-render the markdown and figures of a results JSON (e.g. one brought back from the "
                           "GPU machine into docs/results/) and update README.md from it")
    mode.add_argument("--tiles-child", metavar="SPEC", help=argparse.SUPPRESS)
    ap.add_argument("--context-sweep", action="store_true", help="add ms/token against context length")
    ap.add_argument("--zoo", action="store_true", help="the zoo of shapes (workloads.ZOO), with --gpu")
    ap.add_argument("--speculative", action="store_true",
                    help=f"verify passes of R = 1..8 rows ({VERIFY}) and the speculative rows derived from them")
    ap.add_argument("--acceptance", type=Path, default=DEFAULT_ACCEPTANCE,
                    help="prompt-lookup acceptance JSON for --speculative (default: %(default)s)")
    ap.add_argument("--sample", default=DEFAULT_SAMPLE,
                    help="generation-config fields of the sampling rows (default: %(default)s)")
    ap.add_argument("--llama-bench", type=Path, help="a llama-bench binary for the llama.cpp row (default: "
                                                     ".bench_llamacpp/, then llama-bench on PATH)")
    ap.add_argument("--out", type=Path, help="output folder (default: docs/results for --gpu)")
    ap.add_argument("--models", help="comma list of models (default per mode): " + ", ".join(MODEL_LABELS))
    ap.add_argument("--prompts", help="comma list of prompt lengths (default: 32,4096 GPU; 32 quick)")
    ap.add_argument("--new-tokens", type=int, help="new tokens per generation (default: 128 GPU; 8 quick)")
    ap.add_argument("--reps", type=int, help="timed repetitions after warm-up (default: 5 GPU; 3 quick)")
    ap.add_argument("--eager-tokens", type=int, help="new tokens for the eager rows only (default: 32 on GPU; "
                                                     "eager is host-bound, ms/token does not depend on it)")
    ap.add_argument("--systems", help="comma list of systems to run (default: all but " + VERIFY + "): "
                    + ", ".join(list(R.SYSTEMS) + [VERIFY]))
    ap.add_argument("--sweep-contexts", help="comma list of contexts for --context-sweep")
    ap.add_argument("--weights", choices=("auto", "random", "real"),
                    help="SmolLM2 weights: real (embedded), random, auto = real where loadable (default)")
    ap.add_argument("--budget-s", type=float, help="wall-time budget; rows that no longer fit are skipped "
                                                   "(default 330 GPU, 150 quick)")
    ap.add_argument("--child-timeout-s", type=float, help="limit for the Tiles child process")
    ap.add_argument("--cpu-workers", type=int, default=8, help="plan workers for the CPU executor")
    ap.add_argument("--commit", help="commit to name the results with (default: git rev-parse --short HEAD, else "
                                     "'unknown'; give it for copies of the tree without .git)")
    ap.add_argument("--no-readme", action="store_true", help="do not update README.md's results block")
    ap.add_argument("--readme", type=Path, default=REPO / "README.md")
    return ap.parse_args(argv)


def settings(a) -> dict:
    gpu = bool(a.gpu)
    s = {
        "mode": "gpu" if gpu else "quick",
        "device": "cuda" if gpu else "cpu",
        "models": (a.models.split(",") if a.models else list(ZOO) if a.zoo else
                   SPECULATIVE_MODELS if a.speculative and gpu else
                   ["llama-3.2-1b", "smollm2-135m"] if gpu else ["smollm2-135m"]),
        "prompts": [int(x) for x in a.prompts.split(",")] if a.prompts else ([32, 4096] if gpu else [32]),
        "new_tokens": a.new_tokens or (128 if gpu else 8),
        "reps": a.reps or (5 if gpu else 3),
        "eager_tokens": a.eager_tokens or (32 if gpu else None),
        "systems": systems_of(a),
        "acceptance": str(a.acceptance),
        "verify_launches": 20 if gpu else 2,
        "sample": parse_sample(a.sample),
        "llama_bench": str(a.llama_bench) if a.llama_bench else None,
        "weights": a.weights or ("auto" if gpu else "real"),
        "budget_s": a.budget_s or (330.0 if gpu else 150.0),
        "sweep": a.context_sweep,
        "sweep_contexts": ([int(x) for x in a.sweep_contexts.split(",")] if a.sweep_contexts else
                           GPU_SWEEP if gpu else [32, 128, 512]),
        "sweep_tokens": 64 if gpu else 4,
        "cpu_workers": a.cpu_workers,
        "warmup": 2 if gpu else 1,
    }
    for m in s["models"]:
        if m not in MODEL_LABELS:
            raise SystemExit(f"error: unknown model {m!r}; known: {', '.join(MODEL_LABELS)}")
    for sy in s["systems"]:
        if sy not in R.SYSTEMS and sy != VERIFY:
            raise SystemExit(f"error: unknown system {sy!r}; known: {', '.join(list(R.SYSTEMS) + [VERIFY])}")
    if s["new_tokens"] < 2:
        raise SystemExit("error: --new-tokens must be at least 2")
    if gpu and not torch.cuda.is_available():
        raise SystemExit("error: --gpu needs a CUDA device (torch.cuda.is_available() is False)")
    # The children's share of the budget: the rest goes to the baselines, if any run.
    share = (0.45 if gpu else 0.6) if any(sy in BASELINES for sy in s["systems"]) else 0.9
    s["child_timeout_s"] = a.child_timeout_s or share * s["budget_s"]
    return s


def systems_of(a) -> list[str]:
    """--systems, else --speculative's verify passes alone, else the zoo's or all the table's systems; --speculative
    adds the verify passes to any of them."""
    if a.systems:
        systems = a.systems.split(",")
    elif a.speculative:
        return [VERIFY]
    else:
        systems = list(ZOO_SYSTEMS) if a.zoo else list(R.SYSTEMS)
    return systems + [VERIFY] if a.speculative and VERIFY not in systems else systems


def parse_sample(spec: str) -> dict:
    """"temperature=0.7,top_p=0.9,top_k=50" -> generation-config fields (int where the value is one)."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise SystemExit(f"error: --sample part {part!r} is not NAME=VALUE")
        try:
            out[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            raise SystemExit(f"error: --sample {key}={value!r} is not a number") from None
    return out


def sweep_model(s) -> str:
    return "llama-3.2-1b" if "llama-3.2-1b" in s["models"] else s["models"][0]


def workloads_of(s, model: str, weights: str) -> list[Workload]:
    return [Workload(model, p, s["new_tokens"], weights) for p in s["prompts"]]


class Interrupted(BaseException):
    """SIGTERM (the caller's time limit): not an Exception, so no row swallows it; the run writes what it has."""


def _on_sigterm(signum, frame):
    raise Interrupted("stopped by SIGTERM (the caller's time limit) before this row")


class Budget:
    def __init__(self, seconds: float):
        self.t0, self.seconds = time.monotonic(), seconds

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.t0)

    def reason(self) -> str:
        return f"time budget exhausted (--budget-s {self.seconds:.0f}; the run must fit one device call)"


def log(msg: str):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- Tiles rows (child process)


def tiles_child(spec_path: str) -> int:
    from . import tiles_rows as T
    from .workloads import build_model, make_prompt, open_window_for
    spec = json.loads(Path(spec_path).read_text())
    device = torch.device(spec["device"])
    out = open(spec["out"], "a")
    bw = spec["bandwidth"]
    systems = spec["systems"]

    window_note, outgrown = None, {}

    def emit(kind, obj):
        if kind == "row" and window_note and obj["workload"] not in outgrown:
            obj["notes"].append(window_note)
        out.write(json.dumps({"kind": kind, **obj}, default=str) + "\n")
        out.flush()

    def within_window(rows_):
        """The (system, workload, row) items whose workloads fit the opened window; the others' rows skipped."""
        for _, w, r in rows_:
            if w.name in outgrown:
                emit("row", R.skip(r, outgrown[w.name]))
        return [x for x in rows_ if x[1].name not in outgrown]

    for model_name in spec["models"]:
        model, tok, used = build_model(model_name, device, spec["weights"])
        wls = [Workload(model_name, p, spec["new_tokens"], used) for p in spec["prompts"]]
        window_note, outgrown = open_window_for(model, wls)
        if window_note:
            log(f"{model_name}: {window_note}" + (f"; skipped: {', '.join(outgrown)}" if outgrown else ""))
        floors = {w.name: floor_info(w, bw)["floor_ms"] for w in wls}
        gen = [sy for sy in ("tiles-generate", "tiles-generate-sample") if sy in systems]
        if gen:
            prompts = {w.name: make_prompt(w, model.config.vocab_size, tok, device) for w in wls}
            rows_ = within_window([(sy, w, R.new_row(sy, w)) for sy in gen for w in wls])
            try:
                model, patch_s = T.patch(model)
            except Exception as e:
                for _, _, r in rows_:
                    emit("row", R.fail(r, e))
                log(f"tiles_ext.patch failed: {e}")
            else:
                for sy, w, r in rows_:
                    r["one_time_s"]["patch"] = patch_s
                    R.run_guarded(r, T.tiles_generate, model, w, prompts[w.name], floors[w.name], spec["reps"],
                                  device, spec["warmup"], spec["sample"] if sy == "tiles-generate-sample" else None)
                    emit("row", r)
                model = T.unpatch(model)
        fp8 = [sy for sy in ("tiles-generate-fp8", "tiles-op-fp8") if sy in systems]
        if fp8:
            fp8_floors = {w.name: floor_info(w, bw, "fp8")["floor_ms"] for w in wls}
            prompts = {w.name: make_prompt(w, model.config.vocab_size, tok, device) for w in wls}
            model = T.fp8_rows(within_window([(sy, w, R.new_row(sy, w)) for sy in fp8 for w in wls]), model,
                               fp8_floors, prompts, spec["reps"], device, spec["warmup"], spec["cpu_workers"],
                               lambda r: emit("row", r))
        if "tiles-op-multi" in systems or "tiles-op-single" in systems:
            for w in wls:
                r1, rn = R.new_row("tiles-op-single", w), R.new_row("tiles-op-multi", w)
                try:
                    T.op_rows(r1, rn, model, w, floors[w.name], spec["reps"], device, spec["cpu_workers"])
                except Exception as e:
                    for r in (r1, rn):
                        if r["status"] == "pending":
                            R.fail(r, e)
                    log(f"tiles op rows on {w.name} failed: {e}")
                for r in (rn, r1):
                    if r["system"] in systems:
                        emit("row", r)
            if spec.get("sweep_contexts") and model_name == spec["sweep_model"]:
                shape = shape_of(model_name)
                try:
                    pts = T.op_sweep(model, spec["sweep_contexts"], spec["sweep_tokens"], spec["reps"], device,
                                     lambda c: floor_ms(shape, c, bw), spec["cpu_workers"])
                except Exception as e:
                    pts = [{"system": "tiles-op-multi", "context": c, "status": "failed",
                            "reason": f"{type(e).__name__}: {str(e)[:300]}"} for c in spec["sweep_contexts"]]
                for p in pts:
                    emit("sweep", p)
        if VERIFY in systems:
            verify_child(model, model_name, spec, device, lambda rec: emit("verify", dict(rec, weights=used)))
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    out.close()
    return 0


def verify_child(model, model_name: str, spec: dict, device, emit):
    """The verify-pass records of one model, prompt by prompt; a failure marks that prompt's missing R failed."""
    from .verify_passes import ROWS, pass_rows
    for prompt in spec["prompts"]:
        done = set()
        try:
            pass_rows(model, model_name, prompt, device, ROWS, spec["verify_launches"], spec["reps"],
                      spec["cpu_workers"], lambda rec: (done.add(rec["rows"]), emit(rec)))
        except Exception as e:
            log(f"verify passes of {model_name} at prompt {prompt} failed: {type(e).__name__}: {e}")
            for r in sorted(set(ROWS) - done):
                emit({"model": model_name, "prompt_len": prompt, "rows": r, "status": "failed",
                      "reason": f"{type(e).__name__}: {str(e)[:300]}"})
        if device.type == "cuda":
            torch.cuda.empty_cache()


def run_tiles_child(s, bw: float, budget: Budget, rows_out: list, sweep_out: list, verify_out: list) -> dict:
    """Runs the Tiles rows in child processes, one per model (a kernel fault on one model cannot cost the other
    its rows); appends their rows, sweep points and verify-pass records (also those written before a crash, a
    timeout or an interruption); returns {model: why its child stopped early} for the children that did."""
    why = {}
    t_end = time.monotonic() + min(s["child_timeout_s"], max(10.0, budget.left() - 20))
    for i, model in enumerate(s["models"]):
        left_models = len(s["models"]) - i
        timeout = max(10.0, (t_end - time.monotonic()) / left_models)
        with tempfile.TemporaryDirectory(prefix="tiles-bench-") as tmp:
            spec = {"device": s["device"], "models": [model], "prompts": s["prompts"],
                    "new_tokens": s["new_tokens"], "reps": s["reps"], "weights": s["weights"],
                    "systems": s["systems"], "bandwidth": bw, "cpu_workers": s["cpu_workers"], "sample": s["sample"],
                    "out": os.path.join(tmp, "rows.jsonl"),
                    "sweep_contexts": s["sweep_contexts"] if s["sweep"] else [], "sweep_tokens": s["sweep_tokens"],
                    "sweep_model": sweep_model(s), "warmup": s["warmup"],
                    "verify_launches": s["verify_launches"]}
            Path(tmp, "spec.json").write_text(json.dumps(spec))
            cmd = [sys.executable, "-m", "tiles_ext.bench", "--tiles-child", os.path.join(tmp, "spec.json")]
            log(f"Tiles rows of {model} in a child process (timeout {timeout:.0f} s)")
            try:
                p = subprocess.run(cmd, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))
                if p.returncode != 0:
                    why[model] = f"the Tiles child process exited with code {p.returncode} before this row"
            except subprocess.TimeoutExpired:
                why[model] = (f"the Tiles child process was stopped after {timeout:.0f} s (hang or time budget) "
                              "before this row")
            finally:
                if os.path.exists(spec["out"]):
                    for line in Path(spec["out"]).read_text().splitlines():
                        try:
                            rec = json.loads(line)
                        except json.JSONDecodeError:  # the last line of a killed child may be cut short
                            continue
                        {"row": rows_out, "sweep": sweep_out, "verify": verify_out}[rec.pop("kind")].append(rec)
            if model in why:
                log(f"{model}: {why[model]}")
    return why


# --------------------------------------------------------------------------- baselines (this process)


def baseline_rows(s, bw: float, device, budget: Budget, sweep: list, out: list) -> list:
    """All baseline rows, phase by phase across the models (eager; CUDA-graph step and its sweep; llama.cpp;
    generate + compile), so that what the budget cuts is the least needed, never a whole model: llama.cpp (the
    closest peer, ~10 s a model) before the compiled generate (~30-60 s of compiling a workload), the row a tight
    budget cuts first. Rows are appended to `out` as they finish (an interruption keeps them)."""
    from . import baselines as B
    from . import llamacpp
    from .workloads import build_model, make_prompt
    want = [sy for sy in BASELINES if sy in s["systems"]]
    if not want:
        return out
    models = {}
    for name in s["models"]:
        model, tok, used = build_model(name, device, s["weights"])
        wls = workloads_of(s, name, used)
        models[name] = (model, wls, {w.name: floor_info(w, bw)["floor_ms"] for w in wls},
                        {w.name: make_prompt(w, model.config.vocab_size, tok, device) for w in wls})

    def guarded(system, fn, *args, min_left=15, after_model=None):
        if system not in want:
            return
        for name, (model, wls, floors, prompts) in models.items():
            for w in wls:
                r = R.new_row(system, w)
                if budget.left() < min_left:
                    R.skip(r, budget.reason())
                else:
                    t0 = time.monotonic()
                    R.run_guarded(r, fn, model, w, prompts[w.name], floors[w.name], s["reps"], device, *args)
                    med = (r["ms_per_token"] or {}).get("median", float("nan"))
                    log(f"{system} {w.name}: {r['status']} {med:.3f} ms/token ({time.monotonic() - t0:.0f} s)")
                out.append(r)
            if after_model:
                after_model(name, model)
            if device.type == "cuda":
                B.drop_compiled(model)
                torch._dynamo.reset()  # free this system's graphs before the next one's memory is measured
                torch.cuda.empty_cache()

    def graph_sweep(name, model):
        # right after the model's graph-step rows: the step is compiled with dynamic shapes by then (two cache
        # sizes seen), so every context reuses that compile instead of paying a new one
        if not (s["sweep"] and name == sweep_model(s) and device.type == "cuda"):
            return
        if budget.left() < 45:
            sweep.extend({"system": "graph-step", "context": c, "status": "skipped", "reason": budget.reason()}
                         for c in s["sweep_contexts"])
            return
        shape = shape_of(name)
        sweep.extend(B.graph_sweep(model, s["sweep_contexts"], s["sweep_tokens"], s["reps"], device,
                                   lambda c: floor_ms(shape, c, bw)))

    guarded("hf-eager", B.eager_generate, s["eager_tokens"], min_left=10)
    guarded("graph-step", B.graph_step, min_left=25, after_model=graph_sweep)
    if "llama.cpp" in want:
        for model, wls, floors, _ in models.values():
            lrows = {w.prompt_len: R.new_row("llama.cpp", w) for w in wls}
            if budget.left() < 30:
                for r in lrows.values():
                    R.skip(r, budget.reason())
            else:
                try:
                    llamacpp.llamacpp_rows(lrows, model, wls, floors, s["reps"], device, s["llama_bench"])
                except Exception as e:
                    for r in lrows.values():
                        if r["status"] == "pending":
                            R.fail(r, e)
                for r in lrows.values():
                    if r["status"] == "pending":
                        R.fail(r, RuntimeError("no result"))
                    log(f"llama.cpp {r['workload']}: {r['status']} {r.get('reason') or ''}")
            out += list(lrows.values())
    guarded("hf-static-compile", B.static_compile_generate, min_left=40)
    guarded("hf-compile-sample", B.static_compile_generate, s["sample"], min_left=40)
    models.clear()
    if device.type == "cuda":
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return out


# --------------------------------------------------------------------------- the run


def device_name(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def main(argv=None) -> int:
    a = parse(argv)
    if a.tiles_child:
        return tiles_child(a.tiles_child)
    if a.from_json:
        return from_json(a)
    s = settings(a)
    budget = Budget(s["budget_s"])
    device = torch.device(s["device"])
    import transformers

    from . import figures, report
    from .bandwidth import measure_read_bandwidth
    meta = {**report.now_meta(), "commit": a.commit or report.git_commit(REPO), "device_name": device_name(device),
            "torch": torch.__version__, "transformers": transformers.__version__, "mode": s["mode"],
            "python": platform.python_version(), "settings": {k: v for k, v in s.items()}}
    log(f"{s['mode']} run on {meta['device_name']}: models {s['models']}, prompts {s['prompts']}, "
        f"{s['new_tokens']} new tokens, {s['reps']} reps, budget {s['budget_s']:.0f} s")
    bwd = measure_read_bandwidth(device)
    bw = bwd["bytes_per_s"]
    log(f"read bandwidth {bwd['tb_per_s'] * 1e3:.1f} GB/s ({bwd['method']})")

    workloads = []
    all_rows, sweep, verify = [], [], []
    why, stopped = {}, None
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if any(sy in s["systems"] for sy in TILES + (VERIFY,)):
            why = run_tiles_child(s, bw, budget, all_rows, sweep, verify)
        baseline_rows(s, bw, device, budget, sweep, all_rows)
    except Interrupted as e:
        stopped = str(e)
        log(f"interrupted: {stopped}; writing the results so far")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    # Workload table (weights as actually used, read back from the rows), missing rows filled with reasons.
    for m in s["models"]:
        for w in workloads_of(s, m, "random"):
            ws = [r for r in all_rows if r["workload"] == w.name]
            wd = w.to_dict()
            wd["weights"] = next((r["weights"] for r in ws if r.get("weights") and r["status"] != "skipped"),
                                 _weights_label(s, m))
            wd["floor"] = floor_info(w, bw)
            workloads.append(wd)
            for sy in s["systems"]:
                if sy != VERIFY and not any(r["system"] == sy for r in ws):
                    r = R.new_row(sy, w)
                    r["weights"] = wd["weights"]
                    if stopped:
                        R.skip(r, stopped)
                    elif sy in TILES and m in why:
                        R.skip(r, why[m])
                    elif device.type != "cuda":
                        R.skip(r, "not run (GPU-only system on a CPU run)")
                    else:
                        R.skip(r, budget.reason() if budget.left() < 20 else "not run")
                    all_rows.append(r)
    agreement(all_rows)
    if device.type != "cuda":  # CPU runs list only what can run on a CPU
        all_rows = [r for r in all_rows if r["system"] in ("hf-eager",) + TILES]
    result = {"meta": meta, "bandwidth": bwd, "workloads": workloads, "rows": all_rows, "sweep": sweep,
              "sweep_model_label": MODEL_LABELS[sweep_model(s)]}
    if VERIFY in s["systems"]:
        result.update(speculative_results(s, verify, why, stopped))
    out_dir = a.out or (REPO / "docs" / "results" if s["mode"] == "gpu" else Path("out") / "bench-quick")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = report.base_name(meta)
    figs = figures.write_all(result, out_dir, base)
    paths = report.write(result, out_dir, figs)
    log(f"wrote {paths['json']}, {paths['markdown']}, " + ", ".join(str(p) for p in figs.values()))
    if s["mode"] == "gpu" and not a.no_readme and not all_rows:
        log("no per-workload rows (a verify-pass run): README.md's results block left as it is")
    elif s["mode"] == "gpu" and not a.no_readme:
        if report.update_readme(a.readme, result, figs, paths["markdown"]):
            log(f"updated the results block of {a.readme}")
    print(report.markdown(result))
    return 2 if stopped else 0  # results are written either way; the caller learns the run was cut short


def speculative_results(s, verify: list, why: dict, stopped: str | None) -> dict:
    """The verify-pass records (missing ones filled with why they are missing) and the rows derived from them with
    the acceptance JSON (its problem said instead where it cannot be read)."""
    from .speculative import derive, load_acceptance
    from .verify_passes import ROWS
    for m in s["models"]:
        for p in s["prompts"]:
            for r in ROWS:
                if not any(v["model"] == m and v["prompt_len"] == p and v["rows"] == r for v in verify):
                    verify.append({"model": m, "prompt_len": p, "rows": r, "status": "skipped",
                                   "reason": stopped or why.get(m) or "not run"})
    try:
        acc = load_acceptance(Path(s["acceptance"]))
        info = {"path": _shown(s["acceptance"]),
                **{k: acc["meta"].get(k) for k in ("model", "executor", "commit", "date")}}
    except (OSError, ValueError) as e:
        acc, info = None, {"path": _shown(s["acceptance"]), "problem": str(e)}
        log(f"prompt-lookup rows not derived: {e}")
    return {"verify_passes": verify, "speculative": {**derive(verify, acc), "acceptance": info}}


def _shown(path: str) -> str:
    """A path as the results name it: relative to the repository where it lies inside (the same on every machine)."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def from_json(a) -> int:
    from . import figures, report
    if not a.from_json.is_file():
        raise SystemExit(f"error: no results file {a.from_json}")
    result = json.loads(a.from_json.read_text())
    for key in ("meta", "bandwidth", "workloads", "rows"):
        if key not in result:
            raise SystemExit(f"error: {a.from_json} is not a benchmark results file (no {key!r})")
    out_dir = Path(a.out or a.from_json.parent)
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = figures.write_all(result, out_dir, report.base_name(result["meta"]))
    paths = report.write(result, out_dir, figs)
    log(f"wrote {paths['json']}, {paths['markdown']}, " + ", ".join(str(p) for p in figs.values()))
    if not a.no_readme and not result["rows"]:
        log("no per-workload rows (a verify-pass run): README.md's results block left as it is")
    elif not a.no_readme and report.update_readme(a.readme, result, figs, paths["markdown"]):
        log(f"updated the results block of {a.readme}")
    return 0


def agreement(all_rows):
    """On real weights, how many leading greedy tokens of Tiles generate agree with eager Transformers (random
    weights give nearly tied logits, where a difference in the last bit flips tokens: not reported there)."""
    for r in all_rows:
        if r["system"] != "tiles-generate" or r["status"] != "ok" or r.get("weights") != "real":
            continue
        ref = next((e for e in all_rows if e["system"] == "hf-eager" and e["workload"] == r["workload"]
                    and e["status"] == "ok" and e.get("tokens")), None)
        if ref is None:
            continue
        a, b = r["tokens"], ref["tokens"]
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        r["tokens_agreeing_with_eager"] = f"{n}/{min(len(a), len(b))}"


def _weights_label(s, model: str) -> str:
    if model != "smollm2-135m" or s["weights"] == "random":
        return "random"
    return "real" if s["weights"] == "real" else "real where loadable, else random"


if __name__ == "__main__":
    sys.exit(main())
