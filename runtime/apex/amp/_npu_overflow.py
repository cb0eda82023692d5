"""Overflow detection on NPUs that saturate instead of producing inf/NaN.

Ascend 910A-class chips run fp16 in saturation mode: an overflow yields the largest finite value,
so inspecting the grads finds nothing. torch_npu exposes the chip's float-status flag instead
(``torch_npu.npu.utils.is_support_inf_nan``, ``clear_npu_overflow_flag``,
``get_npu_overflow_flag``); Ascend apex clears it before backward and reads it after, and so does
this module. On every other device (and on NPUs with inf/NaN support) both functions do nothing.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from apex._device import device_kind


@functools.cache
def _saturation_mode_utils() -> Any:
    """torch_npu's utils module when this NPU has no inf/NaN mode, else None."""
    if device_kind() != "npu":
        return None
    utils = importlib.import_module("torch_npu.npu.utils")
    is_support_inf_nan = getattr(utils, "is_support_inf_nan", None)
    if is_support_inf_nan is None or is_support_inf_nan():
        return None
    return utils


def clear_overflow_flag() -> None:
    utils = _saturation_mode_utils()
    if utils is not None:
        utils.clear_npu_overflow_flag()


def overflow_flag_is_set() -> bool:
    utils = _saturation_mode_utils()
    return utils is not None and bool(utils.get_npu_overflow_flag())
