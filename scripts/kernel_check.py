#!/usr/bin/env python3
"""GPU correctness and speed report of the persistent decode kernel (tiles::decode_step on CUDA).

    python scripts/kernel_check.py [--quick] [--no-baseline] [--hd128] [--json PATH]

Measures, in one run on one GPU:
  - the read bandwidth (tiles_ext.bench.bandwidth, the benchmark's; the floor is the model's weight bytes over it),
  - correctness on the Llama-3.2-1B shape (random BF16 weights): teacher-forced logits against Transformers fp32
    (the op's error at most 1.5x Transformers-BF16's own), and bit-identical results run to run;
  - for Llama-3.2-1B and SmolLM2-135M, with counter and with flag-in-data hand-offs (both run every shape): the
    two give the same bits (logits, tokens, K/V rows) at a short and a long context, and ms/token one token per
    launch (eager loop and CUDA-graph replay) and 64 tokens per launch, against the floor; which hand-off the
    runtime picks (tiles_ext.runtime.choose_handoff);
  - the PyTorch baseline (--no-baseline skips it): the Transformers decode step (StaticCache) captured into a CUDA
    graph (torch.compile(mode="reduce-overhead") if manual capture fails);
  - --hd128: the same hand-off checks and timings on Llama-3.2-3B (configs/llama-3.2-3b-config.json, random
    weights: head_dim 128, G 3, the attention's warp path in its head_dim-128 kernels), at contexts 32 and 2000.
Writes JSON to docs/results/kernel-<gpu>-<date>.json (or --json) and $OUT/kernel_check.json when $OUT is set (after
every section), prints a summary table. Exit status 1 when a check failed.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import tiles_ext  # noqa: E402,F401
from tiles_ext.bench.bandwidth import measure_read_bandwidth  # noqa: E402
from tiles_ext.errors import check_state  # noqa: E402
from tiles_ext.families import shape_of  # noqa: E402
from tiles_ext.models import load_config, random_model  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402
from tiles_ext.runtime import TileRuntime, choose_handoff, model_weights, rope_tables  # noqa: E402

DEV = "cuda"
HANDOFFS = ("counters", "flags")


def log(*a):
    print(*a, flush=True)


def time_per_call(fn, n, warm=5, reps=3):
    """Median over reps of (event time of n back-to-back calls) / n, in ms."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / n)
    return statistics.median(out)


class Op:
    """A model bound to a plan with one hand-off and its own synthetic KV cache (random contents, seeded)."""

    def __init__(self, model, plan, max_len, handoff):
        self.plan = plan
        self.rt = TileRuntime(plan, DEV, handoff)
        self.w = model_weights(model)
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(DEV)
        c = model.config
        kvh, hd = c.num_key_value_heads, getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        g = torch.Generator(device=DEV).manual_seed(0)
        self.k = [torch.randn(1, kvh, max_len, hd, device=DEV, dtype=torch.bfloat16, generator=g)
                  for _ in range(c.num_hidden_layers)]
        self.v = [torch.randn(1, kvh, max_len, hd, device=DEV, dtype=torch.bfloat16, generator=g)
                  for _ in range(c.num_hidden_layers)]
        self.ids = torch.tensor([1], device=DEV)
        self.pos = torch.tensor([0], device=DEV)

    def __call__(self, n=1, eos=()):
        return self.rt.step(self.w, self.k, self.v, self.ids, self.pos, self.inv, self.scale, n, eos)


