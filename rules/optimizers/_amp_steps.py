"""The training steps of a module, as NPU105 needs them to add apex amp. Not a rule.

:func:`training_steps` finds, on the module's ``ast``:

- every ``optimizer.step()`` whose receiver is an optimizer the module builds: the receiver is
  followed through assignments (program order), ``self.<attr>`` assignments of the class, and
  the parameters of the functions it is handed to (``train(loader, model, optimizer)``,
  ``mp.spawn(main_worker, args=(...))``), back to the assignment that binds it
  (:class:`Setup`), whose value leads to an optimizer constructor;
- every ``loss.backward()``, and the optimizers it feeds: those stepped next in its function,
  after the backwards that accumulate into the same step (:class:`Backward`);
- what each optimizer trains: the models whose ``.parameters()`` / ``.named_parameters()``
  its ``params`` argument reads (``model.fc.parameters()`` trains ``model``);
- gradient clipping between a backward and its step (:class:`Clip`).

What it cannot follow is a :class:`Problem` with a line and a reason; NPU105 adds amp only to a
module without any, because a single backward left outside ``amp.scale_loss`` under O2 trains
nothing, silently.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from migrator.analysis.calls import argument, has_star
from migrator.analysis.classes import is_optimizer_class
from migrator.analysis.flow import ENTRY
from migrator.analysis.index import ModuleIndex, dotted_name, line_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import reaching_definitions
from migrator.analysis.view import FileView
from migrator.rules.optimizers._flow import OptimizerFlow

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_PARAMETER_CALLS = frozenset({"parameters", "named_parameters"})
# Optimizers of other packages that behave as torch's under apex amp.
_OTHER_OPTIMIZERS = frozenset(
    {
        "transformers.AdamW",
        "transformers.optimization.AdamW",
        "transformers.Adafactor",
        "transformers.optimization.Adafactor",
    }
)
_OPTIMIZER_ROOTS = frozenset({"torch", "apex", "torch_npu", "transformers"})
_SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn"})
_CLIPS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_value_",
    }
)
_MAX_DEPTH = 4  # parameters followed back through at most this many calls


@dataclass(frozen=True)
class Problem:
    """Something the analysis cannot follow, at ``node``'s line."""

    node: ast.AST
    why: str


@dataclass
class Setup:
    """Where one optimizer of the training steps is bound, and what it trains.

    ``target`` is how the assignment spells it (``optimizer``, ``self.optimizer``); every
    assignment in ``bindings`` binds that target in ``function`` (several: an ``if``/``elif``
    choice of optimizer). ``models`` are the model expressions, valid in ``function``, whose
    parameters it trains (``model``, ``self.model``), in order of appearance.
    """

    target: str
    function: ast.AST  # a def, or the module
    bindings: list[ast.Assign]
    constructors: list[ast.Call]
    models: list[str] = field(default_factory=list)
    # The constructor's params argument is exactly `<model>.parameters()`: the optimizer holds
    # every parameter of that model, in the model's order (clipping may use amp.master_params).
    whole_model: str | None = None


@dataclass
class Step:
    """``receiver.step()`` of an optimizer of the module."""

    call: ast.Call
    function: ast.AST
    setup: Setup
    spelled: str  # the optimizer as written at the step
    by_scaler: bool = False  # `scaler.step(optimizer)`


@dataclass
class Backward:
    """``loss.backward(...)`` and the optimizer steps its gradients go to."""

    call: ast.Call
    statement: ast.Expr
    function: ast.AST
    steps: list[Step]
    loss: ast.expr  # what is backpropagated (the loss of `scaler.scale(loss).backward()`)


@dataclass
class Clip:
    """``clip_grad_norm_(params, ...)`` between a backward and the steps it precedes."""

    call: ast.Call
    parameters: ast.expr
    steps: list[Step]
    equals_optimizer: bool  # params are exactly the (single) stepped optimizer's, in its order


@dataclass
class Checkpoint:
    """An optimizer's state saved (``"optimizer": optimizer.state_dict()`` in a dict display, or
    ``state["optimizer"] = optimizer.state_dict()``) or loaded
    (``optimizer.load_state_dict(checkpoint["optimizer"])``), where amp's state goes with it."""

    node: ast.AST  # the dict display, or the statement
    function: ast.AST
    saves: bool
    container: str | None = None  # the loaded checkpoint's name (`checkpoint`), for a load


@dataclass
class TrainingSteps:
    """What :func:`training_steps` found; ``problems`` empty means NPU105 may add amp."""

    setups: list[Setup] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    backwards: list[Backward] = field(default_factory=list)
    clips: list[Clip] = field(default_factory=list)
    unattributed: list[ast.Call] = field(default_factory=list)  # backwards of no training step
    grad_reads: list[ast.Attribute] = field(default_factory=list)
    grad_writes: list[ast.AST] = field(default_factory=list)
    # Some `step()` may be an optimizer's that the analysis could not follow: the module trains,
    # even without a setup.
    optimizer_problems: bool = False
    checkpoints: list[Checkpoint] = field(default_factory=list)
    unsaved: list[ast.Call] = field(default_factory=list)  # optimizer states saved otherwise
    problems: list[Problem] = field(default_factory=list)

    @property
    def models(self) -> list[str]:
        found: list[str] = []
        for setup in self.setups:
            found += [model for model in setup.models if model not in found]
        return found


