"""The row record: one system measured on one workload, and the systems that can appear in a table."""
from __future__ import annotations

import traceback

from .timing import summarize

# key -> (label, short label for figures). Order here is the order of tables and bars.
SYSTEMS = {
    "tiles-generate": ("Tiles, model.generate() on a patched model", "Tiles generate"),
    "tiles-op-multi": ("Tiles op alone, multi-token launches", "Tiles op xN"),
    "tiles-op-single": ("Tiles op alone, 1 token per launch", "Tiles op x1"),
    "tiles-generate-sample": ("Tiles, model.generate() with sampling on a patched model", "Tiles sample"),
    "graph-step": ("compiled decode step replayed as a CUDA graph", "CUDA graph step"),
    "hf-static-compile": ("Transformers generate, static cache + torch.compile reduce-overhead", "HF compile"),
    "hf-compile-sample": ("Transformers generate with sampling, static cache + torch.compile reduce-overhead",
                          "HF compile sample"),
    "hf-eager": ("Transformers generate, eager (default cache)", "HF eager"),
    # % of floor of the FP8 rows: the FP8 floor (E4M3 layers + their scales, BF16 embedding / LM head / KV).
    "tiles-generate-fp8": ("Tiles, model.generate() on a model patched with weights=\"fp8\" (% of the FP8 floor)",
                           "Tiles FP8"),
    "tiles-op-fp8": ("Tiles op alone, FP8 weights, multi-token launches (% of the FP8 floor)", "Tiles op FP8"),
    "llama.cpp": ("llama.cpp (CUDA, llama-bench)", "llama.cpp"),
}


def new_row(system: str, workload) -> dict:
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}")
    return {"system": system, "label": SYSTEMS[system][0], "workload": workload.name,
            "model": workload.model, "weights": workload.weights, "prompt_len": workload.prompt_len, "new_tokens": workload.new_tokens,
            "status": "pending", "reason": None, "ms_per_token": None, "tokens_per_s": None,
            "pct_of_floor": None, "peak_gpu_mem_gib": None, "one_time_s": {}, "notes": []}


def finish(row: dict, ms_per_token: list[float], floor_ms: float | None) -> dict:
    """Fills the statistics of an ok row from per-repetition ms/token."""
    s = summarize(ms_per_token)
    row["ms_per_token"] = s
    row["tokens_per_s"] = 1e3 / s["median"]
    row["pct_of_floor"] = 100.0 * floor_ms / s["median"] if floor_ms else None
    row["status"] = "ok"
    return row


def skip(row: dict, reason: str) -> dict:
    row["status"] = "skipped"
    row["reason"] = reason
    return row


def fail(row: dict, exc: BaseException) -> dict:
    row["status"] = "failed"
    msg = f"{type(exc).__name__}: {exc}".strip()
    row["reason"] = msg if len(msg) <= 400 else msg[:400] + " ..."
    row["traceback"] = traceback.format_exc(limit=8)
    return row


def run_guarded(row: dict, fn, *args, **kwargs) -> dict:
    """fn(row, ...) fills the row; any exception marks it failed (with the reason) instead of ending the run."""
    try:
        fn(row, *args, **kwargs)
        if row["status"] == "pending":
            raise RuntimeError("row function returned without a result")
    except Exception as e:  # a failed system is a result to report, not the end of the benchmark
        fail(row, e)
        print(f"[bench] {row['system']} on {row['workload']} failed: {row['reason']}", flush=True)
    return row
