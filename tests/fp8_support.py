"""FP8 test models: a BF16 model's layers quantized in either scale layout, and the PyTorch twin that holds the
same dequantized weights (the reference of the FP8 parity tests)."""
from __future__ import annotations

import copy

import torch

from tiles_ext.families import family_for, model_type_of
from tiles_ext.fp8 import Fp8Linear, dequantize, quantize_block128, quantize_per_channel
from tiles_ext.fp8.model import layer_paths

QUANTIZERS = {"fp8": quantize_per_channel, "fp8_block128": quantize_block128}


def quantized_paths(model):
    family = family_for(model_type_of(model.config))
    return layer_paths(family, family.shape(model.config))


def quantized_copy(model16, weight_format: str):
    """A copy of `model16` whose linear layers are Fp8Linear in `weight_format` ("fp8": per-row power-of-two scales,
    as patch(weights="fp8") makes them; "fp8_block128": amax / 448 per 128 x 128 block, as FP8 checkpoints carry)."""
    model = copy.deepcopy(model16)
    for path in quantized_paths(model):
        parent, _, name = path.rpartition(".")
        linear = model.get_submodule(path)
        q, s = QUANTIZERS[weight_format](linear.weight)
        setattr(model.get_submodule(parent), name, Fp8Linear(q, s, linear.bias))
    return model


def dequantized_twin(model_fp8, dtype=torch.float32):
    """The model with every FP8 layer back as an nn.Linear holding float(q) * scale (rounded to `dtype`), eager
    attention: what the op's FP8 arithmetic is compared with."""
    model = copy.deepcopy(model_fp8)
    for path in quantized_paths(model):
        parent, _, name = path.rpartition(".")
        layer = model.get_submodule(path)
        linear = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(dequantize(layer.weight, layer.weight_scale_inv))
            if layer.bias is not None:
                linear.bias.copy_(layer.bias.float())
        setattr(model.get_submodule(parent), name, linear)
    model = model.to(dtype)
    model.config._attn_implementation = "eager"
    return model.eval()
