"""`self.build_optimizer(...)` in a method: which methods it may reach
(migrator.analysis.receivers), and NPU101 following an optimizer a method returns into the
trainer that calls it through `self` (rules/optimizers/_method_callers.py), over copies of
fixtures/e2e/trainer_template through the real command line."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from _cli import run_npu_migrate

from migrator.analysis.parse import index_of_bytes
from migrator.analysis.receivers import related_methods, self_class

PROGRAM = Path(__file__).resolve().parent.parent / "fixtures" / "e2e" / "trainer_template"

CLASSES = """
class Base:
    def __init__(self):
        self.optimizer = self.build()

    def build(self):
        return 1


class Child(Base):
    def build(self):
        return 2


class GrandChild(Child):
    pass


class Unrelated:
    def build(self):
        return 3

    def run(self, other):
        other.build()
        self = other
        return self.build()

    @staticmethod
    def helper(self):
        return self.build()


class Mixin:
    def setup(self):
        self.optimizer = self.build()


class Mixed(Mixin, Base):
    pass
"""


def owners(source: str) -> dict[str, str | None]:
    """The receiver of each `<x>.build()` call, by its line: the class `self` is an instance of."""
    index = index_of_bytes(textwrap.dedent(source).encode(), "classes.py")
    assert index is not None
    found: dict[str, str | None] = {}
    for call in index.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "build":
            owner = self_class(index, func.value)
            found[f"{call.lineno}:{ast.unparse(func)}"] = owner.name if owner else None
    return found


def test_self_is_the_first_parameter_of_a_plain_method_never_rebound() -> None:
    assert owners(CLASSES) == {
        "4:self.build": "Base",
        "24:other.build": None,  # a parameter: any object
        "26:self.build": None,  # rebound to that parameter
        "30:self.build": None,  # a static method's first parameter is no instance
        "35:self.build": "Mixin",
    }


def test_a_call_through_self_reaches_the_methods_of_related_classes_only() -> None:
    index = index_of_bytes(textwrap.dedent(CLASSES).encode(), "classes.py")
    assert index is not None
    classes = {node.name: node for node in index.nodes(ast.ClassDef)}

    def reached(owner: str) -> list[str]:
        methods = related_methods(index, classes[owner], "build")
        return sorted(index.parent(method).name for method in methods)

    # `Base.__init__` may run on a Child: its override is reached too, Unrelated's never.
    assert reached("Base") == ["Base", "Child"]
    assert reached("GrandChild") == ["Base", "Child"]
    assert reached("Unrelated") == ["Unrelated"]
    # A mixin's call reaches the method its subclass gets from another base.
    assert reached("Mixin") == ["Base"]


def npu_migrate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--select", "NPU101", "--no-cache", *args, cwd=cwd, timeout=120)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(PROGRAM, root)
    return root


def messages(result: subprocess.CompletedProcess[str]) -> dict[tuple[str, int], str]:
    """(file name, line) -> the message: of an edit ("replaced ...") or of a report."""
    report = json.loads(result.stdout)
    found = report.get("edits", []) + report.get("diagnostics", [])
    return {(Path(d["path"]).name, d["line"]): d["message"] for d in found}


def test_the_library_template_is_the_caller_of_the_projects_override(repository: Path) -> None:
    result = npu_migrate(repository, "--check", "--format", "json", ".")
    assert result.returncode == 1, result.stderr
    found = messages(result)
    fused = [key for key, message in found.items() if message.startswith("replaced")]
    assert sorted(fused) == [("engine.py", 16), ("train_net.py", 26), ("train_net.py", 35)]
    assert "engine.py:12" in found[("train_net.py", 26)]  # DefaultTrainer.__init__ calls it


def test_a_template_that_hands_the_optimizer_on_keeps_the_override_unfused(
    repository: Path,
) -> None:
    engine = repository / "engine.py"
    engine.write_text(
        engine.read_text().replace(
            "        self.scheduler = torch.optim",
            "        register(self.optimizer)\n        self.scheduler = torch.optim",
        )
        + "\n\ndef register(optimizer):\n    optimizer.param_groups[0]['params'][0].grad = None\n"
    )
    result = npu_migrate(repository, "--check", "--format", "json", ".")
    found = messages(result)
    assert not found[("train_net.py", 26)].startswith("replaced"), found[("train_net.py", 26)]
    assert "register" in found[("train_net.py", 26)]
    assert not found[("engine.py", 17)].startswith("replaced")  # one line down: the call


def test_a_base_npu_migrate_cannot_find_leaves_the_callers_unknown(repository: Path) -> None:
    script = repository / "train_net.py"
    script.write_text(
        script.read_text().replace(
            "class OwnTrainer:", "from plugins import Mixin\n\n\nclass OwnTrainer(Mixin):"
        )
    )
    (repository / "plugins").mkdir()
    (repository / "plugins" / "__init__.py").write_text("from .mixin import *\n")
    result = npu_migrate(repository, "--check", "--format", "json", ".")
    message = messages(result)[("train_net.py", 38)]
    expected = (
        "`self` is a `DefaultTrainer`, and npu-migrate cannot follow every base of "
        "`OwnTrainer`, which may derive from it"
    )
    assert expected in message, message


def test_an_unrelated_trainer_with_a_method_of_that_name_is_not_a_caller(
    repository: Path,
) -> None:
    script = repository / "train_net.py"
    script.write_text(
        script.read_text()
        + textwrap.dedent(
            """

            class Evaluator(Exception):  # a builtin base derives from no class of the run
                def __init__(self, cfg, model):
                    self.model = model
                    self.optimizer = self.build_optimizer(cfg, model)
                    self.model.zero_grad()

                def build_optimizer(self, cfg, model):
                    return None
            """
        )
    )
    result = npu_migrate(repository, "--check", "--format", "json", ".")
    found = messages(result)
    assert found[("train_net.py", 26)].startswith("replaced"), found[("train_net.py", 26)]


MIXIN = """
class LoggingMixin:
    def reset(self, cfg):
        self.optimizer = self.build_optimizer(cfg)
        for group in self.optimizer.param_groups:
            for param in group["params"]:
                param.grad = None
"""


def test_a_mixin_calls_the_method_of_the_classes_mixing_it_in(repository: Path) -> None:
    """`LoggingMixin.reset` calls `self.build_optimizer()`, which no class of its own has: on a
    `LoggedTrainer(LoggingMixin, OwnTrainer)` of a third module that reaches OwnTrainer's
    method, so that caller's code counts; with no such class it reaches nothing of ours."""
    (repository / "mixins.py").write_text(MIXIN)
    alone = messages(npu_migrate(repository, "--check", "--format", "json", "."))
    assert alone[("train_net.py", 35)].startswith("replaced"), alone[("train_net.py", 35)]

    (repository / "mixed.py").write_text(
        "from mixins import LoggingMixin\nfrom train_net import OwnTrainer\n\n\n"
        "class LoggedTrainer(LoggingMixin, OwnTrainer):\n    pass\n"
    )
    mixed = messages(npu_migrate(repository, "--check", "--format", "json", "."))
    message = mixed[("train_net.py", 35)]
    assert not message.startswith("replaced"), message
    assert "its caller at mixins.py:4 uses it where `param.grad = None`" in message, message
    # The other trainers are not LoggingMixins: still fused.
    assert mixed[("train_net.py", 26)].startswith("replaced")
