"""The only place that adds or removes import statements.

Rules queue requests with ``Rule.add_import`` / ``Rule.remove_import_if_unused``; the engine
applies them to the concrete tree once the rules' edits are in:

- :func:`unused_imports` decides on the edited code's ``ast`` which requested imports nothing
  uses any more (a read of the name, ``__all__``, a string annotation), with libcst's
  ``RemoveImportsVisitor`` semantics but without its scope analysis of the concrete tree;
- :func:`drop_imports` removes those aliases (and statements left empty) from the concrete tree;
- :func:`ensure_import` adds ``import name`` where a rule asked for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node

from migrator.index import ModuleIndex, dotted_name
from migrator.scopes import BindingKind
from migrator.source import Source


@dataclass(frozen=True)
class ImportRequest:
    """``import module`` to add at module level, right after the first import of ``after``."""

    module: str
    after: str | None = None


@dataclass(frozen=True)
class ImportRemoval:
    """An import to drop when nothing uses it any more (libcst's RemoveImportsVisitor semantics)."""

    module: str
    obj: str | None = None
    asname: str | None = None


def apply_import_edits(
    module: cst.Module, additions: Sequence[ImportRequest], removals: Sequence[ImportRemoval]
) -> cst.Module:
    """Removals first (decided on the code as it is now), then additions."""
    if removals:
        text = module.code
        index = ModuleIndex(ast.parse(text), Source(text))
        module = drop_imports(module, unused_imports(index, removals))
    for request in additions:
        module = ensure_import(module, request.module, after=request.after)
    return module


# -- removing ------------------------------------------------------------------------------------

# (position of the import statement among all import statements, in source order; alias index)
AliasKey = tuple[int, int]


def unused_imports(index: ModuleIndex, removals: Iterable[ImportRemoval]) -> set[AliasKey]:
    """The import aliases of ``index`` that a removal asks for and that nothing uses."""
    wanted = set(removals)
    if not wanted:
        return set()
    statements = index.imports()
    exported: set[str] | None = None
    annotated: set[str] | None = None
    doomed: set[AliasKey] = set()
    for ordinal, statement in enumerate(statements):
        for position, alias in enumerate(statement.names):
            if not _requested(statement, alias, wanted):
                continue
            if exported is None or annotated is None:
                exported, annotated = _exported_names(index), _string_annotation_names(index)
            names = _bound_names(statement, alias)
            if any(name in exported or name in annotated for name in names):
                continue
            scope = index.scope_of(statement)
            used = any(
                binding.kind is BindingKind.IMPORT and index.references(binding)
                for name in names
                for binding in scope.lookup(name)
            )
            if not used:
                doomed.add((ordinal, position))
    return doomed


def _requested(
    statement: ast.Import | ast.ImportFrom, alias: ast.alias, wanted: set[ImportRemoval]
) -> bool:
    if isinstance(statement, ast.Import):
        return ImportRemoval(alias.name, None, alias.asname) in wanted
    if statement.level or statement.module is None or alias.name == "*":
        return False  # relative: libcst cannot tell the absolute module either
    return ImportRemoval(statement.module, alias.name, alias.asname) in wanted


def _bound_names(statement: ast.Import | ast.ImportFrom, alias: ast.alias) -> list[str]:
    if alias.asname is not None:
        return [alias.asname]
    if isinstance(statement, ast.ImportFrom):
        return [alias.name]
    parts = alias.name.split(".")
    return [".".join(parts[:length]) for length in range(len(parts), 0, -1)]


def _exported_names(index: ModuleIndex) -> set[str]:
    """The strings listed in ``__all__`` (assigned, annotated or extended at any level)."""
    names: set[str] = set()
    assignments: list[tuple[list[ast.expr], ast.expr | None]] = [
        (statement.targets, statement.value) for statement in index.nodes(ast.Assign)
    ]
    assignments += [([s.target], s.value) for s in index.nodes(ast.AnnAssign)]
    assignments += [([s.target], s.value) for s in index.nodes(ast.AugAssign)]
    for targets, value in assignments:
        if value is None or not any(_names_all(target) for target in targets):
            continue
        for node in ast.walk(value):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return names


def _names_all(target: ast.AST) -> bool:
    if isinstance(target, ast.Name):
        return target.id == "__all__"
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_names_all(element) for element in target.elts)
    return False


def _string_annotation_names(index: ModuleIndex) -> set[str]:
    """Names used inside string annotations (``x: "torch.Tensor"``)."""
    names: set[str] = set()
    annotations: list[ast.AST] = [
        a.annotation for a in index.nodes(ast.arg) if a.annotation is not None
    ]
    annotations += [s.annotation for s in index.nodes(ast.AnnAssign)]
    annotations += [f.returns for f in index.nodes(ast.FunctionDef) if f.returns is not None]
    annotations += [f.returns for f in index.nodes(ast.AsyncFunctionDef) if f.returns is not None]
    for annotation in annotations:
        for node in ast.walk(annotation):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            try:
                parsed = ast.parse(node.value.strip())
            except (SyntaxError, ValueError):
                continue
            for inner in ast.walk(parsed):
                if isinstance(inner, (ast.Name, ast.Attribute)):
                    dotted = dotted_name(inner)
                    while dotted:
                        names.add(dotted)
                        dotted = dotted.rpartition(".")[0]
    return names


