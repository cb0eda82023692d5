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

from apex.optimizers._fused_base import check_hyperparameter, check_state_dict_layout

_HALF_DTYPES = (torch.float16, torch.bfloat16)


class _NvidiaOptimizer(torch.optim.Optimizer):
    """Shared step loop: group step counter, then a per-group update of params with grads."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any], set_grad_none: bool):
        super().__init__(params, defaults)
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        check_state_dict_layout(self, state_dict)
        super().load_state_dict(state_dict)
        self._restore_fp32_state(state_dict)

    @torch.no_grad()
    def _restore_fp32_state(self, state_dict: dict[str, Any]) -> None:
        """Undo torch's cast of loaded state to the parameter type for fp16/bf16 parameters.

        torch's ``load_state_dict`` casts every floating state tensor to its parameter's dtype;
        these optimizers keep the state of half-precision parameters in fp32, and a round trip
        through bf16 would change the trajectory.
        """
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for saved_id, p in zip(saved_ids, params, strict=True):
            if p.dtype not in _HALF_DTYPES or p not in self.state:
                continue
            for key, value in state_dict["state"].get(saved_id, {}).items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and key != "step":
                    self.state[p][key] = value.to(device=p.device, dtype=torch.float32).clone()

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        selected = [
            [p for p in group["params"] if p.grad is not None] for group in self.param_groups
        ]
        # Checked for every group first, so that a refused step leaves nothing half-updated.
        if any(p.grad.is_sparse for params in selected for p in params):
            raise RuntimeError(f"{type(self).__name__} does not support sparse gradients.")
        for group, params in zip(self.param_groups, selected, strict=True):
            if not params:
                continue
            group["step"] = group.get("step", 0) + 1
            self._update_group(group, params)
        return loss

    def _math_tensors(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The parameter and gradient the update computes on: fp32 copies for fp16/bf16.

        NVIDIA's kernels compute in fp32 whatever the parameter type; in fp16 ``eps=1e-8`` is 0
        and ``exp_avg_sq`` underflows, so a half-precision update divides by zero. Write the
        result back with :func:`_store`.
        """
        grad = _grad_of(p)
        if p.dtype in _HALF_DTYPES:
            return p.detach().float(), grad.float()
        return p, grad

    def _state(self, p: torch.Tensor, name: str, fill: float = 0.0) -> torch.Tensor:
        """Per-parameter state, created on first use; fp32 for fp16/bf16 parameters (NVIDIA's)."""
        state = self.state[p]
        if name not in state:
            dtype = torch.float32 if p.dtype in _HALF_DTYPES else p.dtype
            state[name] = torch.full_like(p, fill, dtype=dtype, memory_format=torch.preserve_format)
        return state[name]

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        raise NotImplementedError


def _store(p: torch.Tensor, updated: torch.Tensor) -> None:
    """Round an fp32 result of :meth:`_NvidiaOptimizer._math_tensors` back into ``p``."""
    if updated is not p:
        p.copy_(updated)


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
            param, direction = self._math_tensors(p)
            if weight_decay != 0 and not self.wd_after_momentum:
                direction = direction.add(param, alpha=weight_decay)
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
                direction = direction.add(param, alpha=weight_decay)
            param.add_(direction, alpha=-group["lr"])
            _store(p, param)


