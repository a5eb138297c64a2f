"""tiles_ext.patch / tiles_ext.unpatch: put one model instance on the tile op, and take it off again.

Only the instance changes: model.forward and model.generate become methods bound to it (types.MethodType), plus
the copy and pickle hooks __deepcopy__ and __getstate__; one attribute, model._tiles, holds the state. The class,
other instances, the weights and model.generation_config are untouched. unpatch removes exactly what patch added.
"""
from __future__ import annotations

import copy
import inspect
import types

from tiles_ext.fp8 import model as fp8_layers
from tiles_ext.integrations import causal_lm
from tiles_ext.integrations.bindings import Bindings, weight_paths
from tiles_ext.integrations.decoder import TileDecoder
from tiles_ext.integrations.errors import UnsupportedModelError
from tiles_ext.integrations.generate import make_generate
from tiles_ext.integrations.planning import plan_for
from tiles_ext.integrations.state import INSTANCE_BOUND_BOOKKEEPING, PatchState, positional_names
from tiles_ext.integrations.version import cache_field, check_transformers_version

STATE_ATTR = "_tiles"
# patch(weights=...): None serves the model's weights as they are (BF16, or FP8 as loaded); "fp8" quantizes a BF16
# model's linear layers to E4M3 with per-row scales (an FP8 model is served as it is).
WEIGHT_OPTIONS = (None, "fp8")
# Compiled callables of one instance (generate's compiled __call__, nn.Module.compile's): a copy compiles its own.
COMPILED_FOR_INSTANCE = INSTANCE_BOUND_BOOKKEEPING + ("_compiled_call_impl",)


def is_patched(model) -> bool:
    return STATE_ATTR in getattr(model, "__dict__", {})


def patch(model, *, multi_token: bool | None = None, workers: int | None = None, plan_cache_dir=None,
          weights: str | None = None):
    """Run every decode step of `model` (a causal LM of a served family, on one CPU or CUDA device) through
    torch.ops.tiles.decode_step; prefill stays in PyTorch. Returns the same model object.

    multi_token: greedy generate() runs up to 64 tokens per launch (default: on for CUDA, off for CPU).
    workers: plan workers (default: the GPU's SM count; 8 on CPU). plan_cache_dir: where plans are cached
    (default $TILES_CACHE/plans, i.e. ~/.cache/tiles_ext/plans; False: plan in memory only).
    weights: None (the default) runs the weights as they are: BF16, or FP8 layers as Transformers loaded them
    from a fine-grained FP8 checkpoint (128x128 block scales) or as an earlier patch made them. "fp8" quantizes a
    BF16 model's q/k/v/o/gate/up/down layers to E4M3 with one power-of-two scale per output row
    (docs/numerics.md, "FP8 weights"), in place: each becomes a tiles_ext.fp8.Fp8Linear, and the replaced
    nn.Linear modules move to the CPU (the host copy; a GPU model's BF16 layers leave GPU memory) until unpatch
    puts them back on the model's device, so unpatch restores the model exactly. FP8 runs on both executors (on a
    GPU of compute capability 8.9 or newer).
    Raises UnsupportedModelError / planner.UnsupportedConfig / TransformersVersionError naming the problem; a
    refused model is left untouched.

    Weights: the op reads the model's own parameter tensors, so in-place edits reach it as they are made. A tensor
    that stops being the module's (a new Parameter assigned, load_state_dict(..., assign=True), re-tying,
    resize_token_embeddings, model.to(...)) is found before the next decode step (once per generate() call, once
    per eager forward() call outside generate) and re-bound, re-planned where shapes or the device changed, or
    refused with UnsupportedModelError naming the fix (e.g. parameters no longer bfloat16). Under a torch.compile
    of your own, outside generate(), the check runs at the next eager call or generate().

    Copies: copy.deepcopy(model) is a patched model of its own, bound to the copy's weights (the plan is shared,
    the op's scratch and state are not); tiles_ext.unpatch works on it. Pickling (torch.save(model),
    pickle.dumps(model)) and copy.copy(model) give the plain, unpatched model: patch the loaded one again. A
    patched FP8 model pickles with its E4M3 layers (the same bits; their PyTorch forward dequantizes), not the BF16
    host copy. (torch 2.13's pickle.loads cannot rebuild float8 tensors, patched or not; torch.save / torch.load
    can.) save_pretrained and state_dict() hold only the weights, as for any model.
    """
    check_transformers_version()
    if weights not in WEIGHT_OPTIONS:
        raise UnsupportedModelError(
            f"weights={weights!r} is not a weight option; use weights=None (the model's weights as they are) or "
            "weights=\"fp8\" (E4M3 with per-row scales)")
    if is_patched(model):
        return model
    family = causal_lm.family_of(model)
    family.check_window(model.config)
    loaded = fp8_layers.weight_format_of(model, family, family.shape(model.config))
    target = "fp8" if weights == "fp8" and loaded == "bf16" else loaded
    device = causal_lm.check_model(model, loaded, runs=target)
    plan = plan_for(model.config, device, workers, plan_cache_dir, weight_format=target)
    layers = fp8_layers.layer_paths(family, plan.shape)
    originals = fp8_layers.quantize_layers(model, layers) if target != loaded else {}
    try:
        weights_list = family.weights(model, plan.shape)
        causal_lm.check_weights(model, plan, weights_list)
    except Exception:
        fp8_layers.restore_layers(model, originals)
        raise
    decoder = TileDecoder(plan, device)
    decoder.bind(model, weights_list, Bindings(model, weight_paths(family, plan.shape)))
    state = PatchState(family=family, decoder=decoder, cache_field=cache_field(), multi_token_option=multi_token,
                       workers=workers, plan_cache_dir=plan_cache_dir, fp8_originals=originals,
                       fp8_forwards=fp8_layers.dequantizing_forwards(model, layers) if target != "bf16" else [])
    _install(model, state)
    return model


