"""Writes a Transformers Llama-family model as a GGUF file (BF16) for llama.cpp, without the `gguf` package
(it is not installed on the GPU machine).

The tensors are the model's own (so llama.cpp decodes the same random or real weights), with the Q/K rows
permuted the way llama.cpp's converter does (HF rotate-half RoPE -> llama.cpp's interleaved pairs) and
Llama-3 frequency factors written as rope_freqs.weight. The vocabulary is a placeholder SentencePiece list of
the right size: llama-bench feeds token ids, never text.
"""
from __future__ import annotations

import struct

import numpy as np
import torch

GGUF_MAGIC = 0x46554747  # "GGUF" little-endian
GGUF_VERSION = 3
ALIGNMENT = 32
# gguf value types
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
# ggml tensor types
GGML_F32, GGML_BF16 = 0, 30


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, vtype: int, value) -> bytes:
    out = _str(key) + struct.pack("<I", vtype)
    if vtype == STRING:
        return out + _str(value)
    if vtype == ARRAY:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        if etype == STRING:
            return out + b"".join(_str(s) for s in items)
        fmt = {F32: "<f4", I32: "<i4", U32: "<u4"}[etype]
        return out + np.asarray(items, dtype=fmt).tobytes()
    fmt = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}[vtype]
    return out + struct.pack(fmt, value)


def _permute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Inverse of HF's conversion permute: rows of each head from [first half, second half] to interleaved."""
    out, inp = w.shape
    hd = out // n_head
    return w.reshape(n_head, 2, hd // 2, inp).transpose(1, 2).reshape(out, inp)


def _rope_freq_factors(model) -> torch.Tensor | None:
    """llama.cpp divides its base frequencies by these; HF folds Llama-3 scaling into inv_freq."""
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if (rope.get("rope_type") or rope.get("type")) != "llama3":
        return None
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    base = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    scaled = model.model.rotary_emb.inv_freq.detach().double().cpu()
    return (base / scaled).float()


def tensors_of(model):
    """(gguf name, tensor) in llama.cpp's naming for a Llama-family Transformers model."""
    cfg = model.config
    m = model.model
    yield "token_embd.weight", m.embed_tokens.weight
    for i, layer in enumerate(m.layers):
        a, mlp = layer.self_attn, layer.mlp
        yield f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight
        yield f"blk.{i}.attn_q.weight", _permute_qk(a.q_proj.weight, cfg.num_attention_heads)
        yield f"blk.{i}.attn_k.weight", _permute_qk(a.k_proj.weight, cfg.num_key_value_heads)
        yield f"blk.{i}.attn_v.weight", a.v_proj.weight
        yield f"blk.{i}.attn_output.weight", a.o_proj.weight
        yield f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight
        yield f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight
        yield f"blk.{i}.ffn_up.weight", mlp.up_proj.weight
        yield f"blk.{i}.ffn_down.weight", mlp.down_proj.weight
    yield "output_norm.weight", m.norm.weight
    if not cfg.tie_word_embeddings:
        yield "output.weight", model.lm_head.weight
    f = _rope_freq_factors(model)
    if f is not None:
        yield "rope_freqs.weight", f


def metadata(model) -> list[bytes]:
    cfg = model.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    n = cfg.vocab_size
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"t{i}" for i in range(len(tokens), n)]
    types = [2, 3, 3] + [6] * 256 + [1] * (n - 259)
    return [
        _kv("general.architecture", STRING, "llama"),
        _kv("general.name", STRING, "tiles-bench"),
        _kv("general.alignment", U32, ALIGNMENT),
        _kv("llama.context_length", U32, int(cfg.max_position_embeddings)),
        _kv("llama.embedding_length", U32, int(cfg.hidden_size)),
        _kv("llama.block_count", U32, int(cfg.num_hidden_layers)),
        _kv("llama.feed_forward_length", U32, int(cfg.intermediate_size)),
        _kv("llama.attention.head_count", U32, int(cfg.num_attention_heads)),
        _kv("llama.attention.head_count_kv", U32, int(cfg.num_key_value_heads)),
        _kv("llama.attention.key_length", U32, int(hd)),
        _kv("llama.attention.value_length", U32, int(hd)),
        _kv("llama.rope.dimension_count", U32, int(hd)),
        _kv("llama.rope.freq_base", F32, float(theta)),
        _kv("llama.attention.layer_norm_rms_epsilon", F32, float(cfg.rms_norm_eps)),
        _kv("llama.vocab_size", U32, int(n)),
        _kv("tokenizer.ggml.model", STRING, "llama"),
        _kv("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        _kv("tokenizer.ggml.scores", ARRAY, (F32, [0.0] * n)),
        _kv("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        _kv("tokenizer.ggml.unknown_token_id", U32, 0),
        _kv("tokenizer.ggml.bos_token_id", U32, 1),
        _kv("tokenizer.ggml.eos_token_id", U32, 2),
        _kv("tokenizer.ggml.add_bos_token", BOOL, False),
    ]


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def write_gguf(model, path) -> int:
    """Writes the file; returns its size in bytes. Matrices go out as BF16; 1-D tensors (norm weights, rope
    factors) as F32, as llama.cpp's own converter writes them (its CUDA kernels expect F32 there)."""
    named = [(name, t.detach() if t.dim() > 1 else t.detach().float()) for name, t in tensors_of(model)]
    kvs = metadata(model)
    infos, offset = [], 0
    for name, t in named:
        gtype = GGML_F32 if t.dtype == torch.float32 else GGML_BF16
        esize = 4 if gtype == GGML_F32 else 2
        dims = list(reversed(t.shape))  # ggml ne[0] is the fastest-varying (columns)
        infos.append(_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", gtype, offset))
        offset += t.numel() * esize
        offset += _pad(offset)
    with open(path, "wb") as f:
        f.write(struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(named), len(kvs)))
        for kv in kvs:
            f.write(kv)
        for info in infos:
            f.write(info)
        f.write(b"\0" * _pad(f.tell()))
        for name, t in named:
            if t.dtype != torch.float32:
                t = t.to(torch.bfloat16)
            raw = t.contiguous().cpu().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).numpy()
            f.write(raw.tobytes())
            f.write(b"\0" * _pad(f.tell()))
        return f.tell()
