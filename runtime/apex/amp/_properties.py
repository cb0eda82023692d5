"""Optimization levels O0-O3 and the validation of user overrides (apex's ``Properties``).

Every option goes through :meth:`Properties.__setattr__`, which applies apex's consistency rules
plus Ascend's additions (``combine_grad``, ``combine_ddp``, ``user_cast_preferred``,
``check_combined_tensors``). The error texts are apex's and Ascend's own, so a script that relied
on one keeps seeing it.
"""

from __future__ import annotations

from typing import Any

import torch

from ._amp_state import warn_or_err

OPT_LEVELS = ("O0", "O1", "O2", "O3")

_DEFAULT_OPTIONS: dict[str, Any] = {
    "enabled": False,
    "opt_level": None,
    "cast_model_type": None,
    "patch_torch_functions": False,
    "keep_batchnorm_fp32": None,
    "master_weights": None,
    "loss_scale": 1.0,
    "combine_grad": None,
    "combine_ddp": None,
    "ddp_replica_count": 4,
    "check_combined_tensors": None,
    "user_cast_preferred": None,
}

# What each level sets before user overrides. "half" stands for the device's half dtype
# (float16 on CUDA and NPU; see apex.amp._casting for CPU), resolved when the model is known.
OPT_LEVEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "O0": {
        "cast_model_type": torch.float32,
        "patch_torch_functions": False,
        "keep_batchnorm_fp32": None,
        "master_weights": False,
        "loss_scale": 1.0,
    },
    "O1": {
        "cast_model_type": None,
        "patch_torch_functions": True,
        "keep_batchnorm_fp32": None,
        "master_weights": None,
        "loss_scale": "dynamic",
    },
    "O2": {
        "cast_model_type": "half",
        "patch_torch_functions": False,
        "keep_batchnorm_fp32": True,
        "master_weights": True,
        "loss_scale": "dynamic",
    },
    "O3": {
        "cast_model_type": "half",
        "patch_torch_functions": False,
        "keep_batchnorm_fp32": False,
        "master_weights": False,
        "loss_scale": 1.0,
    },
}

_HALF_TYPES = ("half", torch.float16, torch.bfloat16)


class Properties:
    """The resolved options; attribute writes are validated against the chosen opt level."""

    def __init__(self) -> None:
        object.__setattr__(self, "options", dict(_DEFAULT_OPTIONS))

    def __getattr__(self, name: str) -> Any:
        options = object.__getattribute__(self, "options")
        if name in options:
            return options[name]
        raise AttributeError(f"'Properties' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.options:
            object.__setattr__(self, name, value)
            return
        validator = getattr(self, f"_check_{name}", None)
        self.options[name] = validator(value) if validator is not None else value

    # Each _check_<option> returns the value to store or reports through warn_or_err.

    def _check_cast_model_type(self, value: Any) -> Any:
        if self.opt_level == "O1" and value not in (None, False, torch.float32):
            warn_or_err(
                "O1 inserts casts around Torch functions rather than model weights, so with O1, "
                "the model weights themselves should remain FP32. If you wish to cast the model "
                "to a different type, use opt_level='O2' or 'O3'. "
                f"cast_model_type was {value}"
            )
        return value

    def _check_patch_torch_functions(self, value: Any) -> Any:
        if self.opt_level != "O1" and value:
            warn_or_err(
                "Currently, patch_torch_functions=True should only be set by selecting "
                "opt_level='O1'."
            )
        return value

    def _check_keep_batchnorm_fp32(self, value: Any) -> Any:
        if self.opt_level == "O1" and value is not None:
            warn_or_err(
                "With opt_level O1, batchnorm functions are automatically patched to run in "
                "FP32, so keep_batchnorm_fp32 should be None. "
                f"keep_batchnorm_fp32 was {value}"
            )
        if value == "False":
            value = False
        elif value == "True":
            value = True
        if value not in (True, False, None):
            raise AssertionError(
                "keep_batchnorm_fp32 must be a boolean, the string 'True' or 'False', or None, "
                f"found keep_batchnorm_fp32={value}"
            )
        return value

    def _check_master_weights(self, value: Any) -> Any:
        if self.opt_level == "O1" and value is not None:
            warn_or_err(
                "It doesn't make sense to use master_weights with O1. "
                "With O1, your model weights themselves should be FP32."
            )
        return value

    def _check_loss_scale(self, value: Any) -> Any:
        return value if value == "dynamic" else float(value)

    def _check_combine_grad(self, value: Any) -> Any:
        self._require_o1_or_o2_for_combining(value)
        return value

    def _check_check_combined_tensors(self, value: Any) -> Any:
        self._require_o1_or_o2_for_combining(value)
        return value

    def _require_o1_or_o2_for_combining(self, value: Any) -> None:
        if self.opt_level not in ("O1", "O2") and value:
            warn_or_err(
                "Currently, combine_grad=True or check_combined_tensors=True should only be set "
                "by selecting opt_level='O1' or opt_level='O2'."
            )

    def _check_combine_ddp(self, value: Any) -> Any:
        if value and not self.combine_grad:
            warn_or_err("Combine_grad should be True when combine_ddp using.. \n")
        return value

    def _check_user_cast_preferred(self, value: Any) -> Any:
        if self.opt_level != "O1" and value:
            warn_or_err(
                "Currently, user_cast_preferred=True should only be set by selecting "
                "opt_level='O1'."
            )
        return value

    def _check_ddp_replica_count(self, value: Any) -> Any:
        count = int(value)
        if count < 1:
            raise ValueError(f"ddp_replica_count must be a positive integer, got {value!r}")
        return count


def check_opt_level(opt_level: str) -> None:
    if opt_level not in OPT_LEVELS:
        raise RuntimeError(
            f"Unexpected optimization level {opt_level}. Options are 'O0', 'O1', 'O2', 'O3'.  "
            "Note that in `O0`, `O1`, etc., the prefix O is the letter O, not the number zero."
        )


def properties_for(opt_level: str, overrides: dict[str, Any]) -> Properties:
    """Apply the level's defaults, then each user override that is not None, in apex's order."""
    check_opt_level(opt_level)
    properties = Properties()
    properties.enabled = True
    properties.opt_level = opt_level
    for name, value in OPT_LEVEL_DEFAULTS[opt_level].items():
        properties.options[name] = value  # defaults are consistent by construction
    for name, value in overrides.items():
        if value is not None:
            setattr(properties, name, value)
    return properties


def is_half_cast(cast_model_type: Any) -> bool:
    return cast_model_type in _HALF_TYPES
