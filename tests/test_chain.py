"""Several rules over one file: one analysis of the original, edits composed in one pass.

Every rule reports against the original file's lines, even when an earlier rule's edit adds a
line; a rule that depends on another reads its plan (a typed value, ``Rule.publish`` /
``Rule.read_plan``) instead of its output, and both edits land in the same pass, inner node before
outer node; the chain runs every provider of a plan before its readers, whatever their codes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst
import pytest

from migrator.callargs import append_arg, keyword
from migrator.diagnostics import Severity
from migrator.engine import Engine, migrate_source
from migrator.results import Status
from migrator.rule import FixSafety, Rule, chain_order
from migrator.settings import Settings


@dataclass(frozen=True)
class HelperCalls:
    """NPU801's plan: the `helper(...)` calls it respells, by id."""

    calls: frozenset[int]


class AddsApexImport(Rule):
    """`helper(...)` -> `apex.helper(...)`; adds `import apex` (shifting every line below)."""

    CODE = "NPU801"
    NAME = "adds-import"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("helper",)
    PROVIDES = (HelperCalls,)

    def check(self) -> None:
        planned: set[int] = set()
        for name in self.index.names("helper"):
            call = self.index.parent(name)
            if not (isinstance(call, ast.Call) and call.func is name):
                continue
            edit = self.replace(name, cst.Name, lambda _: cst.parse_expression("apex.helper"))
            if self.fix(call, "helper -> apex.helper", edit):
                self.add_import("apex")
                planned.add(id(call))
        self.publish(HelperCalls(frozenset(planned)))


class ReportsCuda(Rule):
    """Reports every `.cuda` attribute."""

    CODE = "NPU802"
    NAME = "reports-cuda"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("cuda",)

    def check(self) -> None:
        for attribute in self.index.attributes("cuda"):
            self.report(self.attr_position(attribute), "cuda")


class MarksHelperCalls(Rule):
    """Adds `marked=True` to the calls NPU801 rewrites: it reads NPU801's plan. Its code comes
    before NPU801's, so only the chain order makes it run after NPU801."""

    CODE = "NPU800"
    NAME = "marks-helper-calls"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("helper",)
    READS = (HelperCalls,)

    def check(self) -> None:
        plan = self.read_plan(HelperCalls)
        planned = plan.calls if plan is not None else frozenset()
        for call in self.index.nodes(ast.Call):
            if id(call) in planned:
                edit = self.replace(
                    call,
                    cst.Call,
                    lambda node: append_arg(node, keyword("marked", cst.Name("True"))),
                )
                self.fix(call, "marked", edit)


SOURCE = b"""import os
helper()
x.cuda()
y.cuda()  # npu-migrate: ignore[NPU802]
z.cuda()
helper(1)  # npu-migrate: ignore[NPU801]
"""


def test_later_rules_report_at_original_lines_and_honour_suppressions() -> None:
    result = migrate_source(SOURCE, "t.py", (AddsApexImport, ReportsCuda), Settings())
    assert result.status is Status.CHANGED
    assert result.migrated.startswith(b"import os\nimport apex\napex.helper()\n")
    assert b"\nhelper(1)" in result.migrated  # suppressed: left as written
    found = [(d.line, d.column, d.code, d.severity) for d in result.diagnostics]
    assert found == [
        (2, 1, "NPU801", Severity.FIXED),
        (3, 3, "NPU802", Severity.MANUAL),
        (5, 3, "NPU802", Severity.MANUAL),
    ]


def test_without_the_earlier_change_lines_are_the_same() -> None:
    result = migrate_source(SOURCE, "t.py", (ReportsCuda,), Settings())
    assert [(d.line, d.column) for d in result.diagnostics] == [(3, 3), (5, 3)]


def test_a_rule_reading_another_rules_plan_edits_the_same_call_in_the_same_pass() -> None:
    rules = (AddsApexImport, MarksHelperCalls)
    result = migrate_source(
        b"helper(1)\nhelper(2)  # npu-migrate: ignore\n", "t.py", rules, Settings()
    )
    assert result.migrated == (
        b"import apex\napex.helper(1, marked=True)\nhelper(2)  # npu-migrate: ignore\n"
    )
    assert [(d.line, d.code) for d in result.diagnostics] == [(1, "NPU800"), (1, "NPU801")]
    # Without the rule it depends on, it has nothing to act on.
    alone = migrate_source(b"helper(1)\n", "t.py", (MarksHelperCalls,), Settings())
    assert alone.status is Status.UNCHANGED and not alone.diagnostics


def test_check_mode_never_parses_with_libcst() -> None:
    engine = Engine((AddsApexImport, ReportsCuda), Settings())
    checked = engine.migrate(SOURCE, "t.py", apply=False)
    assert checked.status is Status.CHANGED and not checked.parsed
    assert checked.migrated == SOURCE
    written = engine.migrate(SOURCE, "t.py")
    assert written.parsed and written.diagnostics == checked.diagnostics


def test_report_only_findings_never_parse_with_libcst() -> None:
    result = Engine((ReportsCuda,), Settings()).migrate(SOURCE, "t.py")
    assert result.status is Status.UNCHANGED and result.diagnostics and not result.parsed


def test_the_chain_runs_providers_before_readers_and_code_order_otherwise() -> None:
    assert chain_order((MarksHelperCalls, ReportsCuda, AddsApexImport)) == (
        AddsApexImport,
        MarksHelperCalls,
        ReportsCuda,
    )


class ReadsWithoutDeclaring(Rule):
    CODE = "NPU804"
    NAME = "reads-without-declaring"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("helper",)

    def check(self) -> None:
        self.read_plan(HelperCalls)


def test_reading_an_undeclared_plan_fails_the_file_with_the_rules_code() -> None:
    result = migrate_source(b"helper()\n", "t.py", (ReadsWithoutDeclaring,), Settings())
    assert result.status is Status.ERROR
    assert "NPU804" in result.diagnostics[0].message
    assert "HelperCalls not in READS" in result.diagnostics[0].message


class CircularA(Rule):
    CODE = "NPU805"
    NAME = "circular-a"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("x",)
    PROVIDES = (HelperCalls,)
    READS = (int,)


class CircularB(Rule):
    CODE = "NPU806"
    NAME = "circular-b"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("x",)
    PROVIDES = (int,)
    READS = (HelperCalls,)


def test_plans_that_depend_on_each_other_are_refused() -> None:
    with pytest.raises(RuntimeError, match="NPU805, NPU806"):
        chain_order((CircularB, CircularA))
