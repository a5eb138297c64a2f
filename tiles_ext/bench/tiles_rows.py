"""Tiles rows: model.generate() on a patched model (end to end) and torch.ops.tiles.decode_step alone.

The op-alone rows time the kernel per token with back-to-back launches and no host sync: 1 token per launch
(the next input id and position updated on the device between launches), and multi-token launches (greedy
inside the op, up to format.MAX_STEPS tokens per launch). The cache holds zeros up to the prompt length: the
time of a step does not depend on the values it reads.
"""
from __future__ import annotations

import time

import torch
from tqdm.auto import tqdm

from . import rows
from .generate_timing import time_generate
from .timing import DeviceTimer, peak_memory, sync


class OpDecoder:
    """A plan, a TileRuntime and a KV cache of max_len positions for one model: calls the op directly."""

    def __init__(self, model, max_len: int, device: torch.device, cpu_workers: int = 8, weight_format="bf16"):
        from tiles_ext.families import shape_of
        from tiles_ext.integrations.planning import plan_for
        from tiles_ext.planner import format as fmt
        from tiles_ext.runtime import TileRuntime, model_weights, rope_tables
        self.device = device
        self.max_steps = fmt.MAX_STEPS
        shape = shape_of(model.config)
        t0 = time.perf_counter()
        # The plan patch() would use (one worker per SM on CUDA), built here without the disk cache so plan_s
        # is the planning cost itself.
        plan = plan_for(model.config, device, None if device.type == "cuda" else cpu_workers, cache_dir=False,
                        weight_format=weight_format)
        self.runtime = TileRuntime(plan, device)
        sync(device)
        self.plan_s = time.perf_counter() - t0
        self.weights = model_weights(model, plan.shape)
        self.inv_freq, self.rope_scale = rope_tables(model)
        kv = (1, shape.num_kv_heads, max_len, shape.head_dim)
        self.k = [torch.zeros(kv, dtype=torch.bfloat16, device=device) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(kv, dtype=torch.bfloat16, device=device) for _ in range(shape.num_layers)]
        self.max_len = max_len
        self.ids = torch.full((1,), 17, dtype=torch.long, device=device)
        self.pos = torch.zeros((1,), dtype=torch.long, device=device)

    @torch.no_grad()
    def launch(self, num_steps: int):
        _, toks = self.runtime.step(self.weights, self.k, self.v, self.ids, self.pos, self.inv_freq,
                                    self.rope_scale, num_steps=num_steps)
        self.ids.copy_(toks[-1:])
        self.pos.add_(num_steps)

    def run(self, start: int, tokens: int, per_launch: int):
        if start + tokens >= self.max_len:
            raise ValueError(f"{start} + {tokens} positions do not fit the cache of {self.max_len}")
        self.ids.fill_(17)
        self.pos.fill_(start)
        done = 0
        while done < tokens:
            k = min(per_launch, tokens - done)
            self.launch(k)
            done += k

    def time_tokens(self, start: int, tokens: int, per_launch: int, reps: int, desc: str) -> list[float]:
        self.run(start, min(tokens, 2 * per_launch), per_launch)  # warm-up
        sync(self.device)
        self.check_state()
        timer = DeviceTimer(self.device)
        out = []
        for _ in tqdm(range(reps), desc=desc, leave=False):
            timer.start()
            self.run(start, tokens, per_launch)
            out.append(timer.stop() / tokens)
        self.check_state()
        return out

    def check_state(self):
        self.runtime.check_error()


