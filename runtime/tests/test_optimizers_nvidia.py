"""NVIDIA's Fused* optimizers (plain torch here) against torch.optim or NVIDIA's formulas."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from apex.optimizers import FusedAdagrad, FusedAdam, FusedLAMB, FusedNovoGrad, FusedSGD


class ReferenceNvLamb(torch.optim.Optimizer):
    """NVIDIA's LAMB formula, tensor by tensor, with a global-norm pre-division."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-6,
        weight_decay=0.01,
        adam_w_mode=True,
        max_grad_norm=1.0,
        grad_averaging=True,
        use_nvlamb=False,
    ):
        super().__init__(
            params,
            dict(
                lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm
            ),
        )
        self.adam_w_mode, self.grad_averaging, self.use_nvlamb = (
            adam_w_mode,
            grad_averaging,
            use_nvlamb,
        )
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.sqrt(sum((g * g).sum() for g in grads)))
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            beta3 = 1 - beta1 if self.grad_averaging else 1.0
            clip = norm / group["max_grad_norm"] if norm > group["max_grad_norm"] else 1.0
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / clip
                wd = group["weight_decay"]
                if not self.adam_w_mode:
                    grad = grad + wd * p
                state = self.state.setdefault(p, {})
                m = state.setdefault("m", torch.zeros_like(p))
                v = state.setdefault("v", torch.zeros_like(p))
                m.mul_(beta1).add_(beta3 * grad)
                v.mul_(beta2).add_((1 - beta2) * grad * grad)
                m_hat = m / (1 - beta1**self.steps)
                v_hat = v / (1 - beta2**self.steps)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if self.adam_w_mode:
                    update = update + wd * p
                ratio = 1.0
                if (wd != 0 or self.use_nvlamb) and p.norm() != 0 and update.norm() != 0:
                    ratio = float(p.norm() / update.norm())
                p.sub_(group["lr"] * ratio * update)


