"""Migrate one file's bytes: decode, pre-scan, parse, run the rule chain, verify.

Nothing here touches the file system; :mod:`migrator.runner` reads and writes files. Every failure
comes back as a :class:`FileResult` with status ``error``, never as an exception, so one bad file
never stops a run.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import enum
import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper

from migrator.diagnostics import Diagnostic, Severity
from migrator.imports import apply_import_edits
from migrator.names import star_imports
from migrator.rule import FileContext, Rule, Settings
from migrator.suppressions import Suppressions

ERROR_CODE = "NPU000"  # a file that could not be processed; not a rule, never selectable


class Status(enum.StrEnum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    SKIPPED = "skipped"  # `# npu-migrate: skip-file`
    ERROR = "error"


@dataclass
class FileResult:
    path: str
    status: Status
    original: bytes
    migrated: bytes
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED


class RuleChainError(Exception):
    """A rule raised, or the chain's output failed verification."""


def migrate_source(
    source: bytes, path: str, rules: Sequence[type[Rule]], settings: Settings
) -> FileResult:
    """Run ``rules`` (already sorted by code) over ``source``; ``path`` is only for messages."""

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
    if not any(rule.TRIGGER.search(text) for rule in rules):
        return FileResult(path, Status.UNCHANGED, source, source)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        return failed(f"syntax error at {error.raw_line}:{error.raw_column + 1}: {error.message}")
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return failed(f"cannot parse file: {error}")

    try:
        migrated, diagnostics = run_chain(module, path, rules, settings, suppressions)
    except RuleChainError as error:
        return failed(str(error))
    output = migrated.bytes
    if output == source:
        return FileResult(path, Status.UNCHANGED, source, source, diagnostics)
    problem = verify(output, path, rules, settings)
    if problem is not None:
        return failed(f"internal error, file left untouched: {problem}")
    return FileResult(path, Status.CHANGED, source, output, diagnostics)


def decode(source: bytes) -> str:
    """Decode as Python would: PEP 263 cookie, UTF-8 BOM, UTF-8 by default."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    return source.decode(encoding)


def run_chain(
    module: cst.Module,
    path: str,
    rules: Sequence[type[Rule]],
    settings: Settings,
    suppressions: Suppressions,
) -> tuple[cst.Module, list[Diagnostic]]:
    """Run ``rules`` in order over one shared context.

    Diagnostics point into the code as it was given: a rule that runs after another one changed
    the code sees shifted lines, so its findings are mapped back through each change. Suppression
    comments are read again after every change, because they move with the lines they sit on.
    """
    context = FileContext(path, settings, suppressions, star_imports(module))
    code = module.code
    versions: list[str] = [code]  # the code after each change; diagnostics carry their version
    recorded: list[tuple[int, Diagnostic]] = []
    fresh = True  # the first wrapper may skip its defensive deep copy: nothing else holds the tree
    # Resolving metadata costs far more than parsing; a rule that changed nothing leaves the tree
    # and its resolved metadata valid for the next rule, so the wrapper is only rebuilt after a
    # change.
    wrapper: MetadataWrapper | None = None
    for rule in rules:
        if not rule.TRIGGER.search(code):
            continue
        context.pending_imports.clear()
        context.pending_removals.clear()
        context.diagnostics.clear()
        try:
            if wrapper is None:
                wrapper = MetadataWrapper(module, unsafe_skip_copy=fresh)
            updated = wrapper.visit(rule(context))
            updated = apply_import_edits(updated, context.pending_imports, context.pending_removals)
        except Exception as error:  # a bug in one rule must not stop the run
            raise RuleChainError(
                f"internal error in {rule.CODE}: {type(error).__name__}: {error}"
            ) from error
        recorded.extend((len(versions) - 1, d) for d in context.diagnostics)
        updated_code = updated.code
        if updated_code != code:
            fresh = False
            module, code = updated, updated_code
            wrapper = None
            versions.append(code)
            context.suppressions = Suppressions.scan(code)
    context.diagnostics.clear()
    diagnostics = _in_original(recorded, versions)
    return module, sorted(diagnostics, key=lambda d: (d.line, d.column, d.code))


def _in_original(recorded: list[tuple[int, Diagnostic]], versions: list[str]) -> list[Diagnostic]:
    """Each diagnostic (at a line of ``versions[version]``) moved to the matching original line.

    Each change is diffed once, and only when a diagnostic was recorded after it.
    """
    line_maps: dict[int, list[int]] = {}
    moved = []
    for version, diagnostic in recorded:
        line = diagnostic.line
        for newer in range(version, 0, -1):
            if newer not in line_maps:
                line_maps[newer] = _line_map(versions[newer - 1], versions[newer])
            back = line_maps[newer]
            line = back[line - 1] if 0 < line <= len(back) else line
        # The column is kept: on a line an earlier rule rewrote it is the best guess there is.
        moved.append(
            diagnostic if line == diagnostic.line else dataclasses.replace(diagnostic, line=line)
        )
    return moved


def _line_map(older: str, newer: str) -> list[int]:
    """For each line of ``newer``, the line of ``older`` it comes from (1-based); a line the
    change wrote maps to the first line that change replaced."""
    old_lines, new_lines = older.splitlines(), newer.splitlines()
    back = [0] * len(new_lines)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, old_start, _old_end, new_start, new_end in matcher.get_opcodes():
        for offset, index in enumerate(range(new_start, new_end)):
            if tag == "equal":
                back[index] = old_start + offset + 1
            else:
                back[index] = min(old_start + 1, max(len(old_lines), 1))
    return back


def verify(output: bytes, path: str, rules: Sequence[type[Rule]], settings: Settings) -> str | None:
    """Black's safety net: the output parses and the chain has nothing left to change."""
    try:
        text = decode(output)
        ast.parse(text, filename=path)
        module = cst.parse_module(output)
    except (SyntaxError, UnicodeDecodeError, cst.ParserSyntaxError) as error:
        return f"the migrated code does not parse ({error})"
    try:
        again, _ = run_chain(module, path, rules, settings, Suppressions.scan(text))
    except RuleChainError as error:
        return f"second pass failed: {error}"
    if again.bytes != output:
        return "the rules are not idempotent on this file (a second pass changed it again)"
    return None
