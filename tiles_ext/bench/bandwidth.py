"""Measured read bandwidth: the denominator of every floor in the same run.

A large read-only pass over a BF16 buffer (much larger than L2), timed with CUDA events. Several readers are
tried and the fastest median wins: the floor should be the fastest read this GPU is seen to do, not the slowest.
On CUDA the readers include tiles::read_checksum, a sweep with the decode kernel's own load pattern (16-byte loads,
8 per lane in flight, one block per SM: csrc/cuda/read_sweep.cu). On an H200 it reads ~4.5 TB/s, where PyTorch's
reductions read ~4.1-4.2 and bulk async copies ~4.5-4.57: without it the floor would be ~10% lenient.
"""
from __future__ import annotations

import statistics

import torch

from .timing import DeviceTimer, sync

# The method name of the decode kernel's load pattern (tiles::read_checksum; registered by `import tiles_ext`).
SWEEP = "tiles read sweep (16-byte loads, 8 per lane in flight, a block per SM)"


def measure_read_bandwidth(device: torch.device, gib: float | None = None, reps: int | None = None) -> dict:
    device = torch.device(device)
    cuda = device.type == "cuda"
    gib = gib if gib is not None else (4.0 if cuda else 0.125)
    reps = reps if reps is not None else (10 if cuda else 3)
    numel = int(gib * 2**30) // 2
    x = torch.ones(numel, dtype=torch.bfloat16, device=device)
    nbytes = x.numel() * x.element_size()
    readers = {
        "torch.sum(bf16, fp32 accumulate)": lambda x=x: torch.sum(x, dtype=torch.float32),
        "torch.amax(bf16)": lambda x=x: torch.amax(x),
    }
    if cuda:
        readers[SWEEP] = lambda x=x: torch.ops.tiles.read_checksum(x)
    results = {}
    timer = DeviceTimer(device)
    for name, fn in readers.items():
        fn()
        fn()  # warm-up (kernel selection, clocks)
        sync(device)
        times = []
        for _ in range(reps):
            timer.start()
            fn()
            times.append(timer.stop())
        med = statistics.median(times)
        results[name] = {"median_ms": med, "min_ms": min(times),
                         "bytes_per_s": nbytes / (med / 1e3)}
    del x, readers
    if cuda:
        torch.cuda.empty_cache()
    best = max(results, key=lambda k: results[k]["bytes_per_s"])
    return {"device": str(device), "bytes": nbytes, "method": best, "bytes_per_s": results[best]["bytes_per_s"],
            "tb_per_s": results[best]["bytes_per_s"] / 1e12, "readers": results, "reps": reps}
