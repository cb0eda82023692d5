"""Static and dynamic loss scaling with Ascend's knobs.

A dynamic scaler starts at ``dynamic_init_scale`` (capped by ``max_loss_scale``); a step whose
gradients hold an inf or NaN is skipped and the scale is multiplied by ``scale_backoff_factor``
(never below ``min_loss_scale``); after ``scale_window`` clean steps in a row it is multiplied by
``scale_growth_factor`` (never above ``max_loss_scale``). A static scaler never changes and never
skips.

Unscaling and the overflow check are one fused pass per list of tensors
(``torch._amp_foreach_non_finite_check_and_unscale_``, the kernel behind torch's GradScaler), so
handing it a few flat buffers instead of hundreds of gradients is what makes ``combine_grad``
cheap. The overflow flag stays on the device until :meth:`update_scale` reads it once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch


class LossScaler:
    """One loss's scale; ``_loss_scale`` and ``_unskipped`` are the names apex scripts touch."""

    def __init__(
        self,
        loss_scale: float | str,
        init_scale: float = 2.0**16,
        scale_growth_factor: float = 2.0,
        scale_backoff_factor: float = 0.5,
        scale_window: int = 2000,
        min_loss_scale: float | None = None,
        max_loss_scale: float = 2.0**24,
    ) -> None:
        self.dynamic = loss_scale == "dynamic"
        self._max_loss_scale = max_loss_scale
        self._min_loss_scale = min_loss_scale
        self._scale_seq_len = scale_window
        self._scale_growth_factor = scale_growth_factor
        self._scale_backoff_factor = scale_backoff_factor
        self._loss_scale = min(max_loss_scale, init_scale) if self.dynamic else float(loss_scale)
        self._unskipped = 0
        self._has_overflow = False
        self._found_inf: dict[torch.device, torch.Tensor] = {}

    def loss_scale(self) -> float:
        return self._loss_scale

    def clear_overflow_state(self) -> None:
        self._has_overflow = False
        for flag in self._found_inf.values():
            flag.zero_()

    def unscale_(self, tensors: Sequence[torch.Tensor], scale: float | None = None) -> None:
        """Multiply ``tensors`` in place by ``1/scale`` and record whether any was not finite."""
        if not tensors:
            return
        factor = 1.0 / (self._loss_scale if scale is None else scale)
        if not self.dynamic:
            # A static scale never skips, so the finiteness check would be wasted work.
            if factor != 1.0:
                torch._foreach_mul_(list(tensors), factor)
            return
        for (device, _dtype), group in _group_by_device_and_dtype(tensors).items():
            found_inf = self._found_inf_on(device)
            inv_scale = torch.full((1,), factor, dtype=torch.float32, device=device)
            _check_and_unscale(group, found_inf, inv_scale)

    def check_finite_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Record an overflow in ``tensors`` without changing them (already-unscaled values)."""
        if self.dynamic and tensors:
            self.unscale_(tensors, scale=1.0)

    def record_overflow(self) -> None:
        """Mark this backward as overflowed (for overflows seen outside the grads)."""
        self._has_overflow = True

    def has_overflow(self) -> bool:
        if not self._has_overflow:
            self._has_overflow = any(bool(flag.item()) for flag in self._found_inf.values())
        return self._has_overflow

    def update_scale(self) -> bool:
        """Apply the dynamic rule after a backward; True when the optimizer step must be skipped."""
        if self.dynamic and self.has_overflow():
            backed_off = self._loss_scale * self._scale_backoff_factor
            if self._min_loss_scale is not None:
                backed_off = max(self._min_loss_scale, backed_off)
            self._loss_scale = backed_off
            self._unskipped = 0
            return True
        self._unskipped += 1
        if self.dynamic and self._unskipped == self._scale_seq_len:
            self._loss_scale = min(
                self._max_loss_scale, self._loss_scale * self._scale_growth_factor
            )
            self._unskipped = 0
        return False

    def _found_inf_on(self, device: torch.device) -> torch.Tensor:
        if device not in self._found_inf:
            self._found_inf[device] = torch.zeros(1, dtype=torch.float32, device=device)
        return self._found_inf[device]


def _group_by_device_and_dtype(
    tensors: Sequence[torch.Tensor],
) -> dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]:
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
    for tensor in tensors:
        groups[(tensor.device, tensor.dtype)].append(tensor)
    return groups


def _check_and_unscale(
    tensors: list[torch.Tensor], found_inf: torch.Tensor, inv_scale: torch.Tensor
) -> None:
    try:
        torch._amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, inv_scale)
    except (NotImplementedError, RuntimeError):
        # A backend without the fused kernel: same result, one check and one multiply per tensor.
        for tensor in tensors:
            found_inf.add_((~torch.isfinite(tensor)).any().to(found_inf.dtype))
            tensor.mul_(inv_scale.to(tensor.dtype))
        found_inf.clamp_(max=1.0)
