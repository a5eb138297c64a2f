#!/usr/bin/env python3
"""GPU correctness and speed report of the persistent decode kernel (tiles::decode_step on CUDA).

    python scripts/kernel_check.py [--quick] [--no-baseline] [--json PATH]

Measures, in one run on one GPU:
  - the read bandwidth (tiles_ext.bench.bandwidth, the benchmark's; the floor is the model's weight bytes over it),
  - the op's ms/token on the Llama-3.2-1B shape (random BF16 weights), batch 1: one token per launch (eager loop
    and CUDA-graph replay) and 64 tokens per launch, at context 32 and ~4096, plus the SmolLM2-135M shape,
  - the latency options (TILES_KERNEL_OPT sets, --opts): each timed and checked bit-identical to the first set,
    the fastest identical set used for the rest; an L2-prefetch sweep under it (TILES_PREFETCH_BYTES / _NEXT),
  - the PyTorch baseline: the Transformers model's decode step (StaticCache) captured into a CUDA graph
    (torch.compile(mode="reduce-overhead") if manual capture fails),
  - a correctness summary: teacher-forced logits vs Transformers BF16/fp32, bit-identical repeats.
Writes JSON to docs/results/kernel-<gpu>-<date>.json and $OUT/kernel_check.json (if $OUT is set), prints a table.
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
from tiles_ext.models import load_config, random_model  # noqa: E402
from tiles_ext.planner.plan import GpuTarget, build_plan  # noqa: E402
from tiles_ext.planner.shape import ModelShape  # noqa: E402
from tiles_ext.runtime import TileRuntime, choose_handoff, model_weights, rope_tables  # noqa: E402

DEV = "cuda"


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
    """A model bound to a plan with its own synthetic KV cache (random contents) for timing."""

    def __init__(self, model, plan, max_len):
        self.plan = plan
        self.rt = None
        self.bind()
        self.w = model_weights(model)
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(DEV)
        c = model.config
        kvh, hd = c.num_key_value_heads, getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.k = [torch.randn(1, kvh, max_len, hd, device=DEV, dtype=torch.bfloat16) for _ in
                  range(c.num_hidden_layers)]
        self.v = [torch.randn(1, kvh, max_len, hd, device=DEV, dtype=torch.bfloat16) for _ in
                  range(c.num_hidden_layers)]
        self.ids = torch.tensor([1], device=DEV)
        self.pos = torch.tensor([0], device=DEV)

    def bind(self):
        """(Re)binds the runtime when the environment's hand-off choice (TILES_HANDOFF, TILES_KERNEL_OPT: runtime.py
        choose_handoff) differs from the bound one: a runtime's hand-off is fixed for its life."""
        want = choose_handoff(self.plan.header, DEV)
        if self.rt is None or self.rt.handoff != want:
            self.rt = TileRuntime(self.plan, DEV, want)

    def __call__(self, n=1, eos=()):
        return self.rt.step(self.w, self.k, self.v, self.ids, self.pos, self.inv, self.scale, n, eos)


def default_op(name, max_len):
    """An Op on model `name`'s shape: random weights (seed 0), this GPU's default plan, a K/V cache of max_len rows
    whose random contents are seeded too (0): the same inputs in every process."""
    cfg = load_config(name)
    model = random_model(cfg, device=DEV, seed=0)
    plan = build_plan(cfg, workers=torch.cuda.get_device_properties(0).multi_processor_count,
                      gpu=GpuTarget.of_device(DEV))
    torch.manual_seed(0)
    return Op(model, plan, max_len)


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
    """(logits, tokens, K cache) of n multi-token steps from ctx; cache rows >= ctx reset first."""
    for k, v in zip(op.k, op.v):
        k[:, :, ctx:ctx + n + 1].zero_()
        v[:, :, ctx:ctx + n + 1].zero_()
    op.pos.fill_(ctx)
    l, t = op(n)
    torch.cuda.synchronize()
    check_state(op.rt.state, op.plan)
    return l.clone(), t.clone(), torch.stack([k[:, :, ctx:ctx + n].clone() for k in op.k])


def same_bits(a, b):
    return all(torch.equal(x.view(torch.int32) if x.dtype == torch.float32 else
                           (x.view(torch.int16) if x.dtype == torch.bfloat16 else x),
                           y.view(torch.int32) if y.dtype == torch.float32 else
                           (y.view(torch.int16) if y.dtype == torch.bfloat16 else y)) for x, y in zip(a, b))


