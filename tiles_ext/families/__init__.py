"""Model families: the one table from a Transformers config's model_type to the family that serves it.

    family_for("llama").shape(config)      # -> planner ModelShape
    shape_of(config)                       # the same, dispatching on config.model_type
"""
from __future__ import annotations

from tiles_ext.families.base import Family, Slot
from tiles_ext.families.llama import FAMILY as LLAMA
from tiles_ext.families.mistral import FAMILY as MISTRAL
from tiles_ext.families.phi3 import FAMILY as PHI3
from tiles_ext.families.qwen2 import FAMILY as QWEN2
from tiles_ext.families.qwen3 import FAMILY as QWEN3
from tiles_ext.planner.shape import UnsupportedConfig

FAMILIES: tuple[Family, ...] = (LLAMA, QWEN2, QWEN3, MISTRAL, PHI3)
BY_MODEL_TYPE = {t: f for f in FAMILIES for t in f.model_types}
SERVED_MODEL_TYPES = tuple(sorted(BY_MODEL_TYPE))


def served() -> str:
    """The served model types with an example class each, as refusals print them."""
    return "; ".join(f"{', '.join(f.model_types)} ({f.example})" for f in FAMILIES)


def model_type_of(config):
    return config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)


def family_for(model_type) -> Family:
    """The family serving `model_type`; UnsupportedConfig listing the served ones otherwise."""
    family = BY_MODEL_TYPE.get(model_type)
    if family is None:
        raise UnsupportedConfig(f"model_type {model_type!r} is not supported; supported model types: {served()}")
    return family


def shape_of(config):
    """The planner's ModelShape of a Transformers config object or a config.json dict."""
    return family_for(model_type_of(config)).shape(config)


__all__ = ["Family", "Slot", "FAMILIES", "SERVED_MODEL_TYPES", "family_for", "shape_of", "served", "model_type_of"]
