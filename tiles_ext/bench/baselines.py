"""Baseline rows: Transformers generate (eager; static cache + torch.compile) and the best plain-PyTorch decode,
a torch.compile'd decode step replayed as a CUDA graph in a tight loop."""
from __future__ import annotations

import gc
import inspect
import time

import torch
from tqdm.auto import tqdm

from . import rows
from .generate_timing import time_generate
from .timing import DeviceTimer, peak_memory, sync


def eager_generate(row, model, w, input_ids, floor_ms, reps, device, eager_tokens=None):
    """Transformers generate with its default (dynamic) cache, no compilation. Host-bound, so ms/token barely
    depends on the number of tokens: eager_tokens < new_tokens shortens it (said in the row)."""
    n = min(w.new_tokens, eager_tokens or w.new_tokens)
    if n != w.new_tokens:
        row["notes"].append(f"{n} new tokens per repetition instead of {w.new_tokens} (eager is host-bound; "
                            "ms/token does not depend on the count)")
    with peak_memory(device, row):
        r = time_generate(model, input_ids, n, reps, 1, device, f"eager {w.name}", disable_compile=True)
    row["prefill_ms"] = r["prefill_ms"]
    row["tokens"] = r["tokens"]
    rows.finish(row, r["ms_per_token"], floor_ms)


def static_compile_generate(row, model, w, input_ids, floor_ms, reps, device, sample=None):
    """The documented recipe: cache_implementation="static" and a CompileConfig (torch.compile mode
    "reduce-overhead": CUDA graphs through cudagraph trees). Compiled graphs stay on the model between rows
    (model._compiled_call), so only a new cache shape recompiles."""
    if device.type != "cuda":
        return rows.skip(row, "torch.compile reduce-overhead (CUDA graphs) needs a CUDA device")
    from transformers.generation import CompileConfig
    overrides = {"do_sample": True, **sample} if sample else {}
    if sample:
        row["notes"].append("sampling " + ", ".join(f"{k} {v}" for k, v in sample.items()))
    with peak_memory(device, row):
        r = time_generate(model, input_ids, w.new_tokens, reps, 2, device, f"static+compile {w.name}",
                          cache_implementation="static", compile_config=CompileConfig(mode="reduce-overhead"),
                          disable_compile=False, **overrides)
    row["one_time_s"]["compile_and_warmup"] = r["warmup_s"][0]
    row["prefill_ms"] = r["prefill_ms"]
    rows.finish(row, r["ms_per_token"], floor_ms)


def drop_compiled(model) -> None:
    """Forget generate's compiled call and its sticky static-cache size (5.x grows every later static cache to
    the largest seen), before the next system runs on the model."""
    for attr in ("_compiled_call", "_last_compile_config", "_cache", "_previous_max_cache_length"):
        if attr in model.__dict__:
            delattr(model, attr)
    gc.collect()


# --------------------------------------------------------------------------- compiled step as a CUDA graph