def time_op(op, ctx, iters, graph_only=False):
    op.pos.fill_(ctx)
    if not graph_only:
        single = time_per_call(lambda: op(1), iters)
        multi = time_per_call(lambda: op(64), max(2, iters // 32), warm=2) / 64
    # One call captured into a CUDA graph (no host work per replay).
    g = torch.cuda.CUDAGraph()
    op(1)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        op(1)
    graph = time_per_call(g.replay, iters)
    check_state(op.rt.state, op.plan)
    if graph_only:
        return {"graph_ms": graph}
    return {"single_ms": single, "graph_ms": graph, "multi64_ms_per_token": multi}


def outputs(op, ctx, n=16):
    """(logits, tokens, K and V rows written) of one n-token launch from ctx; the rows >= ctx reset first, so that
    every call (and every hand-off) starts from the same cache."""
    for k, v in zip(op.k, op.v):
        k[:, :, ctx:ctx + n + 1].zero_()
        v[:, :, ctx:ctx + n + 1].zero_()
    op.pos.fill_(ctx)
    l, t = op(n)
    torch.cuda.synchronize()
    check_state(op.rt.state, op.plan)
    return (l.clone(), t.clone(), torch.stack([k[:, :, ctx:ctx + n].clone() for k in op.k]),
            torch.stack([v[:, :, ctx:ctx + n].clone() for v in op.v]))


def same_bits(a, b):
    def bits(x):
        return x.view(torch.int32) if x.dtype == torch.float32 else (
            x.view(torch.int16) if x.dtype == torch.bfloat16 else x)
    return all(torch.equal(bits(x), bits(y)) for x, y in zip(a, b))


def parity(model, plan, steps=16, prompt=16):
    from test_cuda_kernel import report, teacher_forced_gpu
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, model.config.vocab_size, (prompt + steps,), generator=g)
    return report(teacher_forced_gpu(model, plan, ids, prompt))


def determinism(op, ctx, repeats=5):
    first = outputs(op, ctx)
    return all(same_bits(outputs(op, ctx), first) for _ in range(repeats))


def hf_graph_baseline(model, ctx, iters):
    """Transformers decode step with a StaticCache, manually captured into a CUDA graph; falls back to
    torch.compile(mode='reduce-overhead') when capture is refused."""
    from transformers import StaticCache
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, ctx), device=DEV)
    total = 3 * iters + 64
    cache = StaticCache(config=model.config, max_cache_len=ctx + total)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    tok = torch.randint(0, vocab, (1, 1), device=DEV)
    posid = torch.tensor([[ctx]], device=DEV)

    def step():
        return model(input_ids=tok, position_ids=posid, past_key_values=cache, use_cache=True).logits

    with torch.no_grad():
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            ms = time_per_call(g.replay, iters, warm=3)
            return {"method": "manual CUDA graph of the eager Transformers step", "ms": ms}
        except Exception as e:  # capture refused: compiled step instead
            log(f"[baseline] manual capture failed ({type(e).__name__}: {str(e)[:200]}); trying torch.compile")
    t0 = time.perf_counter()
    cache = StaticCache(config=model.config, max_cache_len=ctx + total)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        cstep = torch.compile(step, mode="reduce-overhead", fullgraph=False)
        for _ in range(3):
            cstep()
        compile_s = time.perf_counter() - t0
        ms = time_per_call(cstep, iters, warm=3)
    return {"method": "torch.compile(mode='reduce-overhead') Transformers step", "ms": ms, "compile_s": compile_s}


