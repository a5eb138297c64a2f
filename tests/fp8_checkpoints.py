"""Small FP8 checkpoints of both scale layouts, written the way the published ones are laid out."""
from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from fp8_support import quantized_copy

QUANT_CONFIGS = {
    # Transformers' fine-grained FP8 (FineGrainedFP8Config): weight_scale_inv per 128 x 128 block
    "fp8_block128": {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic",
                     "modules_to_not_convert": None},
    # Transformers' FBGEMM FP8 (FbgemmFp8Config): weight_scale [rows, 1]
    "fp8": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"]},
}


def write_fp8_checkpoint(model16, weight_format: str, path: Path):
    """Quantizes `model16` (a copy) and writes config.json + model.safetensors; returns the quantized model."""
    model = quantized_copy(model16, weight_format)
    state = {}
    for key, t in model.state_dict().items():
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if weight_format == "fp8" and key.endswith(".weight_scale_inv"):
            key, t = key.removesuffix("_inv"), t.view(-1, 1)
        state[key] = t.contiguous()
    path.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["quantization_config"] = QUANT_CONFIGS[weight_format]
    (path / "config.json").write_text(json.dumps(config))
    return model
