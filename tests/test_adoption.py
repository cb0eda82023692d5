"""Adopting ``--check`` on a repository with findings left: baselines, ``--add-suppressions`` and
``--statistics``, through the real command line.

The scenario test is the one of the issue, as a user runs it: each step is a subprocess of the
installed ``npu-migrate``. The other tests call :func:`migrator.cli.main` in-process. The rules
are narrowed to the device rules and NPU920 (``DataParallel``), so that rules added later do not
change what these tests expect.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _cli import Cli, in_process, run_npu_migrate

CONFIG = '[tool.npu-migrate]\nselect = ["NPU3", "NPU920"]\n'
BASELINE_CONFIG = CONFIG + 'baseline = "npu-migrate-baseline.json"\n'
TRAIN = (
    "import torch\n"
    "import torch.nn as nn\n"
    "from model import Net, wrap\n"
    "\n"
    "model = Net().cuda()\n"
    "model = nn.DataParallel(model)\n"
    'device = torch.device("cuda:0")\n'
)
MODEL = (
    "import torch.nn as nn\n"
    "\n"
    "\n"
    "class Net(nn.Module):\n"
    "    pass\n"
    "\n"
    "\n"
    "def wrap(net):\n"
    "    return nn.DataParallel(net)\n"
    "\n"
    "\n"
    "def wrap_again(net):\n"
    "    return nn.DataParallel(net)\n"
)


def npu_migrate(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command in ``project``, with a result cache of its own next to it."""
    cache = {"XDG_CACHE_HOME": str(project.parent / "cache")}
    return run_npu_migrate(*args, cwd=project, extra_env=cache)


def npu920_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if " NPU920 [" in line]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(CONFIG)
    (folder / "train.py").write_text(TRAIN)
    (folder / "model.py").write_text(MODEL)
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "loop.py").write_text(
        "import torch\n\nfor step in range(3):\n    torch.cuda.synchronize()\n"
    )
    return folder


def test_adopting_the_check_with_a_baseline_then_with_suppressions(project: Path) -> None:
    migrated = npu_migrate(project, ".")
    assert migrated.returncode == 1, migrated.stderr
    assert "torch.npu.synchronize()" in (project / "pkg" / "loop.py").read_text()
    assert npu920_lines(npu_migrate(project, "--check", ".").stdout) != []

    (project / "pyproject.toml").write_text(BASELINE_CONFIG)
    failing = npu_migrate(project, "--check", ".")
    assert failing.returncode == 2  # the configuration names a baseline not written yet
    assert "baseline npu-migrate-baseline.json does not exist" in failing.stderr

    written = npu_migrate(project, "--check", "--write-baseline", ".")
    assert written.returncode == 0, written.stdout + written.stderr
    assert "wrote baseline npu-migrate-baseline.json (3 finding(s))" in written.stdout
    baseline = json.loads((project / "npu-migrate-baseline.json").read_text())
    entries = [(f["path"], f["code"], f["text"], f["occurrence"]) for f in baseline["findings"]]
    assert entries == [
        ("model.py", "NPU920", "return nn.DataParallel(net)", 0),
        ("model.py", "NPU920", "return nn.DataParallel(net)", 1),
        ("train.py", "NPU920", "model = nn.DataParallel(model)", 0),
    ]

    clean = npu_migrate(project, "--check", ".")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert npu920_lines(clean.stdout) == []
    assert "3 known finding(s) not shown, 0 new, 0 stale entries" in clean.stdout

    # Edits elsewhere move every finding's line: the fingerprints do not depend on it.
    model = project / "model.py"
    model.write_text('"""The model."""\n\n' + model.read_text())
    assert npu_migrate(project, "--check", ".").returncode == 0

    # A new `.cuda()` and a third identical DataParallel line: exit 1, only they are reported.
    train = project / "train.py"
    train.write_text(train.read_text() + "extra = torch.zeros(2).cuda()\n")
    model.write_text(
        model.read_text() + "\n\ndef wrap_thrice(net):\n    return nn.DataParallel(net)\n"
    )
    new = npu_migrate(project, "--check", ".")
    assert new.returncode == 1
    assert "would migrate ./train.py (NPU301)" in new.stdout
    assert [line.split(": NPU920")[0] for line in npu920_lines(new.stdout)] == ["./model.py:19:12"]
    assert "3 known finding(s) not shown, 1 new, 0 stale entries" in new.stdout

    # Fixed: the migration rewrites the `.cuda()`, the third wrap goes again.
    assert npu_migrate(project, ".").returncode == 1
    model.write_text(
        model.read_text().replace(
            "\n\ndef wrap_thrice(net):\n    return nn.DataParallel(net)\n", ""
        )
    )
    fixed = npu_migrate(project, "--check", ".")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "stale baseline entry" not in fixed.stdout
    assert "0 stale entries" in fixed.stdout

    # A finding settled by hand: its entry is stale, listed, and --write-baseline drops it.
    model.write_text(
        model.read_text().replace("    return nn.DataParallel(net)\n", "    return net\n", 1)
    )
    shrunk = npu_migrate(project, "--check", ".")
    assert shrunk.returncode == 0
    assert (
        "stale baseline entry: model.py: NPU920 at `return nn.DataParallel(net)` (occurrence 2)"
        in shrunk.stdout
    )
    rewritten = npu_migrate(project, "--check", "--write-baseline", ".")
    assert "wrote baseline npu-migrate-baseline.json (2 finding(s))" in rewritten.stdout
    assert "stale baseline entry" not in npu_migrate(project, "--check", ".").stdout

    # Or suppress every finding left in the code itself, and the check passes without baseline.
    added = npu_migrate(project, "--add-suppressions", "--no-baseline", ".")
    assert added.returncode == 0, added.stdout + added.stderr
    assert "added suppression comments for 2 finding(s) in 2 file(s)" in added.stdout
    assert "model = nn.DataParallel(model)  # npu-migrate: ignore[NPU920]\n" in train.read_text()
    assert npu_migrate(project, "--check", "--no-baseline", ".").returncode == 0
    before = {path: path.read_bytes() for path in project.rglob("*.py")}
    again = npu_migrate(project, "--add-suppressions", "--no-baseline", ".")
    assert again.returncode == 0
    assert "added suppression comments for 0 finding(s) in 0 file(s)" in again.stdout
    assert {path: path.read_bytes() for path in project.rglob("*.py")} == before


