"""The runtime on the device it runs on: CUDA (torch's fused kernels, amp in fp16) or an NPU.

Every test takes the ``device`` fixture (conftest.py): the CPU in ``make test``, where they check
the same contracts cheaply, and the GPU or NPU that ``make device-check`` finds
(``APEX_TEST_DEVICE=cuda`` or ``npu``), where the NpuFused optimizers step with the device's
kernels, amp computes in fp16, moving a model to the host and back really re-allocates its
parameters, and the torch_npu stand-in puts migrated code on CUDA. Gradients are drawn on the
CPU from seeded generators and moved, so every device sees the same numbers.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from apex import amp, optimizers
from apex.amp.frontend import _reset
from apex.optimizers import FusedAdagrad, FusedAdam, FusedLAMB, FusedNovoGrad, FusedSGD, standalone
from apex.testing import npu_shim_env

RUNTIME = Path(__file__).resolve().parent.parent
SHAPES = [(16, 8), (8,), (3, 4, 2, 2), (1,)]


def half_of(device: torch.device) -> torch.dtype:
    """amp's half precision there: fp16 on a device, bf16 on the CPU."""
    return torch.bfloat16 if device.type == "cpu" else torch.float16


@pytest.fixture(autouse=True)
def fresh_amp() -> Iterator[None]:
    _reset()
    yield
    _reset()


@pytest.fixture(autouse=True, scope="module")
def the_device_is_left_as_found(device: torch.device) -> Iterator[None]:
    """No test changes the current device; cached memory goes back when the module ends."""
    current = torch.cuda.current_device() if device.type == "cuda" else None
    yield
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        assert torch.cuda.current_device() == current


def params_on(device: torch.device, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(0)
    return [
        torch.nn.Parameter(torch.randn(shape, generator=generator).to(device, dtype))
        for shape in SHAPES
    ]


def give_grads(params: list[torch.nn.Parameter], step: int) -> None:
    generator = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator).to(p.device, p.dtype)


def train(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], steps: int) -> None:
    for step in range(steps):
        give_grads(params, step)
        optimizer.step()


# ---- NpuFused optimizers on the device's kernels ---------------------------------------------

OptimizerClass = type[torch.optim.Optimizer]
TORCH_TWINS: list[tuple[OptimizerClass, OptimizerClass, dict[str, Any]]] = [
    (
        standalone.NpuFusedSGD,
        torch.optim.SGD,
        {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "nesterov": True},
    ),
    (standalone.NpuFusedAdam, torch.optim.Adam, {"lr": 1e-2, "weight_decay": 1e-4}),
    (standalone.NpuFusedAdamW, torch.optim.AdamW, {"lr": 1e-2}),
    (standalone.NpuFusedAdadelta, torch.optim.Adadelta, {"lr": 1.0}),
    (
        standalone.NpuFusedRMSprop,
        torch.optim.RMSprop,
        {"lr": 1e-2, "momentum": 0.5, "centered": True},
    ),
]


@pytest.mark.parametrize(
    ("ours", "theirs", "options"), TORCH_TWINS, ids=lambda v: getattr(v, "__name__", "")
)
def test_npu_fused_optimizers_match_torch_on_the_device(device, ours, theirs, options) -> None:
    mine, reference = params_on(device), params_on(device)
    optimizer = ours(mine, **options)
    twin = theirs(reference, foreach=False, **options)
    train(optimizer, mine, steps=6)
    train(twin, reference, steps=6)
    for a, b in zip(mine, reference, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)
    assert {buffer.device.type for buffer in optimizer.flat_param_buffers()} == {device.type}


@pytest.mark.parametrize(
    "ours", [standalone.NpuFusedSGD, standalone.NpuFusedAdam, standalone.NpuFusedAdamW]
)
def test_half_precision_parameters_train_like_fp32_on_the_device(device, ours) -> None:
    options = {"lr": 1e-2, "momentum": 0.9} if ours is standalone.NpuFusedSGD else {"lr": 1e-2}
    half, full = params_on(device, half_of(device)), params_on(device)
    train(ours(half, **options), half, steps=3)
    train(ours(full, **options), full, steps=3)
    tolerance = 3e-2 if device.type == "cpu" else 5e-3  # bf16 on the CPU, fp16 elsewhere
    for a, b in zip(half, full, strict=True):
        assert a.dtype == half_of(device)
        torch.testing.assert_close(a.detach().float(), b.detach(), rtol=tolerance, atol=tolerance)


# ---- amp -------------------------------------------------------------------------------------


def small_model(device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )
    return model.to(device)


def amp_run(
    device: torch.device,
    make_optimizer: Callable[[Any], torch.optim.Optimizer],
    opt_level: str,
    steps: int = 4,
    poison_at: int | None = None,
    **options: Any,
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    _reset()
    model = small_model(device)
    master_weights = True if opt_level == "O2" else None
    model, optimizer = amp.initialize(
        model,
        make_optimizer(model.parameters()),
        opt_level=opt_level,
        master_weights=master_weights,
        verbosity=0,
        **options,
    )
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        inputs = torch.randn(8, 6, generator=generator).to(device)
        targets = torch.randint(0, 3, (8,), generator=generator).to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        if step == poison_at:
            loss = loss * float("inf")
        with amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        optimizer.step()
    return model, optimizer


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)


def fused_sgd(params: Any) -> torch.optim.Optimizer:
    return optimizers.NpuFusedSGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)


