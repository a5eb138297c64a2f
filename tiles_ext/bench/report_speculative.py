"""Markdown of the verify-pass rows (measured) and the speculative-decoding rows derived from them."""
from __future__ import annotations

from .workloads import MODEL_LABELS


def _label(model: str) -> str:
    return MODEL_LABELS.get(model, model)


def _f(x, nd=3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def bits_cell(mine: dict, differ: dict) -> str:
    """The bit check's cell where no pass differs: yes where some pass of several rows ran, else nothing was compared."""
    compared = any(n > 1 and r["status"] == "ok" for n, r in mine.items())
    return "yes" if compared else "- (no pass of several rows ran)"


def pass_table(records: list[dict]) -> list[str]:
    """One line per model and prompt, one column per R: median ms per pass (ratio to the one-row pass)."""
    rows = sorted({r["rows"] for r in records})
    lines = ["Verify passes (measured): ms per pass of R rows on the op, median (ratio to the one-row pass); "
             "BF16 weights (random unless marked real), back-to-back launches at one position:", "",
             "| model, prompt | " + " | ".join(f"R={r}" for r in rows) + " | bits = one-row passes |",
             "|" + "---|" * (len(rows) + 2)]
    for model, prompt in sorted({(r["model"], r["prompt_len"]) for r in records}):
        mine = {r["rows"]: r for r in records if r["model"] == model and r["prompt_len"] == prompt}
        cells = []
        for n in rows:
            r = mine.get(n)
            ok = r is not None and r["status"] == "ok"
            cells.append(f"{r['ms_per_pass']['median']:.3f} ({r['ratio_to_one_row']:.2f}x)" if ok else
                         (r["status"] if r else "-"))
        differ = {n: r.get("rel_err_vs_one_row_passes") for n, r in mine.items()
                  if r["status"] == "ok" and not r.get("bits_equal_one_row_passes")}
        real = " (real weights)" if any(r.get("weights") == "real" for r in mine.values()) else ""
        lines.append(f"| {_label(model)}{real}, prompt {prompt} | " + " | ".join(cells) + " | "
                     + (bits_cell(mine, differ) if not differ else "no, rel. error " + ", ".join(
                         f"R={n} {'-' if e is None else f'{e:.1e}'}" for n, e in sorted(differ.items())))
                     + " |")
    return lines + [""]


def lookup_table(rows: list[dict]) -> list[str]:
    lines = ["Prompt lookup, " + (rows[0]["derivation"] if rows else "") + ": ms per generated token = t(R = k + 1) / "
             "decode tokens per pass (SmolLM2-135M-Instruct's acceptance on the CPU) against plain greedy t(1); "
             "'by rows' bills each pass at the rows it had. Best k per task in bold.", "",
             "| model, prompt | task | k | tokens/pass | ms/token | speed-up | ms/token by rows | speed-up by rows |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {_label(r['model'])}, prompt {r['prompt_len']} | {r['task']} | {r['k']} | - | "
                         f"{r['status']}: {r['reason']} | - | - | - |")
            continue
        b = "**" if r["best_k"] else ""
        lines.append(f"| {_label(r['model'])}, prompt {r['prompt_len']} | {r['task']} | {b}{r['k']}{b} | "
                     f"{r['decode_tokens_per_pass']:.2f} | {b}{r['ms_per_token']:.3f}{b} | {b}{r['speedup']:.2f}x{b} | "
                     f"{_f(r['ms_per_token_by_rows'])} | {_f(r['speedup_by_rows'], 2)}x |")
    return lines + [""]


def best_table(rows: list[dict]) -> list[str]:
    """Per model, prompt and task: the best k against plain greedy, and whether prompt lookup pays there at all."""
    best = [r for r in rows if r.get("best_k")]
    if not best:
        return []
    lines = ["Best k per task (derived, every pass billed as full):", "",
             "| model, prompt | task | best k | ms/token | plain greedy ms/token | speed-up | |", "|---|---|---|---|---|---|---|"]
    for r in best:
        verdict = "prompt lookup pays" if r["speedup"] > 1 else "plain greedy is faster"
        lines.append(f"| {_label(r['model'])}, prompt {r['prompt_len']} | {r['task']} | {r['k']} | "
                     f"{r['ms_per_token']:.3f} | {r['plain_ms_per_token']:.3f} | {r['speedup']:.2f}x | {verdict} |")
    return lines + [""]


def assisted_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    r0 = rows[0]
    lines = [f"Assisted generation, {_label(r0['draft'])}-shaped draft for a {_label(r0['target'])}-shaped target, "
             f"{r0['derivation']}: a round of k drafts costs k x t_draft(1) + t_target(k + 1); break-even = the "
             "tokens per round (1 + accepted drafts) at which a token costs t_target(1), as plain decoding.", "",
             "| prompt | k | round ms | break-even tokens/round | accepted drafts | of k | reachable (<= k + 1) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['prompt_len']} | {r['k']} | {r['status']}: {r['reason']} | - | - | - | - |")
            continue
        lines.append(f"| {r['prompt_len']} | {r['k']} | {r['round_ms']:.3f} | {r['break_even_tokens_per_round']:.2f} | "
                     f"{r['break_even_accepted_drafts']:.2f} | {100 * r['break_even_acceptance_rate']:.0f}% | "
                     f"{'yes' if r['reachable'] else 'no'} |")
    return lines + [""]


def markdown_lines(result: dict) -> list[str]:
    """The sections of a run with verify passes: the measured passes, then the derived rows (empty list if none)."""
    records = result.get("verify_passes") or []
    if not records:
        return []
    spec = result.get("speculative") or {}
    lines = pass_table(records)
    acc = spec.get("acceptance") or {}
    if acc.get("problem"):
        lines += [f"Prompt-lookup rows not derived: {acc['problem']}", ""]
    elif acc:
        lines += [f"Acceptance from {acc['path']} ({acc['model']}, {acc['executor']} executor, commit {acc['commit']}).",
                  ""]
    if spec.get("lookup"):
        lines += best_table(spec["lookup"]) + lookup_table(spec["lookup"])
    return lines + assisted_table(spec.get("assisted") or [])
