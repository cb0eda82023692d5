"""NVIDIA's state dtypes, step counts and kernel arithmetic, class by class.

The expected values are computed here the way each CUDA kernel of apex 6424da3b computes them
(``csrc/multi_tensor_*``): read in fp32, compute in fp32, round only what is stored. The state
dtypes are those NVIDIA's ``step()`` creates: ``torch.zeros_like(p)`` (the parameter's dtype)
for FusedSGD, FusedAdagrad, FusedLAMB and FusedNovoGrad, ``.float()`` for FusedAdam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from apex.optimizers import FusedAdagrad, FusedAdam, FusedLAMB, FusedNovoGrad, FusedSGD

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# (class, options, the state tensors it keeps per parameter, "param" or a fixed dtype)
STATE_DTYPES: list[tuple[type[torch.optim.Optimizer], dict[str, Any], dict[str, str]]] = [
    (FusedSGD, {"lr": 0.1, "momentum": 0.9}, {"momentum_buffer": "param"}),
    (FusedSGD, {"lr": 0.1}, {"momentum_buffer": "param"}),  # NVIDIA creates it even then
    (FusedAdam, {"lr": 1e-2}, {"exp_avg": "fp32", "exp_avg_sq": "fp32"}),
    (FusedAdam, {"lr": 1e-2, "capturable": True}, {"exp_avg": "fp32", "exp_avg_sq": "fp32"}),
    (
        FusedAdam,
        {"lr": 1e-2, "capturable": True, "master_weights": True},
        {"exp_avg": "fp32", "exp_avg_sq": "fp32"},
    ),
    (FusedAdagrad, {"lr": 1e-2}, {"sum": "param"}),
    (FusedLAMB, {"lr": 1e-2}, {"exp_avg": "param", "exp_avg_sq": "param"}),
    (FusedNovoGrad, {"lr": 1e-2}, {"exp_avg": "param"}),
]


def case_id(case: tuple[type, dict[str, Any], dict[str, str]]) -> str:
    optimizer_class, options, _ = case
    extras = [key for key in ("momentum", "capturable", "master_weights") if key in options]
    return "-".join([optimizer_class.__name__, *extras])


def params_of(dtype: torch.dtype, seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.nn.Parameter(torch.randn(shape, generator=generator).to(dtype))
        for shape in ((4, 3), (5,))
    ]


def give_grads(params: list[torch.nn.Parameter], seed: int) -> None:
    generator = torch.Generator().manual_seed(100 + seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator).to(p.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", STATE_DTYPES, ids=case_id)
def test_state_dtypes_are_nvidias(case, dtype) -> None:
    optimizer_class, options, expected = case
    params = params_of(dtype)
    optimizer = optimizer_class(params, **options)
    for step in range(2):
        give_grads(params, step)
        optimizer.step()
    for p in params:
        assert p.dtype == dtype
        state = optimizer.state[p]
        assert set(state) == set(expected)
        for name, kind in expected.items():
            assert state[name].dtype == (dtype if kind == "param" else torch.float32), name
    # A checkpoint round trip keeps them (torch's load casts state to the parameter's dtype).
    restored = optimizer_class(params, **options)
    restored.load_state_dict(optimizer.state_dict())
    for p in params:
        for name in expected:
            assert restored.state[p][name].dtype == optimizer.state[p][name].dtype
            assert torch.equal(restored.state[p][name], optimizer.state[p][name])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_novograd_keeps_its_norms_in_the_group_as_nvidia_does(dtype) -> None:
    params = [*params_of(dtype), *params_of(torch.float32, seed=1)]
    optimizer = FusedNovoGrad(params, lr=1e-2)
    give_grads(params, 0)
    optimizer.step()
    half_norms, fp32_norms = optimizer.param_groups[0]["exp_avg_sq"]
    assert half_norms.dtype == fp32_norms.dtype == torch.float32
    half_count = 0 if dtype == torch.float32 else 2
    assert (half_norms.numel(), fp32_norms.numel()) == (half_count, 4 - half_count)
    # First step: the norms start at the gradients' own norms (init_zero=False).
    expected = torch.stack([p.grad.float().norm() for p in params])
    torch.testing.assert_close(torch.cat([half_norms, fp32_norms]), expected)


# ---- kernel arithmetic ---------------------------------------------------------------------


def round_to(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return value.to(dtype).float()


def test_fused_sgd_updates_with_the_unrounded_fp32_momentum() -> None:
    """NVIDIA's SGD kernel keeps the momentum in the parameter's dtype but updates the parameter
    with the fp32 value before rounding it; torch.optim.SGD in fp16 rounds first. Both are
    reproduced exactly by their own formula, so the runtime follows NVIDIA's."""
    lr, momentum = 0.25, 0.125
    start = torch.rand(4096, generator=torch.Generator().manual_seed(9876)).half()
    param = torch.nn.Parameter(start.clone())
    twin = torch.nn.Parameter(start.clone())
    optimizer = FusedSGD([param], lr=lr, momentum=momentum)
    reference = torch.optim.SGD([twin], lr=lr, momentum=momentum)
    weight, buffer = start.float(), None
    for step in range(5):
        grad = torch.rand(4096, generator=torch.Generator().manual_seed(step)).half()
        param.grad, twin.grad = grad.clone(), grad.clone()
        optimizer.step()
        reference.step()
        velocity = grad.float() if buffer is None else buffer * momentum + grad.float()
        buffer = round_to(velocity, torch.float16)
        weight = round_to(weight - lr * velocity, torch.float16)
        assert torch.equal(param.detach().float(), weight)
        assert torch.equal(optimizer.state[param]["momentum_buffer"].float(), buffer)
    assert not torch.equal(param.detach(), twin.detach())  # the two arithmetics do differ


