"""``--format csv`` / ``--csv-dir``: the two review lists of Huawei's msFmkTransplt.

msFmkTransplt (the "PyTorch GPU2Ascend" analysis and migration tool of Ascend's MindStudio)
writes, among others, ``change_list.csv`` (what the migration changed) and
``unsupported_api.csv`` (torch APIs torch_npu does not support). Teams keep review sheets built
on them, so these files have the same names and the same columns:

- ``change_list.csv``: ``File, Start Line, End Line, Operation Type, Message``, one row per edit
  (``fixed`` diagnostic; in ``--check`` / ``--diff`` the edits the run would make);
- ``unsupported_api.csv``: ``File, Start Line, End Line, OP, Tips``, one row per diagnostic of
  the unsupported-API rules (those that set ``Rule.UNSUPPORTED_API_SHEET``: NPU930, NPU931).

A diagnostic is a point, so both line columns hold its line. ``Operation Type`` is ``MODIFY``
(msFmkTransplt's other values, ``INSERT`` and ``DELETE``, describe its own rule engine's edits).
``Message`` and ``Tips`` start with the rule code (``NPU301: ...``) so that a row leads to
``npu-migrate --explain``. ``OP`` is the API the diagnostic names: the first `quoted` name of
its message. ``File`` is relative to the project folder. In a notebook the lines are those of
the cell named at the start of the message (``NPU301: cell 3: ...``).

Encoding and layout follow msFmkTransplt's pandas output: UTF-8 without a byte-order mark, a
header row, ``,`` separators, ``"`` quoting only where needed, ``\\n`` line ends. A cell that
starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``, so that
a spreadsheet shows it as text instead of evaluating it as a formula.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from migrator.diagnostics import Severity
from migrator.files import write_atomic
from migrator.formats import Finding, ProjectPaths, findings
from migrator.registry import all_rules
from migrator.runner import RunResult

CHANGE_LIST = "change_list.csv"
UNSUPPORTED_API = "unsupported_api.csv"
CHANGE_COLUMNS = ("File", "Start Line", "End Line", "Operation Type", "Message")
UNSUPPORTED_COLUMNS = ("File", "Start Line", "End Line", "OP", "Tips")
OPERATION_TYPE = "MODIFY"

_QUOTED = re.compile(r"`([^`]+)`")
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

Row = tuple[str, int, int, str, str]


@dataclass(frozen=True)
class WrittenLists:
    """Where the lists went and how many rows each has."""

    change_list: Path
    changes: int
    unsupported_api: Path
    unsupported: int


def change_rows(result: RunResult, paths: ProjectPaths) -> list[Row]:
    """One row per edit, in path, line and column order."""
    return [
        _row(finding, OPERATION_TYPE)
        for finding in findings(result, paths)
        if finding.diagnostic.severity is Severity.FIXED
    ]


def unsupported_rows(result: RunResult, paths: ProjectPaths) -> list[Row]:
    """One row per diagnostic of an unsupported-API rule, in path, line and column order."""
    return [
        _row(finding, api_name(finding))
        for finding in findings(result, paths)
        if finding.diagnostic.code in unsupported_api_codes()
        and finding.diagnostic.severity is not Severity.ERROR
    ]


def unsupported_api_codes() -> frozenset[str]:
    """The rules whose findings are msFmkTransplt's "unsupported API" rows: torch APIs that
    torch_npu does not support, and those it supports with a difference in behaviour."""
    return frozenset(rule.CODE for rule in all_rules() if rule.UNSUPPORTED_API_SHEET)


def api_name(finding: Finding) -> str:
    """The API a diagnostic is about: the first `quoted` name of its message, without a call's
    ``(...)``; the rule code when the message quotes nothing."""
    match = _QUOTED.search(finding.diagnostic.message)
    if match is None:
        return finding.diagnostic.code
    return match.group(1).removesuffix("(...)").removesuffix("()")


def _row(finding: Finding, fourth: str) -> Row:
    diagnostic = finding.diagnostic
    cell = f"cell {diagnostic.cell}: " if finding.in_cell else ""
    text = f"{diagnostic.code}: {cell}{diagnostic.message}"
    return (finding.path, diagnostic.line, diagnostic.line, fourth, text)


def render(columns: Sequence[str], rows: Iterable[Row]) -> bytes:
    """The CSV bytes of a header and rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_as_text(cell) if isinstance(cell, str) else cell for cell in row])
    return buffer.getvalue().encode("utf-8")


def _as_text(cell: str) -> str:
    return "'" + cell if cell.startswith(_FORMULA_STARTS) else cell


def write_lists(folder: Path, result: RunResult, paths: ProjectPaths) -> WrittenLists:
    """Write both lists into ``folder`` (created if missing), each replaced atomically.

    Raises ``OSError`` when the folder or a file cannot be written."""
    os.makedirs(folder, exist_ok=True)
    changes = change_rows(result, paths)
    unsupported = unsupported_rows(result, paths)
    change_file = folder / CHANGE_LIST
    unsupported_file = folder / UNSUPPORTED_API
    write_atomic(str(change_file), render(CHANGE_COLUMNS, changes), 0o644)
    write_atomic(str(unsupported_file), render(UNSUPPORTED_COLUMNS, unsupported), 0o644)
    return WrittenLists(change_file, len(changes), unsupported_file, len(unsupported))
