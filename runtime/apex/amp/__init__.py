"""``apex.amp``: Ascend apex's automatic mixed precision on NPU, CUDA and CPU.

See ``runtime/docs/amp.md`` for the behaviour on each device and the usage.
"""

from __future__ import annotations

from ._amp_state import _amp_state
from .frontend import (
    float_function,
    half_function,
    initialize,
    load_state_dict,
    master_params,
    promote_function,
    register_float_function,
    register_half_function,
    register_promote_function,
    state_dict,
)
from .handle import disable_casts, scale_loss
from .scaler import LossScaler

__all__ = [
    "LossScaler",
    "_amp_state",
    "disable_casts",
    "float_function",
    "half_function",
    "initialize",
    "load_state_dict",
    "master_params",
    "promote_function",
    "register_float_function",
    "register_half_function",
    "register_promote_function",
    "scale_loss",
    "state_dict",
]
