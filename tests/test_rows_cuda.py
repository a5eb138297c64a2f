"""Several rows per pass on the CUDA kernel (the rows kernels, csrc/cuda/decode_rows.cuh; skipped without CUDA).

Tiny configs of Llama (head_dim 64, GQA 4), Qwen2 (G7, q/k/v biases), Qwen3 (q/k norms, head_dim 128) and a
head_dim-96 Qwen3, each with the default plan and with three attention partitions of 4-position granules (the rows of
one pass straddle partition bounds), on counter and flag runtimes (a flagged runtime's rows pass hands off by
counters on state[ROWS_PASSES]), R = 2, 4, 8:
  - an R-row pass gives the bits of R one-row CUDA passes (logits, tokens, the K/V rows it stores), with every cache
    row at or beyond the pass's position poisoned (a rejected draft's rows: NaN and huge values) in both;
  - a second pass, and a one-row step after it, still match (the cache, the epoch and the counters stay consistent);
  - the R-row CUDA pass agrees with the CPU executor's R-row pass (relative error < 1e-2, tests/test_cuda_families.py's
    bound);
and generate() with prompt_lookup_num_tokens on a patched GPU model equals its plain greedy output, in fewer passes.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from integration_support import patched_copy, prompt_lookup_and_plain  # noqa: E402
from integration_support import tiny_config as llama_tiny  # noqa: E402
from parity_helpers import family_config, prefill, rel_err, tiny_config, tiny_model  # noqa: E402
from tiles_ext.errors import check_state  # noqa: E402
from tiles_ext.models import random_model  # noqa: E402
from tiles_ext.planner.format import StateWord  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402
from tiles_ext.runtime import TileRuntime, model_weights, rope_tables  # noqa: E402

DEV = "cuda"
CASES = {
    "llama-g4-hd64": tiny_config(512, 8, 2, 64, 1024, 2),
    "qwen2-g7-bias": family_config("qwen2", 896, 14, 2, 64, 512, 1),
    "qwen3-g2-hd128-norms": family_config("qwen3", 256, 4, 2, 128, 512, 2),
    "qwen3-g5-hd96": family_config("qwen3", 320, 10, 2, 96, 640, 1),
}
PROMPT, MAX_LEN, WORKERS = 6, 48, 17
PLANS = {
    "default": {},
    "partitions": dict(attn_partitions=3, attn_granule=4, attn_single=4),
}


@pytest.fixture(scope="module", params=list(CASES))
def model(request):
    return tiny_model(CASES[request.param], seed=4)


class Op:
    """A model bound to a plan on a device, with its own copy of a prefilled K/V cache."""

    def __init__(self, model, plan, device, k, v, handoff=None):
        self.rt = TileRuntime(plan, device, handoff)
        self.plan, self.device = plan, device
        self.w = [w.to(device) for w in model_weights(model, plan.shape)]
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(device)
        self.k = [x.to(device).clone() for x in k]
        self.v = [x.to(device).clone() for x in v]

    def run(self, tokens, position):
        ids = torch.as_tensor(tokens, dtype=torch.long).reshape(-1).to(self.device)
        pos = torch.tensor([int(position)], device=self.device)
        return self.rt.step(self.w, self.k, self.v, ids, pos, self.inv, self.scale, 1, [])

    def one_rows(self, tokens, position):
        out = [self.run([t], position + i) for i, t in enumerate(tokens.tolist())]
        return torch.cat([o[0] for o in out]), torch.cat([o[1] for o in out])

    def poison(self, start):
        """A rejected draft's rows: NaN from `start` on, huge values further on."""
        for t in self.k + self.v:
            t[:, :, start:].fill_(float("nan"))
            t[:, :, start + 3:].fill_(3e38)

    def kv_bits(self, lo, hi):
        return [x[:, :, lo:hi].cpu().view(torch.int16) for x in self.k + self.v]


def _cache(model):
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(9))
    cache = prefill(model, ids, MAX_LEN)
    return [l.keys.cpu() for l in cache.layers], [l.values.cpu() for l in cache.layers]