def training_steps(view: FileView, scalers: frozenset[str] = frozenset()) -> TrainingSteps:
    """The training steps of the module (kept per file). ``scalers``: the names of torch's
    ``GradScaler`` objects, whose ``scaler.step(optimizer)`` steps ``optimizer`` and whose
    ``scaler.scale(loss).backward()`` is a backward of ``loss``."""
    return view.memo(("npu105-training-steps", scalers), lambda: _Analysis(view, scalers).run())


@dataclass
class _Traced:
    """What a receiver leads to: assignments that bind it, or why not."""

    bindings: list[tuple[ast.Assign, str, ast.AST]] = field(default_factory=list)
    problem: str | None = None
    opaque: bool = False  # a value from where the module does not show (another module's call)


class _Analysis:
    def __init__(self, view: FileView, scalers: frozenset[str]) -> None:
        self.scalers = scalers
        self.following_steps = False  # problems found now are about optimizers' steps
        self.view = view
        self.index: ModuleIndex = view.index
        self.flow = OptimizerFlow.of(view)
        self.reaching = reaching_definitions(view)
        self.result = TrainingSteps()
        self.setups: dict[tuple[int, str], Setup] = {}

    def run(self) -> TrainingSteps:
        self.following_steps = True
        self._find_steps()
        self.following_steps = False
        self._find_backwards()
        self._check_steps_have_backwards()
        self._find_clips()
        self._find_grad_changes()
        self._find_checkpoints()
        return self.result

    def problem(self, node: ast.AST, why: str) -> None:
        self.result.problems.append(Problem(node, why))
        if self.following_steps:
            self.result.optimizer_problems = True

    # -- optimizer steps ---------------------------------------------------------------------------

    def _find_steps(self) -> None:
        for attribute in self.index.attributes("step"):
            call = self.index.parent(attribute)
            if not (isinstance(call, ast.Call) and call.func is attribute):
                continue
            receiver = attribute.value
            by_scaler = dotted_name(receiver) in self.scalers
            if by_scaler:  # scaler.step(optimizer)
                if len(call.args) != 1 or call.keywords:
                    self.problem(call, "cannot tell which optimizer this scaler steps")
                    continue
                receiver = call.args[0]
            traced = self._trace(receiver, 0)
            spelled = self.view.written(receiver)
            if traced.problem is not None:
                if _looks_like_optimizer(receiver):
                    self.problem(
                        call, f"cannot tell which optimizer `{spelled}` is: {traced.problem}"
                    )
                continue
            setups = self._setups_of(traced)
            if setups is None:
                if traced.opaque and _looks_like_optimizer(receiver):
                    self.problem(
                        call,
                        f"`{spelled}` is built where npu-migrate cannot see (another module, or "
                        "a value it does not follow), so amp cannot be set up around it",
                    )
                continue
            if len(setups) != 1:
                self.problem(call, f"`{spelled}` may be one of several optimizers here")
                continue
            if not by_scaler and (call.args or call.keywords):
                self.problem(
                    call,
                    f"`{spelled}.step(...)` gets a closure, which apex amp does not support",
                )
                continue
            step = Step(call, self._function_of(call), setups[0], spelled, by_scaler)
            self.result.steps.append(step)
        seen: list[Setup] = []
        for step in self.result.steps:
            if step.setup not in seen:
                seen.append(step.setup)
        self.result.setups = sorted(seen, key=lambda s: line_of(s.bindings[-1]))

    def _setups_of(self, traced: _Traced) -> list[Setup] | None:
        """The setups the bindings make, or None when they build no optimizer (``traced`` is
        then marked opaque when one of them may build one where the module does not show)."""
        if traced.opaque or not traced.bindings:
            return None
        by_function: dict[tuple[int, str], list[tuple[ast.Assign, ast.AST]]] = {}
        for assign, target, function in traced.bindings:
            by_function.setdefault((id(function), target), []).append((assign, function))
        setups: list[Setup] = []
        for (key, target), entries in by_function.items():
            setup = self.setups.get((key, target))
            if setup is None:
                setup = self._setup(target, entries, traced)
                if setup is None:
                    return None
                self.setups[(key, target)] = setup
            setups.append(setup)
        return setups

    def _setup(
        self, target: str, entries: list[tuple[ast.Assign, ast.AST]], traced: _Traced
    ) -> Setup | None:
        function = entries[0][1]
        bindings = sorted({id(a): a for a, _ in entries}.values(), key=line_of)
        constructors: list[ast.Call] = []
        for assign in bindings:
            origins = self.flow.origins(assign.value)
            calls = [o for o in origins if isinstance(o, ast.Call) and self._is_optimizer(o)]
            unknown = [o for o in origins if not any(o is c for c in calls) and self._opaque(o)]
            if not calls:
                traced.opaque = traced.opaque or bool(unknown)
                return None  # a scheduler, a model, or something built elsewhere
            if unknown:
                self.problem(
                    assign,
                    f"`{target}` may also be `{self.view.written(unknown[0])}`, which "
                    "npu-migrate cannot follow",
                )
            constructors += calls
        setup = Setup(target, function, bindings, constructors)
        self._models_of(setup)
        return setup

    def _opaque(self, origin: ast.expr) -> bool:
        """A value whose origin the module does not show: a parameter, or a call of another
        module's function (torch's and transformers' own functions are known not to build
        optimizers here: schedulers, models, data)."""
        func = origin.func if isinstance(origin, ast.Call) else origin
        name = self.view.qualified_name(func)
        if isinstance(name, str):
            return not name.startswith(("torch.", "transformers.", "builtins."))
        return True

    def _is_optimizer(self, call: ast.Call) -> bool:
        func = call.func
        local = self._local_optimizer_classes
        if isinstance(func, ast.Name) and func.id in local:
            return True
        if not self.view.may_name(func, _OPTIMIZER_ROOTS):
            return False
        name = self.view.qualified_name(func)
        return isinstance(name, str) and is_optimizer_name(name)

    @cached_property
    def _local_optimizer_classes(self) -> set[str]:
        """Classes of this module that subclass an optimizer."""
        found: set[str] = set()
        for node in self.index.tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                name = self.view.qualified_name(base)
                if isinstance(name, str) and (
                    is_optimizer_name(name) or name.startswith("torch.optim.")
                ):
                    found.add(node.name)
        return found

    # -- following a receiver to its assignment ---------------------------------------------------

    def _trace(self, expr: ast.expr, depth: int) -> _Traced:
        if depth > _MAX_DEPTH:
            return _Traced(problem="it is handed through too many calls")
        if isinstance(expr, ast.Name):
            return self._trace_name(expr, depth)
        dotted = dotted_name(expr)
        if isinstance(expr, ast.Attribute) and dotted is not None and dotted.startswith("self."):
            return self._trace_self(expr, dotted)
        return _Traced(opaque=True)

    def _trace_name(self, name: ast.Name, depth: int) -> _Traced:
        definitions = self.reaching.of_name(name)
        if definitions is None:
            definitions = [b.node or ENTRY for b in self.index.bindings_of(name)]
        if not definitions:
            return _Traced(opaque=True)
        found = _Traced()
        for definition in definitions:
            if isinstance(definition, ast.arg):
                sub = self._trace_parameter(definition, depth)
            elif isinstance(definition, ast.Name):
                sub = self._binding(definition, name.id)
            else:
                sub = _Traced(opaque=True)
            if sub.problem is not None:
                return sub
            found.bindings.extend(sub.bindings)
            found.opaque = found.opaque or sub.opaque
        return found

    def _binding(self, stored: ast.AST, target: str) -> _Traced:
        assign = self.index.parent(stored)
        if isinstance(assign, ast.Assign) and assign.targets == [stored]:
            return _Traced([(assign, target, self._function_of(assign))])
        if isinstance(assign, ast.Tuple | ast.List):
            return _Traced(problem=f"`{target}` is bound by unpacking at line {line_of(stored)}")
        return _Traced(opaque=True)

    def _trace_self(self, read: ast.Attribute, dotted: str) -> _Traced:
        owner = self._class_of(read)
        if owner is None:
            return _Traced(opaque=True)
        found = _Traced()
        for node in ast.walk(owner):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if dotted_name(node) != dotted or self._class_of(node) is not owner:
                    continue
                sub = self._binding(node, dotted)
                if sub.problem is not None:
                    return sub
                found.bindings.extend(sub.bindings)
                found.opaque = found.opaque or sub.opaque
        if not found.bindings:
            found.opaque = True
        return found

    def _trace_parameter(self, parameter: ast.arg, depth: int) -> _Traced:
        function = self.index.parent(self.index.parent(parameter) or parameter)
        if not isinstance(function, _FUNCTIONS):
            return _Traced(opaque=True)
        sites = self._call_sites(function)
        if not sites:
            return _Traced(opaque=True)
        found = _Traced()
        for site, given in sites:
            value = _argument_for(function, parameter, site, given)
            if value is None:
                return _Traced(
                    problem=f"cannot tell what the call at line {line_of(site)} passes to "
                    f"`{function.name}`'s parameter `{parameter.arg}`"
                )
            sub = self._trace(value, depth + 1)
            if sub.problem is not None:
                return sub
            found.bindings.extend(sub.bindings)
            found.opaque = found.opaque or sub.opaque
        return found

    def _call_sites(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> list[tuple[ast.Call, list[ast.expr] | None]]:
        """Calls of ``function`` in this module, with the positional arguments a spawn passes
        after the process index (None: an ordinary call)."""
        sites: list[tuple[ast.Call, list[ast.expr] | None]] = []
        owner = self._class_of(function)
        for call in self.index.nodes(ast.Call):
            func = call.func
            if owner is None and isinstance(func, ast.Name) and func.id == function.name:
                if self._binds_function(func, function):
                    sites.append((call, None))
            elif (
                owner is not None
                and isinstance(func, ast.Attribute)
                and func.attr == function.name
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
                and self._class_of(call) is owner
            ):
                sites.append((call, None))
            elif call.args and isinstance(call.args[0], ast.Name):
                if call.args[0].id != function.name or owner is not None:
                    continue
                if self.view.qualified_name_in(func, _SPAWN) is None:
                    continue
                passed = argument(call, "args", 2)
                if passed is not None and isinstance(passed.value, ast.Tuple):
                    sites.append((call, list(passed.value.elts)))
                else:
                    sites.append((call, []))
        return sites

    def _binds_function(self, name: ast.Name, function: ast.AST) -> bool:
        bindings = self.index.bindings_of(name)
        return len(bindings) == 1 and bindings[0].node is function

    # -- what an optimizer trains -----------------------------------------------------------------

    def _models_of(self, setup: Setup) -> None:
        """Fill ``setup.models`` from the constructors' params, spelled in the setup function."""
        for constructor, value in zip(setup.constructors, self._values_for(setup), strict=False):
            params = argument(constructor, "params", 0)
            if params is None or has_star(constructor):
                self.problem(constructor, "cannot tell which parameters this optimizer trains")
                return
            receivers = self._receivers(params.value, 0)
            if not receivers:
                self.problem(
                    constructor,
                    f"cannot tell which model `{self.view.written(params.value)}` holds the "
                    "parameters of",
                )
                return
            mapping = self._helper_mapping(constructor, value)
            if mapping is None:
                self.problem(
                    constructor,
                    "the optimizer is built in a function npu-migrate cannot relate to the "
                    f"assignment of `{setup.target}`",
                )
                return
            for receiver in receivers:
                model = _model_root(receiver, mapping)
                if model is None:
                    self.problem(constructor, f"cannot tell which model `{receiver}` belongs to")
                    return
                if model not in setup.models:
                    setup.models.append(model)
            whole = self._trained_model(params.value, 0)
            if whole is not None and len(setup.constructors) == 1:
                setup.whole_model = _spelled(whole, mapping)

    def _values_for(self, setup: Setup) -> list[ast.expr]:
        """For each constructor, the assigned value it comes from."""
        values: list[ast.expr] = []
        for constructor in setup.constructors:
            holder = next(
                (a.value for a in setup.bindings if _contains(a.value, constructor)), None
            )
            if holder is None:
                holder = next(
                    (
                        a.value
                        for a in setup.bindings
                        if any(o is constructor for o in self.flow.origins(a.value))
                    ),
                    setup.bindings[0].value,
                )
            values.append(holder)
        return values

    def _helper_mapping(self, constructor: ast.Call, value: ast.expr) -> dict[str, str] | None:
        """How names in the constructor's function are spelled where its value is assigned:
        {} when the constructor is in the assignment itself; the helper's parameters mapped to
        the call's arguments when a function of the module builds it."""
        if _contains(value, constructor):
            return {}
        helper = self._function_of(constructor)
        if not isinstance(helper, _FUNCTIONS) or not isinstance(value, ast.Call):
            return None
        func = value.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called != helper.name:
            return None
        mapping: dict[str, str] = {}
        parameters = [*helper.args.posonlyargs, *helper.args.args]
        if isinstance(func, ast.Attribute) and parameters and parameters[0].arg == "self":
            parameters = parameters[1:]
            mapping["self"] = "self"
        for position, given in enumerate(value.args):
            if isinstance(given, ast.Starred) or position >= len(parameters):
                return None
            path = dotted_name(given)
            if path is not None:
                mapping[parameters[position].arg] = path
        for item in value.keywords:
            path = dotted_name(item.value)
            if item.arg is not None and path is not None:
                mapping[item.arg] = path
        return mapping

    def _receivers(self, expr: ast.AST, depth: int) -> list[str]:
        """Dotted receivers of ``.parameters()`` / ``.named_parameters()`` calls in ``expr``,
        following names assigned in the same function (one list per level)."""
        found: list[str] = []
        for node in ast.walk(expr):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _PARAMETER_CALLS
            ):
                path = dotted_name(node.func.value)
                if path is not None and path not in found:
                    found.append(path)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and depth < 3:
                for definition in self.reaching.of_name(node) or []:
                    assign = self.index.parent(definition)
                    if isinstance(assign, ast.Assign) and assign.targets[0] is definition:
                        found += [
                            r for r in self._receivers(assign.value, depth + 1) if r not in found
                        ]
        return found

    def _trained_model(self, params: ast.expr, depth: int) -> str | None:
        """``model`` when ``params`` holds every parameter of ``model`` that can get a gradient:
        ``model.parameters()``, the ones that require grad (``filter(lambda p:
        p.requires_grad, ...)``, ``[p for p in ... if p.requires_grad]``), ``list(...)`` of
        them, or parameter groups that split ``model.named_parameters()`` by a condition and
        its negation (BERT's ``no_decay`` groups). Names are followed to their assignment."""
        if depth > 4:
            return None
        if isinstance(params, ast.Name):
            definitions = self.reaching.of_name(params) or []
            if len(definitions) != 1:
                return None
            assign = self.index.parent(definitions[0])
            if not (isinstance(assign, ast.Assign) and assign.targets[0] is definitions[0]):
                return None
            return self._trained_model(assign.value, depth + 1)
        if isinstance(params, ast.Call):
            func = params.func
            if isinstance(func, ast.Attribute) and func.attr in _PARAMETER_CALLS:
                if params.args or params.keywords:
                    return None
                return dotted_name(func.value)
            if (
                isinstance(func, ast.Name)
                and func.id in ("list", "tuple")
                and len(params.args) == 1
            ):
                return self._trained_model(params.args[0], depth + 1)
            filtered = isinstance(func, ast.Name) and func.id == "filter" and len(params.args) == 2
            if filtered and _requires_grad_test(params.args[0]):
                return self._trained_model(params.args[1], depth + 1)
            return None
        if isinstance(params, ast.ListComp | ast.GeneratorExp):
            return self._comprehended_model(params, None, depth)
        if isinstance(params, ast.List) and params.elts:
            return self._split_groups(params.elts, depth)
        return None

    def _comprehended_model(
        self, comprehension: ast.ListComp | ast.GeneratorExp, condition: str | None, depth: int
    ) -> str | None:
        """``[p for p in X]`` / ``[p for n, p in X]``, with no test, ``p.requires_grad``, or
        exactly ``condition`` (its text) as the only test."""
        if len(comprehension.generators) != 1:
            return None
        generator = comprehension.generators[0]
        element = comprehension.elt
        if not isinstance(element, ast.Name) or generator.is_async:
            return None
        target = generator.target
        named = isinstance(target, ast.Tuple) and len(target.elts) == 2
        if named:
            assert isinstance(target, ast.Tuple)
            last = target.elts[1]
            if not (isinstance(last, ast.Name) and last.id == element.id):
                return None
        elif not (isinstance(target, ast.Name) and target.id == element.id):
            return None
        tests = [self.view.code(test) for test in generator.ifs]
        if condition is not None and tests != [condition]:
            return None
        if condition is None and not (
            not generator.ifs
            or (len(generator.ifs) == 1 and _requires_grad_test(generator.ifs[0], element.id))
        ):
            return None
        source = self._trained_model(generator.iter, depth + 1)
        if source is None:
            return None
        iterated = generator.iter
        while isinstance(iterated, ast.Name):  # named_parameters() gives (name, parameter)
            definitions = self.reaching.of_name(iterated) or []
            assign = self.index.parent(definitions[0]) if len(definitions) == 1 else None
            if not isinstance(assign, ast.Assign):
                return None
            iterated = assign.value
            if (
                isinstance(iterated, ast.Call)
                and isinstance(iterated.func, ast.Name)
                and iterated.func.id in ("list", "tuple")
                and len(iterated.args) == 1
            ):
                iterated = iterated.args[0]
        gives_names = (
            isinstance(iterated, ast.Call)
            and isinstance(iterated.func, ast.Attribute)
            and iterated.func.attr == "named_parameters"
        )
        return source if gives_names == named else None

    def _split_groups(self, groups: list[ast.expr], depth: int) -> str | None:
        """Two parameter groups ``{"params": [p for n, p in X if C], ...}`` and ``{"params":
        [p for n, p in X if not C], ...}``: together every parameter of X."""
        comprehensions: list[ast.ListComp | ast.GeneratorExp] = []
        for group in groups:
            if not isinstance(group, ast.Dict):
                return None
            values = [
                v
                for k, v in zip(group.keys, group.values, strict=True)
                if literal_value_of(k) == "params"
            ]
            if len(values) != 1 or not isinstance(values[0], ast.ListComp | ast.GeneratorExp):
                return None
            comprehensions.append(values[0])
        if len(comprehensions) != 2:
            return None
        tests = []
        for comprehension in comprehensions:
            ifs = comprehension.generators[0].ifs if len(comprehension.generators) == 1 else []
            if len(ifs) != 1:
                return None
            tests.append(ifs[0])
        for positive, negative in (tests, tests[::-1]):
            if (
                isinstance(negative, ast.UnaryOp)
                and isinstance(negative.op, ast.Not)
                and self.view.code(negative.operand) == self.view.code(positive)
            ):
                first = self._comprehended_model(comprehensions[0], self.view.code(tests[0]), depth)
                second = self._comprehended_model(
                    comprehensions[1], self.view.code(tests[1]), depth
                )
                if first is not None and first == second:
                    return first
        return None

    # -- backwards ------------------------------------------------------------------------------

    def _find_backwards(self) -> None:
        events: dict[int, list[tuple[tuple[int, int], object]]] = {}
        for step in self.result.steps:
            key = (step.call.lineno, step.call.col_offset)
            events.setdefault(id(step.function), []).append((key, step))
        calls: list[ast.Call] = []
        for attribute in self.index.attributes("backward"):
            call = self.index.parent(attribute)
            if not (isinstance(call, ast.Call) and call.func is attribute):
                continue
            owner = self._framework_backward(attribute.value, bool(call.args))
            if owner is not None:
                written = self.view.written(call.func)
                if owner.startswith("`torch."):
                    why = (
                        f"`{written}(...)` is not a loss tensor's `backward()`, which is what "
                        "NPU105 puts inside `amp.scale_loss`: write it as `loss.backward()`, or "
                        "add amp by hand"
                    )
                else:
                    why = (
                        f"`{written}` is the backward of {owner}, not of a loss tensor: that "
                        "framework brings its own mixed precision, and NPU105 does not mix apex "
                        "amp into it; add amp by hand if you must"
                    )
                self.problem(call, why)
                continue
            calls.append(call)
            function = self._function_of(call)
            events.setdefault(id(function), []).append(((call.lineno, call.col_offset), call))
        for entries in events.values():
            entries.sort(key=lambda entry: entry[0])
        for call in calls:
            function = self._function_of(call)
            steps = _steps_after(call, events[id(function)])
            statement = self.index.parent(call)
            if not steps:
                if self._mentions_optimizers(function):
                    self.problem(
                        call,
                        f"no `step()` of an optimizer follows this backward "
                        f"{_function_name(function)}, so npu-migrate cannot tell which "
                        "optimizer its gradients go to",
                    )
                else:
                    self.result.unattributed.append(call)
                continue
            if not isinstance(statement, ast.Expr) or statement.value is not call:
                self.problem(
                    call,
                    "this backward is part of a larger expression; only a statement of its own "
                    "can go inside `amp.scale_loss`",
                )
                continue
            if self._shares_line(statement):
                self.problem(call, "this backward shares its line with other statements")
                continue
            self.result.backwards.append(
                Backward(call, statement, function, steps, self._loss_of(call))
            )

    def _framework_backward(self, receiver: ast.expr, given: bool) -> str | None:
        """What ``receiver.backward(...)`` belongs to when it is not a tensor: a module
        (``torch.autograd.backward``), or, when it is given the loss (``given``), an object
        built by another package's function (Accelerate's ``accelerator.backward(loss)``,
        DeepSpeed's engine, apex's ``FP16_Optimizer``). A tensor's ``backward`` takes no
        positional argument but a rarely passed gradient."""
        if not isinstance(receiver, ast.Name | ast.Attribute):
            return None  # `(a + b).backward()`, `sum(...).backward()`: a tensor
        name = self.view.qualified_name(receiver)
        if isinstance(name, Ambiguous):
            return f"`{self.view.written(receiver)}` ({name.describe()})"
        if isinstance(name, str):
            return f"`{name}`"
        if not isinstance(receiver, ast.Name) or not given:
            return None
        for definition in self.reaching.of_name(receiver) or []:
            holder = self.index.parent(definition)
            while isinstance(holder, ast.Tuple | ast.List):
                holder = self.index.parent(holder)
            value = holder.value if isinstance(holder, ast.Assign) else None
            if not isinstance(value, ast.Call):
                continue
            built_by = self.view.qualified_name(value.func)
            if isinstance(built_by, str) and not built_by.startswith(("torch.", "builtins.")):
                return f"an object `{built_by}` built (line {value.lineno})"
        return None

    def _loss_of(self, call: ast.Call) -> ast.expr:
        assert isinstance(call.func, ast.Attribute)
        receiver = call.func.value
        if (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Attribute)
            and receiver.func.attr == "scale"
            and dotted_name(receiver.func.value) in self.scalers
            and len(receiver.args) == 1
        ):
            return receiver.args[0]
        return receiver

    def _shares_line(self, statement: ast.stmt) -> bool:
        head = self.index.line_head(statement)
        parent = self.index.parent(statement)
        for field_name in ("body", "orelse", "finalbody"):
            body = getattr(parent, field_name, None)
            if isinstance(body, list) and any(s is statement for s in body):
                for line in self.index.lines(body):
                    if line[0] is head:
                        return len(line) > 1
        return False

    def _mentions_optimizers(self, function: ast.AST) -> bool:
        targets = {setup.target.split(".")[-1] for setup in self.result.setups}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id in targets:
                return True
            if isinstance(node, ast.Attribute) and node.attr in targets:
                return True
        return False

    def _check_steps_have_backwards(self) -> None:
        fed = {id(step.call) for backward in self.result.backwards for step in backward.steps}
        for step in self.result.steps:
            if id(step.call) not in fed:
                self.problem(
                    step.call,
                    f"no `backward()` before `{step.spelled}.step()` "
                    f"{_function_name(step.function)}: its gradients come from code "
                    "npu-migrate cannot see, which would need `amp.scale_loss` too",
                )

    # -- clipping and gradients -------------------------------------------------------------------

    def _find_clips(self) -> None:
        for call in self.view.calls_to({"torch"}):
            name = self.view.qualified_name_in(call.func, _CLIPS)
            if not isinstance(name, str):
                continue
            function = self._function_of(call)
            steps = self._steps_following(call, function)
            if steps is None:
                continue
            params = argument(call, "parameters", 0)
            if params is None:
                self.problem(call, "cannot tell which parameters this clips")
                continue
            equals = False
            if len(steps) == 1 and steps[0].setup.whole_model is not None:
                whole = self._trained_model(params.value, 0)
                if whole is not None:
                    spelled = self._spelled_in_setup(whole, function, steps[0].setup)
                    equals = spelled == steps[0].setup.whole_model
            self.result.clips.append(Clip(call, params.value, steps, equals))

    def _steps_following(self, node: ast.AST, function: ast.AST) -> list[Step] | None:
        """The steps of the first backward group whose steps come after ``node`` in
        ``function``, when a backward of that group precedes ``node``."""
        position = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
        for backward in self.result.backwards:
            if backward.function is not function:
                continue
            start = (backward.call.lineno, backward.call.col_offset)
            first_step = min((s.call.lineno, s.call.col_offset) for s in backward.steps)
            if start < position < first_step:
                return backward.steps
        return None

    def _spelled_in_setup(self, path: str, function: ast.AST, setup: Setup) -> str | None:
        """``path`` (read in ``function``) as the setup function spells it, following one
        parameter hop per call level."""
        if function is setup.function:
            return path
        root, _, rest = path.partition(".")
        if root == "self":
            return path if self._class_of(function) is self._class_of(setup.function) else None
        if not isinstance(function, _FUNCTIONS):
            return None
        parameter = next(
            (a for a in [*function.args.posonlyargs, *function.args.args] if a.arg == root), None
        )
        if parameter is None:
            return None
        for site, given in self._call_sites(function):
            value = _argument_for(function, parameter, site, given)
            dotted = dotted_name(value) if value is not None else None
            if dotted is None:
                return None
            caller = self._function_of(site)
            spelled = self._spelled_in_setup(dotted, caller, setup)
            if spelled is None:
                return None
            return f"{spelled}.{rest}" if rest else spelled
        return None

    def _find_grad_changes(self) -> None:
        """``.grad`` of parameters read or changed between a backward and its step."""
        for attribute in self.index.attributes("grad"):
            function = self._function_of(attribute)
            if self._steps_following(attribute, function) is None:
                continue
            writes = isinstance(attribute.ctx, ast.Store | ast.Del) or self._changed_in_place(
                attribute
            )
            if writes:
                self.result.grad_writes.append(attribute)
            else:
                self.result.grad_reads.append(attribute)

    def _find_checkpoints(self) -> None:
        setups = self.result.setups
        for method in ("state_dict", "load_state_dict"):
            for attribute in self.index.attributes(method):
                call = self.index.parent(attribute)
                if not (isinstance(call, ast.Call) and call.func is attribute):
                    continue
                traced = self._trace(attribute.value, 0)
                found = self._setups_of(traced) if traced.problem is None else None
                if not found or not all(setup in setups for setup in found):
                    continue
                function = self._function_of(call)
                parent = self.index.parent(call)
                if method == "state_dict":
                    checkpoint = self._saved(call, parent, function)
                else:
                    checkpoint = self._loaded(call, parent, function)
                if checkpoint is None:
                    self.result.unsaved.append(call)
                elif all(c.node is not checkpoint.node for c in self.result.checkpoints):
                    self.result.checkpoints.append(checkpoint)

    def _saved(
        self, call: ast.Call, parent: ast.AST | None, function: ast.AST
    ) -> Checkpoint | None:
        if isinstance(parent, ast.Dict) and any(value is call for value in parent.values):
            keys = [literal_value_of(key) for key in parent.keys]
            if all(isinstance(key, str) for key in keys) and "amp" not in keys:
                return Checkpoint(parent, function, saves=True)
            return None
        if (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Subscript)
            and isinstance(parent.targets[0].value, ast.Name)
            and isinstance(literal_value_of(parent.targets[0].slice), str)
        ):
            return Checkpoint(parent, function, saves=True, container=parent.targets[0].value.id)
        return None

    def _loaded(
        self, call: ast.Call, parent: ast.AST | None, function: ast.AST
    ) -> Checkpoint | None:
        if not isinstance(parent, ast.Expr) or len(call.args) != 1 or call.keywords:
            return None
        given = call.args[0]
        if (
            isinstance(given, ast.Subscript)
            and isinstance(given.value, ast.Name)
            and isinstance(literal_value_of(given.slice), str)
            and not self._shares_line(parent)
        ):
            return Checkpoint(parent, function, saves=False, container=given.value.id)
        return None

    def _changed_in_place(self, node: ast.expr) -> bool:
        """``x.grad.mul_(...)``, ``x.grad.data.clamp_(...)``, ``x.grad[...] = ...``."""
        parent = self.index.parent(node)
        while isinstance(parent, ast.Attribute) and parent.attr == "data":
            node, parent = parent, self.index.parent(parent)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return isinstance(parent.ctx, ast.Store | ast.Del)
        if isinstance(parent, ast.Attribute) and parent.attr.endswith("_"):
            call = self.index.parent(parent)
            return isinstance(call, ast.Call) and call.func is parent
        return False

    # -- structure ------------------------------------------------------------------------------

    def _function_of(self, node: ast.AST) -> ast.AST:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _FUNCTIONS):
                return ancestor
        return self.index.tree

    def _class_of(self, node: ast.AST) -> ast.ClassDef | None:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, ast.ClassDef):
                return ancestor
        return None


