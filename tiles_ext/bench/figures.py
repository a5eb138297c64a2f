"""PNG figures: ms/token bars per system and workload (with each workload's floor), and ms/token against
context length for Tiles and the best baseline."""
from __future__ import annotations

from pathlib import Path

from .rows import SYSTEMS


def _plt():
    import matplotlib
    matplotlib.use("Agg")  # headless: CI and the GPU machine have no display
    import matplotlib.pyplot as plt
    return plt


def _color(plt, system: str):
    """One colour per system, the same in every figure and every run."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return colors[list(SYSTEMS).index(system) % len(colors)]


def bars(result: dict, path: Path) -> Path | None:
    ok = [r for r in result["rows"] if r["status"] == "ok"]
    if not ok:
        return None
    plt = _plt()
    workloads = [w for w in result["workloads"] if any(r["workload"] == w["name"] for r in ok)]
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in ok)]
    width = 0.8 / max(1, len(systems))
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(workloads) + 2), 4.2))
    for i, s in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for j, w in enumerate(workloads):
            r = next((r for r in ok if r["system"] == s and r["workload"] == w["name"]), None)
            if r:
                m = r["ms_per_token"]
                xs.append(j + (i - (len(systems) - 1) / 2) * width)
                ys.append(m["median"])
                lo.append(m["median"] - m["min"])
                hi.append(m["max"] - m["median"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=SYSTEMS[s][1], color=_color(plt, s))
    for j, w in enumerate(workloads):
        f = w["floor"]["floor_ms"]
        ax.hlines(f, j - 0.45, j + 0.45, colors="k", linestyles="--", linewidth=1,
                  label="memory floor" if j == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([w["label"].replace(", ", "\n") for w in workloads])
    ax.set_ylabel("ms per token (log scale; lower is better)")
    m = result["meta"]
    ax.set_title(f"Batch-1 decode, {m['device_name']} ({m['commit']})", fontsize=10)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def context_sweep(result: dict, path: Path) -> Path | None:
    pts = [p for p in result.get("sweep") or [] if p["status"] == "ok"]
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for s in [s for s in SYSTEMS if any(p["system"] == s for p in pts)]:
        ps = sorted((p for p in pts if p["system"] == s), key=lambda p: p["context"])
        ax.plot([p["context"] for p in ps], [p["ms_per_token"] for p in ps], "o-", label=SYSTEMS[s][1],
                color=_color(plt, s))
    fl = sorted({(p["context"], p["floor_ms"]) for p in pts})
    ax.plot([c for c, _ in fl], [f for _, f in fl], "k--", label="memory floor")
    ax.set_xscale("log", base=2)
    ticks = sorted({p["context"] for p in pts})
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{c // 1024}K" if c >= 1024 and c % 1024 == 0 else str(c) for c in ticks])
    ax.minorticks_off()
    ax.set_xlabel("context length (cached positions)")
    ax.set_ylabel("ms per token")
    ax.set_ylim(bottom=0)
    m = result["meta"]
    ax.set_title(f"{result.get('sweep_model_label', '')} decode vs context, {m['device_name']}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_all(result: dict, out_dir: Path, base: str) -> dict:
    out = {}
    p = bars(result, out_dir / f"{base}-bars.png")
    if p:
        out["ms/token per system and workload"] = p
    p = context_sweep(result, out_dir / f"{base}-context.png")
    if p:
        out["ms/token against context length"] = p
    return out
