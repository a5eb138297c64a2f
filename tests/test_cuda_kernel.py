"""The persistent CUDA kernels of tiles::decode_step (skipped without CUDA).

A kernel per hand-off (counters or flag-in-data words) and head_dim (64, 96, 128: the attention's warp path, G <= 8).
Parity: teacher-forced against Transformers on the GPU, calibrated for BF16 (op error vs HF fp32 at most 1.5x
Transformers-BF16's own), on tiny random Llama configs of head_dim 64 and 128 and G 1-8 with both hand-offs, a
SmolLM2-135M-shaped and the Llama-3.2-1B config (random BF16 weights, full size); the other families' shapes and
numeric features: test_cuda_families.py. Agreement with the CPU reference executor on the same plan and inputs. Bit-identical results across repeated
runs, between single-token and multi-token launches and between the two hand-offs. opcheck, CUDA-graph capture and
torch.compile(mode="reduce-overhead"). Errors: an unsatisfiable wait raises a timeout naming worker and tile
instead of hanging; bad tokens, a full cache, a wrong arena, a layout beyond shared memory and a plan for another
GPU raise clear errors, and so does a shape the kernel does not serve (head_dim, G), by name.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

if torch.cuda.is_available():
    import tiles_ext  # noqa: F401
    from parity_helpers import fp32_twin, rel_err, tiny_config, tiny_model, top1
    from tiles_ext.errors import check_state
    from tiles_ext.models import load_config, random_model
    from tiles_ext.planner import format as fmt
    from tiles_ext.planner.plan import GpuTarget, build_plan
    from tiles_ext.runtime import TileRuntime, model_weights, rope_tables
    from transformers import StaticCache

DEV = "cuda"
H = {name: i for i, (name, _) in enumerate(fmt.HEADER_FIELDS)} if torch.cuda.is_available() else {}


def _workers():
    return torch.cuda.get_device_properties(0).multi_processor_count


def _gpu():
    return GpuTarget.of_device(DEV)


class Bound:
    """A model on the GPU bound to a plan: runtime, weights, RoPE tables."""

    def __init__(self, model, plan, device=DEV, handoff=None):
        self.model = model
        self.plan = plan
        self.rt = TileRuntime(plan, device, handoff)
        self.weights = [w.to(device) for w in model_weights(model)]
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(device)
        self.device = device

    def step(self, cache_k, cache_v, token, position, num_steps=1, eos_ids=()):
        ids = token if torch.is_tensor(token) else torch.tensor([int(token)], device=self.device)
        pos = position if torch.is_tensor(position) else torch.tensor([int(position)], device=self.device)
        return self.rt.step(self.weights, cache_k, cache_v, ids, pos, self.inv, self.scale, num_steps, eos_ids)


def prefill(model, ids, max_len):
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    return cache


def kv(cache):
    return [l.keys for l in cache.layers], [l.values for l in cache.layers]


def teacher_forced_gpu(model16, plan, ids, prompt_len, ref32=None, handoff=None):
    """Logits of the op, Transformers BF16 and Transformers fp32 for ids[prompt_len:] fed one at a time."""
    ids = ids.view(1, -1).to(DEV)
    T = ids.shape[1] - prompt_len
    max_len = ids.shape[1] + 1
    with torch.no_grad():
        ref32 = ref32 if ref32 is not None else fp32_twin(model16)
        ref = ref32(ids).logits[0, prompt_len:].float()
        del ref32
        cache = prefill(model16, ids[:, :prompt_len], max_len)
        hf = torch.stack([model16(ids[:, prompt_len + i:prompt_len + i + 1], past_key_values=cache,
                                  use_cache=True).logits[0, -1].float() for i in range(T)])
    cache = prefill(model16, ids[:, :prompt_len], max_len)
    k, v = kv(cache)
    b = Bound(model16, plan, handoff=handoff)
    op = torch.stack([b.step(k, v, ids[0, prompt_len + i].view(1), prompt_len + i)[0][0] for i in range(T)])
    check_state(b.rt.state, plan)
    return {"op": op, "hf": hf, "ref": ref}


def report(r):
    op_err, hf_err = rel_err(r["op"], r["ref"]), rel_err(r["hf"], r["ref"])
    return {"op_err": op_err, "hf_err": hf_err, "ratio": op_err / hf_err, "op_top1": top1(r["op"], r["ref"]),
            "hf_top1": top1(r["hf"], r["ref"])}


def assert_parity(rep, what):
    assert torch.isfinite(torch.tensor(rep["op_err"])), f"{what}: op logits not finite"
    assert rep["op_err"] <= 1.5 * rep["hf_err"], (
        f"{what}: op relative error {rep['op_err']:.5f} > 1.5 x Transformers-BF16's {rep['hf_err']:.5f}")


# (hidden, heads, kv, head_dim, intermediate, layers, tied, llama3, workers); workers None = one per SM. TINY[2] and
# TINY[4] run the head_dim-128 kernels (chunks of 64 positions: 8 warps hold positions), TINY[3] G 8 (every fragment
# row a head), the others head_dim 64 at G 1-3. The last one's LM-head tiles (1000 rows) hold more rows than hidden,
# so its partial argmax reads them back through L2; the others' come from shared memory.
TINY = [
    (360, 6, 6, 64, 712, 1, False, False, 7),
    (264, 6, 2, 64, 456, 2, True, True, None),
    (392, 8, 2, 128, 1000, 3, False, True, 7),
    (520, 8, 1, 64, 840, 4, True, False, 13),
    (200, 2, 2, 128, 328, 2, False, False, 1),
]


def _tid(p):
    return f"h{p[0]}-q{p[1]}-kv{p[2]}-hd{p[3]}-L{p[5]}-W{p[8] or 'sm'}"


def _tiny(params, seed=0):
    h, nh, nkv, hd, inter, layers, tied, llama3, workers = params
    cfg = tiny_config(h, nh, nkv, hd, inter, layers, tied=tied, llama3=llama3)
    model = tiny_model(cfg, seed=layers + seed).to(DEV)
    plan = build_plan(cfg, workers=workers or _workers(), gpu=_gpu())
    return cfg, model, plan


HANDOFFS = ("counters", "flags")


@pytest.mark.parametrize("handoff", HANDOFFS)
@pytest.mark.parametrize("params", TINY, ids=[_tid(p) for p in TINY])
def test_tiny_parity_vs_transformers(params, handoff):
    cfg, model, plan = _tiny(params)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (6 + 64,), generator=g)
    rep = report(teacher_forced_gpu(model, plan, ids, 6, handoff=handoff))
    print(f"{_tid(params)} {handoff}: " + ", ".join(f"{k} {v:.4f}" for k, v in rep.items()))
    assert_parity(rep, f"{_tid(params)} {handoff}")


@pytest.mark.parametrize("name,steps,prompt", [("smollm2-135m", 64, 16), ("llama-3.2-1b", 64, 16)])
def test_full_size_parity_vs_transformers(name, steps, prompt):
    cfg = load_config(name)
    model = random_model(cfg, device=DEV, seed=3)
    plan = build_plan(cfg, workers=_workers(), gpu=_gpu())
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, cfg.vocab_size, (prompt + steps,), generator=g)
    rep = report(teacher_forced_gpu(model, plan, ids, prompt))
    print(f"{name}: " + ", ".join(f"{k} {v:.5f}" for k, v in rep.items()))
    assert_parity(rep, name)


def _cpu_op_available():
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("tiles::decode_step", "CPU")
    except Exception:
        return False


@pytest.mark.skipif(not _cpu_op_available(), reason="CPU reference executor not built")
@pytest.mark.parametrize("params", TINY[:4], ids=[_tid(p) for p in TINY[:4]])
def test_cuda_matches_cpu_executor(params):
    """Same plan, same inputs: the kernel and the CPU reference agree within BF16 accumulation-order noise."""
    cfg, model, plan = _tiny(params)
    plan_any = build_plan(cfg, workers=plan.num_workers)  # same tiles, GPU-agnostic header for the CPU
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, cfg.vocab_size, (6 + 16,), generator=g).view(1, -1)
    cache = prefill(model, ids[:, :6].to(DEV), ids.shape[1] + 1)
    kg, vg = kv(cache)
    kc, vc = [t.cpu().clone() for t in kg], [t.cpu().clone() for t in vg]
    bg = Bound(model, plan)
    bc = Bound(model, plan_any, device="cpu")
    og, oc = [], []
    for i in range(16):
        tok, pos = int(ids[0, 6 + i]), 6 + i
        og.append(bg.step(kg, vg, tok, pos)[0][0].cpu())
        oc.append(bc.step(kc, vc, tok, pos)[0][0])
    og, oc = torch.stack(og), torch.stack(oc)
    check_state(bg.rt.state, plan)
    d = rel_err(og, oc)
    kd = max(rel_err(a.float(), b.float()) for a, b in zip([t.cpu() for t in kg], kc))
    # Reference scale of BF16 noise: Transformers-BF16 vs fp32 on the same inputs.
    with torch.no_grad():
        ref = fp32_twin(model)(ids.to(DEV)).logits[0, 6:].float().cpu()
    noise = rel_err(oc, ref)
    print(f"{_tid(params)}: cuda-vs-cpu {d:.2e}, cache {kd:.2e}, cpu-vs-fp32 {noise:.2e}, "
          f"top1 agree {top1(og, oc):.3f}")
    assert torch.isfinite(og).all()
    assert d <= 0.75 * noise + 1e-4, f"CUDA vs CPU logits differ by {d:.2e} (BF16 noise scale {noise:.2e})"
    assert kd <= 2e-2


@pytest.mark.skipif(not _cpu_op_available(), reason="CPU reference executor not built")
@pytest.mark.parametrize("handoff", HANDOFFS)
@pytest.mark.parametrize("params", [TINY[1], TINY[2]], ids=["G3-hd64", "G4-hd128"])
def test_long_context_attention_matches_cpu_executor(params, handoff):
    """Several K/V chunks per partition, a short last chunk and the new row in a later chunk, on the attention's warp
    path (each warp owns 8 positions of a chunk, the warps' states combined once per tile) at head_dim 64 (chunks of
    128 positions, all 16 warps) and 128 (chunks of 64, 8 warps). With either hand-off both agree with the CPU
    reference executor within fp32 accumulation-order noise, over 8 steps from position 700."""
    h, nh, nkv, hd, inter, layers, tied, llama3, _ = params
    cfg = tiny_config(h, nh, nkv, hd, inter, layers, tied=tied, llama3=llama3)
    model = tiny_model(cfg, seed=layers).to(DEV)
    kwargs = dict(attn_partitions=2, attn_single=0)  # partitions of ~350 positions: three chunks at hd 64
    plan = build_plan(cfg, workers=7, gpu=_gpu(), **kwargs)
    plan_any = build_plan(cfg, workers=7, **kwargs)
    ctx = 700
    g = torch.Generator().manual_seed(11)
    shp = (1, nkv, ctx + 16, hd)
    kg = [torch.randn(shp, generator=g).to(DEV, torch.bfloat16) for _ in range(layers)]
    vg = [torch.randn(shp, generator=g).to(DEV, torch.bfloat16) for _ in range(layers)]
    kc, vc = [t.cpu().clone() for t in kg], [t.cpu().clone() for t in vg]
    bg, bc = Bound(model, plan, handoff=handoff), Bound(model, plan_any, device="cpu")
    og, oc = [], []
    for i in range(8):
        og.append(bg.step(kg, vg, 5 + i, ctx + i)[0][0].cpu())
        oc.append(bc.step(kc, vc, 5 + i, ctx + i)[0][0])
    check_state(bg.rt.state, plan)
    d = rel_err(torch.stack(og), torch.stack(oc))
    kd = max(rel_err(a.cpu().float(), b.float()) for a, b in zip(kg, kc))
    print(f"head_dim {hd} {handoff}: cuda-vs-cpu {d:.2e}, cache {kd:.2e}")
    assert d <= 1e-2, f"CUDA vs CPU logits differ by {d:.2e} at {ctx} positions"
    assert kd <= 2e-2


def _small_bound(params=None, steps_cache=256):
    """A tiny model (TINY[1]: the warp path, unless `params`) prefilled with 8 tokens, bound to its plan."""
    cfg, model, plan = _tiny(params or TINY[1])
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, cfg.vocab_size, (8,), generator=g).view(1, -1).to(DEV)
    cache = prefill(model, ids, steps_cache)
    return cfg, model, plan, ids, cache


def _llama_small_bound(steps_cache=256):
    return _small_bound(TINY[1], steps_cache)


# The head_dim-64 and head_dim-128 kernels.
SHAPES = [TINY[1], TINY[2]]
SHAPE_IDS = ["hd64", "hd128"]


@pytest.mark.parametrize("handoff", HANDOFFS)
@pytest.mark.parametrize("params", SHAPES, ids=SHAPE_IDS)
def test_bit_identical_repeats_and_modes(params, handoff):
    """20 repeated multi-token launches from the same state give identical bits; single-token launches chained
    by their own tokens reproduce the multi-token launch exactly. Both hand-offs at head_dim 64 and 128."""
    cfg, model, plan, ids, cache = _small_bound(params)
    k, v = kv(cache)
    b = Bound(model, plan, handoff=handoff)
    assert b.rt.handoff == handoff
    tok0, pos0, n = int(ids[0, -1]), ids.shape[1] - 1, 24
    first_l, first_t = b.step(k, v, tok0, pos0, num_steps=n)
    for _ in range(20):
        l, t = b.step(k, v, tok0, pos0, num_steps=n)
        assert torch.equal(t, first_t)
        assert torch.equal(l.view(torch.int32), first_l.view(torch.int32))
    tok, singles, stoks = tok0, [], []
    for s in range(n):
        l, t = b.step(k, v, tok, pos0 + s)
        singles.append(l[0])
        stoks.append(int(t[0]))
        tok = int(t[0])
    check_state(b.rt.state, plan)
    assert stoks == first_t.tolist()
    assert torch.equal(torch.stack(singles).view(torch.int32), first_l.view(torch.int32))
    assert int(b.rt.state[fmt.StateWord.STEPS_DONE]) == 1


@pytest.mark.parametrize("handoff", HANDOFFS)
@pytest.mark.parametrize("params", SHAPES, ids=SHAPE_IDS)
def test_multi_token_eos_stops_early(params, handoff):
    """An EOS token ends the launch after its step: later tokens -1, their logits NaN, the state's steps done and
    epoch advanced by the steps that ran. Both hand-offs at head_dim 64 and 128."""
    cfg, model, plan, ids, cache = _small_bound(params)
    k, v = kv(cache)
    b = Bound(model, plan, handoff=handoff)
    tok0, pos0 = int(ids[0, -1]), ids.shape[1] - 1
    _, t = b.step(k, v, tok0, pos0, num_steps=8)
    epoch = int(b.rt.state[fmt.StateWord.EPOCH])
    eos = int(t[2])
    stop = t.tolist().index(eos)  # first occurrence
    l2, t2 = b.step(k, v, tok0, pos0, num_steps=8, eos_ids=[eos])
    check_state(b.rt.state, plan)
    assert t2[: stop + 1].tolist() == t[: stop + 1].tolist()
    assert (t2[stop + 1:] == -1).all()
    assert torch.isnan(l2[stop + 1:]).all() and torch.isfinite(l2[: stop + 1]).all()
    assert int(b.rt.state[fmt.StateWord.STEPS_DONE]) == stop + 1
    assert int(b.rt.state[fmt.StateWord.EPOCH]) == epoch + stop + 1


def _launch_from(model, plan, handoff, k, v, kv0, tok, pos, n):
    """One n-token launch from the saved cache (kv0: copies of k + v): (logits, tokens, the K/V rows it wrote)."""
    for x, x0 in zip(k + v, kv0):
        x.copy_(x0)
    b = Bound(model, plan, handoff=handoff)
    l, t = b.step(k, v, tok, pos, num_steps=n)
    check_state(b.rt.state, plan)
    return b, (l, t, [x[:, :, pos:pos + n].clone() for x in k + v])


def _assert_same_bits(a, b, what):
    (la, ta, ca), (lb, tb, cb) = a, b
    assert torch.equal(ta, tb), f"{what}: tokens {ta.tolist()} != {tb.tolist()}"
    assert torch.equal(la.view(torch.int32), lb.view(torch.int32)), f"{what}: logits differ"
    assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(ca, cb)), f"{what}: K/V differ"


@pytest.mark.parametrize("params", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("workers,ctx", [(None, 8), (7, 8), (7, 300), (7, 700), (None, 124)],
                         ids=["W-sm", "W7", "W7-ctx300", "W7-ctx700", "W-sm-ctx124"])
def test_handoffs_are_bit_identical(params, workers, ctx):
    """Counter and flag hand-offs move the same values: the same logits, tokens and K/V rows over 8-step launches,
    run twice each (the same bits again). ctx 300 and 700 with 2 attention partitions (attn_single 0): partitions of
    150-350 positions, several K/V chunks each (the prestaged first chunk, the double buffer's later ones, a shorter
    tail, the new row in a later chunk). W-sm (ctx 8) and ctx 124 with the default attn_single: partition 0 holds
    every position, so MERGE runs from the ATTN tile's shared memory (the local merge); ctx 124 crosses into several
    live partitions during its 8 steps."""
    h, nh, nkv, hd, inter, layers, tied, llama3, _ = params
    cfg = tiny_config(h, nh, nkv, hd, inter, layers, tied=tied, llama3=llama3)
    model = tiny_model(cfg, seed=layers).to(DEV)
    split = ctx > 200
    plan = build_plan(cfg, workers=workers or _workers(), gpu=_gpu(), attn_partitions=2 if split else None,
                      attn_single=0 if split else None)
    g = torch.Generator().manual_seed(9)
    if ctx > 64:
        # Random cache rows (bit-identity between hand-offs needs no real prefill).
        shp = (1, cfg.num_key_value_heads, ctx + 16, hd)
        k = [torch.randn(shp, generator=g).to(DEV, torch.bfloat16) for _ in range(layers)]
        v = [torch.randn(shp, generator=g).to(DEV, torch.bfloat16) for _ in range(layers)]
        tok0, pos0 = 5, ctx
    else:
        ids = torch.randint(0, cfg.vocab_size, (ctx,), generator=g).view(1, -1).to(DEV)
        cache = prefill(model, ids, 64)
        k, v = kv(cache)
        tok0, pos0 = int(ids[0, -1]), ids.shape[1] - 1
    kv0 = [x.clone() for x in k + v]
    out = {}
    for handoff in HANDOFFS:
        for run in range(2):
            _, out[handoff, run] = _launch_from(model, plan, handoff, k, v, kv0, tok0, pos0, 8)
    _assert_same_bits(out["counters", 0], out["counters", 1], "counters run to run")
    _assert_same_bits(out["flags", 0], out["flags", 1], "flags run to run")
    _assert_same_bits(out["counters", 0], out["flags", 0], "counters vs flags")


def test_flag_and_counter_handoffs_are_bit_identical():
    """The two hand-offs (runtime.py choose_handoff) move the same values: the same logits, tokens and K/V rows over
    multi-token launches, at a context inside one attention chunk and across partitions (MERGE reads its partitions'
    flagged o words). The automatic choice takes flags for this small model and counters for a wide one."""
    cfg, model, plan, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    kv0 = [x.clone() for x in k + v]
    tok0, pos0 = int(ids[0, -1]), ids.shape[1] - 1
    out = {}
    for handoff in HANDOFFS:
        for pos in (pos0, 150):
            b, out[handoff, pos] = _launch_from(model, plan, handoff, k, v, kv0, tok0, pos, 12)
            assert b.rt.handoff == handoff and b.rt.scratch.numel() == plan.header["scratch_bytes"] * (
                2 if handoff == "flags" else 1)
    for pos in (pos0, 150):
        _assert_same_bits(out["counters", pos], out["flags", pos], f"pos {pos}")
    assert Bound(model, plan).rt.handoff == "flags"
    wide = build_plan(tiny_config(2048, 32, 8, 64, 8192, 2), workers=_workers(), gpu=_gpu())
    assert TileRuntime(wide, DEV).handoff == "counters"


@pytest.mark.parametrize("params", [TINY[3], TINY[2]], ids=["G8", "hd128"])
def test_g8_and_hd128_run_both_handoffs(params):
    """A G 8 (every fragment row a head) and a head_dim 128 model on the warp path with either hand-off: the automatic
    choice takes flags for these small models, an explicit 'flags' is accepted, and both hand-offs give the same bits
    from a context inside one attention chunk and across partitions."""
    cfg, model, _ = _tiny(params)
    plan = build_plan(cfg, workers=_workers(), gpu=_gpu())  # one worker per SM: a small layer per worker
    h = plan.header
    assert fmt.attn_warps_fit(h["num_heads"], h["num_kv_heads"], h["head_dim"])
    assert Bound(model, plan).rt.handoff == "flags"
    g = torch.Generator().manual_seed(3)
    shp = (1, cfg.num_key_value_heads, 256, cfg.head_dim)
    k = [torch.randn(shp, generator=g).to(DEV, torch.bfloat16) for _ in range(cfg.num_hidden_layers)]
    v = [torch.randn(shp, generator=g).to(DEV, torch.bfloat16) for _ in range(cfg.num_hidden_layers)]
    kv0 = [x.clone() for x in k + v]
    for pos in (20, 200):
        _, a = _launch_from(model, plan, "counters", k, v, kv0, 3, pos, 12)
        _, b = _launch_from(model, plan, "flags", k, v, kv0, 3, pos, 12)
        _assert_same_bits(a, b, f"{_tid(params)} pos {pos}")


@pytest.mark.parametrize("heads,kv,hd,message", [
    (4, 2, 32, r"head_dim 32; this build's kernel serves head_dim 64, 96, 128"),
    (4, 2, 256, r"head_dim 256; this build's kernel serves head_dim 64, 96, 128"),
    (9, 1, 64, r"9 query heads per KV head; this build's kernel serves at most 8"),
], ids=["hd32", "hd256", "G9"])
def test_shapes_the_kernel_does_not_serve_are_refused_by_name(heads, kv, hd, message):
    """The CUDA op runs every shape of the warp path (head_dim 64, 96, 128; G <= 8) and refuses any other by name,
    before the launch; the CPU reference executor runs them (shapes no family serves, planned from a ModelShape)."""
    import dataclasses
    from tiles_ext.families import shape_of
    cfg = tiny_config(256, 4, 2, 64, 512, 1)
    shape = dataclasses.replace(shape_of(cfg), num_heads=heads, num_kv_heads=kv, head_dim=hd)
    plan = build_plan(shape, workers=7, gpu=_gpu())
    g = torch.Generator().manual_seed(4)
    weights = []
    for slot, layer, rows, cols in plan.weights.tolist():
        n = (rows, cols) if cols else (rows,)
        weights.append((torch.randn(n, generator=g) * 0.05).to(DEV, torch.bfloat16))
    rt = TileRuntime(plan, DEV)
    k = [torch.zeros(1, kv, 16, hd, device=DEV, dtype=torch.bfloat16)]
    v = [torch.zeros(1, kv, 16, hd, device=DEV, dtype=torch.bfloat16)]
    inv = (1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))).to(DEV)
    with pytest.raises(RuntimeError, match=message):
        rt.step(weights, k, v, torch.tensor([1], device=DEV), torch.tensor([3], device=DEV), inv, 1.0)


def test_cuda_graph_capture_matches_eager():
    cfg, model, plan, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    tok0, pos0, n = int(ids[0, -1]), ids.shape[1] - 1, 6
    be = Bound(model, plan)
    eager = []
    tok = tok0
    for s in range(n):
        _, t = be.step(k, v, tok, pos0 + s)
        tok = int(t[0])
        eager.append(tok)
    bg = Bound(model, plan)
    sid = torch.tensor([tok0], device=DEV)
    spos = torch.tensor([pos0], device=DEV)
    bg.step(k, v, sid, spos)  # warm-up (same position: rewritten identically below)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, t = bg.step(k, v, sid, spos)
        sid.copy_(t[:1])
        spos.add_(1)
    sid.fill_(tok0)
    spos.fill_(pos0)
    got = []
    for _ in range(n):
        graph.replay()
        got.append(int(sid[0]))
    torch.cuda.synchronize()
    check_state(bg.rt.state, plan)
    assert got == eager


def test_torch_compile_reduce_overhead_matches_eager():
    cfg, model, plan, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    tok0, pos0, n = int(ids[0, -1]), ids.shape[1] - 1, 5
    be = Bound(model, plan)
    eager, tok = [], tok0
    for s in range(n):
        _, t = be.step(k, v, tok, pos0 + s)
        tok = int(t[0])
        eager.append(tok)
    bc = Bound(model, plan)

    def step(ids_t, pos_t):
        return torch.ops.tiles.decode_step(bc.rt.plan_tensor, bc.rt.header, bc.weights, k, v, bc.rt.scratch,
                                           bc.rt.state, ids_t, pos_t, bc.inv, bc.scale, 1, [], 0)

    cstep = torch.compile(step, mode="reduce-overhead")
    sid = torch.tensor([tok0], device=DEV)
    spos = torch.tensor([pos0], device=DEV)
    got = []
    for _ in range(n):
        _, t = cstep(sid, spos)
        sid.copy_(t[:1])
        spos.add_(1)
        got.append(int(sid[0]))
    check_state(bc.rt.state, plan)
    assert got == eager


def test_opcheck_cuda():
    cfg, model, plan, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    b = Bound(model, plan)
    args = (b.rt.plan_tensor, b.rt.header, b.weights, k, v, b.rt.scratch, b.rt.state,
            torch.tensor([int(ids[0, -1])], device=DEV), torch.tensor([ids.shape[1] - 1], device=DEV), b.inv,
            b.scale, 2, [], 0)
    torch.library.opcheck(torch.ops.tiles.decode_step.default, args,
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def _broken_wait_bound(handoff):
    """A plan whose one tile waits for what never comes. Returns (bound, plan, ids, cache, tile, tile's op name)."""
    cfg, model, plan, ids, cache = _llama_small_bound()
    b = Bound(model, plan, handoff=handoff)
    if b.rt.flagged:
        # Flag hand-offs keep one counter wait per step, EMBED's (the previous step's token): ask it for this
        # step's token instead (offset -1 -> 0). The polls behind it give up on its error.
        op, word, name = fmt.Op.EMBED, 2, "embed"
    else:
        # The first LM-head tile's wait asks for one arrival more than the plan can ever deliver.
        op, word, name = fmt.Op.LMHEAD, 1, "lmhead"
    t = next(i for i in range(plan.header["num_tiles"]) if plan.tile(i)["op"] == op)
    wb = plan.tile(t)["wait_begin"]
    b.rt.plan_tensor[plan.header["waits_offset"] + wb * fmt.WAIT.words + word] += 1
    return b, plan, ids, cache, t, name


@pytest.mark.parametrize("handoff", HANDOFFS)
def test_unsatisfiable_wait_raises_timeout_naming_worker_and_tile(monkeypatch, handoff):
    monkeypatch.setenv("TILES_WAIT_TIMEOUT_MS", "200")
    b, plan, ids, cache, t, name = _broken_wait_bound(handoff)
    k, v = kv(cache)
    b.step(k, v, int(ids[0, -1]), ids.shape[1] - 1)  # returns at once; the error surfaces asynchronously
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match=r"WAIT_TIMEOUT.*worker \d+.*tile %d" % t):
        check_state(b.rt.state, plan)
    with pytest.raises(RuntimeError, match=r"WAIT_TIMEOUT.* in worker \d+, tile %d \(%s" % (t, name)):
        b.step(k, v, int(ids[0, -1]), ids.shape[1] - 1)  # the next call reports the recorded error