def drop_imports(module: cst.Module, doomed: set[AliasKey]) -> cst.Module:
    """``module`` without the import aliases in ``doomed`` (statements left empty go too)."""
    if not doomed:
        return module
    updated = module.visit(_ImportDropper(doomed))
    assert isinstance(updated, cst.Module)
    return updated


_STATEMENT_CONTAINERS = (
    cst.Module,
    cst.BaseSuite,
    cst.BaseCompoundStatement,
    cst.SimpleStatementLine,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Else,
    cst.Finally,
    cst.MatchCase,
)


class _ImportDropper(cst.CSTTransformer):
    """Visits statements only; counts import statements in source order."""

    def __init__(self, doomed: set[AliasKey]) -> None:
        super().__init__()
        self.doomed = doomed
        self.ordinal = -1

    def on_visit(self, node: cst.CSTNode) -> bool:
        return isinstance(node, _STATEMENT_CONTAINERS)

    def leave_Import(
        self, original_node: cst.Import, updated_node: cst.Import
    ) -> cst.Import | cst.RemovalSentinel:
        self.ordinal += 1
        kept = [a for i, a in enumerate(updated_node.names) if (self.ordinal, i) not in self.doomed]
        if len(kept) == len(updated_node.names):
            return updated_node
        if not kept:
            return cst.RemoveFromParent()
        return updated_node.with_changes(names=_last_without_comma(kept, updated_node.names))

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        self.ordinal += 1
        names = updated_node.names
        if isinstance(names, cst.ImportStar):
            return updated_node
        kept: list[cst.ImportAlias] = []
        lpar = updated_node.lpar
        for position, alias in enumerate(names):
            if (self.ordinal, position) not in self.doomed:
                kept.append(alias)
                continue
            # A comment after the dropped alias's comma stays: it moves to what precedes it.
            comma = alias.comma
            if not isinstance(comma, cst.Comma):
                continue
            if kept:
                previous = kept[-1]
                if isinstance(previous.comma, cst.Comma):
                    merged = _merged(previous.comma.whitespace_after, comma.whitespace_after)
                    previous = previous.with_changes(
                        comma=previous.comma.with_changes(whitespace_after=merged)
                    )
                else:
                    previous = previous.with_changes(comma=comma)
                kept[-1] = previous
            elif isinstance(lpar, cst.LeftParen):
                lpar = lpar.with_changes(
                    whitespace_after=_merged(lpar.whitespace_after, comma.whitespace_after)
                )
        if len(kept) == len(names):
            return updated_node
        if not kept:
            return cst.RemoveFromParent()
        return updated_node.with_changes(names=_last_without_comma(kept, names), lpar=lpar)


def _last_without_comma(
    kept: list[cst.ImportAlias], original: Sequence[cst.ImportAlias]
) -> list[cst.ImportAlias]:
    if kept[-1] is original[-1]:
        return kept
    return [*kept[:-1], kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]


def _merged(
    left: cst.BaseParenthesizableWhitespace, right: cst.BaseParenthesizableWhitespace
) -> cst.BaseParenthesizableWhitespace:
    """The whitespace after a comma, keeping a comment from the one that goes away."""
    if not isinstance(right, cst.ParenthesizedWhitespace):
        return left
    if not isinstance(left, cst.ParenthesizedWhitespace):
        return right
    return left.with_changes(empty_lines=[line for line in right.empty_lines if line.comment])


# -- adding --------------------------------------------------------------------------------------


def ensure_import(module: cst.Module, name: str, *, after: str | None = None) -> cst.Module:
    """Add ``import name`` at module level unless a module-level import already binds ``name``.

    Placement: right after the first module-level import of ``after`` (``import torch``,
    ``from torch import nn``, ``import torch.nn as nn``); otherwise after the last module-level
    import that precedes the first function or class; otherwise after the docstring and
    ``__future__`` imports.
    """
    body = list(module.body)
    if any(_binds_module(statement, name) for statement in body):
        return module
    index = _insertion_index(body, after)
    alias = cst.ImportAlias(cst.parse_expression(name))  # type: ignore[arg-type]
    body.insert(index, cst.SimpleStatementLine([cst.Import([alias])]))
    return module.with_changes(body=body)


def _binds_module(statement: cst.BaseStatement, name: str) -> bool:
    """``import name``, ``import name.sub`` or ``import name as name`` at module level."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                imported = get_full_name_for_node(alias.name) or ""
                if alias.asname is None and (imported == name or imported.startswith(name + ".")):
                    return True
                if alias.evaluated_alias == name and imported == name:
                    return True
    return False


def _imported_modules(statement: cst.BaseStatement) -> list[str]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    modules: list[str] = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            modules.extend(get_full_name_for_node(a.name) or "" for a in small.names)
        elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
            modules.append(get_full_name_for_node(small.module) or "")
    return modules


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return bool(_imported_modules(statement))


def _insertion_index(body: Sequence[cst.BaseStatement], after: str | None) -> int:
    if after is not None:
        for index, statement in enumerate(body):
            if any(m == after or m.startswith(after + ".") for m in _imported_modules(statement)):
                return index + 1
    last_import = None
    for index, statement in enumerate(body):
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            break
        if _is_import_line(statement):
            last_import = index
    if last_import is not None:
        return last_import + 1
    return _header_length(body)


def _header_length(body: Sequence[cst.BaseStatement]) -> int:
    """Statements that must stay first: the docstring and ``from __future__`` imports."""
    index = 0
    if body and _is_docstring(body[0]):
        index = 1
    while index < len(body) and "__future__" in _imported_modules(body[index]):
        index += 1
    return index


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
