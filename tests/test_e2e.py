"""End-to-end proof that a migration keeps the numbers: migrate, then ``npu-migrate verify``.

Each program of ``fixtures/e2e/cases.toml`` is a small training script in the shape of a public
GPU script. For each one the test

1. copies its folder and migrates the copy in place with the real ``npu-migrate`` command line,
   asking for the JSON report, and checks that the expected rules fixed something;
2. runs ``npu-migrate verify`` on the original and the migrated copy, at each world size of the
   case: it runs both on CPU (the original against the ``apex`` runtime, which also provides
   NVIDIA's names; the migrated copy with the CPU ``torch_npu`` stand-in), compares the losses
   and the optimizers' parameters step by step, and must exit 0 with the tolerance rule that
   docs/verify.md gives for the program (``tolerance`` in cases.toml);
3. runs ``npu-migrate --check`` on the migrated copy, which must report nothing left to do.

Where the untouched original cannot run at some world size (apex refuses the imagenet program's
DDP-before-amp order on two processes), the migrated program is compared with the original fixed
by just the rule that addresses that failure; ``make test-all`` also checks that ``verify`` says
the untouched original cannot run (exit 2, apex's error shown). The runs marked ``slow`` in
cases.toml (``slow_world_sizes``) are ``make test-all``'s too. A deliberately wrong migration
must make ``verify`` fail at the step where it first changes the numbers.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _cli import run_npu_migrate, start_npu_migrate
from _tiers import SLOW

REPO = Path(__file__).resolve().parent.parent
CASES_FILE = REPO / "fixtures" / "e2e" / "cases.toml"
RUN_TIMEOUT_S = 180  # generous: a run takes a few seconds, but CI machines are shared
STEPS = 8  # verify --steps: the whole of most programs; plain_adam (12 steps) is stopped early
RULES = frozenset({"fp32", "amp", "amp-rounding"})  # verify's tolerance rules (docs/verify.md)
# A wide terminal and no colours: the verdict and the table are read as plain lines.
VERIFY_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


@dataclass(frozen=True)
class BrokenOriginal:
    """A run whose untouched original cannot work (see ``at_world_size`` in cases.toml)."""

    fails_with: str
    baseline_select: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    script: str
    tolerance: str
    launcher: str
    world_sizes: tuple[int, ...]
    slow_world_sizes: tuple[int, ...]
    fixed: tuple[str, ...]
    migrated_contains: tuple[str, ...]
    migrated_lacks: tuple[str, ...]
    broken_original: dict[int, BrokenOriginal]
    reported: tuple[str, ...] = ()
    # Environment variables for verify's runs of the program (cases.toml `verify_env`).
    verify_env: dict[str, str] = field(default_factory=dict)


def load_cases() -> list[Case]:
    tables = tomllib.loads(CASES_FILE.read_text())
    cases = []
    for name, table in tables.items():
        case = Case(
            name=name,
            path=table["path"],
            script=table["script"],
            tolerance=table["tolerance"],
            launcher=table["launcher"],
            world_sizes=tuple(table["world_sizes"]),
            slow_world_sizes=tuple(table.get("slow_world_sizes", ())),
            fixed=tuple(table["fixed"]),
            migrated_contains=tuple(table.get("migrated_contains", ())),
            migrated_lacks=tuple(table.get("migrated_lacks", ())),
            broken_original={
                int(world_size): BrokenOriginal(
                    entry["original_fails_with"], tuple(entry["baseline_select"])
                )
                for world_size, entry in table.get("at_world_size", {}).items()
            },
            reported=tuple(table.get("reported", ())),
            verify_env=dict(table.get("verify_env", {})),
        )
        assert case.tolerance in RULES, f"{name}: unknown tolerance rule {case.tolerance!r}"
        assert case.launcher in {"single", "spawn", "env"}, f"{name}: unknown launcher"
        assert case.launcher != "single" or case.world_sizes == (1,), f"{name}: single is 1 process"
        assert set(case.slow_world_sizes) < set(case.world_sizes), f"{name}: slow_world_sizes"
        cases.append(case)
    return cases


CASES = load_cases()
RUNS = [
    pytest.param(
        case,
        n,
        id=f"{case.name}-ws{n}",
        marks=[pytest.mark.slow] if n in case.slow_world_sizes else [],
    )
    for case in CASES
    for n in case.world_sizes
]


def case_ids(case: Case) -> str:
    return case.name


# -- the command line ------------------------------------------------------------------------------


def npu_migrate(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line (the entry point of the ``npu-migrate`` script), in a subprocess."""
    return run_npu_migrate(*args, cwd=REPO, timeout=RUN_TIMEOUT_S)


@dataclass(frozen=True)
class Migration:
    original: Path  # an untouched copy of the program's folder
    migrated: Path  # a copy migrated in place by npu-migrate
    report: dict[str, Any]


