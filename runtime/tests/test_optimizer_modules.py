"""Ascend apex defines each fused optimizer in a module of its own, and scripts migrated by hand
import it from there (speech-transformer: `from apex.optimizers.npu_fused_adam import
NpuFusedAdam`): the runtime has those modules, and each gives the class `apex.optimizers`
exports, amp check included."""

from __future__ import annotations

import importlib

import pytest
import torch

import apex.optimizers

MODULES = {
    "npu_fused_sgd": "NpuFusedSGD",
    "npu_fused_adam": "NpuFusedAdam",
    "npu_fused_adamw": "NpuFusedAdamW",
    "npu_fused_adadelta": "NpuFusedAdadelta",
    "npu_fused_rmsprop": "NpuFusedRMSprop",
}


@pytest.mark.parametrize(("module", "name"), sorted(MODULES.items()))
def test_each_module_gives_the_package_class(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(f"apex.optimizers.{module}"), name)
    assert cls is getattr(apex.optimizers, name)
    optimizer = cls([torch.nn.Parameter(torch.ones(3))], lr=0.1)
    with pytest.raises(RuntimeError, match="should be used with AMP"):
        optimizer.step()
