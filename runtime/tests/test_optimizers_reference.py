"""Every NpuFused optimizer against torch.optim, or against its published formula written out
tensor by tensor, over 20 steps, several groups, mixed shapes, frozen and unused parameters."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from apex.optimizers import standalone

# ---- per-tensor references for the optimizers torch does not have ----------------------


class ReferenceLamb(torch.optim.Optimizer):
    """Ascend / pytorch-lamb LAMB, tensor by tensor."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0, adam=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.adam = adam

    @torch.no_grad()
    def step(self, divide_grads_by: float = 1.0) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / divide_grads_by
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                adam_step = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["eps"])
                adam_step = adam_step + group["weight_decay"] * p
                weight_norm = p.norm().clamp(0, 10)
                adam_norm = adam_step.norm()
                trust = 1.0
                if not self.adam and weight_norm != 0 and adam_norm != 0:
                    trust = float(weight_norm / adam_norm)
                p.sub_(group["lr"] * trust * adam_step)


class ReferenceGlobalNormLamb(ReferenceLamb):
    """NpuFusedLamb(use_global_grad_norm=True): grads divided by the global norm when > 1."""

    @torch.no_grad()
    def step(self, divide_grads_by: float = 1.0) -> None:
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.sqrt(sum((g * g).sum() for g in grads)))
        super().step(divide_grads_by=norm if norm > 1 else 1.0)


class ReferenceRMSpropTF(torch.optim.Optimizer):
    """timm's RMSpropTF (square_avg starts at ones), with Ascend's decoupled decay."""

    def __init__(
        self,
        params,
        lr=1e-2,
        alpha=0.9,
        eps=1e-10,
        weight_decay=0,
        momentum=0.0,
        centered=False,
        decoupled_decay=False,
        lr_in_momentum=True,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                decoupled_decay=decoupled_decay,
                lr_in_momentum=lr_in_momentum,
            ),
        )

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.ones_like(p)
                    state["momentum_buffer"] = torch.zeros_like(p)
                    state["grad_avg"] = torch.zeros_like(p)
                grad = p.grad
                if group["weight_decay"]:
                    if group["decoupled_decay"]:
                        p.mul_(1 - group["weight_decay"])
                    else:
                        grad = grad + group["weight_decay"] * p
                square_avg = state["square_avg"]
                square_avg.add_((1 - group["alpha"]) * (grad * grad - square_avg))
                if group["centered"]:
                    grad_avg = state["grad_avg"]
                    grad_avg.add_((1 - group["alpha"]) * (grad - grad_avg))
                    avg = torch.sqrt(square_avg - grad_avg * grad_avg + group["eps"])
                else:
                    avg = torch.sqrt(square_avg + group["eps"])
                if group["momentum"] > 0:
                    buf = state["momentum_buffer"]
                    if group["lr_in_momentum"]:
                        buf.mul_(group["momentum"]).add_(group["lr"] * grad / avg)
                        p.sub_(buf)
                    else:
                        buf.mul_(group["momentum"]).add_(grad / avg)
                        p.sub_(group["lr"] * buf)
                else:
                    p.sub_(group["lr"] * grad / avg)


