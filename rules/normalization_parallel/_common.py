"""Helpers shared by NPU201 and NPU202: rehoming imports, and reading code the way libcst prints it.

Not a rule (it defines no ``Rule`` subclass); the registry imports it and finds nothing.

The analysis half works on ``ast`` through the rule's index (which imports to rewrite, which
import an access goes through, how the file spells ``torch.nn``, the code quoted in messages);
the editing half builds libcst nodes inside edit closures (an import statement moved to its new
module, aliases kept).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migrator.analysis.calls import Argument
from migrator.analysis.index import EVERYTHING, base_name, full_name
from migrator.analysis.scopes import BindingKind
from migrator.analysis.view import FileView
from migrator.edits import NodeEdit
from migrator.lazy_imports import cst, get_full_name_for_node
from migrator.rule import Rule

APEX_ROOTS = frozenset({"apex"})

# An import to drop when unused: (module, imported name, as-name), as Rule.remove_import_if_unused
# takes them (`import module`, `from module import name as asname`).
ImportToRemove = tuple[str, str | None, str | None]


@dataclass(frozen=True)
class NewHome:
    """Where an imported name moves: ``from module import name``; ``module=None`` drops the alias
    from the import (the rule then rewrites every use to a full dotted name)."""

    module: str | None
    name: str
    keep_local: bool = False  # `from m import A` becomes `from new import B as A`


# -- imports, on ast -----------------------------------------------------------------------------


def absolute_module(statement: ast.ImportFrom) -> str | None:
    """The module an absolute ``from ... import`` reads from; None for a relative one."""
    return None if statement.level else statement.module


def is_star(statement: ast.ImportFrom) -> bool:
    return any(alias.name == "*" for alias in statement.names)


def bound_name(alias: ast.alias) -> str:
    """The name an import alias binds: its ``as`` name, or the first part of the dotted name."""
    return alias.asname or alias.name.split(".")[0]


def alone_on_its_line(view: FileView, statement: ast.stmt) -> bool:
    """Whether ``statement`` is a statement line of its own, which an edit can replace by
    several lines: not ``a; b``, not the body of ``if x: b``."""
    parent = view.index.parent(statement)
    for field_name in ("body", "orelse", "finalbody"):
        body = getattr(parent, field_name, None)
        if isinstance(body, list) and any(s is statement for s in body):
            line = next(
                line for line in view.index.lines(body) if any(s is statement for s in line)
            )
            if len(line) != 1:
                return False
    return starts_its_line(view, statement)


def starts_its_line(view: FileView, statement: ast.stmt) -> bool:
    """Nothing but indentation before ``statement`` on its first line (an indented block)."""
    source = view.source
    line_start = source.line_starts[statement.lineno - 1]
    return not source.text[line_start : source.start(statement)].strip()


def torch_nn_prefix(view: FileView) -> str:
    """How the file spells ``torch.nn`` at module level: ``nn`` when it imports it so, else
    ``torch.nn`` (the rule then asks for ``import torch``)."""
    for statement in view.index.tree.body:
        if isinstance(statement, ast.ImportFrom):
            # As libcst's full name of the module: the dots of a relative import do not count.
            if statement.module == "torch" and any(
                alias.name == "nn" and bound_name(alias) == "nn" for alias in statement.names
            ):
                return "nn"
        elif isinstance(statement, ast.Import) and any(
            alias.name == "torch.nn" and alias.asname == "nn" for alias in statement.names
        ):
            return "nn"
    return "torch.nn"


def candidate_names(view: FileView) -> list[ast.Name]:
    """The names that may resolve to something under apex, in source order."""
    index = view.index
    reaching = index.names_reaching(APEX_ROOTS) if view.fast else EVERYTHING
    identifiers = reaching if isinstance(reaching, frozenset) else index.identifiers()
    found = [name for identifier in identifiers for name in index.names(identifier)]
    found.sort(key=_source_order)
    return found


def candidate_attributes(view: FileView, attrs: Iterable[str]) -> list[ast.Attribute]:
    """The ``x.<attr>`` nodes for ``attrs`` that may resolve under apex, inner ones first."""
    found = [
        attribute
        for attr in attrs
        for attribute in view.index.attributes(attr)
        if view.may_name(attribute, APEX_ROOTS)
    ]
    found.sort(key=_source_order)
    return found


def _source_order(node: ast.AST) -> tuple[int, int, int, int]:
    return (
        node.lineno,  # type: ignore[attr-defined]
        node.col_offset,  # type: ignore[attr-defined]
        node.end_lineno or 0,  # type: ignore[attr-defined]
        node.end_col_offset or 0,  # type: ignore[attr-defined]
    )


def binding_imports(view: FileView, name: ast.Name) -> list[ast.Import | ast.ImportFrom]:
    """The import statements among the bindings ``name`` may refer to (order-blind)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for binding in view.index.bindings_of(name):
        statement = binding.node
        if (
            binding.kind is BindingKind.IMPORT
            and isinstance(statement, ast.Import | ast.ImportFrom)
            and not any(statement is seen for seen in found)
        ):
            found.append(statement)
    return found


