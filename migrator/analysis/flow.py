"""Reaching definitions for the NPU1xx optimizer flow: which assignments reach a read.

A read of ``optimizer`` in ``amp.initialize(model, optimizer)`` sees only the assignments that
run before it on some path: not ``model, optimizer = amp_inits`` two lines below it, and from an
``if``/``else`` both branches. :class:`ReachingDefinitions` answers that for one name (or one
dotted attribute such as ``self.optimizer``) in one scope, by a forward data-flow walk over the
scope's statements in program order that follows ``if``/``else``, ``for``/``while`` (with their
``break``/``continue``/``else``), ``with``, ``try``/``except``/``else``/``finally``, ``match``,
``return``/``raise``, tuple unpacking and ``:=``. Nothing is parsed again: the walk runs over
the module's ``ast`` on demand, only for the names the flow follows, and is cached per scope and
name. The walk looks into an expression only when a node spelled as the name (the index lists
them) is below it; every other expression is passed over whole, so a walk costs about the
scope's statements, not all of its nodes.

Definitions are ``ast`` nodes: the stored ``ast.Name``/``ast.Attribute`` of an assignment,
``for`` target, ``with ... as`` or ``:=``; the ``ast.arg`` of a parameter; the import statement,
``def``/``class`` statement or ``except ... as`` handler that binds the name; or :data:`ENTRY`,
the value the name has when the scope starts (module level: a builtin or a star import; an
attribute: whatever another function left there).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from migrator.analysis.index import ModuleIndex, dotted_name
from migrator.analysis.scopes import ScopeKind

ENTRY: Final = ast.Pass()  # the value from before the scope starts (a sentinel node)

_State = frozenset[ast.AST]  # the definitions that may hold at a point; None: unreachable
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MAX_LOOP_PASSES = 8  # states only grow, and each pass adds a definition or stops


def _join(*states: _State | None) -> _State | None:
    reachable = [state for state in states if state is not None]
    if not reachable:
        return None
    return frozenset().union(*reachable)


@dataclass
class _Loop:
    breaks: list[_State] = field(default_factory=list)
    continues: list[_State] = field(default_factory=list)


class _Walk:
    """One forward walk over a scope's body for one key (a name or a dotted attribute)."""

    def __init__(self, key: str, relevant: frozenset[int] | None = None) -> None:
        self.key = key
        self.attribute = "." in key
        # The ids of the nodes below which an event may be (see ReachingDefinitions._relevant);
        # None: look everywhere.
        self.relevant = relevant
        self.reads: dict[int, set[ast.AST]] = {}
        self.loops: list[_Loop] = []
        self.tries: list[list[_State]] = []  # states seen inside each enclosing `try` body

    # -- statements ------------------------------------------------------------------------------

    def block(self, body: list[ast.stmt], state: _State | None) -> _State | None:
        for statement in body:
            if state is None:
                return None  # after return / raise / break / continue
            state = self.statement(statement, state)
            for seen in self.tries:
                if state is not None:
                    seen.append(state)
        return state

    def statement(self, node: ast.stmt, state: _State) -> _State | None:
        if isinstance(node, ast.If):
            state = self.expression(node.test, state)
            return _join(self.block(node.body, state), self.block(node.orelse, state))
        if isinstance(node, _LOOPS):
            return self.loop(node, state)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                state = self.expression(item.context_expr, state)
                if item.optional_vars is not None:
                    state = self.store(item.optional_vars, state)
            return self.block(node.body, state)
        if isinstance(node, (ast.Try, ast.TryStar)):
            return self.try_statement(node, state)
        if isinstance(node, ast.Match):
            return self.match(node, state)
        if isinstance(node, (ast.Return, ast.Raise)):
            self.children(node, state)
            return None
        if isinstance(node, ast.Break | ast.Continue):
            if self.loops:
                loop = self.loops[-1]
                (loop.breaks if isinstance(node, ast.Break) else loop.continues).append(state)
            return None
        return self.simple(node, state)

    def simple(self, node: ast.stmt, state: _State) -> _State:
        if isinstance(node, ast.Assign):
            state = self.expression(node.value, state)
            for target in node.targets:
                state = self.store(target, state)
            return state
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if node.value is None:
                return state  # `x: int` binds nothing
            state = self.expression(node.value, state)
            if isinstance(node, ast.AugAssign):
                state = self.expression(node.target, state, reading_store=True)
            return self.store(node.target, state)
        if isinstance(node, ast.Delete):
            for target in node.targets:
                state = self.expression(target, state)
                if self._is_key(target):
                    state = frozenset()
            return state
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                state = self.expression(decorator, state)
            if not isinstance(node, ast.ClassDef):
                for default in [*node.args.defaults, *node.args.kw_defaults]:
                    if default is not None:
                        state = self.expression(default, state)
            else:
                for base in [*node.bases, *(k.value for k in node.keywords)]:
                    state = self.expression(base, state)
            return frozenset({node}) if node.name == self.key else state
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == self.key or (alias.asname is None and alias.name == self.key):
                    state = frozenset({node})
            return state
        return self.children(node, state)

    def loop(self, node: ast.For | ast.AsyncFor | ast.While, state: _State) -> _State | None:
        if not isinstance(node, ast.While):
            state = self.expression(node.iter, state)
        head: _State = state
        loop = _Loop()
        for _ in range(_MAX_LOOP_PASSES):
            loop = _Loop()
            self.loops.append(loop)
            entry = head
            if isinstance(node, ast.While):
                entry = self.expression(node.test, entry)
            else:
                entry = self.store(node.target, entry)
            out = self.block(node.body, entry)
            self.loops.pop()
            grown = _join(head, out, *loop.continues)
            assert grown is not None
            if grown == head:
                break
            head = grown
        if isinstance(node, ast.While):
            head = self.expression(node.test, head)
        return _join(self.block(node.orelse, head), *loop.breaks)

    def try_statement(self, node: ast.Try | ast.TryStar, state: _State) -> _State | None:
        seen: list[_State] = [state]
        self.tries.append(seen)
        body_out = self.block(node.body, state)
        self.tries.pop()
        raised = _join(*seen)  # an exception may leave the body after any statement
        assert raised is not None
        outs = [self.block(node.orelse, body_out) if body_out is not None else None]
        for handler in node.handlers:
            entry = raised
            if handler.type is not None:
                entry = self.expression(handler.type, entry)
            if handler.name is not None and handler.name == self.key:
                entry = frozenset({handler})
            outs.append(self.block(handler.body, entry))
        normal = _join(*outs)
        if not node.finalbody:
            return normal
        # `finally` also runs when an exception escapes; control then leaves the statement.
        final_entry = _join(normal, raised)
        assert final_entry is not None
        final_out = self.block(node.finalbody, final_entry)
        return final_out if normal is not None else None

    def match(self, node: ast.Match, state: _State) -> _State | None:
        state = self.expression(node.subject, state)
        outs: list[_State | None] = [state]  # no case matched
        for case in node.cases:
            entry = state
            for pattern in ast.walk(case.pattern):
                name = getattr(pattern, "name", None) or getattr(pattern, "rest", None)
                if name == self.key:
                    entry = frozenset({pattern})
            if case.guard is not None:
                entry = self.expression(case.guard, entry)
            outs.append(self.block(case.body, entry))
        return _join(*outs)

    # -- expressions -----------------------------------------------------------------------------

    def children(self, node: ast.AST, state: _State) -> _State:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                state = self.expression(child, state)
        return state

    def expression(self, node: ast.expr, state: _State, reading_store: bool = False) -> _State:
        """Record the reads of the key in ``node`` (in evaluation order) and apply its ``:=``."""
        if self.relevant is not None and id(node) not in self.relevant:
            return state  # the key is not spelled below
        for event in self._events(node, reading_store):
            if isinstance(event, ast.NamedExpr):
                if self._is_key(event.target):
                    state = frozenset({event.target})
            else:
                self.reads.setdefault(id(event), set()).update(state)
        return state

    def _events(self, node: ast.AST, reading_store: bool) -> Iterator[ast.AST]:
        """Reads of the key, and ``:=`` expressions after their value, in evaluation order."""
        if isinstance(node, _NESTED_SCOPES):
            return  # another scope (its defaults are read by the statement that defines it)
        if isinstance(node, ast.NamedExpr):
            yield from self._events(node.value, reading_store)
            yield node
            return
        if self._is_key(node) and (reading_store or isinstance(node.ctx, ast.Load)):  # type: ignore[attr-defined]
            yield node
            return
        relevant = self.relevant
        for child in ast.iter_child_nodes(node):
            if relevant is None or id(child) in relevant:
                yield from self._events(child, reading_store)

    def store(self, target: ast.expr, state: _State) -> _State:
        """An assignment to ``target`` (unpacking included): the key's definition replaces the
        others; the reads in the target (``a[i] = ...``, ``x.y = ...``) happen first."""
        if self._is_key(target):
            return frozenset({target})
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                state = self.store(element, state)
            return state
        if isinstance(target, ast.Starred):
            return self.store(target.value, state)
        return self.expression(target, state)

    def _is_key(self, node: ast.AST) -> bool:
        if self.attribute:
            return isinstance(node, ast.Attribute) and dotted_name(node) == self.key
        return isinstance(node, ast.Name) and node.id == self.key


