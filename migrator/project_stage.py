"""The project stage: before any file is checked, summarise the files some rule needs facts
about, then let each rule link its summaries across files (:mod:`migrator.analysis.project`
describes the facts; this module drives the rules that produce them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from migrator.analysis.parse import index_of_bytes
from migrator.analysis.project import (
    Facts,
    Module,
    ProjectFacts,
    ProjectFiles,
    module_name,
    read_python,
    run_folder,
)
from migrator.registry import RuleEntry, entries_of
from migrator.rule import Linking, Rule, run_plans
from migrator.settings import Settings


@dataclass
class ProjectBuilder:
    """Collects facts file by file while the runner reads the run's files."""

    rules: Sequence[type[Rule]]
    modules: list[Module] = field(default_factory=list)
    python: dict[str, dict[str, Facts]] = field(default_factory=dict)
    native: dict[str, dict[str, Facts]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)  # every Python file given, for linking
    link_failures: dict[str, str] = field(default_factory=dict)  # key -> the error
    summary_failures: dict[str, str] = field(default_factory=dict)  # path -> the error
    # Summaries of earlier runs (migrator.cache.SummaryCache) and those made by this one, by
    # content hash, module name and path: a file seen before is not parsed again.
    remembered: Mapping[str, Any] = field(default_factory=dict)
    learned: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def entries(self) -> tuple[RuleEntry, ...]:
        """The rules' entries: a rule is imported only for a file that holds one of its
        project trigger strings (:meth:`~migrator.registry.RuleEntry.wants_summary`)."""
        return entries_of(self.rules)

    @property
    def wanted(self) -> bool:
        """Does any selected rule use project facts at all?"""
        return any(entry.project_trigger or entry.native_trigger for entry in self.entries)

    def add_python(self, path: str, source: bytes, digest: str | None = None) -> None:
        """Summarise one Python file for every rule whose ``PROJECT_TRIGGER`` it contains
        (once per shared key); ``digest`` (its content hash) lets a summary be remembered."""
        self.paths.append(path)
        interested: dict[str, Any] = {}
        for entry in self.entries:
            if entry.project_trigger and entry.wants_summary(source):
                interested.setdefault(entry.project_key, entry.load())
        if not interested:
            return
        module = Module(path, module_name(path))
        # A summary may depend on the module's name (relative imports) as well as the content.
        memo = f"{digest}:{module.name}:{path}" if digest is not None else None
        found = self.remembered.get(memo) if memo is not None else None
        if isinstance(found, dict):
            self._add_summaries(module, found)
            return
        index = index_of_bytes(source, path)
        if index is None:
            return  # the per-file stage reports the syntax or decoding error
        try:
            found = {}
            for key, rule in interested.items():
                facts = rule.summarize(index, module)
                if facts:
                    found[key] = facts
        except Exception as error:  # the runner leaves the file untouched; see left_untouched
            self.summary_failures[path] = f"{key}: {type(error).__name__}: {error}"
            raise
        finally:
            index.release()
        self._add_summaries(module, found)
        if memo is not None and _survives_json(found):
            self.learned[memo] = found

    def _add_summaries(self, module: Module, found: Mapping[str, Facts]) -> None:
        self.modules.append(module)
        for key, facts in found.items():
            self.python.setdefault(key, {})[module.path] = facts

    def add_native(self, path: str, data: bytes) -> None:
        """Summarise one C, C++ or CUDA source for every rule whose ``NATIVE_TRIGGER`` it
        contains; undecodable bytes are replaced (scanners look for ASCII patterns only)."""
        interested = [entry.load() for entry in self.entries if entry.wants_native(data)]
        if not interested:
            return
        text = data.decode("utf-8", errors="replace")
        for rule in interested:
            facts = rule.summarize_native(text, path)
            if facts:
                self.native.setdefault(rule.CODE, {})[path] = facts

    def build(
        self, settings: Settings | None = None, read: Callable[[str], bytes | None] = read_python
    ) -> ProjectFacts:
        """The summaries, then what each rule (once per key) links from them; ``settings``
        are the run's (the defaults when None), ``read`` reads a file of the run again."""
        facts = ProjectFacts(
            tuple(sorted(self.modules, key=lambda m: m.path)),
            {code: dict(sorted(by_path.items())) for code, by_path in sorted(self.python.items())},
            {code: dict(sorted(by_path.items())) for code, by_path in sorted(self.native.items())},
        )
        linked = self._link(facts, settings, read)
        return replace(facts, linked=linked) if linked else facts

    def _link(
        self, facts: ProjectFacts, settings: Settings | None, read: Callable[[str], bytes | None]
    ) -> dict[str, dict[str, Facts]]:
        linkers: dict[str, Any] = {}
        for entry in self.entries:
            if entry.project_trigger and facts.summaries(entry.project_key):
                linkers.setdefault(entry.project_key, entry.load())
        if not linkers:
            return {}
        if settings is None:
            settings = Settings()
        files = ProjectFiles(self.paths, read)
        # A link may read any run plan: every rule that gives one is imported.
        planners = [entry.load() for entry in self.entries if entry.run_plans]
        linking = Linking(facts, files, settings, run_plans(planners, settings))
        linked: dict[str, dict[str, Facts]] = {}
        try:
            for key, rule in sorted(linkers.items()):
                try:
                    found = rule.link(linking)
                except Exception as error:  # a bug in one rule's link: see link_failures
                    self.link_failures[key] = f"{type(error).__name__}: {error}"
                    continue
                if found:
                    linked[key] = dict(sorted(found.items()))
        finally:
            files.release()
        return linked

    def left_untouched(self, facts: ProjectFacts) -> dict[str, str]:
        """Path -> message for the files the runner must leave untouched besides those whose
        own summary failed: every file summarised for a rule whose link failed (checked without
        the facts, a rule could act on half of them), and every file that sees a file whose
        summary failed or is seen by it (its facts are missing from the link: an optimizer
        that another module's amp reads would look unread)."""
        untouched = {
            path: f"internal error while linking {key}'s project facts, file left untouched: "
            f"{message}"
            for key, message in self.link_failures.items()
            for path in facts.summaries(key)
        }
        if not self.summary_failures:
            return untouched
        roots, top = facts.roots, run_folder(self.paths)
        for path in self.paths:
            if path in untouched or path in self.summary_failures:
                continue
            for failed, message in self.summary_failures.items():
                if roots.sees(path, failed, top) or roots.sees(failed, path, top):
                    untouched[path] = (
                        f"internal error in the project summary of {failed}, whose facts this "
                        f"file may depend on; file left untouched: {message}"
                    )
                    break
        return untouched


def _survives_json(facts: Mapping[str, Facts]) -> bool:
    """Whether ``facts`` come back equal from JSON (a tuple would come back a list): only
    those are remembered across runs."""
    try:
        return bool(json.loads(json.dumps(facts)) == facts)
    except (TypeError, ValueError):
        return False


def read_native(paths: list[str]) -> Iterator[tuple[str, bytes]]:
    """``(path, bytes)`` of each readable native source (one that cannot be read only costs its
    facts)."""
    for path in paths:
        try:
            with open(path, "rb") as stream:
                yield path, stream.read()
        except OSError:
            continue
