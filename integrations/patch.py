"""tiles_ext.patch / tiles_ext.unpatch: put one model instance on the tile op, and take it off again.

Only the instance changes (model.forward and model.generate become instance attributes; one attribute,
model._tiles, holds the state); the class, other instances, the weights and model.generation_config are
untouched. unpatch removes exactly what patch added.
"""
from __future__ import annotations

from . import llama
from .decoder import TileDecoder
from .generate import make_generate
from .planning import plan_for
from .registry import patcher_for
from .state import PatchState
from .version import cache_field, check_transformers_version

STATE_ATTR = "_tiles"


def is_patched(model) -> bool:
    return STATE_ATTR in getattr(model, "__dict__", {})


def patch(model, *, multi_token: bool | None = None, workers: int | None = None, plan_cache_dir=None):
    """Run every decode step of `model` (a bf16 Llama-family causal LM on one CPU or CUDA device) through
    torch.ops.tiles.decode_step; prefill stays in PyTorch. Returns the same model object.

    multi_token: greedy generate() runs up to 64 tokens per launch (default: on for CUDA, off for CPU).
    workers: plan workers (default: the GPU's SM count; 8 on CPU). plan_cache_dir: where plans are cached
    (default $TILES_PLAN_CACHE or ~/.cache/tiles_ext/plans; False: plan in memory only).
    Raises UnsupportedModelError / planner.UnsupportedConfig / TransformersVersionError naming the problem.
    """
    check_transformers_version()
    if is_patched(model):
        return model
    return patcher_for(model)(model, multi_token=multi_token, workers=workers, plan_cache_dir=plan_cache_dir)


def patch_llama(model, *, multi_token=None, workers=None, plan_cache_dir=None):
    device = llama.check_model(model)
    plan = plan_for(model.config, device, workers, plan_cache_dir)
    llama.check_weights(model, plan)
    state = PatchState(decoder=TileDecoder(model, plan, device), cache_field=cache_field(),
                       multi_token=(device.type == "cuda") if multi_token is None else bool(multi_token))
    state.save_instance_attrs(model)
    state.original_forward = model.forward
    state.original_generate = model.generate
    # A compiled __call__ made before patching traced the old forward: drop it while patched (restored later).
    for name in ("_compiled_call", "_last_compile_config"):
        model.__dict__.pop(name, None)
    model.forward = llama.make_forward(model, state)
    model.generate = make_generate(model, state)
    model.__dict__[STATE_ATTR] = state
    return model


def unpatch(model):
    """Undo patch(): the model's own forward and generate, no tiles attributes left. A model that is not
    patched is returned unchanged."""
    state = model.__dict__.pop(STATE_ATTR, None)
    if state is not None:
        state.restore_instance_attrs(model)
    return model


def patch_state(model) -> PatchState | None:
    return model.__dict__.get(STATE_ATTR)


__all__ = ["patch", "unpatch", "is_patched", "patch_state"]
