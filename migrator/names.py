"""Name resolution shared by every rule.

A rule asks what an expression refers to and gets exactly one of:

- a qualified name (``"torch.optim.SGD"``) when every binding of the expression's base name comes
  from an import (or a builtin) and they all agree;
- :class:`Ambiguous` when it may refer to more than one thing: ``try``/``except ImportError``
  fallbacks, a value alias (``Opt = torch.optim.SGD``), a name that could come from a star import;
- ``None`` when it refers to nothing imported (a local class, a parameter, an attribute of a value).

Rules edit only the first case and report the second.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import libcst as cst
from libcst import MetadataDependent
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    Assignment,
    ParentNodeProvider,
    QualifiedName,
    QualifiedNameProvider,
    QualifiedNameSource,
    ScopeProvider,
)


@dataclass(frozen=True)
class Ambiguous:
    """The expression has several possible origins; ``reason`` says why, for the diagnostic."""

    candidates: tuple[str, ...]
    reason: str

    def describe(self) -> str:
        return f"{self.reason} (could be {' or '.join(self.candidates)})"


def resolve(
    visitor: MetadataDependent,
    node: cst.BaseExpression,
    star_imports: Iterable[str] = (),
    _following: frozenset[str] = frozenset(),
) -> str | Ambiguous | None:
    """The qualified name of ``node`` (see the module docstring).

    ``_following`` holds the local names whose assignments are being followed, so that rebinding a
    name from itself (``x = x.T``) ends the search instead of recursing forever.
    """
    qualified: set[QualifiedName] = visitor.get_metadata(
        QualifiedNameProvider,  # type: ignore[arg-type]  # libcst's provider typing is too narrow
        node,
        set(),
    )
    imported = {q.name for q in qualified if q.source is not QualifiedNameSource.LOCAL}
    local = {q.name for q in qualified if q.source is QualifiedNameSource.LOCAL}
    if imported and local:
        return Ambiguous(tuple(sorted(imported | local)), "bound both by an import and locally")
    if len(imported) > 1:
        return Ambiguous(tuple(sorted(imported)), "bound by more than one import")
    if imported:
        return imported.pop()
    if local:
        return _value_alias(visitor, node, star_imports, _following)
    return _star_candidate(node, star_imports)


def resolve_any(
    visitor: MetadataDependent,
    node: cst.BaseExpression,
    wanted: Collection[str],
    star_imports: Iterable[str] = (),
) -> str | Ambiguous | None:
    """:func:`resolve` narrowed to ``wanted``: only names in it, or ambiguity that involves one."""
    result = resolve(visitor, node, star_imports)
    if isinstance(result, Ambiguous):
        return result if any(c in wanted for c in result.candidates) else None
    return result if result in wanted else None


def _value_alias(
    visitor: MetadataDependent,
    node: cst.BaseExpression,
    star_imports: Iterable[str],
    following: frozenset[str],
) -> Ambiguous | None:
    """``Opt = torch.optim.SGD`` then ``Opt(...)``: report what ``Opt`` may stand for."""
    base = _base_name(node)
    if base is None or base.value in following:
        return None
    scope = visitor.get_metadata(ScopeProvider, base, None)
    if scope is None:
        return None
    suffix = _suffix_after_base(node)
    candidates: set[str] = set()
    for assignment in scope[base.value]:
        if not isinstance(assignment, Assignment):
            continue
        value = _assigned_value(visitor, assignment.node, base.value)
        if value is None:
            continue
        target = resolve(visitor, value, star_imports, following | {base.value})
        if isinstance(target, str):
            candidates.add(target + suffix)
        elif isinstance(target, Ambiguous):
            candidates.update(c + suffix for c in target.candidates)
    if candidates:
        return Ambiguous(tuple(sorted(candidates)), f"`{base.value}` is a value alias")
    return None


def _assigned_value(
    visitor: MetadataDependent, assign_node: cst.CSTNode, name: str
) -> cst.BaseExpression | None:
    """The name or attribute on the right of ``name = <value>``, when that is what binds it."""
    if isinstance(assign_node, cst.Name):
        try:
            parent = visitor.get_metadata(ParentNodeProvider, assign_node)
        except KeyError:
            return None
        while isinstance(parent, cst.AssignTarget):
            parent = visitor.get_metadata(ParentNodeProvider, parent)
        assign_node = parent
    if isinstance(assign_node, cst.Assign | cst.AnnAssign):
        value = assign_node.value
        if isinstance(value, cst.Name | cst.Attribute) and get_full_name_for_node(value) != name:
            return value
    return None


def _star_candidate(node: cst.BaseExpression, star_imports: Iterable[str]) -> Ambiguous | None:
    modules = tuple(star_imports)
    dotted = get_full_name_for_node(node)
    if not modules or dotted is None:
        return None
    return Ambiguous(
        tuple(f"{module}.{dotted}" for module in modules),
        f"`{dotted.split('.')[0]}` may come from a star import",
    )


def _base_name(node: cst.BaseExpression) -> cst.Name | None:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def _suffix_after_base(node: cst.BaseExpression) -> str:
    dotted = get_full_name_for_node(node) or ""
    _, _, rest = dotted.partition(".")
    return f".{rest}" if rest else ""


def star_imports(module: cst.Module) -> tuple[str, ...]:
    """Modules that ``module`` star-imports from (only legal at module level)."""
    found: list[str] = []
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (
                isinstance(small, cst.ImportFrom)
                and isinstance(small.names, cst.ImportStar)
                and small.module is not None
                and not small.relative
            ):
                name = get_full_name_for_node(small.module)
                if name:
                    found.append(name)
    return tuple(found)