# -- in-process: options, formats, errors ----------------------------------------------------------


@pytest.fixture
def cli(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    monkeypatch.setenv("XDG_CACHE_HOME", str(project.parent / "cache"))
    monkeypatch.chdir(project)
    (project / "pyproject.toml").write_text('[tool.npu-migrate]\nselect = ["NPU3", "NPU920"]\n')

    return in_process(capsys, "-j", "1")


def test_baseline_errors_are_usage_errors(cli: Cli, project: Path) -> None:
    code, _, err = cli("--check", "--baseline", "missing.json", ".")
    assert code == 2 and "baseline missing.json does not exist" in err
    (project / "bad.json").write_text("{not json")
    code, _, err = cli("--check", "--baseline", "bad.json", ".")
    assert code == 2 and "bad.json is not valid JSON" in err
    (project / "other.json").write_text('{"schema_version": 1, "findings": [{"path": 1}]}')
    code, _, err = cli("--check", "--baseline", "other.json", ".")
    assert code == 2 and "not an npu-migrate baseline" in err
    code, _, err = cli("--check", "--write-baseline", ".")
    assert code == 2 and "--write-baseline needs a file" in err
    (project / "pyproject.toml").write_text("[tool.npu-migrate]\nbaseline = 3\n")
    code, _, err = cli("--check", ".")
    assert code == 2 and "`baseline` must be a file name" in err


def test_every_format_reports_only_new_findings(cli: Cli, project: Path) -> None:
    assert cli(".")[0] == 1  # migrate; the DataParallel findings stay
    assert cli("--check", "--baseline", "b.json", "--write-baseline", ".")[0] == 0
    (project / "late.py").write_text("import torch\nnet = torch.nn.DataParallel(net)\n")
    code, out, _ = cli("--check", "--baseline", "b.json", "--format", "json", ".")
    document = json.loads(out)
    assert code == 1 == document["exit_code"]
    assert [(d["path"], d["code"]) for d in document["diagnostics"]] == [("./late.py", "NPU920")]
    assert document["baseline"] == {"file": "b.json", "baselined": 3, "new": 1, "stale": []}
    code, out, _ = cli("--check", "--baseline", "b.json", "--format", "sarif", ".")
    results = json.loads(out)["runs"][0]["results"]
    assert code == 1
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results] == [
        "late.py"
    ]
    code, out, _ = cli("--check", "--baseline", "b.json", "--format", "github", ".")
    assert code == 1 and out.count("::error") == 1 and "file=late.py" in out
    code, _, _ = cli("--check", "--baseline", "b.json", "--csv-dir", "review", ".")
    assert code == 1
    # A run over one file neither reports the other files' entries stale nor drops them.
    code, out, _ = cli("--check", "--baseline", "b.json", "--write-baseline", "late.py")
    assert code == 0 and "wrote baseline b.json (4 finding(s))" in out
    code, out, _ = cli("--check", "--baseline", "b.json", "--select", "NPU3", ".")
    assert code == 0 and "0 stale entries" in out  # NPU920's entries are not this run's to judge


