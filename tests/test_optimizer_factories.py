"""Optimizer factories in other modules (NPU101/NPU102 with migrator.rules.optimizers._factories),
through the real command line over a small repository: a script that imports a factory from a
``utils/`` folder without ``__init__.py``, and a package whose trainer imports its solver's
factory with a relative import. Also the link stage of migrator.analysis.project that it is
built on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from _cli import run_npu_migrate

from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import Facts, Module, ProjectFiles, Resolved
from migrator.project_stage import ProjectBuilder
from migrator.rule import FixSafety, Linking, Rule

FILES = {
    "train.py": """\
import torch
from apex import amp

from utils.optim import create_optimizer


def main(args):
    model = torch.nn.Linear(8, 2)
    optimizer = create_optimizer(args, model)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    return model, optimizer
""",
    "utils/optim.py": """\
import torch


def create_optimizer(args, model):
    if args.opt == "sgd":
        return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    return optimizer
""",
    "pkg/__init__.py": "",
    "pkg/solver/__init__.py": "",
    "pkg/solver/build.py": """\
import torch


def build_optimizer(cfg, model):
    return torch.optim.Adam(model.parameters(), lr=cfg.lr)
""",
    "pkg/engine/__init__.py": "",
    "pkg/engine/trainer.py": """\
from apex import amp

from ..solver.build import build_optimizer


class Trainer:
    def __init__(self, cfg, model):
        self.optimizer = build_optimizer(cfg, model)
        self.model, self.optimizer = amp.initialize(model, self.optimizer, opt_level="O2")
""",
}


def npu_migrate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--select", "NPU101,NPU102", *args, cwd=cwd, timeout=120)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for relative, text in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {relative: (root / relative).read_text() for relative in FILES}


def findings(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int, str, str]]:
    document = json.loads(result.stdout)
    return sorted(
        (d["path"].removeprefix("./"), d["line"], d["code"], d["severity"])
        for d in document["edits"] + document["diagnostics"]
    )


def test_factory_and_caller_are_migrated_together_and_stay_migrated(repository: Path) -> None:
    first = npu_migrate(repository, "--no-cache", ".")
    assert first.returncode == 1, first.stdout + first.stderr  # files were rewritten
    after = snapshot(repository)
    assert "apex.optimizers.NpuFusedSGD(" in after["utils/optim.py"]
    assert "apex.optimizers.NpuFusedAdamW(" in after["utils/optim.py"]
    assert "torch.optim" not in after["utils/optim.py"]
    assert "apex.optimizers.NpuFusedAdam(" in after["pkg/solver/build.py"]
    assert 'opt_level="O1", combine_grad=True)' in after["train.py"]
    assert 'opt_level="O2", combine_grad=True)' in after["pkg/engine/trainer.py"]

    again = npu_migrate(repository, "--no-cache", ".")
    assert again.returncode == 0, again.stdout + again.stderr
    assert snapshot(repository) == after

    checked = npu_migrate(repository, "--no-cache", "--check", "--format", "json", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert findings(checked) == []


def test_the_messages_name_both_places(repository: Path) -> None:
    result = npu_migrate(repository, "--no-cache", "--check", "--format", "json", ".")
    assert result.returncode == 1, result.stderr
    messages = {
        (d["path"].removeprefix("./"), d["line"]): d["message"]
        for d in json.loads(result.stdout)["edits"]
    }
    assert "call at train.py:9, `amp.initialize` at train.py:10" in messages[("utils/optim.py", 6)]
    assert "`create_optimizer` (utils/optim.py:4)" in messages[("train.py", 10)]
    assert "`build_optimizer` (pkg/solver/build.py:4)" in messages[("pkg/engine/trainer.py", 9)]


def test_a_caller_that_changes_rechecks_the_unchanged_factory(
    repository: Path, tmp_path: Path
) -> None:
    """The linked facts are part of the cache key: the factory's file did not change, but a
    caller now uses O3, so the factory's optimizers must not become NPU fused."""
    cache = str(tmp_path / "cache")
    before = npu_migrate(repository, "--cache-dir", cache, "--check", "--format", "json", ".")
    assert ("utils/optim.py", 6, "NPU101", "fixed") in findings(before)
    train = repository / "train.py"
    train.write_text(train.read_text().replace('opt_level="O1"', 'opt_level="O3"'))
    after = npu_migrate(repository, "--cache-dir", cache, "--check", "--format", "json", ".")
    assert ("utils/optim.py", 6, "NPU101", "manual") in findings(after)
    assert ("utils/optim.py", 6, "NPU101", "fixed") not in findings(after)


