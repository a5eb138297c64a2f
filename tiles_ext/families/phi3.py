"""Phi-3 (Phi3ForCausalLM): Phi-3-mini/medium 4K, and the 128K, Phi-3.5 and Phi-4-mini configs (refused: below).

Llama layers with two fused projections, read in place as row views of one parameter (no copy):
Phi3Attention.qkv_proj holds q, k, v in that row order (q: num_heads x head_dim rows, then k and v:
num_kv_heads x head_dim each), Phi3MLP.gate_up_proj holds gate then up (`gate, up = x.chunk(2)`; up * silu(gate)).
head_dim is hidden / heads (96 for Phi-3-mini). The residual dropouts are identities in eval.

Refused by name:
- rope_type "longrope" (Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini; "su" and "yarn" are Phi3Config's older names
  for it): Transformers switches between its short and long frequency factors at original_max_position_embeddings.
- partial_rotary_factor < 1 (Phi-4-mini: 0.75): RoPE on the first part of each head only; both executors rotate
  the whole head.

Sliding window: Phi3Config.sliding_window (2047 in Phi-3-mini-4k, with max_position_embeddings 4096) limits every
layer's attention to the last sliding_window positions; Phi-3 reads it from the config at each forward, so setting
it to None turns it off.
"""
from __future__ import annotations

from tiles_ext.families.base import (DYNAMIC_ROPE_WHY, HEAD_DIMS, ConfigReader, Family, Slot, decoder_shape,
                                    llama_layout_slots)

# Phi3Config's defaults for the fields read here (a config.json may leave them out).
DEFAULTS = {"rms_norm_eps": 1e-5, "tie_word_embeddings": False, "max_position_embeddings": 4096,
            "sliding_window": None, "hidden_act": "silu"}
ROPE_TYPES = ("default",)
# Phi3Config reads the rope types "su" and "yarn" as "longrope".
ROPE_WHY = dict(DYNAMIC_ROPE_WHY, su="Phi3Config reads it as 'longrope': " + DYNAMIC_ROPE_WHY["longrope"],
                yarn="Phi3Config reads it as 'longrope': " + DYNAMIC_ROPE_WHY["longrope"])


def partial_rotary_factor(r: ConfigReader) -> float:
    """Transformers 5 keeps it in rope_parameters; a config.json has it at the top level or in rope_scaling."""
    rope, _, _ = r.rope()
    return float(rope.get("partial_rotary_factor") or r.get("partial_rotary_factor") or 1.0)


def read_window(config) -> int | None:
    window = ConfigReader(config, DEFAULTS).get("sliding_window")
    return None if window is None else int(window)


def read_shape(config):
    r = ConfigReader(config, DEFAULTS)
    factor = partial_rotary_factor(r)
    if factor != 1.0:
        r.refuse(f"partial_rotary_factor {factor} (RoPE on the first {factor:g} of each head; both executors rotate "
                 "the whole head; supported: 1.0)")
    return decoder_shape(r, "Phi-3", head_dims=HEAD_DIMS, rope_types=ROPE_TYPES, rope_why=ROPE_WHY)


_LAYER = "model.layers.{layer}."
_QKV = _LAYER + "self_attn.qkv_proj.weight"
_GATE_UP = _LAYER + "mlp.gate_up_proj.weight"
FAMILY = Family(
    name="phi3",
    model_types=("phi3",),
    example="Phi3ForCausalLM: Phi-3-mini/medium 4K",
    read_shape=read_shape,
    slots=llama_layout_slots(
        q=Slot(_QKV, rows=lambda s: (0, s.q_dim)),
        k=Slot(_QKV, rows=lambda s: (s.q_dim, s.q_dim + s.kv_dim)),
        v=Slot(_QKV, rows=lambda s: (s.q_dim + s.kv_dim, s.q_dim + 2 * s.kv_dim)),
        gate=Slot(_GATE_UP, rows=lambda s: (0, s.intermediate)),
        up=Slot(_GATE_UP, rows=lambda s: (s.intermediate, 2 * s.intermediate)),
    ),
    read_window=read_window,
    window_off="set model.config.sliding_window = None",
    defaults=DEFAULTS,
)
