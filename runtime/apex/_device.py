"""Which accelerator this process runs on, probed once at first use and never at import.

``device_kind()`` answers ``"npu"`` when torch_npu imports and reports an available NPU, else
``"cuda"`` when CUDA is available, else ``"cpu"``. Code that needs to know where a *tensor*
lives must use ``tensor.device.type`` instead: a CPU tensor on an NPU machine is still CPU.
"""

from __future__ import annotations

import functools
import importlib

import torch

DeviceKind = str  # one of "npu", "cuda", "cpu"


def _npu_available() -> bool:
    try:
        importlib.import_module("torch_npu")
    except ImportError:
        return False
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available())


@functools.cache
def device_kind() -> DeviceKind:
    """Return "npu", "cuda" or "cpu" for this process; the probe runs once and is cached."""
    if _npu_available():
        return "npu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def default_device() -> torch.device:
    """The device a migrated script would put its model on (``npu:0`` style index omitted)."""
    return torch.device(device_kind())


def reset_device_probe() -> None:
    """Forget the cached probe (tests that install or remove a torch_npu shim need this)."""
    device_kind.cache_clear()
