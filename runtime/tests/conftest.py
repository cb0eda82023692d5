"""Shared fixtures of the runtime tests: a deterministic training workload for optimizers."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from apex.amp.frontend import _reset

# Where the device-aware tests run (test_device_paths.py): the CPU unless ``make device-check``
# (runtime/tools/device_check.py) asks for ``cuda`` or ``npu``.
DEVICE_VARIABLE = "APEX_TEST_DEVICE"


def requested_device() -> torch.device:
    """The device of ``APEX_TEST_DEVICE`` (default ``cpu``); a usage error when it is absent."""
    name = os.environ.get(DEVICE_VARIABLE, "cpu").strip().lower() or "cpu"
    if name not in ("cpu", "cuda", "npu"):
        raise pytest.UsageError(f"{DEVICE_VARIABLE}={name!r}: expected cpu, cuda or npu")
    if name == "npu":
        try:
            importlib.import_module("torch_npu")  # registers the device with torch
        except ImportError as error:
            raise pytest.UsageError(f"{DEVICE_VARIABLE}=npu, but {error}") from error
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "npu": name == "npu" and torch.npu.is_available(),  # type: ignore[attr-defined]
    }
    if not available[name]:
        raise pytest.UsageError(f"{DEVICE_VARIABLE}={name}, but this machine has no {name} device")
    return torch.device(name)


def pytest_configure(config: pytest.Config) -> None:
    requested_device()  # a wrong APEX_TEST_DEVICE stops the run before anything is collected


@pytest.fixture(scope="session")
def device() -> torch.device:
    return requested_device()


@pytest.fixture(autouse=True)
def fresh_amp(request: pytest.FixtureRequest):
    """amp keeps process-wide state (loss scalers, patched functions): every amp test starts and
    ends without it. One torch thread: the models are tiny, and on a shared 2-core machine a second
    OpenMP thread only adds waiting; results do not depend on it."""
    if not request.module.__name__.rsplit(".", 1)[-1].startswith("test_amp"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    _reset()
    yield
    _reset()
    torch.set_num_threads(threads)


# Scalars, an empty tensor, odd sizes that straddle the 16-element slot alignment, and one
# "large" (a few thousand elements: large enough to span many slots, small enough to be fast).
MIXED_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (3, 5), (64, 33), (17,), (4, 3, 2, 2), (1,))


class Workload:
    """Parameters of mixed shapes, one frozen and one never used, with seeded gradients.

    Two workloads built with the same seed hold equal parameters and, as long as their
    parameters stay equal, receive equal gradients: the loss is a seeded random linear term
    plus a small quadratic one, so gradients depend on the parameters themselves.
    """

    def __init__(self, seed: int = 0, dtype: torch.dtype = torch.float32) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.trainable = [
            torch.nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype))
            for shape in MIXED_SHAPES
        ]
        self.frozen = torch.nn.Parameter(
            torch.randn(5, generator=generator, dtype=dtype), requires_grad=False
        )
        self.unused = torch.nn.Parameter(torch.randn(6, generator=generator, dtype=dtype))

    @property
    def all_params(self) -> list[torch.nn.Parameter]:
        return [*self.trainable, self.frozen, self.unused]

    def groups(self, options: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Split the parameters round-robin into one group per ``options`` entry."""
        groups = [{"params": [], **option} for option in options]
        for index, p in enumerate(self.trainable):
            groups[index % len(groups)]["params"].append(p)
        groups[0]["params"].append(self.frozen)
        groups[-1]["params"].append(self.unused)
        return groups

    def backward(self, step: int, params: Sequence[torch.Tensor] | None = None) -> None:
        generator = torch.Generator().manual_seed(self.seed * 1000 + step)
        loss = torch.zeros(())
        for p in self.trainable:
            direction = torch.randn(p.shape, generator=generator, dtype=p.dtype)
            if params is None or any(p is q for q in params):
                loss = loss + (p * direction).sum() + 0.1 * (p * p).sum()
        loss.backward()


def train(
    workload: Workload, optimizer: torch.optim.Optimizer, steps: int, first_step: int = 0
) -> None:
    for step in range(first_step, first_step + steps):
        optimizer.zero_grad()
        workload.backward(step)
        optimizer.step()


def assert_same_params(ours: Workload, reference: Workload, rtol: float = 1e-6) -> None:
    for mine, theirs in zip(ours.all_params, reference.all_params, strict=True):
        torch.testing.assert_close(mine.detach(), theirs.detach(), rtol=rtol, atol=rtol)


TwinRun = tuple[Workload, torch.optim.Optimizer, Workload, torch.optim.Optimizer]
OptimizerFactory = Callable[[list[dict[str, Any]]], torch.optim.Optimizer]


def run_twins(
    make_ours: OptimizerFactory,
    make_reference: OptimizerFactory,
    options: Sequence[dict[str, Any]],
    steps: int = 20,
    seed: int = 0,
) -> TwinRun:
    """Train the same workload with two optimizers; return both workloads and optimizers."""
    ours_workload, reference_workload = Workload(seed), Workload(seed)
    ours = make_ours(ours_workload.groups(options))
    reference = make_reference(reference_workload.groups(options))
    train(ours_workload, ours, steps)
    train(reference_workload, reference, steps)
    return ours_workload, ours, reference_workload, reference


@pytest.fixture
def workload() -> Workload:
    return Workload()


@pytest.fixture
def twins() -> Callable[
    ..., tuple[Workload, torch.optim.Optimizer, Workload, torch.optim.Optimizer]
]:
    return run_twins


@pytest.fixture
def same_params() -> Callable[..., None]:
    return assert_same_params


@pytest.fixture
def trainer() -> Callable[..., None]:
    return train


@pytest.fixture
def workload_class() -> type[Workload]:
    return Workload