class ReferenceAdamP(torch.optim.Optimizer):
    """AdamP (clovaai), tensor by tensor."""

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        delta=0.1,
        wd_ratio=0.1,
        nesterov=False,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                delta=delta,
                wd_ratio=wd_ratio,
                nesterov=nesterov,
            ),
        )

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad, state = p.grad, self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                bc1 = 1 - beta1 ** state["step"]
                bc2 = 1 - beta2 ** state["step"]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_((1 - beta1) * grad)
                exp_avg_sq.mul_(beta2).add_((1 - beta2) * grad * grad)
                denom = exp_avg_sq.sqrt() / math.sqrt(bc2) + group["eps"]
                if group["nesterov"]:
                    perturb = (beta1 * exp_avg + (1 - beta1) * grad) / denom
                else:
                    perturb = exp_avg / denom
                wd_ratio = 1.0
                if p.dim() > 1 and p.numel() > 0:
                    perturb, wd_ratio = self._projection(p, grad, perturb, group)
                if group["weight_decay"] > 0:
                    p.mul_(1 - group["lr"] * group["weight_decay"] * wd_ratio)
                p.sub_(group["lr"] / bc1 * perturb)

    @staticmethod
    def _projection(p, grad, perturb, group):
        eps = group["eps"]
        expand = [-1] + [1] * (p.dim() - 1)
        for view in (lambda x: x.reshape(x.size(0), -1), lambda x: x.reshape(1, -1)):
            x, y = view(grad), view(p)
            cosine = (x * y).sum(1).abs() / (x.norm(dim=1) + eps) / (y.norm(dim=1) + eps)
            if cosine.max() < group["delta"] / math.sqrt(view(p).size(1)):
                unit = p / (view(p).norm(dim=1).view(expand) + eps)
                perturb = perturb - unit * view(unit * perturb).sum(1).view(expand)
                return perturb, group["wd_ratio"]
        return perturb, 1.0


def _schedule(name: str, x: float, warmup: float) -> float:
    if x < warmup:
        return x / warmup
    return {
        "warmup_cosine": lambda: 0.5 * (1 + math.cos(math.pi * x)),
        "warmup_constant": lambda: 1.0,
        "warmup_linear": lambda: max((x - 1) / (warmup - 1), 0.0),
        "warmup_poly": lambda: (1 - x) ** 0.5,
    }[name]()


class ReferenceBertAdam(torch.optim.Optimizer):
    """pytorch-pretrained-bert's BertAdam with per-group clipping, tensor by tensor."""

    def __init__(
        self,
        params,
        lr=1e-3,
        warmup=-1,
        t_total=-1,
        schedule="warmup_linear",
        b1=0.9,
        b2=0.999,
        e=1e-6,
        weight_decay=0.01,
        max_grad_norm=1.0,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                warmup=warmup,
                t_total=t_total,
                schedule=schedule,
                b1=b1,
                b2=b2,
                e=e,
                weight_decay=weight_decay,
                max_grad_norm=max_grad_norm,
            ),
        )

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if group["max_grad_norm"] > 0 and params:
                norm = float(torch.sqrt(sum((p.grad * p.grad).sum() for p in params)))
                coefficient = group["max_grad_norm"] / (norm + 1e-6)
                if coefficient < 1:
                    for p in params:
                        p.grad.mul_(coefficient)
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["exp_avg"].mul_(group["b1"]).add_((1 - group["b1"]) * p.grad)
                state["exp_avg_sq"].mul_(group["b2"]).add_((1 - group["b2"]) * p.grad * p.grad)
                update = state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["e"])
                if group["weight_decay"] > 0:
                    update = update + group["weight_decay"] * p
                lr = group["lr"]
                if group["t_total"] != -1:
                    x = state["step"] / group["t_total"]
                    lr = lr * _schedule(group["schedule"], x, group["warmup"])
                p.sub_(lr * update)
                state["step"] += 1


# ---- fixed scenarios ----------------------------------------------------------------------

