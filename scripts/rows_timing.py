"""Times a pass of R rows (the CUDA rows kernel, csrc/cuda/decode_rows.cuh) against a one-row pass, on random-weight
models of the shipped configs (seed 0), from a random KV cache of PROMPT positions: tiles_ext.bench.verify_passes
(which the benchmark's `--speculative` run uses too) as a command line.

For each MODEL[:PROMPT] and R in ROWS: the op alone, back-to-back launches at the same position, median ms per
launch. Prints per model the one-row pass, each R-row pass, its ms per row and its speed-up over R one-row passes
(R x t1 / tR), and compares once per R the R-row pass's logits with R one-row passes (row i against a one-row pass
of token i at position PROMPT + i): bits equal, and the relative error. Writes OUTDIR/rows_timing.json when OUTDIR is given.

Usage: python scripts/rows_timing.py [--rows 2,4,8] [--out OUTDIR] MODEL[:PROMPT] ...   (a CUDA device)
  e.g. python scripts/rows_timing.py llama-3.2-1b llama-3.1-8b llama-3.2-1b:4096
"""
import argparse
import json
import os

import torch

from tiles_ext.bench.verify_passes import pass_rows
from tiles_ext.models import random_model


def measure(spec, rows_list, device):
    model_name, _, prompt = spec.partition(":")
    prompt = int(prompt or 32)
    model = random_model(model_name, device=device, seed=0)
    recs = pass_rows(model, model_name, prompt, device, rows=[1] + rows_list)
    one = recs[0]["ms_per_pass"]["median"]
    out = {"model": model_name, "prompt": prompt, "handoff": recs[0]["handoff"], "max_rows": recs[0]["max_rows"],
           "one_row_ms": one}
    for rec in recs[1:]:
        if rec["status"] != "ok":
            out[f"rows_{rec['rows']}"] = {"skipped": rec["reason"]}
            continue
        ms = rec["ms_per_pass"]["median"]
        out[f"rows_{rec['rows']}"] = {"ms": ms, "ratio_to_one_row_pass": ms / one, "ms_per_row": ms / rec["rows"],
                                      "speedup_vs_one_row_passes": rec["rows"] * one / ms,
                                      "bits_equal_one_row_passes": rec["bits_equal_one_row_passes"],
                                      "rel_err_vs_one_row_passes": rec["rel_err_vs_one_row_passes"]}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="2,4,8")
    ap.add_argument("--out", default=None)
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()
    rows_list = [int(x) for x in a.rows.split(",")]
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(device)}")
    results = []
    for spec in a.specs:
        r = measure(spec, rows_list, device)
        results.append(r)
        print(f"{r['model']} prompt {r['prompt']} ({r['handoff']}): 1 row {r['one_row_ms']:.3f} ms/pass")
        for n in rows_list:
            x = r[f"rows_{n}"]
            if "skipped" in x:
                print(f"  {n} rows: skipped, {x['skipped']}")
                continue
            print(f"  {n} rows: {x['ms']:.3f} ms/pass ({x['ratio_to_one_row_pass']:.2f}x a one-row pass), "
                  f"{x['ms_per_row']:.3f} ms/row, {x['speedup_vs_one_row_passes']:.2f}x over {n} one-row passes, "
                  f"bits {'equal' if x['bits_equal_one_row_passes'] else 'differ'}, "
                  f"rel. error {x['rel_err_vs_one_row_passes']:.1e}")
        torch.cuda.empty_cache()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "rows_timing.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