def is_optimizer_name(name: str) -> bool:
    """A torch / apex / torch_npu / transformers optimizer class, by qualified name."""
    if name in _OTHER_OPTIMIZERS or is_optimizer_class(name):
        return True
    package, _, short = name.rpartition(".")
    module = package.rpartition(".")[2]
    return package.startswith("torch.optim.") and short.lower() == module


def _looks_like_optimizer(receiver: ast.expr) -> bool:
    spelled = dotted_name(receiver) or ""
    return "optim" in spelled.rpartition(".")[2].lower()


def _steps_after(call: ast.Call, events: list[tuple[tuple[int, int], object]]) -> list[Step]:
    """The optimizer steps that take the gradients of ``call``: the next run of steps after
    it, past the backwards that accumulate into the same steps."""
    position = (call.lineno, call.col_offset)
    steps: list[Step] = []
    for key, event in events:
        if key <= position:
            continue
        if isinstance(event, Step):
            if event.setup not in [s.setup for s in steps]:
                steps.append(event)
        elif steps:
            break
    return steps


def _argument_for(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    parameter: ast.arg,
    site: ast.Call,
    spawned: list[ast.expr] | None,
) -> ast.expr | None:
    """What the call ``site`` passes to ``parameter`` (None: cannot tell)."""
    positional = [*function.args.posonlyargs, *function.args.args]
    names = [p.arg for p in positional]
    if spawned is not None:  # spawn(fn, args=(a, b)): fn(process_index, a, b)
        if parameter.arg not in names or names.index(parameter.arg) == 0:
            return None
        position = names.index(parameter.arg) - 1
        return spawned[position] if position < len(spawned) else None
    if isinstance(site.func, ast.Attribute) and names and names[0] == "self":
        names = names[1:]
    for item in site.keywords:
        if item.arg == parameter.arg:
            return item.value
        if item.arg is None:
            return None
    if parameter.arg in names:
        position = names.index(parameter.arg)
        for index, given in enumerate(site.args):
            if isinstance(given, ast.Starred):
                return None
            if index == position:
                return given
    return None


