"""Shared pieces of the op's parity tests: tiny random models of every family, teacher-forced decoding through the
op and through Transformers, and the BF16-calibrated error measures.

Calibration: both the op (BF16 weights, fp32 accumulation) and Transformers in BF16 are compared against
Transformers in fp32 running the same (BF16-valued) weights upcast. The op passes when its relative logits error
is at most 1.5x Transformers-BF16's own and its top-1 agreement with fp32 is at most one point lower.
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, StaticCache

import tiles_ext  # noqa: F401  (registers torch.ops.tiles)
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

ERR_RATIO_MAX = 1.5
TOP1_SLACK = 0.01

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500000.0}


def tiny_config(hidden, heads, kv, head_dim, intermediate, layers, vocab=1000, tied=False, llama3=False,
                eps=1e-5) -> LlamaConfig:
    kw = dict(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
              intermediate_size=intermediate, num_hidden_layers=layers, vocab_size=vocab, rms_norm_eps=eps,
              tie_word_embeddings=tied, max_position_embeddings=1024, initializer_range=0.06)
    if llama3:
        kw["rope_parameters"] = dict(LLAMA3_ROPE)
    return LlamaConfig(**kw)


def family_config(model_type, hidden, heads, kv, head_dim, intermediate, layers, vocab=1000, tied=False, eps=1e-5,
                  **extra):
    """A tiny config of any served model_type (Qwen2Config, Phi3Config, ...); `extra` adds or overrides fields
    (sliding_window, rope_parameters, ...)."""
    kw = dict(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
              intermediate_size=intermediate, num_hidden_layers=layers, vocab_size=vocab, rms_norm_eps=eps,
              tie_word_embeddings=tied, max_position_embeddings=1024, initializer_range=0.06,
              pad_token_id=None)  # Phi3Config's default pad id 32000 lies outside a tiny vocabulary
    kw.update(extra)
    return AutoConfig.for_model(model_type, **kw)


def tiny_model(config, seed: int = 0):
    """BF16 random model of the config's family with non-trivial norm weights (q/k norms included), so logits are
    spread out rather than nearly tied, and non-zero biases (Transformers initialises them to zero)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM._model_mapping[type(config)](config).eval()
    with torch.no_grad():
        for mod in model.modules():
            if hasattr(mod, "variance_epsilon"):
                mod.weight.uniform_(0.5, 1.5)
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.uniform_(-0.5, 0.5)
    return model.to(torch.bfloat16)


def fp32_twin(model16):
    """The same weights (BF16 values) upcast to fp32, eager attention: the reference."""
    m = copy.deepcopy(model16).float()
    m.config._attn_implementation = "eager"
    return m.eval()


# Transformers renamed `past_key_values` to `cache` in 5.2x (the old name warns); the GPU machine has 5.17.
CACHE_KW = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


def forward(model, ids, cache):
    """model(ids) continuing `cache` (a StaticCache it advances)."""
    return model(ids, use_cache=True, **{CACHE_KW: cache})


def prefill(model16, prompt_ids, max_len) -> StaticCache:
    cache = StaticCache(config=model16.config, max_cache_len=max_len)
    with torch.no_grad():
        forward(model16, prompt_ids, cache)
    return cache


def cache_lists(cache: StaticCache):
    return [l.keys for l in cache.layers], [l.values for l in cache.layers]


@dataclass
class Bound:
    """A model bound to a plan: the op's arguments that do not change per step."""
    runtime: TileRuntime
    weights: list
    inv_freq: torch.Tensor
    rope_scale: float

    @classmethod
    def of(cls, model16, plan):
        inv, scale = rope_tables(model16)
        return cls(TileRuntime(plan, "cpu"), model_weights(model16, plan.shape), inv, scale)

    def step(self, cache, token: int, position: int, num_steps=1, eos_ids=(), order_seed=0):
        k, v = cache_lists(cache)
        return self.runtime.step(self.weights, k, v, torch.tensor([int(token)]), torch.tensor([int(position)]),
                                 self.inv_freq, self.rope_scale, num_steps, eos_ids, order_seed)


def teacher_forced(model16, plan, ids: torch.Tensor, prompt_len: int, ref32=None, order_seed=0):
    """Logits for feeding ids[prompt_len:] one token at a time after a prefill of ids[:prompt_len].

    Returns dict(op, hf, ref) of fp32 [T, vocab]: the op (writing K/V into a StaticCache prefilled by the BF16
    model), Transformers BF16 decoding with its own StaticCache, and Transformers fp32 over the whole sequence.
    """
    ids = ids.view(1, -1)
    T = ids.shape[1] - prompt_len
    max_len = ids.shape[1] + 1
    ref32 = ref32 if ref32 is not None else fp32_twin(model16)
    with torch.no_grad():
        ref = ref32(ids).logits[0, prompt_len:].float()
        cache = prefill(model16, ids[:, :prompt_len], max_len)
        hf = torch.stack([forward(model16, ids[:, prompt_len + i:prompt_len + i + 1], cache).logits[0, -1].float()
                          for i in range(T)])
    cache = prefill(model16, ids[:, :prompt_len], max_len)
    bound = Bound.of(model16, plan)
    op = torch.stack([bound.step(cache, ids[0, prompt_len + i], prompt_len + i, order_seed=order_seed)[0][0]
                      for i in range(T)])
    return {"op": op, "hf": hf, "ref": ref}


def rel_err(x, ref) -> float:
    return float((x - ref).norm() / ref.norm())


def top1(x, ref) -> float:
    return float((x.argmax(-1) == ref.argmax(-1)).float().mean())


def parity_report(r) -> dict:
    op_err, hf_err = rel_err(r["op"], r["ref"]), rel_err(r["hf"], r["ref"])
    return {"op_err": op_err, "hf_err": hf_err, "ratio": op_err / hf_err,
            "op_top1": top1(r["op"], r["ref"]), "hf_top1": top1(r["hf"], r["ref"])}


def assert_parity(rep: dict, what: str):
    assert torch.isfinite(torch.tensor(rep["op_err"])), f"{what}: op logits not finite"
    assert rep["op_err"] <= ERR_RATIO_MAX * rep["hf_err"], (
        f"{what}: op relative error {rep['op_err']:.5f} > {ERR_RATIO_MAX} x Transformers-BF16's {rep['hf_err']:.5f}")
    assert rep["op_top1"] >= rep["hf_top1"] - TOP1_SLACK, (
        f"{what}: op top-1 agreement {rep['op_top1']:.3f} < Transformers-BF16's {rep['hf_top1']:.3f} - "
        f"{TOP1_SLACK}")
