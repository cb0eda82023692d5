"""NPU101 follows an optimizer that a method returns into its callers
(migrator.rules.optimizers._method_callers), through the real command line over copies of
fixtures/e2e/method_gpt, a minimal GPT repository's two modules: the constructor's file and its
caller's are rewritten by the same run, or neither is."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _cli import run_npu_migrate

PROGRAM = Path(__file__).resolve().parent.parent / "fixtures" / "e2e" / "method_gpt"
FUSED = "torch_npu.optim.NpuFusedAdamW("
UNFIXED = "optimizer.zero_grad(set_to_none=True)"


def npu_migrate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--select", "NPU101", "--no-cache", *args, cwd=cwd, timeout=120)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "gpt"
    shutil.copytree(PROGRAM, root)
    return root


def texts(root: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(root.glob("*.py"))}


def manual_messages(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [d["message"] for d in json.loads(result.stdout)["diagnostics"]]


def test_the_method_and_its_caller_are_migrated_together_and_stay_migrated(
    repository: Path,
) -> None:
    before = texts(repository)
    first = npu_migrate(repository, ".")
    assert first.returncode == 1, first.stdout + first.stderr  # files were rewritten
    after = texts(repository)
    assert FUSED in after["model.py"] and "torch.optim.AdamW(groups" not in after["model.py"]
    assert "optimizer.zero_grad()" in after["train.py"] and UNFIXED not in after["train.py"]
    # Only the zero_grad line of the caller changes.
    changed = [
        (old, new)
        for old, new in zip(
            before["train.py"].splitlines(), after["train.py"].splitlines(), strict=True
        )
        if old != new
    ]
    assert changed == [(f"    {UNFIXED}", "    optimizer.zero_grad()")]

    again = npu_migrate(repository, ".")
    assert again.returncode == 0, again.stdout + again.stderr
    assert texts(repository) == after


def test_a_run_without_the_caller_keeps_the_report(repository: Path) -> None:
    """Given model.py alone, the caller is outside the run: nothing is rewritten."""
    before = texts(repository)
    result = npu_migrate(repository, "--check", "--format", "json", "model.py")
    assert result.returncode == 1, result.stderr
    assert texts(repository) == before
    (message,) = manual_messages(result)
    assert "no file of this run calls it" in message


def test_a_caller_whose_receiver_may_be_another_class_blocks_both_files(
    repository: Path,
) -> None:
    (repository / "finetune.py").write_text(
        "from model import GPT, GPTConfig\n"
        "from other import Model\n\n"
        "model = GPT(GPTConfig()) if input() else Model()\n"
        "optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')\n"
    )
    (repository / "other.py").write_text(
        "class Model:\n    def configure_optimizers(self, *args):\n        return None\n"
    )
    before = texts(repository)
    result = npu_migrate(repository, ".")
    assert result.returncode == 0, result.stderr  # nothing rewritten
    assert texts(repository) == before
    check = npu_migrate(repository, "--check", "--format", "json", ".")
    (message,) = manual_messages(check)
    assert "`model` may be a `GPT` or an instance of another class" in message


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        pytest.param(
            "finetune.py",
            "from model import GPT, GPTConfig\n\n\n"
            "class Tuned(GPT):\n"
            "    def configure_optimizers(self, *args):\n"
            "        return super().configure_optimizers(*args)\n",
            "`super()` is not a `GPT` npu-migrate can see built",
            id="super",
        ),
        pytest.param(
            "hooks.py",
            "def build(model):\n    return getattr(model, 'configure_optimizers')(0.1)\n",
            "`'configure_optimizers'` at hooks.py:2 may name it in a lookup",
            id="getattr",
        ),
    ],
)
def test_a_use_out_of_sight_blocks_both_files(
    repository: Path, name: str, text: str, reason: str
) -> None:
    (repository / name).write_text(text)
    before = texts(repository)
    check = npu_migrate(repository, "--check", "--format", "json", ".")
    assert texts(repository) == before
    (message,) = manual_messages(check)
    assert reason in message


def test_a_look_alike_method_of_another_class_is_not_a_caller(repository: Path) -> None:
    """A class that gets a method of the same name from a base of its own: its caller stays as
    written, and it does not stand in the way of GPT's callers."""
    (repository / "other.py").write_text(
        "class Base:\n"
        "    def __init__(self, optimizer):\n"
        "        self.optimizer = optimizer\n\n"
        "    def configure_optimizers(self):\n"
        "        return self.optimizer\n\n\n"
        "class Trainer(Base):\n"
        "    pass\n"
    )
    look_alike = (
        "from other import Trainer\n\n"
        "trainer = Trainer(None)\n"
        "optimizer = trainer.configure_optimizers()\n"
        "optimizer.zero_grad(set_to_none=True)\n"
    )
    (repository / "probe.py").write_text(look_alike)
    npu_migrate(repository, ".")
    after = texts(repository)
    assert FUSED in after["model.py"]
    assert UNFIXED not in after["train.py"]
    assert after["probe.py"] == look_alike


def test_a_caller_left_alone_by_skip_file_keeps_the_constructor(repository: Path) -> None:
    train = repository / "train.py"
    train.write_text("# npu-migrate: skip-file\n" + train.read_text())
    before = texts(repository)
    result = npu_migrate(repository, "--check", "--format", "json", ".")
    assert result.returncode == 1, result.stderr
    assert texts(repository) == before
    (message,) = manual_messages(result)
    assert "train.py, which calls it, is left alone by `skip-file`" in message


def test_a_sibling_project_of_a_monorepo_does_not_hold_the_class(tmp_path: Path) -> None:
    """Ascend's ModelZoo holds hundreds of projects side by side; a `configure_optimizers` call
    on a parameter in another project (its own `setup.py`, a folder the GPT project's imports
    never search) neither calls this class's method nor blocks it."""
    monorepo = tmp_path / "zoo"
    gpt = monorepo / "GPT_for_PyTorch"
    shutil.copytree(PROGRAM, gpt)
    other = monorepo / "Detector_for_PyTorch"
    other.mkdir()
    for project in (gpt, other):
        (project / "setup.py").write_text("from setuptools import setup\n\nsetup()\n")
    (other / "train_detector.py").write_text(
        "def fit(model, batches):\n"
        "    optimizer = model.configure_optimizers()\n"
        "    for batch in batches:\n"
        "        model(batch).sum().backward()\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad(set_to_none=True)\n"
    )
    result = npu_migrate(monorepo, ".")
    assert result.returncode == 1, result.stdout + result.stderr
    assert FUSED in (gpt / "model.py").read_text()
    assert UNFIXED not in (gpt / "train.py").read_text()
    assert UNFIXED in (other / "train_detector.py").read_text()  # not a caller: left alone

    # In the same project, that call's receiver is a parameter: it may be a GPT, so it blocks.
    shutil.move(other / "train_detector.py", tmp_path / "train_detector.py")
    blocked = tmp_path / "blocked"
    shutil.copytree(PROGRAM, blocked)
    shutil.copy(tmp_path / "train_detector.py", blocked / "train_detector.py")
    before = texts(blocked)
    assert npu_migrate(blocked, ".").returncode == 0
    assert texts(blocked) == before
