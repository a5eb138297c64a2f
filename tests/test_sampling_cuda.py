"""The sampler on the GPU (skipped without CUDA): tiles::sample_logits' kept sets and tokens equal the CPU
reference's on the same logits; decode_step's in-kernel draws (counter and flag hand-offs, the head_dim 64, 96 and
128 kernels, SAMPLE and GREEDY modes) equal sample_logits on the op's own logits rows, and do not depend on how the
launches are cut; NaN logits raise BAD_LOGITS naming the step; generate() samples reproducibly on a patched tiny
model. What to time: tiles_ext.bench's sampling rows against greedy (scripts/gpu.sh)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from parity_helpers import family_config, tiny_config, tiny_model  # noqa: E402
from tiles_ext import sampling as S  # noqa: E402
from tiles_ext.planner import format as fmt  # noqa: E402
from tiles_ext.planner.format import ErrorCode, SampleMode  # noqa: E402

DEV = "cuda"


def both(logits, sampler, position):
    """(kept, token) on the CPU reference and on the GPU, on the same logits and sampler."""
    kc, tc = torch.ops.tiles.sample_logits(logits.cpu(), sampler.cpu(), position)
    kg, tg = torch.ops.tiles.sample_logits(logits.to(DEV), sampler.to(DEV), position)
    return (kc, int(tc)), (kg.cpu(), int(tg))


def random_settings(rng):
    return S.SamplerSettings(
        mode=SampleMode.SAMPLE if rng.random() < 0.85 else SampleMode.GREEDY,
        temperature=float(rng.choice([1.0, 0.7, 1.3])), top_k=int(rng.choice([1, 5, 20, 50, 64])),
        top_p=float(rng.choice([1.0, 0.9, 0.5, 0.99])), min_p=float(rng.choice([0.0, 0.05])),
        repetition_penalty=float(rng.choice([1.0, 1.1, 0.9])), suppress_until=30, suppress_ids=(3, 7))


@pytest.mark.parametrize("vocab, lm_tiles", [(1000, 7), (1000, 1), (50, 50), (49152, 132), (128256, 132)])
def test_gpu_kept_sets_and_tokens_equal_the_cpu_reference(vocab, lm_tiles):
    rng = np.random.default_rng(vocab + lm_tiles)
    for case in range(40):
        lg = torch.from_numpy((rng.standard_normal(vocab) * float(rng.choice([1.0, 3.0]))).astype(np.float32))
        if case % 5 == 1:
            lg = torch.round(lg * 8) / 8  # ties, within what one tile's slot holds
        st = random_settings(rng)
        seen = rng.choice(vocab, size=min(vocab, 40), replace=False).tolist()
        smp = S.make_sampler(vocab, lm_tiles, st, int(rng.integers(1 << 62)), seen)
        position = int(rng.integers(0, 60))
        (kc, tc), (kg, tg) = both(lg, smp, position)
        assert torch.equal(kc, kg), (case, st, torch.nonzero(kc != kg).reshape(-1).tolist())
        assert tc == tg, (case, st)


def test_gpu_draws_equal_the_cpu_draws_position_by_position():
    lg = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 2
    st = S.SamplerSettings(temperature=1.5, top_k=64, top_p=0.95, min_p=0.01)
    smp = S.make_sampler(4096, 33, st, 12345)
    cpu = [int(torch.ops.tiles.sample_logits(lg, smp, p)[1]) for p in range(1000)]
    lg_d, smp_d = lg.to(DEV), smp.to(DEV)
    gpu = [int(torch.ops.tiles.sample_logits(lg_d, smp_d, p)[1]) for p in range(1000)]
    assert cpu == gpu
    assert len(set(gpu)) > 20


def test_gpu_sample_logits_reports_errors():
    lg = torch.zeros(100, device=DEV)
    lg[9] = float("nan")
    smp = S.make_sampler(100, 4, S.SamplerSettings(top_k=5), 0, device=DEV)
    with pytest.raises(RuntimeError, match=ErrorCode.BAD_LOGITS.name):
        torch.ops.tiles.sample_logits(lg, smp, 3)
    smp = S.make_sampler(100, 4, S.SamplerSettings(top_k=0), 0, device=DEV)  # top_k off: the candidates cannot hold it
    with pytest.raises(RuntimeError, match=ErrorCode.SAMPLER_OVERFLOW.name):
        torch.ops.tiles.sample_logits(torch.randn(100, device=DEV), smp, 3)
    smp = S.make_sampler(100, 1, S.SamplerSettings(top_k=10), 0, device=DEV)  # 100 ties in one slot of 128: fine
    kept, _ = torch.ops.tiles.sample_logits(torch.zeros(100, device=DEV), smp, 3)
    assert bool(kept.all())


# --- decode_step on the GPU ---------------------------------------------------------------------------------------

# (hidden, heads, kv, head_dim, intermediate, layers, workers): the sampler kernels of every head_dim (64, 128, 96),
# each with both hand-offs; workers 1 puts every LM row in one tile (more rows than hidden: the weight stage holds
# the processed scores).
SHAPES = [(264, 6, 2, 64, 456, 2, None), (392, 8, 2, 128, 1000, 2, 7), (384, 4, 4, 96, 640, 2, 9),
          (200, 2, 2, 64, 328, 1, 1)]
PROMPT = 6


def _setup(shape, handoff):
    from tiles_ext.planner.plan import GpuTarget, build_plan
    from tiles_ext.runtime import TileRuntime, model_weights, rope_tables
    h, nh, nkv, hd, inter, layers, workers = shape
    # head_dim 96 is Phi-3's (the Llama family serves 64 and 128 only).
    make = (lambda *a: family_config("phi3", *a)) if hd == 96 else tiny_config
    cfg = make(h, nh, nkv, hd, inter, layers)
    model = tiny_model(cfg, seed=4).to(DEV)
    workers = workers or torch.cuda.get_device_properties(0).multi_processor_count
    plan = build_plan(cfg, workers=workers, gpu=GpuTarget.of_device(DEV))
    inv, scale = rope_tables(model)
    weights = [w.to(DEV) for w in model_weights(model)]
    return cfg, model, plan, lambda: TileRuntime(plan, DEV, handoff), weights, inv.to(DEV), scale


def _prefill(model, ids, max_len):
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    return [l.keys for l in cache.layers], [l.values for l in cache.layers]


def _decode(setup, prompt, settings, cuts, seed=9, eos=()):
    cfg, model, plan, runtime, weights, inv, scale = setup
    rt = runtime()
    k, v = _prefill(model, prompt, 80)
    smp = S.plan_sampler(plan, settings, seed, prompt[0].tolist() + [17], DEV)
    tokens, logits, tok, pos = [], [], 17, PROMPT
    for n in cuts:
        lg, tk = rt.step(weights, k, v, torch.tensor([tok], device=DEV), torch.tensor([pos], device=DEV), inv, scale,
                         n, eos, 0, smp)
        rt.check_error()
        host = tk.tolist()
        done = next((i for i, t in enumerate(host) if t < 0), n)
        tokens += host[:done]
        logits.append(lg[:done])
        tok, pos = tokens[-1], pos + done
        if done < n:
            break
    return tokens, torch.cat(logits), smp


GPU_SETTINGS = {
    "sample": S.SamplerSettings(temperature=1.2, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.3),
    "qwen": S.SamplerSettings(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),
    "greedy_penalty": S.SamplerSettings(mode=SampleMode.GREEDY, repetition_penalty=1.8),
}


@pytest.mark.parametrize("handoff", ["counters", "flags"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"hd{s[3]}-W{s[6] or 'sm'}")
@pytest.mark.parametrize("name", sorted(GPU_SETTINGS))
def test_gpu_decode_draws_are_the_samplers_picks_and_ignore_the_cut(shape, handoff, name):
    setup = _setup(shape, handoff)
    cfg, plan = setup[0], setup[2]
    st = GPU_SETTINGS[name]
    prompt = torch.randint(0, cfg.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(2)).to(DEV)
    one, lg1, smp1 = _decode(setup, prompt, st, [24])
    cut, lgc, smpc = _decode(setup, prompt, st, [5, 1, 18])
    assert one == cut and torch.equal(lg1, lgc) and torch.equal(smp1[-fmt.seen_words(plan.header["vocab"]):],
                                                                smpc[-fmt.seen_words(plan.header["vocab"]):])
    seen = prompt[0].tolist() + [17]
    for i, tok in enumerate(one):
        ref = S.plan_sampler(plan, st, 9, seen)
        want = int(torch.ops.tiles.sample_logits(lg1[i].cpu(), ref, PROMPT + 1 + i)[1])  # the CPU reference
        assert tok == want, (i, tok, want)
        seen.append(tok)
    assert S.seen_ids(smp1, plan.header["vocab"]) == sorted(set(seen))


@pytest.mark.parametrize("handoff", ["counters", "flags"])
def test_gpu_decode_names_the_step_of_nan_logits(handoff):
    from tiles_ext.errors import TileKernelError
    setup = list(_setup(SHAPES[0], handoff))
    cfg, plan, weights = setup[0], setup[2], setup[4]
    lm = next(i for i, (slot, _, _, _) in enumerate(plan.weights.tolist()) if slot == fmt.SLOT["lm_head"])
    weights = list(weights)
    weights[lm] = weights[lm].clone()
    weights[lm][7] = float("nan")
    setup[4] = weights
    prompt = torch.randint(0, cfg.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(2)).to(DEV)
    for st in (GPU_SETTINGS["sample"], GPU_SETTINGS["greedy_penalty"]):
        with pytest.raises(TileKernelError, match=ErrorCode.BAD_LOGITS.name) as info:
            _decode(tuple(setup), prompt, st, [4])
        assert fmt.ERROR_DETAILS[ErrorCode.BAD_LOGITS].format(seen=7, wanted=PROMPT + 1) in str(info.value)


def test_gpu_generate_samples_reproducibly_with_the_samplers_draws():
    import tiles_ext
    from tiles_ext.integrations import patch_state
    from tiles_ext.models import random_model
    from transformers import LlamaConfig
    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=64, num_hidden_layers=2, vocab_size=512, max_position_embeddings=512,
                      tie_word_embeddings=False, eos_token_id=None)
    model = tiles_ext.patch(random_model(cfg, device=DEV, seed=2), plan_cache_dir=False)
    ids = torch.tensor([[1, 17, 42, 99, 7]], device=DEV)
    kw = dict(do_sample=True, temperature=1.3, top_k=40, top_p=0.95, max_new_tokens=100, pad_token_id=0,
              return_dict_in_generate=True, output_logits=True)
    torch.manual_seed(5)
    seed = S.draw_seed()
    torch.manual_seed(5)
    a = model.generate(ids, **kw)
    torch.manual_seed(5)
    b = model.generate(ids, **kw)
    assert torch.equal(a.sequences, b.sequences) and a.sequences.shape[1] == 105
    plan = patch_state(model).decoder.plan
    st = S.SamplerSettings(temperature=1.3, top_k=40, top_p=0.95)
    seq = a.sequences[0].tolist()
    for j, row in enumerate(a.logits):
        ref = S.plan_sampler(plan, st, seed, seq[:5 + j])
        assert seq[5 + j] == int(torch.ops.tiles.sample_logits(row[0].cpu(), ref, 5 + j)[1]), j
