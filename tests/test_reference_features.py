"""The layer recipe's numeric features in the CPU reference executor (planner/format.py, docs/numerics.md): the
q/k/v bias of QKV tiles (weight2) and the per-head q/k RMSNorm of ATTN tiles (norm, weight2), against a float64
PyTorch reference of one decode step written from docs/numerics.md; the validator's checks of those fields; and
Llama plans (no features) computing exactly the bits they did before the features existed."""
from __future__ import annotations

import hashlib
import math

import pytest
import torch

import tiles_ext  # noqa: F401  (registers torch.ops.tiles)
from tiles_ext.planner import build_plan
from tiles_ext.planner import format as fmt
from tiles_ext.planner.format import TILE, Op
from tiles_ext.planner.shape import ModelShape
from tiles_ext.planner.weights import WeightLayout
from tiles_ext.runtime import TileRuntime

TF = {f: i for i, (f, _) in enumerate(TILE.fields)}
POS = 9       # the decoded token's cache index; positions 0..POS-1 hold random (already rotated) K/V
MAX_LEN = 16
TOKEN = 17


def model_shape(**kw) -> ModelShape:
    base = dict(num_layers=2, hidden=128, num_heads=4, num_kv_heads=2, head_dim=64, intermediate=256, vocab=200,
                eps=1e-6, tied_lm_head=False, rope_type="default", rope_theta=10000.0)
    return ModelShape(**dict(base, **kw))