def _draft(model, n, seed):
    return torch.randint(0, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


def _gpu_plan(model, kind):
    return build_plan(model.config, WORKERS, gpu=GpuTarget.of_device(DEV), **PLANS[kind])


def _same_bits(a, b):
    return torch.equal(a.cpu().view(torch.int32), b.cpu().view(torch.int32))


@pytest.mark.parametrize("handoff", ["counters", "flags"])
@pytest.mark.parametrize("kind", list(PLANS))
@pytest.mark.parametrize("rows", [2, 4, 8])
def test_a_cuda_pass_of_rows_gives_the_bits_of_one_row_passes(model, kind, handoff, rows):
    plan = _gpu_plan(model, kind)
    k, v = _cache(model)
    ref, op = Op(model, plan, DEV, k, v, handoff), Op(model, plan, DEV, k, v, handoff)
    assert op.rt.handoff == handoff and op.rt.max_rows == 8
    ref.poison(PROMPT)
    op.poison(PROMPT)
    first, second = _draft(model, rows, 1), _draft(model, rows, 2)
    ref_logits, ref_tokens = ref.one_rows(first, PROMPT)
    logits, tokens = op.run(first, PROMPT)
    check_state(op.rt.state, plan)
    check_state(ref.rt.state, plan)
    assert logits.shape == (rows, model.config.vocab_size) and tokens.shape == (rows,)
    assert torch.isfinite(logits).all()
    assert _same_bits(logits, ref_logits), f"max diff {(logits - ref_logits).abs().max().item():.3e}"
    assert torch.equal(tokens.cpu(), ref_tokens.cpu()) and torch.equal(tokens, logits.argmax(-1))
    assert all(map(torch.equal, op.kv_bits(PROMPT, PROMPT + rows), ref.kv_bits(PROMPT, PROMPT + rows)))
    assert int(op.rt.state[StateWord.EPOCH]) == 1  # one pass is one step
    # A second pass from where the first ended (it attends the first's rows from the cache), then one one-row step.
    ref_logits, _ = ref.one_rows(second, PROMPT + rows)
    logits, _ = op.run(second, PROMPT + rows)
    assert _same_bits(logits, ref_logits)
    end = PROMPT + 2 * rows
    assert _same_bits(op.run([int(first[0])], end)[0], ref.run([int(first[0])], end)[0])
    check_state(op.rt.state, plan)
    assert int(op.rt.state[StateWord.EPOCH]) == 3
    assert int(op.rt.state[StateWord.ROWS_PASSES]) == (2 if handoff == "flags" else 0)


@pytest.mark.parametrize("kind", list(PLANS))
def test_a_cuda_pass_of_rows_agrees_with_the_cpu_executors(model, kind):
    plan_g = _gpu_plan(model, kind)
    plan_c = build_plan(model.config, WORKERS, **PLANS[kind])
    k, v = _cache(model)
    og, oc = Op(model, plan_g, DEV, k, v), Op(model, plan_c, "cpu", k, v)
    og.poison(PROMPT)
    oc.poison(PROMPT)
    tokens = _draft(model, 8, 3)
    lg, tg = og.run(tokens, PROMPT)
    lc, tc = oc.run(tokens, PROMPT)
    check_state(og.rt.state, plan_g)
    d = rel_err(lg.cpu(), lc)
    kd = max(rel_err(a[:, :, PROMPT:PROMPT + 8].cpu().float(), b[:, :, PROMPT:PROMPT + 8].float())
             for a, b in zip(og.k + og.v, oc.k + oc.v))
    print(f"{kind}: cuda-vs-cpu rows logits {d:.2e}, K/V rows {kd:.2e}")
    assert d < 1e-2 and kd < 1e-2, (d, kd)


def test_prompt_lookup_greedy_on_cuda_is_plain_greedy_in_fewer_passes():
    main = patched_copy(random_model(llama_tiny(), device=DEV, seed=5))
    assert main.device.type == "cuda"
    base = torch.tensor([[1, 17, 42, 99, 7, 300]], device=DEV)
    prompt = torch.cat([base, base, base[:, :3]], dim=1)
    plain, got, passes = prompt_lookup_and_plain(main, prompt)
    assert torch.equal(got, plain)
    assert 1 <= passes < 23, passes  # plain greedy takes 23 one-row steps after the prefill