def queue_removal_of_base_import(rule: Rule, node: ast.Attribute) -> None:
    """``apex.parallel.X`` was rewritten: drop the import that bound ``apex`` if now unused."""
    removal = base_import_removal(rule.view, node)
    if removal is not None:
        rule.remove_import_if_unused(*removal)


def base_import_removal(view: FileView, node: ast.Attribute) -> ImportToRemove | None:
    """The import to drop, if unused, once ``apex.parallel.X`` (``node``) is rewritten.

    Only the one import that the access goes through: the import that gives the longest access
    (``import apex.parallel`` rather than ``import apex`` for ``apex.parallel.X``).
    """
    base = base_name(node)
    if base is None:
        return None
    access = full_name(node) or ""
    best: tuple[int, ImportToRemove] | None = None
    for statement in binding_imports(view, base):
        for removal, reaches in _removals_binding(statement, base.id):
            through = access == reaches or access.startswith(reaches + ".")
            if through and (best is None or len(reaches) > best[0]):
                best = (len(reaches), removal)
    return None if best is None else best[1]


def _removals_binding(
    statement: ast.Import | ast.ImportFrom, name: str
) -> list[tuple[ImportToRemove, str]]:
    """(removal request, dotted path the binding gives access to) for imports binding ``name``."""
    found: list[tuple[ImportToRemove, str]] = []
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if bound_name(alias) != name:
                continue
            if alias.asname is not None:
                found.append(((alias.name, None, name), name))
            else:
                found.append(((alias.name, None, None), alias.name))
        return found
    source = absolute_module(statement)
    if source is None or is_star(statement):
        return found
    for alias in statement.names:
        if bound_name(alias) == name:
            asname = name if alias.asname is not None else None
            found.append(((source, alias.name, asname), name))
    return found


# -- values, on ast ------------------------------------------------------------------------------

NOT_CONSTANT = object()


def constant(node: ast.AST) -> object:
    """The value of ``True``/``False``/``None`` or a number written literally (as a float),
    else NOT_CONSTANT."""
    if not isinstance(node, ast.Constant):
        return NOT_CONSTANT
    value = node.value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer literal past float's range
            return float("inf")
    return NOT_CONSTANT


def is_constant(node: ast.AST, value: object) -> bool:
    """``node`` is written as ``value`` (``False`` is not ``0`` here)."""
    found = constant(node)
    if isinstance(value, bool) or value is None:
        return found is value
    return not isinstance(found, bool) and found is not NOT_CONSTANT and found == value


# -- code as libcst prints it, for messages ------------------------------------------------------

_BLANKS = " \t\f\r\n\\"


def argument_code(view: FileView, argument: Argument) -> str:
    """One argument as libcst prints it: from its start to the next argument, comma and
    comments included, stripped (``*args,`` when more arguments follow)."""
    text = view.source.text
    start, end = view.source.span(argument.node)
    end = _skip_blanks_and_comments(text, end)
    if end < len(text) and text[end] == ",":
        end = _skip_blanks_and_comments(text, end + 1)
    return text[start:end].strip()


def _skip_blanks_and_comments(text: str, offset: int) -> int:
    while offset < len(text):
        if text[offset] in _BLANKS:
            offset += 1
        elif text[offset] == "#":
            newline = text.find("\n", offset)
            offset = len(text) if newline == -1 else newline
        else:
            break
    return offset


# -- imports, on libcst (inside edits) -----------------------------------------------------------