class FusedAdam(_NvidiaOptimizer):
    """NVIDIA's FusedAdam: AdamW by default (``adam_w_mode=True``), L2 Adam otherwise, with
    optional bias correction. ``weight_decay`` defaults to 0 (torch's AdamW: 1e-2). The moments
    of fp16/bf16 parameters are fp32 and the update is computed in fp32, as NVIDIA's kernel does.

    ``capturable=True`` (NVIDIA's CUDA-graph variant; no graphs here) takes the loss scale into
    the step, as NVIDIA's does: driven by ``torch.amp.GradScaler``, ``scaler.step(optimizer)``
    does not unscale the gradients (which fails for fp16 ones) but hands this optimizer the
    scale and the inf check; a step whose gradients hold an inf or NaN changes nothing, not even
    the step count, and the gradients themselves stay scaled. ``master_weights=True`` (only with
    ``capturable``, NVIDIA's rule) keeps an fp32 copy of each fp16/bf16 parameter in
    ``state[p]['master_param']``: the update is applied to it and the parameter is its rounded
    copy, so small updates are not lost to fp16 rounding.
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
        if master_weights and not capturable:
            raise RuntimeError(
                "Master weights is currently only supported with the capturable version."
            )
        defaults = dict(
            lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay
        )
        super().__init__(params, defaults, set_grad_none)
        self.adam_w_mode = adam_w_mode
        self.capturable = capturable
        self.master_weights = master_weights
        # torch.amp.GradScaler then sets ``grad_scale`` and ``found_inf`` on this optimizer
        # around ``step()`` instead of unscaling the gradients itself.
        self._step_supports_amp_scaling = capturable

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        found_inf = getattr(self, "found_inf", None)
        if found_inf is not None and float(found_inf) != 0.0:
            # Skipped as NVIDIA's capturable kernel skips it: params, moments and step stay.
            return closure() if closure is not None else None
        return super().step(closure)

    def _inverse_scale(self) -> float:
        """1 / the loss scale GradScaler handed over (1 without GradScaler, or after unscale_)."""
        scale = getattr(self, "grad_scale", None)
        return 1.0 if scale is None else 1.0 / float(scale)

    def _math_tensors(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        param, grad = super()._math_tensors(p)
        inverse_scale = self._inverse_scale() if self.capturable else 1.0
        if inverse_scale != 1.0:
            grad = grad.float() * inverse_scale  # out of place: the gradients stay scaled
        if self.master_weights and p.dtype in _HALF_DTYPES:
            state = self.state[p]
            if "master_param" not in state:
                state["master_param"] = p.detach().float().clone()
            param = state["master_param"]
        return param, grad

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        correction1, correction2 = _corrections(group, beta1, beta2)
        weight_decay = group["weight_decay"]
        for p in params:
            param, grad = self._math_tensors(p)
            if weight_decay != 0 and not self.adam_w_mode:
                grad = grad.add(param, alpha=weight_decay)
            exp_avg, exp_avg_sq = self._state(p, "exp_avg"), self._state(p, "exp_avg_sq")
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq / correction2).sqrt_().add_(group["eps"])
            update = (exp_avg / correction1).div_(denom)
            if weight_decay != 0 and self.adam_w_mode:
                update.add_(param, alpha=weight_decay)
            param.add_(update, alpha=-group["lr"])
            _store(p, param)


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
            param, grad = self._math_tensors(p)
            grad = grad / clip
            if weight_decay != 0 and not self.adam_w_mode:
                grad = grad.add(param, alpha=weight_decay)
            exp_avg, exp_avg_sq = self._state(p, "exp_avg"), self._state(p, "exp_avg_sq")
            exp_avg.mul_(beta1).add_(grad, alpha=beta3)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq / correction2).sqrt_().add_(group["eps"])
            update = (exp_avg / correction1).div_(denom)
            if weight_decay != 0 and self.adam_w_mode:
                update.add_(param, alpha=weight_decay)
            ratio = 1.0
            if self.use_nvlamb or weight_decay != 0:
                param_norm, update_norm = float(param.norm()), float(update.norm())
                if param_norm != 0 and update_norm != 0:
                    ratio = param_norm / update_norm
            param.add_(update, alpha=-group["lr"] * ratio)
            _store(p, param)


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
            param, grad = self._math_tensors(p)
            norm = self._blend_norm(p, group, beta2)
            denom = norm / math.sqrt(correction2) + group["eps"]
            exp_avg = self._state(p, "exp_avg")
            if self.moment_mode == 0:
                exp_avg.mul_(beta1).add_(grad / denom + weight_decay * param, alpha=beta3)
                param.add_(exp_avg, alpha=-group["lr"] / correction1)
            else:
                exp_avg.mul_(beta1).add_(grad, alpha=beta3)
                update = exp_avg / (correction1 * denom)
                if weight_decay != 0:
                    update.add_(param, alpha=weight_decay)
                param.add_(update, alpha=-group["lr"])
            _store(p, param)

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
            param, grad = self._math_tensors(p)
            if weight_decay != 0 and not self.adagrad_w_mode:
                grad = grad.add(param, alpha=weight_decay)
            accumulator = self._state(p, "sum")
            accumulator.addcmul_(grad, grad, value=1)
            update = grad / accumulator.sqrt().add_(group["eps"])
            if weight_decay != 0 and self.adagrad_w_mode:
                update.add_(param, alpha=weight_decay)
            param.add_(update, alpha=-group["lr"])
            _store(p, param)
