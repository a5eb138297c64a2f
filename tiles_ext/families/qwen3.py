"""Qwen3 dense (Qwen3ForCausalLM): Qwen3 0.6B-32B.

Llama layers plus a per-head RMSNorm of q and of k (Qwen3Attention's q_norm / k_norm over head_dim, eps
rms_norm_eps) applied to the projections before RoPE: the shape's qk_norm feature, read from the q_norm/k_norm
weights. head_dim comes from the config (Qwen3Config's default is 128), independent of hidden / heads: Qwen3-0.6B
has hidden 1024 and 16 query heads of 128, a q width of 2048. attention_bias (off in every released Qwen3) would put
a bias on o_proj as well, which no tile has: refused.

Sliding window: the rule of Qwen2 (use_sliding_window, sliding_window, max_window_layers / layer_types; qwen2.py).
"""
from __future__ import annotations

from tiles_ext.families.base import (DYNAMIC_ROPE_WHY, HEAD_DIMS, ConfigReader, Family, Slot, decoder_shape,
                                    llama_layout_slots)
from tiles_ext.families.qwen2 import layer_windows

# Qwen3Config's defaults for the fields read here (a config.json may leave them out).
DEFAULTS = {"head_dim": 128, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 32768,
            "attention_bias": False, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28,
            "hidden_act": "silu"}
ROPE_TYPES = ("default", "yarn")


def read_window(config) -> int | None:
    windows = {w for w in layer_windows(config, DEFAULTS) if w is not None}
    return min(windows) if windows else None


def read_shape(config):
    r = ConfigReader(config, DEFAULTS)
    if r.get("attention_bias"):
        r.refuse("attention_bias=True (biases on q, k, v and o; supported: none)")
    return decoder_shape(r, "Qwen3", head_dims=HEAD_DIMS, rope_types=ROPE_TYPES, rope_why=DYNAMIC_ROPE_WHY,
                         qk_norm=True)


_ATTN = "model.layers.{layer}.self_attn."
FAMILY = Family(
    name="qwen3",
    model_types=("qwen3",),
    example="Qwen3ForCausalLM: Qwen3 dense",
    read_shape=read_shape,
    slots=llama_layout_slots(q_norm=Slot(_ATTN + "q_norm.weight"), k_norm=Slot(_ATTN + "k_norm.weight")),
    read_window=read_window,
    # Qwen3Attention fixes its window when the model is built: only a reload turns it off.
    window_off="load it with use_sliding_window=False (AutoModelForCausalLM.from_pretrained(path, "
               "use_sliding_window=False, ...))",
    defaults=DEFAULTS,
)
