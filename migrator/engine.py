"""Migrate one file's bytes: decode, pre-scan, analyse on ``ast``, edit with libcst, verify.

The cost of a file follows what it needs:

1. every file: decode, read suppression comments, and look for the selected rules' ``TRIGGER``
   strings in the text (read from the registry's manifest: no rule is imported for this); a
   file that mentions none of them is done;
2. a file that passes: ``ast.parse`` and one :class:`~migrator.analysis.index.ModuleIndex`
   walk, then the ``check`` of every rule whose triggers it holds, in code order (providers of
   plans first), each seeing the fixes planned by the rules before it. A rule's module is
   imported on the first file that triggers it.
   ``--check`` stops here, and so does any file without a fix: report-only findings need no
   concrete tree;
3. a file with fixes: libcst parses only the slices of it that change (:mod:`migrator.slices`),
   and one pass over each applies every edit in it (:mod:`migrator.rewriter`), then the import
   edits; only here is libcst imported, on the first such file of a run;
4. verification, Black's safety net without a second libcst pass: the output parses, and the
   rules run on it find nothing left to fix (the rewrite is idempotent).

Nothing here touches the file system; :mod:`migrator.runner` reads and writes files. Every failure
comes back as a :class:`FileResult` with status ``error``, never as an exception, so one bad file
never stops a run.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from migrator.analysis.index import ModuleIndex
from migrator.analysis.parse import ParseError, parse_index
from migrator.analysis.view import FileView
from migrator.diagnostics import Diagnostic, Severity
from migrator.edits import EditError
from migrator.registry import RuleEntry, entries_of
from migrator.results import ERROR_CODE, FileResult, Status
from migrator.rule import FileContext, Rule, plan_order, run_plans
from migrator.settings import Settings
from migrator.source import decode, source_encoding
from migrator.suppressions import Suppressions


class Rewritten(NamedTuple):
    data: bytes
    parsed: int  # characters libcst parsed
    sliced: bool  # only the slices that change (else the whole file)


class RuleChainError(Exception):
    """A rule raised, or its edits could not be applied or verified."""


@dataclass(frozen=True)
class Engine:
    """The selected rules (sorted by code) and settings; reusable across files.

    The soundness test turns the shortcuts off and compares: ``fast=False`` drops the trigger
    pre-scan and the rules' candidate filters, and rewrites by parsing the whole file rather
    than the slices that change; ``force_rewrite=True`` runs the libcst stage on
    every file, in ``--check`` mode too, and fails a file that has no fix but whose rewrite is
    not byte-identical, or that has fixes but whose rewrite is.
    """

    rules: Sequence[type[Rule]]
    settings: Settings = field(default_factory=Settings)
    fast: bool = True
    force_rewrite: bool = False

    @functools.cached_property
    def entries(self) -> tuple[RuleEntry, ...]:
        """What the pre-scan and the chain need of each rule (the registry's manifest for
        :func:`~migrator.registry.lazy_rules`, whose modules are imported as files need them)."""
        return entries_of(self.rules)

    @functools.cached_property
    def trigger(self) -> tuple[str, ...]:
        """Every selected rule's trigger strings, each once (one substring search per string
        and file)."""
        words = (word for entry in self.entries for word in entry.triggers(self.settings))
        return tuple(dict.fromkeys(words))

    @functools.cached_property
    def chain(self) -> tuple[RuleEntry, ...]:
        """The rules in the order their checks run (providers of plans before readers)."""
        return plan_order(self.entries, lambda entry: (entry.code, entry.provides, entry.reads))

    @functools.cached_property
    def shell_rules(self) -> tuple[type[Rule], ...]:
        """The selected rules that report on shell scripts, in code order."""
        return tuple(entry.load() for entry in self.entries if entry.scans_shell)

    def run_plans(self, running: Sequence[RuleEntry]) -> dict[type, object]:
        """The run plans that the ``running`` rules read (no other rule can see one), from
        every selected rule that gives one of their types, in code order."""
        wanted = {name for entry in running for name in entry.reads}
        providers = tuple(entry for entry in self.entries if wanted & set(entry.run_plans))
        found = self._run_plans.get(providers)
        if found is None:
            found = self._run_plans[providers] = run_plans(
                [entry.load() for entry in providers], self.settings
            )
        return found

    @functools.cached_property
    def _run_plans(self) -> dict[tuple[RuleEntry, ...], dict[type, object]]:
        return {}

    def migrate(self, source: bytes, path: str, *, apply: bool = True) -> FileResult:
        """Run the rules over ``source``; ``apply=False`` (``--check``) writes no edit."""
        with _collector_paused():
            return self._migrate(source, path, apply)

    def _migrate(self, source: bytes, path: str, apply: bool) -> FileResult:
        def failed(message: str) -> FileResult:
            diagnostic = Diagnostic(path, 1, 1, ERROR_CODE, Severity.ERROR, message)
            return FileResult(path, Status.ERROR, source, source, [diagnostic])

        try:
            text = decode(source)
        except (SyntaxError, UnicodeDecodeError, LookupError) as error:
            return failed(f"cannot decode file: {error}")
        suppressions = Suppressions.scan(text)
        if suppressions.skip_file:
            return FileResult(path, Status.SKIPPED, source, source)
        if self.fast and not any(word in text for word in self.trigger):
            return FileResult(path, Status.UNCHANGED, source, source)
        try:
            index = parse_index(text, path)
        except ParseError as error:
            return failed(str(error))
        try:
            context = self.analyse(index, path, suppressions)
        except RuleChainError as error:
            return failed(str(error))
        diagnostics = sorted(context.diagnostics, key=_order)
        fixes = any(d.severity is Severity.FIXED for d in diagnostics)
        if not fixes and not self.force_rewrite:
            return FileResult(path, Status.UNCHANGED, source, source, diagnostics)
        if not apply and not self.force_rewrite:
            return FileResult(path, Status.CHANGED, source, source, diagnostics)
        try:
            output, parsed, sliced = self.rewrite(source, context)
        except RuleChainError as error:
            return failed(str(error))
        finally:
            # The edits close over the rules, which hold the context: a cycle that would keep
            # the original tree alive next to the output's during verification.
            context.release()
            del context, index
        if output == source:
            if fixes:
                return failed("internal error, file left untouched: the fixes changed nothing")
            return FileResult(path, Status.UNCHANGED, source, source, diagnostics, parsed, sliced)
        if not fixes:
            return failed("internal error, file left untouched: an edit without a diagnostic")
        problem = self.verify(output, path, original=text)
        if problem is not None:
            return failed(f"internal error, file left untouched: {problem}")
        migrated = output if apply else source
        return FileResult(path, Status.CHANGED, source, migrated, diagnostics, parsed, sliced)

    # -- stages ----------------------------------------------------------------------------------

    def analyse(self, index: ModuleIndex, path: str, suppressions: Suppressions) -> FileContext:
        """Every selected rule's ``check``, in chain order, over one shared context."""
        trigger_text = index.source.text
        running = [
            entry
            for entry in self.chain
            if not self.fast or entry.triggered_by(trigger_text, self.settings)
        ]
        rules = []
        for entry in running:
            try:
                rules.append(entry.load())
            except Exception as error:  # a rule that cannot be imported fails its files
                raise RuleChainError(
                    f"cannot load {entry.code}: {type(error).__name__}: {error}"
                ) from error
        context = FileContext(
            path,
            self.settings,
            suppressions,
            FileView(index, fast=self.fast),
            plans=dict(self.run_plans(running)),
        )
        for rule in rules:
            try:
                rule(context).check()
            except Exception as error:  # a bug in one rule must not stop the run
                raise RuleChainError(
                    f"internal error in {rule.CODE}: {type(error).__name__}: {error}"
                ) from error
        return context

    def rewrite(self, source: bytes, context: FileContext) -> Rewritten:
        """The file with the planned edits applied: libcst parses only the slices that change
        (the whole file where slicing is off or not possible), then the import edits.

        The slice path releases ``context`` once the rules' edits are in, before the import
        edits parse the edited code: two full trees of a large file at once would double the
        peak memory. Where it then cannot finish, the file is analysed again for the
        whole-file path (rare: an import edit at a lone carriage return, or in a module left
        without statements).

        Only here does a run need libcst: the modules that rewrite are imported on the first
        file that has edits (:mod:`migrator.lazy_imports`)."""
        from migrator.slices import SliceError

        with _deeper_recursion(LIBCST_RECURSION_LIMIT):
            if self.fast:
                path, suppressions = context.path, context.suppressions
                try:
                    return Rewritten(*self._rewrite_slices(source, context), sliced=True)
                except SliceError:
                    if context.released:
                        index = parse_index(context.source_text, path)
                        context = self.analyse(index, path, suppressions)
            return Rewritten(*self._rewrite_module(source, context), sliced=False)

    def _rewrite_slices(self, source: bytes, context: FileContext) -> tuple[bytes, int]:
        from migrator.imports import apply_import_edits_to_text
        from migrator.slices import SliceError, apply_sliced

        try:
            text, parsed = apply_sliced(context.source.text, context.index.tree, context.edits)
        except EditError as error:
            raise SliceError(str(error)) from error
        except SliceError:
            raise
        except Exception as error:
            raise RuleChainError(
                f"internal error while editing: {type(error).__name__}: {error}"
            ) from error
        body = context.index.tree.body
        header_end = context.source.offset(_first_line(body), 0) if body else None
        additions, removals = list(context.imports), list(context.removals)
        context.release()
        try:
            text, more = apply_import_edits_to_text(
                text, additions, removals, header_end=header_end
            )
        except (SyntaxError, ValueError) as error:
            raise RuleChainError(
                f"internal error: the edited code does not parse: {error}"
            ) from error
        try:
            return text.encode(source_encoding(source)), parsed + more
        except UnicodeEncodeError as error:
            raise RuleChainError(f"the migrated code cannot be encoded: {error}") from error

    def _rewrite_module(self, source: bytes, context: FileContext) -> tuple[bytes, int]:
        import libcst as cst

        from migrator.imports import apply_import_edits
        from migrator.rewriter import apply_edits

        try:
            module = cst.parse_module(source)
        except (cst.ParserSyntaxError, SyntaxError, UnicodeDecodeError, LookupError) as error:
            raise RuleChainError(f"libcst cannot parse the file: {error}") from error
        try:
            module = apply_edits(module, context.edits)
        except EditError as error:
            raise RuleChainError(f"internal error: {error}") from error
        except Exception as error:
            raise RuleChainError(
                f"internal error while editing: {type(error).__name__}: {error}"
            ) from error
        try:
            module = apply_import_edits(module, context.imports, context.removals)
        except (SyntaxError, ValueError) as error:
            raise RuleChainError(
                f"internal error: the edited code does not parse: {error}"
            ) from error
        return module.bytes, len(context.source.text)

    def verify(self, output: bytes, path: str, original: str | None = None) -> str | None:
        """The output parses and compiles (where ``original``, the file as given, compiles),
        and the rules find nothing left to fix in it."""
        try:
            text = decode(output)
            index = parse_index(text, path)
        except (ParseError, SyntaxError, UnicodeDecodeError, LookupError) as error:
            return f"the migrated code does not parse ({error})"
        problem = _compile_problem(index.tree, path)
        if problem is not None and (original is None or _compile_problem(original, path) is None):
            # What the parser lets through and the compiler refuses: a parameter added twice.
            return f"the migrated code does not compile ({problem})"
        try:
            again = self.analyse(index, path, Suppressions.scan(text))
        except RuleChainError as error:
            return f"second pass failed: {error}"
        left = [d for d in again.diagnostics if d.severity is Severity.FIXED]
        if left:
            first = left[0]
            return (
                "the rules are not idempotent on this file (a second pass would change it "
                f"again: {first.code} at line {first.line})"
            )
        return None


