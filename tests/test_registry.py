"""Rule discovery and the declarative header every rule must carry."""

from __future__ import annotations

import importlib.util
import re

import pytest

from migrator.registry import UnknownRuleError, all_rules, rule_by_code, select_rules
from migrator.rule import DOC_SECTIONS, FixSafety, Rule

RULES = all_rules()


def test_rules_are_found_by_walking_the_package_and_sorted_by_code() -> None:
    codes = [rule.CODE for rule in RULES]
    assert codes == sorted(codes)
    assert "NPU102" in codes


def test_rules_are_not_a_top_level_package() -> None:
    assert importlib.util.find_spec("migrator.rules") is not None
    assert all(rule.__module__.startswith("migrator.rules.") for rule in RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.CODE)
def test_header(rule: type[Rule]) -> None:
    assert re.fullmatch(r"NPU[1-9]\d\d", rule.CODE)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.NAME)
    assert rule.SUMMARY and "\n" not in rule.SUMMARY
    assert isinstance(rule.FIX_SAFETY, FixSafety)
    assert rule.TRIGGER and all(isinstance(word, str) and word for word in rule.TRIGGER)
    assert rule.__module__.rsplit(".", 1)[-1].startswith(rule.CODE.lower() + "_")


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.CODE)
def test_documentation_has_every_section_in_order(rule: type[Rule]) -> None:
    headings = re.findall(r"^## (.+)$", rule.documentation(), flags=re.MULTILINE)
    assert headings == list(DOC_SECTIONS)


def test_selection_by_code_and_prefix() -> None:
    assert [r.CODE for r in select_rules(RULES, ["NPU102"])] == ["NPU102"]
    by_prefix = select_rules(RULES, ["NPU1"])
    assert by_prefix and all(r.CODE.startswith("NPU1") for r in by_prefix)
    assert "NPU102" not in [r.CODE for r in select_rules(RULES, [], ["npu102"])]
    with pytest.raises(UnknownRuleError):
        select_rules(RULES, ["NPU999X"])
    assert rule_by_code("npu102").CODE == "NPU102"
