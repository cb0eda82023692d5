"""``npu-migrate verify``: run the original and the migrated program on CPU and compare them.

Exit codes: 0 the two agree within the tolerance at every recorded step; 1 they differ (the first
differing step and tensor are named); 2 usage errors, or either side cannot run (its error is
shown) or records nothing to compare.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from migrator.verify.compare import Step, automatic_tolerance, compare, with_overrides
from migrator.verify.launch import Outcome, Settings, Side, log_tail, run_sides
from migrator.verify.render import print_comparison

EXIT_SAME, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".tox",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
    }
)
COPIED_SUFFIXES = frozenset({".py", ".pyi", ".ipynb"})  # what the migrator may rewrite
LINK_ABOVE_BYTES = 1 << 20  # larger files (data, checkpoints) are linked into the scratch copy
RAISED_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")


class CannotVerify(Exception):
    """A side cannot run, or gave nothing to compare: exit 2 with this message."""


class _VerifyCommand(click.Command):
    """Everything after the first ``--`` is the programs' own arguments, never ours."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            split = args.index("--")
            ctx.meta["program_args"] = tuple(args[split + 1 :])
            args = args[:split]
        return super().parse_args(ctx, args)


ENTRY = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command(
    cls=_VerifyCommand,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Exit codes: 0 same numbers within the tolerance; 1 they differ; 2 usage error, or a "
    "side cannot run. Details and tolerance rules: docs/verify.md.",
)
@click.argument(
    "entries", nargs=-1, type=ENTRY, metavar="[ORIGINAL_ENTRY MIGRATED_ENTRY] [-- ARGS...]"
)
@click.option(
    "--migrate",
    "migrate_entry",
    type=ENTRY,
    metavar="ENTRY",
    help="Migrate a scratch copy of ENTRY's folder and compare ENTRY with its migrated copy.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    metavar="N",
    default=5,
    show_default=True,
    help="Training steps to compare.",
)
@click.option("--rtol", type=click.FloatRange(min=0), help="Relative tolerance [default: by rule].")
@click.option("--atol", type=click.FloatRange(min=0), help="Absolute tolerance [default: by rule].")
@click.option(
    "--world-size",
    type=click.IntRange(min=1),
    metavar="K",
    help="Start K processes per side with torchrun's environment variables (gloo).",
)
@click.option(
    "--synthetic-data",
    is_flag=True,
    help="Feed every DataLoader fixed random batches shaped like its first real batch.",
)
@click.option(
    "--emulate-accelerator",
    is_flag=True,
    help="Run both sides as if they had an accelerator, backed by the CPU (their cuda/npu "
    "paths, autocast as the CPU's in the requested dtype).",
)
@click.option(
    "--migrated-arg",
    "migrated_args",
    multiple=True,
    metavar="ARG",
    help="An argument for the migrated program only, after ARGS (repeatable): a flag the "
    "migration added, such as --amp.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    help="Seconds each side may run.",
)
@click.pass_context
def verify_command(ctx: click.Context, **options: Any) -> int:
    """Check on CPU that a migrated program trains like the original.

    \b
    npu-migrate verify [OPTIONS] ORIGINAL_ENTRY MIGRATED_ENTRY -- ARGS...
    npu-migrate verify [OPTIONS] --migrate ENTRY -- ARGS...

    Both programs run with ARGS in fresh processes, in the folder of their entry, with the same
    seeds and one thread; the losses and the optimizers' parameters of the first N training
    steps are compared step by step.
    """
    request = Request(program_args=ctx.meta.get("program_args", ()), **options)
    return verify(request, Console(highlight=False), Console(stderr=True, highlight=False))


@dataclass(frozen=True)
class Request:
    entries: tuple[Path, ...]
    migrate_entry: Path | None
    steps: int
    rtol: float | None
    atol: float | None
    world_size: int | None
    synthetic_data: bool
    timeout: float
    program_args: tuple[str, ...]
    emulate_accelerator: bool = False
    migrated_args: tuple[str, ...] = ()


