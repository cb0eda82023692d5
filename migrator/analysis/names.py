"""Name resolution shared by every rule.

A rule asks what an expression refers to and gets exactly one of:

- a qualified name (``"torch.optim.SGD"``) when every binding of the expression's base name comes
  from an import (or a builtin) and they all agree;
- :class:`Ambiguous` when it may refer to more than one thing: ``try``/``except ImportError``
  fallbacks (except a ``name = None`` fallback where the name is called or has an attribute
  taken: None has neither), a value alias (``Opt = torch.optim.SGD``), a name that could come
  from a star import;
- ``None`` when it refers to nothing imported (a local class, a parameter, an attribute of a value).

Rules edit only the first case and report the second. The bindings come from
:mod:`migrator.analysis.scopes`, which keeps libcst's scoping semantics.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass

from migrator.analysis.index import ModuleIndex, base_name, full_name
from migrator.analysis.scopes import Binding, BindingKind, NameSource


@dataclass(frozen=True)
class Ambiguous:
    """The expression has several possible origins; ``reason`` says why, for the diagnostic."""

    candidates: tuple[str, ...]
    reason: str

    def describe(self) -> str:
        return f"{self.reason} (could be {' or '.join(self.candidates)})"


def resolve(
    index: ModuleIndex, node: ast.AST, _following: frozenset[str] = frozenset()
) -> str | Ambiguous | None:
    """The qualified name of ``node`` (see the module docstring).

    ``_following`` holds the local names whose assignments are being followed, so that rebinding a
    name from itself (``x = x.T``) ends the search instead of recursing forever.
    """
    if not _following:
        known = index.resolved.get(id(node), _UNKNOWN)
        if known is _UNKNOWN:
            known = index.resolved[id(node)] = _resolve(index, node, _following)
        return known  # type: ignore[return-value]
    return _resolve(index, node, _following)


_UNKNOWN = object()


def _resolve(
    index: ModuleIndex, node: ast.AST, _following: frozenset[str]
) -> str | Ambiguous | None:
    qualified = index.qualified_names(node)
    imported = {q.name for q in qualified if q.source is not NameSource.LOCAL}
    local = {q.name for q in qualified if q.source is NameSource.LOCAL}
    if imported and local and _only_none_besides_imports(index, node):
        local = set()  # `except ImportError: amp = None`: None has no attributes, no call
    chosen = _between_imports(imported, local)
    if chosen is not None:
        return chosen
    if local:
        return _value_alias(index, node, _following)
    return _star_candidate(index, node)


def _only_none_besides_imports(index: ModuleIndex, node: ast.AST) -> bool:
    """Whether ``node`` is an attribute of its base name or a callee, and every binding of that
    name other than imports is ``name = None``.

    The fallback of an optional import (``try: from apex import amp`` / ``except ImportError:
    amp = None``) cannot be what ``amp.initialize(...)`` or ``FusedAdam(...)`` uses: on None the
    attribute access or the call raises, so wherever the code does something, the name is the
    import. A bare use of the name (``if amp is None``, an argument) stays ambiguous."""
    base = base_name(node)
    if base is None:
        return False
    parent = index.parent(node)
    called = isinstance(parent, ast.Call) and parent.func is node
    if base is node and not called:
        return False
    return all(
        _assigns_none(binding)
        for binding in index.bindings_of(base)
        if binding.kind not in (BindingKind.IMPORT, BindingKind.BUILTIN)
    )


def _assigns_none(binding: Binding) -> bool:
    value = binding.assigned_value
    return isinstance(value, ast.Constant) and value.value is None


def compared_with_none(index: ModuleIndex, node: ast.AST) -> bool:
    """``node is None`` / ``node is not None``: a test of whether an optional import worked,
    which needs no migration whatever ``node`` is."""
    parent = index.parent(node)
    if not isinstance(parent, ast.Compare) or len(parent.ops) != 1:
        return False
    if not isinstance(parent.ops[0], (ast.Is, ast.IsNot)):
        return False
    other = parent.comparators[0] if parent.left is node else parent.left
    return isinstance(other, ast.Constant) and other.value is None


def resolve_any(
    index: ModuleIndex, node: ast.AST, wanted: Collection[str]
) -> str | Ambiguous | None:
    """:func:`resolve` narrowed to ``wanted``: only names in it, or ambiguity that involves one."""
    result = resolve(index, node)
    if isinstance(result, Ambiguous):
        return result if any(c in wanted for c in result.candidates) else None
    return result if result in wanted else None


def _between_imports(imported: set[str], local: set[str]) -> str | Ambiguous | None:
    """The one imported name, or the doubt when there are several or local bindings too;
    None when nothing is imported."""
    if imported and local:
        return Ambiguous(tuple(sorted(imported | local)), "bound both by an import and locally")
    if len(imported) > 1:
        return Ambiguous(tuple(sorted(imported)), "bound by more than one import")
    return next(iter(imported), None)


def resolve_global(index: ModuleIndex, name: str) -> str | Ambiguous | None:
    """What another module gets by ``from <this module> import name`` and calls: the qualified
    name of the module-level ``name`` by the rules of :func:`resolve`, where every binding at
    the module's top counts (the importer sees whichever ran last). A ``name = None`` fallback
    of an import does not: calling None raises."""
    bindings = index.module_scope.bindings.get(name, [])
    imported = {
        qualified.name
        for binding in bindings
        if binding.kind is BindingKind.IMPORT
        for qualified in binding.qualified_names(name)
    }
    others = [binding for binding in bindings if binding.kind is not BindingKind.IMPORT]
    if imported:
        others = [binding for binding in others if not _assigns_none(binding)]
    local = {qualified.name for binding in others for qualified in binding.qualified_names(name)}
    chosen = _between_imports(imported, local)
    if chosen is not None:
        return chosen
    if local:
        return _aliased(index, name, others, "", frozenset())
    if index.star_imports:
        candidates = tuple(f"{module}.{name}" for module in index.star_imports)
        return Ambiguous(candidates, f"`{name}` may come from a star import")
    return None


def _value_alias(index: ModuleIndex, node: ast.AST, following: frozenset[str]) -> Ambiguous | None:
    """``Opt = torch.optim.SGD`` then ``Opt(...)``: report what ``Opt`` may stand for."""
    base = base_name(node)
    if base is None or base.id in following:
        return None
    return _aliased(index, base.id, index.bindings_of(base), _suffix_after_base(node), following)


def _aliased(
    index: ModuleIndex,
    name: str,
    bindings: list[Binding],
    suffix: str,
    following: frozenset[str],
) -> Ambiguous | None:
    """What ``name`` may stand for when ``bindings`` assign it dotted names."""
    candidates: set[str] = set()
    for binding in bindings:
        if binding.kind is BindingKind.BUILTIN:
            continue
        value = binding.assigned_value
        # Only a dotted name is an alias: `code = GraphModule(...).code` holds a value that a
        # call made, not the class attribute (and ModuleIndex.names_reaching agrees).
        if value is None or base_name(value) is None or full_name(value) == name:
            continue
        target = resolve(index, value, following | {name})
        if isinstance(target, str):
            candidates.add(target + suffix)
        elif isinstance(target, Ambiguous):
            candidates.update(c + suffix for c in target.candidates)
    if candidates:
        return Ambiguous(tuple(sorted(candidates)), f"`{name}` is a value alias")
    return None


def _star_candidate(index: ModuleIndex, node: ast.AST) -> Ambiguous | None:
    modules = index.star_imports
    dotted = full_name(node)
    if not modules or dotted is None:
        return None
    candidates = tuple(f"{module}.{dotted}" for module in modules)
    parent = index.parent(node)
    if "." in dotted or (isinstance(parent, ast.Attribute) and parent.value is node):
        # A star import also re-exports the modules that module imported: `from common import *`
        # over a file that did `import torch` gives `torch` itself, used as `torch.cuda.x`.
        candidates += (dotted,)
    return Ambiguous(candidates, f"`{dotted.split('.')[0]}` may come from a star import")


def _suffix_after_base(node: ast.AST) -> str:
    dotted = full_name(node) or ""
    _, _, rest = dotted.partition(".")
    return f".{rest}" if rest else ""
