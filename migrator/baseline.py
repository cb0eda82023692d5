"""Baselines: adopt ``--check`` on a repository that still has findings a person must settle.

``--write-baseline`` records the run's manual and info findings in a JSON file; a later run with
``--baseline FILE`` reports only findings that are not in it, and lists the entries it no longer
finds (stale), so that the file shrinks as the work is done.

A finding is recorded by its fingerprint, never by its line number, so that edits elsewhere in
the file do not turn old findings into new ones:

- the rule code;
- the path as the reports show it (relative to the project folder);
- the text of the line the finding points at, with runs of white space collapsed;
- its occurrence: the how-many-th finding with the same code, path and text in the file, in
  position order, so that two identical lines are two entries.

A notebook finding's text is the line of its cell; the cell number is not recorded (cells move).

Only manual and info findings are baselined. An edit the migration would make is never exempt:
a file that still needs a fix fails ``--check`` with or without a baseline, and so does a file
that could not be processed.

The file is sorted and indented, one entry per finding, so that its diffs read well in review.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from migrator.diagnostics import Diagnostic, Severity
from migrator.files import write_atomic
from migrator.formats import ProjectPaths
from migrator.originals import Originals
from migrator.results import Status
from migrator.runner import RunResult

SCHEMA_VERSION = 1
BASELINED = (Severity.MANUAL, Severity.INFO)
# A file in these states was read and analysed: a baseline entry for it that no finding matches
# is stale. An entry for a file that could not be processed says nothing either way.
_ANALYSED = (Status.CHANGED, Status.UNCHANGED, Status.SKIPPED)


class BaselineError(Exception):
    """The baseline file cannot be read or is not a baseline (a usage error)."""


def normalized(text: str) -> str:
    """A line's text as fingerprints compare it: white space runs collapsed, ends stripped."""
    return " ".join(text.split())


@dataclass(frozen=True, order=True)
class Entry:
    """One baselined finding. ``message`` is for the people who read the file; it is not part
    of the fingerprint (a reworded message does not make a finding new)."""

    path: str
    code: str
    text: str
    occurrence: int
    message: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.path, self.code, self.text, self.occurrence)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "code": self.code,
            "text": self.text,
            "occurrence": self.occurrence,
            "message": self.message,
        }

    def describe(self) -> str:
        repeat = f" (occurrence {self.occurrence + 1})" if self.occurrence else ""
        return f"{self.path}: {self.code} at `{self.text}`{repeat}"


@dataclass(frozen=True)
class Fingerprinted:
    path: str  # the outcome's path, as the run reached the file
    diagnostic: Diagnostic
    entry: Entry


def fingerprint(
    result: RunResult, paths: ProjectPaths, originals: Originals
) -> list[Fingerprinted]:
    """Every manual and info finding of the run with its baseline entry."""
    found = []
    for outcome in result.outcomes:
        seen: Counter[tuple[str, str]] = Counter()
        shown = paths.shown(outcome.path)
        ordered = sorted(
            (d for d in outcome.diagnostics if d.severity in BASELINED),
            key=lambda d: (d.cell or 0, d.line, d.column, d.code, d.message),
        )
        for diagnostic in ordered:
            line = originals.line(outcome.path, diagnostic.cell, diagnostic.line)
            text = normalized(line or "")
            occurrence = seen[(diagnostic.code, text)]
            seen[(diagnostic.code, text)] += 1
            entry = Entry(shown, diagnostic.code, text, occurrence, diagnostic.message)
            found.append(Fingerprinted(outcome.path, diagnostic, entry))
    return found


