"""The NPU1xx rewrites keep the numbers: migrate a program, run both sides, compare parameters.

The program builds one optimizer per argument-mapping case (positional arguments mapped by the
source signature, dropped switches, the added `weight_decay=0.0` and `lr=0.001`, `adam_w_mode`,
merged parameter groups, an amp O1 setup that gets `combine_grad=True`), trains a small model a
few steps with each and prints the final parameters. The original runs against the apex runtime
(NVIDIA's names), the migrated copy against the runtime plus the CPU torch_npu shim, each in its
own interpreter, with real torch.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.settings import Settings

testing = pytest.importorskip("apex.testing", reason="needs the runtime: pip install -e runtime")

PROGRAM = textwrap.dedent(
    """
    import json

    import torch
    from apex import amp
    from apex.optimizers import FusedAdam, FusedSGD


    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)
        )


    def train(model, optimizer, steps=4, scaled=False):
        generator = torch.Generator().manual_seed(1)
        for _ in range(steps):
            x = torch.randn(16, 4, generator=generator)
            y = torch.randn(16, 2, generator=generator)
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            if scaled:
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            optimizer.step()
        return [p.detach().flatten().tolist() for p in model.parameters()]


    def sgd_positional(model):
        return torch.optim.SGD(model.parameters(), 0.1, 0.9, 0, 1e-4, True)


    def sgd_default_lr(model):
        return torch.optim.SGD(model.parameters())


    def adam_switches(model):
        return torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False, maximize=False)


    def adamw_default_decay(model):
        return torch.optim.AdamW(model.parameters(), lr=1e-2)


    def adadelta_positional(model):
        return torch.optim.Adadelta(model.parameters(), 1.0, 0.9, 1e-6, 1e-3, None)


    def rmsprop_positional(model):
        return torch.optim.RMSprop(model.parameters(), 1e-2, 0.9, 1e-8, 1e-4, 0.5, True)


    def fused_adam_positional(model):
        return FusedAdam(model.parameters(), 1e-2, True, (0.9, 0.98), 1e-6)


    def fused_adam_l2(model):
        return FusedAdam(model.parameters(), lr=1e-2, adam_w_mode=False, weight_decay=0.01)


    def fused_sgd_positional(model):
        return FusedSGD(model.parameters(), 0.1, 0.9, 0, 1e-4, False, False, True)


    def merged_groups(model):
        return torch.optim.SGD([
            {"params": model[0].parameters()},
            {"params": model[2].parameters(), "lr": 0.05},
            {"params": model[3].parameters()},
        ], lr=0.1, momentum=0.9)


    def with_amp():
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
        return train(model, optimizer, scaled=True)


    CASES = [
        sgd_positional,
        sgd_default_lr,
        adam_switches,
        adamw_default_decay,
        adadelta_positional,
        rmsprop_positional,
        fused_adam_positional,
        fused_adam_l2,
        fused_sgd_positional,
        merged_groups,
    ]

    if __name__ == "__main__":
        results = {}
        for case in CASES:
            model = make_model()
            results[case.__name__] = train(model, case(model))
        results["with_amp"] = with_amp()
        print(json.dumps(results))
    """
)
CHAIN = ("NPU101", "NPU102", "NPU103")


def migrated_program() -> str:
    rules = select_rules(all_rules(), CHAIN)
    result = migrate_source(PROGRAM.encode(), "program.py", rules, Settings())
    assert result.status is Status.CHANGED, result.diagnostics
    manual = [d for d in result.diagnostics if d.severity != "fixed"]
    assert not manual, manual
    return result.migrated.decode()


def test_the_migration_rewrites_every_case() -> None:
    migrated = migrated_program()
    assert not re.search(r"\b(torch\.optim\.\w+|FusedAdam|FusedSGD)\(", migrated)
    assert "apex.optimizers.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)" in migrated
    assert 'opt_level="O1", verbosity=0, combine_grad=True)' in migrated
    assert "list(model[0].parameters()) + list(model[3].parameters())" in migrated


def test_migrated_optimizers_compute_the_same_parameters(run_json_program) -> None:
    original = run_json_program(PROGRAM, None, "original.py")
    migrated = run_json_program(migrated_program(), testing.npu_shim_env(), "migrated.py")
    assert original.keys() == migrated.keys()
    for case, tensors in original.items():
        for before, after in zip(tensors, migrated[case], strict=True):
            # fp32 on both sides; the fused kernels only change summation order.
            torch.testing.assert_close(
                torch.tensor(after), torch.tensor(before), rtol=1e-5, atol=1e-7, msg=case
            )