def migrate_source(
    source: bytes,
    path: str,
    rules: Sequence[type[Rule]],
    settings: Settings,
    *,
    apply: bool = True,
) -> FileResult:
    """Run ``rules`` (already sorted by code) over ``source``; ``path`` is only for messages."""
    return Engine(tuple(rules), settings).migrate(source, path, apply=apply)


# libcst visits and prints trees recursively, several frames per nesting level: deeply nested
# code (a few hundred nested calls) that ast accepts needs more than Python's default 1,000.
LIBCST_RECURSION_LIMIT = 20_000


@contextlib.contextmanager
def _deeper_recursion(limit: int) -> Iterator[None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while one file is processed.

    A file's trees, index and scopes are millions of small objects that all live exactly as
    long as the file; the collector would traverse them again and again as they are built
    (about a third of the analysis time on torch's sources) and find nothing to free. The few
    cycles (scopes and their bindings) are collected after the file, by the first collection
    the interpreter runs once it is re-enabled.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _compile_problem(code: ast.Module | str, path: str) -> str | None:
    """Why ``code`` does not compile to bytecode (duplicate parameters, ``nonlocal`` of no
    enclosing name...), or None; None also where the check itself cannot run (code nested
    deeper than the compiler's recursion allows)."""
    try:
        compile(code, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        return f"{getattr(error, 'msg', error)}, line {line}" if line else str(error)
    except (RecursionError, MemoryError):
        return None
    return None


def _first_line(body: list[ast.stmt]) -> int:
    """The line where the first statement starts, its decorators included."""
    first = body[0]
    return min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])


def _order(diagnostic: Diagnostic) -> tuple[int, int, str, str]:
    """Source order; findings at one position by code, then message, so that a report never
    depends on the order a rule happened to find them in (set iteration varies by run)."""
    return diagnostic.line, diagnostic.column, diagnostic.code, diagnostic.message
