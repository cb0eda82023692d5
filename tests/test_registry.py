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
    # A rule either has fixed trigger strings or derives them from the run (Rule.triggers).
    derived = rule.triggers is not Rule.triggers.__func__.__get__(rule)  # type: ignore[attr-defined]
    assert rule.TRIGGER or derived
    assert all(isinstance(word, str) and word for word in rule.TRIGGER)
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


class _OptIn(Rule):
    """A stand-in opt-in rule for the selection tests (never registered)."""

    CODE = "NPU1990"
    NAME = "opt-in-example"
    SUMMARY = "an opt-in example"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("x",)
    OPT_IN = True


def test_an_opt_in_rule_runs_only_when_its_full_code_is_selected() -> None:
    rules = (*RULES, _OptIn)
    assert _OptIn not in select_rules(rules)  # nothing selected: every rule but the opt-in ones
    assert _OptIn not in select_rules(rules, ["NPU1"])  # a prefix is not enough
    assert _OptIn not in select_rules(rules, ["NPU"])
    assert select_rules(rules, ["npu1990"]) == (_OptIn,)
    with_others = select_rules(rules, ["NPU1", "NPU1990"])
    assert _OptIn in with_others and "NPU102" in [r.CODE for r in with_others]
    assert _OptIn not in select_rules(rules, ["NPU1990"], ["NPU1"])  # ignore still wins


def test_every_opt_in_rule_says_so_in_its_documentation() -> None:
    assert _OptIn.documentation().startswith("Opt-in: runs only when selected by its full code")
    for rule in RULES:
        says_so = rule.documentation().startswith("Opt-in:")
        assert says_so == rule.OPT_IN, rule.CODE


def test_npu104_is_opt_in() -> None:
    combine_ddp = rule_by_code("NPU104")
    assert combine_ddp.OPT_IN
    assert combine_ddp not in select_rules(RULES)
    assert combine_ddp in select_rules(RULES, ["NPU", "NPU104"])
