"""ModelShape: the part of a decoder config the planner and the executors depend on.

A model family (tiles_ext.families) reads a Transformers config into a ModelShape, refusing what the executors cannot
run; the planner only ever sees the shape.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from tiles_ext.planner.format import QUANTIZED_SLOTS, WEIGHT_FORMATS, ScaleLayout, matrix_bytes, slot_shape


class UnsupportedConfig(ValueError):
    """A config the planner cannot serve; the message names the field and what is supported."""


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
    # The layer recipe's numeric features (tile fields the executors read; planner/format.py):
    qkv_bias: bool = False      # q, k and v projections add a bias vector
    qk_norm: bool = False       # q and k get a per-head RMSNorm before RoPE
    # How the QUANTIZED_SLOTS matrices are stored: a planner/format.py WEIGHT_FORMATS name ("bf16", "fp8",
    # "fp8_block128"). The FP8 formats add a scale slot per matrix to every layer.
    weight_format: str = "bf16"

    def __post_init__(self):
        if self.weight_format not in WEIGHT_FORMATS:
            raise UnsupportedConfig(f"weight format {self.weight_format!r} is not served; the formats are "
                                    f"{', '.join(map(repr, WEIGHT_FORMATS))}")

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA ratio)."""
        return self.num_heads // self.num_kv_heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (num_heads x head_dim; differs from hidden in e.g. Qwen3-0.6B)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def to_json(self) -> str:
        # Features left at their default are not written, so that a new feature leaves existing shapes' hashes
        # (and the plan files keyed by them) unchanged.
        d = asdict(self)
        for name, value in (("qkv_bias", False), ("qk_norm", False), ("weight_format", "bf16")):
            if d[name] == value:
                del d[name]
        return json.dumps(d, sort_keys=True)

    def config_hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @property
    def scale_layout(self) -> ScaleLayout:
        return WEIGHT_FORMATS[self.weight_format][1]

    def weight_bytes(self) -> int:
        """Bytes of weights read per decode token (embedding row not counted): the matrices in their format (FP8:
        1 byte per element plus the scales), everything else BF16."""
        h = self.hidden
        matrices = sum(matrix_bytes(self.scale_layout, 0, rows, cols)
                       for rows, cols in (slot_shape(s, self) for s in QUANTIZED_SLOTS))
        vectors = 2 * h
        if self.qkv_bias:
            vectors += self.q_dim + 2 * self.kv_dim
        if self.qk_norm:
            vectors += 2 * self.head_dim
        return self.num_layers * (matrices + vectors * 2) + (self.vocab * h + h) * 2
