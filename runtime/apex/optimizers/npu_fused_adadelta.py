"""Ascend apex's module of `NpuFusedAdadelta`, for code that imports the class from it."""

from apex.optimizers import NpuFusedAdadelta

__all__ = ["NpuFusedAdadelta"]
