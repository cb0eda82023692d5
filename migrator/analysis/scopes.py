"""Scopes and bindings of one module, in the semantics of libcst's ``ScopeProvider``.

The rules were first written against libcst's scope analysis, and their diagnostics depend on
its exact answers (which bindings a name may refer to, which qualified names they give). This
module computes the same answers from Python's ``ast``, which is two orders of magnitude cheaper
to build. The differences from Python's own scoping are libcst's and are kept on purpose:

- every binding of a name anywhere in a scope counts, except that a name read in the scope that
  binds it sees only the bindings completed before the read (``x = 1; f(x); x = 2``: ``f`` sees
  the first); when none is, the enclosing scope's bindings are used;
- class scopes are invisible from the functions nested in them;
- ``import a.b.c`` binds ``a.b.c``, ``a.b`` and ``a``; a read of ``a.b.c.d`` is a read of the
  longest bound prefix;
- builtins are bindings too (qualified name ``builtins.<name>``).

:class:`migrator.analysis.index.ModuleIndex` builds the scopes in its one walk over the tree.
"""

from __future__ import annotations

import ast
import builtins
import enum
from dataclasses import dataclass, field
from typing import NamedTuple

Position = tuple[int, int]  # (line, UTF-8 column), as ast reports them
ALWAYS = (0, 0)


class NameSource(enum.Enum):
    IMPORT = "import"
    BUILTIN = "builtin"
    LOCAL = "local"


class QualifiedName(NamedTuple):
    name: str
    source: NameSource


class BindingKind(enum.Enum):
    IMPORT = "import"  # node: the Import / ImportFrom statement; alias: the ast.alias
    ASSIGN = "assign"  # node: the stored ast.Name (or the ExceptHandler / match pattern)
    PARAM = "param"  # node: the ast.arg
    FUNCTION = "function"  # node: the FunctionDef / AsyncFunctionDef
    CLASS = "class"  # node: the ClassDef
    BUILTIN = "builtin"  # node: None


@dataclass(eq=False)
class Binding:
    """One way a name gets bound in a scope."""

    name: str
    kind: BindingKind
    scope: Scope
    node: ast.AST | None
    done: Position = ALWAYS  # where the binding is complete, for reads in the same scope
    alias: ast.alias | None = None
    # `name = <value>` / `name: T = <value>` with the name as a whole target: the statement
    statement: ast.Assign | ast.AnnAssign | None = None

    def qualified_names(self, full_name: str) -> set[QualifiedName]:
        """What ``full_name`` (a dotted name starting with this binding's name) refers to."""
        if self.kind is BindingKind.BUILTIN:
            return {QualifiedName(f"builtins.{self.name}", NameSource.BUILTIN)}
        if self.kind is BindingKind.IMPORT:
            return self._imported_names(full_name)
        prefix = self.scope.prefix
        return {QualifiedName(f"{prefix}.{full_name}" if prefix else full_name, NameSource.LOCAL)}

    def _imported_names(self, full_name: str) -> set[QualifiedName]:
        statement, alias = self.node, self.alias
        assert alias is not None
        module = ""
        if isinstance(statement, ast.ImportFrom):
            module = "." * statement.level + (statement.module or "")
        parts = alias.name.split(".")
        for length in range(len(parts), 0, -1):
            real_name = ".".join(parts[:length])
            as_name = alias.asname if alias.asname is not None else real_name
            if module.endswith("."):
                real_name = module + real_name
            elif module:
                real_name = f"{module}.{real_name}"
            if not full_name.startswith(as_name):
                continue
            remaining = full_name.split(as_name, 1)[1]
            if remaining and not remaining.startswith("."):
                continue
            remaining = remaining.lstrip(".")
            name = f"{real_name}.{remaining}" if remaining else real_name
            return {QualifiedName(name, NameSource.IMPORT)}
        return set()

    @property
    def assigned_value(self) -> ast.expr | None:
        statement = self.statement
        return statement.value if statement is not None else None


