"""Ascend apex's module of `NpuFusedSGD`, for code that imports the class from it."""

from apex.optimizers import NpuFusedSGD

__all__ = ["NpuFusedSGD"]
