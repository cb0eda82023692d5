"""The only place that adds or removes import statements.

Rules queue requests with ``Rule.add_import`` / ``Rule.remove_import_if_unused``; the engine
applies them to the concrete tree once the rules' edits are in:

- :func:`unused_imports` decides on the edited code's ``ast`` which requested imports nothing
  uses any more (a read of the name, ``__all__``, a string annotation), with libcst's
  ``RemoveImportsVisitor`` semantics but without its scope analysis of the concrete tree;
- :func:`drop_imports` removes those aliases (and statements left empty) from the concrete tree;
- :func:`ensure_import` adds ``import name`` where a rule asked for it.

:func:`apply_import_edits_to_text` does the same on a file's text through
:mod:`migrator.slices`, so that only the import lines concerned are parsed by libcst;
:func:`apply_import_edits` works on a whole concrete module (the fallback, and the reference the
tests compare it with).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import libcst as cst
from libcst.helpers import get_full_name_for_node

from migrator.analysis.index import ModuleIndex, dotted_name, statement_lines
from migrator.analysis.scopes import BindingKind
from migrator.edits import ImportRemoval, ImportRequest, NodeEdit, statement_kind
from migrator.slices import Sliced, SliceError, apply_sliced
from migrator.source import Source


def apply_import_edits(
    module: cst.Module, additions: Sequence[ImportRequest], removals: Sequence[ImportRemoval]
) -> cst.Module:
    """Removals first (decided on the code as it is now), then additions."""
    if removals:
        text = module.code
        index = ModuleIndex(ast.parse(text), Source(text))
        module = drop_imports(module, unused_imports(index, removals))
    inserted: dict[str, cst.BaseStatement] = {}  # module -> the `import module` added for it
    for request in additions:
        if request.optional:
            placement = _optional_placement(ast.parse(module.code), request, additions, {})
            if placement.kind == _INSIDE:
                module = _inserted_in_try(module, placement, request.module)
                continue
            if placement.kind == _GUARDED:
                body = list(module.body)
                body.insert(_insertion_index(body, request.after), _guarded_import(request.module))
                module = module.with_changes(body=body)
                continue
            if placement.kind == _BOUND:
                continue
            request = ImportRequest(request.module, request.after)  # a plain import
        before = module
        next_to = inserted.get(request.after) if request.after is not None else None
        module = ensure_import(
            module, request.module, after=request.after, imported=request.name, next_to=next_to
        )
        if module is not before and request.name is None:
            [added] = [s for s in module.body if not any(s is old for old in before.body)]
            inserted[request.module] = added
    return module


def apply_import_edits_to_text(
    text: str,
    additions: Sequence[ImportRequest],
    removals: Sequence[ImportRemoval],
    *,
    header_end: int | None = None,
) -> Sliced:
    """:func:`apply_import_edits` on text, parsing only the statements it changes.

    Removals and additions are decided on the text's ``ast`` (the additions as if the removals
    were done) and applied in one pass, as on a whole concrete module: a re-parse in between
    would hand the blank lines above a module's new first statement to the module's header.
    Raises :class:`~migrator.slices.SliceError` where that is not possible (a module left
    without statements). ``header_end``: see :func:`~migrator.slices.apply_sliced`.
    """
    if not additions and not removals:
        return Sliced(text, 0)
    tree = ast.parse(text)
    source = Source(text)
    edits: list[NodeEdit] = []
    dropped: dict[int, set[int]] = {}  # id(import statement) -> positions of dropped aliases
    if removals:
        index = ModuleIndex(tree, source)
        doomed = unused_imports(index, removals)
        edits += removal_edits(index, doomed)
        statements = index.imports()
        for ordinal, position in doomed:
            dropped.setdefault(id(statements[ordinal]), set()).add(position)
    edits += addition_edits(tree, source, additions, dropped)
    return apply_sliced(text, tree, edits, header_end=header_end)


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


def removal_edits(index: ModuleIndex, doomed: set[AliasKey]) -> list[NodeEdit]:
    """One edit per import statement that loses aliases (:func:`unused_imports`' answer)."""
    by_statement: dict[int, set[int]] = {}
    for ordinal, position in doomed:
        by_statement.setdefault(ordinal, set()).add(position)
    statements = index.imports()
    edits = []
    for ordinal, positions in sorted(by_statement.items()):
        statement = statements[ordinal]
        kind: type[cst.CSTNode] = (
            cst.Import if isinstance(statement, ast.Import) else cst.ImportFrom
        )
        edits.append(
            NodeEdit(kind, index.source.span(statement), partial(_without, positions=positions))
        )
    return edits


def _without(node: cst.Import | cst.ImportFrom, positions: set[int]) -> Any:
    if isinstance(node, cst.Import):
        return _import_without(node, positions)
    return _import_from_without(node, positions)


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
        return _import_without(updated_node, self._positions())

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        self.ordinal += 1
        return _import_from_without(updated_node, self._positions())

    def _positions(self) -> set[int]:
        return {position for ordinal, position in self.doomed if ordinal == self.ordinal}


def _import_without(node: cst.Import, positions: set[int]) -> cst.Import | cst.RemovalSentinel:
    kept = [alias for i, alias in enumerate(node.names) if i not in positions]
    if len(kept) == len(node.names):
        return node
    if not kept:
        return cst.RemoveFromParent()
    return node.with_changes(names=_last_without_comma(kept, node.names))


def _import_from_without(
    node: cst.ImportFrom, positions: set[int]
) -> cst.ImportFrom | cst.RemovalSentinel:
    names = node.names
    if isinstance(names, cst.ImportStar):
        return node
    kept: list[cst.ImportAlias] = []
    lpar = node.lpar
    for position, alias in enumerate(names):
        if position not in positions:
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
        return node
    if not kept:
        return cst.RemoveFromParent()
    return node.with_changes(names=_last_without_comma(kept, names), lpar=lpar)


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


def ensure_import(
    module: cst.Module,
    name: str,
    *,
    after: str | None = None,
    imported: str | None = None,
    next_to: cst.BaseStatement | None = None,
) -> cst.Module:
    """Add ``import name`` at module level unless a module-level import already binds ``name``;
    with ``imported``, ``from name import imported`` unless one already binds it so.

    Placement: right after ``next_to`` (the `import torch` added just before `import torch_npu`)
    when given; otherwise right after the first module-level import of ``after`` (``import
    torch``, ``from torch import nn``, ``import torch.nn as nn``); otherwise after the last
    module-level import that precedes the first function or class; otherwise after the docstring
    and ``__future__`` imports.
    """
    body = list(module.body)
    if imported is None and any(_binds_module(statement, name) for statement in body):
        return module
    if imported is not None and any(_binds_from(s, name, imported) for s in body):
        return module
    placed = [i for i, statement in enumerate(body) if statement is next_to]
    index = placed[0] + 1 if placed else _insertion_index(body, after)
    body.insert(index, _import_line(name, imported))
    return module.with_changes(body=body)


@dataclass
class _Line:
    """A module-level statement line as the additions see it: an original one (what the
    removals leave of its imports) or one that an addition inserts."""

    statements: list[ast.stmt] | None  # None: an inserted `import <modules[0]>`
    modules: list[str]  # what its imports import, after the removals
    binds: list[str]  # names its plain `import` statements bind to their module
    definition: bool = False  # a function or class definition
    # (module, name) of its `from module import name` imports (no alias), after the removals
    from_binds: list[tuple[str, str]] = field(default_factory=list)
    imported: str | None = None  # an inserted line's `from modules[0] import <imported>`
    guarded: bool = False  # an inserted `try: import modules[0] / except ImportError: pass`


def addition_edits(
    tree: ast.Module,
    source: Source,
    additions: Sequence[ImportRequest],
    dropped: dict[int, set[int]],
) -> list[NodeEdit]:
    """:func:`ensure_import` for each addition, in order, as edits of the statement lines the
    new lines go next to; ``dropped`` maps an import statement's ``id`` to the alias positions
    the removals take out of it."""
    lines = [line for group in statement_lines(tree.body) if (line := _line(group, dropped))]
    if not lines:
        if additions:
            raise SliceError("no statement left to put an import next to")
        return []
    edits: list[NodeEdit] = []
    for request in additions:
        guarded = False
        if request.optional:
            placement = _optional_placement(tree, request, additions, dropped)
            if placement.kind == _BOUND:
                continue
            if placement.kind == _INSIDE:
                assert placement.anchor is not None
                edits.append(_before(source, placement.anchor, _import_line(request.module)))
                continue
            guarded = placement.kind == _GUARDED
        if request.name is None and any(request.module in line.binds for line in lines):
            continue
        if request.name is None:
            new = _Line(None, [request.module], [request.module], guarded=guarded)
        else:
            wanted = (request.module, request.name)
            if any(wanted in line.from_binds for line in lines):
                continue
            new = _Line(None, [request.module], [], from_binds=[wanted], imported=request.name)
        lines.insert(_line_insertion_index(lines, request.after), new)
    return edits + _insertions(source, lines)


def _line(group: list[ast.stmt], dropped: dict[int, set[int]]) -> _Line | None:
    """The statement line ``group`` once the removals are done; None when nothing is left."""
    kept: list[ast.stmt] = []
    modules: list[str] = []
    binds: list[str] = []
    from_binds: list[tuple[str, str]] = []
    for statement in group:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            gone = dropped.get(id(statement), set())
            aliases = [a for i, a in enumerate(statement.names) if i not in gone]
            if not aliases:
                continue
            if isinstance(statement, ast.Import):
                modules += [alias.name for alias in aliases]
                binds += [name for alias in aliases for name in _binds(alias)]
            elif not statement.level and statement.module:
                modules.append(statement.module)
                from_binds += [(statement.module, a.name) for a in aliases if a.asname is None]
        kept.append(statement)
    if not kept:
        return None
    definition = isinstance(group[0], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    return _Line(group, modules, binds, definition, from_binds)


def _binds(alias: ast.alias) -> list[str]:
    """The module names ``import a.b`` / ``import a as a`` count as imported (``_binds_module``)."""
    if alias.asname is None:
        parts = alias.name.split(".")
        return [".".join(parts[:length]) for length in range(1, len(parts) + 1)]
    return [alias.name] if alias.asname == alias.name else []


def _line_insertion_index(lines: list[_Line], after: str | None) -> int:
    """:func:`_insertion_index` on these lines. A line this run adds for ``after`` itself comes
    first: `import torch_npu` goes next to the `import torch` added with it."""
    if after is not None:
        for index, line in enumerate(lines):
            if line.statements is None and after in line.modules:
                return index + 1
        for index, line in enumerate(lines):
            if any(m == after or m.startswith(after + ".") for m in line.modules):
                return index + 1
    last_import = None
    for index, line in enumerate(lines):
        if line.definition:
            break
        if line.modules:
            last_import = index
    if last_import is not None:
        return last_import + 1
    index = 0
    if lines and _is_docstring_line(lines[0]):
        index = 1
    while index < len(lines) and "__future__" in lines[index].modules:
        index += 1
    return index


def _is_docstring_line(line: _Line) -> bool:
    if line.statements is None or len(line.statements) != 1:
        return False
    statement = line.statements[0]
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str | bytes)
    )


