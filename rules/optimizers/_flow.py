"""Where the optimizers of a file come from and go: the NPU1xx rules' view of a module. Not a rule.

:class:`OptimizerFlow` finds where the optimizers passed to ``apex.amp.initialize`` are built,
following names, ``self.<attr>`` assignments, containers and same-module function returns, on
the module's ``ast``. :func:`npu_fused_name` and :func:`fused_name` tell an NPU fused optimizer
as written or as NPU101 will write it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from migrator.analysis.calls import NOT_LITERAL, argument, literal_value
from migrator.analysis.clipping import class_of
from migrator.analysis.index import ModuleIndex, full_name
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import OPTIMIZER_VALUES, Origins, unpacked_element
from migrator.analysis.view import FileView
from migrator.rules.optimizers._plans import FusedPlan
from migrator.rules.optimizers._tables import (
    AMP_INITIALIZE,
    AMP_OPTIMIZERS_POSITION,
    FUSED_PREFIX,
    NPU1_ROOTS,
    NPU_FUSED,
    OPTIMIZER_LAST_NAMES,
    OPTIMIZER_MODULES,
)

# An unpacked element of another module's function's result is an origin of its own (see
# OptimizerFlow.element_of), not a value that cannot be followed.
_FLOW_VALUES = replace(OPTIMIZER_VALUES, call_elements=True)


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
    """``apex.optimizers.NpuFusedSGD`` etc. when ``func`` resolves to an NPU fused optimizer
    (named so also when imported from the module that defines it, ``npu_fused_sgd``)."""
    if not may_end_with(view, func, FUSED_PREFIX) or not view.may_name(func, NPU1_ROOTS):
        return None
    name = view.qualified_name(func)
    match = NPU_FUSED.fullmatch(name) if isinstance(name, str) else None
    return f"{match[1]}.{match[2]}" if match else None


def optimizer_lookup(view: FileView, func: ast.expr) -> bool:
    """``func`` looks a class up by name in ``torch.optim`` or ``apex.optimizers``:
    ``getattr(torch.optim, name)``, ``torch.optim.__dict__[name]``, ``vars(torch.optim)[name]``.
    What it gives, called, is an optimizer of one of their classes."""
    if isinstance(func, ast.Subscript):
        namespace = func.value
        if isinstance(namespace, ast.Attribute) and namespace.attr == "__dict__":
            return view.qualified_name(namespace.value) in OPTIMIZER_MODULES
        if isinstance(namespace, ast.Call) and len(namespace.args) == 1:
            return view.qualified_name(namespace.func) == "builtins.vars" and (
                view.qualified_name(namespace.args[0]) in OPTIMIZER_MODULES
            )
        return False
    if isinstance(func, ast.Call) and func.args:
        return view.qualified_name(func.func) == "builtins.getattr" and (
            view.qualified_name(func.args[0]) in OPTIMIZER_MODULES
        )
    return False


def fused_class(view: FileView, node: ast.expr) -> bool:
    """An NPU fused class, or one of two picked by a condition (`(apex.optimizers.X if c else
    torch_npu.optim.X)`, as NPU101 writes under amp on some paths)."""
    if isinstance(node, ast.IfExp):
        return fused_class(view, node.body) and fused_class(view, node.orelse)
    return npu_fused_name(view, node) is not None


def fused_mapping(view: FileView, mapping: ast.Dict) -> bool:
    """A dict display whose values are all NPU fused classes (the mappings NPU101 writes)."""
    return bool(mapping.values) and all(fused_class(view, value) for value in mapping.values)


def mapped_get(view: FileView, call: ast.expr) -> bool:
    """``{<class or name>: <NPU fused class>, ...}.get(...)``: a mapping NPU101 wrote."""
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "get"
        and isinstance(call.func.value, ast.Dict)
        and fused_mapping(view, call.func.value)
    )


def fused_name(view: FileView, planned: Mapping[int, FusedPlan], call: ast.Call) -> str | None:
    """The NPU fused optimizer ``call`` constructs, as written or as NPU101 will rewrite it
    (``planned``: NPU101's plans of the file)."""
    plan = planned.get(id(call))
    if plan is not None:
        return plan.qualified_target
    return npu_fused_name(view, class_of(view, call))


@dataclass(frozen=True)
class AmpSink:
    """An ``apex.amp.initialize`` call and the optimizers expression passed to it."""

    call: ast.Call
    optimizers: ast.expr | None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# How many parameters the amp reach follows back to their calls, per `amp.initialize`.
_PARAMETERS_FOLLOWED = 16


class OptimizerFlow:
    """Module-wide facts about optimizers, computed once per file from the original tree.

    ``origins(expr)`` are the expressions that may produce the value of ``expr``: the file's
    value-origin analysis (:mod:`migrator.analysis.origins`) under the optimizer policy, which
    follows names through the assignments that reach them, ``self.<attr>`` through every
    assignment to that attribute in the module, list / tuple / dict / conditional expressions
    through their parts, subscripts to what they index, calls of functions defined in this
    module through their ``return`` values, and ``amp.initialize`` to the optimizers it hands
    back. What cannot be followed (a parameter, a call into another module) is itself an
    origin.

    The rules of one file share one flow (:meth:`of`); what it computes depends only on the
    module, never on the rule that asks.
    """

    def __init__(self, view: FileView) -> None:
        self.view = view
        self.index: ModuleIndex = view.index
        self._origins = Origins(view, _FLOW_VALUES, pass_through=self._amp_passes)
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
        view, func = self.view, class_of(self.view, call)
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

    @property
    def amp_calls_reached(self) -> dict[int, list[ast.Call]]:
        """id(constructor call) -> every ``amp.initialize`` call its optimizer reaches, in
        source order (never one that runs only where the constructor does not); also for the
        targets of ``optimizer, scheduler = build(cfg)`` (:meth:`element_of`)."""
        return self._amp_reach[0]

    @property
    def calls_reaching_amp(self) -> list[ast.Call]:
        """The calls whose optimizer reaches an ``amp.initialize``: candidates, and the
        constructors of other packages' optimizers (Hugging Face's ``AdamW``), which are not."""
        return self._amp_reach[1]

    @cached_property
    def _amp_reach(self) -> tuple[dict[int, list[ast.Call]], list[ast.Call]]:
        reached: dict[int, list[ast.Call]] = {}
        constructors: list[ast.Call] = []
        for sink in self.amp_sinks:
            if sink.optimizers is None:
                continue
            for origin in self.through_parameters(self.origins(sink.optimizers)):
                built = isinstance(origin, ast.Call) or self.element_of(origin) is not None
                if not built or self.exclusive(sink.call, origin):
                    continue
                if id(origin) not in reached and isinstance(origin, ast.Call):
                    constructors.append(origin)
                calls = reached.setdefault(id(origin), [])
                if sink.call not in calls:
                    calls.append(sink.call)
        return reached, constructors

    def through_parameters(self, origins: Sequence[ast.expr]) -> list[ast.expr]:
        """``origins``, and for each parameter among them (``make_data_parallel(model,
        optimizer, opt)`` calling ``amp.initialize(model, optimizer)``) the origins of what the
        calls of its function in this module pass there, a few calls deep: an optimizer built
        elsewhere in the module and handed to that function (or to the constructor of a class
        of the module, ``AmpTrainer(model, optimizer)``) reaches its ``amp.initialize``."""
        found = list(origins)
        pending = [p for origin in origins for p in self.parameters_of(origin)]
        seen: set[int] = set()
        while pending and len(seen) < _PARAMETERS_FOLLOWED:
            parameter = pending.pop()
            if id(parameter) in seen:
                continue
            seen.add(id(parameter))
            for value in self.passed_to(parameter):
                for origin in self.origins(value):
                    if all(origin is not known for known in found):
                        found.append(origin)
                        pending += self.parameters_of(origin)
        return found

    def parameters_of(self, origin: ast.expr | ast.arg) -> list[ast.arg]:
        """The function parameters an origin stands for: itself, or the parameters whose
        values reach a name read that the flow could not follow further."""
        if isinstance(origin, ast.arg):
            return [origin]
        if not isinstance(origin, ast.Name):
            return []
        definitions = self._origins.reaching.of_name(origin) or []
        return [d for d in definitions if isinstance(d, ast.arg)]

    def passed_to(self, parameter: ast.arg) -> list[ast.expr]:
        """What the calls of the function that has ``parameter`` pass to it, in this module
        (``f(...)`` for a function, ``self.f(...)`` for a method, ``C(...)`` for ``C.__init__``;
        by position or keyword)."""
        arguments = self.index.parent(parameter)
        function = self.index.parent(arguments) if arguments is not None else None
        if not isinstance(function, _FUNCTIONS) or not isinstance(arguments, ast.arguments):
            return []
        positional = [*arguments.posonlyargs, *arguments.args]
        index = next((i for i, a in enumerate(positional) if a is parameter), None)
        method = isinstance(self.index.parent(function), ast.ClassDef)
        if method and index is not None:
            index -= 1  # `self.f(x)` passes x to the second parameter
        passed: list[ast.expr] = []
        callers: list[ast.Name | ast.Attribute] = [
            *self.index.names(function.name),
            *self.index.attributes(function.name),
        ]
        owner = self.index.parent(function)
        constructor = method and function.name == "__init__" and isinstance(owner, ast.ClassDef)
        if constructor:
            # `Runner(model, optimizer)` passes them to `Runner.__init__` (a class of the
            # module, called by its name in the module).
            assert isinstance(owner, ast.ClassDef)
            callers = [*self.index.names(owner.name)]
        for node in callers:
            call = self.index.parent(node)
            if not isinstance(call, ast.Call) or call.func is not node:
                continue
            if not constructor and method != isinstance(node, ast.Attribute):
                continue
            if index is not None and 0 <= index < len(call.args):
                value = call.args[index]
                if not isinstance(value, ast.Starred):
                    passed.append(value)
            passed += [k.value for k in call.keywords if k.arg == parameter.arg]
        return passed

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
        guards_of_other = {(self._test(guard), in_body) for guard, in_body in self.guards(other)}
        for guard, in_body in self.guards(node):
            test = self._test(guard)
            if (test, in_body) not in guards_of_other:
                return test, in_body
        return None

    def guards_only_for(self, node: ast.AST, other: ast.AST) -> list[tuple[str, bool]]:
        """Every enclosing `if` test (as written, innermost first) under which ``node`` runs
        and ``other`` need not, with whether ``node`` is in its body; see :meth:`guard_only_for`."""
        guards_of_other = {(self._test(guard), in_body) for guard, in_body in self.guards(other)}
        return [
            (self._test(guard), in_body)
            for guard, in_body in self.guards(node)
            if (self._test(guard), in_body) not in guards_of_other
        ]

    def both_arms(self, calls: list[ast.Call]) -> ast.If | None:
        """The `if` statement whose two arms hold ``calls``, one each, under no test of their
        own inside it (`if args.combine_grad: amp.initialize(..., combine_grad=True)` /
        `else: amp.initialize(...)`): one of them runs exactly when the statement does, so it
        stands for both. None for any other placement (an `elif` arm has a test of its own)."""
        if len(calls) != 2:
            return None
        innermost = [next(self.guards(call), None) for call in calls]
        if any(found is None for found in innermost):
            return None
        (first, first_in_body), (second, second_in_body) = innermost  # type: ignore[misc]
        if first is not second or first_in_body == second_in_body:
            return None
        return first

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or lambda) around ``node``, or the module."""
        for parent in self.index.ancestors(node):
            if isinstance(parent, _FUNCTIONS):
                return parent
        return self.index.tree

    def exclusive(self, node: ast.AST, other: ast.AST) -> bool:
        """``node`` runs only where ``other`` does not: opposite branches of the same condition
        (`if args.fp16:` ... `else:` ...), compared by the condition's text."""
        branches = {(self._test(guard), in_body) for guard, in_body in self.guards(other)}
        return any(
            (self._test(guard), not in_body) in branches for guard, in_body in self.guards(node)
        )

    def apart(self, node: ast.AST, other: ast.AST) -> bool:
        """``node`` and ``other`` sit in the two arms of one `if` statement (or of an `elif`
        chain) that no loop of its function repeats: one run of the function passes one of
        them at most. Unlike :meth:`exclusive`, the same statement, not the same text."""
        arms = {id(guard): in_body for guard, in_body in self.guards(other)}
        for guard, in_body in self.guards(node):
            if arms.get(id(guard), in_body) != in_body:
                return not any(
                    isinstance(parent, ast.For | ast.AsyncFor | ast.While)
                    for parent in self._up_to_function(guard)
                )
        return False

    def tested(self, node: ast.AST, code: str) -> Tested | None:
        """The literal values the expression written ``code`` can have at ``node``, read from
        the innermost enclosing `if` of its function that compares it with literals
        (``if args.opt_level == "O0":``, ``elif name in ("SGD", "Adam"):``, the ``else`` of
        ``!=`` and ``not in``; either side of ``==``; through ``and`` in the body and ``or``
        in the ``else``). None when no test pins it, or when that arm assigns the expression
        again (the test no longer speaks for it at ``node``)."""
        for guard, in_body in self.guards(node):
            # `a and b` holds when both do; `a or b` is false when both are.
            for test in _operands(guard.test, ast.And if in_body else ast.Or):
                values = _compared(self.view, test, code, in_body)
                arm = guard.body if in_body else guard.orelse
                if values is None or _stored_in(self.view, arm, code):
                    continue
                written = f"`if {self._test(guard)}`"
                when = f"under {written}" if in_body else f"in the `else` of {written}"
                return Tested(values, when, guard.lineno)
        return None

    def truthy_at(self, node: ast.AST, code: str) -> bool:
        """The expression written ``code`` is true at ``node``: an enclosing `if` of its
        function tests it as it is (``if args.fp16:``, ``if args.fp16 and rank == 0:``) with
        ``node`` in its body, and that body does not assign it again."""
        for guard, in_body in self.guards(node):
            if not in_body or _stored_in(self.view, guard.body, code):
                continue
            if any(self.view.written(test) == code for test in _operands(guard.test, ast.And)):
                return True
        return False

    def _up_to_function(self, node: ast.AST) -> Iterator[ast.AST]:
        for parent in self.index.ancestors(node):
            if isinstance(parent, _FUNCTIONS):
                return
            yield parent

    def _test(self, guard: ast.If) -> str:
        return self.view.written(guard.test)

    def guards(self, node: ast.AST) -> Iterator[tuple[ast.If, bool]]:
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
        """The expressions that may produce the value of ``expr``
        (:data:`~migrator.analysis.origins.OPTIMIZER_VALUES`, with ``amp.initialize`` handing
        its optimizers back)."""
        return [origin for origin in self._origins.of(expr) if isinstance(origin, ast.expr)]

    def element_of(self, origin: ast.expr) -> tuple[ast.Call, int] | None:
        """(the call, the position) for an origin that is a target of ``optimizer, scheduler
        = build(cfg)``, ``build`` a function this file does not follow (a factory of another
        module, whose facts say what it returns there)."""
        if not isinstance(getattr(origin, "ctx", None), ast.Store):
            return None
        return unpacked_element(self.index, origin)

    def _amp_passes(self, call: ast.Call, position: int | None) -> list[ast.expr] | None:
        """``amp.initialize`` gives back the optimizers passed to it: as its whole result
        (``amp_inits = amp.initialize(...)``) and as the second of ``(models, optimizers)``;
        the models part never holds an optimizer."""
        if not self.is_amp_initialize(call):
            return None
        if position is not None and position != 1:
            return []
        arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
        return [arg.value] if arg is not None else []


