"""Tiles' offline planner: tile graph, schedule, validation and plan files (imported as tiles_ext.planner)."""
from .format import ABI_VERSION, FORMAT_VERSION, Op
from .plan import GpuTarget, Plan, build_plan
from .planfile import PlanFileCorrupt, PlanMismatch, load_or_build, load_plan, save_plan
from .shape import ModelShape, UnsupportedConfig
from .validate import PlanError, validate_plan

__all__ = ["ABI_VERSION", "FORMAT_VERSION", "Op", "GpuTarget", "Plan", "build_plan", "ModelShape",
           "UnsupportedConfig", "PlanError", "validate_plan", "PlanFileCorrupt", "PlanMismatch", "save_plan",
           "load_plan", "load_or_build"]