def test_a_deleted_file_leaves_stale_entries(cli: Cli, project: Path) -> None:
    assert cli(".")[0] == 1
    assert cli("--check", "--baseline", "b.json", "--write-baseline", ".")[0] == 0
    (project / "model.py").unlink()
    (project / "train.py").write_text("import torch\n")
    code, out, _ = cli("--check", "--baseline", "b.json", ".")
    assert code == 0
    assert out.count("stale baseline entry: model.py: NPU920") == 2
    assert "stale baseline entry: train.py: NPU920" in out


def test_baseline_in_the_default_mode_reads_the_lines_before_the_rewrite(
    cli: Cli, project: Path
) -> None:
    """The default mode rewrites files, moving lines (`import torch_npu` is added): the
    fingerprints are still those of the lines the diagnostics point at, before the rewrite."""
    assert cli("--check", "--baseline", "b.json", "--write-baseline", ".")[0] == 1  # fixes left
    code, out, _ = cli("--baseline", "b.json", ".")
    assert code == 1  # files changed
    assert "3 known finding(s) not shown, 0 new, 0 stale entries" in out
    assert "import torch_npu" in (project / "train.py").read_text()
    code, out, _ = cli("--check", "--baseline", "b.json", ".")
    assert code == 0 and "0 new, 0 stale" in out


def test_statistics(cli: Cli) -> None:
    code, out, _ = cli("--check", "--statistics", ".")
    assert code == 1
    assert out.splitlines() == [
        "3  NPU920  data-parallel   3 manual",
        "1  NPU301  cuda-method     1 fixable",
        "1  NPU302  torch-cuda-api  1 fixable",
        "1  NPU303  device-string   1 fixable",
    ]
    code, out, _ = cli("--check", "--statistics", "--format", "json", ".")
    assert json.loads(out)[0] == {
        "code": "NPU920",
        "name": "data-parallel",
        "count": 3,
        "fixed": 0,
        "manual": 3,
        "info": 0,
    }
    code, out, _ = cli("--statistics", ".")
    assert code == 1 and "1  NPU301  cuda-method     1 fixed" in out
    code, _, err = cli("--check", "--statistics", "--format", "sarif", ".")
    assert code == 2 and "--statistics prints text or JSON" in err


def test_add_suppressions_reports_what_it_cannot_suppress(cli: Cli, project: Path) -> None:
    (project / "docs.py").write_text(
        "import torch\n"
        "net = torch.nn.DataParallel(\n"
        "    net)\n"
        "net = torch.nn.DataParallel(net) \\\n"
        "    if True else net\n"
    )
    code, out, _ = cli("--add-suppressions", "--select", "NPU920", ".")
    assert code == 1  # the backslash line still fails --check
    assert "cannot suppress ./docs.py:4:7: NPU920: the line is continued with a backslash" in out
    assert (project / "docs.py").read_text().splitlines()[1] == (
        "net = torch.nn.DataParallel(  # npu-migrate: ignore[NPU920]"
    )
    code, out, _ = cli("--check", "--select", "NPU920", ".")
    assert code == 1 and [line.split(": ")[0] for line in npu920_lines(out)] == ["./docs.py:4:7"]


@pytest.mark.parametrize(
    "args",
    [
        ["--add-suppressions", "--check", "."],
        ["--add-suppressions", "--diff", "."],
        ["--write-baseline", "--no-baseline", "--baseline", "b.json", "."],
        ["--report-dir", "out", "--check", "."],
    ],
)
def test_option_conflicts_are_usage_errors(cli: Cli, args: list[str]) -> None:
    code, _, err = cli(*args)
    assert code == 2 and err


def test_a_notebook_finding_is_recorded_by_its_cell_line(cli: Cli, project: Path) -> None:
    def notebook(*cells: str) -> str:
        return json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "execution_count": None,
                        "id": f"cell-{number}",
                        "metadata": {},
                        "outputs": [],
                        "source": text,
                    }
                    for number, text in enumerate(cells)
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            },
            indent=1,
        )

    path = project / "explore.ipynb"
    path.write_text(notebook("import torch", "net = torch.nn.DataParallel(net)"))
    code, out, err = cli(".")
    assert code == 1, out + err
    assert cli("--check", "--baseline", "b.json", "--write-baseline", ".")[0] == 0
    entries = json.loads((project / "b.json").read_text())["findings"]
    assert {"path": "explore.ipynb", "text": "net = torch.nn.DataParallel(net)"}.items() <= next(
        entry for entry in entries if entry["path"] == "explore.ipynb"
    ).items()
    # A new cell above moves the finding to another cell: it is still the recorded one.
    path.write_text(notebook("import torch", "x = 1\ny = 2", "net = torch.nn.DataParallel(net)"))
    code, out, _ = cli("--check", "--baseline", "b.json", ".")
    assert code == 0 and "0 new, 0 stale" in out
