"""Rendering a run: text lines, the rich summary table, coloured diffs and the JSON document.

Only this module (and the CLI) turn outcomes into text; nothing here decides an exit code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import click
from rich.console import Console
from rich.table import Table

import migrator
from migrator.diagnostics import Diagnostic, Severity
from migrator.results import Status
from migrator.runner import Mode, Outcome, RunResult
from migrator.settings import Settings

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


def summary_table(summary: Summary, mode: Mode) -> Table:
    changed = "would change" if mode in (Mode.CHECK, Mode.DIFF) else "changed"
    table = Table(title="npu-migrate summary", title_justify="left", show_header=True)
    table.add_column("files", justify="left")
    table.add_column("count", justify="right")
    rows = [
        ("scanned", summary.scanned),
        (changed, summary.changed),
        ("unchanged", summary.unchanged),
        ("skipped", summary.skipped),
        ("errors", summary.errors),
    ]
    if mode is Mode.OUTPUT:
        rows.append(("other files copied", summary.copied))
    for name, count in rows:
        style = "bold red" if name == "errors" and count else None
        table.add_row(name, str(count), style=style)
    return table


def rules_table(summary: Summary, mode: Mode, names: dict[str, str]) -> Table:
    table = Table(title="by rule", title_justify="left")
    table.add_column("code")
    table.add_column("rule")
    table.add_column("changes" if mode in (Mode.WRITE, Mode.OUTPUT) else "fixable", justify="right")
    table.add_column("manual review", justify="right")
    table.add_column("info", justify="right")
    for code, counts in sorted(summary.by_rule.items()):
        table.add_row(
            code, names.get(code, ""), *(str(counts[severity]) for severity in SEVERITY_COLUMNS)
        )
    return table


def print_summary(
    summary: Summary, mode: Mode, names: dict[str, str], stream: IO[str], color: bool | None
) -> None:
    console = Console(
        file=stream,
        highlight=False,
        force_terminal=True if color else None,  # None: rich asks the stream
        no_color=color is False,
    )
    console.print(summary_table(summary, mode))
    if summary.by_rule:
        console.print(rules_table(summary, mode, names))


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


def json_document(
    result: RunResult,
    mode: Mode,
    codes: Sequence[str],
    settings: Settings,
    exit_code: int,
) -> dict[str, Any]:
    """The ``--format json`` / ``--report`` document; its schema is documented in docs/cli.md."""
    files = []
    for outcome in result.outcomes:
        entry: dict[str, Any] = {
            "path": outcome.path,
            "status": str(outcome.status),
            "reason": outcome.reason,
            "codes": sorted({d.code for d in outcome.edits}),
        }
        if outcome.diff is not None:
            entry["diff"] = outcome.diff
        files.append(entry)
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "tool": "npu-migrate",
        "version": migrator.__version__,
        "mode": str(mode),
        "rules": list(codes),
        "settings": {"target": str(settings.target), "unsafe_fixes": settings.unsafe_fixes},
        "exit_code": exit_code,
        "summary": Summary.of(result).to_json(),
        "files": files,
        "edits": [d.to_json() for o in result.outcomes for d in o.edits],
        "diagnostics": [
            d.to_json()
            for o in result.outcomes
            for d in o.diagnostics
            if d.severity is not Severity.FIXED
        ],
    }
