"""The patched model.generate: picks the path for each call, then defers to Transformers' own generate.

- tile path: decode steps run through the op, one token per step (the patched forward). A call without a cache
  gets cache_implementation="static" (generate then builds a StaticCache sized max_length - 1, the storage that
  prefill and the op share); a user's StaticCache is used as given.
- fast path (multi_token): greedy calls additionally hand generate a decoding loop that runs up to 64 tokens per
  launch (fast_greedy.FastGreedy).
- PyTorch path: what the op cannot serve (batch > 1, beams, assisted decoding, extra outputs, padding, other
  cache types) runs the unpatched way, with a one-time warning naming the reason.
The model's generation_config is never modified. The op's bindings to the weights are checked once per call on
the tile and fast paths (state.ensure_current), never per token.
"""
from __future__ import annotations

import copy
import inspect

import torch
from transformers.generation.configuration_utils import GenerationMode

from tiles_ext.integrations.causal_lm import with_self
from tiles_ext.integrations.fast_greedy import FastGreedy

TILE_MODES = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)


def make_generate(signature: inspect.Signature):
    """The patched generate: a function to bind to the instance (types.MethodType); see causal_lm.make_forward."""
    def generate(self, *args, **kwargs):
        return patched_generate(self, args, kwargs)

    generate.__signature__ = with_self(signature)
    generate.__doc__ = "tiles_ext: Transformers' generate, with decode steps on torch.ops.tiles.decode_step."
    return generate


def patched_generate(model, args, kwargs):
    state = model._tiles
    original = state.original(model, "generate")
    positional = state.positional["generate"]
    if len(args) > len(positional):
        return original(*args, **kwargs)  # let generate raise its own TypeError
    kw = dict(zip(positional, args))
    kw.update(kwargs)
    route, reason = choose_route(model, state, kw)
    if route == "torch":
        state.warn_once("generate:" + reason.split(" (")[0], f"generate() with {reason}")
        state.quiet = True
        try:
            return original(**kw)
        finally:
            state.quiet = False
    decoder = state.decoder
    state.ensure_current(model)  # weights replaced, resized or moved since the last call: re-bind or re-plan
    if state.decoder is not decoder:  # re-planned (e.g. for another device, whose default paths differ)
        route, _ = choose_route(model, state, kw)
    if route == "fast":
        kw["custom_generate"] = FastGreedy(state, kw.get("streamer"))
    if kw.get("cache") is None and kw.get("past_key_values") is None and kw.get("cache_implementation") is None:
        passed = kw.get("generation_config")
        if passed is None:
            kw["cache_implementation"] = "static"
        elif passed.cache_implementation is None:
            # Set it on a copy of the caller's config: a keyword beside a generation_config is deprecated.
            passed = copy.deepcopy(passed)
            passed.cache_implementation = "static"
            kw["generation_config"] = passed
    state.trusted = True
    try:
        out = original(**kw)
    finally:
        state.trusted = False
    if state.decoder.device.type == "cuda":
        state.decoder.check_error()  # a CUDA launch cannot raise; generate has synced by now anyway
    return out


def _merged_config(model, kw):
    """generate's effective GenerationConfig for this call (its own resolution, approximated without side
    effects: the passed or default config, updated with the call's generation kwargs)."""
    config = copy.deepcopy(kw.get("generation_config") or model.generation_config)
    updates = {k: v for k, v in kw.items() if k != "generation_config" and hasattr(config, k)}
    config.update(**updates)
    return config


def choose_route(model, state, kw) -> tuple[str, str]:
    """("tile" | "fast" | "torch", reason for torch)."""
    if kw.get("custom_generate") is not None:
        return "torch", "a custom_generate decoding method"
    try:
        config = _merged_config(model, kw)
        mode = config.get_generation_mode(kw.get("assistant_model"))
    except Exception:  # an invalid combination: generate itself raises the proper error
        return "torch", "a generation config the tile path does not recognise"
    if mode not in TILE_MODES:
        return "torch", f"{mode.value.replace('_', ' ')} (the tile op serves greedy and sampling decoding)"
    if (config.num_return_sequences or 1) > 1:
        return "torch", f"num_return_sequences={config.num_return_sequences} (batch > 1; the tile op decodes batch 1)"
    for flag in ("output_attentions", "output_hidden_states"):
        if getattr(config, flag, False):
            return "torch", f"{flag}=True (the tile op does not produce them)"
    if config.use_cache is False:
        return "torch", "use_cache=False"
    inputs = next((kw[k] for k in ("inputs", "input_ids", "inputs_embeds") if kw.get(k) is not None), None)
    if isinstance(inputs, torch.Tensor) and inputs.dim() >= 2 and inputs.shape[0] != 1:
        return "torch", f"batch size {inputs.shape[0]} (the tile op decodes batch 1)"
    mask = kw.get("attention_mask")
    if mask is not None and (mask.dim() != 2 or mask.shape[0] != 1 or not bool((mask == 1).all())):
        return "torch", "an attention_mask with zeros (padding; the tile op attends to every cached position)"
    cache = kw.get("cache")
    if cache is None:
        cache = kw.get("past_key_values")
    if cache is not None:
        problem = state.decoder.cache_problem(cache)
        if problem:
            return "torch", problem
        return "tile", ""
    if config.cache_implementation not in (None, "static"):
        return "torch", f"cache_implementation={config.cache_implementation!r} (the tile op decodes into a StaticCache)"
    if (state.multi_token and mode == GenerationMode.GREEDY_SEARCH and not kw.get("logits_processor")
            and not kw.get("stopping_criteria") and kw.get("prefix_allowed_tokens_fn") is None
            and not kw.get("synced_gpus")):
        return "fast", ""
    return "tile", ""
