"""ModelShape: the part of a Llama-family config the planner and executors depend on."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass


class UnsupportedConfig(ValueError):
    """A config the planner cannot serve; the message names the field and what is supported."""


SUPPORTED_MODEL_TYPES = ("llama",)
SUPPORTED_ROPE_TYPES = ("default", "llama3")
SUPPORTED_HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    eps: float
    tied_lm_head: bool
    rope_type: str
    rope_theta: float

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA ratio)."""
        return self.num_heads // self.num_kv_heads

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def config_hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def weight_bytes(self) -> int:
        """BF16 bytes of weights read per decode token (embedding row not counted)."""
        h, q, kv, i = self.hidden, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, self.intermediate
        layer = (q * h + 2 * kv * h + h * q + 3 * i * h + 2 * h) * 2
        return self.num_layers * layer + (self.vocab * h + h) * 2

    @classmethod
    def from_config(cls, config) -> "ModelShape":
        """From a transformers config object or a config.json dict."""
        get = (lambda k, d=None: config.get(k, d)) if isinstance(config, dict) else (
            lambda k, d=None: getattr(config, k, d))
        model_type = get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedConfig(
                f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        hidden = int(get("hidden_size"))
        heads = int(get("num_attention_heads"))
        kv = int(get("num_key_value_heads") or heads)
        head_dim = int(get("head_dim") or hidden // heads)
        rope = get("rope_parameters") or get("rope_scaling") or {}
        if not isinstance(rope, dict):
            rope = dict(rope)
        rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
        theta = rope.get("rope_theta", get("rope_theta", 10000.0))
        act = get("hidden_act", "silu")
        problems = []
        if heads % kv:
            problems.append(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
        if head_dim not in SUPPORTED_HEAD_DIMS:
            problems.append(f"head_dim {head_dim} (supported: {SUPPORTED_HEAD_DIMS})")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            problems.append(f"rope_type {rope_type!r} (supported: {SUPPORTED_ROPE_TYPES})")
        if act != "silu":
            problems.append(f"hidden_act {act!r} (supported: 'silu')")
        if get("attention_bias", False) or get("mlp_bias", False):
            problems.append("attention_bias/mlp_bias (supported: no biases)")
        if hidden % 8 or int(get("intermediate_size")) % 8:
            problems.append(f"hidden_size {hidden} and intermediate_size must be multiples of 8 "
                            "(16-byte weight rows)")
        if (get("pretraining_tp", 1) or 1) != 1:
            problems.append("pretraining_tp != 1")
        if problems:
            raise UnsupportedConfig("unsupported Llama config: " + "; ".join(problems))
        return cls(
            num_layers=int(get("num_hidden_layers")),
            hidden=hidden,
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=head_dim,
            intermediate=int(get("intermediate_size")),
            vocab=int(get("vocab_size")),
            eps=float(get("rms_norm_eps", 1e-6)),
            tied_lm_head=bool(get("tie_word_embeddings", False)),
            rope_type=str(rope_type),
            rope_theta=float(theta),
        )
