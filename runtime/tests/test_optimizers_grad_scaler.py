"""NVIDIA's FusedAdam under torch's own amp: ``capturable=True`` takes the loss scale into the
step, so ``torch.amp.GradScaler`` drives fp16 parameters without unscaling fp16 gradients."""

from __future__ import annotations

import warnings

import pytest
import torch

from apex.optimizers import FusedAdam

INITIAL_SCALE = 2.0**12


def train_with_grad_scaler(steps: int, inf_at: int | None = None):
    """fp16 params driven by GradScaler next to an fp32 AdamW reference fed the same grads."""
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(8, 5, generator=generator)
    half = torch.nn.Parameter(start.half())
    reference = torch.nn.Parameter(start.half().float())
    optimizer = FusedAdam([half], lr=1e-2, weight_decay=0.01, capturable=True, master_weights=True)
    reference_optimizer = torch.optim.AdamW([reference], lr=1e-2, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=INITIAL_SCALE)
    for step in range(steps):
        direction = torch.randn(8, 5, generator=generator)
        optimizer.zero_grad()
        scaler.scale((half.float() * direction).sum()).backward()
        if step == inf_at:
            half.grad[0, 0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        if step != inf_at:
            reference_optimizer.zero_grad()
            (reference * direction).sum().backward()
            reference_optimizer.step()
    return half, optimizer, reference, scaler


def test_capturable_master_weights_fused_adam_trains_fp16_params_under_grad_scaler() -> None:
    # Regression: scaler.step(optimizer) raised "Attempting to unscale FP16 gradients."
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor torch's deprecated grad_scaler keyword path
        half, optimizer, reference, scaler = train_with_grad_scaler(steps=6)
    (master,) = optimizer.param_groups_master[0]["params"]  # NVIDIA's place, not the state
    # fp16 gradients carry a relative rounding of 2**-11; Adam's update barely feels it.
    torch.testing.assert_close(master, reference.detach(), rtol=1e-4, atol=1e-4)
    assert torch.equal(half.detach(), master.half())
    assert scaler.get_scale() == INITIAL_SCALE
    assert optimizer.param_groups[0]["step"] == 6
    assert set(optimizer.state[half]) == {"exp_avg", "exp_avg_sq"}
    # NVIDIA's capturable kernel writes each gradient back unscaled.
    torch.testing.assert_close(half.grad.float(), reference.grad, rtol=2e-3, atol=2e-3)


def test_an_overflow_skips_the_step_and_halves_the_scale() -> None:
    half, optimizer, reference, scaler = train_with_grad_scaler(steps=4, inf_at=1)
    assert optimizer.param_groups[0]["step"] == 3
    (master,) = optimizer.param_groups_master[0]["params"]
    torch.testing.assert_close(master, reference.detach(), rtol=1e-4, atol=1e-4)
    assert torch.equal(half.detach(), master.half())
    assert scaler.get_scale() == INITIAL_SCALE / 2


def test_without_capturable_grad_scaler_refuses_fp16_gradients_as_with_nvidia() -> None:
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    optimizer = FusedAdam([param], lr=1e-2)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale((param.float() * 2).sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.step(optimizer)


def test_master_weights_need_capturable_as_in_nvidia_apex() -> None:
    with pytest.raises(RuntimeError, match=r"^Master weights is currently only supported"):
        FusedAdam([torch.nn.Parameter(torch.ones(1))], master_weights=True)