def check_model(name, cfg, bw, iters, ctxs, res, save, long_ctx=None):
    """The hand-off checks and timings of one model shape (random weights, seed 0, this GPU's plan) into
    res[name]. Returns the model (for the parity and baseline sections)."""
    props = torch.cuda.get_device_properties(0)
    model = random_model(cfg, device=DEV, seed=0)
    plan = build_plan(cfg, workers=props.multi_processor_count, gpu=GpuTarget.of_device(DEV))
    wbytes = shape_of(cfg).weight_bytes()
    floor_ms = wbytes / (bw * 1e12) * 1e3
    r = res[name] = {"weight_bytes": wbytes, "floor_ms": floor_ms, "tiles": plan.header["num_tiles"],
                     "auto_handoff": choose_handoff(plan.header, DEV)}
    log(f"{name}: {wbytes / 1e9:.3f} GB/token, floor {floor_ms:.4f} ms; auto hand-off {r['auto_handoff']}")
    max_len = max(ctxs + ((long_ctx,) if long_ctx else ())) + 80
    ops = {}
    try:
        ops = {h: Op(model, plan, max_len, h) for h in HANDOFFS}
        for ctx in ctxs:
            same = same_bits(outputs(ops["counters"], ctx), outputs(ops["flags"], ctx))
            r[f"counters_eq_flags_ctx{ctx}"] = same
            log(f"{name} ctx {ctx}: counters and flags bit-identical: {same}")
            if not same:
                res["errors"].append(f"{name} ctx {ctx}: the hand-offs' results differ (must be bit-identical)")
        for h, op in ops.items():
            r[f"{h}_bit_identical_repeats"] = same = determinism(op, ctxs[0])
            if not same:
                res["errors"].append(f"{name} {h}: repeated launches differ (must be bit-identical)")
    except Exception as e:
        res["errors"].append(f"{name} bit-identity: {e}")
        traceback.print_exc()
    save()
    for h, op in ops.items():
        for ctx in ctxs:
            try:
                t = time_op(op, ctx, iters)
                t["fraction_of_floor"] = floor_ms / min(t.values())
                r[f"{h}_ctx{ctx}"] = t
                log(f"{name} {h} ctx {ctx}: " + ", ".join(f"{k} {v:.4f}" for k, v in t.items()))
            except Exception as e:
                res["errors"].append(f"{name} {h} ctx {ctx}: {e}")
                traceback.print_exc()
            save()
    del ops
    torch.cuda.empty_cache()
    if long_ctx:  # where attention, not weights, decides (graph replay, one token per launch)
        try:
            op = Op(model, plan, long_ctx + 64, r["auto_handoff"])
            t = time_op(op, long_ctx, max(10, iters // 4), graph_only=True)
            r[f"{r['auto_handoff']}_ctx{long_ctx}"] = t
            log(f"{name} {r['auto_handoff']} ctx {long_ctx}: graph {t['graph_ms']:.4f} ms/token")
            del op
        except Exception as e:
            res["errors"].append(f"{name} ctx {long_ctx}: {e}")
            traceback.print_exc()
        torch.cuda.empty_cache()
        save()
    return model, plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer timing iterations")
    ap.add_argument("--no-baseline", action="store_true", help="skip the Transformers CUDA-graph baseline")
    ap.add_argument("--hd128", action="store_true",
                    help="also Llama-3.2-3B (head_dim 128: the attention's head_dim-128 kernels)")
    ap.add_argument("--json", default=None, help="result file (default docs/results/kernel-<gpu>-<date>.json)")
    args = ap.parse_args()
    iters = 50 if args.quick else 200
    props = torch.cuda.get_device_properties(0)
    res = {"gpu": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "errors": []}
    t_start = time.perf_counter()
    gpu = "".join(ch for ch in props.name.lower().replace("nvidia", "").strip().replace(" ", "-")
                  if ch.isalnum() or ch == "-")
    day = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    paths = [Path(args.json) if args.json else ROOT / "docs" / "results" / f"kernel-{gpu}-{day}.json"]
    if os.environ.get("OUT"):
        paths.append(Path(os.environ["OUT"]) / "kernel_check.json")

    def save():
        # After every section, so that a run stopped by its time limit still leaves what it measured.
        res["wall_s"] = time.perf_counter() - t_start
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(res, indent=2))

    rb = measure_read_bandwidth(torch.device(DEV))  # the benchmark's floor: the fastest of its readers
    bw = res["read_bw_tbs"] = rb["tb_per_s"]
    res["read_bw_method"] = rb["method"]
    log(f"read bandwidth ({rb['method']}): {bw:.3f} TB/s")
    save()

    model, plan = check_model("llama_1b", load_config("llama-3.2-1b"), bw, iters, (32, 4064), res, save,
                              long_ctx=16000)
    try:
        rep = res["llama_1b"]["parity"] = parity(model, plan)
        log("parity (16 teacher-forced steps): " + ", ".join(f"{k} {v:.5f}" for k, v in rep.items()))
        if not rep["op_err"] <= 1.5 * rep["hf_err"]:
            res["errors"].append(f"parity: op error {rep['op_err']:.5f} > 1.5 x HF-bf16's {rep['hf_err']:.5f}")
    except Exception as e:
        res["errors"].append(f"parity: {e}")
        traceback.print_exc()
    save()
    if not args.no_baseline:
        try:
            b = res["llama_1b"]["baseline_ctx32"] = hf_graph_baseline(model, 32, min(iters, 100))
            log(f"baseline ctx 32: {b}")
        except Exception as e:
            res["errors"].append(f"baseline: {e}")
            traceback.print_exc()
        save()
    del model, plan
    torch.cuda.empty_cache()

    shapes = [("smollm2_135m", load_config("smollm2-135m"), (32, 2000))]
    if args.hd128:
        shapes.append(("llama_3b", load_config("llama-3.2-3b"), (32, 2000)))
    for name, cfg, ctxs in shapes:
        try:
            model, plan = check_model(name, cfg, bw, iters, ctxs, res, save)
            del model, plan
        except Exception as e:
            res["errors"].append(f"{name}: {e}")
            traceback.print_exc()
        torch.cuda.empty_cache()
    save()

    log("\n=== kernel_check summary ===")
    log(f"GPU {res['gpu']} ({res['sm_count']} SMs), read bandwidth {bw:.3f} TB/s")
    log(f"{'case':<44}{'ms/token':>10}{'floor frac':>12}")
    for name in ("llama_1b", "smollm2_135m", "llama_3b"):
        r = res.get(name)
        if not r:
            continue
        for key, t in r.items():
            if isinstance(t, dict) and "graph_ms" in t:
                for k in ("single_ms", "graph_ms", "multi64_ms_per_token"):
                    if k in t:
                        log(f"{f'{name} {key} {k}':<44}{t[k]:>10.4f}{r['floor_ms'] / t[k]:>12.3f}")
        checks = {k: v for k, v in r.items() if "bit_identical" in k or "counters_eq_flags" in k}
        log(f"{name}: auto hand-off {r['auto_handoff']}; " + ", ".join(f"{k} {v}" for k, v in checks.items()))
    L = res.get("llama_1b", {})
    if "baseline_ctx32" in L:
        b = L["baseline_ctx32"]
        log(f"{'baseline ctx 32 (' + b['method'][:18] + ')':<44}{b['ms']:>10.4f}{L['floor_ms'] / b['ms']:>12.3f}")
    if "parity" in L:
        log(f"parity vs HF fp32: op {L['parity']['op_err']:.5f} vs HF-bf16 {L['parity']['hf_err']:.5f} "
            f"(ratio {L['parity']['ratio']:.3f})")
    if res["errors"]:
        log("errors: " + " | ".join(res["errors"]))
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