@pytest.mark.parametrize("handoff", HANDOFFS)
def test_sync_check_reports_in_the_failing_call(monkeypatch, handoff):
    monkeypatch.setenv("TILES_WAIT_TIMEOUT_MS", "200")
    monkeypatch.setenv("TILES_SYNC_CHECK", "1")
    b, plan, ids, cache, t, name = _broken_wait_bound(handoff)
    k, v = kv(cache)
    failed = r"this launch failed: tiles decode kernel error WAIT_TIMEOUT .* in worker \d+, tile %d " % t
    with pytest.raises(RuntimeError, match=failed):
        b.step(k, v, int(ids[0, -1]), ids.shape[1] - 1)


def test_unwritten_flagged_input_raises_timeout_naming_the_reader(monkeypatch):
    """Flag hand-offs: a scratch word no tile writes in this step is polled until the bound, and the error names
    the tile that polls it. The first LM-head tile writes its (max, argmax) partial into the second one's slot, so
    its own slot keeps the previous epoch and ARGMAX, its only reader, times out."""
    cfg, model, plan, ids, cache = _llama_small_bound()
    b = Bound(model, plan, handoff="flags")
    monkeypatch.setenv("TILES_WAIT_TIMEOUT_MS", "200")
    monkeypatch.setenv("TILES_SYNC_CHECK", "1")
    lm = [i for i in range(plan.header["num_tiles"]) if plan.tile(i)["op"] == fmt.Op.LMHEAD]
    am = next(i for i in range(plan.header["num_tiles"]) if plan.tile(i)["op"] == fmt.Op.ARGMAX)
    assert len(lm) >= 2
    aux0 = [f for f, _ in fmt.TILE.fields].index("aux0")
    b.rt.plan_tensor[plan.header["tiles_offset"] + lm[0] * fmt.TILE.words + aux0] = plan.tile(lm[1])["aux0"]
    k, v = kv(cache)
    with pytest.raises(RuntimeError, match=r"WAIT_TIMEOUT.* in worker \d+, tile %d \(argmax.*flagged input word" % am):
        b.step(k, v, int(ids[0, -1]), ids.shape[1] - 1)


