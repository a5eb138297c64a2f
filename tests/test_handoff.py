"""TileRuntime's choice of hand-off (tiles_ext/runtime.py choose_handoff): counters or flag-in-data words.

The CUDA kernel runs both (decode_kernel_default.cu, decode_kernel_flags.cu); which one a runtime gets decides
its scratch arena's size and layout, so the choice is checked here on CPU with the kernel's constants stubbed. The
GPU tests (test_cuda_kernel.py) check that the two give the same bits and that a flag runtime refuses launches it
cannot run.
"""
import pytest
import torch

import tiles_ext  # noqa: F401
from tiles_ext import runtime
from tiles_ext.models import load_config
from tiles_ext.planner.plan import build_plan
from tiles_ext.planner.shape import ModelShape

CUDA = torch.device("cuda")  # a device object only: nothing runs on it here


@pytest.fixture
def cuda_build(monkeypatch):
    """A CUDA build's constants (FLAG_HANDOFFS, FLAG_HANDOFF_OPT: csrc/tiles_op.cpp) on this CPU machine."""
    monkeypatch.setattr(runtime, "_kernel_constants",
                        lambda: {"flags": True, "flag_opt": 25183, "attn_warps": True})
    for var in ("TILES_HANDOFF", "TILES_KERNEL_OPT", "TILES_GENERIC_KERNEL", "TILES_PREFETCH_BYTES"):
        monkeypatch.delenv(var, raising=False)


def _header(name, workers=132):
    return build_plan(ModelShape.from_config(load_config(name)), workers=workers, validate=False).header


def test_layer_bytes_per_worker_counts_the_seven_matrices():
    h = _header("llama-3.2-1b")
    # q 2048x2048, k and v 512x2048, o 2048x2048, gate / up / down 8192x2048, bf16, over 132 workers.
    assert runtime.layer_bytes_per_worker(h) == 2 * (2048 * 3072 + 2048 * 2048 + 3 * 2048 * 8192) // 132
    assert runtime.layer_bytes_per_worker(_header("smollm2-135m")) < 64 * 1024


def test_auto_takes_flags_where_they_measured_faster(cuda_build):
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA) == "flags"   # -11% (perf log v28)
    assert runtime.choose_handoff(_header("llama-3.2-1b"), CUDA) == "counters"  # +0.6-1.7% with flags
    # Fewer workers stream more bytes each: SmolLM2 on 4 workers is a wide model per worker.
    assert runtime.choose_handoff(_header("smollm2-135m", workers=4), CUDA) == "counters"


@pytest.mark.parametrize("var,val", [("TILES_KERNEL_OPT", "0"), ("TILES_GENERIC_KERNEL", "1"),
                                     ("TILES_PREFETCH_BYTES", "65536"), ("TILES_HANDOFF", "counters")])
def test_auto_binds_counters_for_launches_the_flag_kernel_does_not_run(cuda_build, monkeypatch, var, val):
    monkeypatch.setenv(var, val)
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA) == "counters"


def test_the_default_option_set_named_explicitly_keeps_flags(cuda_build, monkeypatch):
    monkeypatch.setenv("TILES_KERNEL_OPT", "25183")
    monkeypatch.setenv("TILES_PREFETCH_BYTES", "0")
    assert runtime.choose_handoff(_header("smollm2-135m"), CUDA) == "flags"


def test_explicit_choices_and_their_errors(cuda_build, monkeypatch):
    llama = _header("llama-3.2-1b")
    assert runtime.choose_handoff(llama, CUDA, "flags") == "flags"
    monkeypatch.setenv("TILES_HANDOFF", "flags")
    assert runtime.choose_handoff(llama, CUDA) == "flags"
    assert runtime.choose_handoff(llama, CUDA, "counters") == "counters"  # the argument wins over the variable
    with pytest.raises(ValueError, match="handoff 'flag' .*expected one of auto, counters, flags"):
        runtime.choose_handoff(llama, CUDA, "flag")
    with pytest.raises(ValueError, match="CPU reference executor"):
        runtime.choose_handoff(llama, "cpu", "flags")
    with pytest.raises(ValueError, match="CPU reference executor"):
        runtime.choose_handoff(llama, "cpu")  # TILES_HANDOFF=flags asks for what CPU does not have
    monkeypatch.setenv("TILES_HANDOFF", "auto")
    assert runtime.choose_handoff(_header("smollm2-135m"), "cpu") == "counters"


def test_cpu_runtime_arena_is_the_plans(monkeypatch):
    monkeypatch.delenv("TILES_HANDOFF", raising=False)
    plan = build_plan(ModelShape.from_config(load_config("smollm2-135m")), workers=4)
    rt = runtime.TileRuntime(plan, "cpu")
    assert rt.handoff == "counters" and not rt.flagged
    assert rt.scratch.numel() == plan.header["scratch_bytes"]
    with pytest.raises(ValueError, match="CPU reference executor"):
        runtime.TileRuntime(plan, "cpu", handoff="flags")


def _shape_header(heads, kv, hd, hidden=512):
    return {"num_heads": heads, "num_kv_heads": kv, "head_dim": hd, "hidden": hidden, "intermediate": 2 * hidden,
            "num_workers": 132}


def test_attn_warps_fit_takes_the_two_embedded_models_and_refuses_other_shapes():
    """The kernel's attention warp path (decode_kernel.h attn_warps_fit, perf log v45): G <= 4 query heads per KV
    head and head_dim 64 (8 positions per warp in a chunk of 128)."""
    assert runtime.attn_warps_fit(_header("llama-3.2-1b"))   # G 4, hd 64
    assert runtime.attn_warps_fit(_header("smollm2-135m"))   # G 3, hd 64
    assert runtime.attn_warps_fit(_shape_header(6, 6, 64))   # G 1
    assert not runtime.attn_warps_fit(_shape_header(8, 1, 64))   # G 8: 64 (position, head) pairs per warp
    assert not runtime.attn_warps_fit(_shape_header(8, 2, 128))  # hd 128: chunks of 64 positions
    assert not runtime.attn_warps_fit(_shape_header(4, 2, 32))   # hd 32: chunks of 256 positions
    assert not runtime.attn_warps_fit(_shape_header(6, 4, 64))   # heads not a multiple of the KV heads


def test_flags_need_the_warp_path_shape(cuda_build, monkeypatch):
    """Flag hand-offs run on the default kernel variant only, which compiles only the attention's warp path: 'auto'
    binds counters for other shapes however small, and 'flags' says why it cannot."""
    tiny_g8 = _shape_header(8, 1, 64)
    assert runtime.layer_bytes_per_worker(tiny_g8) < runtime.FLAG_HANDOFF_MAX_LAYER_BYTES_PER_WORKER
    assert runtime.choose_handoff(_shape_header(6, 2, 64), CUDA) == "flags"
    assert runtime.choose_handoff(tiny_g8, CUDA) == "counters"
    with pytest.raises(ValueError, match="G <= 4 query heads per KV head and head_dim 64.*8 heads over 1 KV heads"):
        runtime.choose_handoff(tiny_g8, CUDA, "flags")
    # A build without the warp path (TILES_ATTN_WARPS=0) runs every shape on its default variant.
    monkeypatch.setattr(runtime, "_kernel_constants",
                        lambda: {"flags": True, "flag_opt": 25183, "attn_warps": False})
    assert runtime.choose_handoff(tiny_g8, CUDA) == "flags"
