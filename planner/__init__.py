"""Tiles' offline planner: tile graph, schedule, validation and plan files (imported as tiles_ext.planner)."""
from .format import ABI_VERSION, FORMAT_VERSION, Op
from .plan import GpuTarget, Plan, build_plan
from .shape import ModelShape, UnsupportedConfig

__all__ = ["ABI_VERSION", "FORMAT_VERSION", "Op", "GpuTarget", "Plan", "build_plan", "ModelShape",
           "UnsupportedConfig"]
