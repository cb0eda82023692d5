"""Rendering a run: text lines, the summary tables, coloured diffs and the JSON document.

Only this module (and the CLI) turn outcomes into text; nothing here decides an exit code.

The summary tables are drawn by rich on a terminal (colour, the width of the window). Anywhere
else (a pre-commit hook, CI, a pipe) :meth:`TextTable.lines` draws the same characters that
rich would: importing rich costs more CPU than checking a handful of files.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import click

import migrator
from migrator.diagnostics import Diagnostic, Severity
from migrator.results import Status
from migrator.runner import Mode, Outcome, RunResult
from migrator.settings import Settings

if TYPE_CHECKING:
    from rich.table import Table

JSON_SCHEMA_VERSION = 1
SEVERITY_COLUMNS = (Severity.FIXED, Severity.MANUAL, Severity.INFO)


@dataclass
class Summary:
    scanned: int = 0
    changed: int = 0
    unchanged: int = 0
    skipped: int = 0
    errors: int = 0
    copied: int = 0
    cached: int = 0
    by_rule: dict[str, Counter[Severity]] = field(default_factory=dict)

    @classmethod
    def of(cls, result: RunResult) -> Summary:
        summary = cls(scanned=len(result.outcomes), copied=result.copied)
        for outcome in result.outcomes:
            if outcome.status is Status.CHANGED:
                summary.changed += 1
            elif outcome.status is Status.UNCHANGED:
                summary.unchanged += 1
            elif outcome.status is Status.SKIPPED:
                summary.skipped += 1
            else:
                summary.errors += 1
            summary.cached += outcome.cached
            for diagnostic in outcome.diagnostics:
                if diagnostic.severity is not Severity.ERROR:
                    counts = summary.by_rule.setdefault(diagnostic.code, Counter())
                    counts[diagnostic.severity] += 1
        return summary

    def to_json(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "errors": self.errors,
            "copied": self.copied,
            "cached": self.cached,
            "rules": {
                code: {str(severity): counts[severity] for severity in SEVERITY_COLUMNS}
                for code, counts in sorted(self.by_rule.items())
            },
        }


def fixed_label(mode: Mode) -> str:
    """What an edit is called: done in write/output mode, only possible in check/diff mode."""
    return "fixable" if mode in (Mode.CHECK, Mode.DIFF) else "fixed"


def render_diagnostic(diagnostic: Diagnostic, mode: Mode) -> str:
    """``path:line:column: CODE [label] message``; in a notebook ``path:cell N:line:column``
    (the line in the cell), as ruff writes it."""
    label = fixed_label(mode) if diagnostic.severity is Severity.FIXED else diagnostic.severity
    return f"{diagnostic.location}: {diagnostic.code} [{label}] {diagnostic.message}"


def codes_of(outcome: Outcome) -> str:
    return ", ".join(sorted({d.code for d in outcome.edits})) or "no rule code"


def file_lines(result: RunResult, mode: Mode, verbose: bool) -> Iterable[str]:
    """One line per changed file, then (verbose) every edit and skipped file."""
    verb = {
        Mode.WRITE: "migrated",
        Mode.OUTPUT: "migrated",
        Mode.CHECK: "would migrate",
        Mode.DIFF: "would migrate",
    }[mode]
    for outcome in result.outcomes:
        if outcome.status is Status.CHANGED:
            yield f"{verb} {outcome.path} ({codes_of(outcome)})"
            if verbose:
                for edit in outcome.edits:
                    yield "    " + render_diagnostic(edit, mode)
        elif verbose and outcome.status is Status.SKIPPED:
            yield f"skipped {outcome.path}: {outcome.reason}"


def finding_lines(result: RunResult, mode: Mode) -> Iterable[str]:
    """Every manual-review and info diagnostic, in path and line order."""
    for outcome in result.outcomes:
        for diagnostic in outcome.findings:
            yield render_diagnostic(diagnostic, mode)


def error_lines(result: RunResult) -> Iterable[str]:
    for outcome in result.outcomes:
        if outcome.status is Status.ERROR:
            yield f"error: {outcome.path}: {outcome.reason}"


@dataclass(frozen=True)
class TextTable:
    """A small table of text cells: a title, a header row and rows, each column left- or
    right-justified, as rich draws a ``Table`` with its default box and padding."""

    title: str
    headers: tuple[str, ...]
    right: tuple[bool, ...]  # right-justified columns
    rows: tuple[tuple[str, ...], ...]
    alarming: frozenset[int] = frozenset()  # rows shown in bold red (on a terminal)

    def widths(self) -> list[int]:
        """Each column's width, its padding of one space on each side included."""
        columns = zip(self.headers, *self.rows, strict=False)
        return [max(len(cell) for cell in column) + 2 for column in columns]

    @property
    def width(self) -> int:
        return sum(self.widths()) + len(self.headers) + 1

    def lines(self) -> list[str]:
        """The table as rich prints it without colour: the title left-justified over the whole
        width, then the box (heavy above the header, light below)."""
        widths = self.widths()

        def row(cells: Sequence[str], edge: str, between: str) -> str:
            texts = [
                f" {cell.rjust(width - 2) if right else cell.ljust(width - 2)} "
                for cell, width, right in zip(cells, widths, self.right, strict=True)
            ]
            return edge + between.join(texts) + edge

        def rule(left: str, fill: str, between: str, end: str) -> str:
            return left + between.join(fill * width for width in widths) + end

        return [
            self.title.ljust(self.width),
            rule("┏", "━", "┳", "┓"),
            row(self.headers, "┃", "┃"),
            rule("┡", "━", "╇", "┩"),
            *(row(cells, "│", "│") for cells in self.rows),
            rule("└", "─", "┴", "┘"),
        ]

    def rich(self) -> Table:
        from rich.table import Table

        table = Table(title=self.title, title_justify="left", show_header=True)
        for header, right in zip(self.headers, self.right, strict=True):
            table.add_column(header, justify="right" if right else "left")
        for number, cells in enumerate(self.rows):
            table.add_row(*cells, style="bold red" if number in self.alarming else None)
        return table


