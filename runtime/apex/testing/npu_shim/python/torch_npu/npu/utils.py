"""The overflow-flag functions of ``torch_npu.npu.utils``, for a device that has inf/NaN.

Huawei's torch_npu reads the chip's float-status register here on Ascend 910A-class chips, which
saturate fp16 instead of producing inf/NaN. The stand-in runs on CPU (or CUDA), which produces
inf/NaN, so it answers as the chips with inf/NaN support do: overflow shows in the values, and
the flag is never set.
"""

from __future__ import annotations


def is_support_inf_nan() -> bool:
    return True


def clear_npu_overflow_flag() -> None:
    """Nothing to clear: the flag of a device with inf/NaN support is never set."""


def get_npu_overflow_flag() -> bool:
    return False
