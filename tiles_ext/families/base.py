"""What a model family declares, and the config reading every family shares.

A family is one file (tiles_ext/families/<name>.py) holding one `Family`: the Transformers model types it serves,
how a config of theirs becomes a ModelShape (and what it refuses, by name), and where each weight slot of the plan
(planner/weights.py) lives in the module tree. The planner sees only the shape; the integration binds the op's
weights list through `Family.weights`. Adding a family is one file plus its tests, and an executor change only
where the family brings a numeric feature the shape does not have yet.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tiles_ext.planner.format import SCALE_BLOCK, SCALE_SLOTS, ScaleLayout
from tiles_ext.planner.shape import ModelShape, UnsupportedConfig
from tiles_ext.planner.weights import WeightLayout

# The parameter beside an FP8 matrix's `weight` that holds its scales (Transformers' FP8Linear name: the factor each
# stored value is multiplied by, per row or per 128 x 128 block); tiles_ext's own FP8 linear uses it too.
SCALE_PARAM = "weight_scale_inv"

# RMSNorm eps when a config gives none (Transformers' Llama default).
DEFAULT_EPS = 1e-6
# The head_dims a family may accept: those both executors run and the parity tests cover (the CUDA kernel has its
# attention kernels for planner/format.py's ATTN_WARPS_HEAD_DIMS, which tests/test_install.py checks hold these).
HEAD_DIMS = (64, 96, 128)
# Why the RoPE types whose frequencies change during a generation are refused (the executors take one inv_freq
# table and scale per model); the static types (default, linear, llama3, yarn) are folded into that table.
DYNAMIC_ROPE_WHY = {
    "dynamic": "Transformers recomputes its frequencies once a sequence outgrows max_position_embeddings; the tile op "
               "keeps one RoPE table",
    "longrope": "Transformers switches from the short to the long frequency factors once a sequence passes "
                "original_max_position_embeddings, and recomputes the cache there; the tile op keeps one RoPE table",
}
# The MLP activations the executors implement (the GATEUP tile computes silu(g) * u, planner/format.py): the same
# for every family, so a config with another one has no family to serve it.
MLP_ACTIVATIONS = ("silu",)


@dataclass(frozen=True)
class Slot:
    """Where a weight slot lives: a parameter path below the causal LM ("model.layers.{layer}.self_attn.q_proj.weight"),
    and for a fused parameter the row range of the slot ((begin, end) from the shape), read in place as a view."""
    path: str
    rows: Callable[[ModelShape], tuple[int, int]] | None = None


def no_window(config) -> None:
    """read_window of a family whose attention always covers the whole cache."""
    return None


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    example: str                                   # e.g. "LlamaForCausalLM: Llama 3.x, SmolLM2"
    read_shape: Callable[[object], ModelShape]     # config -> shape; raises UnsupportedConfig naming the field
    slots: dict = field(default_factory=dict)      # slot name -> Slot
    # config -> the sliding window (in positions) Transformers applies to some layer's attention, None where every
    # layer attends to the whole cache; window_off says how a user turns it off (completes "... before patching").
    read_window: Callable[[object], int | None] = no_window
    window_off: str = ""
    # The family's Transformers config class defaults for fields a config.json may leave out (ConfigReader).
    defaults: dict = field(default_factory=dict)

    def shape(self, config) -> ModelShape:
        return self.read_shape(config)

    def sliding_window(self, config) -> int | None:
        return self.read_window(config)

    def check_window(self, config) -> None:
        """Refuses (UnsupportedConfig) a config whose sequences can outgrow its sliding window. Transformers then
        attends each token to the last `window` positions only, the tile op to every cached position; within the
        window the two agree (Transformers' mask keeps kv > q - window). The rule is max_position_embeddings against
        the window, decided at patch time; the shape (and so the plan) does not depend on it."""
        window = self.sliding_window(config)
        if window is None:
            return
        longest = ConfigReader(config, self.defaults).get("max_position_embeddings")
        if longest is not None and int(longest) <= window:
            return
        raise UnsupportedConfig(
            f"unsupported {self.name} config: sliding_window {window} with max_position_embeddings {longest} "
            f"(Transformers attends each token to the last {window} positions only, the tile op to every cached "
            f"position, so a sequence longer than {window} would be decoded differently). Run the model "
            f"unpatched, or, if no sequence (prompt plus new tokens) exceeds {window} positions, where the window "
            f"changes nothing, {self.window_off} before tiles_ext.patch")

    def weights(self, model, shape: ModelShape) -> list:
        """The op's weights list for `model`: its own parameter tensors (detached; row views of fused ones), in
        the plan's order. No copy of any weight is made."""
        out = []
        for slot, layer in WeightLayout(shape).entries:
            out.append(self.tensor(model, shape, slot, layer))
        return out

    def slot(self, slot: str) -> Slot | None:
        """Where a slot lives: as declared, and a scale slot beside its matrix (SCALE_PARAM of the same module)."""
        if slot not in SCALE_SLOTS or slot in self.slots:
            return self.slots.get(slot)
        matrix = self.slots.get(SCALE_SLOTS[slot])
        if matrix is None:
            return None
        path = matrix.path.removesuffix(".weight") + "." + SCALE_PARAM
        if matrix.rows is None:
            return Slot(path)
        return Slot(path, rows=lambda shape: scale_rows(shape, matrix.rows(shape), slot))

    def tensor(self, model, shape: ModelShape, slot: str, layer: int):
        where = self.slot(slot)
        if where is None:
            raise UnsupportedConfig(f"the {self.name} family declares no location for weight slot {slot!r}")
        param = model.get_parameter(where.path.format(layer=layer))
        t = param.detach()
        if where.rows is not None:
            begin, end = where.rows(shape)
            t = t[begin:end]
        return t

    def parameter(self, model, slot: str, layer: int):
        """The module parameter a slot is read from (the fused parameter itself for a row view)."""
        return model.get_parameter(self.slot(slot).path.format(layer=layer))


def scale_rows(shape: ModelShape, rows: tuple[int, int], slot: str) -> tuple[int, int]:
    """The rows of a fused parameter's scales that belong to the matrix rows [begin, end) of a slot."""
    begin, end = rows
    if shape.scale_layout != ScaleLayout.BLOCK128:
        return begin, end
    if begin % SCALE_BLOCK:
        raise UnsupportedConfig(f"{slot}: the matrix starts at row {begin} of its fused parameter, inside a "
                                f"{SCALE_BLOCK}x{SCALE_BLOCK} scale block; block scales serve fused matrices that "
                                f"start at a multiple of {SCALE_BLOCK} rows (use per-channel scales)")
    return begin // SCALE_BLOCK, -(-end // SCALE_BLOCK)


class ConfigReader:
    """Reads a Transformers config object or a config.json dict, and collects what a family refuses.

    `defaults`: the family's Transformers config class defaults for fields a config.json may leave out (a config
    object always has them); a field present as null reads as None either way."""

    def __init__(self, config, defaults=None):
        self.config = config
        self.defaults = defaults or {}
        self.problems: list[str] = []

    def get(self, key, default=None):
        c = self.config
        fallback = self.defaults.get(key, default)
        value = c.get(key, fallback) if isinstance(c, dict) else getattr(c, key, fallback)
        return default if value is None else value

    def need_int(self, key) -> int:
        value = self.get(key)
        if value is None:
            raise UnsupportedConfig(f"config has no {key!r} (an integer every decoder config gives)")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise UnsupportedConfig(f"config field {key!r} = {value!r} is not an integer") from None

    def refuse(self, problem: str) -> None:
        self.problems.append(problem)

    def rope(self) -> tuple[dict, str, float]:
        """(parameters, rope_type, rope_theta): Transformers 5 keeps them in rope_parameters, 4.x in rope_scaling
        and rope_theta."""
        rope = self.get("rope_parameters") or self.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            rope = dict(rope)
        rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
        theta = rope.get("rope_theta", self.get("rope_theta", 10000.0))
        return rope, str(rope_type), float(theta)


def decoder_shape(r: ConfigReader, family: str, *, head_dims, rope_types, qkv_bias=False, qk_norm=False,
                  tied_default=False, rope_why=None) -> ModelShape:
    """The shape of a Llama-layout decoder (RMSNorm, GQA attention with RoPE, SiLU-gated MLP), after the checks
    every such family needs; family-specific refusals are added to r.problems before the call. rope_why: why the
    family refuses a rope_type, by name, for the refusal message."""
    hidden = r.need_int("hidden_size")
    heads = r.need_int("num_attention_heads")
    kv = int(r.get("num_key_value_heads") or heads)
    head_dim = int(r.get("head_dim") or hidden // heads)
    intermediate = r.need_int("intermediate_size")
    _, rope_type, theta = r.rope()
    if heads % kv:
        r.refuse(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    if head_dim not in head_dims:
        r.refuse(f"head_dim {head_dim} (supported: {', '.join(map(str, head_dims))})")
    if rope_type not in rope_types:
        why = (rope_why or {}).get(rope_type)
        r.refuse(f"rope_type {rope_type!r} ({why + '; ' if why else ''}supported: {', '.join(rope_types)})")
    act = r.get("hidden_act", "silu")
    if act not in MLP_ACTIVATIONS:
        r.refuse(f"hidden_act {act!r} (supported: {', '.join(map(repr, MLP_ACTIVATIONS))}: the tile executors' MLP "
                 f"is SiLU-gated, so no model family serves {act!r})")
    if hidden % 8 or intermediate % 8:
        r.refuse(f"hidden_size {hidden} and intermediate_size {intermediate} must be multiples of 8 "
                 "(16-byte weight rows)")
    if r.problems:
        raise UnsupportedConfig(f"unsupported {family} config: " + "; ".join(r.problems))
    return ModelShape(
        num_layers=r.need_int("num_hidden_layers"), hidden=hidden, num_heads=heads, num_kv_heads=kv,
        head_dim=head_dim, intermediate=intermediate, vocab=r.need_int("vocab_size"),
        eps=float(r.get("rms_norm_eps", DEFAULT_EPS)), tied_lm_head=bool(r.get("tie_word_embeddings", tied_default)),
        rope_type=rope_type, rope_theta=theta, qkv_bias=qkv_bias, qk_norm=qk_norm)


def llama_layout_slots(**overrides) -> dict:
    """Slot locations of the Llama module tree (model.layers[i].self_attn.q_proj, .mlp.gate_proj, ...)."""
    layer = "model.layers.{layer}."
    slots = {
        "input_norm": Slot(layer + "input_layernorm.weight"),
        "q": Slot(layer + "self_attn.q_proj.weight"),
        "k": Slot(layer + "self_attn.k_proj.weight"),
        "v": Slot(layer + "self_attn.v_proj.weight"),
        "o": Slot(layer + "self_attn.o_proj.weight"),
        "post_norm": Slot(layer + "post_attention_layernorm.weight"),
        "gate": Slot(layer + "mlp.gate_proj.weight"),
        "up": Slot(layer + "mlp.up_proj.weight"),
        "down": Slot(layer + "mlp.down_proj.weight"),
        "final_norm": Slot("model.norm.weight"),
        "lm_head": Slot("lm_head.weight"),
        "embed": Slot("model.embed_tokens.weight"),
    }
    slots.update(overrides)
    return slots
