"""TileRuntime's choice of hand-off (tiles_ext/runtime.py choose_handoff): counters or flag-in-data words.

The CUDA build runs both for every shape (csrc/cuda/decode_kernel_{counters,flags}_hd<head_dim>.cu); which one a
runtime gets decides its scratch arena's size and layout, so the choice is checked here on CPU with the kernel's
constants stubbed. The GPU tests (test_cuda_kernel.py) check that the two give the same bits.
"""
import dataclasses

import pytest
import torch

import tiles_ext  # noqa: F401
from tiles_ext import runtime
from tiles_ext.families import shape_of
from tiles_ext.models import available_configs, load_config
from tiles_ext.planner.plan import build_plan

CUDA = torch.device("cuda")  # a device object only: nothing runs on it here


@pytest.fixture
def cuda_build(monkeypatch):
    """A CUDA build's constants (FLAG_HANDOFFS: csrc/tiles_op.cpp) on this CPU machine."""
    monkeypatch.setattr(runtime, "_kernel_constants", lambda: {"flags": True})


def _header(name, workers=132):
    return build_plan(shape_of(load_config(name)), workers=workers, validate=False).header


def _shape_header(heads, kv, hd, hidden=512):
    return {"num_heads": heads, "num_kv_heads": kv, "head_dim": hd, "hidden": hidden, "intermediate": 2 * hidden,
            "num_workers": 132}


def test_layer_bytes_per_worker_counts_the_seven_matrices():
    h = _header("llama-3.2-1b")
    # q 2048x2048, k and v 512x2048, o 2048x2048, gate / up / down 8192x2048, bf16, over 132 workers.
    assert runtime.layer_bytes_per_worker(h) == 2 * (2048 * 3072 + 2048 * 2048 + 3 * 2048 * 8192) // 132
    assert runtime.layer_bytes_per_worker(_header("smollm2-135m")) < 64 * 1024


def test_auto_takes_flags_where_they_measured_faster(cuda_build):
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA) == "flags"   # -11% with flags
    assert runtime.choose_handoff(_header("llama-3.2-1b"), CUDA) == "counters"  # +9.5% with flags
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA, "auto") == "flags"
    # Fewer workers stream more bytes each: SmolLM2 on 4 workers is a wide model per worker.
    assert runtime.choose_handoff(_header("smollm2-135m", workers=4), CUDA) == "counters"


def test_the_environment_does_not_choose(cuda_build, monkeypatch):
    """The hand-off is the `handoff` argument's alone: a variable left over from older builds changes nothing."""
    for var, val in (("TILES_HANDOFF", "counters"), ("TILES_KERNEL_OPT", "0"), ("TILES_GENERIC_KERNEL", "1"),
                     ("TILES_PREFETCH_BYTES", "65536")):
        monkeypatch.setenv(var, val)
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA) == "flags"
    assert runtime.choose_handoff(_header("llama-3.2-1b"), CUDA) == "counters"


def test_explicit_choices_and_their_errors(cuda_build):
    llama = _header("llama-3.2-1b")
    assert runtime.choose_handoff(llama, CUDA, "flags") == "flags"
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA, "counters") == "counters"
    with pytest.raises(ValueError, match="handoff 'flag': expected one of auto, counters, flags"):
        runtime.choose_handoff(llama, CUDA, "flag")
    with pytest.raises(ValueError, match="CPU reference executor"):
        runtime.choose_handoff(llama, "cpu", "flags")
    assert runtime.choose_handoff(_header("smollm2-135m"), "cpu") == "counters"
    assert runtime.choose_handoff(_header("smollm2-135m"), "cpu", "counters") == "counters"


def test_fp8_plans_hand_off_by_counters(cuda_build):
    """The FP8 kernels hand off by counters only: 'auto' takes them even for SmolLM2, 'flags' is refused by name."""
    fp8 = build_plan(dataclasses.replace(shape_of(load_config("smollm2-135m")), weight_format="fp8"), workers=132,
                     validate=False).header
    assert runtime.choose_handoff(fp8, CUDA) == "counters"
    with pytest.raises(ValueError, match="an FP8 plan runs with counter hand-offs only"):
        runtime.choose_handoff(fp8, CUDA, "flags")


