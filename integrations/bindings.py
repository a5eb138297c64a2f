"""Bindings: which module tensors the op's weights list was made from, and a cheap test that they still are.

The op reads the model's own parameter tensors (no copies), so an in-place edit of a parameter (`weight.mul_()`,
`load_state_dict` without assign, an optimizer step) reaches the op by construction. What does not reach it is a
tensor that is no longer the module's: a new Parameter assigned (`lm_head.weight = ...`, `load_state_dict(...,
assign=True)`, re-tying), a module replaced (`resize_token_embeddings`, adapters), or new storage behind the same
Parameter (`model.to(dtype)`, `model.to(device)`, `param.data = ...`). `Bindings.current()` sees each of these:

- every module on the path to a bound tensor is still its parent's child (`parent._modules[key] is child`);
- every bound tensor is still its module's (`owner._parameters[name] is tensor`), with the data pointer, shape,
  dtype and device it had when bound.

It reads only host-side metadata (no device read, so no sync): about 0.3 us per weight on a CPU core.
"""
from __future__ import annotations

import operator

import torch

from tiles_ext.planner.weights import WeightLayout

# The RoPE frequencies the op gets (tiles_ext.runtime.rope_tables reads this buffer).
ROPE_BUFFER = "model.rotary_emb.inv_freq"


def weight_paths(family, shape) -> list[str]:
    """The parameter path of every entry of the op's weights list (a fused parameter's path once per row view)."""
    return [family.slot(slot).path.format(layer=layer) for slot, layer in WeightLayout(shape).entries]


_data_ptr = torch.Tensor.data_ptr


class Bindings:
    def __init__(self, model, paths: list[str], buffers: list[str] = (ROPE_BUFFER,)):
        """paths: the parameters the op's weights are read from (duplicates, e.g. row views of one fused parameter,
        are checked once); buffers: the buffers it reads (copied at bind time, so they need a re-bind too)."""
        edges: dict = {}
        owners, tensors = [], []
        self._kinds: list[str] = []
        self.paths = list(dict.fromkeys(paths)) + list(buffers)
        for i, path in enumerate(self.paths):
            kind = "_parameters" if i < len(self.paths) - len(buffers) else "_buffers"
            *keys, name = path.split(".")
            module = model
            for key in keys:
                child = module._modules.get(key)
                if child is None:
                    raise AttributeError(f"{type(model).__name__} has no submodule {'.'.join(keys)!r} ({path})")
                edges.setdefault((id(module), key), (module._modules, key, child))
                module = child
            tensor = getattr(module, kind).get(name)
            if tensor is None:
                raise AttributeError(f"{type(model).__name__} has no {kind[1:-1]} {path!r}")
            owners.append((getattr(module, kind), name))
            self._kinds.append(kind)
            tensors.append(tensor)
        # The dicts themselves are kept (a module's _modules / _parameters / _buffers dict lives as long as the
        # module), so that a check is a few C-level maps: no Python loop, no attribute lookups.
        self._edge_dicts = [d for d, _, _ in edges.values()]
        self._edge_keys = [k for _, k, _ in edges.values()]
        self._children = [c for _, _, c in edges.values()]
        self._dicts = [d for d, _ in owners]
        self._names = [n for _, n in owners]
        self._tensors = tensors
        self._ptrs = list(map(_data_ptr, tensors))
        self._meta = [(t.shape, t.dtype, t.device) for t in tensors]

    def current(self) -> bool:
        """True while every bound tensor is still its module's, on the storage it was bound on (host metadata
        only). A tensor's dtype, shape or device changes with its storage (model.to(), param.data = ...,
        resizing all give it a new data pointer), so the pointer stands for them here; rebinding checks them."""
        if not all(map(operator.is_, map(dict.get, self._edge_dicts, self._edge_keys), self._children)):
            return False
        now = list(map(dict.get, self._dicts, self._names))
        return all(map(operator.is_, now, self._tensors)) and list(map(_data_ptr, now)) == self._ptrs

    def changed(self, model) -> list[str]:
        """The paths whose tensor is not the bound one any more, by name (the slow way: for messages and tests)."""
        out = []
        for path, kind, tensor, ptr, meta in zip(self.paths, self._kinds, self._tensors, self._ptrs, self._meta):
            try:
                now = model.get_buffer(path) if kind == "_buffers" else model.get_parameter(path)
            except AttributeError:
                out.append(path)
                continue
            if now is not tensor or _data_ptr(now) != ptr or (now.shape, now.dtype, now.device) != meta:
                out.append(path)
        return out
