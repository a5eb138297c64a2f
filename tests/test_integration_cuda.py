"""The patched model on CUDA (H200): generate's automatic decode compilation (mode reduce-overhead, CUDA graphs),
disable_compile, and the multi-token fast path must all return the same tokens; logits match PyTorch.
Random BF16 weights (no trained checkpoint on the GPU machine): tokens are compared between tile paths (same
kernel), logits against PyTorch within BF16 tolerance."""
from __future__ import annotations

import pytest
import torch
from transformers import StaticCache

from integration_support import CACHE, patched_copy, rel_err, steps_executed

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model(cuda_device):
    from tiles_ext.models import random_model
    return random_model("smollm2-135m", device=cuda_device, seed=0)


@pytest.fixture(scope="module")
def ids(cuda_device):
    return torch.tensor([[1, 504, 3575, 282, 4649, 314, 17, 99]], device=cuda_device)


def test_plan_has_one_worker_per_sm(model, cuda_device):
    from tiles_ext.integrations import patch_state
    patched = patched_copy(model)
    plan = patch_state(patched).decoder.plan
    assert plan.num_workers == torch.cuda.get_device_properties(cuda_device).multi_processor_count
    assert patch_state(patched).multi_token  # fast path on by default on CUDA


def test_compiled_eager_and_fast_paths_agree(model, ids):
    per_token = patched_copy(model, multi_token=False)
    fast = patched_copy(model)
    n = 40
    before = steps_executed(per_token)
    compiled = per_token.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)  # auto-compiled decode
    assert "_compiled_call" in per_token.__dict__
    eager = per_token.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0, disable_compile=True)
    assert steps_executed(per_token) - before == 2 * (n - 1)
    before = steps_executed(fast)
    multi = fast.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)
    assert steps_executed(fast) - before == n - 1
    assert torch.equal(compiled, eager) and torch.equal(multi, eager)
    again = per_token.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)  # CUDA-graph replays
    assert torch.equal(again, eager)


def test_sampling_runs_compiled(model, ids):
    patched = patched_copy(model, multi_token=False)
    torch.manual_seed(0)
    a = patched.generate(ids, max_new_tokens=12, do_sample=True, top_k=20, pad_token_id=0)
    torch.manual_seed(0)
    b = patched.generate(ids, max_new_tokens=12, do_sample=True, top_k=20, pad_token_id=0, disable_compile=True)
    assert torch.equal(a, b)


def test_decode_logits_match_pytorch(model, ids):
    patched = patched_copy(model)
    c_op = StaticCache(config=model.config, max_cache_len=64)
    c_pt = StaticCache(config=model.config, max_cache_len=64)
    with torch.no_grad():
        patched(ids, **{CACHE: c_op})
        model(ids, **{CACHE: c_pt})
        for t in (5, 77, 300, 2):
            step = torch.tensor([[t]], device=ids.device)
            got = patched(step, **{CACHE: c_op}).logits
            want = model(step, **{CACHE: c_pt}).logits
            assert rel_err(got, want) < 0.05


def test_deepcopy_runs_on_its_own_runtime(model, ids):
    import copy
    patched = patched_copy(model)
    want = patched.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    clone = copy.deepcopy(patched)
    before = steps_executed(patched)
    got = clone.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want)
    assert steps_executed(patched) == before and steps_executed(clone) == 11  # its own state words


@pytest.mark.parametrize("multi_token", [False, True])
def test_replaced_weights_reach_compiled_and_fast_generate(model, ids, multi_token):
    import copy
    import tiles_ext
    patched = patched_copy(model, multi_token=multi_token)
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    before_change = patched.generate(ids, **kw)  # per-token: compiles the decode step (CUDA graphs)
    # A new LM head (rows rolled by one: every logit moves to the next token id), as a new Parameter.
    patched.lm_head.weight = torch.nn.Parameter(patched.lm_head.weight.detach().roll(1, dims=0).clone())
    ref = patched_copy(tiles_ext.unpatch(copy.deepcopy(patched)), multi_token=multi_token)
    before = steps_executed(patched)
    got = patched.generate(ids, **kw)
    assert steps_executed(patched) - before == 11
    assert torch.equal(got, ref.generate(ids, **kw))
    assert not torch.equal(got, before_change)


def test_bare_decode_steps_do_not_sync(model, ids):
    # The weight-binding check and the cache bookkeeping of a bare forward read host metadata only.
    patched = patched_copy(model)
    cache = StaticCache(config=model.config, max_cache_len=64)
    with torch.no_grad():
        out = patched(ids, **{CACHE: cache})
        token = out.logits[:, -1:].argmax(-1)
        out = patched(token, **{CACHE: cache})  # the first step reads the counter the prefill moved (one sync)
        token = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(4):
                out = patched(token, **{CACHE: cache})
                token = out.logits[:, -1:].argmax(-1)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert int(cache.get_seq_length()) == ids.shape[1] + 5


def test_a_model_moved_to_cuda_after_patch_is_replanned(model, ids):
    import copy
    import tiles_ext
    from tiles_ext.integrations import patch_state
    moved = tiles_ext.patch(copy.deepcopy(model).cpu(), plan_cache_dir=False)  # patched for the CPU executor
    assert patch_state(moved).decoder.device.type == "cpu" and not patch_state(moved).multi_token
    moved.to(ids.device)
    kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    got = moved.generate(ids, **kw)
    state = patch_state(moved)
    assert state.decoder.device == ids.device and state.multi_token  # CUDA's plan and default path
    assert state.decoder.plan.num_workers == torch.cuda.get_device_properties(ids.device).multi_processor_count
    assert torch.equal(got, patched_copy(model).generate(ids, **kw))
