"""Tiles' offline planner: tile graph, schedule, validation and plan files (imported as tiles_ext.planner)."""
from tiles_ext.planner.format import ABI_VERSION, FORMAT_VERSION, Op
from tiles_ext.planner.plan import GpuTarget, Plan, build_plan
from tiles_ext.planner.planfile import PlanFileCorrupt, PlanMismatch, load_or_build, load_plan, save_plan
from tiles_ext.planner.shape import ModelShape, UnsupportedConfig
from tiles_ext.planner.validate import PlanError, validate_plan

__all__ = ["ABI_VERSION", "FORMAT_VERSION", "Op", "GpuTarget", "Plan", "build_plan", "ModelShape",
           "UnsupportedConfig", "PlanError", "validate_plan", "PlanFileCorrupt", "PlanMismatch", "save_plan",
           "load_plan", "load_or_build"]
