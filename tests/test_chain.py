"""The rule chain: later rules see earlier rules' output, but report against the original file."""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from migrator.diagnostics import Severity
from migrator.engine import Status, migrate_source
from migrator.rule import FixSafety, Rule, Settings


class AddsApexImport(Rule):
    """Shifts every line down by one, as NPU101 does when it adds `import apex`."""

    CODE = "NPU801"
    NAME = "adds-import"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile("helper")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        is_helper = m.matches(original_node.func, m.Name("helper"))
        if is_helper and self.fix(original_node, "helper -> apex.helper"):
            self.add_import("apex")
            return updated_node.with_changes(func=cst.parse_expression("apex.helper"))
        return updated_node


class ReportsCuda(Rule):
    """Reports every `.cuda` attribute."""

    CODE = "NPU802"
    NAME = "reports-cuda"
    SUMMARY = "test rule"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = re.compile("cuda")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "cuda":
            self.report(node.attr, "cuda")


SOURCE = b"""import os
helper()
x.cuda()
y.cuda()  # npu-migrate: ignore[NPU802]
z.cuda()
"""


def test_later_rules_report_at_original_lines_and_honour_moved_suppressions() -> None:
    result = migrate_source(SOURCE, "t.py", (AddsApexImport, ReportsCuda), Settings())
    assert result.status is Status.CHANGED
    assert result.migrated.startswith(b"import os\nimport apex\napex.helper()\n")
    found = [(d.line, d.column, d.code, d.severity) for d in result.diagnostics]
    assert found == [
        (2, 1, "NPU801", Severity.FIXED),
        (3, 3, "NPU802", Severity.MANUAL),
        (5, 3, "NPU802", Severity.MANUAL),
    ]


def test_without_the_earlier_change_lines_are_the_same() -> None:
    result = migrate_source(SOURCE, "t.py", (ReportsCuda,), Settings())
    assert [(d.line, d.column) for d in result.diagnostics] == [(3, 3), (5, 3)]
