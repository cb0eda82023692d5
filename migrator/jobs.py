"""What a run is asked to do and what it reports, per file: small, picklable records that cross
process boundaries (the CLI builds a :class:`Job`; workers send back :class:`Outcome` s)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from migrator.diagnostics import Diagnostic, Severity
from migrator.registry import lazy_rules
from migrator.results import ERROR_CODE, Status
from migrator.rule import Rule
from migrator.settings import Settings


class Mode(enum.StrEnum):
    WRITE = "write"  # rewrite in place
    DIFF = "diff"  # write nothing, produce diffs
    CHECK = "check"  # write nothing, list what is left to do
    OUTPUT = "output"  # write a migrated copy of the tree elsewhere


@dataclass(frozen=True)
class Task:
    """One Python file to process. ``path`` is both what is read and what is shown."""

    path: str
    destination: str | None = None  # --output: where the migrated copy goes


@dataclass
class Outcome:
    """What happened to one file; small and picklable, so workers can send it back."""

    path: str
    status: Status
    diagnostics: list[Diagnostic] = field(default_factory=list)
    reason: str | None = None  # why a file was skipped or failed
    diff: str | None = None  # --diff only
    digest: str | None = None  # content hash, set when the outcome may be cached
    cached: bool = False

    @property
    def edits(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.FIXED]

    @property
    def findings(self) -> list[Diagnostic]:
        """Manual and info diagnostics: what a person should read."""
        return [d for d in self.diagnostics if d.severity in (Severity.MANUAL, Severity.INFO)]


# The time one file may take before it is stopped and reported (a hang is a bug, not a wait).
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Job:
    """What every worker needs to know; sent once per worker."""

    mode: Mode
    codes: tuple[str, ...]
    settings: Settings
    timeout: float | None = DEFAULT_TIMEOUT  # seconds per file; None: no limit

    def rules(self) -> Sequence[type[Rule]]:
        """The job's rules, in code order; each module is imported when a file needs it."""
        return lazy_rules(self.codes)


def reason_of(status: Status, diagnostics: list[Diagnostic]) -> str | None:
    if status is Status.SKIPPED:
        return "`# npu-migrate: skip-file`"
    if status is Status.ERROR:
        return diagnostics[0].message if diagnostics else "error"
    return None


def error_outcome(path: str, message: str) -> Outcome:
    """A failed file. Its rule diagnostics are dropped: nothing they describe happened."""
    error = Diagnostic(path, 1, 1, ERROR_CODE, Severity.ERROR, message)
    return Outcome(path, Status.ERROR, [error], reason=message)
