"""The plan a patched model runs: made for the model's config and device, cached on disk.

Workers = SM count on CUDA (one persistent worker per SM); CPU_WORKERS on CPU, where the reference executor runs
the same plan. Plans are cached by planner.planfile.load_or_build, keyed by config hash, GPU, workers, policy,
plan format, executor ABI and planner revision, so a second process loads the plan instead of rebuilding it, and a
newer planner re-plans.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from tiles_ext.planner.plan import GpuTarget, Plan, build_plan
from tiles_ext.families import shape_of
from tiles_ext.models import cache_dir

log = logging.getLogger("tiles_ext.integrations")

CPU_WORKERS = 8


def default_workers(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_WORKERS


def plan_cache_dir() -> Path:
    """<tiles cache>/plans (tiles cache: $TILES_CACHE or ~/.cache/tiles_ext)."""
    return cache_dir() / "plans"


def plan_for(config, device, workers: int | None = None, cache_dir=None, weight_format: str = "bf16") -> Plan:
    """The plan for `config` on `device` with weights in `weight_format` (planner/format.py WEIGHT_FORMATS).
    cache_dir=False: build in memory, never touch the disk.
    Raises planner.UnsupportedConfig (naming the field) for a config the planner cannot serve."""
    device = torch.device(device)
    shape = dataclasses.replace(shape_of(config), weight_format=weight_format)
    gpu = GpuTarget.of_device(device)
    workers = int(workers or default_workers(device))
    if cache_dir is False:
        return build_plan(shape, workers, gpu=gpu)
    from tiles_ext.planner.planfile import load_or_build
    directory = Path(cache_dir) if cache_dir is not None else plan_cache_dir()
    try:
        return load_or_build(shape, gpu, workers, directory)
    except OSError as e:  # read-only or full disk: plan in memory rather than fail the patch
        log.warning("tiles_ext: plan cache %s unusable (%s); planning in memory", directory, e)
        return build_plan(shape, workers, gpu=gpu)
