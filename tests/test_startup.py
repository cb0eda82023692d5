"""Start-up imports only what the run needs, as CPython's own tests guard its start-up.

A pre-commit hook runs ``npu-migrate`` on a few staged files, where the interpreter's start-up
and the imports are most of the cost. Each test runs the real command (``python -X importtime
-m migrator``) in a fresh interpreter and reads, from what ``-X importtime`` prints, every
module it imported: libcst only when a file is rewritten, rich only for a table drawn on a
terminal, the process pool only when workers run, the report formats and ``verify`` only when
asked for. No timing is asserted; the benchmark (bench/bench_startup.py) measures the cost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import run_command

ROOT = Path(__file__).resolve().parents[1]

CLEAN = "import os\n\n\ndef add(a, b):\n    return a + b\n"
NEEDS_A_FIX = "import torch\n\nx = torch.zeros(3).cuda()\n"

# Never imported by a --check (or --diff, or a rewrite) of files that need nothing.
NOT_FOR_A_CLEAN_RUN = (
    "rich",  # tables on a terminal, the progress bar of long runs
    "multiprocessing",  # the worker pool
    "pathspec",  # --exclude patterns, .gitignore files, shell-script patterns
    "migrator.pool",
    "migrator.rewriter",
    "migrator.slices",
    "migrator.imports",
    "migrator.formats.sarif",
    "migrator.formats.github",
    "migrator.formats.msfmk_csv",
    "migrator.verify",
    "migrator.adopt",  # --add-suppressions, baselines, the HTML page
    "migrator.baseline",
    "migrator.suppress_writer",
    "migrator.formats",  # every report format, and the project paths they show
)


def imported_modules(*arguments: str, cwd: Path) -> set[str]:
    """Every module a fresh ``python -X importtime ARGUMENTS`` imported."""
    environment = {**os.environ, "NO_COLOR": "1"}
    environment.pop("FORCE_COLOR", None)
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert completed.returncode in (0, 1), completed.stderr[-3000:]
    found = set()
    for line in completed.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                found.add(name)
    return found


def loaded(modules: set[str], name: str) -> bool:
    """Whether ``name`` or one of its submodules was imported (``-X importtime`` leaves out the
    line of a package whose ``__init__`` imports itself back, as libcst's does)."""
    return any(module == name or module.startswith(name + ".") for module in modules)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "needs_a_fix.py").write_text(NEEDS_A_FIX)
    return tmp_path


def test_the_measurement_sees_the_imports(project: Path) -> None:
    """The reading of ``-X importtime`` finds what a run imports: a file with a fix makes the
    rewrite import libcst and the rewriting modules."""
    modules = imported_modules(
        "-m", "migrator", "--diff", "--no-cache", "needs_a_fix.py", cwd=project
    )
    assert {"migrator.cli", "migrator.engine", "migrator.rewriter"} <= modules
    assert loaded(modules, "libcst")


@pytest.mark.parametrize("mode", [["--check"], ["--diff"], []], ids=["check", "diff", "write"])
def test_a_clean_run_imports_no_table_pool_format_or_rewriter(
    project: Path, mode: list[str]
) -> None:
    modules = imported_modules("-m", "migrator", *mode, "--no-cache", "clean.py", cwd=project)
    assert "migrator.registry" in modules and "migrator.engine" in modules
    assert [name for name in NOT_FOR_A_CLEAN_RUN if loaded(modules, name)] == []


def test_a_clean_check_imports_no_libcst(project: Path) -> None:
    modules = imported_modules(
        "-m", "migrator", "--check", "--no-cache", "-q", "clean.py", cwd=project
    )
    assert not loaded(modules, "libcst")


def rule_modules() -> dict[str, Path]:
    """Every module of rules/ (installed as migrator.rules), the shared ``_`` ones included."""
    found = {}
    for path in sorted((ROOT / "rules").rglob("*.py")):
        parts = path.relative_to(ROOT / "rules").with_suffix("").parts
        if parts[-1] != "__init__":
            found[".".join(("migrator", "rules", *parts))] = path
    return found


def rule_module_cases() -> list[object]:
    return [pytest.param(name, id=name.removeprefix("migrator.rules.")) for name in rule_modules()]


@pytest.mark.parametrize("module", rule_module_cases())
def test_a_rule_module_imports_without_libcst(module: str, tmp_path: Path) -> None:
    """Rules read libcst through migrator.lazy_imports inside their edits only."""
    modules = imported_modules("-c", f"import {module}", cwd=tmp_path)
    assert module in modules
    assert not loaded(modules, "libcst")


def test_the_cli_module_imports_neither_libcst_nor_rich(tmp_path: Path) -> None:
    modules = imported_modules("-c", "import migrator.cli", cwd=tmp_path)
    assert not loaded(modules, "libcst") and not loaded(modules, "rich")


def modules_after_a_run(*arguments: str, cwd: Path) -> set[str]:
    """``sys.modules`` once a run of the command (in a fresh interpreter) is over."""
    program = (
        "import json, sys\n"
        "from migrator.cli import main\n"
        f"code = main({list(arguments)!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    completed = run_command([sys.executable, "-c", program], cwd=cwd, timeout=120)
    assert completed.returncode in (0, 1), completed.stderr[-3000:]
    return set(json.loads(completed.stdout.splitlines()[-1]))


def test_a_clean_check_imports_no_rule(project: Path) -> None:
    """No rule module, nor a module they share, for a file that holds no rule's trigger: the
    pre-scan reads the triggers from the registry's manifest."""
    modules = modules_after_a_run("--check", "--no-cache", "-q", "clean.py", cwd=project)
    assert "migrator.engine" in modules
    assert sorted(name for name in modules if name.startswith("migrator.rules.")) == []


def test_a_file_imports_only_the_rules_it_triggers(project: Path) -> None:
    """A file that holds only NPU924's trigger (``nvtx``) imports that rule's module and no
    other rule's."""
    (project / "profiling.py").write_text("RANGES = ['nvtx']\n")
    modules = modules_after_a_run("--check", "--no-cache", "-q", "profiling.py", cwd=project)
    rules = {
        name.rpartition(".")[2]
        for name in modules
        if name.startswith("migrator.rules.") and name.count(".") == 3
    }
    assert {name for name in rules if not name.startswith("_")} == {"npu924_nvtx"}
