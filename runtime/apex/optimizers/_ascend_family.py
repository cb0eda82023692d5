"""Ascend's own optimizers (no torch.optim counterpart): Lamb, RMSpropTF, AdamP, BertAdam.

The math follows Ascend apex's published formulas; where Ascend apex and torch_npu differ, or
Ascend has a bug, each class docstring says what this implementation does. Elementwise work is
done on whole flat buffers; the per-tensor parts (LAMB's trust ratio, AdamP's projection) work
on per-parameter views of those buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import required  # type: ignore[attr-defined]

from apex.optimizers._fused_base import (
    NpuFusedOptimizerBase,
    ParamGroup,
    Slab,
    bias_correction,
    check_adam_hyperparameters,
    check_hyperparameter,
    float_math,
    group_grad_norm,
)


def _advance(slab: Slab) -> float:
    """Increment the slab's step counter and return the new value."""
    assert slab.step is not None
    slab.step.add_(1)
    return float(slab.step.item())


class _LambCore(NpuFusedOptimizerBase):
    """LAMB as Ascend (and cybertronai's pytorch-lamb) define it.

    No bias correction; ``adam_step = exp_avg / (sqrt(exp_avg_sq) + eps) + weight_decay * p``;
    per-tensor ``trust_ratio = clamp(||p||, 0, 10) / ||adam_step||`` (1 when either norm is 0,
    or always 1 with ``adam=True``); ``p -= lr * trust_ratio * adam_step``. This differs from
    NVIDIA's FusedLAMB (bias correction, no clamp): see ``apex.optimizers.FusedLAMB``.
    """

    _use_global_grad_norm: bool = False

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        adam: bool,
    ) -> None:
        check_adam_hyperparameters(lr, betas, eps)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.adam = adam
        super().__init__(params, defaults)

    def _state_names(self, group: ParamGroup) -> list[str]:
        return ["exp_avg", "exp_avg_sq"]

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        self._global_grad_norm: torch.Tensor | None = None
        return super().step(closure)

    def _gradient_divisor(self) -> torch.Tensor | None:
        """NpuFusedLamb(use_global_grad_norm=True) divides grads by the global norm if > 1."""
        if not self._use_global_grad_norm:
            return None
        if self._global_grad_norm is None:
            slabs = [
                slab
                for index, group in enumerate(self.param_groups)
                for slab in self._slabs_for_step(index, group)
            ]
            self._global_grad_norm = group_grad_norm(slabs) if slabs else torch.tensor(1.0)
        return self._global_grad_norm

    def _update(self, group: ParamGroup, slabs: list[Slab]) -> None:
        beta1, beta2 = group["betas"]
        divisor = self._gradient_divisor()
        for original in slabs:
            with float_math(original) as slab:
                _advance(slab)
                grad = slab.grad
                if divisor is not None and divisor.item() > 1:
                    grad = grad / divisor.to(grad.device, grad.dtype)
                exp_avg, exp_avg_sq = slab.state["exp_avg"], slab.state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                adam_step = exp_avg / exp_avg_sq.sqrt().add_(group["eps"])
                if group["weight_decay"] != 0:
                    adam_step.add_(slab.param, alpha=group["weight_decay"])
                if not self.adam:
                    self._apply_trust_ratios(slab, adam_step)
                slab.param.add_(adam_step, alpha=-group["lr"])

    @staticmethod
    def _apply_trust_ratios(slab: Slab, adam_step: torch.Tensor) -> None:
        """Scale each parameter's slot of ``adam_step`` by its trust ratio, in place."""
        step_views = slab.views(adam_step)
        weight_norms = torch.stack(torch._foreach_norm(slab.views(slab.param))).clamp(0, 10)
        step_norms = torch.stack(torch._foreach_norm(step_views))
        usable = (weight_norms != 0) & (step_norms != 0)
        ratios = torch.where(usable, weight_norms / step_norms, torch.ones_like(step_norms))
        torch._foreach_mul_(step_views, list(ratios.unbind()))


class NpuFusedLamb(_LambCore):
    """Ascend's NpuFusedLamb: LAMB (see :class:`_LambCore`) on flat buffers.

    With ``use_global_grad_norm=True`` every gradient is divided by the global L2 norm of all
    gradients of the optimizer when that norm exceeds 1 (the gradients themselves are left
    unchanged), as in Ascend.
    """

    _ascend_name: ClassVar[str] = "NpuFusedLamb"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        adam: bool = False,
        use_global_grad_norm: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, adam)
        self._use_global_grad_norm = use_global_grad_norm
        self.use_global_grad_norm = use_global_grad_norm


