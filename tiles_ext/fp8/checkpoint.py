"""FP8 checkpoints loaded as stored, on any device, in the two scale layouts the executors serve:

- block128: Transformers' fine-grained FP8 (config.json's quantization_config: quant_method "fp8",
  weight_block_size [128, 128]; the official Qwen3-*-FP8 releases): Transformers' own FP8Linear layers holding the
  stored E4M3 weights and `weight_scale_inv` [ceil(rows/128), ceil(cols/128)].
- per_channel: Transformers' FBGEMM FP8 (quant_method "fbgemm_fp8"; Meta's Llama-3.1-405B-Instruct-FP8): E4M3
  weights with `weight_scale` [rows, 1], as tiles_ext Fp8Linear layers (their scales a view of the stored ones).

Why not from_pretrained alone: on a machine without a GPU, Transformers (5.25) dequantizes a fine-grained FP8
checkpoint to BF16 nn.Linear layers while loading (its FP8 matmul kernels need a GPU), and refuses FBGEMM FP8
(fbgemm-gpu is CUDA-only), so the FP8 bytes never reach the model. This builds the model as from_pretrained does on
a GPU (the FP8 layers in place of nn.Linear, the stored tensors assigned without conversion), and patch() serves
it as it is. Activations are not quantized (docs/numerics.md, "FP8 weights").
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from tiles_ext.planner.format import SCALE_BLOCK


class Fp8CheckpointError(ValueError):
    """A checkpoint whose FP8 layout the executors do not serve, or whose tensors do not fill the model."""


FP8_METHODS = ("fp8", "fbgemm_fp8")


def fp8_quantization(path: Path) -> dict | None:
    """The checkpoint's quantization_config where it is one of FP8_METHODS, else None."""
    config = json.loads((path / "config.json").read_text())
    q = config.get("quantization_config") or {}
    return q if q.get("quant_method") in FP8_METHODS else None


def load_fp8_model(path: Path, device="cpu"):
    q = fp8_quantization(path)
    model = _load_per_channel(path) if q["quant_method"] == "fbgemm_fp8" else _load_block128(path, q)
    model.config.quantization_config = q
    return model.to(device).eval()


def _bf16_model(path: Path):
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    del config.quantization_config  # from_config would quantize again; the layers are replaced here
    return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def _load_per_channel(path: Path):
    """Every `<layer>.weight_scale` [rows, 1] with its E4M3 `<layer>.weight` becomes an Fp8Linear."""
    from tiles_ext.fp8.linear import Fp8Linear
    model = _bf16_model(path)
    state = _read_tensors(path)
    placed = set()
    for key in [k for k in state if k.endswith(".weight_scale")]:
        layer = key.removesuffix(".weight_scale")
        weight, scale = state.pop(layer + ".weight"), state.pop(key)
        if weight.dtype != torch.float8_e4m3fn or scale.shape != (weight.shape[0], 1):
            raise Fp8CheckpointError(f"{layer}: an FBGEMM FP8 layer is an E4M3 weight with a [rows, 1] weight_scale, "
                                     f"got {weight.dtype} {tuple(weight.shape)} and {tuple(scale.shape)}")
        parent, _, name = layer.rpartition(".")
        bias = state.pop(layer + ".bias", None)
        model.get_submodule(parent).register_module(name, Fp8Linear(weight, scale.view(-1), bias))
        placed |= {layer + ".weight", layer + ".weight_scale_inv", layer + ".bias"}
    _assign(model, state, placed)
    return model


def _load_block128(path: Path, q: dict):
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear
    block = tuple(q.get("weight_block_size") or ())
    if block != (SCALE_BLOCK, SCALE_BLOCK):
        raise Fp8CheckpointError(
            f"{str(path)!r} is an FP8 checkpoint with weight_block_size {list(block) or None}; the served layout is "
            f"[{SCALE_BLOCK}, {SCALE_BLOCK}] block scales (or quantize the BF16 model with patch(weights=\"fp8\"))")
    model = _bf16_model(path)
    fp8 = FineGrainedFP8Config(weight_block_size=block, activation_scheme=q.get("activation_scheme", "dynamic"),
                               modules_to_not_convert=q.get("modules_to_not_convert"))
    head = next(name for name, m in model.named_modules() if m is model.get_output_embeddings())
    replace_with_fp8_linear(model, modules_to_not_convert=[head] + list(fp8.modules_to_not_convert or []),
                            quantization_config=fp8, pre_quantized=True)
    _assign(model, _read_tensors(path))
    return model


def _read_tensors(path: Path) -> dict:
    from safetensors.torch import load_file
    state = {}
    for file in sorted(path.glob("*.safetensors")):
        state.update(load_file(file))
    return state


def _assign(model, state: dict, placed=frozenset()) -> None:
    """The stored tensors as the model's parameters, dtypes as stored (E4M3, fp32 scales, BF16 for the rest);
    `placed`: parameters already set from the checkpoint."""
    tied = model.config.tie_word_embeddings
    if tied:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if k not in placed and not (tied and k == "lm_head.weight")]
    if missing or unexpected:
        raise Fp8CheckpointError(f"the checkpoint's tensors do not match the model: missing {missing[:4]}, "
                                 f"unexpected {unexpected[:4]}; the checkpoint is not one model's FP8 state")
    if tied:
        model.tie_weights()
