"""Where the optimizers of a file come from and go: the NPU1xx rules' view of a module. Not a rule.

:class:`OptimizerFlow` finds where the optimizers passed to ``apex.amp.initialize`` are built,
following names, ``self.<attr>`` assignments, containers and same-module function returns, on
the module's ``ast``. :func:`npu_fused_name` and :func:`fused_name` tell an NPU fused optimizer
as written or as NPU101 will write it.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Container, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

from migrator.analysis.calls import argument
from migrator.analysis.flow import ENTRY, ReachingDefinitions
from migrator.analysis.index import ModuleIndex, full_name
from migrator.analysis.names import Ambiguous
from migrator.analysis.view import FileView
from migrator.rules.optimizers._plans import FusedPlan
from migrator.rules.optimizers._tables import (
    AMP_INITIALIZE,
    AMP_OPTIMIZERS_POSITION,
    FUSED_PREFIX,
    NPU1_ROOTS,
    NPU_FUSED,
    OPTIMIZER_LAST_NAMES,
)


def may_end_with(view: FileView, func: ast.AST, last_names: Collection[str] | str) -> bool:
    """A cheap, conservative test: could ``func`` resolve to a name whose last part is in
    ``last_names`` (or starts with it, for a string)? Off with the candidate filters."""
    if not view.fast or isinstance(func, ast.Name):
        return True
    if isinstance(func, ast.Attribute):
        last = func.attr
    else:
        dotted = full_name(func)  # through calls and subscripts, as names are resolved
        if dotted is None:
            return False  # no dotted name: it resolves to nothing
        _, dot, last = dotted.rpartition(".")
        if not dot:
            return True
    if isinstance(last_names, str):
        return last.startswith(last_names)
    return last in last_names


def npu_fused_name(view: FileView, func: ast.AST) -> str | None:
    """``apex.optimizers.NpuFusedSGD`` etc. when ``func`` resolves to an NPU fused optimizer."""
    if not may_end_with(view, func, FUSED_PREFIX) or not view.may_name(func, NPU1_ROOTS):
        return None
    name = view.qualified_name(func)
    if isinstance(name, str) and NPU_FUSED.fullmatch(name):
        return name
    return None


def fused_name(view: FileView, planned: Mapping[int, FusedPlan], call: ast.Call) -> str | None:
    """The NPU fused optimizer ``call`` constructs, as written or as NPU101 will rewrite it
    (``planned``: NPU101's plans of the file)."""
    plan = planned.get(id(call))
    if plan is not None:
        return plan.qualified_target
    return npu_fused_name(view, call.func)


@dataclass(frozen=True)
class AmpSink:
    """An ``apex.amp.initialize`` call and the optimizers expression passed to it."""

    call: ast.Call
    optimizers: ast.expr | None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class OptimizerFlow:
    """Module-wide facts about optimizers, computed once per file from the original tree.

    ``origins(expr)`` are the expressions that may produce the value of ``expr``: it follows
    names through their assignments in the scope where they are read, ``self.<attr>`` through
    every assignment to that attribute in the module, list / tuple / dict / conditional
    expressions through their parts, subscripts to what they index, and calls of functions
    defined in this module through their ``return`` values. What cannot be followed (a
    parameter, a call into another module) is itself an origin.

    The rules of one file share one flow (:meth:`of`); what it computes depends only on the
    module, never on the rule that asks.
    """

    def __init__(self, view: FileView) -> None:
        self.view = view
        self.index: ModuleIndex = view.index
        self.reaching = ReachingDefinitions(view.index)
        self.amp_sinks: list[AmpSink] = []
        self.ambiguous_amp: list[tuple[ast.Call, Ambiguous]] = []
        # Calls whose callee may be an optimizer, `FP16_Optimizer`, `amp.initialize` or an NPU
        # fused optimizer: what the NPU1xx rules examine (every call, with the filters off).
        self.candidates = [call for call in self.index.nodes(ast.Call) if self._candidate(call)]
        for call in self.candidates:
            name = view.qualified_name_in(call.func, {AMP_INITIALIZE})
            if isinstance(name, Ambiguous):
                self.ambiguous_amp.append((call, name))
            elif name == AMP_INITIALIZE:
                arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
                self.amp_sinks.append(AmpSink(call, arg.value if arg is not None else None))
        self._sink_calls = {id(sink.call) for sink in self.amp_sinks}

    def _candidate(self, call: ast.Call) -> bool:
        view, func = self.view, call.func
        if isinstance(func, ast.Name):
            # FileView.may_name for a plain name, without building its arguments once per call.
            return not view.fast or func.id in self._reaching
        wanted = may_end_with(view, func, OPTIMIZER_LAST_NAMES)
        wanted = wanted or may_end_with(view, func, FUSED_PREFIX)
        return wanted and view.may_name(func, NPU1_ROOTS)

    @property
    def reaching_names(self) -> frozenset[str] | Container[str]:
        """Identifiers of the file that may be bound to a name under torch, apex or torch_npu
        (every identifier with the candidate filters off)."""
        return self._reaching

    @cached_property
    def _reaching(self) -> frozenset[str] | Container[str]:
        return self.index.names_reaching(NPU1_ROOTS)

    @classmethod
    def of(cls, view: FileView) -> OptimizerFlow:
        """The flow of the file, built by the first NPU1xx rule that asks."""
        return view.memo("optimizer-flow", lambda: cls(view))

    # -- what reaches amp.initialize -----------------------------------------------------------

    @cached_property
    def reaches_amp(self) -> dict[int, ast.Call]:
        """id(constructor call) -> the first ``amp.initialize`` call its optimizer reaches."""
        return {key: calls[0] for key, calls in self.amp_calls_reached.items()}

    @cached_property
    def amp_calls_reached(self) -> dict[int, list[ast.Call]]:
        """id(constructor call) -> every ``amp.initialize`` call its optimizer reaches, in
        source order (never one that runs only where the constructor does not)."""
        reached: dict[int, list[ast.Call]] = {}
        for sink in self.amp_sinks:
            if sink.optimizers is None:
                continue
            for origin in self.origins(sink.optimizers):
                if isinstance(origin, ast.Call) and not self.exclusive(sink.call, origin):
                    calls = reached.setdefault(id(origin), [])
                    if sink.call not in calls:
                        calls.append(sink.call)
        return reached

    def is_amp_initialize(self, call: ast.Call) -> bool:
        return id(call) in self._sink_calls

    # -- conditions ------------------------------------------------------------------------------

    def condition_only_for(self, node: ast.AST, other: ast.AST) -> str | None:
        """The `if` condition under which ``node`` runs that does not also guard ``other``.

        ``"`args.fp16` holds"`` or ``"`args.fp32` is false"`` (an ``else`` branch), else None.
        """
        guard = self.guard_only_for(node, other)
        if guard is None:
            return None
        test, in_body = guard
        return f"`{test}` holds" if in_body else f"`{test}` is false"

    def guard_only_for(self, node: ast.AST, other: ast.AST) -> tuple[str, bool] | None:
        """The innermost `if` test (as written) under which ``node`` runs and ``other`` need
        not, and whether ``node`` is in its body (True) or its ``else`` part (False)."""
        # Two `if args.fp16:` blocks guard alike: compare the conditions, not the statements.
        guards_of_other = {(self._test(guard), in_body) for guard, in_body in self._guards(other)}
        for guard, in_body in self._guards(node):
            test = self._test(guard)
            if (test, in_body) not in guards_of_other:
                return test, in_body
        return None

    def exclusive(self, node: ast.AST, other: ast.AST) -> bool:
        """``node`` runs only where ``other`` does not: opposite branches of the same condition
        (`if args.fp16:` ... `else:` ...), compared by the condition's text."""
        branches = {(self._test(guard), in_body) for guard, in_body in self._guards(other)}
        return any(
            (self._test(guard), not in_body) in branches for guard, in_body in self._guards(node)
        )

    def _test(self, guard: ast.If) -> str:
        return self.view.written(guard.test)

    def _guards(self, node: ast.AST) -> Iterator[tuple[ast.If, bool]]:
        """Enclosing `if` statements of the same function (innermost first) and whether
        ``node`` is in the body (rather than in the ``else``/``elif`` part)."""
        child = node
        for parent in self.index.ancestors(node):
            if isinstance(parent, _FUNCTIONS):
                return
            if isinstance(parent, ast.If) and child is not parent.test:
                yield parent, any(statement is child for statement in parent.body)
            child = parent

    # -- origins ---------------------------------------------------------------------------------

    def origins(self, expr: ast.expr) -> list[ast.expr]:
        found: list[ast.expr] = []
        self._follow(expr, found, set())
        return found

    def _follow(self, expr: ast.expr, found: list[ast.expr], seen: set[int]) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        for part in self._sources_of(expr):
            if part is expr:
                found.append(expr)
            else:
                self._follow(part, found, seen)

    def _sources_of(self, expr: ast.expr) -> Iterator[ast.expr]:
        """The expressions one step upstream of ``expr``; ``expr`` itself when it is an origin."""
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            for element in expr.elts:
                yield element.value if isinstance(element, ast.Starred) else element
        elif isinstance(expr, ast.Dict):
            entries = zip(expr.keys, expr.values, strict=True)
            yield from (value for key, value in entries if key is not None)
        elif isinstance(expr, ast.IfExp):
            yield expr.body
            yield expr.orelse
        elif isinstance(expr, (ast.Subscript, ast.NamedExpr)):
            yield expr.value
        elif isinstance(expr, ast.Name):
            yield from self._name_sources(expr)
        elif isinstance(expr, ast.Attribute):
            yield from self._attribute_sources(expr)
        elif isinstance(expr, ast.Call):
            yield from self._call_sources(expr)
        else:
            yield expr

    def _name_sources(self, name: ast.Name) -> Iterator[ast.expr]:
        """The values assigned to ``name`` that reach this read, in program order
        (:mod:`migrator.analysis.flow`); every binding of the name in its scope where order
        cannot be used (a closure, ``global``)."""
        definitions = self.reaching.of_name(name)
        if definitions is None:
            definitions = [binding.node or ENTRY for binding in self.index.bindings_of(name)]
        yield from self._definition_sources(name, definitions)

    def _definition_sources(self, read: ast.expr, definitions: list[ast.AST]) -> Iterator[ast.expr]:
        values: list[ast.expr] = []
        opaque = False
        for definition in definitions:
            assigned = (
                self._assigned_values(definition)
                if isinstance(definition, (ast.Name, ast.Attribute))
                else None
            )
            if assigned is None:
                opaque = True  # a parameter, an import, a def, a `for` target, a builtin...
            else:
                values.extend(assigned)
        if opaque or not definitions:
            yield read
        yield from values

    def _assigned_values(self, target: ast.Name | ast.Attribute) -> list[ast.expr] | None:
        """What an assignment to ``target`` stores there; ``None`` when it cannot be told.

        Unpacking is followed element by element: ``a, b = x, y`` gives ``b`` the value ``y``,
        and ``model, optimizer = amp.initialize(model, optimizer)`` (directly, or through
        ``amp_inits = amp.initialize(...)``) gives ``optimizer`` the optimizers passed in.
        """
        parent = self.index.parent(target)
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            return [parent.value] if parent.value is not None else None
        path: list[int] = []
        node: ast.AST = target
        while isinstance(parent, (ast.Tuple, ast.List)):
            path.append(next(i for i, e in enumerate(parent.elts) if e is node))
            node, parent = parent, self.index.parent(parent)
        if not isinstance(parent, ast.Assign) or not path:
            return None  # a `for` / `with` target, an augmented assignment...
        if any(isinstance(e, ast.Starred) for e in ast.walk(node)):
            return None
        path.reverse()
        return self._unpacked(parent.value, path)

    def _unpacked(self, value: ast.expr, path: list[int]) -> list[ast.expr] | None:
        """The element at ``path`` of what ``value`` gives when unpacked, or None."""
        position, rest = path[0], path[1:]
        if isinstance(value, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            if position >= len(value.elts):
                return None
            element = value.elts[position]
            return self._unpacked(element, rest) if rest else [element]
        if isinstance(value, ast.Call) and self.is_amp_initialize(value):
            # `(models, optimizers)` out, in the shape they went in: the optimizers part may
            # be reached; the models part never holds an optimizer.
            if position != 1:
                return []
            arg = argument(value, "optimizers", AMP_OPTIMIZERS_POSITION)
            return [arg.value] if arg is not None else []
        if isinstance(value, ast.Name):
            definitions = self.reaching.of_name(value)
            if definitions is None or not definitions:
                return None
            found: list[ast.expr] = []
            for definition in definitions:
                if not isinstance(definition, ast.Name):
                    return None
                assigned = self._assigned_values(definition)
                if assigned is None:
                    return None
                for item in assigned:
                    unpacked = self._unpacked(item, path)
                    if unpacked is None:
                        return None
                    found.extend(unpacked)
            return found
        return None

    def _call_sources(self, call: ast.Call) -> Iterator[ast.expr]:
        if self.is_amp_initialize(call):
            # `amp_inits = amp.initialize(...)`: the optimizers come back out.
            arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
            if arg is not None:
                yield arg.value
            return
        callee = call.func
        local_function = None
        if isinstance(callee, ast.Name):
            local_function = callee.id
        elif isinstance(callee, ast.Attribute):
            local_function = callee.attr  # `self.build_optimizer(...)`
        returns = self._returns
        # Only calls that resolve to no import can be this module's functions.
        if local_function in returns and self.view.qualified_name(callee) is None:
            yield from returns[local_function]
        else:
            yield call

    @cached_property
    def _returns(self) -> dict[str, list[ast.expr]]:
        """Function name -> the values its ``return`` statements give (any function so named)."""
        returns: dict[str, list[ast.expr]] = {}
        for statement in self.index.nodes(ast.Return):
            if statement.value is None:
                continue
            function = next(
                (a for a in self.index.ancestors(statement) if isinstance(a, _FUNCTIONS)), None
            )
            if function is not None:
                returns.setdefault(function.name, []).append(statement.value)
        return returns

    def _attribute_sources(self, read: ast.Attribute) -> Iterator[ast.expr]:
        """``self.optimizer``: the assignments of its own function that reach the read, in
        program order; when the value may come from before the function started, also every
        assignment to an attribute spelled so in the rest of the module (another method)."""
        dotted = full_name(read)
        function = self._function_of(read)
        local = self.reaching.of_attribute(read, function) if dotted else None
        if local is None:
            local = [ENTRY]
        definitions = [d for d in local if d is not ENTRY]
        if ENTRY in local:
            definitions += [
                target
                for target in self._attribute_targets.get(dotted or "", [])
                if self._function_of(target) is not function
            ]
        if not definitions:
            yield read
            return
        yield from self._definition_sources(read, definitions)

    def _function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function around ``node``, or the module."""
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _FUNCTIONS):
                return ancestor
        return self.index.tree

    @cached_property
    def _attribute_targets(self) -> dict[str, list[ast.Attribute]]:
        """``self.optimizer`` -> every attribute spelled so that is assigned to (unpacking
        included), in source order."""
        targets: dict[str, list[ast.Attribute]] = {}
        for attribute in self._stored_attributes():
            dotted = full_name(attribute)
            if dotted is not None:
                targets.setdefault(dotted, []).append(attribute)
        return targets

    def _stored_attributes(self) -> Iterator[ast.Attribute]:
        assignments: list[ast.Assign | ast.AnnAssign] = [*self.index.nodes(ast.Assign)]
        assignments += self.index.nodes(ast.AnnAssign)
        assignments.sort(key=lambda node: (node.lineno, node.col_offset))
        for statement in assignments:
            if statement.value is None:
                continue
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            stack = list(reversed(targets))
            while stack:
                target = stack.pop()
                if isinstance(target, ast.Attribute):
                    yield target
                elif isinstance(target, (ast.Tuple, ast.List)):
                    stack.extend(reversed(target.elts))
