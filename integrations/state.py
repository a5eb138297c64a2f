"""PatchState: everything tiles_ext.patch changed on one model instance, so unpatch can put it back exactly."""
from __future__ import annotations

from dataclasses import dataclass, field

from tiles_ext.integrations.errors import warn_fallback

# Attributes generate() caches on the instance. Made while patched, they belong to the patched forward (a compiled
# __call__ that traced it, a static-cache length the unpatched model never asked for): unpatch restores their
# pre-patch state.
GENERATE_BOOKKEEPING = ("_compiled_call", "_last_compile_config", "_previous_max_cache_length")
PATCHED_METHODS = ("forward", "generate")
_MISSING = object()


@dataclass
class PatchState:
    decoder: object                      # TileDecoder
    cache_field: str                     # "cache" or "past_key_values" (version.cache_field)
    multi_token: bool                    # greedy generate runs many tokens per launch (fast_greedy)
    original_forward: object = None      # the bound forward before patching
    original_generate: object = None
    saved: dict = field(default_factory=dict)   # instance __dict__ entries before patching (or _MISSING)
    warned: set = field(default_factory=set)
    trusted: bool = False   # inside generate(): the wrapper checked mask/positions once, skip per-step checks
    quiet: bool = False     # inside a generate() the wrapper already sent to PyTorch (and warned about)

    def warn_once(self, key: str, message: str) -> None:
        if self.quiet or key in self.warned:
            return
        self.warned.add(key)
        warn_fallback(f"tiles_ext: {message}; running it in PyTorch instead (same result, PyTorch speed). "
                      "This warning is shown once per model.", stacklevel=4)

    def save_instance_attrs(self, model) -> None:
        for name in PATCHED_METHODS + GENERATE_BOOKKEEPING:
            self.saved[name] = model.__dict__.get(name, _MISSING)

    def restore_instance_attrs(self, model) -> None:
        for name, value in self.saved.items():
            if value is _MISSING:
                model.__dict__.pop(name, None)
            else:
                model.__dict__[name] = value
