"""FP8 weights on the embedded SmolLM2-135M-Instruct (trained weights), through the CPU reference executor.

1. Perplexity on tests/data/perplexity_text.txt (an English essay of 2,591 SmolLM2 tokens, written for these tests),
   every token after the first two scored by the op's decode steps: FP8 (patch(weights="fp8")'s per-row
   power-of-two scales) at most 2% above BF16.
2. Top-1 agreement of the FP8 and BF16 op over the first 64 of those teacher-forced steps, and over all of them.
3. The FP8 op against Transformers on the same dequantized weights, teacher-forced over 64 steps: within the BF16
   calibration of parity_helpers (error at most 1.5x Transformers-BF16's, top-1 at most one point lower), top-1
   counted over the steps whose fp32 top-2 margin exceeds BF16 noise (NOISE_FACTOR x the RMS of Transformers-BF16's
   error over the fp32 top-10 logits, as tests/test_parity_smollm2.py judges greedy divergences): at a near tie
   (this text's step 25: fp32 margin 0.0016 between two punctuation tokens) either token is right.
docs/numerics.md records the measured values; the bounds below leave room for nothing but rounding noise.
"""
import dataclasses

import pytest
import torch

from fp8_quality import op_steps, perplexity, text_ids
from fp8_support import dequantized_twin, quantized_copy
from parity_helpers import assert_parity, parity_report, teacher_forced
from tiles_ext.families import shape_of
from tiles_ext.planner.plan import build_plan

PPL_RATIO_MAX = 1.02      # the issue's target: FP8 perplexity within +2% of BF16's (measured 1.0183)
TOP1_64_MIN = 0.90        # measured 0.922 (59 of 64)
TOP1_ALL_MIN = 0.91       # measured 0.926
NOISE_FACTOR = 3.0


@pytest.fixture(scope="module")
def smollm2():
    from tiles_ext.models import load_default_model
    model, tok = load_default_model()
    return model, tok, quantized_copy(model, "fp8")


@pytest.fixture(scope="module")
def runs(smollm2):
    model, tok, fp8 = smollm2
    ids = text_ids(tok)
    assert ids.shape[1] >= 2000
    return op_steps(model, "bf16", ids), op_steps(fp8, "fp8", ids)


def test_fp8_perplexity_within_two_percent_of_bf16(runs):
    (nll16, _), (nll8, _) = runs
    ppl16, ppl8 = perplexity(nll16), perplexity(nll8)
    print(f"SmolLM2-135M perplexity over {nll16.numel()} op steps: BF16 {ppl16:.3f}, FP8 {ppl8:.3f} "
          f"({ppl8 / ppl16 - 1:+.2%})")
    assert ppl8 <= PPL_RATIO_MAX * ppl16


def test_fp8_top1_agrees_with_bf16(runs):
    (_, top16), (_, top8) = runs
    first, whole = float((top16[:64] == top8[:64]).float().mean()), float((top16 == top8).float().mean())
    print(f"SmolLM2-135M FP8 / BF16 top-1 agreement: {first:.3f} over 64 steps, {whole:.3f} over {top16.numel()}")
    assert first >= TOP1_64_MIN and whole >= TOP1_ALL_MIN


def test_fp8_op_parity_with_the_dequantized_model(smollm2):
    _, tok, fp8 = smollm2
    ids = text_ids(tok)[0]
    prompt, steps = 8, 64
    plan = build_plan(dataclasses.replace(shape_of(fp8.config), weight_format="fp8"), 8)
    r = teacher_forced(fp8, plan, ids[: prompt + steps], prompt, ref32=dequantized_twin(fp8))
    rep = parity_report(r)
    rep["op_top1"], rep["hf_top1"] = (decided_top1(r[k], r["ref"], r["hf"]) for k in ("op", "hf"))
    print("SmolLM2-135M FP8 teacher-forced vs the dequantized model: "
          + ", ".join(f"{k} {v:.4f}" for k, v in rep.items()))
    assert_parity(rep, "SmolLM2-135M FP8")


def decided_top1(x, ref, hf) -> float:
    """Top-1 agreement of x with ref over the steps ref decides beyond BF16 noise."""
    top = ref.topk(10, dim=-1)
    noise = NOISE_FACTOR * (hf.gather(-1, top.indices) - top.values).pow(2).mean(-1).sqrt()
    decided = (top.values[:, 0] - top.values[:, 1]) > noise
    print(f"  {int(decided.sum())} of {len(decided)} steps decided beyond BF16 noise")
    assert decided.sum() >= len(decided) // 2, "fewer than half of the steps decided: a text of near ties"
    return float((x.argmax(-1) == ref.argmax(-1))[decided].float().mean())