class Lamb(_LambCore):
    """Ascend's (unfused in Ascend, flat here) Lamb: the same math as NpuFusedLamb.

    Ascend's Lamb also records ``weight_norm``/``adam_norm``/``trust_ratio`` in the state for
    logging; this one does not, which keeps its state dict torch-shaped.
    """

    _ascend_name: ClassVar[str] = "Lamb"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0,
        adam: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, adam)


class NpuFusedRMSpropTF(NpuFusedOptimizerBase):
    """TensorFlow-style RMSprop (timm's RMSpropTF) on flat buffers.

    Differences from torch's RMSprop: ``eps`` inside the square root, the square average
    updated as ``v += (1 - alpha) * (g*g - v)``, and with ``lr_in_momentum`` (default) the
    learning rate is folded into the momentum buffer. ``decoupled_decay`` multiplies the
    parameter by ``1 - weight_decay`` (Ascend's formula, without the learning rate).

    Documented choice: ``square_avg`` starts at **ones**, as in timm's RMSpropTF (the class
    migrated scripts come from) and TensorFlow, not at zeros as in Ascend apex's version: a
    timm checkpoint and a timm-tuned schedule then behave the same, and the first steps are
    not blown up by dividing by ``sqrt(eps)`` with the default ``eps=1e-10``.
    """

    _ascend_name: ClassVar[str] = "NpuFusedRMSpropTF"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.9,
        eps: float = 1e-10,
        weight_decay: float = 0,
        momentum: float = 0.0,
        centered: bool = False,
        decoupled_decay: bool = False,
        lr_in_momentum: bool = True,
    ) -> None:
        check_hyperparameter(lr >= 0.0, f"Invalid learning rate: {lr}")
        check_hyperparameter(eps >= 0.0, f"Invalid epsilon value: {eps}")
        check_hyperparameter(momentum >= 0.0, f"Invalid momentum value: {momentum}")
        check_hyperparameter(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        check_hyperparameter(alpha >= 0.0, f"Invalid alpha value: {alpha}")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            decoupled_decay=decoupled_decay,
            lr_in_momentum=lr_in_momentum,
        )
        super().__init__(params, defaults)

    def _state_names(self, group: ParamGroup) -> list[str]:
        names = ["square_avg"]
        if group["momentum"] > 0:
            names.append("momentum_buffer")
        if group["centered"]:
            names.append("grad_avg")
        return names

    def _state_fill(self, name: str) -> float:
        return 1.0 if name == "square_avg" else 0.0

    def _update(self, group: ParamGroup, slabs: list[Slab]) -> None:
        one_minus_alpha = 1.0 - group["alpha"]
        for original in slabs:
            with float_math(original) as slab:
                _advance(slab)
                param, grad = slab.param, slab.grad
                if group["weight_decay"] != 0:
                    if group.get("decoupled_decay", False):
                        param.mul_(1.0 - group["weight_decay"])
                    else:
                        grad = grad.add(param, alpha=group["weight_decay"])
                square_avg = slab.state["square_avg"]
                square_avg.add_(grad * grad - square_avg, alpha=one_minus_alpha)
                if group["centered"]:
                    grad_avg = slab.state["grad_avg"]
                    grad_avg.add_(grad - grad_avg, alpha=one_minus_alpha)
                    avg = (
                        square_avg.addcmul(grad_avg, grad_avg, value=-1).add_(group["eps"]).sqrt_()
                    )
                else:
                    avg = square_avg.add(group["eps"]).sqrt_()
                if group["momentum"] > 0:
                    buffer = slab.state["momentum_buffer"]
                    if group.get("lr_in_momentum", True):
                        buffer.mul_(group["momentum"]).addcdiv_(grad, avg, value=group["lr"])
                        param.sub_(buffer)
                    else:
                        buffer.mul_(group["momentum"]).addcdiv_(grad, avg)
                        param.add_(buffer, alpha=-group["lr"])
                else:
                    param.addcdiv_(grad, avg, value=-group["lr"])


