"""Finding rules: every ``Rule`` subclass in a rule module of ``rules/`` (``migrator.rules``).

There is no hand-kept list: adding a file to a family package under ``rules/`` adds a rule.
This is the only module that imports the rules; the engine and the runner get them from here.

A run knows its rules before importing any: ``migrator/data/rules_manifest.json``, written by
``tools/rule_manifest.py`` from the rule classes, holds what the pre-scan, the project stage and
the command line ask of a rule before it runs (code, name, opt-in, trigger strings, plans).
:func:`lazy_rules` gives the selected rules as a sequence that imports them on first use, and
the engine and the project stage import only the rules a file's text triggers
(:meth:`RuleEntry.load`). The manifest records the size of every source file of ``rules/``; where
one differs (a rule edited and the tool not run again), the registry describes the rules by
importing them all, as before: slower, never different.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, overload

from migrator.rule import Rule
from migrator.settings import Settings

RULES_PACKAGE = "migrator.rules"  # rules/, mapped in by pyproject.toml
MANIFEST = Path(__file__).parent / "data" / "rules_manifest.json"


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
    import pkgutil  # only where every rule is imported

    package = importlib.import_module(RULES_PACKAGE)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.ispkg or info.name.rpartition(".")[2].startswith("_"):
            continue
        yield importlib.import_module(info.name)


# -- the manifest ----------------------------------------------------------------------------


def _type_names(kinds: Iterable[type]) -> tuple[str, ...]:
    return tuple(f"{kind.__module__}.{kind.__qualname__}" for kind in kinds)


def _overrides(rule: type[Rule], method: str) -> bool:
    return getattr(rule, method).__func__ is not getattr(Rule, method).__func__


@dataclass(frozen=True)
class RuleEntry:
    """What a run needs to know about a rule before importing its module.

    ``trigger`` is ``triggers(Settings())``; a rule that derives its triggers from the run
    (``dynamic_trigger``) derives them from the project facts, and has these when there are
    none. Plans are named by their types' qualified names.
    """

    code: str
    name: str
    family: str
    module: str
    class_name: str
    opt_in: bool
    trigger: tuple[str, ...]
    dynamic_trigger: bool
    project_trigger: tuple[str, ...]
    native_trigger: tuple[str, ...]
    project_key: str
    provides: tuple[str, ...]
    reads: tuple[str, ...]
    run_plans: tuple[str, ...]
    scans_shell: bool  # has a scan_shell_line of its own
    # The class, when the entry was made from it (RuleEntry.of); else imported by load().
    rule: type[Rule] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, rule: type[Rule]) -> RuleEntry:
        package, _, _ = rule.__module__.rpartition(".")
        return cls(
            code=rule.CODE,
            name=rule.NAME,
            family=package.removeprefix(RULES_PACKAGE + ".") if package != RULES_PACKAGE else "",
            module=rule.__module__,
            class_name=rule.__qualname__,
            opt_in=rule.OPT_IN,
            trigger=tuple(rule.triggers(Settings())),
            dynamic_trigger=_overrides(rule, "triggers"),
            project_trigger=tuple(rule.PROJECT_TRIGGER),
            native_trigger=tuple(rule.NATIVE_TRIGGER),
            project_key=rule.project_key(),
            provides=_type_names(rule.PROVIDES),
            reads=_type_names(rule.READS),
            run_plans=_type_names(rule.RUN_PLANS),
            scans_shell=_overrides(rule, "scan_shell_line"),
            rule=rule,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "family": self.family,
            "module": self.module,
            "class_name": self.class_name,
            "opt_in": self.opt_in,
            "trigger": list(self.trigger),
            "dynamic_trigger": self.dynamic_trigger,
            "project_trigger": list(self.project_trigger),
            "native_trigger": list(self.native_trigger),
            "project_key": self.project_key,
            "provides": list(self.provides),
            "reads": list(self.reads),
            "run_plans": list(self.run_plans),
            "scans_shell": self.scans_shell,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuleEntry:
        values: dict[str, Any] = {
            key: tuple(value) if isinstance(value, list) else value for key, value in data.items()
        }
        return cls(**values)

    def load(self) -> type[Rule]:
        """The rule's class: its module is imported here, the first time it is asked for."""
        if self.rule is not None:
            return self.rule
        found = getattr(importlib.import_module(self.module), self.class_name)
        if not (isinstance(found, type) and issubclass(found, Rule)) or self.code != found.CODE:
            raise RuntimeError(f"{self.module}.{self.class_name} is not rule {self.code}")
        return found

    def triggers(self, settings: Settings) -> tuple[str, ...]:
        """``Rule.triggers(settings)``; the rule is imported only when it derives them from
        project facts and the run has some."""
        if self.rule is not None:
            return self.rule.triggers(settings)
        if self.dynamic_trigger and settings.project:
            return self.load().triggers(settings)
        return self.trigger

    def triggered_by(self, text: str, settings: Settings) -> bool:
        return any(word in text for word in self.triggers(settings))

    def wants_summary(self, source: bytes) -> bool:
        """``Rule.wants_summary``, imported only for a file that holds a ``PROJECT_TRIGGER``
        string (every file the rule summarises holds one)."""
        if not any(word.encode() in source for word in self.project_trigger):
            return False
        return self.load().wants_summary(source)

    def wants_native(self, data: bytes) -> bool:
        return any(word.encode() in data for word in self.native_trigger)


