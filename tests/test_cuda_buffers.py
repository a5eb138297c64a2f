"""Buffer-by-buffer agreement of the CUDA kernels with the CPU reference executor after one step (skipped without
CUDA or without the CPU executor). Both executors use the same plan, so the scratch arenas have the same layout (the
flagged arena's elements at twice their offsets): the first buffer that diverges names the op that is wrong. Both
hand-offs, Llama at head_dim 64 and 128, and the families' numeric features and shapes: Qwen2's q/k/v biases (G 7),
Qwen3's per-head q/k norms (q width other than hidden), Phi-3's head_dim 96. Also a diagnostic: it prints every
buffer's error.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

if torch.cuda.is_available():
    import tiles_ext  # noqa: F401
    from parity_helpers import family_config, tiny_model
    from tiles_ext.errors import check_state
    from tiles_ext.planner import format as fmt
    from tiles_ext.planner.plan import GpuTarget, build_plan
    from tiles_ext.runtime import TileRuntime, model_weights, rope_tables

    def _cpu_op_available():
        return torch._C._dispatch_has_kernel_for_dispatch_key("tiles::decode_step", "CPU")
else:
    def _cpu_op_available():
        return False

DTYPES = {0: torch.float32, 1: torch.bfloat16, 2: torch.int32}

# (model_type, hidden, heads, kv, head_dim, intermediate, layers, workers). Every case has more than one attention
# partition: a partition-0 ATTN tile that keeps its partials local (marked MERGE-next, partition 0 holding every
# position) leaves its slots of the partials buffer unwritten on the GPU, and the empty partitions' m = -inf (compared
# as -1e30) are what keeps that buffer's relative error small.
CASES = [("llama", 264, 6, 2, 64, 456, 2, 7), ("llama", 392, 8, 2, 128, 1000, 1, 13),
         ("llama", 256, 4, 4, 64, 512, 1, 132), ("qwen2", 896, 14, 2, 64, 512, 1, 13),
         ("qwen3", 256, 4, 2, 128, 512, 2, 7), ("phi3", 384, 4, 4, 96, 768, 1, 13)]


def _buffers(plan, scratch, flagged=False):
    """Every buffer as fp32 values. `flagged`: the arena of a runtime with flag hand-offs (TileRuntime.flagged),
    where each element is the low half of a word twice its size, at twice its offset."""
    out = []
    names = plan_buffer_names(plan)
    for b, (off, numel, dt) in enumerate(plan.buffers.tolist()):
        dtype = DTYPES[dt]
        size = torch.tensor([], dtype=dtype).element_size()
        if flagged:
            words = scratch[2 * off:2 * off + 2 * numel * size].view(-1, 2 * size)
            out.append((names[b], words[:, :size].contiguous().view(dtype).float().view(-1)))
        else:
            out.append((names[b], scratch[off:off + numel * size].view(dtype).float()))
    return out


def plan_buffer_names(plan):
    """The buffers' names, from the graph build_plan made the plan from (its default cut rules)."""
    from tiles_ext.planner.graph import build_graph
    from tiles_ext.planner.plan import DEFAULT_RULES
    g = build_graph(plan.shape, plan.num_workers, plan.policy, plan.header["attn_partitions"],
                    plan.header["attn_granule"], attn_single=plan.header["attn_single"], rules=DEFAULT_RULES)
    names = [b.name for b in g.buffers]
    assert len(names) == len(plan.buffers)
    return names


@pytest.mark.skipif(not _cpu_op_available(), reason="CPU reference executor not built")
@pytest.mark.parametrize("handoff", ["counters", "flags"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-h{c[1]}-q{c[2]}-kv{c[3]}-hd{c[4]}-W{c[7]}")
def test_scratch_buffers_match_cpu_after_each_step(case, handoff):
    model_type, h, nh, nkv, hd, inter, layers, workers = case
    cfg = family_config(model_type, h, nh, nkv, hd, inter, layers)
    model = tiny_model(cfg, seed=1)
    workers = min(workers, torch.cuda.get_device_properties(0).multi_processor_count)
    plan_g = build_plan(cfg, workers=workers, gpu=GpuTarget.of_device("cuda"))
    plan_c = build_plan(cfg, workers=workers)
    max_len = 80
    kvh = cfg.num_key_value_heads
    torch.manual_seed(0)
    kc = [torch.randn(1, kvh, max_len, hd, dtype=torch.bfloat16) for _ in range(layers)]
    vc = [torch.randn(1, kvh, max_len, hd, dtype=torch.bfloat16) for _ in range(layers)]
    kg, vg = [t.cuda() for t in kc], [t.cuda() for t in vc]
    wc = model_weights(model)
    wg = [w.cuda() for w in wc]
    inv, scale = rope_tables(model)
    rc, rg = TileRuntime(plan_c, "cpu"), TileRuntime(plan_g, "cuda", handoff)
    worst = []
    for step, (tok, pos) in enumerate([(5, 40), (17, 41), (3, 66)]):
        lc, tc = rc.step(wc, kc, vc, torch.tensor([tok]), torch.tensor([pos]), inv, scale, 1, [])
        lg, tg = rg.step(wg, kg, vg, torch.tensor([tok], device="cuda"), torch.tensor([pos], device="cuda"),
                         inv.cuda(), scale, 1, [])
        torch.cuda.synchronize()
        check_state(rg.state, plan_g)
        bc, bg = _buffers(plan_c, rc.scratch), _buffers(plan_g, rg.scratch.cpu(), rg.flagged)
        for (name, a), (_, b) in zip(bc, bg):
            fa, fb = torch.nan_to_num(a, neginf=-1e30), torch.nan_to_num(b, neginf=-1e30)
            err = float((fa - fb).norm() / fa.norm().clamp_min(1e-30))
            worst.append((err, step, name))
            print(f"step {step} {name:>14}: rel err {err:.2e}")
        lerr = float((lc - lg.cpu()).norm() / lc.norm())
        kerr = max(float((a.float() - b.cpu().float()).norm() / a.float().norm()) for a, b in zip(kc, kg))
        print(f"step {step} logits rel err {lerr:.2e}, tokens cpu {tc.tolist()} cuda {tg.tolist()}, "
              f"cache rel err {kerr:.2e}")
        assert lerr < 1e-2, f"step {step}: logits differ by {lerr:.2e}"
        assert kerr < 1e-2
        assert int(rg.state[fmt.StateWord.EPOCH]) == step + 1
    bad = [w for w in worst if not w[0] < 1e-2]
    assert not bad, f"buffers diverge: {sorted(bad, reverse=True)[:5]}"
