"""Binds a Plan to a device and a model's tensors, and calls torch.ops.tiles.decode_step.

One TileRuntime per (model, device). It owns the plan tensor, the scratch arena and the counter state; the
weights are the model's own parameter tensors (no copy), the KV cache is the caller's (a transformers
StaticCache's layer tensors, shared with PyTorch prefill).
"""
from __future__ import annotations

import functools
import importlib

import torch

from .errors import check_state
from .planner.plan import Plan


def model_weights(model) -> list[torch.Tensor]:
    """The op's `weights` list for a transformers Llama-family causal LM, in plan order (format.LAYER_SLOTS)."""
    m = model.model
    out = []
    for layer in m.layers:
        a, mlp = layer.self_attn, layer.mlp
        out += [layer.input_layernorm.weight, a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight,
                layer.post_attention_layernorm.weight, mlp.gate_proj.weight, mlp.up_proj.weight,
                mlp.down_proj.weight]
    out += [m.norm.weight, model.lm_head.weight, m.embed_tokens.weight]
    return [w.detach() for w in out]


def rope_tables(model) -> tuple[torch.Tensor, float]:
    """(inv_freq fp32 [head_dim/2], attention_scaling): the kernel computes cos/sin(pos * inv_freq) * scaling,
    exactly what transformers' rotary embedding does (Llama-3 scaling is already folded into inv_freq)."""
    rot = model.model.rotary_emb
    return rot.inv_freq.detach().to(torch.float32).contiguous(), float(getattr(rot, "attention_scaling", 1.0))


@functools.lru_cache(maxsize=1)
def cuda_scratch_flagged() -> bool:
    """True when the CUDA kernel stores every scratch element with its epoch (a TILES_FLAGS build: the element
    of byte offset o sits at 2 * o, as an 8-byte {fp32, epoch} or a 4-byte {bf16, epoch & 0xffff} word)."""
    return bool(getattr(importlib.import_module("tiles_ext._C"), "FLAGGED_SCRATCH", 0))


class TileRuntime:
    def __init__(self, plan: Plan, device):
        self.plan = plan
        self.device = torch.device(device)
        self.header = plan.header_words()
        self.plan_tensor = torch.from_numpy(plan.to_blob()).to(self.device)
        # A flagged CUDA arena is twice the plan's (a few MB): every element carries its epoch.
        self.flagged = self.device.type == "cuda" and cuda_scratch_flagged()
        self.scratch = torch.zeros((2 if self.flagged else 1) * plan.header["scratch_bytes"], dtype=torch.uint8,
                                   device=self.device)
        self.state = torch.zeros(plan.header["state_words"], dtype=torch.int32, device=self.device)

    def step(self, weights, k_cache, v_cache, input_ids, position, inv_freq, rope_scale: float, num_steps: int = 1,
             eos_ids=(), order_seed: int = 0):
        """Decode num_steps tokens. input_ids / position: int64 device tensors of one element (the token and
        its cache index). Returns (logits fp32 [num_steps, vocab], tokens int64 [num_steps], -1 after a stop)."""
        return torch.ops.tiles.decode_step(
            self.plan_tensor, self.header, weights, k_cache, v_cache, self.scratch, self.state,
            input_ids, position, inv_freq, float(rope_scale), int(num_steps), [int(e) for e in eos_ids],
            int(order_seed))

    def check_error(self) -> None:
        """Raise TileKernelError if a launch recorded an error in the state (host sync: call where the caller
        syncs anyway). The message names the error, the worker and the tile."""
        check_state(self.state, self.plan)