def _insertions(source: Source, lines: list[_Line]) -> list[NodeEdit]:
    """One edit per original line that gets new lines next to it: those inserted before it
    (up to the previous original line), and after the last original line those that follow."""
    edits: list[NodeEdit] = []
    pending: list[cst.BaseStatement] = []
    last: _Line | None = None
    for line in lines:
        if line.statements is None:
            if line.guarded:
                pending.append(_guarded_import(line.modules[0]))
            elif not pending and last is not None and _is_docstring_line(last):
                # Right after the module's docstring (where a removed import line was, maybe):
                # a blank line between them, as PEP 8 has it.
                pending.append(_import_line(line.modules[0], line.imported, blank_before=True))
            else:
                pending.append(_import_line(line.modules[0], line.imported))
            continue
        if pending:
            edits.append(_next_to(source, line, before=pending))
            pending = []
        last = line
    if pending:
        assert last is not None
        edits.append(_next_to(source, last, after=pending))
    return edits


def _import_line(
    name: str, imported: str | None = None, blank_before: bool = False
) -> cst.SimpleStatementLine:
    """``import name``, or ``from name import imported`` (after an empty line)."""
    module = cst.parse_expression(name)
    leading = [cst.EmptyLine()] if blank_before else []
    if imported is None:
        statement: cst.BaseSmallStatement = cst.Import([cst.ImportAlias(module)])  # type: ignore[arg-type]
    else:
        alias = cst.ImportAlias(cst.Name(imported))
        statement = cst.ImportFrom(module=module, names=[alias])  # type: ignore[arg-type]
    return cst.SimpleStatementLine([statement], leading_lines=leading)


