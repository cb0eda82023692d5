"""Ascend apex's module of `NpuFusedAdamW`, for code that imports the class from it."""

from apex.optimizers import NpuFusedAdamW

__all__ = ["NpuFusedAdamW"]
