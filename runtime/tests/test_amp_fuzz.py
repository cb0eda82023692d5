"""Fuzzing amp with the fused optimizers: random models, opt levels, optimizers and options.

Two properties per example, over a few training steps through ``amp.initialize``:

- ``combine_grad=True`` changes where gradients live, never their values: a torch.optim
  optimizer trains bit-identically with and without it;
- an ``apex.optimizers.NpuFused*`` optimizer (always combined) trains like its torch.optim
  counterpart with ``combine_grad=True``, within 1e-5 (torch's fused kernel against its
  single-tensor loop: rounding only).

``APEX_FUZZ_EXAMPLES`` raises the number of examples, as in ``test_fuzz_optimizers``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apex import amp, optimizers
from apex.amp.frontend import _reset

EXAMPLES = int(os.environ.get("APEX_FUZZ_EXAMPLES", "5"))
STEPS = 3

PAIRS: dict[str, tuple[type, type, dict[str, Any]]] = {
    "sgd": (optimizers.NpuFusedSGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "adam": (optimizers.NpuFusedAdam, torch.optim.Adam, {"lr": 1e-2, "weight_decay": 1e-2}),
    "adamw": (optimizers.NpuFusedAdamW, torch.optim.AdamW, {"lr": 1e-2}),
    "adadelta": (optimizers.NpuFusedAdadelta, torch.optim.Adadelta, {"lr": 1.0}),
    "rmsprop": (optimizers.NpuFusedRMSprop, torch.optim.RMSprop, {"lr": 1e-3, "centered": True}),
}


class Net(torch.nn.Module):
    """A small MLP; optionally with batchnorm (kept fp32 under O2) and a frozen first layer,
    plus a layer the forward never uses (parameters that never get a gradient)."""

    def __init__(self, width: int, batchnorm: bool) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(5, width),
            torch.nn.BatchNorm1d(width) if batchnorm else torch.nn.Identity(),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 3),
        )
        self.unused = torch.nn.Linear(2, 2)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.body(inputs)


def make_model(seed: int, width: int, batchnorm: bool, frozen: bool) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = Net(width, batchnorm)
    if frozen:
        model.body[0].requires_grad_(False)
    return model


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, opt_level: str, **options):
    _reset()
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0, **options)
    generator = torch.Generator().manual_seed(7)
    for _ in range(STEPS):
        inputs = torch.randn(8, 5, generator=generator)
        targets = torch.randint(0, 3, (8,), generator=generator)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        with amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        optimizer.step()
    return [p.detach().float().clone() for p in model.parameters()]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="APEX_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(sorted(PAIRS)),
    opt_level=st.sampled_from(["O1", "O2"]),
    width=st.sampled_from([1, 4, 17]),
    batchnorm=st.booleans(),
    frozen=st.booleans(),
    seed=st.integers(0, 50),
)
def test_fused_optimizers_and_combine_grad_under_amp(
    name: str, opt_level: str, width: int, batchnorm: bool, frozen: bool, seed: int
) -> None:
    fused_class, torch_class, options = PAIRS[name]
    amp_options: dict[str, Any] = {"master_weights": True} if opt_level == "O2" else {}

    def run(optimizer_class: type, **extra: Any) -> list[torch.Tensor]:
        model = make_model(seed, width, batchnorm, frozen)
        params = [p for p in model.parameters() if p.requires_grad]
        return train(model, optimizer_class(params, **options), opt_level, **amp_options, **extra)

    per_tensor = run(torch_class)
    combined = run(torch_class, combine_grad=True)
    fused = run(fused_class)
    for index, (a, b, c) in enumerate(zip(per_tensor, combined, fused, strict=True)):
        assert torch.equal(a, b), f"combine_grad changed parameter {index}"
        torch.testing.assert_close(c, b, rtol=1e-5, atol=1e-5, msg=f"parameter {index}")