def test_fused_sgd_decides_the_first_momentum_step_per_launch_set() -> None:
    """NVIDIA's ``first_run`` is the last parameter's: a parameter whose buffer is created while
    the others of its dtype already have one is treated as if it had a zero buffer."""
    early, late = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = FusedSGD([late, early], lr=0.1, momentum=0.9, dampening=0.5)
    early.grad = torch.ones(3)
    optimizer.step()  # early: first run, buffer = grad
    late.grad = torch.full((3,), 2.0)
    optimizer.step()  # [late (new), early]: the set's last parameter has a buffer
    # late: buffer = 0 * 0.9 + (1 - 0.5) * 2 = 1, not torch's "buffer = grad" (2)
    torch.testing.assert_close(optimizer.state[late]["momentum_buffer"], torch.ones(3))
    torch.testing.assert_close(late.detach(), torch.full((3,), 0.9))


def test_fused_adam_capturable_rounds_its_moments_through_the_parameter_dtype() -> None:
    """The capturable kernel stores ``static_cast<T>(m)`` into the fp32 moments; with master
    weights (fp32 ``p_master``) it stores them in full."""
    for master_weights, rounded_to in ((False, torch.float16), (True, None)):
        param = torch.nn.Parameter(torch.full((64,), 0.5, dtype=torch.float16))
        optimizer = FusedAdam([param], lr=1e-3, capturable=True, master_weights=master_weights)
        param.grad = torch.linspace(-1, 1, 64).to(torch.float16) / 3
        optimizer.step()
        exp_avg = optimizer.state[param]["exp_avg"]
        fp32 = 0.1 * param.grad.float()
        if rounded_to is None:
            torch.testing.assert_close(exp_avg, fp32, rtol=0, atol=0)
        else:
            assert torch.equal(exp_avg, round_to(fp32, rounded_to))
            assert not torch.equal(exp_avg, fp32)


def test_fused_adam_counts_steps_of_groups_without_gradients() -> None:
    used, unused = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    optimizer = FusedAdam([{"params": [used]}, {"params": [unused]}, {"params": []}], lr=0.1)
    for _ in range(3):
        used.grad = torch.ones(2)
        optimizer.step()
    assert [group.get("step") for group in optimizer.param_groups] == [3, 3, None]


def test_fused_adam_master_weights_are_taken_when_the_optimizer_is_built() -> None:
    """NVIDIA copies the masters in ``__init__`` and never from the model again: values loaded
    into the model afterwards are replaced by the masters' update at the first step."""
    param = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))
    optimizer = FusedAdam([param], lr=0.1, capturable=True, master_weights=True)
    with torch.no_grad():
        param.fill_(5.0)  # e.g. model.load_state_dict(checkpoint) after the optimizer
    param.grad = torch.ones(3, dtype=torch.float16)
    optimizer.step()
    torch.testing.assert_close(param.detach().float(), torch.full((3,), -0.1), atol=1e-3, rtol=0)
    assert "master_param" not in optimizer.state[param]  # and not in state_dict()


