"""Verify passes: the op's pass over R query rows (R consecutive positions in one weight pass, as assisted
generation verifies a draft), timed against the one-row pass, on a model's weights (random ones in the benchmark).

For each R the op runs back-to-back at one position (a pass writes its K/V rows at PROMPT .. PROMPT + R - 1 and
reads the cache below PROMPT, filled with seeded random values: a pass's time does not depend on them), LAUNCHES
launches per repetition after a warm-up. Once per R it also compares the R-row pass's logits with R one-row passes:
whether the bits are equal (the property that makes greedy assisted decoding on the op equal plain greedy decoding)
and, for a kernel that gives that up for speed, their relative error.
"""
from __future__ import annotations

import torch

from .timing import DeviceTimer, summarize, sync

LAUNCHES, REPS = 20, 5
ROWS = tuple(range(1, 9))   # every R a prompt-lookup or assistant round of k <= 7 drafts uses (R = k + 1)


def kv_cache(config, max_len: int, device: torch.device):
    """Seeded random BF16 K and V caches [1, kv_heads, max_len, head_dim], one per layer."""
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    g = torch.Generator(device=device).manual_seed(1)
    shape = (1, config.num_key_value_heads, max_len, hd)
    layers = range(config.num_hidden_layers)
    k = [torch.randn(shape, device=device, generator=g).to(torch.bfloat16) for _ in layers]
    v = [torch.randn(shape, device=device, generator=g).to(torch.bfloat16) for _ in layers]
    return k, v


class PassBench:
    """A plan, a TileRuntime and a random KV cache for one model at one prompt length: launches R-row passes."""

    def __init__(self, model, prompt: int, device: torch.device, cpu_workers: int = 8, max_rows: int = 8):
        from tiles_ext.integrations.planning import plan_for
        from tiles_ext.runtime import TileRuntime, model_weights, rope_tables
        self.device, self.prompt = device, prompt
        plan = plan_for(model.config, device, None if device.type == "cuda" else cpu_workers, cache_dir=False)
        self.runtime = TileRuntime(plan, device)
        self.weights = model_weights(model)
        inv, self.scale = rope_tables(model)
        self.inv = inv.to(device)
        self.k, self.v = kv_cache(model.config, prompt + max_rows + 8, device)
        self.ids = torch.randint(16, model.config.vocab_size, (max_rows,), device=device,
                                 generator=torch.Generator(device=device).manual_seed(2))

    def launch(self, rows: int, first: int = 0):
        """One pass of ids[first:first + rows] at positions prompt + first ..: (logits [rows, vocab], tokens)."""
        pos = torch.tensor([self.prompt + first], device=self.device)
        return self.runtime.step(self.weights, self.k, self.v, self.ids[first:first + rows], pos, self.inv,
                                 self.scale, 1, [])

    def against_one_row_passes(self, rows: int) -> tuple[bool, float]:
        """The R-row pass's logits against R one-row passes, row i with token i at position prompt + i (each
        one-row pass attends to the K/V the earlier ones wrote, as a decode step would): (bits equal, relative
        error ||R-row - one-row|| / ||one-row||)."""
        logits, _ = self.launch(rows)
        ones = torch.cat([self.launch(1, i)[0] for i in range(rows)])
        err = float((logits.float() - ones.float()).norm() / ones.float().norm())
        return torch.equal(logits.view(torch.int32), ones.view(torch.int32)), err

    def time_ms(self, rows: int, launches: int = LAUNCHES, reps: int = REPS) -> list[float]:
        """Per repetition, the mean ms of `launches` back-to-back passes (device clock, no host sync between)."""
        self.launch(rows)
        sync(self.device)
        timer, out = DeviceTimer(self.device), []
        for _ in range(reps):
            timer.start()
            for _ in range(launches):
                self.launch(rows)
            out.append(timer.stop() / launches)
        self.runtime.check_error()
        return out


def pass_rows(model, model_name: str, prompt: int, device, rows=ROWS, launches=LAUNCHES, reps=REPS,
              cpu_workers: int = 8, emit=lambda rec: None) -> list[dict]:
    """One record per R: ms per pass (statistics over the repetitions), its ratio to the one-row pass, ms per row
    and the bit check. R = 1 is timed first (the ratios' base); an R over the plan's max_rows is skipped, saying so.
    Each record goes to emit() as soon as it is measured (a killed child keeps what it emitted)."""
    bench = PassBench(model, prompt, device, cpu_workers, max(rows))
    out, one = [], None
    for r in sorted(set(rows) | {1}):
        rec = {"model": model_name, "prompt_len": prompt, "rows": r, "handoff": bench.runtime.handoff,
               "max_rows": bench.runtime.max_rows, "launches": launches, "status": "ok", "reason": None}
        if r > bench.runtime.max_rows:
            rec.update(status="skipped", reason=f"the plan's passes hold at most {bench.runtime.max_rows} rows")
        else:
            bits, err = bench.against_one_row_passes(r) if r > 1 else (True, 0.0)
            rec.update(bits_equal_one_row_passes=bool(bits), rel_err_vs_one_row_passes=err)
            rec["ms_per_pass"] = summarize(bench.time_ms(r, launches, reps))
            ms = rec["ms_per_pass"]["median"]
            one = ms if r == 1 else one
            rec.update(ms_per_row=ms / r, ratio_to_one_row=ms / one)
        out.append(rec)
        emit(rec)
    return out
