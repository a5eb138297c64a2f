"""TILES_LEAN_OPT experiment (scripts/lean_ab.sh): runs the op for 16 steps on fixed random inputs and saves, or
compares against, the logits and tokens; the lean build must give the normal build's bits.
Usage: python scripts/lean_check.py save|compare FILE [POS] (POS: the first step's position, default 40; past 2048
every attention tile holds a whole chunk, so all 16 warps' states enter the combine)"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_check import default_op  # noqa: E402

mode, path = sys.argv[1], sys.argv[2]
pos = int(sys.argv[3]) if len(sys.argv) > 3 else 40
out = {}
for name in ("smollm2-135m", "llama-3.2-1b"):
    op = default_op(name, max(512, pos + 64))  # its KV cache is random (seeded)
    op.pos.fill_(pos)
    logits, tokens = op(16)
    out[name] = (logits.cpu(), tokens.cpu())
if mode == "save":
    torch.save(out, path)
    print("saved", path)
else:
    ref = torch.load(path)
    for name, (l, t) in out.items():
        same = torch.equal(l.view(torch.int32), ref[name][0].view(torch.int32)) and torch.equal(t, ref[name][1])
        print(name, "BIT-IDENTICAL" if same else "DIFFERENT", float((l - ref[name][0]).abs().max()))