def test_fused_adam_capturable_writes_the_gradients_back_unscaled() -> None:
    param = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
    optimizer = FusedAdam([param], lr=1e-3, capturable=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale((param.float() * torch.arange(4.0)).sum()).backward()
    scaler.step(optimizer)
    torch.testing.assert_close(param.grad.float(), torch.arange(4.0))


def test_fused_lamb_leaves_the_update_in_the_gradient() -> None:
    """NVIDIA's stage-1 kernel writes the update over the gradient, in the parameter's dtype;
    stage 2 applies ``lr * ||p|| / ||update||`` to exactly that stored update."""
    start = torch.randn(32, generator=torch.Generator().manual_seed(3)).half()
    param = torch.nn.Parameter(start.clone())
    optimizer = FusedLAMB([param], lr=1e-2, weight_decay=0.01, max_grad_norm=1e9)
    grad = torch.randn(32, generator=torch.Generator().manual_seed(4)).half()
    param.grad = grad.clone()
    optimizer.step()
    g = grad.float()
    m, v = 0.1 * g, 0.001 * g * g
    update = (m / 0.1) / ((v / 0.001).sqrt() + 1e-6) + 0.01 * start.float()
    stored = round_to(update, torch.float16)
    torch.testing.assert_close(param.grad.float(), stored, rtol=1e-3, atol=1e-3)
    ratio = 1e-2 * start.float().norm() / param.grad.float().norm()
    expected = round_to(start.float() - ratio * param.grad.float(), torch.float16)
    torch.testing.assert_close(param.detach().float(), expected, rtol=0, atol=1e-3)
    assert optimizer.state[param]["exp_avg"].dtype == torch.float16


def test_fused_lamb_clips_with_the_constructor_max_grad_norm_not_the_group_s() -> None:
    def run(group_max: float) -> torch.Tensor:
        param = torch.nn.Parameter(torch.ones(4))
        optimizer = FusedLAMB([{"params": [param], "max_grad_norm": group_max}], max_grad_norm=1.0)
        param.grad = torch.full((4,), 10.0)
        optimizer.step()
        return optimizer.state[param]["exp_avg"]

    assert torch.equal(run(1.0), run(1000.0))  # NVIDIA reads defaults['max_grad_norm']
    torch.testing.assert_close(run(1.0), torch.full((4,), 0.1 * 10.0 / 20.0))


def test_fused_novograd_blends_max_norms_linearly() -> None:
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = FusedNovoGrad([param], lr=0.0, betas=(0.9, 0.5), norm_type=0)
    for value in (4.0, 2.0):
        param.grad = torch.tensor([value, -1.0, 0.5])
        optimizer.step()
    (norms,) = [n for n in optimizer.param_groups[0]["exp_avg_sq"] if n.numel()]
    torch.testing.assert_close(norms, torch.tensor([0.5 * 4.0 + 0.5 * 2.0]))


def test_fused_novograd_refuses_a_parameter_that_joins_later() -> None:
    first, second = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    optimizer = FusedNovoGrad([first, second])
    first.grad = torch.ones(2)
    optimizer.step()
    second.grad = torch.ones(2)
    before = first.detach().clone()
    with pytest.raises(RuntimeError, match="group 0 had 1 then and has 2 now"):
        optimizer.step()
    assert torch.equal(first.detach(), before)


# ---- dtypes NVIDIA's kernels do not take ------------------------------------------------------

UNSUPPORTED: list[tuple[Callable[[list[torch.Tensor]], torch.optim.Optimizer], str]] = [
    (lambda p: FusedAdam(p), r"^FusedAdam only support fp16 and fp32\."),
    (lambda p: FusedAdagrad(p), r"^FusedAdagrad only support fp16 and fp32\."),
    (lambda p: FusedLAMB(p), r"^FusedLAMB only support fp16 and fp32\."),
    (lambda p: FusedNovoGrad(p), r"^FusedNovoGrad only support fp16 and fp32\."),
    (lambda p: FusedSGD(p, lr=0.1), r"NVIDIA's silently never updates one of shape \(2,\)"),
]


@pytest.mark.parametrize(("make", "message"), UNSUPPORTED, ids=lambda v: getattr(v, "pattern", ""))
def test_float64_parameters_are_refused_before_anything_changes(make, message) -> None:
    fine = torch.nn.Parameter(torch.ones(3))
    double = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    optimizer = make([fine, double])
    fine.grad, double.grad = torch.ones(3), torch.ones(2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=message):
        optimizer.step()
    assert torch.equal(fine.detach(), torch.ones(3))