def test_worker_processes_get_the_linked_facts(repository: Path) -> None:
    for number in range(20):  # enough files for the worker pool
        (repository / f"script_{number:02}.py").write_text(FILES["train.py"])
    result = npu_migrate(
        repository, "--no-cache", "--check", "--jobs", "2", "--format", "json", "."
    )
    fixed = [f for f in findings(result) if f[2] == "NPU102" and f[3] == "fixed"]
    assert len(fixed) == 22  # every script, train.py and the trainer


# -- the link stage of migrator.analysis.project ------------------------------------------------


class _Summarising(Rule):
    """A rule with project facts whose link fails: a bug in a rule's link must cost the files
    it summarised, not the run."""

    CODE = "NPU998"
    NAME = "test-broken-link"
    SUMMARY = "test"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ()
    PROJECT_TRIGGER = ("initialize",)

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        return {"seen": True}

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        raise KeyError("boom")


def test_a_failing_link_is_an_error_of_the_files_it_summarised() -> None:
    builder = ProjectBuilder((_Summarising,))
    builder.add_python("train.py", b"amp.initialize(model)\n")
    builder.add_python("other.py", b"print(1)\n")
    facts = builder.build(read=lambda path: None)
    assert facts.summaries("NPU998") == {"train.py": {"seen": True}}
    assert not facts.linked
    failed = builder.left_untouched(facts)
    assert list(failed) == ["train.py"]
    assert "KeyError: 'boom'" in failed["train.py"] and "left untouched" in failed["train.py"]


class _FailingSummary(_Summarising):
    """A rule whose summary fails on one file: the files that may depend on its facts must be
    left untouched as well, not planned as if it held none."""

    CODE = "NPU997"
    NAME = "test-broken-summary"

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        if module.path.endswith("broken.py"):
            raise TypeError("boom")
        return {"seen": True}

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        return None


def test_a_failing_summary_leaves_the_files_that_see_it_untouched(tmp_path: Path) -> None:
    layout = {
        "a/setup.py": "",
        "a/train.py": "from models.broken import net\namp.initialize(net)\n",
        "a/models/__init__.py": "",
        "a/models/broken.py": "opt = amp.initialize(1)\n",
        "a/models/other.py": "amp.initialize(2)\n",
        "b/setup.py": "",
        "b/train.py": "amp.initialize(3)\n",  # a sibling project: it cannot import a's files
    }
    for relative, text in layout.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    builder = ProjectBuilder((_FailingSummary,))
    paths = [str(tmp_path / relative) for relative in layout if relative.endswith(".py")]
    for path in paths:
        source = Path(path).read_bytes()
        if path.endswith("broken.py"):
            with pytest.raises(TypeError):
                builder.add_python(path, source)
        else:
            builder.add_python(path, source)
    facts = builder.build(read=lambda path: None)
    untouched = builder.left_untouched(facts)
    by_name = {str(Path(path).relative_to(tmp_path)): text for path, text in untouched.items()}
    assert sorted(by_name) == [
        "a/models/__init__.py",
        "a/models/other.py",
        "a/setup.py",
        "a/train.py",
    ]
    message = by_name["a/train.py"]
    assert "project summary of" in message and "broken.py" in message
    assert "NPU997: TypeError: boom" in message


def test_project_files_resolve_every_file_and_search_their_text(repository: Path) -> None:
    paths = [str(repository / relative) for relative in FILES]
    files = ProjectFiles(paths)
    build = files.resolve("..solver.build.build_optimizer", paths[-1])  # from pkg/engine/trainer
    assert isinstance(build, Resolved) and build.module.name == "pkg.solver.build"
    assert build.rest == ("build_optimizer",)
    utils = files.resolve("utils.optim.create_optimizer", str(repository / "train.py"))
    assert isinstance(utils, Resolved) and utils.module.path.endswith("utils/optim.py")
    found = files.containing(["create_optimizer", "build_optimizer", "missing"])
    assert [Path(p).name for p in found["create_optimizer"]] == ["train.py", "optim.py"]
    assert [Path(p).name for p in found["build_optimizer"]] == ["build.py", "trainer.py"]
    assert found["missing"] == []
    index = files.index(str(repository / "utils/optim.py"))
    assert index is not None and index is files.index(str(repository / "utils/optim.py"))
    files.release()
