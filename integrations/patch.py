"""tiles_ext.patch / tiles_ext.unpatch: put one model instance on the tile op, and take it off again.

Only the instance changes (model.forward and model.generate become instance attributes; one attribute,
model._tiles, holds the state); the class, other instances, the weights and model.generation_config are
untouched. unpatch removes exactly what patch added.
"""
from __future__ import annotations

from tiles_ext.integrations import causal_lm
from tiles_ext.integrations.decoder import TileDecoder
from tiles_ext.integrations.generate import make_generate
from tiles_ext.integrations.planning import plan_for
from tiles_ext.integrations.state import PatchState
from tiles_ext.integrations.version import cache_field, check_transformers_version

STATE_ATTR = "_tiles"


def is_patched(model) -> bool:
    return STATE_ATTR in getattr(model, "__dict__", {})


def patch(model, *, multi_token: bool | None = None, workers: int | None = None, plan_cache_dir=None):
    """Run every decode step of `model` (a bf16 causal LM of a served family, on one CPU or CUDA device) through
    torch.ops.tiles.decode_step; prefill stays in PyTorch. Returns the same model object.

    multi_token: greedy generate() runs up to 64 tokens per launch (default: on for CUDA, off for CPU).
    workers: plan workers (default: the GPU's SM count; 8 on CPU). plan_cache_dir: where plans are cached
    (default $TILES_CACHE/plans, i.e. ~/.cache/tiles_ext/plans; False: plan in memory only).
    Raises UnsupportedModelError / planner.UnsupportedConfig / TransformersVersionError naming the problem; a
    refused model is left untouched.
    """
    check_transformers_version()
    if is_patched(model):
        return model
    family = causal_lm.family_of(model)
    family.check_window(model.config)
    device = causal_lm.check_model(model)
    plan = plan_for(model.config, device, workers, plan_cache_dir)
    weights = family.weights(model, plan.shape)
    causal_lm.check_weights(model, plan, weights)
    state = PatchState(decoder=TileDecoder(model, plan, device, weights), cache_field=cache_field(),
                       multi_token=(device.type == "cuda") if multi_token is None else bool(multi_token))
    state.save_instance_attrs(model)
    state.original_forward = model.forward
    state.original_generate = model.generate
    # A compiled __call__ made before patching traced the old forward: drop it while patched (restored later).
    for name in ("_compiled_call", "_last_compile_config"):
        model.__dict__.pop(name, None)
    model.forward = causal_lm.make_forward(model, state)
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
