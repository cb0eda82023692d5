"""Library helpers that modules of the run re-export, for NPU928. Not a rule.

yolov5 calls ultralytics' ``autocast`` by a name of its own, from a module of its own::

    # utils/torch_utils.py
    from ultralytics.utils.torch_utils import autocast as smart_amp_autocast
    # train.py
    from utils.torch_utils import smart_amp_autocast

    with smart_amp_autocast(amp):  # ultralytics' autocast: device="cuda"

The file that calls it never names the library, so NPU928 learns what the name is through the
project facts of :mod:`migrator.analysis.project`:

1. **Summary** (files whose text names a library and one of its helpers): the names that an
   import at the top of the module binds to a helper, as another module that imports and calls
   them gets them (:func:`~migrator.analysis.names.resolve_global`): the helper, or, when that
   resolution is ambiguous with the helper among the candidates (a ``try``/``except`` fallback,
   a definition or assignment of the name in the module too, a value alias), the helper with the
   doubt.
2. **Link**: the files whose text holds an exported name are read; a name they bind at their
   top by importing an export is an export too (a package's ``__init__.py``), followed at most
   :data:`MAX_REEXPORTS` times. Then the calls of those files whose callee resolves to an export
   (as the file's own name resolution spells it: ``utils.torch_utils.smart_amp_autocast``,
   ``.torch_utils.smart_amp_autocast``) give the file's facts: that name, the helper and the
   doubt, if any.
3. **Check**: NPU928 takes a call of such a name for a call of the helper, and reports the doubt
   with it.

A module that the importer's name cannot be tied to one file of (which one depends on how the
program is run: an ``AmbiguousModule``) leads to an export when one of those files exports the
name, with that doubt. Not followed: names a star import brings (they are not bound by name
where they are exported), and re-exports of the helper's module rather than of the helper
(``from ultralytics.utils import torch_utils`` in one module, ``utils.torch_utils.autocast`` in
another).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from migrator.analysis import names
from migrator.analysis.index import ModuleIndex, full_name
from migrator.analysis.project import (
    AmbiguousModule,
    Facts,
    ProjectFacts,
    ProjectFiles,
    Resolved,
)
from migrator.analysis.view import FileView

MAX_REEXPORTS = 4  # `from .torch_utils import smart_amp_autocast` in an __init__.py, and on


@dataclass(frozen=True)
class Export:
    """What a name stands for: ``helper``, surely or, when ``doubt`` says why not, maybe."""

    helper: str
    doubt: str = ""


def wants_summary(source: bytes, helpers: Collection[str]) -> bool:
    """Whether the file names one of the helpers' libraries and one of their names (the text
    every file that imports a helper holds)."""
    roots = {helper.split(".", 1)[0].encode() for helper in helpers}
    short = {helper.rsplit(".", 1)[-1].encode() for helper in helpers}
    return any(root in source for root in roots) and any(word in source for word in short)


def summarize(index: ModuleIndex, path: str, helpers: Collection[str]) -> Facts | None:
    """The names bound at the top of the module to one of ``helpers``, by name."""
    short = {helper.rsplit(".", 1)[-1] for helper in helpers}
    exports: dict[str, Export] = {}
    for bound in _imported_at_top(index, short):
        export = _export_of(index, path, bound, lambda dotted: _direct(dotted, helpers))
        if export is not None:
            exports[bound] = export
    return _exports_facts(exports) or None


def link(
    files: ProjectFiles, summaries: Mapping[str, Facts], helpers: Collection[str]
) -> dict[str, Facts] | None:
    """For each file of the run that calls an export by a name other than the helper's: the
    name as its resolution gives it -> the helper and the doubt (``{"names": {...}}``)."""
    tracer = _Tracer(files, helpers, _exports_of_summaries(summaries))
    tracer.follow_reexports()
    facts: dict[str, dict[str, Any]] = {}
    for path in tracer.readers():
        index = files.index(path)
        if index is None:
            continue
        for name, export in tracer.called(FileView(index), path):
            facts.setdefault(path, {"names": {}})["names"][name] = asdict(export)
    return dict(sorted(facts.items())) or None


def linked_names(project: ProjectFacts, key: str, path: str) -> dict[str, Export]:
    """What the link found for the file ``path``: qualified name -> export."""
    found = project.links(key).get(path, {}).get("names", {})
    return {name: Export(**entry) for name, entry in found.items()}


_WORDS: dict[str, tuple[str, ...]] = {}


def linked_words(project: ProjectFacts, key: str) -> tuple[str, ...]:
    """The last parts of every linked name: a file that calls one spells it (in its import, or
    after a module's name), once per process and run."""
    if not project:
        return ()
    memo = _WORDS.get(project.digest)
    if memo is None:
        words = {
            name.rsplit(".", 1)[-1]
            for facts in project.links(key).values()
            for name in facts.get("names", {})
        }
        memo = _WORDS[project.digest] = tuple(sorted(words))
    return memo


# -- what a module exports ------------------------------------------------------------------------


def _imported_at_top(index: ModuleIndex, imported: Collection[str]) -> Iterator[str]:
    """The names that imports at the module's top bind to something called one of
    ``imported`` (``autocast as smart_amp_autocast``: ``smart_amp_autocast``), each once."""
    seen: set[str] = set()
    for statement in index.imports():
        if index.scope_of(statement) is not index.module_scope:
            continue
        for alias in statement.names:
            if alias.name.rsplit(".", 1)[-1] not in imported:
                continue
            bound = alias.asname or alias.name.split(".", 1)[0]
            if bound not in seen:
                seen.add(bound)
                yield bound


def _export_of(
    index: ModuleIndex, path: str, name: str, trace: Callable[[str], Export | None]
) -> Export | None:
    """What the module-level ``name`` of the module ``path`` gives another module that calls
    it, when that is an export: ``trace`` maps a qualified name, as this module spells it, to
    the export it leads to, if any."""
    meaning = names.resolve_global(index, name)
    if isinstance(meaning, str):
        return trace(meaning)
    if isinstance(meaning, names.Ambiguous):
        for candidate in meaning.candidates:
            export = trace(candidate)
            if export is not None:
                doubt = f"`{name}` of {os.path.normpath(path)} is {meaning.describe()}"
                return Export(export.helper, doubt)
    return None


def _direct(dotted: str, helpers: Collection[str]) -> Export | None:
    return Export(dotted) if dotted in helpers else None


def _exports_facts(exports: Mapping[str, Export]) -> dict[str, Any]:
    if not exports:
        return {}
    return {"exports": {name: asdict(export) for name, export in sorted(exports.items())}}


def _exports_of_summaries(summaries: Mapping[str, Facts]) -> dict[str, dict[str, Export]]:
    return {
        path: {name: Export(**entry) for name, entry in summary.get("exports", {}).items()}
        for path, summary in summaries.items()
    }


# -- the link -------------------------------------------------------------------------------------


class _Tracer:
    """The exports of the run's modules, by path and name, and where a name leads."""

    def __init__(
        self,
        files: ProjectFiles,
        helpers: Collection[str],
        exports: dict[str, dict[str, Export]],
    ) -> None:
        self.files = files
        self.helpers = helpers
        self.exports = exports

    def words(self) -> list[str]:
        return sorted({name for by_name in self.exports.values() for name in by_name})

    def readers(self) -> list[str]:
        """The files whose text holds an exported name."""
        found = self.files.containing(self.words())
        return sorted({path for paths in found.values() for path in paths})

    def trace(self, dotted: str, importer: str) -> Export | None:
        """The export that ``dotted``, a qualified name as the file ``importer`` spells it,
        leads to: a helper itself, or a name bound at the top of a module of the run."""
        if dotted in self.helpers:
            return Export(dotted)
        target = self.files.resolve(dotted, importer)
        if isinstance(target, AmbiguousModule):
            return self._maybe(target, dotted)
        if not isinstance(target, Resolved) or len(target.rest) != 1:
            return None  # not a module of the run, or deeper than a name of one
        return self.exports.get(target.module.path, {}).get(target.rest[0])

    def _maybe(self, modules: AmbiguousModule, dotted: str) -> Export | None:
        """The export ``dotted`` is when one of the files its module could be (which one depends
        on how the program is run) exports its last name, with that doubt."""
        module, _, name = dotted.rpartition(".")
        for path in modules.paths:
            export = self.exports.get(path, {}).get(name)
            if export is not None:
                files = ", ".join(os.path.normpath(path) for path in modules.paths)
                doubt = f"`{module}` could be any of {files}, depending on how the program is run"
                return Export(export.helper, export.doubt or doubt)
        return None

    def follow_reexports(self) -> None:
        """Add the names that modules bind by importing an export, a hop at a time."""
        for _ in range(MAX_REEXPORTS):
            added = False
            words = set(self.words())
            for path in self.readers():
                index = self.files.index(path)
                if index is None:
                    continue
                known = self.exports.get(path, {})
                for bound in _imported_at_top(index, words):
                    if bound in known:
                        continue
                    export = _export_of(index, path, bound, partial(self.trace, importer=path))
                    if export is not None:
                        self.exports.setdefault(path, {})[bound] = export
                        added = True
            if not added:
                return

    def called(self, view: FileView, path: str) -> Iterator[tuple[str, Export]]:
        """The names of the file's callees that lead to an export, other than the helpers'
        own (NPU928 knows those), each once."""
        spellings = _spellings(view.index, set(self.words()))
        seen: set[str] = set()
        for call in view.index.nodes(ast.Call):
            written = full_name(call.func)
            if written is None or spellings.isdisjoint(written.split(".")):
                continue
            meaning = view.qualified_name(call.func)
            candidates = meaning.candidates if isinstance(meaning, names.Ambiguous) else [meaning]
            for candidate in candidates:
                if candidate is None or candidate in self.helpers or candidate in seen:
                    continue
                export = self.trace(candidate, path)
                if export is not None:
                    seen.add(candidate)
                    yield candidate, export


def _spellings(index: ModuleIndex, words: set[str]) -> set[str]:
    """The exported names and what this file's imports rename them to: a call of an export
    spells one of them."""
    found = set(words)
    for statement in index.imports():
        for alias in statement.names:
            if alias.asname and alias.name.rsplit(".", 1)[-1] in words:
                found.add(alias.asname)
    return found
