"""E4M3 quantization of BF16 matrices and its inverse (docs/numerics.md, "FP8 weights").

Scales are stored as Transformers' FP8 layers store them (`weight_scale_inv`, fp32): the factor each stored value is
multiplied by, one per output row (`[rows]`) or one per 128 x 128 block (`[ceil(rows/128), ceil(cols/128)]`).
"""
from __future__ import annotations

import torch

from tiles_ext.planner.format import FP8_E4M3_MAX, SCALE_BLOCK

E4M3 = torch.float8_e4m3fn


def quantize_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, s) with w ~ float(q) * s[:, None]. s is a power of two per row (2^ceil(log2(amax / 448)), 1 for a zero
    row), so that dequantization is exact in fp32 and in BF16 alike, and |w / s| <= 448 never saturates."""
    w = w.detach().float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax / FP8_E4M3_MAX))), torch.ones_like(amax))
    return (w / s[:, None]).to(E4M3), s.contiguous()


def quantize_block128(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, s) with w ~ float(q) * s[r // 128, k // 128], s = amax / 448 per block (the rule of Transformers'
    fine-grained FP8 quantizer: any fp32 value, as FP8 checkpoints carry)."""
    w = w.detach().float()
    rows, cols = w.shape
    br, bc = -(-rows // SCALE_BLOCK), -(-cols // SCALE_BLOCK)
    padded = torch.zeros(br * SCALE_BLOCK, bc * SCALE_BLOCK, device=w.device)
    padded[:rows, :cols] = w
    blocks = padded.view(br, SCALE_BLOCK, bc, SCALE_BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    s = torch.where(amax > 0, amax / FP8_E4M3_MAX, torch.ones_like(amax))
    q = (blocks / s[:, None, :, None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(E4M3)
    return q.view(br * SCALE_BLOCK, bc * SCALE_BLOCK)[:rows, :cols].contiguous(), s.contiguous()


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """fp32 float(q) * scale, the executors' value of every element; the layout follows from s (1-D: per row,
    2-D: per 128 x 128 block)."""
    w = q.float()
    if s.dim() == 1:
        return w * s[:, None]
    rows, cols = w.shape
    full = s.repeat_interleave(SCALE_BLOCK, 0).repeat_interleave(SCALE_BLOCK, 1)
    return w * full[:rows, :cols]
