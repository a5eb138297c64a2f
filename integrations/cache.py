"""The KV cache the tile op shares with PyTorch prefill: a transformers StaticCache.

The op writes the new token's K/V in place into cache.layers[i].keys / .values ([1, kv, max_len, head_dim] bf16,
the very tensors PyTorch prefill filled), and the decode position is the cache's own length counter
(StaticLayer.cumulative_length, a 0-dim device tensor). After each launch every layer's counter is advanced in
place on the device, as StaticLayer.update would have done, so PyTorch and the op can take turns on one cache.

Assisted generation crops the cache after every round. The caches the tile path makes for it are
CroppableStaticCache: a StaticCache whose layers roll back by their length counter alone, on every supported
Transformers version (5.17's StaticLayer has no crop, and its assisted decoding refuses a plain StaticCache).
"""
from __future__ import annotations

import torch
from transformers.cache_utils import StaticCache, StaticLayer

from tiles_ext.integrations.errors import CacheFullError


class CroppableStaticLayer(StaticLayer):
    """A StaticLayer whose crop moves only its length counter back: K/V rows beyond the new length stay in memory,
    where neither the op nor PyTorch attends (a position attends to positions up to its own), until the next
    tokens overwrite them."""

    is_croppable = True

    def crop(self, tokens_to_remove: int) -> None:
        """Negative: remove that many tokens (no device read); positive: keep that many, the older absolute
        convention. In place: the counter's address is static (CUDA graphs, the op's position view)."""
        if tokens_to_remove > 0:
            tokens_to_remove = min(tokens_to_remove - int(self.get_seq_length()), 0)
        self.cumulative_length.sub_(-tokens_to_remove)


class CroppableStaticCache(StaticCache):
    """A StaticCache of CroppableStaticLayer layers: what the tile path allocates for assisted generation (the
    main model's verify passes, an assistant's drafts)."""

    def __init__(self, config, max_cache_len: int, **kwargs):
        super().__init__(config=config, max_cache_len=max_cache_len, **kwargs)
        self.layers = [CroppableStaticLayer(max_cache_len=layer.max_cache_len) if type(layer) is StaticLayer
                       else layer for layer in self.layers]


def _layer_class_crops(cls) -> bool:
    return callable(getattr(cls, "crop", None)) and bool(getattr(cls, "is_croppable", True))


def can_crop(cache) -> bool:
    """Whether every layer of this StaticCache rolls back by crop (StaticLayer does from some Transformers versions
    on; CroppableStaticLayer always)."""
    return all(_layer_class_crops(type(layer)) for layer in cache.layers)


def cache_type_problem(cache, num_layers: int) -> str | None:
    """Why the op cannot decode into this kind of cache (None: it can). Types only, no tensors touched."""
    if not isinstance(cache, StaticCache):
        return (f"a {type(cache).__name__} (the tile op decodes into a StaticCache only; generate() without a "
                f"cache argument, or with cache_implementation='static', gives it one)")
    if getattr(cache, "offloading", False):
        return "an offloaded StaticCache (the tile op needs the cache on the model's device)"
    layers = cache.layers
    if len(layers) != num_layers or any(type(layer) not in (StaticLayer, CroppableStaticLayer) for layer in layers):
        return (f"a StaticCache with {len(layers)} layers of types {sorted({type(l).__name__ for l in layers})} "
                f"(the tile op needs {num_layers} plain StaticLayer or CroppableStaticLayer layers)")
    return None


def cache_tensor_problem(cache, device: torch.device, num_kv_heads: int, head_dim: int) -> str | None:
    """Why the op cannot decode into this allocated StaticCache (None: it can). Shapes only, no device reads."""
    keys, values = cache.layers[0].keys, cache.layers[0].values
    if keys.shape[0] != 1:
        return f"a StaticCache for batch size {keys.shape[0]} (the tile op decodes batch 1)"
    if (keys.dtype != torch.bfloat16 or keys.dim() != 4 or keys.shape[1] != num_kv_heads
            or keys.shape[3] != head_dim or values.shape != keys.shape or values.dtype != keys.dtype
            or not keys.is_contiguous() or not values.is_contiguous()):
        return (f"a StaticCache holding {keys.dtype} {tuple(keys.shape)} tensors (the tile op needs contiguous "
                f"bfloat16 [1, {num_kv_heads}, max_len, {head_dim}])")
    if keys.device != device:
        return f"a StaticCache on {keys.device} (the model was patched for {device})"
    return None


