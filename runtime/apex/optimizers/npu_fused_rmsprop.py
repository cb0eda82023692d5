"""Ascend apex's module of `NpuFusedRMSprop`, for code that imports the class from it."""

from apex.optimizers import NpuFusedRMSprop

__all__ = ["NpuFusedRMSprop"]
