"""NVIDIA's Fused* optimizers (plain torch here) against torch.optim or NVIDIA's formulas."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from reference_optimizers import (
    ReferenceAdam,
    ReferenceNovoGrad,
    ReferenceNvLamb,
    ReferenceSgdWdAfterMomentum,
)

from apex.optimizers import FusedAdagrad, FusedAdam, FusedLAMB, FusedNovoGrad, FusedSGD

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
    if name.startswith(("sgd", "adagrad")):
        assert "step" not in ours.param_groups[0]  # NVIDIA's FusedSGD and FusedAdagrad count none
    else:
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
