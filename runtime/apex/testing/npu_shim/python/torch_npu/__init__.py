"""npu-migrate's stand-in torch_npu (not Huawei's): see ``apex.testing.npu_shim``.

Importing it patches torch the way torch_npu does, with CPU (or CUDA) behind it: ``torch.npu``,
``Tensor.npu`` / ``Module.npu`` / ``Tensor.is_npu``, the ``npu`` device name, and the ``"hccl"``
distributed backend.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import warnings

import torch

from . import _patch, npu, optim, profiler

__all__ = ["npu", "optim", "profiler"]
__version__ = "0.0.0+npu-migrate-shim"
IS_NPU_MIGRATE_SHIM = True


def _warn_if_hiding_real_torch_npu() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("torch_npu", others)
    if spec is not None and spec.origin is not None:
        warnings.warn(
            f"the npu-migrate torch_npu shim is hiding the real torch_npu at {spec.origin}; "
            "remove the shim from PYTHONPATH to use the NPU",
            RuntimeWarning,
            stacklevel=3,
        )


_warn_if_hiding_real_torch_npu()
_patch.install(torch, npu)