class ReachingDefinitions:
    """Which definitions reach a read, per scope and key, computed on demand and cached."""

    def __init__(self, index: ModuleIndex, *, prune: bool = True) -> None:
        self.index = index
        # False: every walk looks into every expression (the soundness tests' slow path).
        self.prune = prune
        self._walks: dict[tuple[int, str], _Walk] = {}
        self._relevant_to: dict[str, frozenset[int]] = {}

    def of_name(self, read: ast.Name) -> list[ast.AST] | None:
        """The definitions of ``read``'s name that reach it, in source order (``ENTRY`` last).

        ``None`` when program order cannot be used here: the name is bound in another scope
        (a closure reads it whenever it is called), declared ``global``/``nonlocal``, bound by a
        comprehension, or the read is in code no path reaches.
        """
        scope = self.index.scope_of(read)
        if scope.kind is ScopeKind.COMPREHENSION:
            if read.id in scope.bindings:
                return None
            while scope.kind is ScopeKind.COMPREHENSION and scope.parent is not None:
                scope = scope.parent
        if read.id not in scope.bindings or read.id in scope.overwrites or scope.node is None:
            return None
        if scope.kind is ScopeKind.FUNCTION and isinstance(scope.node, ast.Lambda):
            return None
        return self._reaching(scope.node, read.id, read)

    def of_attribute(self, read: ast.Attribute, function: ast.AST) -> list[ast.AST] | None:
        """The assignments to ``read``'s dotted attribute (``self.optimizer``) inside
        ``function`` (a def, or the module) that reach it; ``ENTRY`` when the value may come
        from before ``function`` started. ``None`` for an unreachable read."""
        key = dotted_name(read)
        if key is None:
            return None
        return self._reaching(function, key, read)

    def _reaching(self, owner: ast.AST, key: str, read: ast.AST) -> list[ast.AST] | None:
        walk = self._walks.get((id(owner), key))
        if walk is None:
            # An owner from another tree (not one this index holds): walk all of it.
            known = owner is self.index.tree or self.index.parent(owner) is not None
            relevant = self._relevant(key) if known and self.prune else None
            walk = self._walks[(id(owner), key)] = _walk_scope(owner, key, relevant)
        found = walk.reads.get(id(read))
        if found is None:
            return None
        return sorted(found, key=_definition_order)

    def _relevant(self, key: str) -> frozenset[int]:
        """The ids of the nodes spelled as ``key`` (a name, or a dotted attribute; stored or
        read) and of all their ancestors. Below any other node a walk for ``key`` has no event:
        no read of the key, and no ``:=`` that binds it (its target is spelled as the key); a
        ``:=`` that binds another name changes nothing for this key."""
        known = self._relevant_to.get(key)
        if known is not None:
            return known
        index = self.index
        spelled: list[ast.AST]
        if "." in key:
            last = key.rpartition(".")[2]
            spelled = [a for a in index.attributes(last) if dotted_name(a) == key]
        else:
            spelled = [*index.names(key)]
        marked: set[int] = set()
        for node in spelled:
            current: ast.AST | None = node
            while current is not None and id(current) not in marked:
                marked.add(id(current))
                current = index.parent(current)
        known = self._relevant_to[key] = frozenset(marked)
        return known


def _walk_scope(owner: ast.AST, key: str, relevant: frozenset[int] | None = None) -> _Walk:
    walk = _Walk(key, relevant)
    entry: _State = frozenset({ENTRY})
    if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)) and "." not in key:
        arguments = owner.args
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        parameters += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        # A local that is not a parameter is unbound on entry: reading it first raises.
        entry = frozenset(p for p in parameters if p.arg == key)
    body = getattr(owner, "body", [])
    walk.block(body if isinstance(body, list) else [], entry)
    return walk


def _definition_order(node: ast.AST) -> tuple[int, int]:
    if node is ENTRY:
        return (1 << 30, 0)
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
