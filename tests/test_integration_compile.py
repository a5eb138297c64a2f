"""The patched decode under torch.compile on CPU: fullgraph through the op's fake kernel, and generate()'s own
automatic decode compilation (forced on for CPU here; on CUDA Transformers does it by itself)."""
from __future__ import annotations

import copy

import pytest
import torch
from transformers import CompileConfig, StaticCache

from integration_support import CACHE, count_op_calls, patched_copy, steps_executed, tiny_config
from tiles_ext.models import random_model


@pytest.fixture(scope="module")
def tiny():
    return random_model(tiny_config(), seed=1)


def _prefilled(model, ids, max_len=16):
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        model(ids, **{CACHE: cache})
    return cache


def test_decode_compiles_fullgraph(tiny):
    torch._dynamo.reset()
    model = patched_copy(tiny)
    ids = torch.tensor([[1, 17, 42, 99]])
    eager_cache, compiled_cache = _prefilled(model, ids), _prefilled(model, ids)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")  # fake kernel traces, real op runs
    with torch.no_grad():
        for t in (5, 77, 300):
            step = torch.tensor([[t]])
            want = model(step, **{CACHE: eager_cache}).logits
            before = steps_executed(model)
            got = compiled(input_ids=step, **{CACHE: compiled_cache}).logits
            assert steps_executed(model) == before + 1
            assert torch.equal(got, want)
        with count_op_calls() as ops:  # once compiled: one op call per step, nothing else
            compiled(input_ids=torch.tensor([[9]]), **{CACHE: compiled_cache})
        assert ops["calls"] == 1
    for a, b in zip(eager_cache.layers, compiled_cache.layers):
        assert int(a.cumulative_length) == int(b.cumulative_length) - 1 == 7  # counters advanced in the graph
        assert torch.equal(a.keys[:, :, :7], b.keys[:, :, :7]) and torch.equal(a.values[:, :, :7], b.values[:, :, :7])


@pytest.mark.parametrize("disable_compile", [False, True])
def test_generate_with_automatic_decode_compilation(tiny, disable_compile):
    torch._dynamo.reset()
    model = patched_copy(tiny)
    ids = torch.tensor([[1, 17, 42, 99]])
    eager = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    config = copy.deepcopy(model.generation_config)
    config.compile_config = CompileConfig(backend="aot_eager", fullgraph=True)  # no graph break in decode
    config.compile_config._compile_all_devices = True  # what CUDA gets by default
    config.disable_compile = disable_compile
    before = steps_executed(model)
    out = model.generate(ids, generation_config=config, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert steps_executed(model) == before + 4
    assert torch.equal(out, eager)
    assert ("_compiled_call" in model.__dict__) is not disable_compile
