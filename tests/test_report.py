"""The summary tables, drawn without rich where rich would draw the same characters, and the
JSON document, written entry by entry.

Off a terminal (a pre-commit hook, CI, a pipe) ``print_summary`` writes the tables itself, so
that a run on a few files does not import rich; these tests hold that output to what rich draws
for the same table, and check that rich still draws them where it would draw them differently.
"""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from rich.console import Console

from migrator.diagnostics import Diagnostic, Severity
from migrator.jobs import Mode, Outcome
from migrator.report import (
    Summary,
    TextTable,
    print_summary,
    rules_table,
    summary_table,
    write_json,
)
from migrator.results import Status
from migrator.runner import RunResult
from migrator.settings import Settings

NAMES = {"NPU101": "npu-fused-optimizer", "NPU931": "torch-api-behaviour-note"}


def drawn_by_rich(table: TextTable) -> str:
    stream = io.StringIO()
    Console(file=stream, highlight=False, width=80).print(table.rich())
    return stream.getvalue()


def summaries() -> list[Summary]:
    few = Summary(scanned=3, changed=1, unchanged=2)
    many = Summary(scanned=1_234_567, changed=98_765, unchanged=1_135_802, errors=12, copied=7)
    many.by_rule = {
        "NPU101": Counter({Severity.FIXED: 123_456, Severity.MANUAL: 7}),
        "NPU931": Counter({Severity.INFO: 3}),
        "NPU999": Counter({Severity.MANUAL: 1}),  # a code without a name
    }
    return [few, many, Summary()]


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("summary", summaries(), ids=["few", "many", "nothing"])
def test_tables_are_drawn_as_rich_draws_them(summary: Summary, mode: Mode) -> None:
    tables = [summary_table(summary, mode), rules_table(summary, mode, NAMES)]
    for table in tables:
        assert "".join(line + "\n" for line in table.lines()) == drawn_by_rich(table)


def test_off_a_terminal_the_summary_is_written_without_rich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(variable, raising=False)
    summary = summaries()[1]
    stream = io.StringIO()
    print_summary(summary, Mode.CHECK, NAMES, stream, color=None)
    expected = drawn_by_rich(summary_table(summary, Mode.CHECK)) + drawn_by_rich(
        rules_table(summary, Mode.CHECK, NAMES)
    )
    assert stream.getvalue() == expected


def test_a_table_wider_than_rich_would_draw_it_goes_to_rich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where rich would wrap the cells (COLUMNS narrower than the table), rich draws it."""
    monkeypatch.setenv("COLUMNS", "30")
    summary = summaries()[1]
    stream = io.StringIO()
    print_summary(summary, Mode.CHECK, NAMES, stream, color=None)
    assert max(len(line) for line in stream.getvalue().splitlines()) <= 30


def test_colour_asked_for_goes_to_rich() -> None:
    stream = io.StringIO()
    print_summary(summaries()[0], Mode.CHECK, NAMES, stream, color=True)
    assert "\x1b[" in stream.getvalue()


def outcomes() -> list[Outcome]:
    fixed = Diagnostic("a.py", 3, 5, "NPU301", Severity.FIXED, "`.cuda(...)` -> `.npu(...)`")
    manual = Diagnostic("a.py", 7, 1, "NPU920", Severity.MANUAL, 'quotes " and \\ and é')
    cell = Diagnostic("b.ipynb", 2, 4, "NPU302", Severity.INFO, "in a cell", cell=3)
    return [
        Outcome("a.py", Status.CHANGED, [fixed, manual], diff="--- a.py\n+++ a.py\n"),
        Outcome("b.ipynb", Status.UNCHANGED, [cell]),
        Outcome("c.py", Status.ERROR, [], reason="cannot read file: gone"),
    ]


@pytest.mark.parametrize("kept", [3, 1, 0], ids=["every-list", "no-findings", "no-files"])
def test_the_json_document_is_written_as_json_dumps_would_write_it(kept: int) -> None:
    """Streamed entry by entry, the document is byte for byte what json.dumps(indent=2) makes
    of the same values, empty lists included."""
    result = RunResult(outcomes()[:kept] if kept != 1 else [outcomes()[2]], copied=2)
    stream = io.StringIO()
    write_json(stream, result, Mode.CHECK, ("NPU301", "NPU302"), Settings(), 1)
    text = stream.getvalue()
    document = json.loads(text)
    assert json.dumps(document, indent=2) == text
    assert [entry["path"] for entry in document["files"]] == [o.path for o in result.outcomes]
    assert document["exit_code"] == 1 and document["summary"]["scanned"] == len(result.outcomes)
    expected_edits = [d.to_json() for o in result.outcomes for d in o.edits]
    assert document["edits"] == expected_edits
