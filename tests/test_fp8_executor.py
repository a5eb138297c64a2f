"""The CPU reference executor on FP8 plans: E4M3 matrices with per-row or 128 x 128 block scales, teacher-forced
against Transformers in fp32 on the same dequantized weights, within the BF16 calibration of parity_helpers."""
import dataclasses

import pytest
import torch

from fp8_support import dequantized_twin, quantized_copy
from parity_helpers import assert_parity, family_config, parity_report, teacher_forced, tiny_config, tiny_model
from tiles_ext.families import shape_of
from tiles_ext.planner.plan import build_plan

CASES = {
    # hidden 320: 2.5 blocks of 128 columns (a partial edge block); intermediate 704: 5.5 blocks of rows
    "gqa2-hd64-partial-blocks": (tiny_config(320, 5, 1, 64, 704, 2), 7),
    "gqa4-hd128-llama3": (tiny_config(512, 8, 2, 128, 1024, 2, llama3=True), 13),
    "qwen2-bias": (family_config("qwen2", 384, 6, 2, 64, 768, 2), 5),
}


def fp8_plan(model, weight_format, workers):
    return build_plan(dataclasses.replace(shape_of(model.config), weight_format=weight_format), workers)


@pytest.mark.parametrize("weight_format", ["fp8", "fp8_block128"])
@pytest.mark.parametrize("case", list(CASES))
def test_fp8_parity(case, weight_format):
    config, workers = CASES[case]
    model = quantized_copy(tiny_model(config), weight_format)
    ids = torch.randint(0, config.vocab_size, (72,), generator=torch.Generator().manual_seed(1))  # 64 steps
    r = teacher_forced(model, fp8_plan(model, weight_format, workers), ids, 8, ref32=dequantized_twin(model))
    assert_parity(parity_report(r), f"{case} {weight_format}")


def test_fp8_runs_are_bit_identical_whatever_the_interleaving():
    config, workers = CASES["gqa2-hd64-partial-blocks"]
    model = quantized_copy(tiny_model(config), "fp8_block128")
    ids = torch.randint(0, config.vocab_size, (12,), generator=torch.Generator().manual_seed(2))
    plan = fp8_plan(model, "fp8_block128", workers)
    ref32 = dequantized_twin(model)
    a = teacher_forced(model, plan, ids, 4, ref32=ref32)["op"]
    b = teacher_forced(model, plan, ids, 4, ref32=ref32, order_seed=3)["op"]
    assert torch.equal(a, b)


def test_fp8_plan_refuses_bf16_matrices():
    """The op checks every weight's dtype against the plan's format, naming the slot."""
    config, workers = CASES["gqa2-hd64-partial-blocks"]
    bf16 = tiny_model(config)
    fp8 = quantized_copy(bf16, "fp8")
    plan = fp8_plan(fp8, "fp8", workers)
    from parity_helpers import Bound, prefill
    bound = Bound.of(fp8, plan)
    bound.weights[1] = bf16.model.layers[0].self_attn.q_proj.weight.detach()
    with pytest.raises(RuntimeError, match=r"weights\[1\] \(q, layer 0\) has dtype BFloat16, expected Float8_e4m3fn"):
        bound.step(prefill(fp8, ids := torch.tensor([[1, 2, 3]]), 8), 4, ids.shape[1])
