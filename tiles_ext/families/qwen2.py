"""Qwen2 (Qwen2ForCausalLM): Qwen2 and Qwen2.5 0.5B-72B, DeepSeek-R1-Distill-Qwen.

Llama layers plus a bias on the q, k and v projections (Qwen2Attention builds them with bias=True whatever the
config says; o_proj and the MLP have none): the shape's qkv_bias feature, read from the q_proj/k_proj/v_proj bias
parameters. The LM head is tied (Qwen2.5-0.5B) or untied (7B) by tie_word_embeddings.

Sliding window: Qwen2Config keeps sliding_window only with use_sliding_window (else None), and then layers
max_window_layers and up are "sliding_attention" layers (config.layer_types) whose attention Transformers limits
to the last sliding_window positions. Released Qwen2/2.5 checkpoints set use_sliding_window false.
"""
from __future__ import annotations

from tiles_ext.families.base import (DYNAMIC_ROPE_WHY, HEAD_DIMS, ConfigReader, Family, Slot, decoder_shape,
                                    llama_layout_slots)

# Qwen2Config's defaults for the fields read here (a config.json may leave them out).
DEFAULTS = {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 32768,
            "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28, "hidden_act": "silu"}
# Static RoPE types: Transformers computes their inv_freq and attention scaling once (the op's RoPE table);
# "yarn" is what Qwen's model cards add for contexts past 32K.
ROPE_TYPES = ("default", "yarn")


def layer_windows(config, defaults) -> list[int | None]:
    """Per layer, the sliding window Transformers applies (Qwen2Config.__post_init__ and Qwen2Attention), or
    None for a full-attention layer. Qwen3Config has the same rule."""
    r = ConfigReader(config, defaults)
    window = r.get("sliding_window") if r.get("use_sliding_window") else None
    layers = r.need_int("num_hidden_layers")
    types = r.get("layer_types")
    if types is None:
        first = int(r.get("max_window_layers"))
        types = ["sliding_attention" if window is not None and i >= first else "full_attention"
                 for i in range(layers)]
    return [int(window) if t == "sliding_attention" and window is not None else None for t in types]


def read_window(config) -> int | None:
    windows = {w for w in layer_windows(config, DEFAULTS) if w is not None}
    return min(windows) if windows else None


def read_shape(config):
    r = ConfigReader(config, DEFAULTS)
    return decoder_shape(r, "Qwen2", head_dims=HEAD_DIMS, rope_types=ROPE_TYPES, rope_why=DYNAMIC_ROPE_WHY,
                         qkv_bias=True)


_ATTN = "model.layers.{layer}.self_attn."
FAMILY = Family(
    name="qwen2",
    model_types=("qwen2",),
    example="Qwen2ForCausalLM: Qwen2, Qwen2.5, DeepSeek-R1-Distill-Qwen",
    read_shape=read_shape,
    slots=llama_layout_slots(q_bias=Slot(_ATTN + "q_proj.bias"), k_bias=Slot(_ATTN + "k_proj.bias"),
                             v_bias=Slot(_ATTN + "v_proj.bias")),
    read_window=read_window,
    # Qwen2Attention fixes its window when the model is built: only a reload turns it off.
    window_off="load it with use_sliding_window=False (AutoModelForCausalLM.from_pretrained(path, "
               "use_sliding_window=False, ...))",
    defaults=DEFAULTS,
)
