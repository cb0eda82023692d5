"""One walk over a module's ``ast``: parents, nodes by type, names by identifier, scopes.

Rules ask the index instead of walking the tree themselves: ``index.nodes(ast.Call)``,
``index.attributes("cuda")``, ``index.names("SGD")``, ``index.parent(node)``,
``index.qualified_names(node)``. Building it costs about a quarter of ``ast.parse``; every
query after that is a dictionary lookup or a short walk up the parents.

Nothing here holds a reference from a child to its parent (parents live in a dictionary keyed
by ``id``), so a tree and its index are freed by reference counting the moment a file is done,
without waiting for the cyclic garbage collector.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any, TypeVar

from migrator.analysis.scopes import (
    ALWAYS,
    Binding,
    BindingKind,
    Position,
    QualifiedName,
    Scope,
    ScopeKind,
    builtin_scope,
)
from migrator.source import Source

NodeT = TypeVar("NodeT", bound=ast.AST)

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
# Statements with a body of their own (what libcst calls compound statements).
COMPOUND_STATEMENTS = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.TryStar,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Match,
)
_AFTER_ALL: Position = (1 << 62, 0)
# Expression contexts and operators: shared singletons, never worth indexing.
_SKIPPED = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def end_of(node: ast.AST) -> Position:
    return node.end_lineno, node.end_col_offset  # type: ignore[attr-defined,return-value]


def start_of(node: ast.AST) -> Position:
    return node.lineno, node.col_offset  # type: ignore[attr-defined,return-value]


def line_of(node: ast.AST) -> int:
    """The 1-based line where ``node`` starts."""
    return node.lineno  # type: ignore[attr-defined,no-any-return]


def full_name(node: ast.AST | None) -> str | None:
    """libcst's ``get_full_name_for_node``: ``a.b.c`` for names, attributes, the callee of a
    call and the value of a subscript; ``None.x`` when the base has no name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{full_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return full_name(node.func)
    if isinstance(node, ast.Subscript):
        return full_name(node.value)
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
        return node.name
    return None


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def base_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node if isinstance(node, ast.Name) else None


class ModuleIndex:
    """The facts of one parsed module that every rule shares."""

    def __init__(self, tree: ast.Module, source: Source) -> None:
        self.tree = tree
        self.source = source
        self._parents: dict[int, ast.AST] = {}
        self._by_type: dict[type, list[ast.AST]] = {}
        self._names: dict[str, list[ast.Name]] = {}
        self._attributes: dict[str, list[ast.Attribute]] = {}
        self._scopes: dict[int, Scope] = {}  # id(scope-owning node) -> its scope
        self._sorted: set[type] = set()
        # Answers every rule may ask again, keyed by id(node): the node outlives no index.
        self._scope_memo: dict[int, Scope] = {}
        self._qualified_memo: dict[int, frozenset[QualifiedName]] = {}
        self._stored_memo: dict[int, frozenset[str]] = {}
        self.resolved: dict[int, object] = {}  # migrator.analysis.names.resolve's answers
        self._imported_as: dict[frozenset[str], frozenset[str]] = {}
        self._reaching: dict[frozenset[str], frozenset[str] | _Everything] = {}
        self.builtins = builtin_scope()
        self.module_scope = Scope(ScopeKind.MODULE, self.builtins, tree)
        self._scopes[id(tree)] = self.module_scope
        _Builder(self).run()

    def release(self) -> None:
        """Drop everything this index holds; it cannot be used afterwards. Scopes and their
        bindings refer to each other, and bindings to the tree's nodes: without this, a tree
        lives until the cyclic garbage collector finds it."""
        for scope in self._scopes.values():
            scope.bindings.clear()
            scope.overwrites.clear()
        self.builtins.bindings.clear()
        self.__dict__.clear()

    # -- nodes --------------------------------------------------------------------------------

    def nodes(self, kind: type[NodeT]) -> list[NodeT]:
        """Every node of type ``kind`` (exactly, not subclasses), in source order."""
        found = self._by_type.get(kind)
        if found is None:
            return []
        if kind not in self._sorted:
            found.sort(key=_source_order)
            self._sorted.add(kind)
        return found  # type: ignore[return-value]

    def imports(self) -> list[ast.Import | ast.ImportFrom]:
        """Every import statement, in source order."""
        found: list[ast.Import | ast.ImportFrom] = [*self.nodes(ast.Import)]
        found += self.nodes(ast.ImportFrom)
        found.sort(key=_source_order)
        return found

    def names(self, identifier: str) -> list[ast.Name]:
        """Every ``ast.Name`` spelled ``identifier`` (reads, writes and deletions)."""
        return self._names.get(identifier, [])

    def attributes(self, attr: str) -> list[ast.Attribute]:
        """Every ``x.<attr>`` attribute node."""
        return self._attributes.get(attr, [])

    def identifiers(self) -> set[str]:
        return set(self._names)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parent = self._parents.get(id(node))
        while parent is not None:
            yield parent
            parent = self._parents.get(id(parent))

    def method_call(self, receiver: ast.AST, method: str) -> ast.Call | None:
        """``receiver.<method>(x)``, the call, when ``receiver`` is read so, with one positional
        argument and no keyword (``names.get(key)``, ``params.append(p)``); None otherwise."""
        attribute = self._parents.get(id(receiver))
        call = self._parents.get(id(attribute)) if attribute is not None else None
        if (
            isinstance(attribute, ast.Attribute)
            and attribute.attr == method
            and isinstance(call, ast.Call)
            and call.func is attribute
            and len(call.args) == 1
            and not isinstance(call.args[0], ast.Starred)
            and not call.keywords
        ):
            return call
        return None

    def update_receiver(self, call: ast.AST | None) -> ast.Name | None:
        """``name`` when ``call`` is ``name.update(...)`` (a dict filled in place), else None."""
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "update"
            and isinstance(call.func.value, ast.Name)
        ):
            return call.func.value
        return None

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        """The innermost statement holding ``node`` (``node`` itself if it is one)."""
        current: ast.AST | None = node
        while current is not None and not isinstance(current, ast.stmt):
            current = self._parents.get(id(current))
        return current

    def stored_names(self, node: ast.AST) -> frozenset[str]:
        """The names stored or deleted anywhere under ``node`` (nested functions included):
        ``x = ...``, ``for x in ...``, ``del x``."""
        memo = self._stored_memo.get(id(node))
        if memo is None:
            memo = self._stored_memo[id(node)] = frozenset(
                child.id
                for child in ast.walk(node)
                if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load)
            )
        return memo

    def assigned_name(self, value: ast.AST) -> ast.Name | None:
        """The plain name ``value`` is assigned to on its own, ``name = <value>``; None for any
        other statement (several targets, an attribute, an unpacking, no assignment)."""
        statement = self._parents.get(id(value))
        if (
            isinstance(statement, ast.Assign)
            and statement.value is value
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            return statement.targets[0]
        return None

    def walk(self, node: ast.AST) -> Iterator[ast.AST]:
        """``node`` and everything under it, in source order (libcst's ``findall`` order)."""
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            children = [c for c in ast.iter_child_nodes(current) if not isinstance(c, _SKIPPED)]
            children.sort(key=_source_order, reverse=True)
            stack.extend(children)

    def lines(self, body: list[ast.stmt]) -> list[list[ast.stmt]]:
        """``body`` grouped into statement lines: ``a = 1; b = 2`` is one line of two."""
        return statement_lines(body)

    def line_head(self, statement: ast.stmt) -> ast.stmt:
        """The first statement of the statement line that holds ``statement``."""
        parent = self.parent(statement)
        for field_name in ("body", "orelse", "finalbody"):
            body = getattr(parent, field_name, None)
            if isinstance(body, list) and any(s is statement for s in body):
                for line in self.lines(body):
                    if any(s is statement for s in line):
                        return line[0]
        return statement

    def names_reaching(self, roots: frozenset[str]) -> frozenset[str] | _Everything:
        """Identifiers that may resolve to a qualified name under ``roots`` (``torch``,
        ``apex``, ``builtins``...): bound by an import from there, or assigned from such a
        name (a value alias). Everything, when the module star-imports."""
        cached = self._reaching.get(roots)
        if cached is not None:
            return cached
        found: set[str] = set()
        if self.star_imports:
            result: frozenset[str] | _Everything = EVERYTHING
        else:
            for statement in self.imports():
                for alias in statement.names:
                    if _imports_under(statement, alias, roots):
                        found.add((alias.asname or alias.name).split(".")[0])
            if "builtins" in roots:
                found.update(name for name in self._names if hasattr(builtins, name))
            # `Opt = torch.optim.SGD` and `Opt: type = torch.optim.SGD` alike (names.resolve
            # follows both)
            assignments: list[tuple[list[ast.expr], ast.expr | None]] = [
                (statement.targets, statement.value) for statement in self.nodes(ast.Assign)
            ]
            assignments += [([s.target], s.value) for s in self.nodes(ast.AnnAssign)]
            aliases: list[tuple[str, str]] = [
                (target.id, base.id)
                for targets, value in assignments
                if value is not None and (base := _value_base(value)) is not None
                for target in targets
                if isinstance(target, ast.Name)
            ]
            changed = True
            while changed:
                changed = False
                for alias_name, origin in aliases:
                    if origin in found and alias_name not in found:
                        found.add(alias_name)
                        changed = True
            result = frozenset(found)
        self._reaching[roots] = result
        return result

    def imported_as(self, qualified: frozenset[str]) -> frozenset[str]:
        """Identifiers that some import binds to exactly one of ``qualified``
        (``import torch.cuda as tc`` binds ``tc`` to ``torch.cuda``)."""
        cached = self._imported_as.get(qualified)
        if cached is None:
            found = set()
            for statement in self.imports():
                module = getattr(statement, "module", None)
                for alias in statement.names:
                    if alias.asname is None and isinstance(statement, ast.Import):
                        continue  # `import a.b` binds `a`, which is `a` itself
                    path = f"{module}.{alias.name}" if module else alias.name
                    if not getattr(statement, "level", 0) and path in qualified:
                        found.add(alias.asname or alias.name)
            cached = self._imported_as[qualified] = frozenset(found)
        return cached

    # -- scopes -------------------------------------------------------------------------------

    def scope_owned_by(self, node: ast.AST) -> Scope | None:
        return self._scopes.get(id(node))

    def scope_of(self, node: ast.AST) -> Scope:
        """The scope ``node`` is evaluated in (a default value is in the scope around its
        function, a comprehension's first iterable in the scope around the comprehension)."""
        memo = self._scope_memo.get(id(node))
        if memo is not None:
            return memo
        scope = self._scope_of(node)
        self._scope_memo[id(node)] = scope
        return scope

    def _scope_of(self, node: ast.AST) -> Scope:
        below: ast.AST | None = None  # the child of `child` on the way up from `node`
        child = node
        parent = self._parents.get(id(child))
        while parent is not None:
            scope = self._scopes.get(id(parent))
            if scope is not None and _inside(parent, child, below, node):
                return scope
            below, child = child, parent
            parent = self._parents.get(id(child))
        return self.module_scope

    # -- names --------------------------------------------------------------------------------

    def qualified_names(self, node: ast.AST) -> frozenset[QualifiedName]:
        """libcst's ``QualifiedNameProvider`` answer for ``node``."""
        memo = self._qualified_memo.get(id(node))
        if memo is None:
            memo = self._qualified_memo[id(node)] = frozenset(self._qualified_names(node))
        return memo

    def _qualified_names(self, node: ast.AST) -> set[QualifiedName]:
        scope = self.scope_of(node)
        access = self._access_name(node)
        if access is not None:
            name, position = access
            position = self._read_position(node, scope, position)
            return {
                qualified
                for binding in scope.bindings_before(name, position)
                for qualified in binding.qualified_names(binding.name)
            }
        dotted = full_name(node)
        if dotted is None:
            return set()
        bindings: list[Binding] = []
        prefix: str | None = dotted
        while prefix:
            if scope.contains(prefix):
                bindings = scope.lookup(prefix, scope)
                break
            cut = prefix.rfind(".")
            prefix = prefix[:cut] if cut != -1 else None
        for binding in bindings:
            if binding.kind is not BindingKind.BUILTIN and binding.node is node:
                return binding.qualified_names(dotted)
        found: set[QualifiedName] = set()
        for binding in bindings:
            found |= binding.qualified_names(dotted)
        return found

    def _access_name(self, node: ast.AST) -> tuple[str, Position] | None:
        """When ``node`` is what libcst records as an access: the name read and where.

        A read of a name is an access of that name, unless it starts an attribute chain whose
        longer dotted form is bound (``import a.b`` then ``a.b.c``): then the access is the
        ``a.b`` attribute, and a query for the name itself takes the order-blind path.
        """
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                return None
            read, access = self._dotted_access(node)
            return (read, start_of(node)) if access is node else None
        if isinstance(node, ast.Attribute):
            base = base_name(node)
            if base is None or isinstance(base.ctx, ast.Store):
                return None
            read, access = self._dotted_access(base)
            if access is node:
                return read, start_of(base)
        return None

    def _read_position(self, node: ast.AST, scope: Scope, position: Position) -> Position:
        """Where a read happens for the order of bindings: a comprehension's element is read
        after all its ``for`` clauses, although it is written before them."""
        if scope.kind is not ScopeKind.COMPREHENSION:
            return position
        child: ast.AST = node
        for parent in self.ancestors(node):
            if parent is scope.node:
                return position if isinstance(child, ast.comprehension) else _AFTER_ALL
            child = parent
        return position

    def _dotted_access(self, name: ast.Name) -> tuple[str, ast.AST]:
        """(name read, access node) of a read of ``name``, by libcst's rules: the longest bound
        dotted form of the attribute chain it starts, else the name itself."""
        chain: list[ast.Attribute] = []
        current: ast.AST = name
        parent = self._parents.get(id(current))
        while isinstance(parent, ast.Attribute) and parent.value is current:
            chain.append(parent)
            current = parent
            parent = self._parents.get(id(current))
        if not chain:
            return name.id, name
        # libcst looks at the outermost attribute around the name (calls start afresh): when
        # that is not the top of the name's own chain, the read stays a read of the name.
        while parent is not None and not isinstance(parent, (ast.Call, ast.stmt)):
            if isinstance(parent, ast.Attribute):
                return name.id, name
            parent = self._parents.get(id(parent))
        scope = self.scope_of(name)
        for attribute in reversed(chain):
            dotted = dotted_name(attribute)
            if dotted is not None and scope.contains(dotted):
                return dotted, attribute
        return name.id, name

    def bindings_of(self, name: ast.Name) -> list[Binding]:
        """``scope[name]``: every binding of the name visible where it is used."""
        return self.scope_of(name).lookup(name.id)

    def parameter_bound(self, name: ast.Name) -> ast.arg | None:
        """The parameter ``name`` reads when that is its only binding where it is used
        (``model`` in a function that never binds its parameter ``model`` again)."""
        bindings = self.bindings_of(name)
        if len(bindings) != 1 or bindings[0].kind is not BindingKind.PARAM:
            return None
        parameter = bindings[0].node
        return parameter if isinstance(parameter, ast.arg) else None

    def references(self, binding: Binding) -> list[ast.AST]:
        """The access nodes that libcst records on ``binding`` (its ``references``)."""
        found: list[ast.AST] = []
        for name in self.names(binding.name.split(".")[0]):
            if isinstance(name.ctx, ast.Store):
                continue
            read, node = self._dotted_access(name)
            if read != binding.name:
                continue
            scope = self.scope_of(name)
            position = self._read_position(name, scope, start_of(name))
            if any(b is binding for b in _recording(scope, read, position)):
                found.append(node)
        return found

    @cached_property
    def star_imports(self) -> tuple[str, ...]:
        """Modules that this module star-imports from (only legal at module level)."""
        return tuple(
            statement.module
            for statement in self.tree.body
            if isinstance(statement, ast.ImportFrom)
            and statement.module
            and not statement.level
            and any(alias.name == "*" for alias in statement.names)
        )


class _Everything:
    """Contains every identifier (a module with a star import may bind any name)."""

    def __contains__(self, item: object) -> bool:
        return True


EVERYTHING = _Everything()


def statement_lines(body: list[ast.stmt]) -> list[list[ast.stmt]]:
    """``body`` grouped the way libcst groups it: a compound statement alone, consecutive simple
    statements on one line (``a = 1; b = 2``) together, as one ``SimpleStatementLine``."""
    grouped: list[list[ast.stmt]] = []
    for statement in body:
        previous = grouped[-1][-1] if grouped else None
        if (
            previous is not None
            and _is_simple(statement)
            and _is_simple(previous)
            and statement.lineno == previous.end_lineno
        ):
            grouped[-1].append(statement)
        else:
            grouped.append([statement])
    return grouped


def _is_simple(statement: ast.stmt) -> bool:
    return not isinstance(statement, COMPOUND_STATEMENTS)


def _imports_under(
    statement: ast.Import | ast.ImportFrom, alias: ast.alias, roots: frozenset[str]
) -> bool:
    if isinstance(statement, ast.Import):
        return alias.name.split(".")[0] in roots
    return not statement.level and (statement.module or "").split(".")[0] in roots


def _value_base(value: ast.AST) -> ast.Name | None:
    """The name a value alias (``Opt = torch.optim.SGD``) is built on."""
    if isinstance(value, (ast.Name, ast.Attribute)):
        return base_name(value)
    return None


def resolution_base(node: ast.AST) -> ast.Name | None:
    """The name whose bindings decide what ``node`` resolves to: the start of its dotted
    name, through calls and subscripts as libcst's ``get_full_name_for_node`` goes."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node if isinstance(node, ast.Name) else None


def _recording(scope: Scope, name: str, position: Position) -> list[Binding]:
    """The bindings that record a read of ``name`` at ``position`` in ``scope``: those the read
    comes after, and for a binding of its own scope that comes later, the enclosing scope's
    bindings of the name (libcst's ``record_accesses``)."""
    found: list[Binding] = []
    for binding in scope.lookup(name, scope):
        if binding.scope is not scope or binding.done <= position:
            found.append(binding)
        elif binding.scope.parent is not None:
            parent = binding.scope.parent
            found.extend(b for b in parent.lookup(name) if b.scope is not scope)
    return found


def _source_order(node: ast.AST) -> tuple[int, int, int, int]:
    return (
        getattr(node, "lineno", 0),
        getattr(node, "col_offset", 0),
        -getattr(node, "end_lineno", 0),
        -getattr(node, "end_col_offset", 0),
    )


def _inside(owner: ast.AST, child: ast.AST, below: ast.AST | None, node: ast.AST) -> bool:
    """Whether ``child`` of scope-owning ``owner`` is evaluated in the scope ``owner`` opens.
    ``below`` is the child of ``child`` on the path from ``node`` up to it."""
    if isinstance(owner, (*_FUNCTIONS, ast.Lambda)):
        if isinstance(child, ast.arguments):
            # the parameter itself opens the scope; its default and annotation do not
            return isinstance(below, ast.arg) and below is node
        if isinstance(owner, ast.Lambda):
            return True
        return child is not owner.returns and not _among(child, owner.decorator_list)
    if isinstance(owner, ast.ClassDef):
        return not (
            _among(child, owner.bases)
            or _among(child, owner.keywords)
            or _among(child, owner.decorator_list)
        )
    if isinstance(owner, _COMPREHENSIONS):
        first = owner.generators[0]
        return child is not first or below is not first.iter
    return True


def _among(node: ast.AST, nodes: Sequence[ast.AST]) -> bool:
    return any(node is candidate for candidate in nodes)


class _Builder:
    """The one walk: parents, nodes by type, names, attributes, scopes and bindings."""

    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self.parents = index._parents
        self.by_type = index._by_type
        self.names = index._names
        self.attributes = index._attributes
        # (node, parent, scope) still to visit
        self.stack: list[tuple[ast.AST, ast.AST | None, Scope]] = []

    def run(self) -> None:
        index = self.index
        stack = self.stack
        stack.append((index.tree, None, index.module_scope))
        parents, by_type = self.parents, self.by_type
        special = _SPECIAL
        while stack:
            node, parent, scope = stack.pop()
            if parent is not None:
                parents[id(node)] = parent
            kind = type(node)
            nodes = by_type.get(kind)
            if nodes is None:
                by_type[kind] = [node]
            else:
                nodes.append(node)
            handler = special.get(kind)
            if handler is not None:
                handler(self, node, scope)
            else:
                self.push_children(node, scope)

    def push_children(self, node: ast.AST, scope: Scope) -> None:
        push = self.stack.append
        children: list[ast.AST] = []
        add = children.append
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST) and not isinstance(item, _SKIPPED):
                        add(item)
            elif isinstance(value, ast.AST) and not isinstance(value, _SKIPPED):
                add(value)
        for child in reversed(children):
            push((child, node, scope))

    def push(self, child: ast.AST | None, parent: ast.AST, scope: Scope) -> None:
        if child is not None:
            self.stack.append((child, parent, scope))

    def new_scope(self, kind: ScopeKind, node: ast.AST, parent: Scope, name: str | None) -> Scope:
        scope = Scope(kind, parent, node, name)
        self.index._scopes[id(node)] = scope
        return scope

    # -- bindings ------------------------------------------------------------------------------

    def bind(
        self,
        scope: Scope,
        name: str,
        kind: BindingKind,
        node: ast.AST | None,
        done: Position,
        **extra: object,
    ) -> None:
        target = scope.target_for(name)
        target.bind(Binding(name, kind, target, node, done, **extra))  # type: ignore[arg-type]

    def bind_targets(
        self, target: ast.AST, scope: Scope, done: Position, statement: ast.AST | None = None
    ) -> None:
        """Bind the names stored by an assignment target (tuples and starred included)."""
        if isinstance(target, ast.Name):
            whole = statement if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
            self.bind(scope, target.id, BindingKind.ASSIGN, target, done, statement=whole)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind_targets(element, scope, done)
        elif isinstance(target, ast.Starred):
            self.bind_targets(target.value, scope, done)

    # -- handlers ------------------------------------------------------------------------------

    def name(self, node: ast.Name, scope: Scope) -> None:
        found = self.names.get(node.id)
        if found is None:
            self.names[node.id] = [node]
        else:
            found.append(node)

    def attribute(self, node: ast.Attribute, scope: Scope) -> None:
        found = self.attributes.get(node.attr)
        if found is None:
            self.attributes[node.attr] = [node]
        else:
            found.append(node)
        self.push(node.value, node, scope)

    def assign(self, node: ast.Assign, scope: Scope) -> None:
        done = end_of(node)
        for target in node.targets:
            self.bind_targets(target, scope, done, node)
        self.push_children(node, scope)

    def ann_assign(self, node: ast.AnnAssign, scope: Scope) -> None:
        self.bind_targets(node.target, scope, end_of(node), node)
        self.push_children(node, scope)

    def aug_assign(self, node: ast.AugAssign, scope: Scope) -> None:
        self.bind_targets(node.target, scope, end_of(node))
        self.push_children(node, scope)

    def named_expr(self, node: ast.NamedExpr, scope: Scope) -> None:
        self.bind_targets(node.target, scope, end_of(node))
        self.push_children(node, scope)

    def for_loop(self, node: ast.For | ast.AsyncFor, scope: Scope) -> None:
        self.bind_targets(node.target, scope, end_of(node.target))
        self.push_children(node, scope)

    def with_block(self, node: ast.With | ast.AsyncWith, scope: Scope) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self.bind_targets(item.optional_vars, scope, end_of(item.optional_vars))
        self.push_children(node, scope)

    def except_handler(self, node: ast.ExceptHandler, scope: Scope) -> None:
        if node.name is not None:
            done = start_of(node.body[0]) if node.body else end_of(node)
            self.bind(scope, node.name, BindingKind.ASSIGN, node, done)
        self.push_children(node, scope)

    def import_statement(self, node: ast.Import | ast.ImportFrom, scope: Scope) -> None:
        done = end_of(node)
        for alias in node.names:
            self.parents[id(alias)] = node
            self.by_type.setdefault(ast.alias, []).append(alias)
            if alias.name == "*":
                continue
            if alias.asname is not None:
                bound = [alias.asname]
            elif isinstance(node, ast.Import):
                parts = alias.name.split(".")
                bound = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            else:
                bound = [alias.name]
            for name in bound:
                self.bind(scope, name, BindingKind.IMPORT, node, done, alias=alias)

    def global_statement(self, node: ast.Global | ast.Nonlocal, scope: Scope) -> None:
        if scope.kind is ScopeKind.MODULE:
            return
        target = scope.module if isinstance(node, ast.Global) else scope.parent
        assert target is not None
        for name in node.names:
            scope.overwrites[name] = target

    def function(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: Scope
    ) -> None:
        if isinstance(node, ast.Lambda):
            inner = self.new_scope(ScopeKind.FUNCTION, node, scope, None)
            self.push(node.body, node, inner)
        else:
            self.bind(scope, node.name, BindingKind.FUNCTION, node, end_of(node))
            inner = self.new_scope(ScopeKind.FUNCTION, node, scope, node.name)
            for statement in reversed(node.body):
                self.push(statement, node, inner)
            self.push(node.returns, node, scope)
            for decorator in reversed(node.decorator_list):
                self.push(decorator, node, scope)
        self.arguments(node.args, node, scope, inner)

    def arguments(self, args: ast.arguments, owner: ast.AST, outer: Scope, inner: Scope) -> None:
        self.parents[id(args)] = owner
        self.by_type.setdefault(ast.arguments, []).append(args)
        for default in [*args.defaults, *args.kw_defaults]:
            self.push(default, args, outer)
        parameters = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        parameters += [a for a in (args.vararg, args.kwarg) if a is not None]
        for parameter in parameters:
            self.parents[id(parameter)] = args
            self.by_type.setdefault(ast.arg, []).append(parameter)
            self.bind(inner, parameter.arg, BindingKind.PARAM, parameter, ALWAYS)
            self.push(parameter.annotation, parameter, outer)

    def class_definition(self, node: ast.ClassDef, scope: Scope) -> None:
        self.bind(scope, node.name, BindingKind.CLASS, node, end_of(node))
        inner = self.new_scope(ScopeKind.CLASS, node, scope, node.name)
        for statement in reversed(node.body):
            self.push(statement, node, inner)
        for child in reversed([*node.bases, *node.keywords, *node.decorator_list]):
            self.push(child, node, scope)

    def comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, scope: Scope
    ) -> None:
        inner = self.new_scope(ScopeKind.COMPREHENSION, node, scope, None)
        if isinstance(node, ast.DictComp):
            elements: list[ast.AST] = [node.key, node.value]
        else:
            elements = [node.elt]
        for index, generator in enumerate(node.generators):
            self.parents[id(generator)] = node
            self.by_type.setdefault(ast.comprehension, []).append(generator)
            # libcst nests each later `for` inside the one before it: its target is bound only
            # for the element, once every clause has been read
            done = end_of(generator.target) if index == 0 else end_of(node)
            self.bind_targets(generator.target, inner, done)
            for condition in reversed(generator.ifs):
                self.push(condition, generator, inner)
            self.push(generator.iter, generator, scope if index == 0 else inner)
            self.push(generator.target, generator, inner)
        for element in reversed(elements):
            self.push(element, node, inner)


_SPECIAL: dict[type, Callable[[_Builder, Any, Scope], None]] = {
    ast.Name: _Builder.name,
    ast.Attribute: _Builder.attribute,
    ast.Assign: _Builder.assign,
    ast.AnnAssign: _Builder.ann_assign,
    ast.AugAssign: _Builder.aug_assign,
    ast.NamedExpr: _Builder.named_expr,
    ast.For: _Builder.for_loop,
    ast.AsyncFor: _Builder.for_loop,
    ast.With: _Builder.with_block,
    ast.AsyncWith: _Builder.with_block,
    ast.ExceptHandler: _Builder.except_handler,
    ast.Import: _Builder.import_statement,
    ast.ImportFrom: _Builder.import_statement,
    ast.Global: _Builder.global_statement,
    ast.Nonlocal: _Builder.global_statement,
    ast.FunctionDef: _Builder.function,
    ast.AsyncFunctionDef: _Builder.function,
    ast.Lambda: _Builder.function,
    ast.ClassDef: _Builder.class_definition,
    ast.ListComp: _Builder.comprehension,
    ast.SetComp: _Builder.comprehension,
    ast.GeneratorExp: _Builder.comprehension,
    ast.DictComp: _Builder.comprehension,
}
