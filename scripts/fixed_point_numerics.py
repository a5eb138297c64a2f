"""Numerics of the fused MLP stage's fixed-point split-K down projection (docs/design/fused-mlp.md), on CPU.

On the embedded SmolLM2-135M-Instruct (real weights), per layer: the down projection's output for the last position
of a 48-token random prompt, computed as one fp32 dot per row, against 132 column slices (one per worker), each
an fp32 partial rounded to int64 at 2^-32 and summed as integers (what the fused stage's atomics would hold), and
against the same slices summed in fp32 (for scale). Run: .venv/bin/python scripts/fixed_point_numerics.py
"""
import torch

from tiles_ext.models import load_default_model
torch.manual_seed(0)
model = load_default_model()[0]
tok_ids = torch.randint(0, model.config.vocab_size, (1, 48))
caught = []
for layer in model.model.layers:
    layer.mlp.down_proj.register_forward_hook(lambda m, i, o: caught.append((m.weight, i[0][0, -1].float())))
with torch.no_grad():
    model(tok_ids)
W = 132
worst_abs = worst_rel = 0.0
maxmag = 0.0
for w, h in caught:
    wf = w.float()
    ref = wf @ h                                    # fp32, one dot per row (today's order differs; same precision class)
    n = h.numel()
    bounds = [(i * n) // W for i in range(W + 1)]
    acc = torch.zeros(wf.shape[0], dtype=torch.int64)
    alt = torch.zeros_like(ref)  # for scale: the same slices summed in fp32 (another summation order)
    for a, b in zip(bounds[:-1], bounds[1:]):
        p = wf[:, a:b] @ h[a:b]                      # one worker's fp32 partial
        acc += torch.round(p.double() * 2.0**32).to(torch.int64)
        alt += p
    fx = (acc.double() * 2.0**-32).float()
    worst_abs = max(worst_abs, float((fx - ref).abs().max()))
    worst_rel = max(worst_rel, float(((fx - ref).abs() / ref.abs().clamp_min(1e-3)).max()))
    maxmag = max(maxmag, float(ref.abs().max()))
    print(f"|y| max {float(ref.abs().max()):9.3f}  fixed-point vs fp32: max abs {float((fx - ref).abs().max()):.2e}; "
          f"fp32 in slices vs fp32: max abs {float((alt - ref).abs().max()):.2e}")
print(f"layers {len(caught)}: worst abs {worst_abs:.2e}, worst rel (|y| >= 1e-3) {worst_rel:.2e}, max |y| {maxmag:.1f}")
