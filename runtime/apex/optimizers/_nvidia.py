"""NVIDIA apex's fused optimizers as plain-torch implementations with NVIDIA's signatures.

NVIDIA's versions need CUDA extensions (``amp_C``); these run anywhere torch runs, so an
unmigrated GPU-style script also runs on CPU (what the end-to-end comparison needs). They are
ordinary per-tensor optimizers, not flat-buffer ones, and follow NVIDIA's semantics: the step
count is kept per param group (``group['step']``), ``set_grad_none`` decides what
``zero_grad()`` does, and the AMSGrad variants are refused with NVIDIA's error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.optimizer import required  # type: ignore[attr-defined]

from apex.optimizers._fused_base import check_hyperparameter


class _NvidiaOptimizer(torch.optim.Optimizer):
    """Shared step loop: group step counter, then a per-group update of params with grads."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any], set_grad_none: bool):
        super().__init__(params, defaults)
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if any(p.grad.is_sparse for p in params):
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients.")
            group["step"] = group.get("step", 0) + 1
            self._update_group(group, params)
        return loss

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def _state(self, p: torch.Tensor, name: str, fill: float = 0.0) -> torch.Tensor:
        state = self.state[p]
        if name not in state:
            state[name] = torch.full_like(p, fill, memory_format=torch.preserve_format)
        return state[name]


def _grad_of(p: torch.Tensor) -> torch.Tensor:
    """The gradient of a parameter the step loop selected for having one."""
    assert p.grad is not None
    return p.grad


def _corrections(group: dict[str, Any], beta1: float, beta2: float) -> tuple[float, float]:
    if not group.get("bias_correction", True):
        return 1.0, 1.0
    step = group["step"]
    return 1.0 - beta1**step, 1.0 - beta2**step


class FusedSGD(_NvidiaOptimizer):
    """NVIDIA's FusedSGD: torch's SGD plus ``wd_after_momentum`` (weight decay added to the
    direction after the momentum update instead of to the gradient before it).
    ``materialize_master_grads`` only matters for NVIDIA's amp and is accepted and ignored.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = required,  # type: ignore[assignment]
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        wd_after_momentum: bool = False,
        materialize_master_grads: bool = True,
        set_grad_none: bool = False,
    ) -> None:
        check_hyperparameter(lr is required or lr >= 0.0, f"Invalid learning rate: {lr}")
        check_hyperparameter(momentum >= 0.0, f"Invalid momentum value: {momentum}")
        check_hyperparameter(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        check_hyperparameter(
            not nesterov or (momentum > 0 and dampening == 0),
            "Nesterov momentum requires a momentum and zero dampening",
        )
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
        )
        super().__init__(params, defaults, set_grad_none)
        self.wd_after_momentum = wd_after_momentum
        self.materialize_master_grads = materialize_master_grads

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        weight_decay, momentum = group["weight_decay"], group["momentum"]
        for p in params:
            direction = _grad_of(p)
            if weight_decay != 0 and not self.wd_after_momentum:
                direction = direction.add(p, alpha=weight_decay)
            if momentum != 0:
                state = self.state[p]
                buffer = state.get("momentum_buffer")
                if buffer is None:
                    buffer = state["momentum_buffer"] = direction.detach().clone()
                else:
                    buffer.mul_(momentum).add_(direction, alpha=1 - group["dampening"])
                nesterov = group["nesterov"]
                direction = direction.add(buffer, alpha=momentum) if nesterov else buffer
            if weight_decay != 0 and self.wd_after_momentum:
                direction = direction.add(p, alpha=weight_decay)
            p.add_(direction, alpha=-group["lr"])


class FusedAdam(_NvidiaOptimizer):
    """NVIDIA's FusedAdam: AdamW by default (``adam_w_mode=True``), L2 Adam otherwise, with
    optional bias correction. ``weight_decay`` defaults to 0 (torch's AdamW: 1e-2).
    ``capturable`` and ``master_weights`` (CUDA-graph and fp16-master features) are accepted
    and ignored.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        capturable: bool = False,
        master_weights: bool = False,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        defaults = dict(
            lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay
        )
        super().__init__(params, defaults, set_grad_none)
        self.adam_w_mode = adam_w_mode

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        correction1, correction2 = _corrections(group, beta1, beta2)
        weight_decay = group["weight_decay"]
        for p in params:
            grad = _grad_of(p)
            if weight_decay != 0 and not self.adam_w_mode:
                grad = grad.add(p, alpha=weight_decay)
            exp_avg, exp_avg_sq = self._state(p, "exp_avg"), self._state(p, "exp_avg_sq")
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq / correction2).sqrt_().add_(group["eps"])
            update = (exp_avg / correction1).div_(denom)
            if weight_decay != 0 and self.adam_w_mode:
                update.add_(p, alpha=weight_decay)
            p.add_(update, alpha=-group["lr"])


