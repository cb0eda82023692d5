"""What ``import torch_npu`` changes in torch, done once per process."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

import torch

from . import _device

_installed = False


def install(torch_module: Any, npu_module: ModuleType) -> None:
    global _installed
    if _installed:
        return
    _installed = True
    _name_the_device()
    torch_module._register_device_module("npu", npu_module)  # torch.npu and sys.modules
    _add_tensor_and_module_methods()
    _register_hccl()


class _NoNpuHooks(torch._C._acc.PrivateUse1Hooks):
    """The backend exists but has no device: what torch asks of a registered privateuse1 backend.

    Without hooks, torch code that looks up the accelerator (``torch._C._get_accelerator()``, as
    ``torch.distributed.barrier`` does) fails with "Please register PrivateUse1HooksInterface".
    """

    def is_available(self) -> bool:
        return False

    def has_primary_context(self, device_index: int) -> bool:
        return False

    def is_built(self) -> bool:
        return True


def _name_the_device() -> None:
    """``torch.device("npu")`` parses, as with torch_npu (allocation there still fails)."""
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        torch.utils.rename_privateuse1_backend("npu")
        torch._C._acc.register_python_privateuseone_hook(_NoNpuHooks())


def _npu(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any):
    """``Tensor.npu(device=None, non_blocking=False, memory_format=...)`` -> the stand-in."""
    return self.to(_device.stand_in(device), non_blocking=non_blocking, **kwargs)


def _module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    return self.to(_device.stand_in(device))


def _is_npu(self: torch.Tensor) -> bool:
    return self.device.type == "npu"


def _add_tensor_and_module_methods() -> None:
    torch.Tensor.npu = _npu  # type: ignore[attr-defined]
    torch.Tensor.is_npu = property(_is_npu)  # type: ignore[attr-defined]
    torch.nn.Module.npu = _module_npu  # type: ignore[attr-defined]


def _create_hccl_stand_in(
    store: Any, rank: int, world_size: int, timeout: datetime.timedelta
) -> Any:
    return torch.distributed.ProcessGroupGloo(store, rank, world_size, timeout)


def _register_hccl() -> None:
    """``init_process_group("hccl")`` runs gloo (on CUDA tensors too when CUDA stands in)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    if "hccl" not in dist.Backend.backend_list:
        devices = ["cpu", "cuda"] if _device.stand_in_type() == "cuda" else ["cpu"]
        dist.Backend.register_backend("hccl", _create_hccl_stand_in, devices=devices)
    dist.is_hccl_available = lambda: True  # type: ignore[attr-defined]
