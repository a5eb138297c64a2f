"""Fp8Linear: a linear layer whose weight is E4M3 with fp32 scales, what patch(weights="fp8") puts in
place of each quantized nn.Linear.

Its forward (prefill, and every call that runs in PyTorch) multiplies by the dequantized weight in the input's dtype:
with the quantizer's power-of-two scales that BF16 weight is exactly float(q) * scale, the value the tile op
computes with, so prefill and decode see the same weights.
"""
from __future__ import annotations

import torch
from torch import nn

from tiles_ext.fp8.quantize import dequantize


class Fp8Linear(nn.Module):
    """weight: E4M3 [out, in]; weight_scale_inv: fp32 [out] or [ceil(out/128), ceil(in/128)]; bias: as the layer
    it replaces had (BF16), or None."""

    def __init__(self, weight: torch.Tensor, weight_scale_inv: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.weight_scale_inv = nn.Parameter(weight_scale_inv, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dequantized_linear(self, x)

    def extra_repr(self) -> str:
        layout = "per_channel" if self.weight_scale_inv.dim() == 1 else "block128"
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3, scales {layout}"


def dequantized_linear(layer, x: torch.Tensor) -> torch.Tensor:
    """x times the layer's dequantized weight (in x's dtype), plus its bias: an FP8 layer's forward in PyTorch
    (Fp8Linear's, and that of Transformers' FP8Linear on a CPU, whose own kernels need a GPU)."""
    w = dequantize(layer.weight, layer.weight_scale_inv).to(x.dtype)
    return nn.functional.linear(x, w, None if layer.bias is None else layer.bias.to(x.dtype))
