"""Plan files: a validated plan on disk, bound to the plan format, the executor ABI, the model and the GPU.

File layout:
    b"TILEPLAN"                      8 bytes magic
    uint32 little-endian             plan-file version (PLANFILE_VERSION)
    uint32 little-endian             header length in bytes
    header                           UTF-8 JSON: versions, ModelShape JSON + its sha256, GPU, policy, workers
    body                             the int32 little-endian plan blob (format.py)
    sha256                           32 bytes over everything before it

Loading checks the checksum first (a corrupted file is never parsed further), then refuses a plan made for
another format, ABI, model or GPU, then re-validates the plan itself.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tiles_ext.families import shape_of
from tiles_ext.planner import format as fmt
from tiles_ext.planner.plan import PLAN_REVISION, GpuTarget, Plan, build_plan
from tiles_ext.planner.shape import ModelShape
from tiles_ext.planner.validate import PlanError, validate_plan

log = logging.getLogger("tiles_ext.planner")

FILE_MAGIC = b"TILEPLAN"
PLANFILE_VERSION = 1
_PREFIX = struct.Struct("<8sII")
_DIGEST = 32


class PlanFileCorrupt(PlanError):
    """The file is not an intact plan file (truncated, flipped bytes, not a plan file at all)."""


class PlanMismatch(PlanError):
    """An intact plan made for something else. kind: "format", "abi", "config" or "gpu"."""

    KINDS = ("format", "abi", "config", "gpu")

    def __init__(self, kind: str, message: str):
        assert kind in self.KINDS
        super().__init__(message)
        self.kind = kind


def _gpu_text(g: GpuTarget) -> str:
    if not g.sm_count:
        return "any GPU (sm_count 0)"
    return f"{g.name} ({g.sm_count} SMs, compute capability {g.cc_major}.{g.cc_minor})"


def encode_plan(plan: Plan) -> bytes:
    body = np.ascontiguousarray(plan.to_blob(), dtype="<i4").tobytes()
    header = {
        "planfile_version": PLANFILE_VERSION,
        "format_version": fmt.FORMAT_VERSION,
        "abi_version": fmt.ABI_VERSION,
        "shape": json.loads(plan.shape.to_json()),
        "config_hash": plan.shape.config_hash(),
        "gpu": asdict(plan.gpu),
        "policy": plan.policy,
        "workers": plan.num_workers,
        "words": len(body) // 4,
    }
    hjson = json.dumps(header, sort_keys=True).encode()
    data = _PREFIX.pack(FILE_MAGIC, PLANFILE_VERSION, len(hjson)) + hjson + body
    return data + hashlib.sha256(data).digest()


def save_plan(plan: Plan, path) -> Path:
    """Writes atomically (temp file + rename), so readers never see a half-written plan."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = encode_plan(plan)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def decode_plan(data: bytes, source: str = "plan", expect_shape=None, expect_gpu: GpuTarget | None = None) -> Plan:
    if len(data) < _PREFIX.size + _DIGEST or data[:8] != FILE_MAGIC:
        raise PlanFileCorrupt(f"{source}: not a Tiles plan file (bad magic or only {len(data)} bytes)")
    if hashlib.sha256(data[:-_DIGEST]).digest() != data[-_DIGEST:]:
        raise PlanFileCorrupt(f"{source}: checksum mismatch, the file is corrupted (truncated or modified); "
                              "delete it and rebuild the plan")
    _, version, hlen = _PREFIX.unpack_from(data)
    if version != PLANFILE_VERSION:
        raise PlanMismatch("format", f"{source}: plan-file version {version}, this tiles_ext reads version "
                                     f"{PLANFILE_VERSION}; rebuild the plan")
    end = _PREFIX.size + hlen
    try:
        header = json.loads(data[_PREFIX.size:end].decode())
        shape = ModelShape(**header["shape"])
        gpu = GpuTarget(**header["gpu"])
        policy = str(header["policy"])
    except (ValueError, KeyError, TypeError) as e:  # intact checksum but unreadable header: not ours
        raise PlanFileCorrupt(f"{source}: unreadable plan-file header ({e})") from e
    if header.get("format_version") != fmt.FORMAT_VERSION:
        raise PlanMismatch("format", f"{source}: made for plan format {header.get('format_version')}, this "
                                     f"tiles_ext uses format {fmt.FORMAT_VERSION}; rebuild the plan")
    if header.get("abi_version") != fmt.ABI_VERSION:
        raise PlanMismatch("abi", f"{source}: made for executor ABI {header.get('abi_version')}, this tiles_ext "
                                  f"has ABI {fmt.ABI_VERSION}; rebuild the plan")
    if header.get("config_hash") != shape.config_hash():
        raise PlanFileCorrupt(f"{source}: model shape does not match its recorded hash")
    if expect_shape is not None:
        want = expect_shape if isinstance(expect_shape, ModelShape) else shape_of(expect_shape)
        if want != shape:
            diff = ", ".join(f"{k}: plan {v!r} vs model {getattr(want, k)!r}" for k, v in asdict(shape).items()
                             if getattr(want, k) != v)
            raise PlanMismatch("config", f"{source}: plan was made for another model config ({diff})")
    if expect_gpu is not None and expect_gpu != gpu:
        raise PlanMismatch("gpu", f"{source}: plan was made for {_gpu_text(gpu)}, this is {_gpu_text(expect_gpu)}; "
                                  "re-plan for this GPU")
    body = data[end:-_DIGEST]
    if len(body) % 4 or len(body) // 4 != header.get("words"):
        raise PlanFileCorrupt(f"{source}: body has {len(body)} bytes, header says {header.get('words')} words")
    blob = np.frombuffer(body, dtype="<i4").astype(np.int32)
    try:
        plan = Plan.from_blob(blob, shape, gpu, policy=policy)
    except ValueError as e:
        raise PlanError(f"{source}: inconsistent plan: {e}") from e
    if plan.num_workers != header.get("workers"):
        raise PlanError(f"{source}: blob has {plan.num_workers} workers, file header says {header.get('workers')}")
    try:
        validate_plan(plan)
    except PlanError as e:
        raise PlanError(f"{source}: invalid plan: {e}") from e
    return plan