def option_sweep(op, model, plan, opt_list, iters, res, ctxs=(32, 4064)):
    """Times each option set (graph replay, context ctxs[0]) and checks it bit-identical to set 0 at every ctx.
    Returns (rows, op): a failing option poisons the runtime's state, so a fresh Op replaces it."""
    rows, ref = [], {}
    max_len = op.k[0].shape[2]
    for opt in opt_list:
        os.environ["TILES_KERNEL_OPT"] = str(opt)
        op.bind()
        try:
            same = True
            for ctx in ctxs:
                o = outputs(op, ctx)
                if opt == opt_list[0]:
                    ref[ctx] = o
                else:
                    same &= same_bits(o, ref[ctx])
            t = time_op(op, ctxs[0], iters, graph_only=True)
            rows.append({"opt": opt, "bit_identical_to_first": same, **t})
            log(f"kernel opt {opt:>3}: graph {t['graph_ms']:.4f} ms/token (ctx {ctxs[0]}), bit-identical: {same}")
            if not same:
                res["errors"].append(f"kernel opt {opt} changed the results (must be bit-identical)")
        except Exception as e:
            res["errors"].append(f"opt {opt}: {e}")
            traceback.print_exc()
            rows.append({"opt": opt, "error": str(e)[:300]})
            op = Op(model, plan, max_len)
    return rows, op


def pick_best(rows):
    good = [r for r in rows if r.get("bit_identical_to_first") is True and "graph_ms" in r]
    return min(good, key=lambda r: r["graph_ms"])["opt"] if good else 0


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
    deadline = float(os.environ.get("KC_DEADLINE", "0") or 0)
    if deadline and time.time() > deadline - 100:
        raise RuntimeError("no time left for the torch.compile baseline (KC_DEADLINE)")
    t0 = time.perf_counter()
    cache = StaticCache(config=model.config, max_cache_len=ctx + total)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        cstep = torch.compile(step, mode="reduce-overhead", fullgraph=False)
        for _ in range(3):
            cstep()
        compile_s = time.perf_counter() - t0
        ms = time_per_call(cstep, iters, warm=3)
    return {"method": "torch.compile(mode='reduce-overhead') Transformers step", "ms": ms,
            "compile_s": compile_s}


def correctness(model, plan, steps=16, prompt=16):
    from test_cuda_kernel import report, teacher_forced_gpu
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, model.config.vocab_size, (prompt + steps,), generator=g)
    rep = report(teacher_forced_gpu(model, plan, ids, prompt))
    return rep


