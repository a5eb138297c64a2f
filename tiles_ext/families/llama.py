"""Llama (LlamaForCausalLM): Llama 2 / 3.x, SmolLM2 and every config of model_type "llama"."""
from __future__ import annotations

from tiles_ext.families.base import ConfigReader, Family, decoder_shape, llama_layout_slots


def read_shape(config):
    r = ConfigReader(config)
    # LlamaAttention and LlamaMLP take one flag for all four attention (q, k, v, o) and all three MLP projections.
    if r.get("attention_bias", False) or r.get("mlp_bias", False):
        r.refuse("attention_bias/mlp_bias (supported: no biases)")
    if (r.get("pretraining_tp", 1) or 1) != 1:
        r.refuse("pretraining_tp != 1")
    return decoder_shape(r, "Llama", head_dims=(64, 128), rope_types=("default", "llama3"))


FAMILY = Family(
    name="llama",
    model_types=("llama",),
    example="LlamaForCausalLM: Llama 3.x, SmolLM2",
    read_shape=read_shape,
    slots=llama_layout_slots(),
)