def is_initialized(cache) -> bool:
    """False until the first PyTorch update allocates the tensors (StaticLayer.lazy_initialization)."""
    return all(getattr(layer, "is_initialized", False) for layer in cache.layers)


def layer_tensors(cache) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    layers = cache.layers
    return [layer.keys for layer in layers], [layer.values for layer in layers]


def position(cache) -> torch.Tensor:
    """The decode position (cache index of the input token) as a 1-element int64 device tensor: a view of the
    cache's own counter, so a CUDA graph replay reads the current value."""
    return cache.layers[0].cumulative_length.view(1)


def advance(cache, steps) -> None:
    """Advance every layer's length counter by `steps` (int or 0-dim tensor) in place on the device."""
    torch._foreach_add_([layer.cumulative_length for layer in cache.layers], steps)


def set_length(cache, length: int) -> None:
    """Move every layer's length counter to `length` (forward, or back past a rejected draft's rows) in place,
    and record it on the host."""
    delta = length - host_length(cache)
    if delta:
        advance(cache, delta)
    record_length(cache, length)


def capacity(cache) -> int:
    return int(cache.layers[0].keys.shape[2])


# Host-side length tracking (eager mode only). The counter's version number tells whether anything other than
# this module moved it since we last looked (a PyTorch prefill, a crop, a compiled step); only then is the
# device value read (one sync), otherwise the host copy is exact.
_TRACK = "_tiles_host_length"


def host_length(cache) -> int:
    counter = cache.layers[0].cumulative_length
    record = cache.__dict__.get(_TRACK)
    try:
        version = counter._version
    except RuntimeError:  # inference-mode tensors keep no version: read the value every time
        return int(counter.item())
    if record is not None and record[0] is counter and record[1] == version:
        return record[2]
    return int(counter.item())


def record_length(cache, length: int) -> None:
    counter = cache.layers[0].cumulative_length
    try:
        cache.__dict__[_TRACK] = (counter, counter._version, length)
    except RuntimeError:
        pass


def check_room(cache, steps: int, what: str = "this decode step") -> int:
    """Raises CacheFullError if `steps` more tokens do not fit; returns the current length."""
    length = host_length(cache)
    cap = capacity(cache)
    if length + steps > cap:
        raise CacheFullError(
            f"the StaticCache is full: it holds {length} of its max_cache_len {cap} positions and {what} "
            f"needs {steps} more. Create it with a larger max_cache_len "
            f"(StaticCache(config=..., max_cache_len=N)), or generate fewer tokens.")
    return length


# A StaticCache that generate() got from the tile path in place of the DynamicCache it would have made unpatched
# carries this attribute: passed back to generate (a continuation, an assistant's next round) it grows as a
# DynamicCache would, instead of overflowing.
_GROWS = "_tiles_grows"


def mark_grows(cache) -> None:
    if isinstance(cache, StaticCache):
        cache.__dict__[_GROWS] = True


def grows(cache) -> bool:
    return bool(getattr(cache, "__dict__", {}).get(_GROWS, False))


def grown(cache, config, positions: int):
    """`cache` if it has room for `positions` positions, else a cache of its class (StaticCache or
    CroppableStaticCache) of at least twice its size holding the same contents and length, marked to grow again
    (an unallocated one is replaced by an empty one)."""
    if cache_type_problem(cache, len(cache.layers)) is not None:
        return cache
    kind = CroppableStaticCache if isinstance(cache, CroppableStaticCache) else StaticCache
    if not is_initialized(cache):
        if cache.layers[0].max_cache_len >= positions:
            return cache
        bigger = kind(config=config, max_cache_len=positions)
        mark_grows(bigger)
        return bigger
    if capacity(cache) >= positions:
        return cache
    bigger = kind(config=config, max_cache_len=max(positions, 2 * capacity(cache)))
    for old, new in zip(cache.layers, bigger.layers):
        new.lazy_initialization(old.keys, old.values)
        new.keys[:, :, :old.keys.shape[2]].copy_(old.keys)
        new.values[:, :, :old.values.shape[2]].copy_(old.values)
        new.cumulative_length.copy_(old.cumulative_length)
    mark_grows(bigger)
    return bigger
