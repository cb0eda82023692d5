"""The summary tables: drawn without rich where rich would draw the same characters.

Off a terminal (a pre-commit hook, CI, a pipe) ``print_summary`` writes the tables itself, so
that a run on a few files does not import rich; these tests hold that output to what rich draws
for the same table, and check that rich still draws them where it would draw them differently.
"""

from __future__ import annotations

import io
from collections import Counter

import pytest
from rich.console import Console

from migrator.diagnostics import Severity
from migrator.jobs import Mode
from migrator.report import Summary, TextTable, print_summary, rules_table, summary_table

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
