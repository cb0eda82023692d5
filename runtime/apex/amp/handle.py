"""``amp.scale_loss``: the context manager around ``backward``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from . import _npu_overflow
from ._amp_state import _amp_state
from ._casting import disable_casts
from ._optimizer import AmpOptimizerState

__all__ = ["disable_casts", "scale_loss"]


def _as_list(
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
) -> list[torch.optim.Optimizer]:
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    return list(optimizers)


def _stash_of(optimizer: torch.optim.Optimizer) -> AmpOptimizerState:
    stash = getattr(optimizer, "_amp_stash", None)
    if stash is None:
        raise RuntimeError(
            "scale_loss got an optimizer that did not go through amp.initialize; pass the "
            "optimizer returned by amp.initialize."
        )
    return stash  # type: ignore[no-any-return]


@contextlib.contextmanager
def scale_loss(
    loss: torch.Tensor,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    loss_id: int = 0,
    model: torch.nn.Module | None = None,
    delay_unscale: bool = False,
    delay_overflow_check: bool = False,
) -> Iterator[torch.Tensor]:
    """Yield ``loss * loss_scale``; on exit unscale the grads and decide whether to skip a step.

    ``delay_unscale=True`` leaves the grads scaled so that a later ``scale_loss`` of the same
    optimizers unscales everything at once; ``delay_overflow_check=True`` unscales but leaves the
    loss scale and the next step alone. ``model`` is accepted for apex compatibility and unused.
    """
    properties = _amp_state.opt_properties
    if not _amp_state.initialized or properties is None or not properties.enabled:
        yield loss
        return
    if loss_id >= len(_amp_state.loss_scalers):
        raise RuntimeError(
            f"loss_id={loss_id} but amp.initialize was called with "
            f"num_losses={len(_amp_state.loss_scalers)}."
        )
    stashes = [_stash_of(optimizer) for optimizer in _as_list(optimizers)]
    loss_scaler = _amp_state.loss_scalers[loss_id]
    loss_scale = loss_scaler.loss_scale()
    if not properties.master_weights and not loss_scaler.dynamic and loss_scale == 1.0:
        # Nothing to scale or unscale (O0, O3): hand the loss through untouched.
        yield loss.float()
        return
    if not delay_unscale:
        for stash in stashes:
            if not stash.params_have_scaled_gradients:
                stash.prepare_backward()
    if loss_scaler.dynamic:
        _npu_overflow.clear_overflow_flag()
    yield loss.float() * loss_scale
    if delay_unscale:
        for stash in stashes:
            stash.lazy_init()
            stash.params_have_scaled_gradients = True
        return
    loss_scaler.clear_overflow_state()
    if loss_scaler.dynamic and _npu_overflow.overflow_flag_is_set():
        loss_scaler.record_overflow()  # a saturating NPU: the grads themselves look finite
    for stash in stashes:
        stash.post_backward(loss_scaler)
        stash.params_have_scaled_gradients = False
    should_skip = False if delay_overflow_check else loss_scaler.update_scale()
    if should_skip:
        for stash in stashes:
            stash.skip_next_step = (loss_id, loss_scaler)