def test_merge_next_skip_is_bit_identical():
    """A partition-0 ATTN tile marked "MERGE next" (out_offset 1) keeps its partials in shared memory while it holds
    every position. Same plan with and without the marks, both hand-offs, a launch that crosses attn_single (local
    MERGE, then partitions merged from the scratch): the same logits, tokens and K/V rows."""
    cfg, model, _, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    kv0 = [x.clone() for x in k + v]
    tok0, pos0 = int(ids[0, -1]), ids.shape[1] - 1
    col = fmt.TILE.index("out_offset")
    out = {}
    for mark in (True, False):
        plan = build_plan(cfg, workers=_workers(), gpu=_gpu(), attn_single=16, merge_next=mark)
        attn0 = plan.tiles[(plan.tiles[:, 0] == fmt.Op.ATTN) & (plan.tiles[:, fmt.TILE.index("aux1")] == 0)]
        assert (attn0[:, col] == (1 if mark else 0)).all()
        for handoff in HANDOFFS:
            _, out[mark, handoff] = _launch_from(model, plan, handoff, k, v, kv0, tok0, pos0, 24)
    for handoff in HANDOFFS:
        _assert_same_bits(out[True, handoff], out[False, handoff], handoff)


def test_arena_size_names_the_handoff():
    """The op reads the hand-off from the arena's size: the plan's scratch_bytes (counters) or twice that (flags);
    any other size is refused by name."""
    cfg, model, plan, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    b = Bound(model, plan, handoff="flags")
    b.step(k, v, int(ids[0, -1]), ids.shape[1] - 1)
    torch.cuda.synchronize()
    check_state(b.rt.state, plan)
    bad = TileRuntime(plan, DEV, "counters")
    bad.scratch = torch.zeros(plan.header["scratch_bytes"] + 256, dtype=torch.uint8, device=DEV)
    with pytest.raises(RuntimeError, match="counter hand-offs.*flag hand-offs"):
        bad.step(b.weights, k, v, torch.tensor([1], device=DEV), torch.tensor([3], device=DEV), b.inv, b.scale)