class ScopeKind(enum.Enum):
    BUILTIN = "builtin"
    MODULE = "module"
    FUNCTION = "function"
    CLASS = "class"
    COMPREHENSION = "comprehension"


@dataclass(eq=False)
class Scope:
    kind: ScopeKind
    parent: Scope | None
    node: ast.AST | None = None
    name: str | None = None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    # `global x` / `nonlocal x`: where assignments and reads of x go instead
    overwrites: dict[str, Scope] = field(default_factory=dict)
    prefix: str = ""

    def __post_init__(self) -> None:
        parent = self.parent
        if parent is None or self.kind in (ScopeKind.BUILTIN, ScopeKind.MODULE):
            self.prefix = ""
        elif self.kind is ScopeKind.CLASS:
            self.prefix = ".".join(p for p in (parent.prefix, self.name) if p)
        elif self.kind is ScopeKind.COMPREHENSION:
            self.prefix = ".".join(p for p in (parent.prefix, "<comprehension>") if p)
        else:
            self.prefix = ".".join(p for p in (parent.prefix, self.name, "<locals>") if p)

    # -- building -----------------------------------------------------------------------------

    def target_for(self, name: str) -> Scope:
        """The scope an assignment of ``name`` here lands in (``global`` / ``nonlocal``)."""
        overwrite = self.overwrites.get(name)
        if overwrite is not None:
            return overwrite.visible_parent(self, overwrite).target_for(name)
        return self

    def bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.name, []).append(binding)

    # -- queries ------------------------------------------------------------------------------

    @property
    def module(self) -> Scope:
        scope = self
        while scope.kind is not ScopeKind.MODULE:
            assert scope.parent is not None
            scope = scope.parent
        return scope

    def visible_to_children(self) -> bool:
        return self.kind is not ScopeKind.CLASS

    def visible_parent(self, from_scope: Scope, first: Scope | None = None) -> Scope:
        parent = first if first is not None else self.parent
        assert parent is not None
        while not parent.visible_to_children():
            assert parent.parent is not None
            parent = parent.parent
        return parent

    def contains(self, name: str) -> bool:
        """Whether ``name`` is bound here or in a scope visible from here (builtins included)."""
        if self.kind is ScopeKind.BUILTIN:
            return hasattr(builtins, name)
        if self.kind is not ScopeKind.MODULE and name in self.overwrites:
            return self.overwrites[name].contains(name)
        if name in self.bindings:
            return bool(self.bindings[name])
        return self.visible_parent(self).contains(name)

    def lookup(self, name: str, from_scope: Scope | None = None) -> list[Binding]:
        """Every binding ``name`` may refer to from here, regardless of order (``scope[name]``)."""
        from_scope = from_scope or self
        if self.kind is ScopeKind.BUILTIN:
            found = self.bindings.get(name)
            if found is None and hasattr(builtins, name):
                found = [Binding(name, BindingKind.BUILTIN, self, None)]
                self.bindings[name] = found
            return found or []
        if self.kind is not ScopeKind.MODULE and name in self.overwrites:
            target = self.visible_parent(from_scope, self.overwrites[name])
            return target.lookup(name, from_scope)
        if name in self.bindings:
            return self.bindings[name]
        return self.visible_parent(from_scope).lookup(name, from_scope)

    def bindings_before(self, name: str, position: Position) -> list[Binding]:
        """What a read of ``name`` at ``position`` in this scope refers to (an access's
        referents): bindings of this scope completed before it, bindings of enclosing scopes,
        or, when this scope binds ``name`` only later, the enclosing scope's bindings."""
        found = self.lookup(name, self)
        earlier = [b for b in found if b.scope is not self or b.done <= position]
        if not earlier and found and self.parent is not None and self.parent is not self:
            return self.parent.lookup(name, self)
        return earlier


def builtin_scope() -> Scope:
    return Scope(ScopeKind.BUILTIN, None)