def op_rows(row_single, row_multi, model, w, floor_ms, reps, device, cpu_workers=8, single_tokens=None,
            weight_format="bf16"):
    """Fills both op-alone rows (one OpDecoder: one plan, one cache); row_single may be None (not run)."""
    tokens = w.new_tokens
    with peak_memory(device, row_multi):
        d = OpDecoder(model, w.prompt_len + tokens + 1, device, cpu_workers, weight_format)
        for r in filter(None, (row_single, row_multi)):
            r["one_time_s"]["plan"] = d.plan_s
        per = min(d.max_steps, tokens)
        ms = d.time_tokens(w.prompt_len, tokens, per, reps, f"tiles op x{per} {w.name}")
    n = -(-tokens // per)
    row_multi["notes"].append(f"{n} launch{'es' if n > 1 else ''} of up to {per} tokens per repetition")
    rows.finish(row_multi, ms, floor_ms)
    if row_single is None:
        return d
    try:
        n1 = min(tokens, single_tokens or tokens)
        with peak_memory(device, row_single):
            ms1 = d.time_tokens(w.prompt_len, n1, 1, reps, f"tiles op x1 {w.name}")
        row_single["notes"].append(f"{n1} launches of 1 token per repetition")
        rows.finish(row_single, ms1, floor_ms)
    except Exception as e:
        rows.fail(row_single, e)
    return d


def tiles_generate(row, model, w, input_ids, floor_ms, reps, device, warmup=2, sample=None):
    """model.generate() on the patched model, timed like the Transformers rows; `sample`: the sampling settings
    (generation-config fields, e.g. {"temperature": 0.7, "top_p": 0.9, "top_k": 50}) of a sampling row."""
    overrides = {"do_sample": True, **sample} if sample else {}
    if sample:
        row["notes"].append("sampling " + ", ".join(f"{k} {v}" for k, v in sample.items()))
    with peak_memory(device, row):
        r = time_generate(model, input_ids, w.new_tokens, reps, warmup, device, f"tiles generate {w.name}",
                          **overrides)
    row["one_time_s"]["first_generate"] = r["warmup_s"][0]
    row["prefill_ms"] = r["prefill_ms"]
    row["tokens"] = r["tokens"]
    rows.finish(row, r["ms_per_token"], floor_ms)


def patch(model, weights=None):
    """tiles_ext.patch(model, weights=weights) and its wall time (planning, binding; quantizing for "fp8")."""
    import tiles_ext
    t0 = time.perf_counter()
    patched = tiles_ext.patch(model, weights=weights)
    return (patched if patched is not None else model), time.perf_counter() - t0


def fp8_rows(rows_, model, floors, prompts, reps, device, warmup, cpu_workers, emit):
    """The FP8 rows [(system, workload, row)]: patch(weights="fp8") (the model's GPU memory before and after, in each
    row's notes), generate() and the op alone on its E4M3 layers, then unpatch (the BF16 layers back)."""
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
    try:
        model, patch_s = patch(model, weights="fp8")
    except Exception as e:
        for _, _, r in rows_:
            emit(rows.fail(r, e))
        return model
    after = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
    for sy, w, r in rows_:
        r["one_time_s"]["patch"] = patch_s
        r["floor_ms"] = floors[w.name]
        if before:
            r["model_mem_ratio"] = after / before
            r["notes"].append(f"model GPU memory {before / 2**30:.2f} GiB BF16 -> {after / 2**30:.2f} GiB after "
                              f"patch(weights='fp8') ({after / before:.3f}x)")
        if sy == "tiles-generate-fp8":
            rows.run_guarded(r, tiles_generate, model, w, prompts[w.name], floors[w.name], reps, device, warmup)
        else:
            rows.run_guarded(r, lambda row, *a: op_rows(None, row, *a, weight_format="fp8"), model, w,
                             floors[w.name], reps, device, cpu_workers)
        emit(r)
    return unpatch(model)


def unpatch(model):
    import tiles_ext
    try:
        return tiles_ext.unpatch(model) or model
    except AttributeError:
        return model


def op_sweep(model, contexts, tokens: int, reps: int, device, floor_fn, cpu_workers=8) -> list[dict]:
    """Tiles op (multi-token launches) at each context: one cache sized for the largest context."""
    points = []
    d = OpDecoder(model, max(contexts) + tokens + 1, device, cpu_workers)
    per = min(d.max_steps, tokens)
    for c in tqdm(contexts, desc="tiles op context sweep", leave=False):
        p = {"system": "tiles-op-multi", "context": c}
        try:
            ms = d.time_tokens(c, tokens, per, reps, f"tiles op ctx {c}")
            p.update(status="ok", ms_per_token=min(ms), ms_median=sorted(ms)[len(ms) // 2],
                     floor_ms=floor_fn(c + tokens / 2))
        except Exception as e:
            p.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")
            print(f"[bench] tiles op sweep at {c} failed: {p['reason']}", flush=True)
        points.append(p)
    return points