def test_a_cpu_only_build_has_no_flags(monkeypatch):
    monkeypatch.setattr(runtime, "_kernel_constants", lambda: {"flags": False})
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA) == "counters"
    with pytest.raises(ValueError, match="needs a CUDA build"):
        runtime.choose_handoff(_header("smollm2-135m"), CUDA, "flags")


def test_cpu_runtime_arena_is_the_plans():
    plan = build_plan(shape_of(load_config("smollm2-135m")), workers=4)
    rt = runtime.TileRuntime(plan, "cpu")
    assert rt.handoff == "counters" and not rt.flagged
    assert rt.scratch.numel() == plan.header["scratch_bytes"]
    with pytest.raises(ValueError, match="CPU reference executor"):
        runtime.TileRuntime(plan, "cpu", handoff="flags")


def test_attn_warps_fit_takes_every_shipped_model_and_refuses_other_shapes():
    """The kernel's attention warp path (planner/format.py attn_warps_fit, rendered for decode_kernel.h): G <= 8
    query heads per KV head (the fragment rows lane >> 2) and head_dim 64, 96 or 128, a kernel each. The op refuses
    other shapes by name."""
    for name in available_configs():
        assert runtime.attn_warps_fit(_header(name)), name
    assert runtime.attn_warps_fit(_shape_header(6, 6, 64))    # G 1
    assert runtime.attn_warps_fit(_shape_header(8, 1, 64))    # G 8: the eight fragment rows
    assert runtime.attn_warps_fit(_shape_header(14, 2, 64))   # G 7 (Qwen2.5-0.5B)
    assert runtime.attn_warps_fit(_shape_header(10, 2, 96))   # G 5, hd 96: chunks of 85 positions
    assert runtime.attn_warps_fit(_shape_header(8, 2, 128))   # hd 128: chunks of 64 positions
    assert not runtime.attn_warps_fit(_shape_header(9, 1, 64))    # G 9
    assert not runtime.attn_warps_fit(_shape_header(4, 2, 32))    # hd 32: chunks of 256 positions
    assert not runtime.attn_warps_fit(_shape_header(4, 2, 256))   # hd 256
    assert not runtime.attn_warps_fit(_shape_header(6, 4, 64))    # heads not a multiple of the KV heads


@pytest.mark.parametrize("heads,kv,hd", [(8, 1, 64), (8, 2, 128), (10, 10, 96), (24, 8, 128)],
                         ids=["G8", "hd128", "hd96", "llama-3b"])
def test_flags_run_every_head_dim(cuda_build, heads, kv, hd):
    """Both hand-offs have a kernel for every head_dim: a small model of any served shape gets flags as any other,
    and an explicit 'flags' is never refused for its shape."""
    h = _shape_header(heads, kv, hd)
    assert runtime.attn_warps_fit(h)
    assert runtime.layer_bytes_per_worker(h) < runtime.FLAG_HANDOFF_MAX_LAYER_BYTES_PER_WORKER
    assert runtime.choose_handoff(h, CUDA) == "flags"
    assert runtime.choose_handoff(h, CUDA, "flags") == "flags"
    assert runtime.choose_handoff(h, CUDA, "counters") == "counters"


def test_cuda_runtimes_verify_several_rows_on_bf16_plans(monkeypatch):
    """TileRuntime.max_rows: on CUDA the build's rows kernels (CUDA_MAX_ROWS, csrc/tiles_op.cpp) for BF16 plans and
    one row for FP8 plans (the rows kernels read BF16 weights); on the CPU the plan's max_rows."""
    import dataclasses
    monkeypatch.setattr(runtime, "_kernel_constants", lambda: {"flags": True, "cuda_max_rows": 8})
    shape = shape_of(load_config("smollm2-135m"))
    for weight_format, on_cuda in (("bf16", 8), ("fp8", 1)):
        plan = build_plan(dataclasses.replace(shape, weight_format=weight_format), workers=13, validate=False)
        rt = object.__new__(runtime.TileRuntime)  # the property only: no tensors on a device here
        rt.plan = plan
        rt.device = CUDA
        assert rt.max_rows == on_cuda, weight_format
        rt.device = torch.device("cpu")
        assert rt.max_rows == plan.header["max_rows"] == 8
