"""Derived speculative-decoding rows: measured R-row verify-pass times (verify_passes, on the GPU) combined with
the acceptance of prompt lookup measured on the CPU (acceptance.py, the real SmolLM2-135M-Instruct).

Nothing here is a measured generation: every number is a pass time from this run multiplied or divided by a
count, and the rows say so (DERIVATION). The acceptance comes from another model than the timed shapes (the real
model loads only on the CPU; the GPU times random-weight Llama shapes), so a prompt-lookup row answers "what would
this model's passes cost at SmolLM2's acceptance", not "what does Llama accept".

Prompt lookup, per task and k: a pass of R = k + 1 rows yields `a` decode tokens on average, so a token costs
t(k+1) / a against plain greedy's t(1). That bills every pass as full; a pass without a draft has one row, so a
second figure bills each pass by the rows it really had (the CPU run's rows-per-pass histogram, t(R) for each).

Assisted generation, a draft model D for a target T, per k drafts: a round costs k x t_D(1) + t_T(k + 1) and yields
1 + (accepted drafts) tokens; it breaks even with plain decoding of T when its tokens reach round / t_T(1).
"""
from __future__ import annotations

import json
from pathlib import Path

DERIVATION = "derived: measured R-row pass time x CPU-measured acceptance (not a measured generation)"
ASSISTED_DERIVATION = "derived: measured pass times of the draft and target shapes (not a measured generation)"
ASSISTED_KS = tuple(range(1, 8))
DRAFT, TARGET = "llama-3.2-1b", "llama-3.1-8b"


def load_acceptance(path: Path) -> dict:
    """The JSON of `python -m tiles_ext.bench.acceptance`, checked for the fields the derivation reads."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no acceptance results at {path} (make them with python -m tiles_ext.bench.acceptance)")
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or "meta" not in data or not isinstance(data.get("tasks"), list):
        raise ValueError(f"{path} is not an acceptance results file (no 'meta' and 'tasks')")
    need = ("k", "new_tokens", "passes", "decode_tokens_per_pass", "rows_per_pass", "equals_plain")
    for t in data["tasks"]:
        for run in t.get("lookup", []):
            missing = [f for f in need if f not in run]
            if missing:
                raise ValueError(f"{path}: task {t.get('name')!r} k={run.get('k')} lacks {', '.join(missing)}")
    return data


def pass_times(records: list[dict], model: str, prompt: int) -> dict[int, float]:
    """{R: median ms per pass} of the ok verify-pass records of one model and prompt."""
    return {r["rows"]: r["ms_per_pass"]["median"] for r in records
            if r["model"] == model and r["prompt_len"] == prompt and r["status"] == "ok"}


def billed_by_rows(run: dict, times: dict[int, float]) -> float | None:
    """ms per decode token with each pass billed at the time of the rows it had; None where an R is untimed."""
    hist = {int(r): n for r, n in run["rows_per_pass"].items()}
    if any(r not in times for r in hist) or run["new_tokens"] < 2:
        return None
    return sum(n * times[r] for r, n in hist.items()) / (run["new_tokens"] - 1)


def lookup_rows(acceptance: dict, times: dict[int, float], model: str, prompt: int) -> list[dict]:
    """Per task and k: ms per token of prompt lookup on this model's passes against plain greedy t(1); the best k
    of each task (fewest ms per token, every pass billed as full) marked."""
    out = []
    for t in acceptance["tasks"]:
        rows = []
        for run in t["lookup"]:
            k, a = run["k"], run["decode_tokens_per_pass"]
            rec = {"model": model, "prompt_len": prompt, "task": t["name"], "k": k, "rows": k + 1,
                   "decode_tokens_per_pass": a, "output_equals_plain": run["equals_plain"], "derivation": DERIVATION}
            if 1 not in times or k + 1 not in times or not a:
                rec.update(status="skipped", reason=f"no timed pass of 1 and {k + 1} rows")
            else:
                ms, by_rows = times[k + 1] / a, billed_by_rows(run, times)
                rec.update(status="ok", ms_per_pass=times[k + 1], plain_ms_per_token=times[1], ms_per_token=ms,
                           speedup=times[1] / ms, ms_per_token_by_rows=by_rows,
                           speedup_by_rows=times[1] / by_rows if by_rows else None)
            rows.append(rec)
        ok = [r for r in rows if r["status"] == "ok"]
        for r in rows:
            r["best_k"] = bool(ok) and r is min(ok, key=lambda x: x["ms_per_token"])
        out += rows
    return out


def assisted_rows(draft: dict[int, float], target: dict[int, float], prompt: int, ks=ASSISTED_KS,
                  draft_model: str = DRAFT, target_model: str = TARGET) -> list[dict]:
    """Per k: the cost of a round of k drafts and the tokens per round (and accepted drafts) at which it breaks even
    with plain one-row decoding of the target."""
    out = []
    for k in ks:
        rec = {"draft": draft_model, "target": target_model, "prompt_len": prompt, "k": k, "target_rows": k + 1,
               "derivation": ASSISTED_DERIVATION}
        if 1 not in draft or 1 not in target or k + 1 not in target:
            rec.update(status="skipped", reason=f"no timed draft pass of 1 row or target passes of 1 and {k + 1} rows")
        else:
            round_ms = k * draft[1] + target[k + 1]
            tokens = round_ms / target[1]
            rec.update(status="ok", draft_ms=draft[1], target_ms_per_pass=target[k + 1], plain_ms_per_token=target[1],
                       round_ms=round_ms, break_even_tokens_per_round=tokens,
                       break_even_accepted_drafts=tokens - 1, break_even_acceptance_rate=(tokens - 1) / k,
                       reachable=tokens <= k + 1)
        out.append(rec)
    return out


def derive(records: list[dict], acceptance: dict | None) -> dict:
    """Every derived row of a run: prompt lookup per (model, prompt) where acceptance results exist, assisted
    generation per prompt timed for both the draft and the target shape."""
    keys = sorted({(r["model"], r["prompt_len"]) for r in records})
    lookup = []
    if acceptance is not None:
        for model, prompt in keys:
            lookup += lookup_rows(acceptance, pass_times(records, model, prompt), model, prompt)
    assisted = []
    for prompt in sorted({p for m, p in keys if m == DRAFT} & {p for m, p in keys if m == TARGET}):
        assisted += assisted_rows(pass_times(records, DRAFT, prompt), pass_times(records, TARGET, prompt), prompt)
    return {"derivation": DERIVATION, "lookup": lookup, "assisted": assisted}