def summary_table(summary: Summary, mode: Mode) -> TextTable:
    changed = "would change" if mode in (Mode.CHECK, Mode.DIFF) else "changed"
    rows = [
        ("scanned", summary.scanned),
        (changed, summary.changed),
        ("unchanged", summary.unchanged),
        ("skipped", summary.skipped),
        ("errors", summary.errors),
    ]
    if mode is Mode.OUTPUT:
        rows.append(("other files copied", summary.copied))
    alarming = frozenset(
        number for number, (name, count) in enumerate(rows) if name == "errors" and count
    )
    cells = tuple((name, str(count)) for name, count in rows)
    return TextTable("npu-migrate summary", ("files", "count"), (False, True), cells, alarming)


def rules_table(summary: Summary, mode: Mode, names: dict[str, str]) -> TextTable:
    fixed = "changes" if mode in (Mode.WRITE, Mode.OUTPUT) else "fixable"
    cells = tuple(
        (code, names.get(code, ""), *(str(counts[severity]) for severity in SEVERITY_COLUMNS))
        for code, counts in sorted(summary.by_rule.items())
    )
    headers = ("code", "rule", fixed, "manual review", "info")
    return TextTable("by rule", headers, (False, False, True, True, True), cells)


def print_summary(
    summary: Summary, mode: Mode, names: dict[str, str], stream: IO[str], color: bool | None
) -> None:
    tables = [summary_table(summary, mode)]
    if summary.by_rule:
        tables.append(rules_table(summary, mode, names))
    if not any(_needs_rich(table, stream, color) for table in tables):
        for table in tables:
            stream.write("".join(line + "\n" for line in table.lines()))
        return
    from rich.console import Console

    console = Console(
        file=stream,
        highlight=False,
        force_terminal=True if color else None,  # None: rich asks the stream
        no_color=color is False,
    )
    for table in tables:
        console.print(table.rich())


