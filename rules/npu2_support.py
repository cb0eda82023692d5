"""Helpers shared by the NPU2xx rules: renaming imports, and finding the import behind a name.

Not a rule (it defines no ``Rule`` subclass); the registry imports it and finds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import Assignment, ScopeProvider

from migrator.rule import Rule


@dataclass(frozen=True)
class NewHome:
    """Where an imported name moves: ``from module import name``; ``module=None`` drops the alias
    from the import (the rule then rewrites every use to a full dotted name)."""

    module: str | None
    name: str
    keep_local: bool = False  # `from m import A` becomes `from new import B as A`


def imported_name(alias: cst.ImportAlias) -> str:
    return get_full_name_for_node(alias.name) or ""


def local_name(alias: cst.ImportAlias) -> str:
    """The name an import alias binds: ``as`` name, or the first part of the dotted name."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return imported_name(alias).split(".")[0]


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


def torch_nn_prefix(module: cst.Module) -> str:
    """How the file spells ``torch.nn`` at module level: ``nn`` when it imports it so, else
    ``torch.nn`` (the rule then asks for ``import torch``)."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                source = get_full_name_for_node(small.module) if small.module else None
                for alias in small.names:
                    if (
                        source == "torch"
                        and imported_name(alias) == "nn"
                        and local_name(alias) == "nn"
                    ):
                        return "nn"
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    if imported_name(alias) == "torch.nn" and local_name(alias) == "nn":
                        return "nn"
    return "torch.nn"


def base_name(node: cst.BaseExpression) -> cst.Name | None:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def queue_removal_of_base_import(rule: Rule, node: cst.Attribute) -> None:
    """``apex.parallel.X`` was rewritten: drop the import that bound ``apex`` if now unused.

    Only the one import that the access goes through is queued (``import apex.parallel`` rather
    than ``import apex`` for ``apex.parallel.X``): libcst's RemoveImportsVisitor keeps one
    removal per module, so extra requests for the same module would cancel each other.
    """
    base = base_name(node)
    if base is None:
        return
    scope = rule.get_metadata(ScopeProvider, base, None)
    if scope is None:
        return
    access = get_full_name_for_node(node) or ""
    best: tuple[int, tuple[str, str | None, str | None]] | None = None
    for assignment in scope[base.value]:
        if not isinstance(assignment, Assignment):
            continue
        for removal, reaches in _removals_binding(assignment.node, base.value):
            through = access == reaches or access.startswith(reaches + ".")
            if through and (best is None or len(reaches) > best[0]):
                best = (len(reaches), removal)
    if best is not None:
        rule.remove_import_if_unused(*best[1])


def _removals_binding(
    statement: cst.CSTNode, name: str
) -> list[tuple[tuple[str, str | None, str | None], str]]:
    """(removal request, dotted path the binding gives access to) for imports binding ``name``."""
    found: list[tuple[tuple[str, str | None, str | None], str]] = []
    if isinstance(statement, cst.Import):
        for alias in statement.names:
            if local_name(alias) != name:
                continue
            module = imported_name(alias)
            if alias.asname is not None:
                found.append(((module, None, name), name))
            else:
                found.append(((module, None, None), module))
    elif (
        isinstance(statement, cst.ImportFrom)
        and statement.module is not None
        and not statement.relative
        and not isinstance(statement.names, cst.ImportStar)
    ):
        source = get_full_name_for_node(statement.module) or ""
        for alias in statement.names:
            if local_name(alias) == name:
                asname = name if alias.asname is not None else None
                found.append(((source, imported_name(alias), asname), name))
    return found


NOT_CONSTANT = object()
_NAMED_CONSTANTS = {"True": True, "False": False, "None": None}


def constant(node: cst.BaseExpression) -> object:
    """The value of ``True``/``False``/``None`` or a number written literally, else NOT_CONSTANT."""
    if isinstance(node, cst.Name) and node.value in _NAMED_CONSTANTS:
        return _NAMED_CONSTANTS[node.value]
    if isinstance(node, cst.Integer | cst.Float):
        return float(node.value.replace("_", ""))
    return NOT_CONSTANT


def is_constant(node: cst.BaseExpression, value: object) -> bool:
    """``node`` is written as ``value`` (``False`` is not ``0`` here)."""
    found = constant(node)
    if isinstance(value, bool) or value is None:
        return found is value
    return not isinstance(found, bool) and found is not NOT_CONSTANT and found == value


def source_of(node: cst.CSTNode) -> str:
    """The code of ``node`` as written, for messages."""
    return cst.Module(body=[]).code_for_node(node).strip()


class _Collector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.ids.add(id(node))
        return True


def node_ids(node: cst.CSTNode) -> set[int]:
    """The ids of ``node`` and of every node under it."""
    collector = _Collector()
    node.visit(collector)
    return collector.ids
