"""An optimizer handed to code of another module of the run (rules/optimizers/_handed.py), through
the real command line: the callee's gradient resets keep NPU101 from fusing it, and the callee's
file is part of the caller's cache key. An optimizer wrapper class of the run (timm's Lookahead)
gets its `zero_grad` in the same run that fuses what it wraps, and an edit to the wrapper's file
moves both verdicts together."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from _cli import run_npu_migrate

TRAIN = """\
import torch

from helpers.loop import run_epoch


def main(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run_epoch(model, loader, optimizer)
"""
LOOP = """\
def run_epoch(model, loader, optimizer):
    for batch in loader:
        optimizer.zero_grad()
        model(batch).sum().backward()
        optimizer.step()
"""
# The same loop, now dropping the gradients of parameters it did not train.
LOOP_WITH_RESET = (
    LOOP
    + """\
    for parameter in model.parameters():
        if not parameter.requires_grad:
            parameter.grad = None
"""
)


def npu_migrate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--select", "NPU101", *args, cwd=cwd)


def npu101(result: subprocess.CompletedProcess[str]) -> list[tuple[int, str, str]]:
    document = json.loads(result.stdout)
    return sorted(
        (d["line"], d["severity"], d["message"])
        for d in document["edits"] + document["diagnostics"]
        if d["path"].removeprefix("./") == "train.py" and d["code"] == "NPU101"
    )


def test_a_reset_added_to_the_callee_rechecks_the_unchanged_caller(tmp_path: Path) -> None:
    (tmp_path / "helpers").mkdir()
    (tmp_path / "train.py").write_text(TRAIN)
    loop = tmp_path / "helpers" / "loop.py"
    loop.write_text(LOOP)
    cache = str(tmp_path / "cache")
    check = ("--cache-dir", cache, "--check", "--format", "json", ".")
    before = npu_migrate(tmp_path, *check)
    assert [(line, severity) for line, severity, _ in npu101(before)] == [(7, "fixed")]

    loop.write_text(LOOP_WITH_RESET)
    after = npu_migrate(tmp_path, *check)
    [(line, severity, message)] = npu101(after)
    assert (line, severity) == (7, "manual")
    assert "`run_epoch(model, loader, optimizer)` (line 8) hands it to `run_epoch`" in message
    assert "`parameter.grad = None` (helpers/loop.py:8) drops a gradient" in message

    # The caller did not change; the migration writes nothing for it either.
    written = npu_migrate(tmp_path, "--cache-dir", cache, ".")
    assert written.returncode == 0, written.stdout + written.stderr
    assert (tmp_path / "train.py").read_text() == TRAIN


FACTORY = """\
import torch

from lookahead import Lookahead


def create_optimizer(args, model):
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.lookahead:
        optimizer = Lookahead(optimizer)
    return optimizer
"""
LOOKAHEAD = """\
from torch.optim import Optimizer


class Lookahead(Optimizer):
    def __init__(self, base_optimizer):
        self.base_optimizer = base_optimizer
        self.param_groups = base_optimizer.param_groups

    def step(self, closure=None):
        return self.base_optimizer.step(closure)
"""
# The same wrapper, now resetting the wrapped optimizer's momentum: no zero_grad can save that.
LOOKAHEAD_WITH_RESET = (
    LOOKAHEAD.removesuffix("        return self.base_optimizer.step(closure)\n")
    + """\
        loss = self.base_optimizer.step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                self.base_optimizer.state[p]["momentum_buffer"] = p.detach() * 0
        return loss
"""
)


def findings(result: subprocess.CompletedProcess[str], path: str) -> list[tuple[int, str]]:
    document = json.loads(result.stdout)
    return sorted(
        (d["line"], d["severity"])
        for d in document["edits"] + document["diagnostics"]
        if d["path"].removeprefix("./") == path and d["code"] == "NPU101"
    )


def test_the_wrapper_and_the_optimizers_it_wraps_move_together(tmp_path: Path) -> None:
    (tmp_path / "optim_factory.py").write_text(FACTORY)
    wrapper = tmp_path / "lookahead.py"
    wrapper.write_text(LOOKAHEAD)
    cache = str(tmp_path / "cache")
    check = ("--cache-dir", cache, "--check", "--format", "json", ".")
    before = npu_migrate(tmp_path, *check)
    assert findings(before, "optim_factory.py") == [(7, "fixed")]
    assert findings(before, "lookahead.py") == [(4, "fixed")]  # gets its zero_grad

    wrapper.write_text(LOOKAHEAD_WITH_RESET)
    after = npu_migrate(tmp_path, *check)
    assert findings(after, "optim_factory.py") == [(7, "manual")]  # the factory, unchanged
    assert findings(after, "lookahead.py") == []

    wrapper.write_text(LOOKAHEAD)
    written = npu_migrate(tmp_path, "--cache-dir", cache, ".")
    assert written.returncode == 1, written.stdout + written.stderr
    assert "def zero_grad(self, *args, **kwargs):" in wrapper.read_text()
    assert "torch_npu.optim.NpuFusedSGD(" in (tmp_path / "optim_factory.py").read_text()
    again = npu_migrate(tmp_path, *check)
    assert findings(again, "optim_factory.py") == findings(again, "lookahead.py") == []


# DeepLearningExamples' FastSpeech: the optimizer is built by a function nested in `main` and
# handed to the trainer of another module as a value; the trainer passes what it builds to apex
# amp under a flag.
NESTED_FACTORY = """\
import torch

from trainer import Trainer


def main(model, args):
    def get_optimizer(net):
        return torch.optim.Adam(net.parameters(), lr=1e-3)

    Trainer(model, optimizer_fn=get_optimizer, use_amp=args.amp).fit()
"""
TRAINER = """\
from apex import amp


class Trainer:
    def __init__(self, model, optimizer_fn, use_amp=False):
        self.model, self.optimizer = model, optimizer_fn(model)
        if use_amp:
            self.model, self.optimizer = amp.initialize(self.model, self.optimizer)

    def fit(self):
        self.optimizer.step()
"""


def test_a_nested_factory_handed_to_amp_code_is_reported_until_amp_goes(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(NESTED_FACTORY)
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    cache = str(tmp_path / "cache")
    check = ("--cache-dir", cache, "--check", "--format", "json", ".")
    [(line, severity, message)] = npu101(npu_migrate(tmp_path, *check))
    assert (line, severity) == (8, "manual")
    assert "`get_optimizer` returns it and is used as a value (line 10)" in message
    assert "trainer.py calls apex's `amp.initialize`" in message

    # Without apex amp in the run, torch_npu's class is right wherever it is called.
    trainer.write_text(TRAINER.replace("amp.initialize(self.model, self.optimizer)", "(1, 2)"))
    [(line, severity, message)] = npu101(npu_migrate(tmp_path, *check))
    assert (line, severity) == (8, "fixed")
    assert "torch_npu.optim.NpuFusedAdam" in message
