"""Process-wide amp state: the options chosen by ``initialize`` and the loss scalers.

Scripts written for apex reach into this (``amp._amp_state.loss_scalers[0]._loss_scale``), so the
attribute names follow apex.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .scaler import LossScaler


class AmpState:
    """Everything ``initialize`` decides, kept for ``scale_loss`` and ``state_dict``."""

    def __init__(self) -> None:
        self.hard_override = False
        self.verbosity = 1
        self.initialized = False
        self.opt_properties: Any = None
        self.loss_scalers: list[LossScaler] = []
        self.min_loss_scale: float | None = None
        self.max_loss_scale: float = 2.0**24


_amp_state = AmpState()


def warn_or_err(message: str) -> None:
    """apex's rule: an inconsistent option is an error unless ``hard_override`` is set."""
    if _amp_state.hard_override:
        print("Warning:  " + message)
    else:
        raise RuntimeError(message)


def _is_rank_zero() -> bool:
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank() == 0
    return True


def maybe_print(message: str, rank0: bool = False) -> None:
    """Print unless ``verbosity=0``; with ``rank0`` only on the first rank of a process group."""
    if _amp_state.verbosity <= 0:
        return
    if rank0 and not _is_rank_zero():
        return
    print(message)
