"""torch.library.opcheck on the CPU kernel (schema, fake kernel, AOT dispatch) and torch.compile(fullgraph=True)
over a call of the op (the fake kernel is what the compiler traces)."""
import pytest
import torch

from parity_helpers import Bound, cache_lists, prefill, tiny_config, tiny_model
from tiles_ext.planner import build_plan

PROMPT = 4


@pytest.fixture(scope="module")
def bound_and_cache():
    model = tiny_model(tiny_config(136, 4, 2, 64, 200, 1, vocab=300), seed=0)
    plan = build_plan(model.config, workers=3)
    ids = torch.randint(0, 300, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    return Bound.of(model, plan), prefill(model, ids, 32)


def op_args(b, cache, token, position, num_steps=1, eos=()):
    k, v = cache_lists(cache)
    rt = b.runtime
    return (rt.plan_tensor, list(rt.header), b.weights, k, v, rt.scratch, rt.state, torch.tensor([token]),
            torch.tensor([position]), b.inv_freq, b.rope_scale, num_steps, list(eos))


@pytest.mark.parametrize("num_steps", [1, 3])
def test_opcheck_cpu(bound_and_cache, num_steps):
    b, cache = bound_and_cache
    torch.library.opcheck(torch.ops.tiles.decode_step.default, op_args(b, cache, 5, PROMPT, num_steps),
                          {"order_seed": 0})


def test_fake_kernel_shapes(bound_and_cache):
    from torch._subclasses.fake_tensor import FakeTensorMode
    b, cache = bound_and_cache
    args = op_args(b, cache, 5, PROMPT, 4)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else
                [mode.from_tensor(t) for t in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
                else a for a in args]
        logits, tokens = torch.ops.tiles.decode_step(*fake)
    assert logits.shape == (4, 300) and logits.dtype == torch.float32
    assert tokens.shape == (4,) and tokens.dtype == torch.int64


def test_compile_fullgraph_cpu(bound_and_cache):
    b, cache = bound_and_cache
    torch._dynamo.reset()
    k, v = cache_lists(cache)
    rt = b.runtime
    header = list(rt.header)

    def decode(token, position):
        logits, tokens = torch.ops.tiles.decode_step(rt.plan_tensor, header, b.weights, k, v, rt.scratch, rt.state,
                                                     token, position, b.inv_freq, b.rope_scale, 2, [])
        return logits.log_softmax(-1), tokens + 0

    compiled = torch.compile(decode, fullgraph=True, backend="inductor")
    snapshot = [t.clone() for t in k + v]
    state0 = rt.state.clone()
    out_c = compiled(torch.tensor([5]), torch.tensor([PROMPT]))
    # Same call eagerly from the same cache/state contents: identical results (the op is deterministic).
    for t, s in zip(k + v, snapshot):
        t.copy_(s)
    rt.state.copy_(state0)
    out_e = decode(torch.tensor([5]), torch.tensor([PROMPT]))
    assert torch.equal(out_c[1], out_e[1])
    torch.testing.assert_close(out_c[0], out_e[0])