class NpuFusedAdamP(NpuFusedOptimizerBase):
    """AdamP (Heo et al.): Adam with bias correction plus a projection for scale-invariant
    weights; for tensors with more than one dimension whose gradient is nearly orthogonal to
    the weight (cosine similarity below ``delta / sqrt(dim)``, checked per channel and then per
    layer) the radial part of the update is removed and weight decay scaled by ``wd_ratio``.
    Weight decay is decoupled: ``p *= 1 - lr * weight_decay * wd_ratio``. Like Ascend, there is
    no hyper-parameter validation.
    """

    _ascend_name: ClassVar[str] = "NpuFusedAdamP"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        delta: float = 0.1,
        wd_ratio: float = 0.1,
        nesterov: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            delta=delta,
            wd_ratio=wd_ratio,
            nesterov=nesterov,
        )
        super().__init__(params, defaults)

    def _state_names(self, group: ParamGroup) -> list[str]:
        return ["exp_avg", "exp_avg_sq"]

    def _update(self, group: ParamGroup, slabs: list[Slab]) -> None:
        beta1, beta2 = group["betas"]
        for original in slabs:
            with float_math(original) as slab:
                step = _advance(slab)
                grad, param = slab.grad, slab.param
                exp_avg, exp_avg_sq = slab.state["exp_avg"], slab.state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = exp_avg_sq.sqrt().div_(math.sqrt(bias_correction(beta2, step)))
                denom.add_(group["eps"])
                if group["nesterov"]:
                    perturb = (exp_avg * beta1 + grad * (1 - beta1)).div_(denom)
                else:
                    perturb = exp_avg / denom
                decay_ratios = self._project(slab, perturb, group)
                if group["weight_decay"] > 0:
                    decay = torch.ones_like(param) if decay_ratios else None
                    if decay is not None:
                        for view, ratio in zip(slab.views(decay), decay_ratios, strict=True):
                            view.fill_(ratio)
                        param.mul_(decay.mul_(-group["lr"] * group["weight_decay"]).add_(1))
                    else:
                        param.mul_(1 - group["lr"] * group["weight_decay"])
                param.add_(perturb, alpha=-group["lr"] / bias_correction(beta1, step))

    def _project(self, slab: Slab, perturb: torch.Tensor, group: ParamGroup) -> list[float]:
        """Project each matrix-like parameter's slot of ``perturb`` in place; per-slot wd ratio."""
        ratios = []
        views = slab.shaped_views(perturb)
        grads = slab.shaped_views(slab.grad)
        for p, grad, perturb_view in zip(slab.params, grads, views, strict=True):
            ratio = 1.0
            if p.dim() > 1 and p.numel() > 0:
                ratio = _project_one(p, grad, perturb_view, group)
            ratios.append(ratio)
        return ratios if any(ratio != 1.0 for ratio in ratios) else []


def _project_one(
    p: torch.Tensor, grad: torch.Tensor, perturb: torch.Tensor, group: ParamGroup
) -> float:
    eps, delta = group["eps"], group["delta"]
    expand = [-1] + [1] * (p.dim() - 1)
    for flatten in (_channel_view, _layer_view):
        cosine = _cosine_similarity(grad, p, eps, flatten)
        if cosine.max() < delta / math.sqrt(flatten(p).size(1)):
            unit = p / flatten(p).norm(dim=1).view(expand).add_(eps)
            perturb.sub_(unit * flatten(unit * perturb).sum(dim=1).view(expand))
            return float(group["wd_ratio"])
    return 1.0


def _channel_view(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.size(0), -1)


