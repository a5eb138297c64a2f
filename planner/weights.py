"""The op's weight list for a ModelShape: which slot of which layer each entry is, and its shape.

The list follows from the shape's features alone (so two families with the same shape share plans): per layer the
slots it has, in SLOTS order (input_norm, q, k, v, o, post_norm, gate, up, down, then q_bias, k_bias, v_bias where
the shape has qkv_bias, q_norm, k_norm where it has qk_norm, q_scale .. down_scale where its weight format is FP8);
after the layers final_norm, lm_head, embed. The
header's layer_slots mask says which slots a layer has, so that C++ reads the layout from the header
(csrc/generated/plan_format.h weight_entry); the plan also carries it as its weight table (format.WEIGHT).
"""
from __future__ import annotations

import numpy as np

from tiles_ext.planner.format import MODEL_SLOTS, SCALE_SLOTS, SLOT, SLOTS, WEIGHT, slot_shape
from tiles_ext.planner.shape import ModelShape


LLAMA_LAYER_SLOTS = ("input_norm", "q", "k", "v", "o", "post_norm", "gate", "up", "down")


def layer_slots(shape: ModelShape) -> tuple[str, ...]:
    """The slots every layer of `shape` has, in SLOTS order (the order of the weights list)."""
    present = set(LLAMA_LAYER_SLOTS)
    if shape.qkv_bias:
        present |= {"q_bias", "k_bias", "v_bias"}
    if shape.qk_norm:
        present |= {"q_norm", "k_norm"}
    if shape.weight_format != "bf16":
        present |= set(SCALE_SLOTS)
    return tuple(s for s in SLOTS if s in present)


def layer_slot_mask(shape: ModelShape) -> int:
    """The header's layer_slots field."""
    return sum(1 << SLOT[s] for s in layer_slots(shape))


class WeightLayout:
    """Index of every (slot, layer) in the op's weights list; layer -1 for the model slots."""

    def __init__(self, shape: ModelShape):
        per = layer_slots(shape)
        self.shape = shape
        self.entries = tuple((s, layer) for layer in range(shape.num_layers) for s in per)
        self.entries += tuple((s, -1) for s in MODEL_SLOTS)
        self._index = {e: i for i, e in enumerate(self.entries)}

    def __len__(self) -> int:
        return len(self.entries)

    def index(self, layer: int, slot: str) -> int:
        """The entry of `slot` in `layer` (layer ignored for model slots); -1 where the shape has no such slot."""
        return self._index.get((slot, -1 if slot in MODEL_SLOTS else layer), -1)

    def table(self) -> np.ndarray:
        """The plan's weight table: [len, WEIGHT.words] of (slot, layer, rows, cols)."""
        rows = [(SLOT[s], layer, *slot_shape(s, self.shape)) for s, layer in self.entries]
        return np.asarray(rows, dtype=np.int32).reshape(-1, WEIGHT.words)


def entry_name(table: np.ndarray, w: int) -> str:
    """A weight entry's name as messages print it: "L3.q", "lm_head"; "w<i>" when out of range."""
    if not 0 <= w < len(table):
        return f"w{w}"
    slot, layer = int(table[w][0]), int(table[w][1])
    name = SLOTS[slot] if 0 <= slot < len(SLOTS) else f"slot{slot}"
    return f"L{layer}.{name}" if layer >= 0 else name