def _next_to(
    source: Source,
    line: _Line,
    before: Sequence[cst.BaseStatement] = (),
    after: Sequence[cst.BaseStatement] = (),
) -> NodeEdit:
    assert line.statements is not None
    anchor = line.statements[0]

    def insert(node: cst.CSTNode) -> cst.FlattenSentinel[cst.CSTNode]:
        return cst.FlattenSentinel([*before, node, *after])

    return NodeEdit(statement_kind(anchor), source.span(anchor), insert)


# -- optional imports (ImportRequest.optional) ---------------------------------------------------

_BOUND, _PLAIN, _INSIDE, _GUARDED = "bound", "plain", "inside", "guarded"


@dataclass(frozen=True)
class _Placement:
    """Where an optional import goes: nowhere (``bound``: a plain request for the module, or a
    ``try`` that imports the module itself), as a plain import (``plain``: the module imports
    from it outside any ``try``, or another request does), ``inside`` a module-level ``try``
    whose body has lines of its own, just before ``anchor`` (the
    first statement line of its body that imports from the module; ``ordinal``: which
    module-level ``try`` it is, ``line``: which line of its body), or in a ``guarded`` block of
    its own."""

    kind: str
    anchor: ast.stmt | None = None
    ordinal: int = 0
    line: int = 0