def test_bad_token_and_full_cache(monkeypatch):
    monkeypatch.setenv("TILES_SYNC_CHECK", "1")
    cfg, model, plan, ids, cache = _llama_small_bound(steps_cache=16)
    k, v = kv(cache)
    b = Bound(model, plan)
    with pytest.raises(RuntimeError, match="BAD_TOKEN"):
        b.step(k, v, cfg.vocab_size + 5, ids.shape[1] - 1)
    b = Bound(model, plan)
    with pytest.raises(RuntimeError, match="CACHE_FULL"):
        b.step(k, v, 1, 14, num_steps=4)  # steps 0, 1 fit (positions 14, 15), step 2 does not


def test_launch_time_checks():
    cfg, model, plan, ids, cache = _llama_small_bound()
    k, v = kv(cache)
    other = build_plan(cfg, workers=7, gpu=GpuTarget("other", 100, 9, 0))
    b = Bound(model, other)
    with pytest.raises(RuntimeError, match="100 SMs"):
        b.step(k, v, 1, 3)
    b = Bound(model, plan)
    with pytest.raises(RuntimeError, match="order_seed"):
        b.rt.step(b.weights, k, v, torch.tensor([1], device=DEV), torch.tensor([3], device=DEV), b.inv, b.scale,
                  1, [], order_seed=1)
    with pytest.raises(RuntimeError):
        b.rt.step(b.weights, k, v, torch.tensor([1]), torch.tensor([3]), b.inv, b.scale)  # CPU ids, CUDA plan


def test_a_layout_beyond_shared_memory_is_refused():
    """A wide MLP's input vector (2 x 65536 bytes) with the weight stage and the K/V chunks passes the per-block
    limit: the error says so, before the attribute call (whose own failure, "invalid argument", would not say why).
    One of 50000 fits."""
    k = [torch.zeros(1, 2, 16, 64, device=DEV, dtype=torch.bfloat16)]
    v = [torch.zeros(1, 2, 16, 64, device=DEV, dtype=torch.bfloat16)]
    fits = tiny_config(256, 4, 2, 64, 50000, 1)
    b = Bound(tiny_model(fits, seed=1).to(DEV), build_plan(fits, workers=7, gpu=_gpu()), handoff="counters")
    b.step(k, v, 1, 3)
    torch.cuda.synchronize()
    check_state(b.rt.state, b.plan)
    wide = tiny_config(256, 4, 2, 64, 65536, 1)
    b = Bound(tiny_model(wide, seed=1).to(DEV), build_plan(wide, workers=7, gpu=_gpu()))
    with pytest.raises(RuntimeError, match=r"the kernel needs \d+ bytes of shared memory per worker block"):
        b.step(k, v, 1, 3)