def load_plan(path, expect_shape=None, expect_gpu: GpuTarget | None = None) -> Plan:
    """Reads, checks and re-validates a plan file. expect_shape: a ModelShape or config the plan must match;
    expect_gpu: the GpuTarget it must have been made for (None: not checked)."""
    path = Path(path)
    return decode_plan(path.read_bytes(), str(path), expect_shape, expect_gpu)


def cache_path(cache_dir, shape: ModelShape, gpu: GpuTarget, workers: int, policy: str) -> Path:
    slug = "".join(ch if ch.isalnum() else "-" for ch in gpu.name).strip("-").lower() or "gpu"
    return Path(cache_dir) / (f"plan-{shape.config_hash()[:16]}-{slug}-sm{gpu.sm_count}-cc{gpu.cc_major}"
                              f"{gpu.cc_minor}-w{workers}-{policy}-f{fmt.FORMAT_VERSION}-abi{fmt.ABI_VERSION}"
                              f"-r{PLAN_REVISION}.tplan")


# The fixes the loader's messages end with, for someone holding the file ("...; rebuild the plan"). The cache
# applies the fix itself, so its log line names the problem and what it does instead.
_FIX_SUFFIXES = ("; delete it and rebuild the plan", "; rebuild the plan", "; re-plan for this GPU")


def _problem(e: Exception) -> str:
    text = str(e)
    for suffix in _FIX_SUFFIXES:
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def load_or_build(shape, gpu, workers: int, cache_dir, policy: str = "tiles", **build_kw) -> Plan:
    """The cached plan for (model config, GPU, workers, policy, ABI, planner revision), built and saved if absent.

    The cache is never trusted and never fatal: a file at the cache path that is corrupted, invalid, or made for
    another model config, GPU, format or ABI is replaced by a new plan (logged as a warning)."""
    shape = shape if isinstance(shape, ModelShape) else shape_of(shape)
    if not isinstance(gpu, GpuTarget):  # a torch device
        gpu = GpuTarget.of_device(gpu)
    path = cache_path(cache_dir, shape, gpu, workers, policy)
    if path.exists():
        try:
            plan = load_plan(path, expect_shape=shape, expect_gpu=gpu)
            if plan.num_workers == workers and plan.policy == policy:
                return plan
            log.warning("plan cache %s has %d workers / policy %s, wanted %d / %s: re-planning", path,
                        plan.num_workers, plan.policy, workers, policy)
        except PlanError as e:  # corrupted, invalid, or intact but made for something else (PlanMismatch)
            log.warning("plan cache %s: re-planning", _problem(e))
    plan = build_plan(shape, workers, policy=policy, gpu=gpu, **build_kw)
    save_plan(plan, path)
    log.info("saved plan %s (%d tiles on %d workers)", path, plan.header["num_tiles"], workers)
    return plan