def rules_sources() -> dict[str, int]:
    """The size of every source file of ``rules/`` by path relative to it: what the manifest
    was made from (the package is imported, none of its modules)."""
    folders = list(importlib.import_module(RULES_PACKAGE).__path__)
    sizes: dict[str, int] = {}
    for folder in folders:
        pending = [Path(folder)]
        while pending:
            current = pending.pop()
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir() and not entry.name.startswith((".", "__")):
                        pending.append(Path(entry.path))
                    elif entry.name.endswith(".py") and entry.is_file():
                        key = Path(entry.path).relative_to(folder).as_posix()
                        sizes[key] = entry.stat().st_size
    return dict(sorted(sizes.items()))


def manifest_document() -> dict[str, Any]:
    """The manifest as ``tools/rule_manifest.py`` writes it: every rule, imported."""
    return {
        "generated_by": "tools/rule_manifest.py",
        "sources": rules_sources(),
        "rules": [RuleEntry.of(rule).to_json() for rule in all_rules()],
    }


def _read_manifest() -> tuple[RuleEntry, ...] | None:
    """The manifest's entries, or None when it is absent, damaged or stale."""
    try:
        document = json.loads(MANIFEST.read_text(encoding="utf-8"))
        if document["sources"] != rules_sources():
            return None
        return tuple(RuleEntry.from_json(entry) for entry in document["rules"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@cache
def rule_entries() -> tuple[RuleEntry, ...]:
    """Every rule's entry, sorted by code: from the manifest, or, where it is stale, from the
    rules themselves (importing them all)."""
    found = _read_manifest()
    if found is None:
        found = tuple(RuleEntry.of(rule) for rule in all_rules())
    return found


class LazyRules(Sequence[type[Rule]]):
    """Rules known by their entries; used as a sequence of classes, it imports them all."""

    def __init__(self, entries: Iterable[RuleEntry]) -> None:
        self.entries = tuple(entries)

    @cached_property
    def _rules(self) -> tuple[type[Rule], ...]:
        return tuple(entry.load() for entry in self.entries)

    @overload
    def __getitem__(self, index: int) -> type[Rule]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[type[Rule]]: ...
    def __getitem__(self, index: int | slice) -> type[Rule] | Sequence[type[Rule]]:
        return self._rules[index]

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"LazyRules({', '.join(entry.code for entry in self.entries)})"


def lazy_rules(codes: Iterable[str]) -> LazyRules:
    """The rules with these full codes, in code order, imported when first used."""
    wanted = set(codes)
    return LazyRules(entry for entry in rule_entries() if entry.code in wanted)


def entries_of(rules: Sequence[type[Rule]]) -> tuple[RuleEntry, ...]:
    """The entries of ``rules``: a :class:`LazyRules`' own, else made from the classes."""
    if isinstance(rules, LazyRules):
        return rules.entries
    return tuple(RuleEntry.of(rule) for rule in rules)


# -- selection -------------------------------------------------------------------------------


def select_codes(
    entries: Sequence[RuleEntry], select: Iterable[str] = (), ignore: Iterable[str] = ()
) -> tuple[str, ...]:
    """Codes of the rules whose code starts with a selected prefix (all when none) and with no
    ignored one.

    An opt-in rule (``Rule.OPT_IN``) is in only when a selected entry is its full code.
    """
    return _selected([(entry.code, entry.opt_in) for entry in entries], select, ignore)


def select_rules(
    rules: Sequence[type[Rule]],
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> tuple[type[Rule], ...]:
    """The rules :func:`select_codes` would select, as classes."""
    codes = set(_selected([(rule.CODE, rule.OPT_IN) for rule in rules], select, ignore))
    return tuple(rule for rule in rules if rule.CODE in codes)


def _selected(
    rules: Sequence[tuple[str, bool]], select: Iterable[str], ignore: Iterable[str]
) -> tuple[str, ...]:
    """The codes of ``rules`` (code, opt-in) that the selection keeps."""
    select = [code.strip().upper() for code in select if code.strip()]
    ignore = [code.strip().upper() for code in ignore if code.strip()]
    for prefix in (*select, *ignore):
        if not any(code.startswith(prefix) for code, _ in rules):
            raise UnknownRuleError(f"no rule code starts with {prefix!r}")
    return tuple(
        code
        for code, opt_in in rules
        if (not select or any(code.startswith(p) for p in select))
        and (not opt_in or code in select)
        and not any(code.startswith(p) for p in ignore)
    )


def rule_by_code(code: str) -> type[Rule]:
    """The rule with this code; only its module is imported."""
    for entry in rule_entries():
        if code.strip().upper() == entry.code:
            return entry.load()
    raise UnknownRuleError(f"no rule has the code {code!r}")


def rule_names() -> dict[str, str]:
    """Code -> name of every rule."""
    return {entry.code: entry.name for entry in rule_entries()}