def same(first: torch.nn.Module, second: torch.nn.Module, exact: bool) -> None:
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        if exact:
            assert torch.equal(a, b)
        else:  # a device's kernels need not reduce in the same order twice
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_combine_grad_changes_no_number_on_the_device(device, opt_level) -> None:
    per_tensor, _ = amp_run(device, sgd, opt_level)
    combined, _ = amp_run(device, sgd, opt_level, combine_grad=True)
    same(per_tensor, combined, exact=device.type == "cpu")


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_npu_fused_sgd_under_amp_matches_torch_sgd_on_the_device(device, opt_level) -> None:
    reference, _ = amp_run(device, sgd, opt_level)
    fused, optimizer = amp_run(device, fused_sgd, opt_level, combine_grad=True)
    for a, b in zip(reference.parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    buffers = optimizer.get_optimizer_combined_grads()
    assert buffers and {buffer.device.type for buffer in buffers} == {device.type}
    if opt_level == "O2":
        assert {p.dtype for p in fused[0].parameters()} == {half_of(device)}


def test_an_overflow_skips_the_step_on_the_device(device) -> None:
    clean, _ = amp_run(device, fused_sgd, "O2", steps=1)
    poisoned, _ = amp_run(device, fused_sgd, "O2", steps=2, poison_at=1)
    # The second step was skipped: nothing changed.
    same(clean, poisoned, exact=device.type == "cpu")
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**15


# ---- NVIDIA's names --------------------------------------------------------------------------

NVIDIA_STATE: list[tuple[Callable[[list[torch.Tensor]], torch.optim.Optimizer], dict[str, str]]] = [
    (lambda p: FusedSGD(p, lr=0.1, momentum=0.9), {"momentum_buffer": "param"}),
    (lambda p: FusedAdam(p, lr=1e-2), {"exp_avg": "fp32", "exp_avg_sq": "fp32"}),
    (lambda p: FusedAdagrad(p, lr=1e-2), {"sum": "param"}),
    (lambda p: FusedLAMB(p, lr=1e-2), {"exp_avg": "param", "exp_avg_sq": "param"}),
    (lambda p: FusedNovoGrad(p, lr=1e-2), {"exp_avg": "param"}),
]


@pytest.mark.parametrize(
    ("make", "expected"), NVIDIA_STATE, ids=["SGD", "Adam", "Adagrad", "LAMB", "NovoGrad"]
)
def test_nvidia_optimizers_keep_nvidias_state_on_the_device(device, make, expected) -> None:
    params = params_on(device, half_of(device))
    optimizer = make(params)
    train(optimizer, params, steps=3)
    for p in params:
        assert torch.isfinite(p).all()
        for name, kind in expected.items():
            state = optimizer.state[p][name]
            assert state.device.type == device.type
            assert state.dtype == (p.dtype if kind == "param" else torch.float32), name


# ---- the fused optimizers' contract ----------------------------------------------------------


def test_a_round_trip_through_the_host_breaks_the_contract_on_a_device(device) -> None:
    """``model.cpu(); torch.save(...); model.to(device)``: on a device every parameter comes back
    in new memory and Ascend's fused optimizer would stop updating it, so the next step raises.
    On the CPU ``model.cpu()`` is a no-op, the parameters stay in place and training goes on."""
    model, optimizer = amp_run(device, fused_sgd, "O1", steps=1)
    model.cpu()
    model.to(device)
    before = [p.detach().clone() for p in model.parameters()]
    if device.type == "cpu":
        amp_step_once(model, optimizer, device)
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    else:
        with pytest.raises(
            RuntimeError, match=r"parameters, the first '0\.weight' .* re-allocated"
        ):
            amp_step_once(model, optimizer, device)


def amp_step_once(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device) -> None:
    optimizer.zero_grad()
    loss = model(torch.ones(8, 6, device=device)).float().square().mean()
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    optimizer.step()


# ---- migrated code through the torch_npu stand-in --------------------------------------------

MIGRATED = """
import torch
import torch_npu
from apex import amp
from apex.optimizers import NpuFusedAdam

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).npu()
plain = torch_npu.optim.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(3):
    plain.zero_grad()
    model(torch.randn(4, 8).npu()).square().mean().backward()
    plain.step()

other = torch.nn.Linear(8, 2).npu()
other, fused = amp.initialize(other, NpuFusedAdam(other.parameters(), lr=1e-3), opt_level="O2",
                              master_weights=True, combine_grad=True, verbosity=0)
for _ in range(3):
    fused.zero_grad()
    with amp.scale_loss(other(torch.randn(4, 8).npu()).float().square().mean(), fused) as scaled:
        scaled.backward()
    fused.step()

print(next(model.parameters()).device.type, plain.flat_param_buffers()[0].device.type,
      next(other.parameters()).device.type, next(other.parameters()).dtype,
      fused.get_optimizer_combined_grads()[0].device.type)
"""


def test_the_stand_in_puts_migrated_code_on_the_device(device) -> None:
    """``NPU_SHIM_DEVICE=cuda`` makes ``.npu()`` move to CUDA: a migrated script's NpuFused
    optimizers, plain and under amp O2, then train there."""
    if device.type == "npu":
        pytest.skip("a real torch_npu is installed here: the stand-in is for machines without")
    env = npu_shim_env()
    env["PYTHONPATH"] += os.pathsep + str(RUNTIME)
    env["NPU_SHIM_DEVICE"] = device.type
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(MIGRATED)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    kind = device.type
    expected = f"{kind} {kind} {kind} {half_of(device)} {kind}"
    assert result.stdout.strip().splitlines()[-1] == expected
