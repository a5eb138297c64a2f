"""Mistral (MistralForCausalLM): Mistral 7B v0.1-v0.3, Mistral-Nemo-style configs (head_dim 128 at hidden 5120).

Llama layers without biases (MistralAttention and MistralMLP take no bias flag); head_dim from the config, else
hidden / heads.

Sliding window: MistralConfig.sliding_window (default 4096 when a config.json leaves it out; null in v0.3, 4096 in
v0.1) limits every layer's attention to the last sliding_window positions; Mistral reads it from the config at each
forward, so setting it to None turns it off.
"""
from __future__ import annotations

from tiles_ext.families.base import DYNAMIC_ROPE_WHY, HEAD_DIMS, ConfigReader, Family, decoder_shape, llama_layout_slots

# MistralConfig's defaults for the fields read here (a config.json may leave them out).
DEFAULTS = {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 4096 * 32,
            "sliding_window": 4096, "hidden_act": "silu"}
ROPE_TYPES = ("default",)


def read_window(config) -> int | None:
    window = ConfigReader(config, DEFAULTS).get("sliding_window")
    return None if window is None else int(window)


def read_shape(config):
    r = ConfigReader(config, DEFAULTS)
    return decoder_shape(r, "Mistral", head_dims=HEAD_DIMS, rope_types=ROPE_TYPES, rope_why=DYNAMIC_ROPE_WHY)


FAMILY = Family(
    name="mistral",
    model_types=("mistral",),
    example="MistralForCausalLM: Mistral 7B",
    read_shape=read_shape,
    slots=llama_layout_slots(),
    read_window=read_window,
    window_off="set model.config.sliding_window = None",
    defaults=DEFAULTS,
)
