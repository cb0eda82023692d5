"""``torch.npu.amp`` of the shim: torch.cuda.amp as it behaves without the device (disabled).

``autocast`` and ``GradScaler`` disable themselves on the CPU stand-in, exactly as
``torch.cuda.amp.autocast`` / ``GradScaler`` do on a machine without CUDA, so a migrated script
computes in the same precision as its original does on the same machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import _device

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


class autocast(torch.amp.autocast_mode.autocast):  # lower case: torch's name
    def __init__(
        self,
        enabled: bool = True,
        dtype: torch.dtype = torch.float16,
        cache_enabled: bool = True,
    ) -> None:
        if _device.on_cuda():
            super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        else:
            super().__init__("cpu", dtype=torch.bfloat16, enabled=False, cache_enabled=False)


class GradScaler(torch.amp.GradScaler):
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        **kwargs: Any,  # torch_npu's extra options (dynamic, ...) have no meaning here
    ) -> None:
        on_cuda = _device.on_cuda()
        super().__init__(
            "cuda" if on_cuda else "cpu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled and on_cuda,
        )


def custom_fwd(fwd: Callable[..., Any] | None = None, *, cast_inputs: Any = None) -> Any:
    device_type = "cuda" if _device.on_cuda() else "cpu"
    if fwd is None:
        return torch.amp.custom_fwd(device_type=device_type, cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type=device_type, cast_inputs=cast_inputs)


def custom_bwd(bwd: Callable[..., Any] | None = None) -> Any:
    device_type = "cuda" if _device.on_cuda() else "cpu"
    if bwd is None:
        return torch.amp.custom_bwd(device_type=device_type)
    return torch.amp.custom_bwd(bwd, device_type=device_type)