def _install(model, state: PatchState) -> None:
    """The instance attributes of a patched model: its patched methods, copy and pickle hooks, and the state."""
    state.save_instance_attrs(model)
    for name in ("forward", "generate"):
        original = state.original(model, name)
        state.signatures[name] = inspect.signature(original)
        state.positional[name] = positional_names(original)
    # A compiled __call__ made before patching traced the old forward: drop it while patched (restored later).
    for name in INSTANCE_BOUND_BOOKKEEPING:
        model.__dict__.pop(name, None)
    model.__dict__["forward"] = types.MethodType(causal_lm.make_forward(state.signatures["forward"]), model)
    model.__dict__["generate"] = types.MethodType(make_generate(state.signatures["generate"]), model)
    model.__dict__["__deepcopy__"] = types.MethodType(_deepcopy, model)
    model.__dict__["__getstate__"] = types.MethodType(_getstate, model)
    model.__dict__[STATE_ATTR] = state


def unpatch(model):
    """Undo patch(): the model's own forward and generate, no tiles attributes left; after patch(weights="fp8")
    the original BF16 nn.Linear layers (the same modules, untouched) in place of the FP8 ones, so the model is
    exactly what it was. A model that is not patched is returned unchanged."""
    state = model.__dict__.pop(STATE_ATTR, None)
    if state is not None:
        state.restore_instance_attrs(model.__dict__)
        fp8_layers.undo_forwards(state.fp8_forwards)
        fp8_layers.restore_layers(model, state.fp8_originals)
    return model


def patch_state(model) -> PatchState | None:
    return model.__dict__.get(STATE_ATTR)


def _deepcopy(self, memo):
    """copy.deepcopy of a patched model: the default copy of every attribute (the patched methods rebind to the
    copy, PatchState.__deepcopy__ gives it a runtime of its own), then the copy's decoder bound to its weights."""
    cls = type(self)
    clone = cls.__new__(cls)
    memo[id(self)] = clone
    attrs = {k: v for k, v in self.__dict__.items() if k not in COMPILED_FOR_INSTANCE}
    clone.__setstate__(copy.deepcopy(attrs, memo))
    memo.setdefault(id(memo), []).append(attrs)  # as copy does: a memo key must not be freed and its id reused
    try:
        clone.__dict__[STATE_ATTR].rebind(clone)
    except (UnsupportedModelError, AttributeError):
        pass  # the original's weights are no longer servable either: the copy's first decode step says why
    return clone


def _getstate(self):
    """Pickle state of a patched model: that of the plain model (the decode state is bound to this process)."""
    state = type(self).__getstate__(self)
    patch_state(self).restore_instance_attrs(state)
    state.pop(STATE_ATTR, None)
    return state


__all__ = ["patch", "unpatch", "is_patched", "patch_state"]