def determinism(op, ctx, repeats=5, n=16):
    op.pos.fill_(ctx)
    first_l, first_t = op(n)
    same = True
    for _ in range(repeats):
        l, t = op(n)
        same &= bool(torch.equal(t, first_t)) and bool(torch.equal(l.view(torch.int32), first_l.view(torch.int32)))
    check_state(op.rt.state, op.plan)
    return same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--opts", default="0,1,2,4,8,16,36,64,15,31,63,127,126,125,119,111,95,91,223,479,512,607",
                    help="TILES_KERNEL_OPT sets to compare (the first is the bit-identity reference)")
    args = ap.parse_args()
    iters = 50 if args.quick else 200
    props = torch.cuda.get_device_properties(0)
    gpu = GpuTarget.of_device(DEV)
    res = {"gpu": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "errors": []}
    t_start = time.perf_counter()
    name = "".join(ch for ch in props.name.lower().replace("nvidia", "").strip().replace(" ", "-")
                   if ch.isalnum() or ch == "-")
    day = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    paths = [Path(args.json) if args.json else ROOT / "docs" / "results" / f"kernel-{name}-{day}.json"]
    if os.environ.get("OUT"):
        paths.append(Path(os.environ["OUT"]) / "kernel_check.json")

    def save():
        # After every section, so that a run stopped by its time limit still leaves what it measured.
        res["wall_s"] = time.perf_counter() - t_start
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(res, indent=2))

    rb = measure_read_bandwidth(torch.device(DEV))  # the benchmark's floor: the fastest of its readers
    bw = rb["tb_per_s"]
    res["read_bw_tbs"] = bw
    res["read_bw_method"] = rb["method"]
    log(f"read bandwidth ({rb['method']}): {bw:.3f} TB/s")
    save()

    cfg = load_config("llama-3.2-1b")
    shape = ModelShape.from_config(cfg)
    model = random_model(cfg, device=DEV, seed=0)
    plan = build_plan(cfg, workers=props.multi_processor_count, gpu=gpu)
    wbytes = shape.weight_bytes()
    floor_ms = wbytes / (bw * 1e12) * 1e3
    res["llama_1b"] = {"weight_bytes": wbytes, "floor_ms": floor_ms, "tiles": plan.header["num_tiles"]}
    log(f"llama-3.2-1b: {wbytes / 1e9:.3f} GB/token, floor {floor_ms:.3f} ms at the measured bandwidth")

    try:
        rep = correctness(model, plan)
        res["llama_1b"]["parity"] = rep
        log("parity (16 teacher-forced steps): " + ", ".join(f"{k} {v:.5f}" for k, v in rep.items()))
    except Exception as e:
        res["errors"].append(f"parity: {e}")
        traceback.print_exc()
    save()

    op = Op(model, plan, 4096 + 256)
    try:
        res["llama_1b"]["bit_identical_repeats"] = determinism(op, 32)
    except Exception as e:
        res["errors"].append(f"determinism: {e}")
        traceback.print_exc()

    # Latency options (TILES_KERNEL_OPT bits, decode_kernel.h): each timed at context 32 (CUDA-graph replay) and
    # checked bit-identical to 0 (16 multi-token steps at context 32 and 4064: logits, tokens, the K cache).
    # Each set with the op's default prefetch window (0 with StageWeights, else 64 KB; decode_step_cuda.cpp).
    os.environ.pop("TILES_PREFETCH_BYTES", None)
    os.environ["TILES_PREFETCH_NEXT"] = "0"
    opt_list = [int(x) for x in args.opts.split(",")]
    opts, op = option_sweep(op, model, plan, opt_list, iters, res)
    os.environ["TILES_KERNEL_OPT"] = str(opt_list[0])
    try:
        outputs_ref = outputs(op, 32)  # the reference set's outputs, for the ring sweep's bit-identity check
    except Exception:
        outputs_ref = None
    res["llama_1b"]["kernel_opts"] = opts
    best_opt = pick_best(opts)
    res["llama_1b"]["best_opt"] = best_opt
    save()

    # Prefetch window under the best option set (context 32, graph replay). With the weight ring (1024) the window
    # is off and the ring's L2 look-ahead (batches per warp beyond the ring) is swept instead.
    ring_rows = [r for r in opts if r.get("opt", 0) & 1024 and r.get("bit_identical_to_first") and "graph_ms" in r]
    if ring_rows:
        ring_opt = min(ring_rows, key=lambda r: r["graph_ms"])["opt"]
        os.environ["TILES_KERNEL_OPT"] = str(ring_opt)
        ring_sweep = []
        for ahead in (0, 2, 8):
            os.environ["TILES_RING_L2_AHEAD"] = str(ahead)
            try:
                same = same_bits(outputs(op, 32), outputs_ref) if outputs_ref is not None else None
                t = time_op(op, 32, iters, graph_only=True)
                ring_sweep.append({"ring_l2_ahead": ahead, "bit_identical_to_first": same, **t})
                log(f"opt {ring_opt} ring L2 ahead {ahead:>2}: graph {t['graph_ms']:.4f} ms/token, "
                    f"bit-identical {same}")
            except Exception as e:
                res["errors"].append(f"ring sweep {ahead}: {e}")
                traceback.print_exc()
                op = Op(model, plan, 4096 + 256)
        os.environ["TILES_RING_L2_AHEAD"] = "0"
        for slots in (2, 3):  # fewer bytes in flight per warp (4 is the row above with look-ahead 0)
            os.environ["TILES_RING_SLOTS"] = str(slots)
            try:
                t = time_op(op, 32, iters, graph_only=True)
                ring_sweep.append({"ring_l2_ahead": 0, "ring_slots": slots, **t})
                log(f"opt {ring_opt} ring slots {slots}: graph {t['graph_ms']:.4f} ms/token")
            except Exception as e:
                res["errors"].append(f"ring slots {slots}: {e}")
                traceback.print_exc()
                op = Op(model, plan, 4096 + 256)
        os.environ.pop("TILES_RING_SLOTS", None)
        res["llama_1b"]["ring_l2_sweep"] = ring_sweep
        ahead_rows = [r for r in ring_sweep if "ring_slots" not in r]
        if ahead_rows:
            best_ring = min(ahead_rows, key=lambda r: r["graph_ms"])
            os.environ["TILES_RING_L2_AHEAD"] = str(best_ring["ring_l2_ahead"])
            res["llama_1b"]["best_ring_l2_ahead"] = best_ring["ring_l2_ahead"]
            if best_ring.get("bit_identical_to_first") and best_ring["graph_ms"] < min(
                    r["graph_ms"] for r in opts if "graph_ms" in r):
                best_opt = ring_opt
                res["llama_1b"]["best_opt"] = best_opt
    os.environ["TILES_KERNEL_OPT"] = str(best_opt)
    sweep = []
    for pbytes, pnext in (((0, 0),) if best_opt & 1024 else
                          ((0, 0), (65536, 0))):  # larger windows lost every time (v1-v4)
        os.environ["TILES_PREFETCH_BYTES"], os.environ["TILES_PREFETCH_NEXT"] = str(pbytes), str(pnext)
        try:
            t = time_op(op, 32, iters, graph_only=True)
            sweep.append({"prefetch_bytes": pbytes, "prefetch_next": pnext, **t})
            log(f"opt {best_opt} prefetch {pbytes:>8} next {pnext}: graph {t['graph_ms']:.4f} ms/token")
        except Exception as e:
            res["errors"].append(f"sweep {pbytes},{pnext}: {e}")
            traceback.print_exc()
            op = Op(model, plan, 4096 + 256)
    res["llama_1b"]["prefetch_sweep"] = sweep
    best = min(sweep, key=lambda r: r["graph_ms"]) if sweep else {"prefetch_bytes": 65536, "prefetch_next": 0}
    os.environ["TILES_PREFETCH_BYTES"] = str(best["prefetch_bytes"])
    os.environ["TILES_PREFETCH_NEXT"] = str(best["prefetch_next"])
    res["llama_1b"]["best_prefetch"] = {"prefetch_bytes": best["prefetch_bytes"],
                                        "prefetch_next": best["prefetch_next"]}
    save()
    for ctx in (32, 4064):
        for o in dict.fromkeys([best_opt, 95, 95 | 512, 0]):  # 95: the v3/v4 default; 607: attention double buffering
            os.environ["TILES_KERNEL_OPT"] = str(o)
            try:
                t = time_op(op, ctx, iters)
                t["fraction_of_floor"] = floor_ms / min(t["single_ms"], t["graph_ms"], t["multi64_ms_per_token"])
                res["llama_1b"][f"ctx{ctx}" if o == best_opt else f"ctx{ctx}_opt{o}"] = t
                log(f"ctx {ctx} opt {o}: " + ", ".join(f"{k} {v:.4f}" for k, v in t.items()))
            except Exception as e:
                res["errors"].append(f"ctx {ctx} opt {o}: {e}")
                traceback.print_exc()
                op = Op(model, plan, 4096 + 256)
            save()
    # Long context (16K positions): where attention, not weights, decides (graph replay, one token per launch).
    del op
    torch.cuda.empty_cache()
    try:
        op16 = Op(model, plan, 16384 + 64)
        for o in dict.fromkeys([best_opt, 95, 95 | 512]):
            os.environ["TILES_KERNEL_OPT"] = str(o)
            t = time_op(op16, 16000, max(10, iters // 4), graph_only=True)
            res["llama_1b"][f"ctx16000_opt{o}"] = t
            log(f"ctx 16000 opt {o}: graph {t['graph_ms']:.4f} ms/token")
        del op16
    except Exception as e:
        res["errors"].append(f"ctx 16000: {e}")
        traceback.print_exc()
    save()
    os.environ["TILES_KERNEL_OPT"] = str(best_opt)
    torch.cuda.empty_cache()

    if not args.no_baseline:
        try:
            b = hf_graph_baseline(model, 32, min(iters, 100))
            res["llama_1b"]["baseline_ctx32"] = b
            log(f"baseline ctx 32: {b}")
        except Exception as e:
            res["errors"].append(f"baseline: {e}")
            traceback.print_exc()
        save()
    del model
    torch.cuda.empty_cache()

    try:
        scfg = load_config("smollm2-135m")
        smodel = random_model(scfg, device=DEV, seed=0)
        splan = build_plan(scfg, workers=props.multi_processor_count, gpu=gpu)
        sop = Op(smodel, splan, 4096 + 256)
        sfloor = ModelShape.from_config(scfg).weight_bytes() / (bw * 1e12) * 1e3
        res["smollm2_135m"] = {"floor_ms": sfloor}
        sopts, sop = option_sweep(sop, smodel, splan, list(dict.fromkeys([0, best_opt] + opt_list)), iters, res,
                                  ctxs=(32, 2000))
        res["smollm2_135m"]["kernel_opts"] = sopts
        sbest = pick_best(sopts)
        res["smollm2_135m"]["best_opt"] = sbest
        for o in dict.fromkeys([best_opt, sbest]):
            os.environ["TILES_KERNEL_OPT"] = str(o)
            for ctx in (32, 2000):
                t = time_op(sop, ctx, iters)
                res["smollm2_135m"][f"ctx{ctx}" if o == best_opt else f"ctx{ctx}_opt{o}"] = t
                log(f"smollm2-135m ctx {ctx} opt {o}: " + ", ".join(f"{k} {v:.4f}" for k, v in t.items())
                    + f", floor {sfloor:.4f}")
    except Exception as e:
        res["errors"].append(f"smollm2: {e}")
        traceback.print_exc()

    save()

    L = res["llama_1b"]
    log("\n=== kernel_check summary ===")
    log(f"GPU {res['gpu']} ({res['sm_count']} SMs), read bandwidth {bw:.3f} TB/s, "
        f"Llama-1B floor {floor_ms:.3f} ms/token")
    log(f"settings: TILES_KERNEL_OPT={L.get('best_opt')}, prefetch {L.get('best_prefetch')}, "
        f"ring L2 ahead {L.get('best_ring_l2_ahead')}")
    for r in L.get("ring_l2_sweep", []):
        log(f"  ring L2 ahead {r['ring_l2_ahead']:>2} slots {r.get('ring_slots', 4)}: graph ctx32 "
            f"{r['graph_ms']:.4f}  bit-identical {r.get('bit_identical_to_first')}")
    for r in L.get("kernel_opts", []):
        log(f"  llama opt {r['opt']:>3}: graph ctx32 {r.get('graph_ms', float('nan')):.4f}  "
            f"bit-identical {r.get('bit_identical_to_first')}")
    for r in res.get("smollm2_135m", {}).get("kernel_opts", []):
        log(f"  smollm2 opt {r['opt']:>3}: graph ctx32 {r.get('graph_ms', float('nan')):.4f}  "
            f"bit-identical {r.get('bit_identical_to_first')}")
    log(f"{'case':<34}{'ms/token':>10}{'floor frac':>12}")
    for ctx in (32, 4064):
        t = L.get(f"ctx{ctx}")
        if t:
            for k in ("single_ms", "graph_ms", "multi64_ms_per_token"):
                log(f"{f'llama-1b ctx {ctx} {k}':<34}{t[k]:>10.4f}{floor_ms / t[k]:>12.3f}")
    if "baseline_ctx32" in L:
        log(f"{'baseline ctx 32 (' + L['baseline_ctx32']['method'][:18] + ')':<34}{L['baseline_ctx32']['ms']:>10.4f}"
            f"{floor_ms / L['baseline_ctx32']['ms']:>12.3f}")
    if "smollm2_135m" in res:
        s = res["smollm2_135m"]
        for c in ("ctx32", "ctx2000"):
            if c in s:
                log(f"{'smollm2-135m ' + c + ' graph':<34}{s[c]['graph_ms']:>10.4f}{s['floor_ms'] / s[c]['graph_ms']:>12.3f}")
    if "parity" in L:
        log(f"parity vs HF fp32: op {L['parity']['op_err']:.5f} vs HF-bf16 {L['parity']['hf_err']:.5f} "
            f"(ratio {L['parity']['ratio']:.3f}); bit-identical repeats: {L.get('bit_identical_repeats')}")
    if res["errors"]:
        log("errors: " + " | ".join(res["errors"]))
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
