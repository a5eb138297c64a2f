#!/usr/bin/env python3
"""Smallest call of tiles::decode_step on a tiny random Llama: `op_smoke.py cpu|cuda|both`. Prints the tokens and
the logits' checksum, or the error. For a first look on a new machine or build (and under a debugger)."""
import sys

import torch
from transformers import LlamaConfig

import tiles_ext  # noqa: F401
from tiles_ext.errors import check_state
from tiles_ext.models import random_model
from tiles_ext.planner.plan import GpuTarget, build_plan
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables


def run(device):
    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                      intermediate_size=512, num_hidden_layers=2, vocab_size=512, max_position_embeddings=256)
    model = random_model(cfg, device=device, seed=0)
    plan = build_plan(cfg, workers=8, gpu=GpuTarget.of_device(device))
    rt = TileRuntime(plan, device)
    inv, scale = rope_tables(model)
    g = torch.Generator().manual_seed(0)
    k = [torch.randn(1, 2, 64, 64, generator=g).to(device, torch.bfloat16) for _ in range(2)]
    v = [torch.randn(1, 2, 64, 64, generator=g).to(device, torch.bfloat16) for _ in range(2)]
    ids, pos = torch.tensor([3], device=device), torch.tensor([40], device=device)
    print(f"[{device}] calling the op", flush=True)
    logits, tokens = rt.step(model_weights(model), k, v, ids, pos, inv.to(device), scale, 4, [])
    if device == "cuda":
        torch.cuda.synchronize()
    check_state(rt.state, plan)
    print(f"[{device}] tokens {tokens.tolist()} logits sum {float(logits.double().sum()):.6f}", flush=True)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    for d in (["cpu", "cuda"] if which == "both" else [which]):
        run(d)
