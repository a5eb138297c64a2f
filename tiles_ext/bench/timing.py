"""Clocks, statistics and peak-memory bookkeeping shared by every benchmark row."""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_s(fn, device: torch.device) -> float:
    """Seconds for fn(), the device drained before and after (so queued work is not attributed elsewhere)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


class DeviceTimer:
    """Elapsed milliseconds of the work queued between start() and stop(): CUDA events on a GPU (no host
    overhead counted that the GPU hides), perf_counter with synchronisation elsewhere."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"

    def start(self):
        if self.cuda:
            self._a = torch.cuda.Event(enable_timing=True)
            self._b = torch.cuda.Event(enable_timing=True)
            self._a.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self._b.record()
            self._b.synchronize()
            return float(self._a.elapsed_time(self._b))
        return (time.perf_counter() - self._t0) * 1e3


def summarize(ms_per_token: list[float]) -> dict:
    """Median, min and max of per-repetition ms/token."""
    if not ms_per_token:
        raise ValueError("no repetitions were timed")
    return {"median": statistics.median(ms_per_token), "min": min(ms_per_token), "max": max(ms_per_token),
            "reps": len(ms_per_token), "samples": [round(v, 6) for v in ms_per_token]}


@contextmanager
def peak_memory(device: torch.device, out: dict):
    """Sets out['peak_gpu_mem_gib'] to torch.cuda.max_memory_allocated over the block (reset on entry)."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
    try:
        yield
    finally:
        if device.type == "cuda":
            sync(device)
            out["peak_gpu_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        else:
            out["peak_gpu_mem_gib"] = None
