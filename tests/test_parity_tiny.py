"""Op vs Transformers on tiny random Llama configs, teacher-forced over 64 decode steps, calibrated for BF16.

The matrix covers non-power-of-two hidden sizes, GQA ratios 1/3/4/8, head_dim 64 and 128, tied and untied LM
heads, Llama-3 RoPE scaling, 1-4 layers, and plans for 1, 7 and 132 workers (132: most attention partitions
are empty at these context lengths, so the LSE merge sees empty partials).
"""
import pytest
import torch

from parity_helpers import assert_parity, parity_report, teacher_forced, tiny_config, tiny_model
from tiles_ext.planner import build_plan

STEPS = 64
PROMPT = 6

# (hidden, heads, kv, head_dim, intermediate, layers, tied, llama3, workers)
MATRIX = [
    (360, 6, 6, 64, 712, 1, False, False, 7),     # GQA 1 (MHA)
    (264, 6, 2, 64, 456, 2, True, True, 132),     # GQA 3, tied, llama3
    (392, 8, 2, 128, 1000, 3, False, True, 7),    # GQA 4, head_dim 128
    (520, 8, 1, 64, 840, 4, True, False, 13),     # GQA 8, 4 layers
    (200, 2, 2, 128, 328, 2, False, False, 1),    # head_dim 128, GQA 1, single worker
    (328, 8, 1, 128, 600, 1, False, True, 132),   # GQA 8, head_dim 128, llama3
]


def _id(p):
    h, nh, kv, hd, i, l, tied, l3, w = p
    return f"h{h}-q{nh}-kv{kv}-hd{hd}-L{l}-{'tied' if tied else 'untied'}-{'llama3' if l3 else 'rope'}-W{w}"


@pytest.mark.parametrize("params", MATRIX, ids=[_id(p) for p in MATRIX])
def test_teacher_forced_parity(params):
    h, nh, kv, hd, inter, layers, tied, llama3, workers = params
    cfg = tiny_config(h, nh, kv, hd, inter, layers, tied=tied, llama3=llama3)
    model = tiny_model(cfg, seed=layers)
    plan = build_plan(cfg, workers=workers)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (PROMPT + STEPS,), generator=g)
    r = teacher_forced(model, plan, ids, PROMPT)
    rep = parity_report(r)
    print(f"{_id(params)}: " + ", ".join(f"{k} {v:.4f}" for k, v in rep.items()))
    assert_parity(rep, _id(params))