def _model_root(receiver: str, mapping: dict[str, str]) -> str | None:
    """The model a ``.parameters()`` receiver belongs to: its first name (``model`` of
    ``model.fc``), or ``self.<attr>`` in a method; spelled through ``mapping``."""
    parts = receiver.split(".")
    first = parts[0]
    if first in mapping:
        parts = mapping[first].split(".") + parts[1:]
    elif mapping and first != "self":
        return None  # a local of the helper: not reachable where the optimizer is assigned
    if parts[0] == "self":
        return ".".join(parts[:2]) if len(parts) >= 2 else None
    return parts[0]


def _spelled(path: str, mapping: dict[str, str]) -> str:
    """``path`` with its first name replaced as ``mapping`` says (a helper's parameter)."""
    first, dot, rest = path.partition(".")
    return mapping.get(first, first) + dot + rest


def literal_value_of(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _requires_grad_test(node: ast.expr, name: str | None = None) -> bool:
    """``lambda p: p.requires_grad`` (as ``filter``'s test), or ``p.requires_grad`` for the
    comprehension variable ``name``."""
    if isinstance(node, ast.Lambda):
        arguments = node.args.args
        if len(arguments) != 1:
            return False
        return _requires_grad_test(node.body, arguments[0].arg)
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "requires_grad"
        and isinstance(node.value, ast.Name)
        and node.value.id == name
    )


def _contains(tree: ast.AST, node: ast.AST) -> bool:
    return any(inner is node for inner in ast.walk(tree))


def _function_name(function: ast.AST) -> str:
    """``in `train` `` or ``at module level``, for messages."""
    name = getattr(function, "name", None)
    return f"in `{name}`" if name else "at module level"


def scope_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body`` and the blocks inside it, without entering nested scopes."""
    for statement in body:
        yield statement
        if isinstance(statement, _SCOPES):
            continue
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(statement, field_name, None)
            if isinstance(inner, list):
                nested = [s for s in inner if isinstance(s, ast.stmt)]
                yield from scope_statements(nested)
                for handler in inner:
                    if isinstance(handler, ast.ExceptHandler):
                        yield from scope_statements(handler.body)
