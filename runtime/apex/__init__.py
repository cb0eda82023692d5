"""A portable ``apex``: Ascend apex's public API backed by torch_npu, CUDA or plain CPU torch.

Importing this package is cheap and never imports torch_npu; the device is probed at first use
(see :func:`apex._device.device_kind`). Subpackages (``amp``, ``optimizers``, ``normalization``,
``parallel``, ``contrib``) are imported lazily on attribute access so that ``import apex`` followed
by ``apex.normalization.FusedLayerNorm`` works the way it does with NVIDIA's apex.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"

_SUBPACKAGES = frozenset({"amp", "optimizers", "normalization", "parallel", "contrib", "testing"})


def __getattr__(name: str) -> ModuleType:
    # Lazy so that `import apex` stays light and a broken optional part cannot break the rest.
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