def _needs_rich(table: TextTable, stream: IO[str], color: bool | None) -> bool:
    """Whether rich draws ``table`` differently from :meth:`TextTable.lines`: on a terminal
    or with ``--color`` (styles), in an encoding without box characters (ASCII boxes), or
    where it does not fit the width rich would give it (wrapped cells); on Windows, whose
    consoles rich handles its own way."""
    if color or _terminal(stream) or sys.platform == "win32":
        return True
    if not (getattr(stream, "encoding", None) or "utf-8").lower().startswith("utf"):
        return True
    return len(table.title) > table.width or table.width > _rich_width()


def _terminal(stream: IO[str]) -> bool:
    """Whether rich takes ``stream`` for a terminal (its environment variables first)."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _rich_width() -> int:
    """The width rich gives output that is not a terminal: ``COLUMNS``, else the size of a
    terminal on the standard streams, else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return int(columns)
    for descriptor in (0, 1, 2):
        try:
            width = os.get_terminal_size(descriptor).columns
        except (OSError, ValueError):
            continue
        if width:
            return width
    return 80


def colour_diff(diff: str) -> str:
    """ANSI colours for a terminal; click.echo strips them again when the output is piped."""
    out = []
    for line in diff.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            out.append(click.style(line, bold=True))
        elif line.startswith("@@"):
            out.append(click.style(line, fg="cyan"))
        elif line.startswith("+"):
            out.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            out.append(click.style(line, fg="red"))
        else:
            out.append(line)
    return "".join(out)


def write_json(
    stream: IO[str],
    result: RunResult,
    mode: Mode,
    codes: Sequence[str],
    settings: Settings,
    exit_code: int,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write the ``--format json`` / ``--report`` document (schema in docs/cli.md) to
    ``stream``, as ``json.dumps(document, indent=2)`` writes it, one entry at a time: the
    document is never built, so a monorepo's diagnostics are not held a second time as JSON
    values, nor its text as one string. ``extra`` keys (the baseline's and the suppression
    writer's summaries) follow the entries."""
    head = {
        "schema_version": JSON_SCHEMA_VERSION,
        "tool": "npu-migrate",
        "version": migrator.__version__,
        "mode": str(mode),
        "rules": list(codes),
        "settings": {"target": str(settings.target), "unsafe_fixes": settings.unsafe_fixes},
        "exit_code": exit_code,
        "summary": Summary.of(result).to_json(),
    }
    outcomes = result.outcomes
    entries = {
        "files": (_file_entry(outcome) for outcome in outcomes),
        "edits": (d.to_json() for outcome in outcomes for d in outcome.edits),
        "diagnostics": (
            d.to_json()
            for outcome in outcomes
            for d in outcome.diagnostics
            if d.severity is not Severity.FIXED
        ),
    }
    stream.write("{")
    separator = "\n  "
    for key, value in head.items():
        stream.write(f"{separator}{json.dumps(key)}: {_nested(value, 1)}")
        separator = ",\n  "
    for key, values in entries.items():
        stream.write(f"{separator}{json.dumps(key)}: [")
        item_separator = "\n    "
        for value in values:
            stream.write(item_separator + _nested(value, 2))
            item_separator = ",\n    "
        stream.write("]" if item_separator == "\n    " else "\n  ]")
    for key, value in (extra or {}).items():
        stream.write(f"{separator}{json.dumps(key)}: {_nested(value, 1)}")
    stream.write("\n}")


def _nested(value: Any, depth: int) -> str:
    """``value`` as ``json.dumps(..., indent=2)`` writes it ``depth`` levels down."""
    return json.dumps(value, indent=2).replace("\n", "\n" + "  " * depth)


def _file_entry(outcome: Outcome) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "path": outcome.path,
        "status": str(outcome.status),
        "reason": outcome.reason,
        "codes": sorted({d.code for d in outcome.edits}),
    }
    if outcome.diff is not None:
        entry["diff"] = outcome.diff
    return entry