def cache_kwarg(model) -> str:
    """Transformers >= 5.24 names the cache argument `cache` (past_key_values kept as a deprecated alias)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _decode_step(model, cache, ids, pos, kw: str):
    """One greedy step with every input updated in place, so a CUDA graph of it can be replayed as is."""
    out = model(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache})
    ids.copy_(out.logits[:, -1, :].argmax(dim=-1, keepdim=True))
    pos.add_(1)


_COMPILED = {}


def compiled_step(backend: str = "inductor", fullgraph: bool = True):
    """One torch.compile of _decode_step, shared across rows and models: dynamo caches graphs on the code object,
    guarded on the model and the shapes, so the same model and cache shape reuse a compiled graph, and a second
    cache shape recompiles once with dynamic shapes that later shapes (the context sweep) reuse."""
    key = (backend, fullgraph)
    if key not in _COMPILED:
        # 2 models x (static + dynamic) graphs, with room to spare: past the limit dynamo would silently run eager
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        _COMPILED[key] = torch.compile(_decode_step, fullgraph=fullgraph, backend=backend)
    return _COMPILED[key]


def set_cache_length(cache, n: int) -> None:
    for layer in cache.layers:
        if not hasattr(layer, "cumulative_length"):
            raise RuntimeError("this Transformers version's StaticCache has no cumulative_length; the CUDA-graph "
                               "baseline needs Transformers >= 5.4")
        layer.cumulative_length.fill_(n)


class GraphDecoder:
    """A StaticCache of max_cache_len positions, prefilled, plus one CUDA graph of the compiled decode step."""

    def __init__(self, model, input_ids: torch.Tensor, max_cache_len: int, context: int | None = None,
                 backend: str = "inductor"):
        from transformers import StaticCache
        self.model, self.device = model, input_ids.device
        self.kw = cache_kwarg(model)
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
        t0 = time.perf_counter()
        # no_grad, not inference_mode: the cache's tensors (made here) are updated in place later, outside it
        with torch.no_grad():
            out = model(input_ids=input_ids, use_cache=True, **{self.kw: self.cache})
        # context: pretend this many positions are cached (sweep: content is irrelevant to timing)
        self.start = int(context if context is not None else input_ids.shape[1])
        if self.start + 1 > max_cache_len:
            raise ValueError(f"context {self.start} does not fit a cache of {max_cache_len}")
        self.first = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        self.ids = self.first.clone()
        self.pos = torch.full((1, 1), self.start, dtype=torch.long, device=self.device)
        sync(self.device)
        self.prefill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.fullgraph = True
        try:
            step = self._warm(compiled_step(backend, True))
        except Exception as e:  # a graph break this Transformers version has: capture what compiles
            print(f"[bench] fullgraph compile of the decode step failed ({type(e).__name__}: {str(e)[:200]}); "
                  "retrying with graph breaks allowed", flush=True)
            self.fullgraph = False
            step = self._warm(compiled_step(backend, False))
        self.compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.reset()
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            step(model, self.cache, self.ids, self.pos, self.kw)
        sync(self.device)
        self.capture_s = time.perf_counter() - t0

    def _warm(self, step):
        """Compile (first use) and warm up, off the default stream as capture requires."""
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                self.reset()
                step(self.model, self.cache, self.ids, self.pos, self.kw)
        torch.cuda.current_stream(self.device).wait_stream(s)
        sync(self.device)
        return step

    def reset(self):
        self.ids.copy_(self.first)
        self.pos.fill_(self.start)
        set_cache_length(self.cache, self.start)

    def time_steps(self, steps: int, reps: int, desc: str) -> list[float]:
        """Per repetition: ms per step of `steps` back-to-back graph replays (no host sync inside)."""
        timer = DeviceTimer(self.device)
        out = []
        for _ in tqdm(range(reps), desc=desc, leave=False):
            self.reset()
            sync(self.device)
            timer.start()
            for _ in range(steps):
                self.graph.replay()
            out.append(timer.stop() / steps)
        return out

    def generated(self, steps: int) -> list[int]:
        """Greedy tokens of `steps` replays from the start (for a parity glance against generate)."""
        self.reset()
        toks = [int(self.first)]
        for _ in range(steps - 1):
            self.graph.replay()
            toks.append(int(self.ids))
        return toks

    def close(self):
        del self.graph, self.cache
        gc.collect()
        torch.cuda.empty_cache()


def graph_step(row, model, w, input_ids, floor_ms, reps, device):
    if device.type != "cuda":
        return rows.skip(row, "CUDA graphs need a CUDA device")
    with peak_memory(device, row):
        d = GraphDecoder(model, input_ids, w.prompt_len + w.new_tokens)
        try:
            ms = d.time_steps(w.new_tokens - 1, reps, f"graph step {w.name}")
        finally:
            row["one_time_s"].update(compile_and_warmup=d.compile_s, capture=d.capture_s)
            d.close()
    row["notes"].append(f"{w.new_tokens - 1} replays per repetition, one decode step each"
                        + ("" if d.fullgraph else "; compiled with graph breaks (fullgraph failed)"))
    rows.finish(row, ms, floor_ms)


def graph_sweep(model, contexts, steps: int, reps: int, device, floor_fn) -> list[dict]:
    """ms/token of the CUDA-graph step at each context (a right-sized StaticCache per context; after the main
    rows the step is compiled with dynamic shapes, so the contexts share that compile)."""
    points = []
    ids = torch.randint(16, model.config.vocab_size, (1, 1), device=device)
    for c in tqdm(contexts, desc="graph-step context sweep", leave=False):
        p = {"system": "graph-step", "context": c}
        try:
            d = GraphDecoder(model, ids, c + steps + 1, context=c)
            try:
                ms = d.time_steps(steps, reps, f"graph step ctx {c}")
            finally:
                d.close()
            p.update(status="ok", ms_per_token=min(ms), ms_median=sorted(ms)[len(ms) // 2],
                     floor_ms=floor_fn(c + steps / 2), compile_s=d.compile_s)
        except Exception as e:
            p.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")
            print(f"[bench] graph sweep at {c} failed: {p['reason']}", flush=True)
        points.append(p)
    return points