def _optional_placement(
    tree: ast.Module,
    request: ImportRequest,
    requests: Sequence[ImportRequest],
    dropped: dict[int, set[int]],
) -> _Placement:
    """Where ``request`` (optional) goes in ``tree``, once the aliases ``dropped`` maps an
    import statement's ``id`` to are removed."""
    module = request.module
    plain = [r for r in requests if r.module == module and not r.optional]
    if any(r.name is None for r in plain):
        return _Placement(_BOUND)  # the plain request adds it
    if plain or any(_imports_from(s, module, dropped) for s in tree.body):
        return _Placement(_PLAIN)  # every run imports from the module anyway
    tries = [s for s in tree.body if isinstance(s, ast.Try | ast.TryStar)]
    for ordinal, statement in enumerate(tries):
        if statement.body[0].lineno == statement.lineno:
            continue  # `try: from apex import amp` on one line: no line to put the import on
        lines = statement_lines(statement.body)
        first = next(
            (
                i
                for i, line in enumerate(lines)
                if any(_imports_from(s, module, dropped) for s in line)
            ),
            None,
        )
        if first is None:
            continue
        if any(module in _binds(alias) for alias in _kept_aliases(statement.body, dropped)):
            return _Placement(_BOUND)
        return _Placement(_INSIDE, lines[first][0], ordinal, first)
    return _Placement(_GUARDED)


def _imports_from(statement: ast.stmt, module: str, dropped: dict[int, set[int]]) -> bool:
    """``import module``, ``import module.sub``, ``from module(.sub) import ...``, with an
    alias the removals leave."""
    gone = dropped.get(id(statement), set())
    if isinstance(statement, ast.Import):
        names = [a.name for i, a in enumerate(statement.names) if i not in gone]
    elif isinstance(statement, ast.ImportFrom) and not statement.level and statement.module:
        names = [statement.module] if len(gone) < len(statement.names) else []
    else:
        return False
    return any(name == module or name.startswith(module + ".") for name in names)


def _kept_aliases(body: list[ast.stmt], dropped: dict[int, set[int]]) -> Iterable[ast.alias]:
    """The aliases of the plain ``import`` statements of ``body`` that the removals leave."""
    for statement in body:
        if isinstance(statement, ast.Import):
            gone = dropped.get(id(statement), set())
            yield from (a for i, a in enumerate(statement.names) if i not in gone)


def _before(source: Source, anchor: ast.stmt, line: cst.SimpleStatementLine) -> NodeEdit:
    """``line`` inserted just before the statement line ``anchor`` starts."""

    def insert(node: cst.CSTNode) -> cst.FlattenSentinel[cst.CSTNode]:
        return cst.FlattenSentinel([line, node])

    return NodeEdit(statement_kind(anchor), source.span(anchor), insert)


def _guarded_import(module: str) -> cst.SimpleStatementLine | cst.BaseCompoundStatement:
    return cst.parse_statement(
        f"try:\n    import {module}\nexcept ImportError:  # only the runs that use it need it\n"
        "    pass\n"
    )


def _inserted_in_try(module: cst.Module, placement: _Placement, name: str) -> cst.Module:
    """``import name`` just before the line ``placement`` names in a module-level ``try``."""
    tries = [s for s in module.body if isinstance(s, cst.Try | cst.TryStar)]
    statement = tries[placement.ordinal]
    assert isinstance(statement.body, cst.IndentedBlock)
    lines = list(statement.body.body)
    lines.insert(placement.line, _import_line(name))
    block = statement.body.with_changes(body=lines)
    body = [s if s is not statement else s.with_changes(body=block) for s in module.body]
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


def _binds_from(statement: cst.BaseStatement, module: str, name: str) -> bool:
    """``from module import name`` (without an alias) at module level."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None:
            continue
        if get_full_name_for_node(small.module) != module or isinstance(
            small.names, cst.ImportStar
        ):
            continue
        if any(a.asname is None and get_full_name_for_node(a.name) == name for a in small.names):
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
