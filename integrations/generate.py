"""The patched model.generate: picks the path for each call, then defers to Transformers' own generate.

- tile path: decode steps run through the op, one token per step (the patched forward). A call without a cache
  gets cache_implementation="static" (generate then builds a StaticCache sized max_length - 1, the storage that
  prefill and the op share); a user's StaticCache is used as given. The StaticCache a call got this way stands in
  for the DynamicCache the call would have had unpatched, so it behaves like one where it is passed back: a
  continuation (generate(..., cache=out.cache)) that needs more positions gets it grown (cache.grown).
- fast path (multi_token): greedy and sampling calls additionally hand generate a decoding loop that runs up to 64
  tokens per launch (fast_sample.FastSample: the processors it can apply run in the op; plain greedy is
  fast_greedy.FastGreedy).
- assistant of assisted generation: the tile path, on a CroppableStaticCache this wrapper makes (generation rolls
  the assistant's cache back after every round; cache.py); the PyTorch path with a one-time warning where it was
  handed a StaticCache the installed Transformers cannot crop.
- lookup path (greedy prompt lookup): the assisted path's cache, and a decoding loop whose rounds run inside the op
  (fast_lookup.FastLookup: up to 64 accepted tokens per launch); what that loop cannot reproduce runs the assisted
  path's loop below.
- assisted path (the main model of assisted generation: prompt lookup or an assistant model, greedy or sampling):
  Transformers' assisted decoding, each round's draft verified in one pass of the op (assisted.py), on a
  CroppableStaticCache this wrapper makes with room for the last round's draft (Transformers' own static sizing,
  max_length - 1, has none: its prompt lookup drafts beyond max_length). Where the op cannot verify (an FP8 plan on
  CUDA, one row per launch there; a caller's StaticCache the installed Transformers cannot crop), the PyTorch path.
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

from transformers import StaticCache

from tiles_ext.integrations import assisted
from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.causal_lm import with_self
from tiles_ext.integrations.fast_lookup import FastLookup
from tiles_ext.integrations.fast_sample import FastSample

TILE_MODES = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)
# Cache requests a call without a cache may carry. An assistant's first drafting call carries "dynamic_full" on
# Transformers 5.4 to 5.1x (a cache that crops and never slides), which the CroppableStaticCache it gets here is.
CACHE_REQUESTS = (None, "static")
ASSISTANT_CACHE_REQUESTS = (None, "static", "dynamic_full")


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
    if state.cache_field != "past_key_values" and kw.get("past_key_values") is not None \
            and kw.get(state.cache_field) is None:
        # The name this Transformers version expects: its deprecation notice is never raised on Tiles' behalf.
        kw[state.cache_field] = kw.pop("past_key_values")
    passed_cache = kw.get(state.cache_field)
    continued = passed_cache is not None and kv.grows(passed_cache)
    if continued:
        kw[state.cache_field] = kv.grown(passed_cache, model.config, _positions_needed(model, kw))
    route, reason = choose_route(model, state, kw)
    if route == "torch":
        state.warn_once("generate:" + reason.split(" (")[0], f"generate() with {reason}")
        state.quiet = True
        try:
            return _hand_over(model, state, original(**kw), False, continued)
        finally:
            state.quiet = False
    decoder = state.decoder
    state.ensure_current(model)  # weights replaced, resized or moved since the last call: re-bind or re-plan
    if state.decoder is not decoder:  # re-planned (e.g. for another device, whose default paths differ)
        route, _ = choose_route(model, state, kw)
    if route == "fast":
        kw["custom_generate"] = FastSample(state, kw.get("streamer"))
    if route == "assisted" and _lookup_in_op(model, state, kw):
        kw["custom_generate"] = FastLookup(state, kw.get("streamer"))
    made = False
    if passed_cache is None and (route == "assisted" or _is_assistant(model, kw)):
        made = _give_croppable_cache(model, state, kw)
    elif passed_cache is None and kw.get("cache_implementation") is None:
        passed = kw.get("generation_config")
        if passed is None:
            kw["cache_implementation"] = "static"
            made = True
        elif passed.cache_implementation is None:
            # Set it on a copy of the caller's config: a keyword beside a generation_config is deprecated.
            passed = copy.deepcopy(passed)
            passed.cache_implementation = "static"
            kw["generation_config"] = passed
            made = True
    state.trusted = True
    if route == "assisted":
        state.assisted_prompt = _prompt_length(kw)
    try:
        out = original(**kw)
    finally:
        state.trusted = False
        state.assisted_prompt = None
    if state.decoder.device.type == "cuda":
        state.decoder.check_error()  # a CUDA launch cannot raise; generate has synced by now anyway
    return _hand_over(model, state, out, made, continued)


def _lookup_in_op(model, state, kw) -> bool:
    """Greedy prompt lookup runs its rounds inside the op (fast_lookup.FastLookup), unless patch(multi_token=False)
    asked for one pass per launch; sampling and an assistant model keep Transformers' loop."""
    config = _merged_config(model, kw)
    return (kw.get("assistant_model") is None and config.prompt_lookup_num_tokens is not None
            and not config.do_sample and state.multi_token_option is not False)


