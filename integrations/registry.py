"""model_type -> patch function. One entry per architecture family the tile op runs."""
from __future__ import annotations

from .errors import UnsupportedModelError


def _patch_llama(model, **options):
    from .patch import patch_llama
    return patch_llama(model, **options)


PATCHERS = {"llama": _patch_llama}


def patcher_for(model):
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in PATCHERS:
        raise UnsupportedModelError(
            f"{type(model).__name__} (model_type {model_type!r}) is not supported; supported model types: "
            f"{', '.join(sorted(PATCHERS))} (e.g. LlamaForCausalLM: Llama 3.x, SmolLM2)")
    return PATCHERS[model_type]