def rehome_statement(
    rule: Rule, statement: ast.ImportFrom, moves: Mapping[str, NewHome]
) -> NodeEdit:
    """An edit of the line of ``statement`` (alone on it) that imports the names in ``moves``
    from their new modules; the line becomes one line per import, or goes."""
    frozen = dict(moves)

    def rehome(line: cst.SimpleStatementLine) -> Any:
        node = line.body[0]
        assert isinstance(node, cst.ImportFrom)
        statements = import_statements(line, rehome_import_from(node, frozen))
        if not statements:
            return cst.RemovalSentinel.REMOVE
        return cst.FlattenSentinel(statements)

    return rule.replace_statement(statement, rehome)


def imported_name(alias: cst.ImportAlias) -> str:
    return get_full_name_for_node(alias.name) or ""


def rehome_import_from(node: cst.ImportFrom, moves: Mapping[str, NewHome]) -> list[cst.ImportFrom]:
    """``node`` with the names in ``moves`` imported from their new module.

    Names that stay behind keep ``node`` as it was written; when every name moves to the same
    module, the statement is edited in place so that its parentheses and comments survive.
    Aliases are kept (``as BertLayerNorm``), except one that would repeat the new name.
    """
    assert not isinstance(node.names, cst.ImportStar)
    staying: list[cst.ImportAlias] = []
    moving: dict[str, list[cst.ImportAlias]] = {}
    for alias in node.names:
        home = moves.get(imported_name(alias))
        if home is None:
            staying.append(alias)
        elif home.module is not None:
            renamed = _renamed(alias, home)
            siblings = moving.setdefault(home.module, [])
            if not any(renamed.deep_equals(s.with_changes(comma=renamed.comma)) for s in siblings):
                siblings.append(renamed)  # MixedFusedLayerNorm and FusedLayerNorm: one LayerNorm
    if not staying and len(moving) == 1:
        ((module, aliases),) = moving.items()
        return [node.with_changes(module=_dotted(module), names=_keep_commas(node.names, aliases))]
    result: list[cst.ImportFrom] = []
    if staying:
        result.append(node.with_changes(names=_keep_commas(node.names, staying)))
    for module, aliases in moving.items():
        bare = [alias.with_changes(comma=cst.MaybeSentinel.DEFAULT) for alias in aliases]
        result.append(cst.ImportFrom(module=_dotted(module), names=bare))
    return result


def _renamed(alias: cst.ImportAlias, home: NewHome) -> cst.ImportAlias:
    asname = alias.asname
    if asname is None and home.keep_local and imported_name(alias) != home.name:
        asname = cst.AsName(cst.Name(imported_name(alias)))
    if asname is not None and isinstance(asname.name, cst.Name) and asname.name.value == home.name:
        asname = None
    return alias.with_changes(name=cst.Name(home.name), asname=asname)


def _keep_commas(
    original: Iterable[cst.ImportAlias], kept: list[cst.ImportAlias]
) -> list[cst.ImportAlias]:
    """The last kept alias takes the comma (or its absence) of the last original one."""
    original = list(original)
    if not kept or len(kept) == len(original):
        return kept
    return [*kept[:-1], kept[-1].with_changes(comma=original[-1].comma)]


def _dotted(name: str) -> cst.Attribute | cst.Name:
    expression = cst.parse_expression(name)
    assert isinstance(expression, cst.Attribute | cst.Name)
    return expression


def dotted_expression(name: str) -> cst.BaseExpression:
    return cst.parse_expression(name)


def import_statements(
    line: cst.SimpleStatementLine, froms: list[cst.ImportFrom]
) -> list[cst.SimpleStatementLine]:
    """One statement line per import; the first keeps the original line's comments."""
    lines = []
    for index, node in enumerate(froms):
        if index == 0:
            lines.append(line.with_changes(body=[node]))
        else:
            lines.append(cst.SimpleStatementLine(body=[node]))
    return lines


def start_then_end(node: ast.AST) -> tuple[int, int, int, int]:
    """A sort key: where ``node`` starts, then where it ends (an outer call before the calls
    nested in it)."""
    return (
        node.lineno,  # type: ignore[attr-defined]
        node.col_offset,  # type: ignore[attr-defined]
        node.end_lineno or 0,  # type: ignore[attr-defined]
        node.end_col_offset or 0,  # type: ignore[attr-defined]
    )