def migration_of(
    case: Case, tmp_path_factory: pytest.TempPathFactory, select: tuple[str, ...] = ()
) -> Migration:
    """The case migrated by every rule, or by the ``select``-ed ones only.

    Done once per test session, even with pytest-xdist: the first worker to need a migration
    makes it under a lock in the session's shared temporary folder, the others reuse it.
    """
    name = case.name + ("-" + "-".join(select) if select else "")
    folder = shared_temp_root(tmp_path_factory) / "e2e-migrations" / name
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        report_path = folder / "report.json"
        if not report_path.exists():
            migrate(case, folder, select)
    return Migration(folder / "original", folder / "migrated", json.loads(report_path.read_text()))


def shared_temp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary folder of this session that all xdist workers see (each has its own basetemp
    below the session's)."""
    basetemp = tmp_path_factory.getbasetemp()
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def migrate(case: Case, workdir: Path, select: tuple[str, ...]) -> None:
    """Copy the program twice into ``workdir`` and migrate the ``migrated`` copy in place; the
    JSON report is written last, so its presence means the migration is complete."""
    source = REPO / case.path
    ignore = shutil.ignore_patterns("__pycache__", "*.json", "*.pt")
    for copy in ("original", "migrated"):
        shutil.rmtree(workdir / copy, ignore_errors=True)
        shutil.copytree(source, workdir / copy, ignore=ignore)
    partial_report = workdir / "report.partial.json"
    selection = ["--select", ",".join(select)] if select else []
    result = npu_migrate(
        *selection, "--no-cache", "--format", "json", "--report", str(partial_report),
        str(workdir / "migrated"),
    )  # fmt: skip
    # Exit 1 is "files were changed" (the pyupgrade convention); 2 would be an error.
    assert result.returncode == 1, f"npu-migrate exited {result.returncode}\n{cli_output(result)}"
    partial_report.rename(workdir / "report.json")


def cli_output(result: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"


def report_entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Edits and diagnostics of a JSON report (schema version 1, docs/cli.md), in line order."""
    assert report["schema_version"] == 1, f"unknown report schema {report['schema_version']}"
    return sorted(report["edits"] + report["diagnostics"], key=lambda d: (d["path"], d["line"]))


# -- verifying ------------------------------------------------------------------------------------


def verify_command(case: Case, original: Path, migrated: Path, world_size: int) -> list[str]:
    """``npu-migrate verify`` for one program at one world size, as a user would type it."""
    command = ["verify", "--steps", str(STEPS), "--timeout", str(RUN_TIMEOUT_S)]
    if case.launcher == "env":
        command += ["--world-size", str(world_size)]
    command += [str(original / case.script), str(migrated / case.script), "--"]
    if case.launcher == "spawn":
        # The program spawns its own processes; env:// reads the MASTER_PORT verify picks.
        command += ["--world-size", str(world_size), "--dist-url", "env://"]
    return command


def start_verify(
    arguments: list[str], extra_env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return start_npu_migrate(*arguments, cwd=REPO, extra_env={**VERIFY_ENV, **(extra_env or {})})


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = process.communicate(timeout=3 * RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def verify(
    arguments: list[str], extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return finish(start_verify(arguments, extra_env))


def assert_script_patterns(
    migrated: Path, script: str, contains: Iterable[str], lacks: Iterable[str]
) -> None:
    """The migrated ``script`` (a path in ``migrated``) matches every regex of ``contains`` and
    none of ``lacks``."""
    text = (migrated / script).read_text()
    for pattern in contains:
        assert re.search(pattern, text), f"the migrated {script} has no match for {pattern!r}"
    for pattern in lacks:
        match = re.search(pattern, text)
        assert match is None, f"the migrated {script} still has {match.group(0)!r}"


def miswritten_copy(
    name: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    old: str,
    new: str,
    count: int,
) -> tuple[Case, Migration, Path]:
    """The case ``name``, its migration, and a copy of the migrated folder in ``tmp_path`` whose
    script has each of the ``count`` occurrences of ``old`` written ``new``: a wrong migration."""
    case = next(case for case in CASES if case.name == name)
    migration = migration_of(case, tmp_path_factory)
    wrong = tmp_path / "wrong"
    shutil.copytree(migration.migrated, wrong, ignore=shutil.ignore_patterns("*.pt", "*.json"))
    script = wrong / case.script
    text = script.read_text()
    assert text.count(old) == count, "the program changed: adapt this test"
    script.write_text(text.replace(old, new))
    return case, migration, wrong


def tolerance_rule(result: subprocess.CompletedProcess[str]) -> str | None:
    """The rule verify reports on its ``tolerance:`` line (``rtol=... atol=... (amp: ...)``)."""
    match = re.search(r"^tolerance: rtol=\S+ atol=\S+ \(([\w-]+):", result.stdout, re.MULTILINE)
    return match.group(1) if match else None


# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=case_ids)
def test_migration_applies_the_expected_rules(
    case: Case, tmp_path_factory: pytest.TempPathFactory
) -> None:
    migration = migration_of(case, tmp_path_factory)
    entries = report_entries(migration.report)
    errors = [d for d in entries if d["severity"] == "error"]
    assert not errors, f"npu-migrate could not process every file: {errors}"
    fixed = {d["code"] for d in migration.report["edits"]}
    missing = sorted(set(case.fixed) - fixed)
    found = "\n".join(f"  {d['line']}: {d['code']} {d['severity']}" for d in entries)
    assert not missing, f"expected fixes by {missing}; the report has:\n{found}"

    assert_script_patterns(
        migration.migrated, case.script, case.migrated_contains, case.migrated_lacks
    )


@pytest.mark.parametrize(("case", "world_size"), RUNS)
def test_verify_finds_the_migrated_program_computes_the_same(
    case: Case, world_size: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    migration = migration_of(case, tmp_path_factory)
    baseline, broken = migration.original, None
    if world_size in case.broken_original:
        select = case.broken_original[world_size].baseline_select
        baseline = migration_of(case, tmp_path_factory, select).migrated
        # That the untouched original fails is the case's premise, not the migration's
        # result: `make test-all` checks it.
        broken = migration.original if SLOW else None
    command = verify_command(case, baseline, migration.migrated, world_size)
    runs = [start_verify(command, case.verify_env)]
    if broken is not None:
        command = verify_command(case, broken, migration.migrated, world_size)
        runs.append(start_verify(command, case.verify_env))
    result, *rest = [finish(run) for run in runs]
    for failed in rest:
        expected = case.broken_original[world_size].fails_with
        assert failed.returncode == 2, (
            f"the untouched original should not run\n{cli_output(failed)}"
        )
        assert "the original program cannot run" in failed.stderr, cli_output(failed)
        assert expected in failed.stderr, cli_output(failed)

    assert result.returncode == 0, f"verify exited {result.returncode}\n{cli_output(result)}"
    assert "same: " in result.stdout, cli_output(result)
    assert tolerance_rule(result) == case.tolerance, cli_output(result)
    if world_size > 1:
        assert f"over all {world_size} ranks" in result.stdout, cli_output(result)


@pytest.mark.parametrize("case", CASES, ids=case_ids)
def test_migrated_program_passes_check(
    case: Case, tmp_path_factory: pytest.TempPathFactory
) -> None:
    migration = migration_of(case, tmp_path_factory)
    ignored = ["--ignore", ",".join(case.reported)] if case.reported else []
    result = npu_migrate("--check", "--no-cache", *ignored, str(migration.migrated))
    assert result.returncode == 0, f"--check still finds work to do\n{cli_output(result)}"
    if case.reported:
        result = npu_migrate("--check", "--no-cache", str(migration.migrated))
        for code in case.reported:
            assert f"{code} [manual]" in result.stdout, (
                f"{code} no longer reports\n{cli_output(result)}"
            )


def test_verify_names_the_step_where_a_wrong_migration_departs(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """verify must be able to fail: a migration that halves the learning rate one epoch early
    (StepLR every epoch instead of every two) trains identically for the first epoch's 3 steps;
    the 4th step's update is the first to differ, in the first parameter the optimizer holds."""
    case, migration, wrong = miswritten_copy(
        "plain_adam", tmp_path, tmp_path_factory, old="step_size=2", new="step_size=1", count=2
    )
    result = verify(verify_command(case, migration.original, wrong, 1), case.verify_env)
    assert result.returncode == 1, cli_output(result)
    verdict = (
        "different from step 4: parameter 'conv1.weight' of optimizer 1 (Adam -> NpuFusedAdam)"
    )
    assert verdict in result.stdout, cli_output(result)
    steps = re.findall(r"^\S\s+(\d+) \S", result.stdout, re.MULTILINE)  # the table's rows
    assert steps == [str(step) for step in range(1, STEPS + 1)], cli_output(result)


def test_verify_departs_when_the_chained_models_keep_none_gradients(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The `set_to_none=False` edits are what keep zero_grad_chain's numbers: the same fused
    optimizers with the networks' `zero_grad()` left as written step gradients that no longer
    reach their flat buffers, and the first generator step after a skipped batch departs."""
    case, migration, wrong = miswritten_copy(
        "zero_grad_chain",
        tmp_path,
        tmp_path_factory,
        old=".zero_grad(set_to_none=False)",
        new=".zero_grad()",
        count=3,
    )
    result = verify(verify_command(case, migration.original, wrong, 1), case.verify_env)
    assert result.returncode == 1, cli_output(result)
    assert "different from step 3" in result.stdout, cli_output(result)
