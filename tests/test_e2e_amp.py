"""End to end: NPU105 turns mixed precision on, and the numbers say it did so correctly.

Each program of ``fixtures/e2e/amp_cases.toml`` trains in fp32 (or with torch's native amp). The
test migrates a copy with the real command line in the runs the case lists (NPU105 first and
alone, then the default rules: docs/rules-optimizers.md), checks which rules fixed something and
what the script now says, that NPU105 changes nothing the second time, that ``--check`` leaves
only the findings the case allows, and that one run of all the case's rules writes the same files;
then ``npu-migrate verify`` compares original and migrated program for each run of the case:

- without the new ``--amp`` flag the migrated program must train exactly like the original
  (the ``fp32`` rule);
- with it, in bfloat16 (the CPU default), within the ``amp-added`` tolerance, at O2 and O1, on
  one and two processes;
- with it and ``APEX_AMP_CPU_DTYPE=float32``, amp's loss scaling, unscaling, master weights,
  clipping and gradient accumulation run in float32 and must agree under the ``fp32`` rule: the
  wiring is exact, not merely close.

A migration that leaves a backward outside ``amp.scale_loss`` must fail verify.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_e2e import (
    RUN_TIMEOUT_S,
    assert_script_patterns,
    cli_output,
    finish,
    npu_migrate,
    shared_temp_root,
    start_verify,
    tolerance_rule,
)

REPO = Path(__file__).resolve().parent.parent
CASES_FILE = REPO / "fixtures" / "e2e" / "amp_cases.toml"
STEPS = 6
RULES = frozenset({"fp32", "amp", "amp-rounding", "amp-added"})


@dataclass(frozen=True)
class Run:
    world_size: int
    args: tuple[str, ...]
    migrated_args: tuple[str, ...]
    float32: bool
    tolerance: str
    full: bool  # the rest of the matrix: only in make test-all (marked slow)

    @property
    def label(self) -> str:
        parts = [f"ws{self.world_size}", *(a.lstrip("-") for a in self.migrated_args)]
        return "-".join(parts + (["float32"] if self.float32 else []))


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    script: str
    launcher: str
    pyproject: str | None
    migrate: tuple[tuple[str, ...], ...]
    fixed: tuple[tuple[str, ...], ...]
    check_allows: frozenset[str]
    migrated_contains: tuple[str, ...]
    migrated_lacks: tuple[str, ...]
    runs: tuple[Run, ...]


def load_cases() -> list[Case]:
    cases = []
    for name, table in tomllib.loads(CASES_FILE.read_text()).items():
        runs = tuple(
            Run(
                run.get("world_size", 1),
                tuple(run.get("args", ())),
                tuple(run.get("migrated_args", ())),
                run.get("float32", False),
                run["tolerance"],
                run.get("full", False),
            )
            for run in table["runs"]
        )
        case = Case(
            name,
            table["path"],
            table["script"],
            table["launcher"],
            table.get("pyproject"),
            tuple(tuple(codes) for codes in table["migrate"]),
            tuple(tuple(codes) for codes in table["fixed"]),
            frozenset(table["check_allows"]),
            tuple(table.get("migrated_contains", ())),
            tuple(table.get("migrated_lacks", ())),
            runs,
        )
        assert len(case.fixed) == len(case.migrate), f"{name}: one `fixed` list per run"
        assert all(run.tolerance in RULES for run in runs), f"{name}: unknown tolerance rule"
        assert case.launcher in {"single", "spawn"}, f"{name}: unknown launcher"
        cases.append(case)
    return cases


CASES = load_cases()
# The whole matrix takes minutes on two cores; the default run keeps one verify run of each kind
# (identical without amp, amp-added at O2, exact in float32, two processes, both native ways),
# `make test-all` the rest.
RUNS = [
    pytest.param(
        case, run, id=f"{case.name}-{run.label}", marks=[pytest.mark.slow] if run.full else []
    )
    for case in CASES
    for run in case.runs
]


@dataclass(frozen=True)
class Migration:
    original: Path
    migrated: Path
    reports: list[dict[str, Any]]  # the JSON report of each run


def migration_of(case: Case, tmp_path_factory: pytest.TempPathFactory) -> Migration:
    """The case migrated in its runs, once per session (shared by the xdist workers)."""
    folder = shared_temp_root(tmp_path_factory) / "e2e-amp-migrations" / case.name
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "reports.json"
        if not done.exists():
            reports = migrate(case, folder)
            partial = folder / "reports.partial.json"
            partial.write_text(json.dumps(reports))
            partial.rename(done)
    return Migration(folder / "original", folder / "migrated", json.loads(done.read_text()))


def migrate(case: Case, workdir: Path) -> list[dict[str, Any]]:
    ignore = shutil.ignore_patterns("__pycache__", "*.json", "*.pt", "out")
    for copy in ("original", "migrated"):
        shutil.rmtree(workdir / copy, ignore_errors=True)
        shutil.copytree(REPO / case.path, workdir / copy, ignore=ignore)
        if case.pyproject is not None:
            (workdir / copy / "pyproject.toml").write_text(case.pyproject)
    reports = []
    for number, select in enumerate(case.migrate, 1):
        report = workdir / f"report-{number}.json"
        selection = ["--select", ",".join(select)] if select else []
        result = npu_migrate(
            *selection, "--no-cache", "--format", "json", "--report", str(report),
            str(workdir / "migrated"),
        )  # fmt: skip
        assert result.returncode == 1, (
            f"run {number} exited {result.returncode}\n{cli_output(result)}"
        )
        reports.append(json.loads(report.read_text()))
    return reports


def one_run_selection(case: Case) -> list[str]:
    """The codes of all the case's runs in one ``--select`` (a run of [] selects what the
    program's pyproject.toml selects)."""
    codes: set[str] = set()
    for select in case.migrate:
        if select:
            codes.update(select)
        else:
            text = case.pyproject or (REPO / case.path / "pyproject.toml").read_text()
            codes.update(tomllib.loads(text)["tool"]["npu-migrate"]["select"])
    return sorted(codes)


