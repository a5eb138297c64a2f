"""PatchState: everything tiles_ext.patch changed on one model instance, the decoder it runs, and the binding of
that decoder to the model's current weights.

The state is found through the instance (model._tiles), never captured by a closure, so a deep copy of the model
carries a state of its own (`__deepcopy__`: the same plan, a fresh runtime, bound to the copy's weights).
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
from dataclasses import dataclass, field

from tiles_ext.fp8 import model as fp8_layers

from tiles_ext.integrations import causal_lm
from tiles_ext.integrations.bindings import Bindings, weight_paths
from tiles_ext.integrations.decoder import TileDecoder
from tiles_ext.integrations.errors import UnsupportedModelError, warn_fallback
from tiles_ext.integrations.planning import plan_for

# Attributes generate() caches on the instance. Made while patched, they belong to the patched forward (a compiled
# __call__ that traced it, a static cache or its length, which the unpatched model never asked for): unpatch
# restores their pre-patch state.
GENERATE_BOOKKEEPING = ("_compiled_call", "_last_compile_config", "_previous_max_cache_length", "_cache")
# A compiled __call__ is a closure over one instance's __call__: a copy of the model must not inherit it.
INSTANCE_BOUND_BOOKKEEPING = ("_compiled_call", "_last_compile_config")
# Instance attributes patch() sets (besides the state itself): the patched methods, and the copy and pickle hooks.
PATCHED_METHODS = ("forward", "generate", "__deepcopy__", "__getstate__")


def positional_names(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@dataclass
class PatchState:
    family: object                       # tiles_ext.families.Family
    decoder: TileDecoder
    cache_field: str                     # "cache" or "past_key_values" (version.cache_field)
    multi_token_option: bool | None      # patch(multi_token=...) as given (None: the device's default)
    workers: int | None = None           # patch(workers=...) as given: a re-plan uses the same
    plan_cache_dir: object = None        # patch(plan_cache_dir=...) as given
    signatures: dict = field(default_factory=dict)   # "forward"/"generate" -> the original's signature
    positional: dict = field(default_factory=dict)   # "forward"/"generate" -> its positional parameter names
    saved: dict = field(default_factory=dict)        # instance __dict__ entries present before patching
    warned: set = field(default_factory=set)
    trusted: bool = False   # inside generate(): the wrapper checked mask, positions and weights once
    quiet: bool = False     # inside a generate() the wrapper already sent to PyTorch (and warned about)
    assisted_prompt: int | None = None  # inside an assisted generate() on the op: its prompt's length (assisted.py)
    lookup_rounds: int | None = None    # rounds of the last greedy prompt lookup run in the op (fast_lookup.py)
    lookup_fallback: str | None = None  # why the last greedy prompt lookup ran Transformers' loop instead (or None)
    fp8_originals: dict = field(default_factory=dict)  # patch(weights="fp8"): module path -> the BF16 nn.Linear
    fp8_forwards: list = field(default_factory=list)   # FP8 layers given a dequantizing forward for prefill

    @property
    def multi_token(self) -> bool:
        """Greedy generate runs many tokens per launch (fast_greedy): on by default on CUDA, off on CPU."""
        if self.multi_token_option is None:
            return self.decoder.device.type == "cuda"
        return bool(self.multi_token_option)

    def warn_once(self, key: str, message: str) -> None:
        if self.quiet or key in self.warned:
            return
        self.warned.add(key)
        warn_fallback(f"tiles_ext: {message}; running it in PyTorch instead (same result, PyTorch speed). "
                      "This warning is shown once per model.")

    # ------------------------------------------------------------------ the patched methods' originals

    def original(self, model, name: str):
        """The method patch() replaced, bound to `model`: the instance's own attribute if it had one (e.g. a hook
        wrapper), else the class's."""
        if name in self.saved:
            return self.saved[name]
        return getattr(type(model), name).__get__(model, type(model))

    def save_instance_attrs(self, model) -> None:
        for name in PATCHED_METHODS + GENERATE_BOOKKEEPING:
            if name in model.__dict__:
                self.saved[name] = model.__dict__[name]

    def restore_instance_attrs(self, attrs: dict) -> None:
        """Put the pre-patch entries back into `attrs` (the model's __dict__, or a copy of it being pickled)."""
        for name in PATCHED_METHODS + GENERATE_BOOKKEEPING:
            if name in self.saved:
                attrs[name] = self.saved[name]
            else:
                attrs.pop(name, None)

    # ------------------------------------------------------------------ weights

    def ensure_current(self, model) -> None:
        """Before a decode step outside a checked generate(): re-bind the op to the model's current weights if any
        stopped being the module's, re-plan if their shapes or the device changed, raise if the op cannot run them.
        A no-op costs one Bindings.current() (host metadata only, no sync)."""
        bindings = self.decoder.bindings
        if bindings is not None and bindings.current():
            return
        self.rebind(model)

    def rebind(self, model) -> None:
        name = type(model).__name__
        try:
            base = self.family.shape(model.config)
            weight_format = fp8_layers.weight_format_of(model, self.family, base)
            device = causal_lm.check_model(model, weight_format)
            shape = dataclasses.replace(base, weight_format=weight_format)
        except (UnsupportedModelError, ValueError) as e:
            raise UnsupportedModelError(
                f"tiles_ext: {name} changed after patch() in a way the tile op cannot run: {e}. "
                "Or run it in PyTorch: tiles_ext.unpatch(model)") from None
        decoder = self.decoder
        if shape != decoder.plan.shape or device != decoder.device:
            # A new vocabulary (resize_token_embeddings) or a move to another device: plan as patch() did.
            decoder = TileDecoder(plan_for(model.config, device, self.workers, self.plan_cache_dir, weight_format),
                                  device)
        weights = self.family.weights(model, decoder.plan.shape)
        try:
            causal_lm.check_weights(model, decoder.plan, weights, hint=causal_lm.REPLACED_HINT)
        except UnsupportedModelError as e:
            raise UnsupportedModelError(
                f"tiles_ext: {name} changed after patch() in a way the tile op cannot run: {e}. "
                "Or run it in PyTorch: tiles_ext.unpatch(model)") from None
        decoder.bind(model, weights, Bindings(model, weight_paths(self.family, decoder.plan.shape)))
        self.decoder = decoder

    # ------------------------------------------------------------------ copies

    def __deepcopy__(self, memo):
        """The state of a deep copy of the model: the same plan and options, a runtime of its own (scratch and
        state words are per model), no weights yet (patch's copy hook binds them to the copy's)."""
        saved = {k: v for k, v in self.saved.items() if k not in INSTANCE_BOUND_BOOKKEEPING}
        return PatchState(
            family=self.family, decoder=self.decoder.fresh(), cache_field=self.cache_field,
            multi_token_option=self.multi_token_option, workers=self.workers,
            plan_cache_dir=copy.deepcopy(self.plan_cache_dir, memo), signatures=dict(self.signatures),
            positional={k: list(v) for k, v in self.positional.items()},
            saved=copy.deepcopy(saved, memo), warned=set(self.warned),
            fp8_originals=copy.deepcopy(self.fp8_originals, memo),
            fp8_forwards=copy.deepcopy(self.fp8_forwards, memo))  # the copy's layers: unpatch(copy) undoes them

    def __reduce_ex__(self, protocol):
        # A patched model pickles as its plain self (patch's __getstate__ hook leaves the state out); the state alone
        # holds device tensors bound to one process's model, which no pickle can carry.
        raise TypeError("tiles_ext's PatchState cannot be pickled; pickle the model (it saves the plain, unpatched "
                        "model) or its state_dict()")

