"""Report formats for other tools: SARIF (code scanning), GitHub workflow annotations, and the
CSV lists of Huawei's msFmkTransplt.

What the three share lives here: where a diagnostic is in the project (a path relative to the
project folder, whatever path the command line reached the file by), the rules' metadata, and
one stable order of the findings (path, cell, line, column, code), so that the output is the
same for any ``-j`` and whether or not the result cache answered.

A notebook diagnostic (``Diagnostic.cell``) has a line and column inside its cell, which are no
position in the ``.ipynb`` file: the formats point at the file and lead the message with
``cell N, line L, column C: ``.

Like :mod:`migrator.report`, nothing here decides an exit code; the CLI passes it in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from migrator.diagnostics import Diagnostic, Severity
from migrator.jobs import Mode
from migrator.registry import all_rules
from migrator.report import fixed_label
from migrator.rule import Rule
from migrator.runner import RunResult

FORMATS = ("sarif", "github", "csv", "html")


@dataclass(frozen=True)
class ProjectPaths:
    """Diagnostic paths relative to the project folder.

    The project folder is the folder of the ``pyproject.toml`` that holds the configuration, or
    the current folder when there is none (the same folder ``--exclude`` patterns with a ``/``
    are relative to). A file outside it keeps its absolute path.
    """

    root: str  # a real, absolute path

    @classmethod
    def at(cls, root: Path) -> ProjectPaths:
        return cls(os.path.realpath(root))

    def relative(self, path: str) -> str | None:
        """``path`` relative to the project folder with ``/`` separators, or ``None`` when the
        file is outside it."""
        real = os.path.realpath(path)
        if os.path.commonpath([real, self.root]) != self.root:
            return None
        return Path(os.path.relpath(real, self.root)).as_posix()

    def shown(self, path: str) -> str:
        """The project-relative path, or the absolute one for a file outside the project."""
        relative = self.relative(path)
        return relative if relative is not None else Path(os.path.realpath(path)).as_posix()

    @property
    def root_uri(self) -> str:
        """The project folder as a ``file:`` URI with a final ``/`` (a base for relative URIs)."""
        return Path(self.root).as_uri().rstrip("/") + "/"


@dataclass(frozen=True)
class Finding:
    """A diagnostic with the path it is shown under."""

    path: str
    diagnostic: Diagnostic

    @property
    def sort_key(self) -> tuple[str, int, int, int, str, str, str]:
        d = self.diagnostic
        return (self.path, d.cell or 0, d.line, d.column, d.code, str(d.severity), d.message)

    @property
    def in_cell(self) -> bool:
        """A notebook diagnostic: its line and column are inside a cell, not the file."""
        return self.diagnostic.cell is not None

    @property
    def cell_position(self) -> str:
        """``cell 3, line 2, column 5`` for a notebook diagnostic, else ""."""
        d = self.diagnostic
        return f"cell {d.cell}, line {d.line}, column {d.column}" if self.in_cell else ""

    @property
    def message(self) -> str:
        """The message, led by the cell position where lines are the file's own (notebooks)."""
        position = self.cell_position
        return f"{position}: {self.diagnostic.message}" if position else self.diagnostic.message


def findings(result: RunResult, paths: ProjectPaths) -> list[Finding]:
    """Every diagnostic of the run, errors included, in path, line, column and code order."""
    found = [
        Finding(paths.shown(diagnostic.path), diagnostic)
        for outcome in result.outcomes
        for diagnostic in outcome.diagnostics
    ]
    return sorted(found, key=lambda finding: finding.sort_key)


def severity_label(severity: Severity, mode: Mode) -> str:
    """What a diagnostic is called in every format: an edit is ``fixable`` in ``--check`` and
    ``--diff`` (nothing was written) and ``fixed`` when the run wrote it."""
    return fixed_label(mode) if severity is Severity.FIXED else str(severity)


@dataclass(frozen=True)
class RuleInfo:
    """What the formats show about a rule."""

    code: str
    name: str
    summary: str
    fix_safety: str
    documentation: str

    @classmethod
    def of(cls, rule: type[Rule]) -> RuleInfo:
        return cls(rule.CODE, rule.NAME, rule.SUMMARY, str(rule.FIX_SAFETY), rule.documentation())

    @property
    def what_it_does(self) -> str:
        """The documentation's first section, the rule's one-paragraph description."""
        return doc_section(self.documentation, "What it does") or self.summary


def rule_infos(codes: Iterable[str]) -> list[RuleInfo]:
    """The rules with these codes, in code order (codes no rule has are left out)."""
    wanted = set(codes)
    return [RuleInfo.of(rule) for rule in all_rules() if rule.CODE in wanted]


def doc_section(documentation: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading, stripped ("" if absent)."""
    lines: list[str] = []
    inside = False
    for line in documentation.splitlines():
        if line.startswith("## "):
            if inside:
                break
            inside = line[3:].strip() == heading
            continue
        if inside:
            lines.append(line)
    return "\n".join(lines).strip()


def rules_by_code(rules: Sequence[RuleInfo]) -> dict[str, RuleInfo]:
    return {rule.code: rule for rule in rules}