def verify(request: Request, out: Console, err: Console) -> int:
    if request.migrate_entry is not None and request.entries:
        raise click.UsageError(
            "give either --migrate ENTRY or ORIGINAL_ENTRY MIGRATED_ENTRY, not both"
        )
    if request.migrate_entry is None and len(request.entries) != 2:
        raise click.UsageError(
            "give ORIGINAL_ENTRY and MIGRATED_ENTRY (or --migrate ENTRY), then -- and the "
            f"programs' arguments; got {len(request.entries)} path(s)"
        )
    settings = Settings(
        request.steps,
        request.world_size,
        request.synthetic_data,
        request.timeout,
        request.program_args,
        request.emulate_accelerator,
    )
    with tempfile.TemporaryDirectory(prefix="npu-migrate-verify-") as scratch:
        errors: list[str] = []
        runs: list[dict[int, list[Step]]] = []
        try:
            original, migrated = sides_of(request, Path(scratch), out)
            outcomes = run_sides([original, migrated], settings, Path(scratch))
        except CannotVerify as error:
            errors.append(str(error))
            outcomes = []
        for outcome in outcomes:  # both sides' errors, when both cannot run
            try:
                runs.append(steps_by_rank(outcome, settings))
            except CannotVerify as error:
                errors.append(str(error))
        for message in without_repeats(errors):
            err.print("[bold red]error:[/]", escape(message), soft_wrap=True)
        if errors:
            return EXIT_ERROR
        layouts = synthetic_layouts(outcomes)
    tolerance = automatic_tolerance(runs[0].get(0, []), runs[1].get(0, []))
    tolerance = with_overrides(tolerance, request.rtol, request.atol)
    comparison = compare(runs[0], runs[1], tolerance)
    print_comparison(out, comparison, tolerance, layouts)
    return EXIT_SAME if comparison.first_difference is None else EXIT_DIFFERENT


def without_repeats(errors: list[str]) -> list[str]:
    """When the migrated program fails exactly as the original does (a missing data set), say
    so in one line instead of repeating the error and its output."""
    if len(errors) == 2:
        first, second = (message.split("\n", 1)[0] for message in errors)
        if second.replace("the migrated program", "the original program", 1) == first:
            return [errors[0], "the migrated program cannot run either, with the same error"]
    return errors


def sides_of(request: Request, scratch: Path, out: Console) -> tuple[Side, Side]:
    if request.migrate_entry is None:
        original, migrated = (entry.resolve() for entry in request.entries)
        return (
            Side("original", original, shim=False),
            Side("migrated", migrated, shim=True, extra_args=request.migrated_args),
        )
    entry = request.migrate_entry.resolve()
    copy = migrate_scratch_copy(entry.parent, scratch / "copy" / entry.parent.name, out)
    return (
        Side("original", entry, shim=False),
        Side("migrated", copy / entry.name, shim=True, extra_args=request.migrated_args),
    )


# -- --migrate: a scratch copy, never the user's files ---------------------------------------------


