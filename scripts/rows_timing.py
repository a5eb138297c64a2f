"""Times a pass of R rows (the CUDA rows kernel, csrc/cuda/decode_rows.cuh) against a one-row pass, on random-weight
models of the shipped configs (seed 0), from a random KV cache of PROMPT positions.

For each MODEL[:PROMPT] and R in ROWS: the op alone, back-to-back launches at the same position (a pass writes its
K/V rows at PROMPT .. PROMPT + R - 1 and reads the cache below PROMPT), REPS repetitions of LAUNCHES launches after a
warm-up, median ms per launch. Prints per model the one-row pass, each R-row pass, its ms per row and its speed-up
over R one-row passes (R x t1 / tR), and checks once per R that the R-row pass gives the bits of R one-row passes
(logits). Writes OUTDIR/rows_timing.json when OUTDIR is given.

Usage: python scripts/rows_timing.py [--rows 2,4,8] [--out OUTDIR] MODEL[:PROMPT] ...   (a CUDA device)
  e.g. python scripts/rows_timing.py llama-3.2-1b llama-3.1-8b llama-3.2-1b:4096
"""
import argparse
import json
import os
import statistics

import torch

from tiles_ext.integrations.planning import plan_for
from tiles_ext.models import random_model
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

LAUNCHES, REPS = 20, 5


def kv_cache(config, max_len, device):
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    g = torch.Generator(device=device).manual_seed(1)
    shape = (1, config.num_key_value_heads, max_len, hd)
    layers = range(config.num_hidden_layers)
    k = [torch.randn(shape, device=device, generator=g).to(torch.bfloat16) for _ in layers]
    v = [torch.randn(shape, device=device, generator=g).to(torch.bfloat16) for _ in layers]
    return k, v


def time_ms(fn):
    """Median over REPS of the mean ms of LAUNCHES back-to-back calls (CUDA events, no host sync between)."""
    fn()
    torch.cuda.synchronize()
    reps = []
    for _ in range(REPS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(LAUNCHES):
            fn()
        e1.record()
        torch.cuda.synchronize()
        reps.append(e0.elapsed_time(e1) / LAUNCHES)
    return statistics.median(reps)


def measure(spec, rows_list, device):
    model_name, _, prompt = spec.partition(":")
    prompt = int(prompt or 32)
    model = random_model(model_name, device=device, seed=0)
    rt = TileRuntime(plan_for(model.config, device, None, cache_dir=False), device)
    w = model_weights(model)
    inv, scale = rope_tables(model)
    inv = inv.to(device)
    k, v = kv_cache(model.config, prompt + max(rows_list) + 8, device)
    pos = torch.tensor([prompt], device=device)
    ids = torch.randint(0, model.config.vocab_size, (max(rows_list),), device=device,
                        generator=torch.Generator(device=device).manual_seed(2))

    def launch(n, at=pos):
        return rt.step(w, k, v, ids[:n], at, inv, scale, 1, [])

    out = {"model": model_name, "prompt": prompt, "handoff": rt.handoff, "max_rows": rt.max_rows,
           "one_row_ms": time_ms(lambda: launch(1))}
    rt.check_error()
    for r in rows_list:
        logits, _ = launch(r)
        ones = torch.cat([launch(1, torch.tensor([prompt + i], device=device))[0] for i in range(r)])
        bits = torch.equal(logits.view(torch.int32), ones.view(torch.int32))
        ms = time_ms(lambda: launch(r))
        rt.check_error()
        out[f"rows_{r}"] = {"ms": ms, "ms_per_row": ms / r, "speedup_vs_one_row_passes": r * out["one_row_ms"] / ms,
                            "bits_equal_one_row_passes": bool(bits)}
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
            print(f"  {n} rows: {x['ms']:.3f} ms/pass, {x['ms_per_row']:.3f} ms/row, "
                  f"{x['speedup_vs_one_row_passes']:.2f}x over {n} one-row passes, "
                  f"bits {'equal' if x['bits_equal_one_row_passes'] else 'DIFFER'}")
        torch.cuda.empty_cache()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "rows_timing.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