TORCH_CASES: list[tuple[type, type, list[dict[str, Any]]]] = [
    (standalone.NpuFusedSGD, torch.optim.SGD, [{"lr": 0.1}, {"lr": 0.05, "weight_decay": 0.01}]),
    (
        standalone.NpuFusedSGD,
        torch.optim.SGD,
        [
            {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
            {"lr": 0.02, "momentum": 0.5, "dampening": 0.3},
        ],
    ),
    (
        standalone.NpuFusedAdam,
        torch.optim.Adam,
        [{"lr": 1e-2}, {"lr": 3e-3, "betas": (0.8, 0.99), "weight_decay": 0.1, "eps": 1e-6}],
    ),
    (standalone.NpuFusedAdam, torch.optim.Adam, [{"lr": 1e-2, "amsgrad": True}, {"lr": 1e-3}]),
    (
        standalone.NpuFusedAdamW,
        torch.optim.AdamW,
        [{"lr": 1e-2}, {"lr": 5e-3, "weight_decay": 0.0}, {"lr": 1e-3, "amsgrad": True}],
    ),
    (
        standalone.NpuFusedAdadelta,
        torch.optim.Adadelta,
        [{"lr": 1.0}, {"lr": 0.5, "rho": 0.8, "weight_decay": 0.01, "eps": 1e-5}],
    ),
    (
        standalone.NpuFusedRMSprop,
        torch.optim.RMSprop,
        [
            {"lr": 1e-2},
            {"lr": 5e-3, "momentum": 0.9, "centered": True, "weight_decay": 0.01},
            {"lr": 1e-3, "alpha": 0.9, "momentum": 0.5},
        ],
    ),
]


def _case_id(case: tuple[type, type, list[dict[str, Any]]]) -> str:
    return f"{case[0].__name__}-{len(case[2])}groups-{'-'.join(sorted(case[2][-1]))}"


@pytest.mark.parametrize("case", TORCH_CASES, ids=_case_id)
def test_matches_torch_optim(case, twins, same_params) -> None:
    ours_class, torch_class, options = case
    ours_workload, ours, reference_workload, _ = twins(ours_class, torch_class, options)
    same_params(ours_workload, reference_workload)
    assert ours.is_packed
    assert ours_workload.unused.grad is None
    assert torch.equal(ours_workload.frozen, reference_workload.frozen)


FORMULA_CASES: list[tuple[type, type, list[dict[str, Any]]]] = [
    (
        standalone.NpuFusedLamb,
        ReferenceLamb,
        [{"lr": 1e-2}, {"lr": 5e-3, "weight_decay": 0.01, "betas": (0.8, 0.9)}],
    ),
    (standalone.Lamb, ReferenceLamb, [{"lr": 1e-2, "eps": 1e-4}, {"lr": 1e-3}]),
    (
        standalone.NpuFusedRMSpropTF,
        ReferenceRMSpropTF,
        [
            {"lr": 1e-3},
            {"lr": 1e-3, "momentum": 0.9, "centered": True, "weight_decay": 0.01},
            {
                "lr": 1e-3,
                "momentum": 0.5,
                "lr_in_momentum": False,
                "weight_decay": 0.01,
                "decoupled_decay": True,
            },
        ],
    ),
    (
        standalone.NpuFusedAdamP,
        ReferenceAdamP,
        [
            {"lr": 1e-2, "weight_decay": 0.1},
            {"lr": 1e-2, "nesterov": True, "delta": 1.0, "weight_decay": 0.01},
        ],
    ),
    (
        standalone.NpuFusedBertAdam,
        ReferenceBertAdam,
        [
            {"lr": 1e-2},
            {"lr": 1e-2, "t_total": 25, "warmup": 0.2, "schedule": "warmup_cosine"},
            {
                "lr": 1e-2,
                "t_total": 25,
                "warmup": 0.1,
                "schedule": "warmup_poly",
                "max_grad_norm": -1,
                "weight_decay": 0.0,
            },
        ],
    ),
]


@pytest.mark.parametrize("case", FORMULA_CASES, ids=_case_id)
def test_matches_published_formula(case, twins, same_params) -> None:
    ours_class, reference_class, options = case
    ours_workload, ours, reference_workload, _ = twins(ours_class, reference_class, options)
    same_params(ours_workload, reference_workload)
    assert ours.is_packed


def test_lamb_adam_mode_and_global_grad_norm(twins, same_params) -> None:
    adam_mode = twins(
        lambda g: standalone.NpuFusedLamb(g, adam=True),
        lambda g: ReferenceLamb(g, lr=1e-3, adam=True),
        [{"lr": 1e-3}],
    )
    same_params(adam_mode[0], adam_mode[2])
    global_norm = twins(
        lambda g: standalone.NpuFusedLamb(g, use_global_grad_norm=True),
        lambda g: ReferenceGlobalNormLamb(g, lr=1e-3),
        [{"lr": 1e-3}, {"lr": 2e-3, "weight_decay": 0.1}],
    )
    same_params(global_norm[0], global_norm[2])


@pytest.mark.parametrize("schedule", ["warmup_linear", "warmup_constant", "warmup_cosine"])
def test_bert_adam_schedules_match_formula(schedule, twins, same_params) -> None:
    options = [{"lr": 1e-2, "t_total": 30, "warmup": 0.1, "schedule": schedule}]
    ours_workload, _, reference_workload, _ = twins(
        standalone.NpuFusedBertAdam, ReferenceBertAdam, options, steps=24
    )
    same_params(ours_workload, reference_workload)


# ---- property-based: random hyper-parameters ----------------------------------------------

unit = st.floats(min_value=0.0, max_value=0.95)
learning_rate = st.floats(min_value=1e-4, max_value=0.1)
decay = st.sampled_from([0.0, 1e-4, 1e-2, 0.1])


@st.composite
def sgd_options(draw: st.DrawFn) -> dict[str, Any]:
    momentum = draw(st.sampled_from([0.0, draw(unit)]))
    nesterov = momentum > 0 and draw(st.booleans())
    dampening = 0.0 if nesterov else draw(unit)
    return dict(
        lr=draw(learning_rate),
        momentum=momentum,
        dampening=dampening,
        nesterov=nesterov,
        weight_decay=draw(decay),
    )


@st.composite
def adam_options(draw: st.DrawFn) -> dict[str, Any]:
    return dict(
        lr=draw(learning_rate),
        betas=(draw(unit), draw(st.floats(min_value=0.5, max_value=0.9999))),
        eps=draw(st.sampled_from([1e-8, 1e-6, 1e-3])),
        weight_decay=draw(decay),
        amsgrad=draw(st.booleans()),
    )


@st.composite
def rmsprop_options(draw: st.DrawFn) -> dict[str, Any]:
    return dict(
        lr=draw(st.floats(min_value=1e-4, max_value=1e-2)),
        alpha=draw(st.floats(min_value=0.5, max_value=0.999)),
        eps=draw(st.sampled_from([1e-8, 1e-6])),
        weight_decay=draw(decay),
        momentum=draw(st.sampled_from([0.0, 0.5, 0.9])),
        centered=draw(st.booleans()),
    )


@st.composite
def adadelta_options(draw: st.DrawFn) -> dict[str, Any]:
    return dict(
        lr=draw(st.floats(min_value=0.1, max_value=1.0)),
        rho=draw(st.floats(min_value=0.5, max_value=0.99)),
        eps=draw(st.sampled_from([1e-6, 1e-4])),
        weight_decay=draw(decay),
    )


PROPERTY_CASES = {
    "sgd": (standalone.NpuFusedSGD, torch.optim.SGD, sgd_options()),
    "adam": (standalone.NpuFusedAdam, torch.optim.Adam, adam_options()),
    "adamw": (standalone.NpuFusedAdamW, torch.optim.AdamW, adam_options()),
    "rmsprop": (standalone.NpuFusedRMSprop, torch.optim.RMSprop, rmsprop_options()),
    "adadelta": (standalone.NpuFusedAdadelta, torch.optim.Adadelta, adadelta_options()),
}


@pytest.mark.parametrize("name", sorted(PROPERTY_CASES))
def test_random_hyperparameters_match_torch(name, twins, same_params) -> None:
    ours_class, torch_class, options = PROPERTY_CASES[name]

    @settings(max_examples=12, deadline=None, derandomize=True)
    @given(first=options, second=options)
    def check(first: dict[str, Any], second: dict[str, Any]) -> None:
        ours_workload, _, reference_workload, _ = twins(
            ours_class, torch_class, [first, second], steps=6
        )
        same_params(ours_workload, reference_workload)

    check()


def test_random_lamb_hyperparameters_match_formula(twins, same_params) -> None:
    @settings(max_examples=12, deadline=None, derandomize=True)
    @given(
        lr=learning_rate,
        betas=st.tuples(unit, st.floats(min_value=0.5, max_value=0.999)),
        weight_decay=decay,
        adam=st.booleans(),
    )
    def check(lr: float, betas: tuple[float, float], weight_decay: float, adam: bool) -> None:
        ours_workload, _, reference_workload, _ = twins(
            lambda g: standalone.NpuFusedLamb(g, adam=adam),
            lambda g: ReferenceLamb(g, lr=lr, adam=adam),
            [{"lr": lr, "betas": betas, "weight_decay": weight_decay}],
            steps=6,
        )
        same_params(ours_workload, reference_workload)

    check()


@pytest.mark.parametrize("case", TORCH_CASES, ids=_case_id)
def test_whole_buffer_path_without_fused_kernels_matches_torch(
    case, twins, same_params, monkeypatch
) -> None:
    # Devices without torch's fused kernels (an Ascend NPU) take the plain whole-buffer path;
    # selecting it here runs the same code on CPU.
    from apex.optimizers import _torch_family

    monkeypatch.setattr(_torch_family, "fused_kernels_available", lambda device: False)
    ours_class, torch_class, options = case
    ours_workload, _, reference_workload, _ = twins(ours_class, torch_class, options, steps=10)
    same_params(ours_workload, reference_workload)


@st.composite
def rmsprop_tf_options(draw: st.DrawFn) -> dict[str, Any]:
    return dict(
        lr=draw(st.floats(min_value=1e-4, max_value=1e-2)),
        alpha=draw(st.floats(min_value=0.5, max_value=0.99)),
        eps=draw(st.sampled_from([1e-10, 1e-8, 1e-3])),
        weight_decay=draw(decay),
        momentum=draw(st.sampled_from([0.0, 0.5, 0.9])),
        centered=draw(st.booleans()),
        decoupled_decay=draw(st.booleans()),
        lr_in_momentum=draw(st.booleans()),
    )


@st.composite
def adamp_options(draw: st.DrawFn) -> dict[str, Any]:
    return dict(
        lr=draw(learning_rate),
        betas=(draw(unit), draw(st.floats(min_value=0.5, max_value=0.999))),
        weight_decay=draw(decay),
        delta=draw(st.sampled_from([0.01, 0.1, 1.0])),
        wd_ratio=draw(st.sampled_from([0.1, 0.5])),
        nesterov=draw(st.booleans()),
    )


@st.composite
def bert_adam_options(draw: st.DrawFn) -> dict[str, Any]:
    scheduled = draw(st.booleans())
    return dict(
        lr=draw(learning_rate),
        warmup=draw(st.sampled_from([-1, 0.1, 0.5])) if scheduled else -1,
        t_total=draw(st.integers(min_value=6, max_value=20)) if scheduled else -1,
        schedule=draw(
            st.sampled_from(
                sorted(["warmup_linear", "warmup_constant", "warmup_cosine", "warmup_poly"])
            )
        ),
        b1=draw(unit),
        b2=draw(st.floats(min_value=0.5, max_value=0.999)),
        weight_decay=draw(decay),
        max_grad_norm=draw(st.sampled_from([-1.0, 0.5, 1.0, 100.0])),
    )


FORMULA_PROPERTY_CASES = {
    "rmsprop_tf": (standalone.NpuFusedRMSpropTF, ReferenceRMSpropTF, rmsprop_tf_options()),
    "adamp": (standalone.NpuFusedAdamP, ReferenceAdamP, adamp_options()),
    "bert_adam": (standalone.NpuFusedBertAdam, ReferenceBertAdam, bert_adam_options()),
}


@pytest.mark.parametrize("name", sorted(FORMULA_PROPERTY_CASES))
def test_random_hyperparameters_match_formula(name, twins, same_params) -> None:
    ours_class, reference_class, options = FORMULA_PROPERTY_CASES[name]

    @settings(max_examples=10, deadline=None, derandomize=True)
    @given(first=options, second=options)
    def check(first: dict[str, Any], second: dict[str, Any]) -> None:
        ours_workload, _, reference_workload, _ = twins(
            ours_class, reference_class, [first, second], steps=6
        )
        same_params(ours_workload, reference_workload)

    check()
