"""Bit identity and op timing of one tiles_ext build, for comparing two builds (scripts/ab_builds.sh).

Runs, for each MODEL:PROMPT, the op alone on a random-weight model (the shipped config, seed 0) from fixed inputs:
one 64-token launch whose logits and tokens are saved (OUT/NAME.pt, for bit identity between builds), then
128 tokens in two launches of 64, 7 timed repetitions after a warm-up (OUT/NAME.json: ms/token). Only APIs that
every build since plan format 3 has are used, so an older checkout runs it too.

Usage: python scripts/op_timing.py NAME OUTDIR MODEL[:PROMPT] ...   (a CUDA device; PROMPT default 32)
"""
import json
import sys

import torch

from tiles_ext.integrations.planning import plan_for
from tiles_ext.models import random_model
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

STEPS, REPS = 64, 7


def kv_cache(config, max_len, device):
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    g = torch.Generator(device=device).manual_seed(1)
    shape = (1, config.num_key_value_heads, max_len, hd)
    layers = range(config.num_hidden_layers)
    k = [torch.randn(shape, device=device, generator=g).to(torch.bfloat16) for _ in layers]
    v = [torch.randn(shape, device=device, generator=g).to(torch.bfloat16) for _ in layers]
    return k, v


def measure(spec, device):
    model_name, _, prompt = spec.partition(":")
    prompt = int(prompt or 32)
    model = random_model(model_name, device=device, seed=0)
    rt = TileRuntime(plan_for(model.config, device, None, cache_dir=False), device)
    w = model_weights(model)
    inv, scale = rope_tables(model)
    inv = inv.to(device)
    k, v = kv_cache(model.config, prompt + 2 * STEPS + 8, device)

    def launch(token, pos):
        return rt.step(w, k, v, torch.tensor([token], device=device), torch.tensor([pos], device=device), inv,
                       scale, STEPS, [])

    logits, tokens = launch(17, prompt)
    torch.cuda.synchronize()
    rt.check_error()
    dump = {"logits": logits[:8].cpu(), "tokens": tokens.cpu(), "handoff": rt.handoff}

    def run():
        _, t = launch(17, prompt)
        launch(int(t[-1]), prompt + STEPS)

    run()
    ms = []
    for _ in range(REPS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        torch.cuda.synchronize()
        ms.append(e0.elapsed_time(e1) / (2 * STEPS))
    rt.check_error()
    ms.sort()
    return dump, {"ms_per_token": ms, "median": ms[REPS // 2], "handoff": rt.handoff}


def main():
    name, outdir, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    device = torch.device("cuda")
    dumps, results = {}, {}
    for spec in specs:
        dumps[spec], results[spec] = measure(spec, device)
        r = results[spec]
        print(f"[{name}] {spec}: median {r['median']:.4f} ms/token (min {r['ms_per_token'][0]:.4f}, max "
              f"{r['ms_per_token'][-1]:.4f}), handoff {r['handoff']}", flush=True)
        torch.cuda.empty_cache()
    torch.save(dumps, f"{outdir}/{name}.pt")
    with open(f"{outdir}/{name}.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