def _hand_over(model, state, out, made: bool, continued: bool):
    """The StaticCache a call returns (return_dict_in_generate), made by the tile path or grown from one, is the
    caller's, as a DynamicCache would be: marked to grow when passed back (see the module docstring), and never
    reused by a later call."""
    cache = None if isinstance(out, torch.Tensor) else getattr(out, state.cache_field, None)
    if cache is None:
        return out
    if made or continued:
        kv.mark_grows(cache)
    if made and model.__dict__.get("_cache") is cache:
        # Some Transformers versions keep the StaticCache they made on the model and reset it for the next call,
        # which would empty the caller's cache under them: the next call makes its own.
        del model.__dict__["_cache"]
    return out


def _give_croppable_cache(model, state, kw) -> bool:
    """A CroppableStaticCache for an assisted call (or an assistant's drafting call) that brought none, with room
    for a verify pass at the end: an assistant's drafts stop at max_length, prompt lookup's run up to
    prompt_lookup_num_tokens beyond it (Transformers keeps the tokens within max_length afterwards). The call's own
    static request is dropped in its favour."""
    kw.pop("cache_implementation", None)
    passed = kw.get("generation_config")
    if passed is not None and passed.cache_implementation is not None:
        passed = copy.deepcopy(passed)
        passed.cache_implementation = None
        kw["generation_config"] = passed
    draft = _merged_config(model, kw).prompt_lookup_num_tokens or 0
    kw[state.cache_field] = kv.CroppableStaticCache(config=model.config,
                                                    max_cache_len=_positions_needed(model, kw) + draft)
    return True


def _is_assistant(model, kw) -> bool:
    """A drafting call of assisted generation (Transformers marks the assistant's generation config)."""
    return bool(getattr(_merged_config(model, kw), "is_assistant", False))


def _prompt_length(kw) -> int:
    ids = next(kw[k] for k in ("inputs", "input_ids") if isinstance(kw.get(k), torch.Tensor))
    return int(ids.shape[-1])


def _merged_config(model, kw):
    """generate's effective GenerationConfig for this call (its own resolution, approximated without side
    effects: the passed or default config, updated with the call's generation kwargs)."""
    config = copy.deepcopy(kw.get("generation_config") or model.generation_config)
    updates = {k: v for k, v in kw.items() if k != "generation_config" and hasattr(config, k)}
    config.update(**updates)
    return config


def _positions_needed(model, kw) -> int:
    """An upper bound on the cache positions this call fills: its prompt plus its new tokens."""
    config = _merged_config(model, kw)
    prompt = max([kw[k].shape[1] for k in ("inputs", "input_ids", "inputs_embeds")
                  if isinstance(kw.get(k), torch.Tensor) and kw[k].dim() >= 2] or [0])
    new = config.max_new_tokens if config.max_new_tokens is not None else config.max_length
    return prompt + int(new or 0)


def choose_route(model, state, kw) -> tuple[str, str]:
    """("tile" | "fast" | "assisted" | "torch", reason for torch)."""
    if kw.get("custom_generate") is not None:
        return "torch", "a custom_generate decoding method"
    try:
        config = _merged_config(model, kw)
        mode = config.get_generation_mode(kw.get("assistant_model"))
    except Exception:  # an invalid combination: generate itself raises the proper error
        return "torch", "a generation config the tile path does not recognise"
    passed = kw.get(state.cache_field)
    if getattr(config, "is_assistant", False) and isinstance(passed, StaticCache) and not kv.can_crop(passed):
        return "torch", assisted.uncroppable("this model as the assistant of assisted generation with this "
                                             "StaticCache (generation crops the assistant's cache after every round")
    is_assisted = mode == GenerationMode.ASSISTED_GENERATION
    if is_assisted:
        problem = assisted.route_problem(state, config, kw)
        if problem:
            return "torch", problem
    elif mode not in TILE_MODES:
        return "torch", (f"{mode.value.replace('_', ' ')} (the tile op serves greedy, sampling and assisted "
                         "decoding)")
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
        return ("assisted" if is_assisted else "tile"), ""
    requests = ASSISTANT_CACHE_REQUESTS if getattr(config, "is_assistant", False) else CACHE_REQUESTS
    if config.cache_implementation not in requests:
        return "torch", f"cache_implementation={config.cache_implementation!r} (the tile op decodes into a StaticCache)"
    if is_assisted:
        return "assisted", ""
    if (state.multi_token and mode in TILE_MODES and not kw.get("logits_processor")
            and not kw.get("stopping_criteria") and kw.get("prefix_allowed_tokens_fn") is None
            and not kw.get("synced_gpus")):
        return "fast", ""
    return "tile", ""
