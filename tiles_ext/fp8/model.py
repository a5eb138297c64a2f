"""The FP8 side of patch(): which weight format a model's linear layers are in, quantizing a BF16 model's layers
in place, and putting them back.

The layers are the modules of the family's QUANTIZED_SLOTS (q/k/v/o/gate/up/down projections; a fused module such
as Phi-3's qkv_proj once). A model is in one format throughout: BF16 nn.Linear layers ("bf16"), or E4M3 layers with
a `weight_scale_inv` of one scale per row ("fp8") or per 128 x 128 block ("fp8_block128"), whether tiles_ext's
Fp8Linear or Transformers' FP8Linear (a model loaded from a fine-grained FP8 checkpoint).
"""
from __future__ import annotations

import functools

import torch

from tiles_ext.families.base import SCALE_PARAM
from tiles_ext.fp8.linear import Fp8Linear, dequantized_linear
from tiles_ext.integrations.errors import UnsupportedModelError
from tiles_ext.fp8.quantize import E4M3, quantize_per_channel
from tiles_ext.planner.format import QUANTIZED_SLOTS, SCALE_BLOCK


class WeightFormatError(UnsupportedModelError):
    """A model whose linear layers are in no served weight format (the message names the layers and the fix)."""


def layer_paths(family, shape) -> list[str]:
    """The module path of every quantized layer, each once, in layer order."""
    paths = []
    for layer in range(shape.num_layers):
        for slot in QUANTIZED_SLOTS:
            path = family.slot(slot).path.format(layer=layer).removesuffix(".weight")
            if path not in paths:
                paths.append(path)
    return paths


def layer_format(module) -> str:
    """The weight format of one layer, or a description of what it is when none."""
    weight = getattr(module, "weight", None)
    if weight is None:
        return f"{type(module).__name__} without a weight"
    if weight.dtype != E4M3 and hasattr(module, SCALE_PARAM):
        return (f"{str(weight.dtype).removeprefix('torch.')} weights beside {SCALE_PARAM} (an FP8 layer whose weight "
                "was cast, e.g. by model.to(dtype))")
    if weight.dtype == torch.bfloat16:
        return "bf16"
    if weight.dtype != E4M3:
        return f"{weight.dtype} weights"
    scale = getattr(module, SCALE_PARAM, None)
    if scale is None or scale.dtype != torch.float32:
        return f"E4M3 weights without fp32 {SCALE_PARAM}"
    rows, cols = weight.shape
    if scale.dim() == 1 and scale.shape[0] == rows:
        return "fp8"
    blocks = (-(-rows // SCALE_BLOCK), -(-cols // SCALE_BLOCK))
    if scale.dim() == 2 and tuple(scale.shape) == blocks and tuple(getattr(module, "block_size", None) or
                                                                    (SCALE_BLOCK, SCALE_BLOCK)) == (SCALE_BLOCK,) * 2:
        return "fp8_block128"
    return (f"E4M3 weights with {SCALE_PARAM} of shape {tuple(scale.shape)} (block_size "
            f"{getattr(module, 'block_size', None)}): served scales are one per row or per {SCALE_BLOCK}x{SCALE_BLOCK} "
            "block")


def weight_format_of(model, family, shape) -> str:
    """The model's weight format: "bf16" where no layer is E4M3 (check_model judges the dtypes then), else the one
    FP8 format of every layer; WeightFormatError naming the layers where they are not all in one served format."""
    found: dict[str, list[str]] = {}
    for path in layer_paths(family, shape):
        try:
            module = model.get_submodule(path)
        except AttributeError:
            return "bf16"  # not the family's module tree: check_model names what the model lacks
        # A layer with scales but no E4M3 weight (an Fp8Linear after model.to(dtype)) is no servable layer either.
        e4m3 = getattr(getattr(module, "weight", None), "dtype", None) == E4M3 or hasattr(module, SCALE_PARAM)
        found.setdefault(layer_format(module) if e4m3 else "not FP8", []).append(path)
    if list(found) == ["not FP8"]:
        return "bf16"
    if len(found) == 1 and next(iter(found)) in ("fp8", "fp8_block128"):
        return next(iter(found))
    parts = "; ".join(f"{what}: {len(paths)} layers (e.g. {paths[0]})" for what, paths in found.items())
    raise WeightFormatError(
        f"{type(model).__name__} is partly or unservably quantized ({parts}). tiles_ext.patch serves a model whose "
        "q/k/v/o/gate/up/down layers are all BF16, all FP8 with per-row scales or all FP8 with "
        f"{SCALE_BLOCK}x{SCALE_BLOCK} block scales: load it again unquantized (patch(model, weights=\"fp8\") "
        "quantizes it) or from one FP8 checkpoint")


def quantize_layers(model, paths) -> dict:
    """Puts an Fp8Linear (per-row scales) in place of each BF16 nn.Linear at `paths`; returns the replaced modules
    by path, moved to the CPU (the host copy restore_layers puts back, bit for bit): a GPU model's BF16 layers leave
    its memory, one layer at a time."""
    originals = {}
    for path in paths:
        parent, name = _parent(model, path)
        linear = getattr(parent, name)
        device = linear.weight.device
        q, s = quantize_per_channel(linear.weight)
        setattr(parent, name, Fp8Linear(q.to(device), s.to(device), linear.bias))
        originals[path] = linear.to("cpu")
    return originals


def restore_layers(model, originals: dict) -> None:
    """Puts the host copies back, on the device of the layers they replace."""
    for path, module in originals.items():
        parent, name = _parent(model, path)
        setattr(parent, name, module.to(getattr(parent, name).weight.device))


def dequantizing_forwards(model, paths) -> list:
    """Gives each Transformers FP8Linear at `paths` a forward that multiplies by its dequantized weight (its own
    needs a GPU kernel), so that prefill runs on a CPU; returns the modules changed, for undo_forwards. The forward
    is a functools.partial of a module-level function, so a pickled or deep-copied model carries it as data (a
    bound method would pickle as a lookup of an attribute the layer does not have)."""
    changed = []
    for path in paths:
        module = model.get_submodule(path)
        if isinstance(module, Fp8Linear) or "forward" in module.__dict__:
            continue
        module.__dict__["forward"] = functools.partial(dequantized_linear, module)
        changed.append(module)
    return changed


def undo_forwards(modules) -> None:
    for module in modules:
        module.__dict__.pop("forward", None)


def _parent(model, path: str):
    parent, _, name = path.rpartition(".")
    return model.get_submodule(parent), name
