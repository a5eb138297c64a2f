"""The CUDA kernel on every family's shapes and numeric features (skipped without CUDA).

Tiny random BF16 configs: Llama at head_dim 64 (G 4) and 128, Qwen2 with q/k/v biases at G 7 (head_dim 64 and 128),
Qwen3 with per-head q/k RMSNorms at head_dim 128 with a q width other than hidden (and at head_dim 64 / G 8 and 96 /
G 5: the norm runs out of line there, inlined in the head_dim-128 counter kernel), Mistral at head_dim 128, Phi-3 at
head_dim 96 and G 1 (its fused projections read as row views). For each:
  - the CUDA op agrees with the CPU reference executor on the same plan and inputs (logits and the K/V rows it wrote,
    relative error < 1e-2, as tests/test_cuda_kernel.py's long-context check) over 16 decode steps, with either
    hand-off, at a context inside one attention chunk (partition 0 holds every position, the local merge) and at one
    across several chunks of two partitions (the double buffer, a short tail, the new row in a later chunk);
  - counter and flag hand-offs give the same bits (logits, tokens, K/V rows) over 8-step launches at both contexts,
    and each gives the same bits run to run;
  - teacher-forced over 64 steps, the op's logits error against Transformers fp32 (same weights, upcast) is at most
    1.5x Transformers-BF16's own on the GPU (tests/parity_helpers.py's calibration).
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

import tiles_ext  # noqa: E402,F401
from parity_helpers import (ERR_RATIO_MAX, family_config, forward, fp32_twin, prefill, rel_err,  # noqa: E402
                            tiny_model, top1)
from tiles_ext.errors import check_state  # noqa: E402
from tiles_ext.planner.format import ATTN_CHUNK_ELEMS  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables  # noqa: E402

DEV = "cuda"
HANDOFFS = ("counters", "flags")

# id: (model_type, hidden, heads, kv, head_dim, intermediate, layers, tied, extra config fields)
CASES = {
    "llama-g4-hd64": ("llama", 256, 8, 2, 64, 512, 2, False, {}),
    "llama-g4-hd128": ("llama", 512, 8, 2, 128, 768, 2, True, {}),
    # Qwen2.5-0.5B's attention (14 heads over 2 KV heads of 64), biases, tied head.
    "qwen2-g7-hd64": ("qwen2", 896, 14, 2, 64, 512, 1, True, {}),
    "qwen2-g7-hd128": ("qwen2", 896, 7, 1, 128, 640, 2, False, {}),
    # Qwen3-0.6B's proportions: q width 2 x hidden, q/k norms, tied head.
    "qwen3-g2-hd128-q512": ("qwen3", 256, 4, 2, 128, 512, 2, True, {}),
    "qwen3-g8-hd64-q512": ("qwen3", 384, 8, 1, 64, 768, 1, False, {}),
    "qwen3-g5-hd96": ("qwen3", 320, 10, 2, 96, 640, 1, False, {}),
    # Nemo-style head_dim 128, q width 1024 at hidden 512, no window.
    "mistral-g4-hd128-q1024": ("mistral", 512, 8, 2, 128, 1024, 2, False, {"sliding_window": None}),
    # Phi-3-mini's attention: MHA at head_dim 96.
    "phi3-g1-hd96": ("phi3", 384, 4, 4, 96, 768, 2, False, {}),
}
CONTEXTS = ("one-chunk", "chunks")
STEPS = 16
PROMPT = 6


def _model(case, seed=0):
    model_type, h, nh, kv, hd, inter, layers, tied, extra = CASES[case]
    cfg = family_config(model_type, h, nh, kv, hd, inter, layers, tied=tied, **extra)
    return cfg, tiny_model(cfg, seed=seed + layers)


def _plans(cfg, ctx):
    """(GPU plan, the same tiles with a GPU-agnostic header for the CPU executor) on 17 workers, whose QKV cuts start
    some tiles at an odd row (Qwen2's bias words then straddle a tile's first row). "chunks": two attention
    partitions, never one alone (attn_single 0), so that each partition holds several chunks."""
    kw = dict(attn_partitions=2, attn_single=0) if ctx == "chunks" else {}
    workers = 17
    gpu = GpuTarget.of_device(DEV)
    return build_plan(cfg, workers=workers, gpu=gpu, **kw), build_plan(cfg, workers=workers, **kw)


def _positions(cfg, ctx):
    """First decode position: inside the first chunk, or three chunks of each of the two partitions plus a tail."""
    return PROMPT if ctx == "one-chunk" else 6 * (ATTN_CHUNK_ELEMS // cfg.head_dim) + 37


class Op:
    """A model bound to a plan on a device, with its own copy of a K/V cache."""

    def __init__(self, model, plan, device, k, v, handoff=None):
        self.plan = plan
        self.rt = TileRuntime(plan, device, handoff)
        self.w = [w.to(device) for w in model_weights(model)]
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(device)
        self.device = device
        self.k = [x.to(device).clone() for x in k]
        self.v = [x.to(device).clone() for x in v]

    def step(self, token, position, n=1):
        ids = torch.tensor([int(token)], device=self.device)
        pos = torch.tensor([int(position)], device=self.device)
        return self.rt.step(self.w, self.k, self.v, ids, pos, self.inv, self.scale, n, [])


def _cache(model, cfg, ctx, ids):
    """The K/V cache before the first decode step (on the CPU): the BF16 model's prefill of the prompt, or random rows
    for the long context (agreement and bit identity need no real prefill)."""
    max_len = _positions(cfg, ctx) + STEPS + 8
    if ctx == "one-chunk":
        cache = prefill(model.to(DEV), ids[:, :PROMPT].to(DEV), max_len)
        return [l.keys.cpu() for l in cache.layers], [l.values.cpu() for l in cache.layers]
    g = torch.Generator().manual_seed(11)
    shp = (1, cfg.num_key_value_heads, max_len, cfg.head_dim)
    k = [torch.randn(shp, generator=g).to(torch.bfloat16) for _ in range(cfg.num_hidden_layers)]
    v = [torch.randn(shp, generator=g).to(torch.bfloat16) for _ in range(cfg.num_hidden_layers)]
    return k, v


def _cpu_op_available():
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("tiles::decode_step", "CPU")
    except Exception:
        return False


@pytest.mark.skipif(not _cpu_op_available(), reason="CPU reference executor not built")
@pytest.mark.parametrize("handoff", HANDOFFS)
@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("case", list(CASES))
def test_cuda_matches_cpu_executor(case, ctx, handoff):
    cfg, model = _model(case)
    plan_g, plan_c = _plans(cfg, ctx)
    ids = torch.randint(0, cfg.vocab_size, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(5))
    k, v = _cache(model, cfg, ctx, ids)
    og, oc = Op(model, plan_g, DEV, k, v, handoff), Op(model, plan_c, "cpu", k, v)
    assert og.rt.handoff == handoff
    pos0 = _positions(cfg, ctx)
    lg, lc = [], []
    for i in range(STEPS):
        tok = int(ids[0, PROMPT + i])
        lg.append(og.step(tok, pos0 + i)[0][0].cpu())
        lc.append(oc.step(tok, pos0 + i)[0][0])
    check_state(og.rt.state, plan_g)
    lg, lc = torch.stack(lg), torch.stack(lc)
    d = rel_err(lg, lc)
    rows = slice(pos0, pos0 + STEPS)
    kd = max(rel_err(a[:, :, rows].cpu().float(), b[:, :, rows].float()) for a, b in zip(og.k + og.v, oc.k + oc.v))
    print(f"{case} {ctx} {handoff}: cuda-vs-cpu logits {d:.2e}, new K/V rows {kd:.2e}, top-1 agree {top1(lg, lc):.3f}")
    assert torch.isfinite(lg).all(), f"{case} {ctx} {handoff}: CUDA logits not finite"
    assert d < 1e-2, f"{case} {ctx} {handoff}: CUDA vs CPU logits differ by {d:.2e}"
    assert kd < 2e-2, f"{case} {ctx} {handoff}: the K/V rows written differ by {kd:.2e}"
    untouched = slice(0, pos0)
    assert all(torch.equal(a[:, :, untouched].cpu(), b[:, :, untouched]) for a, b in zip(og.k + og.v, oc.k + oc.v))


def _launch(model, plan, handoff, k, v, tok, pos, n=8):
    """One n-token launch from the given cache: (logits, tokens, the K/V rows it wrote), all on the CPU."""
    op = Op(model, plan, DEV, k, v, handoff)
    assert op.rt.handoff == handoff
    logits, tokens = op.step(tok, pos, n)
    check_state(op.rt.state, plan)
    return logits.cpu(), tokens.cpu(), [x[:, :, pos:pos + n].cpu() for x in op.k + op.v]


def _same_bits(a, b):
    (la, ta, ca), (lb, tb, cb) = a, b
    return (torch.equal(ta, tb) and torch.equal(la.view(torch.int32), lb.view(torch.int32))
            and all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(ca, cb)))


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("case", list(CASES))
def test_handoffs_and_runs_are_bit_identical(case, ctx):
    cfg, model = _model(case)
    plan, _ = _plans(cfg, ctx)
    ids = torch.randint(0, cfg.vocab_size, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(9))
    k, v = _cache(model, cfg, ctx, ids)
    pos0, tok0 = _positions(cfg, ctx), int(ids[0, PROMPT])
    out = {(h, run): _launch(model, plan, h, k, v, tok0, pos0) for h in HANDOFFS for run in range(2)}
    assert torch.isfinite(out["counters", 0][0]).all()
    assert _same_bits(out["counters", 0], out["counters", 1]), f"{case} {ctx}: counters differ run to run"
    assert _same_bits(out["flags", 0], out["flags", 1]), f"{case} {ctx}: flags differ run to run"
    assert _same_bits(out["counters", 0], out["flags", 0]), f"{case} {ctx}: counters and flags differ"


def _teacher_forced(model16, plan, ids, prompt_len, handoff=None):
    """Logits of the op (CUDA), Transformers BF16 and Transformers fp32 for ids[prompt_len:] fed one at a time."""
    ids = ids.view(1, -1).to(DEV)
    T = ids.shape[1] - prompt_len
    max_len = ids.shape[1] + 1
    with torch.no_grad():
        ref32 = fp32_twin(model16)
        ref = ref32(ids).logits[0, prompt_len:].float().cpu()
        del ref32
        cache = prefill(model16, ids[:, :prompt_len], max_len)
        hf = torch.stack([forward(model16, ids[:, prompt_len + i:prompt_len + i + 1], cache).logits[0, -1].float()
                          for i in range(T)]).cpu()
    cache = prefill(model16, ids[:, :prompt_len], max_len)
    op = Op(model16, plan, DEV, [l.keys for l in cache.layers], [l.values for l in cache.layers], handoff)
    got = torch.stack([op.step(ids[0, prompt_len + i], prompt_len + i)[0][0].cpu() for i in range(T)])
    check_state(op.rt.state, plan)
    return got, hf, ref


@pytest.mark.parametrize("case", list(CASES))
def test_parity_vs_transformers(case):
    cfg, model = _model(case)
    model = model.to(DEV)
    plan = build_plan(cfg, workers=torch.cuda.get_device_properties(0).multi_processor_count,
                      gpu=GpuTarget.of_device(DEV))
    ids = torch.randint(0, cfg.vocab_size, (PROMPT + 64,), generator=torch.Generator().manual_seed(1))
    op, hf, ref = _teacher_forced(model, plan, ids, PROMPT)
    op_err, hf_err = rel_err(op, ref), rel_err(hf, ref)
    print(f"{case}: op_err {op_err:.4f}, hf_err {hf_err:.4f}, ratio {op_err / hf_err:.3f}, op_top1 "
          f"{top1(op, ref):.3f}, hf_top1 {top1(hf, ref):.3f}")
    assert torch.isfinite(op).all(), f"{case}: op logits not finite"
    assert op_err <= ERR_RATIO_MAX * hf_err, (
        f"{case}: op relative error {op_err:.5f} > {ERR_RATIO_MAX} x Transformers-BF16's {hf_err:.5f}")
