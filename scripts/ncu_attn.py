"""One decode launch of the op under Nsight Compute (scripts/ncu_attn.sh; perf log, session 24). Runs the op `--warm`
times at position --ctx (random weights, the default plan of this GPU), then once more: scripts/ncu_attn.sh profiles
that last launch only.
Usage (under ncu): python scripts/ncu_attn.py [--model llama-3.2-1b] [--ctx 16000] [--warm 3]"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_check import default_op  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="llama-3.2-1b")
ap.add_argument("--ctx", type=int, default=16000)
ap.add_argument("--warm", type=int, default=3)
a = ap.parse_args()
op = default_op(a.model, a.ctx + 64)
for _ in range(a.warm + 1):
    op.pos.fill_(a.ctx)  # every launch decodes at the same position (its appended row is rewritten alike)
    op(1)
torch.cuda.synchronize()
print(f"ncu_attn: {a.warm + 1} launches of {a.model} at position {a.ctx}")
