"""Names of attributes an optimizer is stored in or read from, matched across modules (see
``attribute_stores`` and ``amp_attributes`` in the optimizers' call sites)."""

import ast
import json
from pathlib import Path

import pytest
from _cli import run_npu_migrate

from migrator.rules.optimizers._call_sites import name_pattern, patterns_meet


@pytest.mark.parametrize(
    ("written", "pattern"),
    [
        ('"optimizer_G"', "optimizer_G"),
        ('"optimizer_D_T" + str(s)', "optimizer_D_T*"),
        ('f"optimizer_{name}"', "optimizer_*"),
        ("name", "*"),
        ('prefix + "_opt"', "*"),
        ("3", "*"),
    ],
)
def test_name_pattern(written: str, pattern: str) -> None:
    assert name_pattern(ast.parse(written, mode="eval").body) == pattern


@pytest.mark.parametrize(
    ("first", "second", "meet"),
    [
        ("optimizer_G", "optimizer_G", True),
        ("optimizer_G", "optimizer_D", False),
        ("optimizer_D_T*", "optimizer_D_T0", True),
        ("optimizer_D_T0", "optimizer_D_T*", True),
        ("optimizer_D_T*", "optimizer_G", False),
        ("optimizer_*", "optimizer_D_T*", True),
        ("optimizer_D*", "scheduler_*", False),
        ("*", "optimizer_G", True),
        ("optimizer_G", "*", True),
    ],
)
def test_patterns_meet(first: str, second: str, meet: bool) -> None:
    assert patterns_meet(first, second) is meet


MODEL = """\
import torch


class Model:
    def initialize(self, lr):
        self.net = torch.nn.Linear(2, 2).cuda()
        self.aux = torch.nn.Linear(2, 2).cuda()
        self.optimizer_G = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.optimizer_aux = torch.optim.SGD(self.aux.parameters(), lr=lr)
"""

TRAIN = """\
from apex import amp
from model import Model


def create(opt):
    model = Model()
    model.initialize(opt.lr)
    if opt.fp16:
        model.net, optimizer = amp.initialize(model.net, model.optimizer_G, opt_level="O1")
    else:
        optimizer = model.optimizer_G
    return model, optimizer
"""


def test_optimizer_that_another_module_hands_to_amp_stays(tmp_path: Path) -> None:
    """vid2vid's shape through the command line: the optimizer the other module reads is
    reported, not given torch_npu's class (which steps stale gradients under apex amp); the
    one no module with amp reads is fused."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN)
    done = run_npu_migrate(
        "--no-cache", "--select", "NPU101", "--format", "json", ".", cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr  # files changed, findings left
    report = json.loads(done.stdout)
    stored = [d for d in report["diagnostics"] if d["line"] == 8 and d["path"].endswith("model.py")]
    assert stored and "stored in `self.optimizer_G` (line 8), and train.py" in stored[0]["message"]
    migrated = (tmp_path / "model.py").read_text()
    assert "self.optimizer_G = torch.optim.Adam(" in migrated
    assert "self.optimizer_aux = torch_npu.optim.NpuFusedSGD(" in migrated


WRAPPER = """\
import torch


class ClassySGD:
    def prepare(self, model, lr):
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
"""

TASK = """\
import apex
from wrapper import ClassySGD


class ClassificationTask:
    def prepare(self, model, amp_args):
        self.base_model = model.cuda()
        self.optimizer = ClassySGD()
        self.optimizer.prepare(self.base_model, 0.1)
        if amp_args is not None:
            self.base_model, self.optimizer.optimizer = apex.amp.initialize(
                self.base_model, self.optimizer.optimizer, **amp_args
            )
"""


def test_optimizer_inside_a_wrapper_that_a_task_hands_to_amp(tmp_path: Path) -> None:
    """ClassyVision's shape: the task passes its wrapper's `.optimizer` (built in another
    module's `self.optimizer = torch.optim.SGD(...)`) to apex's amp under a flag. The task's
    own `self.optimizer` (another class's attribute) and the wrapper's both are read there."""
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    (tmp_path / "task.py").write_text(TASK)
    done = run_npu_migrate(
        "--no-cache", "--select", "NPU101", "--format", "json", ".", cwd=tmp_path
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout[-2000:]
    messages = [d["message"] for d in report["diagnostics"] if d["path"].endswith("wrapper.py")]
    assert any("stored in `self.optimizer` (line 6), and task.py" in m for m in messages)
    assert (tmp_path / "wrapper.py").read_text() == WRAPPER