# -- where an optimizer leaves a file's sight ---------------------------------------------------


@dataclass(frozen=True)
class Tested:
    """What an enclosing `if` says of an expression (:meth:`OptimizerFlow.tested`): the
    literal ``values`` it can have, ``when`` ("under `if x == 'O0'`") and the `if`'s line."""

    values: tuple[object, ...]
    when: str
    line: int


def _operands(test: ast.expr, op: type[ast.boolop]) -> list[ast.expr]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, op):
        return [part for value in test.values for part in _operands(value, op)]
    return [test]


def _compared(view: FileView, test: ast.expr, code: str, holds: bool) -> tuple[object, ...] | None:
    """The literals ``test`` allows for the expression written ``code`` when the test
    ``holds`` (or fails): ``x == 'O0'`` / ``x != 'O0'`` / ``x in ('O1', 'O2')``, either side
    of ``==`` and ``!=``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if view.written(left) != code:
        if isinstance(op, ast.Eq | ast.NotEq) and view.written(right) == code:
            left, right = right, left
        else:
            return None
    wanted = {ast.Eq: True, ast.NotEq: False, ast.In: True, ast.NotIn: False}.get(type(op))
    if wanted is None or wanted != holds:
        return None
    value = literal_value(right)
    if value is NOT_LITERAL:
        return None
    if isinstance(op, ast.Eq | ast.NotEq):
        return (value,)
    if not isinstance(value, tuple | list | set | frozenset) or not value:
        return None
    return tuple(dict.fromkeys(sorted(value, key=repr)))


def _stored_in(view: FileView, body: list[ast.stmt], code: str) -> bool:
    """A statement of ``body`` assigns (or deletes) the expression written ``code``."""
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(getattr(node, "ctx", None), ast.Store | ast.Del) and (
                view.written(node) == code
            ):
                return True
    return False


def escape(
    view: FileView, call: ast.expr, followed: Callable[[ast.Call], bool] | None = None
) -> ast.AST | None:
    """The first place where the optimizer ``call`` returns (or the target of an unpacking of
    a call's result, :meth:`OptimizerFlow.element_of`, holds) leaves the sight of the caller's
    checks: given to a call (other than an LR scheduler's constructor or a GradScaler's
    ``step`` / ``unscale_``, and the calls ``followed`` says the caller's checks see into),
    stored, returned, yielded. Its own attributes, aliases and tests are in sight."""
    flow = OptimizerFlow.of(view)
    index = view.index
    for read in index.nodes(ast.Name):
        if not isinstance(read.ctx, ast.Load):
            continue
        if not any(origin is call for origin in flow.origins(read)):
            continue
        parent = index.parent(read)
        if isinstance(parent, ast.Attribute) and parent.value is read:
            continue
        if isinstance(parent, ast.Assign) and parent.value is read:
            continue  # an alias: its reads are checked too
        if isinstance(parent, ast.Compare | ast.BoolOp | ast.UnaryOp):
            continue
        if isinstance(parent, ast.If | ast.IfExp | ast.While) and parent.test is read:
            continue
        given = index.parent(parent) if isinstance(parent, ast.keyword) else parent
        if (
            isinstance(given, ast.Call)
            and given.func is not read
            and (takes(view, given) or (followed is not None and followed(given)))
        ):
            continue
        return given
    return None


_SCALERS = frozenset(
    {
        "torch.cuda.amp.GradScaler",
        "torch.amp.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.npu.amp.GradScaler",
        "torch.GradScaler",
    }
)


def takes(view: FileView, call: ast.Call) -> bool:
    """A call that only reads and steps an optimizer it is given: an LR scheduler, a
    GradScaler's ``step`` and ``unscale_``."""
    name = view.qualified_name(call.func)
    if isinstance(name, str) and name.startswith("torch.optim.lr_scheduler."):
        return True
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in ("step", "unscale_"):
        return False
    origins = OptimizerFlow.of(view).origins(func.value)
    return bool(origins) and all(
        isinstance(origin, ast.Call) and view.qualified_name(origin.func) in _SCALERS
        for origin in origins
    )


def defined_here(view: FileView, call: ast.Call) -> bool:
    """``call`` calls a function or a method (``self.train_epoch(...)``) that the file of
    ``view`` defines, by name: what it does with an optimizer it is given, the file shows."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        name = func.attr if func.value.id in ("self", "cls") else ""
    else:
        name = func.id if isinstance(func, ast.Name) else ""
    defined = view.index.nodes(ast.FunctionDef) + view.index.nodes(ast.AsyncFunctionDef)
    return bool(name) and any(function.name == name for function in defined)