def migrate_scratch_copy(folder: Path, copy: Path, out: Console) -> Path:
    scratch_copy(folder, copy)
    result = subprocess.run(
        [sys.executable, "-m", "migrator", "--no-cache", "--format", "json", str(copy)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1):
        raise CannotVerify(f"migrating a scratch copy of {folder} failed:\n{result.stderr.strip()}")
    document = json.loads(result.stdout)
    changed = sum(1 for entry in document["files"] if entry["status"] == "changed")
    left = len(document["diagnostics"])
    note = f", {left} diagnostic(s) left (see npu-migrate --check)" if left else ""
    out.print(
        f"migrated a scratch copy of {folder}: {changed} file(s) changed{note}", soft_wrap=True
    )
    return copy


def scratch_copy(source: Path, target: Path) -> None:
    """Python files and small files are copied; large ones (data) and links are linked, so that
    the copy is cheap; the migrator never writes through a link."""
    for folder, folders, files in os.walk(source):
        here = Path(folder)
        destination = target / here.relative_to(source)
        destination.mkdir(parents=True, exist_ok=True)
        kept = []
        for name in folders:
            path = here / name
            if name in SKIPPED_DIRS or (path / "pyvenv.cfg").exists():
                continue
            if path.is_symlink():
                (destination / name).symlink_to(path.resolve())
            else:
                kept.append(name)
        folders[:] = kept
        for name in files:
            path = here / name
            if path.is_symlink() or (
                path.suffix not in COPIED_SUFFIXES and path.stat().st_size > LINK_ABOVE_BYTES
            ):
                (destination / name).symlink_to(path.resolve())
            else:
                shutil.copy2(path, destination / name)


# -- reading the outcomes --------------------------------------------------------------------------


def steps_by_rank(outcome: Outcome, settings: Settings) -> dict[int, list[Step]]:
    """The recorded steps of each rank, or CannotVerify with the side's error."""
    label = outcome.side.label
    if outcome.timed_out:
        raise CannotVerify(
            f"the {label} program did not finish within {settings.timeout_s:g} s (--timeout)"
            + tail_of(outcome, outcome.processes[0])
        )
    if outcome.failed:
        raise CannotVerify(failure_message(outcome, settings))
    runs: dict[int, list[Step]] = {}
    for record in outcome.records:
        if not record.steps:
            continue
        if record.rank in runs:
            raise CannotVerify(
                f"two processes of the {label} program recorded steps as rank {record.rank}: "
                "does it start its own processes and also run under --world-size?"
            )
        runs[record.rank] = record.steps
    if not runs:
        raise CannotVerify(
            f"the {label} program ended without an optimizer step, so there is nothing to "
            f"compare: is {outcome.side.entry.name} the training script, and do the arguments "
            "after -- make it train?" + tail_of(outcome, outcome.processes[0])
        )
    return runs


def failure_message(outcome: Outcome, settings: Settings) -> str:
    """Why a side cannot run: the missing data set, or its exception, and its last output."""
    label = outcome.side.label
    process = outcome.failed[0]
    error, synthetic_failure = None, None
    for record in outcome.records:
        if record.end is not None:
            error = error or record.end.get("error")
            synthetic_failure = synthetic_failure or record.end.get("synthetic_failure")
    headline = f"the {label} program cannot run (exit status {process.exit_code})"
    if error is not None:
        headline = f"the {label} program cannot run: {explain(error, settings, synthetic_failure)}"
    return headline + tail_of(outcome, process)


def explain(error: dict[str, Any], settings: Settings, synthetic_failure: str | None) -> str:
    """One line on why a side failed; its output (the traceback) follows the headline."""
    raised = summary_of(error["type"], error["message"])
    path = error.get("missing_path")
    if path is None:
        return raised
    if not error.get("in_data_loading"):
        return f"needs a file at {path}, which does not exist ({raised})"
    if not settings.synthetic_data:
        return (
            f"needs a dataset at {path}: pass a small dataset path "
            f"(with --synthetic-data one batch of it is enough) ({raised})"
        )
    why = (
        synthetic_failure
        or "the program failed while building its data set, before any DataLoader was iterated"
    )
    return (
        f"needs a dataset at {path}, and --synthetic-data cannot stand in for it: it copies the "
        f"shapes of the first real batch, and {why}; pass a small dataset path (one batch is "
        "enough)"
    )


def summary_of(kind: str, message: str) -> str:
    """``Type: message`` on one line; for an error relayed from a child process (``mp.spawn``'s
    ProcessRaisedException carries the child's traceback), the child's own error line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    relayed = [index for index, line in enumerate(lines) if RAISED_LINE.match(line)]
    if relayed:
        return " ".join(lines[relayed[-1] :])[:500]
    return f"{kind}: {' '.join(lines)}"[:500] if lines else kind


def tail_of(outcome: Outcome, process: Any) -> str:
    tail = log_tail(process.log)
    if not tail:
        return ""
    where = f" (rank {process.rank})" if len(outcome.processes) > 1 else ""
    body = "\n".join("  " + line for line in tail.splitlines())
    return f"\n--- the last lines of its output{where}:\n{body}"


def synthetic_layouts(outcomes: Sequence[Outcome]) -> list[str]:
    for outcome in outcomes:
        for record in sorted(outcome.records, key=lambda r: r.rank):
            if record.end is not None and record.end.get("synthetic_layouts"):
                return list(dict.fromkeys(record.end["synthetic_layouts"]))
    return []