def make_weights(shape: ModelShape, seed: int = 0) -> dict:
    """Random bf16 weights by (slot, layer): matrices ~ N(0, 1/cols) (unit-scale outputs), norm weights in
    [0.5, 1.5], biases ~ N(0, 1) (as large as the projections, so that a missing bias shows)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for slot, layer in WeightLayout(shape).entries:
        rows, cols = fmt.slot_shape(slot, shape)
        if cols:
            w = torch.randn(rows, cols, generator=g) / math.sqrt(cols)
        elif slot.endswith("_bias"):
            w = torch.randn(rows, generator=g)
        else:
            w = 0.5 + torch.rand(rows, generator=g)
        out[slot, layer] = w.to(torch.bfloat16)
    return out


def weights_list(shape, weights):
    return [weights[e] for e in WeightLayout(shape).entries]


def random_cache(shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    mk = lambda: (torch.randn(1, shape.num_kv_heads, MAX_LEN, shape.head_dim, generator=g)).to(torch.bfloat16)
    return [mk() for _ in range(shape.num_layers)], [mk() for _ in range(shape.num_layers)]


def inv_freq(shape):
    return 1.0 / (shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim))


def run_op(plan, shape, weights, k, v, order_seed=0, num_steps=1):
    rt = TileRuntime(plan, "cpu")
    logits, tokens = rt.step(weights_list(shape, weights), k, v, torch.tensor([TOKEN]), torch.tensor([POS]),
                             inv_freq(shape), 1.0, num_steps, (), order_seed)
    return logits, tokens


# --- float64 reference of one step (docs/numerics.md: bf16 where the table says bf16, else exact) -------------

def r16(x):
    return x.to(torch.bfloat16).to(torch.float64)


def rmsnorm(x, w, eps):
    """HF order over the last dim: bf16(bf16(x * rsqrt(mean(x^2) + eps)) * w)."""
    return r16(r16(x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)) * w.double())


def rope(x, pos, inv):
    ang = pos * inv.double()
    c, s = torch.cos(ang), torch.sin(ang)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def reference_step(shape, weights, k_cache, v_cache, features=True):
    """Logits of one decode step at POS, and each layer's new (rotated, bf16) K row. features=False leaves the
    bias and the q/k norms out, so that a test can tell that the op applies them."""
    W = lambda s, l=-1: weights[s, l].double()
    hd, G, eps = shape.head_dim, shape.group, shape.eps
    inv = inv_freq(shape)
    x = W("embed")[TOKEN]
    new_k = []
    for l in range(shape.num_layers):
        h = rmsnorm(x, W("input_norm", l), eps)
        proj = {}
        for s in "qkv":
            y = W(s, l) @ h
            if features and shape.qkv_bias:
                y = y + W(f"{s}_bias", l)
            proj[s] = r16(y).view(-1, hd)
        q, k, v = proj["q"], proj["k"], proj["v"]
        if features and shape.qk_norm:
            q, k = rmsnorm(q, W("q_norm", l), eps), rmsnorm(k, W("k_norm", l), eps)
        k_rot = r16(rope(k, POS, inv))
        new_k.append(k_rot)
        K = k_cache[l][0].double().clone()
        V = v_cache[l][0].double().clone()
        K[:, POS], V[:, POS] = k_rot, v
        q_rot = rope(q, POS, inv)
        attn = []
        for qh in range(shape.num_heads):
            kvh = qh // G
            scores = (K[kvh, :POS + 1] @ q_rot[qh]) / math.sqrt(hd)
            attn.append(r16(torch.softmax(scores, 0) @ V[kvh, :POS + 1]))
        x = x + W("o", l) @ torch.cat(attn)
        h2 = rmsnorm(x, W("post_norm", l), eps)
        g, u = W("gate", l) @ h2, W("up", l) @ h2
        x = x + W("down", l) @ r16(g * torch.sigmoid(g) * u)
    return W("lm_head") @ rmsnorm(x, W("final_norm"), eps), new_k


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


FEATURES = {
    "qkv_bias": dict(qkv_bias=True),
    "qk_norm": dict(qk_norm=True),
    "qk_norm_wide_q": dict(qk_norm=True, num_heads=6, head_dim=64, hidden=128),  # q width 384 != hidden
    "both_gqa3": dict(qkv_bias=True, qk_norm=True, num_heads=6, num_kv_heads=2),
    "llama": dict(),
}
# With the bf16 roundings at the op's points only fp32-vs-fp64 sums (~1e-7) and rare one-ulp flips of a rounding
# remain: a quarter of a bf16 ulp (2^-8) bounds them, while a missing feature moves the logits by 0.18 or more.
TOL = 1e-3


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_one_step_matches_the_float64_reference(name):
    shape = model_shape(**FEATURES[name])
    plan = build_plan(shape, workers=7)
    weights = make_weights(shape)
    k, v = random_cache(shape)
    k0, v0 = [t.clone() for t in k], [t.clone() for t in v]
    logits, tokens = run_op(plan, shape, weights, k, v)
    ref, ref_k = reference_step(shape, weights, k0, v0)
    assert rel(logits[0], ref) < TOL
    assert int(tokens[0]) == int(ref.argmax())
    for l in range(shape.num_layers):
        # The new K row enters the cache normalised (k_norm) and rotated, as bf16.
        assert rel(k[l][0, :, POS], ref_k[l]) < TOL
        assert torch.equal(k[l][0, :, :POS], k0[l][0, :, :POS])
    if shape.qkv_bias or shape.qk_norm:
        plain, _ = reference_step(shape, weights, k0, v0, features=False)
        assert rel(logits[0], plain) > 20 * TOL, "the features change the logits far beyond the tolerance"


@pytest.mark.parametrize("name", ["both_gqa3", "qk_norm_wide_q"])
def test_features_are_schedule_independent(name):
    shape = model_shape(**FEATURES[name])
    plan = build_plan(shape, workers=5)
    weights = make_weights(shape, seed=3)
    k, v = random_cache(shape, seed=4)
    ref = run_op(plan, shape, weights, [t.clone() for t in k], [t.clone() for t in v], num_steps=3)
    for seed in (1, 2):
        got = run_op(plan, shape, weights, [t.clone() for t in k], [t.clone() for t in v], seed, num_steps=3)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


# --- the validator's checks of the feature fields -------------------------------------------------------------

def first_tile(plan, op, **fields):
    return next(i for i, t in enumerate(plan.tiles)
                if t[TF["op"]] == op and all(t[TF[f]] == v for f, v in fields.items()))


def refused(plan, shape, tile, field, value, match):
    blob = torch.from_numpy(plan.to_blob())
    blob[plan.header["tiles_offset"] + tile * TILE.words + TF[field]] = value
    rt = TileRuntime(plan, "cpu")
    rt.plan_tensor = blob
    k, v = random_cache(shape)
    with pytest.raises(RuntimeError, match=match):
        rt.step(weights_list(shape, make_weights(shape)), k, v, torch.tensor([TOKEN]), torch.tensor([POS]),
                inv_freq(shape), 1.0)


def test_bad_feature_fields_are_refused():
    shape = model_shape(qkv_bias=True, qk_norm=True)
    plan = build_plan(shape, workers=7)
    lay = WeightLayout(shape)
    q_tile = first_tile(plan, Op.QKV, layer=1, weight=lay.index(1, "q"))
    attn = first_tile(plan, Op.ATTN, layer=1)
    refused(plan, shape, q_tile, "weight2", lay.index(1, "k_bias"),
            rf"tile {q_tile} \(qkv, layer 1\) weight2 \(bias\) = weight \d+ is k_bias of layer 1 \[128, 0\], the "
            r"tile needs q_bias of its layer, a vector of 256 elements")
    refused(plan, shape, q_tile, "weight2", lay.index(0, "q_bias"), r"is q_bias of layer 0 \[256, 0\], the tile needs")
    refused(plan, shape, q_tile, "weight2", lay.index(1, "o"), r"weight2 \(bias\) = weight \d+ is o of layer 1")
    refused(plan, shape, attn, "norm", lay.index(1, "k_norm"), r"norm \(q_norm\) = weight \d+ is k_norm of layer 1")
    refused(plan, shape, attn, "weight2", lay.index(1, "v_bias"), r"weight2 \(k_norm\) = weight \d+ is v_bias")
    refused(plan, shape, attn, "weight2", 10_000, r"weight2 \(k_norm\) = 10000 is not a weight index")
    # A Llama plan (no bias slots): a QKV tile's weight2 may only be -1 or a bias.
    plain = model_shape()
    plain_plan = build_plan(plain, workers=7)
    refused(plain_plan, plain, first_tile(plain_plan, Op.QKV), "weight2", WeightLayout(plain).index(0, "input_norm"),
            r"weight2 \(bias\) = weight 0 is input_norm of layer 0")


# --- Llama plans compute the bits they computed before the features ------------------------------------------

# sha256 of (logits, tokens, the new K/V rows) of three steps of this fixed Llama-shape plan, computed by the
# executor before the features existed. Fixed partitions: the bits depend on the arithmetic only (a planner that
# cut the attention otherwise would merge other partials). Regenerate only for a deliberate numeric change.
LLAMA_GOLDEN = "ed5441f6fcab889d81d63a1de2b3861ec793491c7c69ddf35c9beb5ba2549da9"


def llama_bits() -> str:
    shape = model_shape(num_layers=2, hidden=192, num_heads=6, num_kv_heads=2, intermediate=384, vocab=300)
    plan = build_plan(shape, workers=6, attn_partitions=2, attn_granule=4, attn_single=0)
    weights = make_weights(shape, seed=11)
    k, v = random_cache(shape, seed=12)
    logits, tokens = run_op(plan, shape, weights, k, v, num_steps=3)
    h = hashlib.sha256()
    for t in [logits, tokens] + [c[0, :, POS:POS + 3] for c in k + v]:
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.int64
                 else t.numpy().tobytes())
    return h.hexdigest()


def test_llama_plans_are_bit_identical_to_the_executor_without_features():
    assert llama_bits() == LLAMA_GOLDEN
