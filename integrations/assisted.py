"""Assisted generation's verification on the tile op: prompt lookup (`prompt_lookup_num_tokens`) and an assistant
model (`assistant_model`), greedy and sampling.

Transformers' own assisted decoding runs the loop: its candidate generator drafts, the main model's forward scores
the last accepted token and the draft in one call, its acceptance rule (greedy match, or speculative sampling with
the assistant's logits) keeps a prefix, and it crops the cache back to the accepted length. The patched forward
serves that scoring call with one verify pass of the op (TileDecoder.verify: every row at its position, in passes
of at most max_rows rows), so the K/V of a rejected draft stays in cache rows beyond the cache length, where no
later pass attends (planner/format.py "Rows"). A call that brings no cache gets a CroppableStaticCache
(cache.py), whose crop moves only the length counter back, on every supported Transformers version; a caller's
plain StaticCache is used where the installed Transformers can crop it, else the call runs in PyTorch.

The first call of a round may still hold uncached prompt tokens (Transformers prefills the prompt together with
the first draft): those run in PyTorch, as a plain generate's prefill does, and only the draft rows on the op. So
greedy assisted decoding computes every position exactly as plain greedy decoding of the patched model does:
the prompt's last logits from the PyTorch prefill, every later position from op rows that are bit-identical to
one-row steps.
"""
from __future__ import annotations

import torch
from transformers import StaticCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from tiles_ext.integrations import cache as kv
from tiles_ext.integrations.version import assisted_takes_static_cache, transformers_version


def route_problem(state, config, kw) -> str | None:
    """Why the op cannot verify this assisted generate call (None: it can): the reason of the PyTorch path."""
    if getattr(config, "use_mtp", False) or getattr(config, "assistant_early_exit", None) is not None:
        return "assisted generation by the model's own layers (use_mtp, assistant_early_exit)"
    if kw.get("assistant_model") is None and config.prompt_lookup_num_tokens is None:
        return "an assisted generation mode other than prompt lookup or an assistant model"
    if not any(isinstance(kw.get(k), torch.Tensor) for k in ("inputs", "input_ids")):
        return "assisted generation from inputs_embeds (the tile op verifies token ids)"
    if not assisted_takes_static_cache():
        return (f"assisted generation (transformers {transformers_version()}'s assisted decoding refuses every "
                f"StaticCache, the cache the tile op decodes into; 5.5 and later accept it)")
    cache = kw.get(state.cache_field)
    if isinstance(cache, StaticCache) and not kv.can_crop(cache):
        return uncroppable("assisted generation with this StaticCache (generation crops the main model's cache "
                           "after every round")
    if state.decoder.runtime.max_rows < 2:
        return (f"assisted generation on {state.decoder.device} with this plan (the CUDA rows kernel serves BF16 "
                f"plans: verifying a draft needs several rows per pass)")
    return None


def uncroppable(what: str) -> str:
    """The fallback reason for a caller's StaticCache that this Transformers cannot crop."""
    return (f"{what}, and transformers {transformers_version()} cannot crop a plain StaticCache; a call without a "
            f"cache gets a croppable one)")


def is_verify_call(state, input_ids, cache) -> bool:
    """Inside an assisted generate call on the op: a forward of several tokens into the call's allocated
    StaticCache (the scoring call of a round; the prompt alone is a prefill, which verify_forward hands back)."""
    return (state.assisted_prompt is not None and input_ids is not None and input_ids.dim() == 2
            and input_ids.shape[0] == 1 and input_ids.shape[1] > 1 and cache is not None
            and state.decoder.cache_problem(cache) in (None, ""))  # "": unallocated until the first prefill


def verify_forward(model, state, call: dict, input_ids, cache):
    """The scoring call of a round: logits [1, L, vocab] for its L tokens, the uncached prompt tokens (if any)
    prefilled in PyTorch (only their last row's logits kept, as generate's prefill keeps them), the rest verified on
    the op. None where every token is a prompt token: a plain prefill, the model's own forward."""
    cached = kv.host_length(cache)
    head = min(input_ids.shape[1], max(0, state.assisted_prompt - cached))
    if head == input_ids.shape[1] or (head == 0 and not kv.is_initialized(cache)):
        return None
    rows = []
    if head:
        rows.append(_prefill_head(model, state, call, head, cached, cache).logits[0, -1:].float())
    problem = state.decoder.cache_problem(cache)
    if problem:  # the prefill allocated a cache the op cannot decode into (checked by choose_route: never here)
        raise RuntimeError(f"tiles_ext: the assisted call's cache became {problem}")
    rows.append(state.decoder.verify(input_ids[0, head:].long(), cache))
    return CausalLMOutputWithPast(logits=torch.cat(rows).unsqueeze(0), **{state.cache_field: cache})


def _prefill_head(model, state, call: dict, head: int, cached: int, cache):
    """The model's own forward over the call's first `head` tokens (uncached prompt), into the same cache."""
    kwargs = dict(call)
    kwargs["input_ids"] = call["input_ids"][:, :head]
    kwargs["logits_to_keep"] = 1
    kwargs["return_dict"] = True
    mask = call.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        kwargs["attention_mask"] = mask[:, :cached + head] if mask.dim() == 2 else mask[..., :head, :]
    pos = call.get("position_ids")
    if isinstance(pos, torch.Tensor):
        kwargs["position_ids"] = pos[..., :head]
    kwargs.pop("past_key_values", None)
    kwargs[state.cache_field] = cache
    return state.original(model, "forward")(**kwargs)
