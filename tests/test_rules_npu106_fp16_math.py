"""NPU106 keeps the numbers: an `FP16_Optimizer` program and its amp O2 migration train alike.

The runtime has no `apex.fp16_utils` (and NVIDIA's needs CUDA), so the original program runs
against `REFERENCE`, a short implementation of FP16_Optimizer's documented algorithm (apex since
February 2019, when it started using amp's loss scaler): fp32 master copies of the fp16
parameters, `loss.float() * scale` backward, master gradients unscaled from the model's, a step
skipped after an overflow, the scale halved then and doubled after `scale_window` clean steps.
The migrated program runs against the runtime's amp in real fp16 on the CPU
(`APEX_AMP_CPU_DTYPE=float16`). Both print their losses and parameters after every step; they
must be equal, bit for bit.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest

from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.settings import Settings

pytest.importorskip("apex.amp", reason="needs the runtime: pip install -e runtime")

REFERENCE = textwrap.dedent(
    """
    import sys
    import types

    import torch


    class FP16_Optimizer:
        def __init__(self, init_optimizer, static_loss_scale=1.0, dynamic_loss_scale=False,
                     dynamic_loss_args=None, verbose=True):
            self.optimizer = init_optimizer
            self.pairs = []
            for group in init_optimizer.param_groups:
                for index, param in enumerate(group["params"]):
                    if param.dtype == torch.float16:
                        master = param.detach().clone().float().requires_grad_()
                        group["params"][index] = master
                        self.pairs.append((param, master))
            args = dict(dynamic_loss_args or {})
            self.dynamic = dynamic_loss_scale
            self.max_scale = args.get("max_loss_scale", 2.0**24)
            self.min_scale = args.get("min_loss_scale")
            self.window = args.get("scale_window", 2000)
            init = args.get("init_scale", 2.0**16)
            self.scale = min(self.max_scale, init) if self.dynamic else static_loss_scale
            self.unskipped = 0
            self.overflow = False

        @property
        def param_groups(self):
            return self.optimizer.param_groups

        def zero_grad(self):
            for param, master in self.pairs:
                for tensor in (param, master):
                    if tensor.grad is not None:
                        tensor.grad.detach_()
                        tensor.grad.zero_()

        def backward(self, loss):
            (loss.float() * self.scale).backward()
            self.overflow = False
            for param, master in self.pairs:
                if param.grad is None:
                    continue
                if not torch.isfinite(param.grad.float()).all():
                    self.overflow = True
                if master.grad is None:
                    master.grad = torch.empty_like(master)
                master.grad.copy_(param.grad)
                master.grad.mul_(1.0 / self.scale)
            if self.dynamic and self.overflow:
                halved = self.scale / 2.0
                self.scale = max(self.min_scale, halved) if self.min_scale else halved
                self.unskipped = 0
            else:
                self.unskipped += 1
                if self.dynamic and self.unskipped == self.window:
                    self.scale = min(self.max_scale, self.scale * 2.0)
                    self.unskipped = 0
            if not self.dynamic:
                self.overflow = False

        def step(self):
            if self.overflow:
                return
            self.optimizer.step()
            with torch.no_grad():
                for param, master in self.pairs:
                    param.copy_(master)


    module = types.ModuleType("apex.fp16_utils")
    module.FP16_Optimizer = FP16_Optimizer
    sys.modules["apex.fp16_utils"] = module
    """
)

TRAINING = """
def {name}():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
    ).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = FP16_Optimizer(optimizer, {scale})
    generator = torch.Generator().manual_seed(1)
    print(json.dumps(["{name}", None, parameters(model)]))
    for _ in range({steps}):
        x = torch.randn(16, 4, generator=generator).half()
        y = torch.randn(16, 2, generator=generator)
        optimizer.zero_grad()
        loss = ((model(x).float() - y) ** 2).mean()
        optimizer.backward(loss)
        optimizer.step()
        print(json.dumps(["{name}", loss.item(), parameters(model)]))
"""

CASES = {
    "static": ("static_loss_scale=128.0", 4),
    # 2**24 overflows the fp16 gradients: the first steps are skipped while the scale halves,
    # and a window of 3 lets it grow again within the run.
    "dynamic": (
        'dynamic_loss_scale=True, dynamic_loss_args={"init_scale": 2.0**24, "scale_window": 3}',
        12,
    ),
}

PROGRAM = "\n".join(
    [
        "import json",
        "import torch",
        "from apex.fp16_utils import FP16_Optimizer",
        "",
        "def parameters(model):",
        "    return [p.detach().float().flatten().tolist() for p in model.parameters()]",
        *(
            TRAINING.format(name=name, scale=scale, steps=steps)
            for name, (scale, steps) in CASES.items()
        ),
        *(f"{name}()" for name in CASES),
    ]
)


def migrated(program: str) -> str:
    rules = select_rules(all_rules(), ["NPU106"])
    result = migrate_source(program.encode(), "train.py", rules, Settings())
    assert result.status is Status.CHANGED, result.diagnostics
    return result.migrated.decode()


def run(*codes: str) -> list[list[list[object]]]:
    """Run each program in its own interpreter, at the same time; their printed records."""
    environment = {**os.environ, "APEX_AMP_CPU_DTYPE": "float16", "CUDA_VISIBLE_DEVICES": ""}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for code in codes
    ]
    records = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        records.append([json.loads(line) for line in stdout.splitlines() if line.startswith("[")])
    return records


def test_fp16_optimizer_and_amp_o2_train_alike() -> None:
    rewritten = migrated(PROGRAM)
    assert "FP16_Optimizer" not in rewritten
    assert rewritten.count(".half()") == len(CASES)  # the inputs' casts; the models' are gone
    assert rewritten.count("amp.scale_loss") == len(CASES)
    before, after = run(REFERENCE + PROGRAM, rewritten)
    assert len(before) == sum(steps + 1 for _, steps in CASES.values())
    assert before == after
    dynamic = [parameters for name, _, parameters in before if name == "dynamic"]
    moved = [later != earlier for earlier, later in itertools.pairwise(dynamic)]
    # the overflowing steps were skipped (parameters unchanged), the later ones were taken
    assert not moved[0] and moved[-1]