class ReferenceNovoGrad(torch.optim.Optimizer):
    """NovoGrad with per-tensor L2 second moments, tensor by tensor."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        reg_inside_moment=False,
    ):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.reg_inside_moment = reg_inside_moment
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                grad_norm = float(p.grad.norm())
                if "v" not in state:
                    state["v"] = grad_norm
                else:
                    state["v"] = math.sqrt(beta2 * state["v"] ** 2 + (1 - beta2) * grad_norm**2)
                denom = state["v"] / math.sqrt(1 - beta2**self.steps) + group["eps"]
                m = state.setdefault("m", torch.zeros_like(p))
                wd = group["weight_decay"]
                if self.reg_inside_moment:
                    m.mul_(beta1).add_((1 - beta1) * (p.grad / denom + wd * p))
                    p.sub_(group["lr"] * m / (1 - beta1**self.steps))
                else:
                    m.mul_(beta1).add_((1 - beta1) * p.grad)
                    p.sub_(group["lr"] * (m / (1 - beta1**self.steps) / denom + wd * p))


class ReferenceSgdWdAfterMomentum(torch.optim.Optimizer):
    def __init__(self, params, lr, momentum, weight_decay):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                if "buf" not in state:
                    state["buf"] = p.grad.clone()
                else:
                    state["buf"].mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * (state["buf"] + group["weight_decay"] * p))


class ReferenceAdam(torch.optim.Optimizer):
    """Adam without bias correction, decoupled or L2 decay."""

    def __init__(self, params, lr, weight_decay, decoupled, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.decoupled = decoupled

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if self.decoupled else p.grad + group["weight_decay"] * p
                state = self.state.setdefault(p, {})
                m = state.setdefault("m", torch.zeros_like(p))
                v = state.setdefault("v", torch.zeros_like(p))
                m.mul_(beta1).add_((1 - beta1) * grad)
                v.mul_(beta2).add_((1 - beta2) * grad * grad)
                update = m / (v.sqrt() + group["eps"])
                if self.decoupled:
                    update = update + group["weight_decay"] * p
                p.sub_(group["lr"] * update)


CASES: list[tuple[str, Any, Any, list[dict[str, Any]]]] = [
    (
        "sgd-nesterov",
        lambda g: FusedSGD(g, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda g: torch.optim.SGD(g, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        [{}, {"lr": 0.01}],
    ),
    (
        "sgd-wd-after-momentum",
        lambda g: FusedSGD(g, lr=0.05, momentum=0.9, weight_decay=0.01, wd_after_momentum=True),
        lambda g: ReferenceSgdWdAfterMomentum(g, lr=0.05, momentum=0.9, weight_decay=0.01),
        [{}],
    ),
    (
        "adam-w-mode-is-adamw",
        lambda g: FusedAdam(g, lr=1e-2, weight_decay=0.01),
        lambda g: torch.optim.AdamW(g, lr=1e-2, weight_decay=0.01),
        [{}, {"lr": 1e-3, "weight_decay": 0.1}],
    ),
    (
        "adam-l2-mode-is-adam",
        lambda g: FusedAdam(g, lr=1e-2, weight_decay=0.01, adam_w_mode=False),
        lambda g: torch.optim.Adam(g, lr=1e-2, weight_decay=0.01),
        [{}],
    ),
    (
        "adam-without-bias-correction",
        lambda g: FusedAdam(g, lr=1e-2, weight_decay=0.01, bias_correction=False),
        lambda g: ReferenceAdam(g, lr=1e-2, weight_decay=0.01, decoupled=True),
        [{}],
    ),
    (
        "adagrad",
        lambda g: FusedAdagrad(g, lr=0.05, weight_decay=0.01),
        lambda g: torch.optim.Adagrad(g, lr=0.05, weight_decay=0.01, eps=1e-10),
        [{}, {"lr": 0.01}],
    ),
    (
        "lamb",
        lambda g: FusedLAMB(g, lr=1e-2),
        lambda g: ReferenceNvLamb(g, lr=1e-2),
        [{}, {"weight_decay": 0.0}],
    ),
    (
        "lamb-l2-nvlamb",
        lambda g: FusedLAMB(g, lr=1e-2, adam_w_mode=False, use_nvlamb=True, max_grad_norm=0.5),
        lambda g: ReferenceNvLamb(
            g, lr=1e-2, adam_w_mode=False, use_nvlamb=True, max_grad_norm=0.5
        ),
        [{}],
    ),
    (
        "novograd",
        lambda g: FusedNovoGrad(g, lr=1e-2, weight_decay=0.01),
        lambda g: ReferenceNovoGrad(g, lr=1e-2, weight_decay=0.01),
        [{}],
    ),
    (
        "novograd-reg-inside-moment",
        lambda g: FusedNovoGrad(g, lr=1e-2, weight_decay=0.01, reg_inside_moment=True),
        lambda g: ReferenceNovoGrad(g, lr=1e-2, weight_decay=0.01, reg_inside_moment=True),
        [{}],
    ),
]


@pytest.mark.parametrize(
    ("name", "make_ours", "make_reference", "options"), CASES, ids=[c[0] for c in CASES]
)
def test_nvidia_optimizer_matches_reference(
    name, make_ours, make_reference, options, twins, same_params
) -> None:
    ours_workload, ours, reference_workload, _ = twins(make_ours, make_reference, options)
    same_params(ours_workload, reference_workload)
    if not name.startswith("sgd"):
        assert ours.param_groups[0]["step"] == 20


@pytest.mark.parametrize("optimizer_class", [FusedAdam, FusedLAMB, FusedNovoGrad])
def test_amsgrad_is_refused_with_nvidia_message(optimizer_class) -> None:
    with pytest.raises(
        RuntimeError, match=f"^{optimizer_class.__name__} does not support the AMSGrad variant.$"
    ):
        optimizer_class([torch.nn.Parameter(torch.ones(1))], amsgrad=True)


def test_set_grad_none_decides_what_zero_grad_does() -> None:
    param = torch.nn.Parameter(torch.ones(2))
    param.grad = torch.ones(2)
    FusedSGD([param], lr=0.1).zero_grad()
    assert param.grad is not None and torch.count_nonzero(param.grad) == 0
    FusedAdam([param]).zero_grad()
    assert param.grad is None


def test_fused_sgd_requires_lr_like_torch() -> None:
    with pytest.raises(
        ValueError, match="Nesterov momentum requires a momentum and zero dampening"
    ):
        FusedSGD([torch.nn.Parameter(torch.ones(1))], lr=0.1, nesterov=True)
