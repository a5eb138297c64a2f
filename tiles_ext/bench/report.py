"""Results as JSON and a markdown table, file names with date, commit and GPU, and the README's results block."""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
from pathlib import Path

from . import report_speculative
from .rows import SYSTEMS

README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"


def git_commit(repo: Path) -> str:
    """HEAD's short hash, with "-dirty" when tracked files differ from it: a copy of the tree whose .git is older than
    its files (as on a device machine that receives the working tree beside an older .git) then says so instead of
    naming the older commit."""
    def git(*args):
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else None
    try:
        head = git("rev-parse", "--short", "HEAD")
        if not head:
            return "unknown"
        changed = git("status", "--porcelain", "--untracked-files=no")
        return head + ("-dirty" if changed else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def base_name(meta: dict) -> str:
    """bench-YYYYMMDD-HHMM-<commit>-<gpu>: sortable, and says what produced it."""
    return f"bench-{meta['date_compact']}-{slug(meta['commit'])}-{slug(meta['device_name'])}"


def now_meta() -> dict:
    t = _dt.datetime.now(_dt.timezone.utc)
    return {"date": t.isoformat(timespec="seconds"), "date_compact": t.strftime("%Y%m%d-%H%M")}


def _f(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def _bw(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e12:.2f} TB/s" if bytes_per_s >= 1e11 else f"{bytes_per_s / 1e9:.1f} GB/s"


def _one_time(d: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in d.items()) if d else "-"


def row_cells(r: dict) -> list[str]:
    if r["status"] != "ok":
        why = (r.get("reason") or "").replace("|", "/").replace("\n", " ")
        return [r["label"], r["status"], "-", "-", "-", "-", "-", why]
    ms = r["ms_per_token"]
    notes = "; ".join(r.get("notes", []))
    if r.get("tokens_agreeing_with_eager"):
        notes = (notes + "; " if notes else "") + f"tokens agreeing with eager: {r['tokens_agreeing_with_eager']}"
    return [r["label"], f"**{_f(ms['median'])}**", f"{_f(ms['min'])} - {_f(ms['max'])} ({ms['reps']})",
            _f(r["tokens_per_s"], 1), _f(r["pct_of_floor"], 1), _f(r["peak_gpu_mem_gib"], 2),
            _one_time(r.get("one_time_s") or {}), notes.replace("|", "/")]


HEADER = ["system", "ms/token (median)", "min - max (reps)", "tokens/s", "% of floor", "peak GPU mem GiB",
          "one-time costs", "notes"]


def _system_order(r):
    keys = list(SYSTEMS)
    return keys.index(r["system"]) if r["system"] in keys else len(keys)


def summary_table(result: dict) -> list[str]:
    """One line per workload, one column per system: median ms/token (% of floor), '-' where not ok."""
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in result["rows"])]
    lines = ["| workload | floor | " + " | ".join(SYSTEMS[s][1] for s in systems) + " |",
             "|" + "---|" * (len(systems) + 2)]
    for w in result["workloads"]:
        cells = []
        for s in systems:
            r = next((r for r in result["rows"] if r["system"] == s and r["workload"] == w["name"]), None)
            if r is None or r["status"] != "ok":
                cells.append("-" if r is None else r["status"])
            else:
                pct = f" ({r['pct_of_floor']:.0f}%)" if r["pct_of_floor"] is not None else ""
                if r.get("floor_ms") is not None and r["pct_of_floor"] is not None:  # a row of its own floor (FP8)
                    pct = f" ({r['pct_of_floor']:.0f}% of {r['floor_ms']:.3f})"
                cells.append(f"{r['ms_per_token']['median']:.3f}{pct}")
        lines.append(f"| {w['label']} | {w['floor']['floor_ms']:.3f} | " + " | ".join(cells) + " |")
    return lines


