"""Finding rules: every ``Rule`` subclass in a rule module of ``rules/`` (``migrator.rules``).

There is no hand-kept list: adding a file to a family package under ``rules/`` adds a rule.
This is the only module that imports the rules; the engine and the runner get them from here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from types import ModuleType

from migrator.rule import Rule

RULES_PACKAGE = "migrator.rules"  # rules/, mapped in by pyproject.toml


class UnknownRuleError(ValueError):
    """A code or prefix given to --select, --ignore or --explain matches no rule."""


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule, sorted by code (the order the chain runs in)."""
    found: dict[str, type[Rule]] = {}
    for module in rule_modules():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Rule)
                and value.__module__ == module.__name__
                and "CODE" in vars(value)
            ):
                if value.CODE in found:
                    raise RuntimeError(f"rule code {value.CODE} is defined twice")
                found[value.CODE] = value
    return tuple(found[code] for code in sorted(found))


def rule_modules() -> Iterator[ModuleType]:
    """The modules of ``rules/`` (``migrator.rules``) that hold rules: every module of every
    family package, except the shared ones, whose names start with ``_``."""
    package = importlib.import_module(RULES_PACKAGE)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.ispkg or info.name.rpartition(".")[2].startswith("_"):
            continue
        yield importlib.import_module(info.name)


def select_rules(
    rules: Sequence[type[Rule]],
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> tuple[type[Rule], ...]:
    """Rules whose code starts with a selected prefix (all when none) and with no ignored one.

    An opt-in rule (``Rule.OPT_IN``) is in only when a selected entry is its full code.
    """
    select = [code.strip().upper() for code in select if code.strip()]
    ignore = [code.strip().upper() for code in ignore if code.strip()]
    for prefix in (*select, *ignore):
        if not any(rule.CODE.startswith(prefix) for rule in rules):
            raise UnknownRuleError(f"no rule code starts with {prefix!r}")
    return tuple(
        rule
        for rule in rules
        if (not select or any(rule.CODE.startswith(p) for p in select))
        and (not rule.OPT_IN or rule.CODE in select)
        and not any(rule.CODE.startswith(p) for p in ignore)
    )


def rule_by_code(code: str) -> type[Rule]:
    for rule in all_rules():
        if code.strip().upper() == rule.CODE:
            return rule
    raise UnknownRuleError(f"no rule has the code {code!r}")