def program_files(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix in (".py", ".toml")
    }


def verify_command(case: Case, migration: Migration, run: Run) -> list[str]:
    command = ["verify", "--steps", str(STEPS), "--timeout", str(RUN_TIMEOUT_S)]
    command += [f"--migrated-arg={argument}" for argument in run.migrated_args]
    command += [str(migration.original / case.script), str(migration.migrated / case.script)]
    command += ["--", *run.args]
    if case.launcher == "spawn":
        command += ["--world-size", str(run.world_size), "--dist-url", "env://"]
    return command


# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_amp_migration_applies_the_expected_rules(
    case: Case, tmp_path_factory: pytest.TempPathFactory
) -> None:
    migration = migration_of(case, tmp_path_factory)
    for number, (report, expected) in enumerate(zip(migration.reports, case.fixed, strict=True), 1):
        errors = [d for d in report["diagnostics"] if d["severity"] == "error"]
        assert not errors, f"run {number} could not process every file: {errors}"
        fixed = {edit["code"] for edit in report["edits"]}
        missing = sorted(set(expected) - fixed)
        assert not missing, f"run {number}: expected fixes by {missing}, got {sorted(fixed)}"
    assert_script_patterns(
        migration.migrated, case.script, case.migrated_contains, case.migrated_lacks
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_amp_migration_is_finished(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    """NPU105 changes nothing the second time, and --check finds only what the case allows."""
    migration = migration_of(case, tmp_path_factory)
    again = npu_migrate("--select", "NPU105", "--check", "--no-cache", str(migration.migrated))
    assert again.returncode == 0, f"NPU105 would change its own output\n{cli_output(again)}"
    result = npu_migrate("--check", "--no-cache", "--format", "json", str(migration.migrated))
    left = json.loads(result.stdout)["diagnostics"]
    unexpected = [d for d in left if d["code"] not in case.check_allows]
    assert not unexpected, f"--check still finds: {unexpected}"
    assert result.returncode == (1 if left else 0), cli_output(result)


@pytest.mark.parametrize(
    "case", [case for case in CASES if len(case.migrate) > 1], ids=lambda case: case.name
)
def test_one_run_migrates_as_the_runs_of_the_case_do(
    case: Case, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """NPU101 reads NPU105's plan, so selecting every rule of the case's runs at once writes
    the same program, byte for byte, as the runs one after the other (which verify checks)."""
    migration = migration_of(case, tmp_path_factory)
    one = tmp_path / "one"
    shutil.copytree(
        REPO / case.path, one, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.pt", "out")
    )
    if case.pyproject is not None:
        (one / "pyproject.toml").write_text(case.pyproject)
    select = ",".join(one_run_selection(case))
    result = npu_migrate("--select", select, "--no-cache", str(one))
    assert result.returncode == 1, cli_output(result)
    assert program_files(one) == program_files(migration.migrated)


@pytest.mark.parametrize(("case", "run"), RUNS)
def test_verify_finds_the_amp_migration_trains_as_expected(
    case: Case, run: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    migration = migration_of(case, tmp_path_factory)
    env = {"APEX_AMP_CPU_DTYPE": "float32"} if run.float32 else {}
    result = finish(start_verify(verify_command(case, migration, run), env))
    assert result.returncode == 0, f"verify exited {result.returncode}\n{cli_output(result)}"
    assert tolerance_rule(result) == run.tolerance, cli_output(result)
    if run.world_size > 1:
        assert f"over all {run.world_size} ranks" in result.stdout, cli_output(result)


def test_verify_fails_a_backward_left_outside_amp(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Under O2 a backward outside amp.scale_loss reaches the half model's gradients, never the
    fp32 master copies the optimizer steps: nothing trains, and verify must say so."""
    case = next(case for case in CASES if case.name == "mnist")
    migration = migration_of(case, tmp_path_factory)
    wrong = tmp_path / "wrong"
    shutil.copytree(migration.migrated, wrong, ignore=shutil.ignore_patterns("*.pt", "*.json"))
    script = wrong / case.script
    text = script.read_text()
    scaled = (
        "with amp.scale_loss(loss, optimizer) as scaled_loss:\n            scaled_loss.backward()"
    )
    assert text.count(scaled) == 1, "the program changed: adapt this test"
    script.write_text(text.replace(scaled, "loss.backward()"))
    run = Run(1, (), ("--amp",), False, "amp-added", False)
    command = verify_command(case, Migration(migration.original, wrong, []), run)
    result = finish(start_verify(command))
    assert result.returncode == 1, cli_output(result)
    assert "different from step 1: the parameters of optimizer 1" in result.stdout, cli_output(
        result
    )
    assert "is 1 of the original's away from it" in result.stdout, cli_output(result)