def markdown(result: dict, figures: dict | None = None, compact: bool = False) -> str:
    """The results as markdown: a summary matrix, then (unless compact) one detailed table per workload and the
    context sweep; figure links last."""
    m = result["meta"]
    bw = result["bandwidth"]
    lines = [f"Measured {m['date']} on {m['device_name']} (commit {m['commit']}, torch {m['torch']}, "
             f"transformers {m['transformers']}, mode {m['mode']}). Batch 1, greedy, "
             f"{result['workloads'][0]['new_tokens'] if result['workloads'] else '-'} new tokens.",
             "",
             f"Read bandwidth measured in the same run: **{_bw(bw['bytes_per_s'])}** ({bw['method']} over "
             f"{bw['bytes'] / 1e9:.2f} GB). Floor = (weight bytes + KV bytes read per token) / that bandwidth; "
             "% of floor = floor / measured.", ""]
    if result["rows"]:  # a run of verify passes alone has none
        lines += ["ms/token, median (% of the floor; FP8 rows: % of their own floor, which the cell names):",
                  ""] + summary_table(result) + [""]
    for w in ([] if compact else result["workloads"]):
        wr = sorted((r for r in result["rows"] if r["workload"] == w["name"]), key=_system_order)
        if not wr:
            continue
        lines += [f"**{w['label']}** ({w['weights']} weights; floor {w['floor']['floor_ms']:.3f} ms/token = "
                  f"{w['floor']['bytes_per_token'] / 1e9:.3f} GB/token)", "",
                  "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(row_cells(r)) + " |" for r in wr]
        lines.append("")
    if result.get("sweep") and not compact:
        systems = [s for s in SYSTEMS if any(p["system"] == s for p in result["sweep"])]
        label = result.get("sweep_model_label", "")
        lines += [f"Context sweep{' (' + label + ')' if label else ''}, ms/token, best of the repetitions:", "",
                  "| context | " + " | ".join(SYSTEMS[s][1] for s in systems) + " | floor |"]
        lines.append("|" + "---|" * (len(systems) + 2))
        for c in sorted({p["context"] for p in result["sweep"]}):
            cells, floor = [], None
            for s in systems:
                p = next((p for p in result["sweep"] if p["system"] == s and p["context"] == c), None)
                cells.append(_f(p["ms_per_token"]) if p and p["status"] == "ok" else (p["status"] if p else "-"))
                floor = floor or (p or {}).get("floor_ms")
            lines.append(f"| {c} | " + " | ".join(cells) + f" | {_f(floor)} |")
        lines.append("")
    if not compact:
        lines += report_speculative.markdown_lines(result)
    if figures:
        for name, path in figures.items():
            lines.append(f"![{name}]({path})")
        lines.append("")
    return "\n".join(lines)


def write(result: dict, out_dir: Path, figures: dict | None = None) -> dict:
    """Writes <base>.json and <base>.md into out_dir; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = base_name(result["meta"])
    jp, mp = out_dir / f"{base}.json", out_dir / f"{base}.md"
    result = dict(result, figures={k: os.path.basename(v) for k, v in (figures or {}).items()})
    jp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    mp.write_text(f"# Benchmark {base}\n\n" + markdown(result, {k: os.path.basename(v) for k, v in
                                                               (figures or {}).items()}))
    return {"json": jp, "markdown": mp}


def update_readme(readme: Path, result: dict, figures: dict, results_md: Path) -> bool:
    """Replaces the block between README_START and README_END (added at the end of the Results section, or of
    the file, when absent) with this run's tables and figure links. Touches nothing else in the README."""
    if not readme.is_file():
        print(f"[bench] {readme} not found; README not updated")
        return False
    text = readme.read_text()
    rel = lambda p: os.path.relpath(p, readme.parent).replace(os.sep, "/")  # noqa: E731
    block = "\n".join([README_START, "",
                       markdown(result, {k: rel(v) for k, v in figures.items()}, compact=True),
                       f"Every row with min/max, tokens/s, peak memory, one-time costs and notes: "
                       f"[{rel(results_md)}]({rel(results_md)}) (JSON beside it).", "",
                       README_END])
    if README_START in text and README_END in text:
        a = text.index(README_START)
        b = text.index(README_END) + len(README_END)
        text = text[:a] + block + text[b:]
    else:
        m = re.search(r"^##\s+Results\b.*$", text, flags=re.M)
        if m:
            nxt = re.search(r"^##\s", text[m.end():], flags=re.M)
            at = m.end() + nxt.start() if nxt else len(text)
            text = text[:at].rstrip("\n") + "\n\n" + block + "\n\n" + text[at:].lstrip("\n")
        else:
            text = text.rstrip("\n") + "\n\n## Results\n\n" + block + "\n"
    readme.write_text(text)
    return True
