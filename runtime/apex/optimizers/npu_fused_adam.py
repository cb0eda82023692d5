"""Ascend apex's module of `NpuFusedAdam`, for code that imports the class from it."""

from apex.optimizers import NpuFusedAdam

__all__ = ["NpuFusedAdam"]