@dataclass
class Baseline:
    entries: list[Entry] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Baseline:
        """Read ``path``; :class:`BaselineError` says what is wrong with it."""
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise BaselineError(
                f"baseline {path} does not exist (create it with --write-baseline)"
            ) from None
        except OSError as error:
            raise BaselineError(f"cannot read baseline {path}: {error.strerror}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise BaselineError(f"baseline {path} is not valid JSON: {error}") from None
        return cls(_entries(path, data))

    def dumps(self) -> bytes:
        document = {
            "schema_version": SCHEMA_VERSION,
            "tool": "npu-migrate",
            "findings": [entry.to_json() for entry in sorted(self.entries)],
        }
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    def write(self, path: Path) -> None:
        """Replace ``path`` atomically (raises ``OSError``)."""
        mode_bits = path.stat().st_mode & 0o777 if path.exists() else 0o644
        write_atomic(str(path), self.dumps(), mode_bits)


def _entries(path: Path, data: Any) -> list[Entry]:
    def invalid(why: str) -> BaselineError:
        return BaselineError(f"baseline {path} is not an npu-migrate baseline: {why}")

    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise invalid('expected an object with a "findings" list')
    if data.get("schema_version") != SCHEMA_VERSION:
        raise invalid(f"schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    entries = []
    for number, item in enumerate(data["findings"], start=1):
        if not (
            isinstance(item, dict)
            and all(isinstance(item.get(key), str) for key in ("path", "code", "text"))
            and isinstance(item.get("occurrence"), int)
            and not isinstance(item.get("occurrence"), bool)
            and item["occurrence"] >= 0
        ):
            raise invalid(
                f"finding {number} needs string path, code and text and an occurrence >= 0"
            )
        message = item.get("message", "")
        entries.append(
            Entry(
                item["path"],
                item["code"],
                item["text"],
                item["occurrence"],
                message if isinstance(message, str) else "",
            )
        )
    return entries


@dataclass(frozen=True)
class Scope:
    """What a run looked at: only entries inside it can be found stale or be replaced.

    A run over a few staged files (pre-commit) says nothing about the other files' entries,
    and a run with ``--select NPU3`` nothing about NPU9 entries."""

    analysed: frozenset[str]  # shown paths of the files read and analysed
    folders: tuple[str, ...]  # shown paths of the folders walked ("." the project folder)
    codes: frozenset[str]
    root: str  # the project folder, real and absolute

    @classmethod
    def of(
        cls, result: RunResult, paths: ProjectPaths, arguments: Sequence[str], codes: Iterable[str]
    ) -> Scope:
        analysed = frozenset(
            paths.shown(outcome.path) for outcome in result.outcomes if outcome.status in _ANALYSED
        )
        folders = tuple(paths.shown(argument) for argument in arguments if os.path.isdir(argument))
        return cls(analysed, folders, frozenset(codes), paths.root)

    def covers(self, entry: Entry) -> bool:
        """The run has the final word on ``entry``: its rule ran, and its file was analysed
        or is gone from a folder the run walked."""
        if entry.code not in self.codes:
            return False
        if entry.path in self.analysed:
            return True
        return self._walked(entry.path) and not os.path.lexists(os.path.join(self.root, entry.path))

    def _walked(self, path: str) -> bool:
        return any(folder == "." or path.startswith(folder + "/") for folder in self.folders)


@dataclass
class Comparison:
    """A run against a baseline."""

    new: list[Fingerprinted]
    baselined: list[Fingerprinted]
    stale: list[Entry]

    def to_json(self, file: Path) -> dict[str, Any]:
        return {
            "file": str(file),
            "baselined": len(self.baselined),
            "new": len(self.new),
            "stale": [entry.to_json() for entry in self.stale],
        }


def compare(baseline: Baseline, found: Sequence[Fingerprinted], scope: Scope) -> Comparison:
    recorded = {entry.key for entry in baseline.entries}
    new = [item for item in found if item.entry.key not in recorded]
    baselined = [item for item in found if item.entry.key in recorded]
    matched = {item.entry.key for item in baselined}
    stale = sorted(
        entry for entry in baseline.entries if entry.key not in matched and scope.covers(entry)
    )
    return Comparison(new, baselined, stale)


def updated(baseline: Baseline, found: Sequence[Fingerprinted], scope: Scope) -> Baseline:
    """``baseline`` with every entry the run covers replaced by what the run found."""
    kept = [entry for entry in baseline.entries if not scope.covers(entry)]
    return Baseline(sorted({e.key: e for e in [*kept, *(f.entry for f in found)]}.values()))


def without_baselined(result: RunResult, comparison: Comparison) -> RunResult:
    """The run as every report should show it: baselined findings left out."""
    hidden: dict[str, set[int]] = {}
    for item in comparison.baselined:
        hidden.setdefault(item.path, set()).add(id(item.diagnostic))
    outcomes = []
    for outcome in result.outcomes:
        drop = hidden.get(outcome.path)
        if not drop:
            outcomes.append(outcome)
            continue
        kept = [d for d in outcome.diagnostics if id(d) not in drop]
        outcomes.append(replace(outcome, diagnostics=kept))
    return RunResult(outcomes, result.copied)