class FusedLAMB(_NvidiaOptimizer):
    """NVIDIA's FusedLAMB (the NVLAMB variant).

    Gradients are divided by ``global_norm / max_grad_norm`` when the global L2 norm of all
    gradients exceeds ``max_grad_norm``; moments use ``beta3 = 1 - beta1`` with
    ``grad_averaging`` (else 1); ``update = m_hat / (sqrt(v_hat) + eps)`` plus
    ``weight_decay * p`` (``adam_w_mode``; else the decay is added to the gradient); the
    per-tensor trust ratio ``||p|| / ||update||`` applies when ``weight_decay != 0`` or
    ``use_nvlamb`` and both norms are non-zero.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        adam_w_mode: bool = True,
        grad_averaging: bool = True,
        set_grad_none: bool = True,
        max_grad_norm: float = 1.0,
        use_nvlamb: bool = False,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(
            lr=lr,
            bias_correction=bias_correction,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            grad_averaging=grad_averaging,
            max_grad_norm=max_grad_norm,
        )
        super().__init__(params, defaults, set_grad_none)
        self.adam_w_mode = adam_w_mode
        self.use_nvlamb = use_nvlamb

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        self._global_norm = (
            torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads]))
            if grads
            else torch.tensor(0.0)
        )
        return super().step(closure)

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
        correction1, correction2 = _corrections(group, beta1, beta2)
        weight_decay, max_norm = group["weight_decay"], group["max_grad_norm"]
        global_norm = float(self._global_norm)
        clip = global_norm / max_norm if max_norm > 0 and global_norm > max_norm else 1.0
        for p in params:
            grad = _grad_of(p) / clip
            if weight_decay != 0 and not self.adam_w_mode:
                grad = grad.add(p, alpha=weight_decay)
            exp_avg, exp_avg_sq = self._state(p, "exp_avg"), self._state(p, "exp_avg_sq")
            exp_avg.mul_(beta1).add_(grad, alpha=beta3)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq / correction2).sqrt_().add_(group["eps"])
            update = (exp_avg / correction1).div_(denom)
            if weight_decay != 0 and self.adam_w_mode:
                update.add_(p, alpha=weight_decay)
            ratio = 1.0
            if self.use_nvlamb or weight_decay != 0:
                param_norm, update_norm = float(p.norm()), float(update.norm())
                if param_norm != 0 and update_norm != 0:
                    ratio = param_norm / update_norm
            p.add_(update, alpha=-group["lr"] * ratio)


class FusedNovoGrad(_NvidiaOptimizer):
    """NVIDIA's FusedNovoGrad: Adam-like with a per-tensor second moment.

    Per tensor ``v = sqrt(beta2 * v**2 + (1 - beta2) * ||g||**2)`` (the first step starts from
    ``||g||`` unless ``init_zero``; ``norm_type=0`` uses the max-norm and a max blend);
    ``denom = v / sqrt(bc2) + eps``. With ``reg_inside_moment`` the decay enters the moment:
    ``m = beta1 * m + beta3 * (g / denom + wd * p)``, ``p -= lr * m / bc1``; otherwise
    ``m = beta1 * m + beta3 * g``, ``p -= lr * (m / bc1 / denom + wd * p)``. The per-tensor
    norms live in ``state[p]['exp_avg_sq']`` (a 0-d tensor) rather than a group list.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        reg_inside_moment: bool = False,
        grad_averaging: bool = True,
        norm_type: int = 2,
        init_zero: bool = False,
        set_grad_none: bool = True,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedNovoGrad does not support the AMSGrad variant.")
        if norm_type not in (0, 2):
            raise RuntimeError("FusedNovoGrad only support l2/inf norm now.")
        defaults = dict(
            lr=lr,
            bias_correction=bias_correction,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            grad_averaging=grad_averaging,
            norm_type=norm_type,
            init_zero=init_zero,
        )
        super().__init__(params, defaults, set_grad_none)
        self.moment_mode = 0 if reg_inside_moment else 1

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
        correction1, correction2 = _corrections(group, beta1, beta2)
        weight_decay = group["weight_decay"]
        for p in params:
            grad = _grad_of(p)
            norm = self._blend_norm(p, group, beta2)
            denom = norm / math.sqrt(correction2) + group["eps"]
            exp_avg = self._state(p, "exp_avg")
            if self.moment_mode == 0:
                exp_avg.mul_(beta1).add_(grad / denom + weight_decay * p, alpha=beta3)
                p.add_(exp_avg, alpha=-group["lr"] / correction1)
            else:
                exp_avg.mul_(beta1).add_(grad, alpha=beta3)
                update = exp_avg / (correction1 * denom)
                if weight_decay != 0:
                    update.add_(p, alpha=weight_decay)
                p.add_(update, alpha=-group["lr"])

    def _blend_norm(self, p: torch.Tensor, group: dict[str, Any], beta2: float) -> torch.Tensor:
        grad = _grad_of(p).float()
        max_norm = group["norm_type"] == 0
        current = grad.abs().max() if max_norm else grad.norm()
        state = self.state[p]
        if "exp_avg_sq" not in state:
            initial = torch.zeros((), device=p.device) if group["init_zero"] else current
            state["exp_avg_sq"] = initial.clone()
            if not group["init_zero"]:
                return state["exp_avg_sq"]
        previous = state["exp_avg_sq"]
        if max_norm:
            previous.copy_(torch.maximum(beta2 * previous, (1 - beta2) * current))
        else:
            previous.copy_((beta2 * previous**2 + (1 - beta2) * current**2).sqrt())
        return previous


class FusedAdagrad(_NvidiaOptimizer):
    """NVIDIA's FusedAdagrad: ``h += g*g``, ``p -= lr * g / (sqrt(h) + eps)``; weight decay
    on the gradient, or decoupled (``+ wd * p`` on the update) with ``adagrad_w_mode``.
    The accumulator is ``state[p]['sum']``, as in torch.optim.Adagrad.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        set_grad_none: bool = True,
        adagrad_w_mode: bool = False,
    ) -> None:
        defaults = dict(lr=lr, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults, set_grad_none)
        self.adagrad_w_mode = adagrad_w_mode

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        weight_decay = group["weight_decay"]
        for p in params:
            grad = _grad_of(p)
            if weight_decay != 0 and not self.adagrad_w_mode:
                grad = grad.add(p, alpha=weight_decay)
            accumulator = self._state(p, "sum")
            accumulator.addcmul_(grad, grad, value=1)
            update = grad / accumulator.sqrt().add_(group["eps"])
            if weight_decay != 0 and self.adagrad_w_mode:
                update.add_(p, alpha=weight_decay)
            p.add_(update, alpha=-group["lr"])
