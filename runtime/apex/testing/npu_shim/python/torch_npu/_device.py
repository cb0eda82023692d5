"""The device that stands in for the NPU: the CPU, or CUDA with ``NPU_SHIM_DEVICE=cuda``."""

from __future__ import annotations

import os
from typing import Any

import torch

ENVIRONMENT_VARIABLE = "NPU_SHIM_DEVICE"


def stand_in_type() -> str:
    wanted = os.environ.get(ENVIRONMENT_VARIABLE, "cpu").strip().lower() or "cpu"
    if wanted not in {"cpu", "cuda"}:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be 'cpu' or 'cuda', not {wanted!r}")
    if wanted == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{ENVIRONMENT_VARIABLE}=cuda, but CUDA is not available")
    return wanted


def on_cuda() -> bool:
    return stand_in_type() == "cuda"


def stand_in(device: Any = None) -> torch.device:
    """Where ``.npu(device)`` puts things: the index is kept on CUDA and ignored on the CPU."""
    if not on_cuda():
        return torch.device("cpu")
    index = _index(device)
    return torch.device("cuda", index) if index is not None else torch.device("cuda")


def _index(device: Any) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return device.index
    raise TypeError(f"not a device: {device!r}")
