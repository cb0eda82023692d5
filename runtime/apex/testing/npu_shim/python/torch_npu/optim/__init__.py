"""``torch_npu.optim`` of the shim: the NpuFused optimizers of the npu-migrate apex runtime.

They come from ``apex.optimizers.standalone`` (same math as torch_npu's, no apex amp check),
imported on first use so that ``import torch_npu`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if not name.startswith("NpuFused"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        standalone = importlib.import_module("apex.optimizers.standalone")
    except ImportError as error:
        raise ImportError(
            f"torch_npu.optim.{name}: the torch_npu shim takes its NpuFused optimizers from the "
            "npu-migrate apex runtime (apex.optimizers.standalone), which is not importable"
        ) from error
    try:
        return getattr(standalone, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
