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


def test_op_writes_the_static_cache_like_transformers():
    """The op's K/V writes land where Transformers puts them (same layer tensors, [1, kv, pos, hd], keys rotated),
    so PyTorch can continue decoding from a cache the op filled."""
    from parity_helpers import Bound, cache_lists, forward, prefill
    cfg = tiny_config(264, 6, 2, 64, 456, 2, llama3=True)
    model = tiny_model(cfg, seed=7)
    plan = build_plan(cfg, workers=7)
    ids = torch.randint(0, cfg.vocab_size, (1, PROMPT + 8), generator=torch.Generator().manual_seed(2))
    hf_cache = prefill(model, ids[:, :PROMPT], 32)
    with torch.no_grad():
        forward(model, ids[:, PROMPT:], hf_cache)
    op_cache = prefill(model, ids[:, :PROMPT], 32)
    bound = Bound.of(model, plan)
    for i in range(8):
        bound.step(op_cache, ids[0, PROMPT + i], PROMPT + i)
    for which, (a_list, b_list) in {"keys": (cache_lists(op_cache)[0], cache_lists(hf_cache)[0]),
                                    "values": (cache_lists(op_cache)[1], cache_lists(hf_cache)[1])}.items():
        for layer, (a, b) in enumerate(zip(a_list, b_list)):
            a, b = a[:, :, PROMPT:PROMPT + 8].float(), b[:, :, PROMPT:PROMPT + 8].float()
            rel = float((a - b).norm() / b.norm())
            assert rel < 0.03, f"layer {layer} {which}: op cache differs from Transformers' by {rel:.4f}"
            assert not a_list[layer][:, :, PROMPT + 8:].any(), "op wrote past its positions"
    # Transformers continues from the op's cache once the layers' position counters are advanced.
    for layer in op_cache.layers:
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length.add_(8)
    with torch.no_grad():
        nxt = torch.tensor([[3]])
        a = forward(model, nxt, op_cache).logits[0, -1].float()
        b = forward(model, nxt, hf_cache).logits[0, -1].float()
    assert float((a - b).norm() / b.norm()) < 0.05


def test_thread_count_does_not_change_bits():
    from parity_helpers import Bound, prefill
    cfg = tiny_config(520, 8, 2, 64, 1024, 1)
    model = tiny_model(cfg, seed=1)
    plan = build_plan(cfg, workers=2)  # big tiles: at::parallel_for splits their rows
    ids = torch.randint(0, cfg.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    threads = torch.get_num_threads()
    out = []
    try:
        for n in (1, max(2, threads)):
            torch.set_num_threads(n)
            cache = prefill(model, ids, 16)
            out.append(Bound.of(model, plan).step(cache, 9, PROMPT, num_steps=3))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