def _layer_view(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(1, -1)


def _cosine_similarity(
    x: torch.Tensor, y: torch.Tensor, eps: float, flatten: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    x, y = flatten(x), flatten(y)
    return (x * y).sum(dim=1).abs() / x.norm(dim=1).add_(eps) / y.norm(dim=1).add_(eps)


WARMUP_DEFAULT = 0.002
DEGREE_DEFAULT = 0.5


def warmup_cosine(x: float, warmup: float = WARMUP_DEFAULT) -> float:
    # Ascend calls torch.cos on a Python float here, which raises; math.cos is what was meant.
    if x < warmup:
        return x / warmup
    return 0.5 * (1.0 + math.cos(math.pi * x))


def warmup_constant(x: float, warmup: float = WARMUP_DEFAULT) -> float:
    if x < warmup:
        return x / warmup
    return 1.0


def warmup_linear(x: float, warmup: float = WARMUP_DEFAULT) -> float:
    if x < warmup:
        return x / warmup
    return max((x - 1.0) / (warmup - 1.0), 0.0)


def warmup_poly(x: float, warmup: float = WARMUP_DEFAULT, degree: float = DEGREE_DEFAULT) -> float:
    if x < warmup:
        return x / warmup
    return (1.0 - x) ** degree


SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "warmup_cosine": warmup_cosine,
    "warmup_constant": warmup_constant,
    "warmup_linear": warmup_linear,
    "warmup_poly": warmup_poly,
}


class NpuFusedBertAdam(NpuFusedOptimizerBase):
    """BERT's Adam (pytorch-pretrained-bert's BertAdam): no bias correction, weight decay added
    to the update, a warmup schedule on the learning rate, optional gradient clipping.

    ``update = exp_avg / (sqrt(exp_avg_sq) + e) + weight_decay * p``;
    ``p -= lr * schedule(step / t_total, warmup) * update`` (plain ``lr`` when ``t_total`` is
    -1), where ``step`` counts the steps already taken. With ``max_grad_norm > 0`` the
    gradients of each param group are first clipped, in place, to that total L2 norm
    (``coef = max_grad_norm / (norm + 1e-6)`` when below 1).

    Documented choices where Ascend apex and torch_npu disagree: ``b2=0.999`` and
    ``max_grad_norm=1.0`` (Ascend apex's code and the original BertAdam; torch_npu and Ascend's
    README say 0.99 and -1). Fixed Ascend bugs: the step counter lives in each parameter's
    state (``state['step']``), advances every step and survives ``state_dict()`` round trips;
    ``warmup_cosine`` works (Ascend applies ``torch.cos`` to a float and raises).
    """

    _ascend_name: ClassVar[str] = "NpuFusedBertAdam"

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = required,  # type: ignore[assignment]
        warmup: float = -1,
        t_total: int = -1,
        schedule: str = "warmup_linear",
        b1: float = 0.9,
        b2: float = 0.999,
        e: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
    ) -> None:
        check_hyperparameter(lr is required or lr >= 0.0, f"Invalid learning rate: {lr}")
        check_hyperparameter(
            not ((warmup < 0.0 and warmup != -1) or warmup >= 1.0), f"Invalid warmup: {warmup}"
        )
        check_hyperparameter(schedule in SCHEDULES, f"Invalid schedule parameter: {schedule}")
        check_hyperparameter(0.0 <= b1 < 1.0, f"Invalid b1 parameter: {b1}")
        check_hyperparameter(0.0 <= b2 < 1.0, f"Invalid b2 parameter: {b2}")
        check_hyperparameter(e >= 0.0, f"Invalid epsilon value: {e}")
        defaults = dict(
            lr=lr,
            schedule=schedule,
            warmup=warmup,
            t_total=t_total,
            b1=b1,
            b2=b2,
            e=e,
            weight_decay=weight_decay,
            max_grad_norm=max_grad_norm,
        )
        self.max_grad_norm = max_grad_norm
        super().__init__(params, defaults)

    def _state_names(self, group: ParamGroup) -> list[str]:
        return ["exp_avg", "exp_avg_sq"]

    def _update(self, group: ParamGroup, slabs: list[Slab]) -> None:
        beta1, beta2 = group["b1"], group["b2"]
        max_grad_norm = group.get("max_grad_norm", self.max_grad_norm)
        if max_grad_norm > 0:
            clip_coefficient = max_grad_norm / (float(group_grad_norm(slabs)) + 1e-6)
            if clip_coefficient < 1.0:
                for slab in slabs:
                    slab.grad.mul_(clip_coefficient)
        for original in slabs:
            with float_math(original) as slab:
                assert slab.step is not None
                steps_taken = float(slab.step.item())
                grad, param = slab.grad, slab.param
                exp_avg, exp_avg_sq = slab.state["exp_avg"], slab.state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                update = exp_avg / exp_avg_sq.sqrt().add_(group["e"])
                if group["weight_decay"] > 0.0:
                    update.add_(param, alpha=group["weight_decay"])
                param.add_(update, alpha=-self._scheduled_lr(group, steps_taken))
                slab.step.add_(1)

    @staticmethod
    def _scheduled_lr(group: ParamGroup, steps_taken: float) -> float:
        if group["t_total"] == -1:
            return float(group["lr"])
        schedule = SCHEDULES[group["schedule"]]
        return float(group["lr"]) * schedule(steps_taken / group["t_total"], group["warmup"])
