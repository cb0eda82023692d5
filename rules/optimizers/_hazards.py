"""Code that breaks an NPU fused optimizer, found before NPU101 swaps one in. Not a rule itself.

torch_npu's ``NpuFusedOptimizerBase`` (and Ascend apex's fused optimizers, built on the same
idea) packs every parameter's gradient into one flat buffer per dtype at the first ``step()`` or
``zero_grad()``. From then on:

- ``optimizer.zero_grad(set_to_none=True)`` raises ``ValueError`` ("set_to_none is not supported
  in fused optimizers");
- a gradient that is set to None or replaced (``p.grad = None``, ``model.zero_grad()``, whose
  default is ``set_to_none=True`` since torch 2.0) is no longer part of the buffer: the optimizer
  keeps stepping with the stale values there;
- parameters must be float32 or float16 (bfloat16 or float64 raise ``TypeError``);
- sparse gradients (``nn.Embedding(..., sparse=True)``) are not supported.

Where this module looks, for one optimizer constructor (the *scope rule*):

- the optimizer's own ``zero_grad(...)`` anywhere in the file, found by following the names that
  hold it (:class:`~migrator.rules.optimizers._flow.OptimizerFlow`);
- everything else (a module's ``zero_grad``, ``.grad`` stores, dtype casts of the model whose
  ``.parameters()`` feed it, ``torch.set_default_dtype``) in the *units* where the optimizer
  lives: the function that builds it, every function that calls its ``step()`` or
  ``zero_grad()``, and the module-level code of the file. A unit is a top-level function or a
  method, with the functions nested in it; a function that never touches the optimizer is
  another unit, so ``evaluate(model)`` calling ``model.zero_grad()`` does not block the
  optimizer of ``train()``;
- sparse embeddings anywhere in the file (the model may be built in another function).

Code in other files is followed where the link stage shows it: the code the optimizer is handed
to (:mod:`~migrator.rules.optimizers._handed`), a factory's callers and a method's callers
(:mod:`~migrator.rules.optimizers._factories`, :mod:`~migrator.rules.optimizers._method_callers`).
An optimizer built after its model's DDP wrap that stays there (NPU203's plan) is a hazard too.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from migrator.analysis.calls import NOT_LITERAL, argument, arguments, literal_value
from migrator.analysis.clipping import class_of
from migrator.analysis.index import ModuleIndex, base_name, dotted_name, line_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.view import FileView
from migrator.diagnostics import lines_named
from migrator.rules.optimizers._flow import (
    OptimizerFlow,
    mapped_get,
    npu_fused_name,
    optimizer_lookup,
)
from migrator.rules.optimizers._handed import (
    DROPS,
    MODULE_DEFAULT,
    REACHES_AMP,
    REPLACES,
    SETS_NONE,
    Callee,
    HandedCode,
    Reset,
    elements_held,
)
from migrator.rules.optimizers._subclass import subclass_base
from migrator.rules.optimizers._tables import (
    FP16_OPTIMIZERS,
    KNOWN_OPTIMIZERS,
    NO_FUSED_ROOTS,
    NO_FUSED_VERSION,
    NPU1_ROOTS,
    of_optimizer_module,
)

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# Dtypes the fused optimizers refuse (they take float32 and float16 parameters only).
_REFUSED_DTYPES = {
    "torch.bfloat16": "bfloat16",
    "torch.float64": "float64",
    "torch.double": "float64",
}
_ACCEPTED_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float16", "torch.half"})
_REFUSED_DTYPE_METHODS = {"bfloat16": "bfloat16", "double": "float64"}
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# Calls that hold every element of the one iterable they are given, for whole_models.
_COPIES = frozenset({"builtins.list", "builtins.tuple"})
_WHOLE_DEPTH = 32  # nested concatenations followed by whole_models
_SPARSE_LAYERS = frozenset(
    {
        "torch.nn.Embedding",
        "torch.nn.EmbeddingBag",
        "torch.nn.modules.sparse.Embedding",
        "torch.nn.modules.sparse.EmbeddingBag",
        "torch.nn.Embedding.from_pretrained",
        "torch.nn.EmbeddingBag.from_pretrained",
        "torch.nn.functional.embedding",
        "torch.nn.functional.embedding_bag",
    }
)
# Optimizer wrappers by name, wherever they are defined (timm, torchcontrib, copies in projects).
# A call's arguments as the callee's parameters they are bound to (Callee.bind).
_Bound = list[tuple[str, ast.expr]]
_OPTIMIZER_WRAPPERS = frozenset({"Lookahead", "SWA", "Lookahead_", "LookAhead"})
_KEEP_FLOAT32 = "keep the parameters in float32 and get lower-precision compute from autocast"
_ZERO_IN_PLACE = (
    "zero the gradients with `optimizer.zero_grad()` (it zeroes the flat buffer in place)"
)

# What steps and zeroes as an optimizer: torch's, apex's and torch_npu's classes, NVIDIA's
# FP16_Optimizer, and other packages' optimizers that run unfused (Hugging Face's AdamW, whose
# `zero_grad()` is torch's Optimizer.zero_grad, not a module's).
_OPTIMIZER_ROOTS = NPU1_ROOTS | NO_FUSED_ROOTS
_OPTIMIZER_CLASSES = KNOWN_OPTIMIZERS | FP16_OPTIMIZERS | NO_FUSED_VERSION.keys()


@dataclass(frozen=True)
class GradFix:
    """The edit that keeps a ``zero_grad(...)`` call's gradients in the fused optimizer's flat
    buffer: drop ``set_to_none`` from the optimizer's own call (the fused optimizers zero in
    place), or pass ``set_to_none=False`` to a module's (``receiver``, as written); or replace
    ``for p in model.parameters(): p.grad = None`` (``loop``, whose ``model.parameters()`` is
    ``call``) with ``model.zero_grad(set_to_none=False)``."""

    call: ast.Call
    receiver: str | None = None  # None: the optimizer's own zero_grad, set_to_none dropped
    # The optimizer wrapper whose zero_grad ``call`` is (timm's `Lookahead(...)`, as written):
    # it zeroes the fused optimizer's own parameters, so `set_to_none=False` changes nothing
    # but keeping their gradients in the flat buffer.
    wrapper: str | None = None
    loop: ast.For | None = None

    @property
    def line(self) -> int:
        return line_of(self.call)


@dataclass(frozen=True)
class Hazard:
    """One piece of code that breaks the NPU fused optimizer, with what to do about it."""

    node: ast.AST
    code: str  # the code as quoted in messages, e.g. "`model.zero_grad()`"
    effect: str  # what it does and what breaks, e.g. "sets the gradients to None, which ..."
    remedy: str  # how to make the optimizer fusable
    fix: GradFix | None = None  # the edit that removes it, when there is one
    # What it breaks can only be a loud error at the first step, and only on some paths (a
    # dtype chosen at run time): the swap is made and the message says so.
    loud: bool = False
    # The wrapper call (timm's ``Lookahead(optimizer)``) whose ``zero_grad`` breaks the fused
    # optimizer (it is returned, or its ``zero_grad`` is called here): the optimizer can be
    # fused on the paths where that call does not run (FusedPlanner keeps the written class
    # where it does).
    wrapper: ast.Call | None = None
    # A module's `zero_grad()` with torch's default `set_to_none` (``node`` is that call):
    # Ascend apex's `combine_grad` makes that default zero in place (NPU102's unfused path).
    module_default: bool = False

    @property
    def line(self) -> int:
        return line_of(self.node)


class FusionHazards:
    """The hazards of one file, computed once and looked up per optimizer constructor."""

    def __init__(
        self,
        view: FileView,
        flow: OptimizerFlow,
        returned: frozenset[int] = frozenset(),
        elements: Mapping[int, ast.Call] | None = None,
        elsewhere: HandedCode | None = None,
        after_ddp: Callable[[], Mapping[int, str]] | Mapping[int, str] | None = None,
    ) -> None:
        self.view = view
        self.index = view.index
        self.flow = flow
        # Calls of another module's method that return an optimizer (_method_callers): what
        # they give is held and zeroed as an optimizer built here would be.
        self.returned = returned
        # id(target) -> the call: `optimizer, scheduler = build(cfg)` where another module's
        # `build` returns its optimizer there (the factories' call sites); the target holds
        # what the call returns, as an optimizer built here would be held.
        self.elements: Mapping[int, ast.Call] = elements or {}
        # The functions and classes of other modules of the run that this file calls (_handed).
        self.elsewhere = elsewhere
        # The optimizer calls left after a DDP wrap of their model, with why (NPU203's plan),
        # or what computes them when first asked (most files never ask).
        self._after_ddp = after_ddp

    def _origins(self, expr: ast.expr) -> list[ast.expr]:
        """The flow's origins of ``expr``, with the call for an element it returns."""
        return [self.elements.get(id(o), o) for o in self.flow.origins(expr)]

    def _traced(self, expr: ast.expr) -> list[ast.expr]:
        """:meth:`_origins`, through the parameters of the module's functions."""
        found = self.flow.through_parameters(self.flow.origins(expr))
        return [self.elements.get(id(o), o) for o in found]

    def of(self, constructor: ast.Call, params: ast.expr | None) -> list[Hazard]:
        """The hazards for the optimizer that ``constructor`` builds from ``params``, in line
        order (see the module docstring for where they are looked for)."""
        units = self._units_of(constructor)
        found = list(self._own_zero_grads(constructor))
        found += self._wrapper_zero_grads(constructor)
        found += self._returned_wrappers(constructor)
        found += self._handed_elsewhere(constructor)
        found += [h for unit, h in self._module_zero_grads if id(unit) in units]
        found += [h for unit, h in self._grad_stores if id(unit) in units]
        found += [h for unit, h in self._default_dtypes if id(unit) in units]
        found += self._model_casts(units, params)
        found += self._sharing_optimizers(constructor, params)
        found += self._sparse_layers
        found += self._built_after_ddp(constructor)
        found.sort(key=lambda hazard: (hazard.line, hazard.node.col_offset))  # type: ignore[attr-defined]
        return found

    @cached_property
    def after_ddp(self) -> Mapping[int, str]:
        found = self._after_ddp
        if found is None:
            return {}
        return found() if callable(found) else found

    def _built_after_ddp(self, constructor: ast.Call) -> list[Hazard]:
        """The optimizer is built after its model's DDP wrap and stays there: Ascend documents
        that an optimizer created or changed after DDP initialisation only takes effect on the
        main card, and an NPU fused one re-packs the parameters and gradients that DDP's
        buckets were built on at its first step."""
        why = self.after_ddp.get(id(constructor))
        if why is None:
            return []
        effect = (
            f"{why}: on Ascend an optimizer built after DDP initialisation only takes effect on "
            "the main card, and an NPU fused one re-packs the parameters and gradients DDP was "
            "set up with"
        )
        remedy = "build it before the model is wrapped in DDP"
        return [Hazard(constructor, f"`{_short(self.view, constructor)}`", effect, remedy)]

    # -- where the optimizer lives -------------------------------------------------------------

    def unit_of(self, node: ast.AST) -> ast.AST:
        """The top-level function or method ``node`` is in (nested functions included), or the
        module for module-level code and class bodies."""
        unit: ast.AST = self.index.tree
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, ast.ClassDef):
                break
            if isinstance(ancestor, _FUNCTIONS):
                unit = ancestor
        return unit

    def _units_of(self, constructor: ast.Call) -> set[int]:
        units = {id(self.index.tree), id(self.unit_of(constructor))}
        for call, optimizers in self._optimizer_calls:
            if id(constructor) in optimizers:
                units.add(id(self.unit_of(call)))
        return units

    @cached_property
    def _optimizer_calls(self) -> list[tuple[ast.Call, set[int]]]:
        """Every ``x.step(...)`` / ``x.zero_grad(...)`` with the ids of the optimizer-like
        calls ``x`` may hold (empty when it holds none: a module, or something untraced)."""
        found: list[tuple[ast.Call, set[int]]] = []
        for method in ("step", "zero_grad"):
            for attribute in self.index.attributes(method):
                call = self.index.parent(attribute)
                if isinstance(call, ast.Call) and call.func is attribute:
                    found.append((call, self._optimizers_held(attribute.value)))
        return found

    def _optimizers_held(self, receiver: ast.expr) -> set[int]:
        """The optimizer-like calls ``receiver`` may hold, followed through the parameters of
        the module's functions (``train_epoch(model, optimizer, ...)``): the function that
        steps or zeroes it is one of its units, where ``model.zero_grad()`` is looked for."""
        held: set[int] = set()
        for origin in self._traced(receiver):
            if isinstance(origin, ast.Call) and self._builds_optimizer(origin, wrapper=True):
                held.add(id(origin))
        return held

    def _builds_optimizer(self, call: ast.Call, wrapper: bool) -> bool:
        """A known optimizer constructor, or (``wrapper``) a call given one: `hvd.Distributed
        Optimizer(optimizer)` and the like hand back something used as the optimizer."""
        if id(call) in self.returned:
            return True
        func = class_of(self.view, call)
        if self.view.may_name(func, _OPTIMIZER_ROOTS) and self._optimizer_class(func):
            return True
        if optimizer_lookup(self.view, call.func) or self._mapped_pick(call.func):
            return True  # `getattr(torch.optim, name)(params)`, as written or as NPU101 maps it
        if isinstance(call.func, ast.Name | ast.Subscript):
            # `proto(params)` where `proto` holds one of several optimizer classes, or a thin
            # subclass of them (EDSR's `CustomOptimizer(trainable, **kwargs)`), and
            # `OPTIMIZERS[name](params)` over a dict of them. One known optimizer class among
            # them is enough (a project's own `Lamb` beside torch's Adam): where the call gives
            # another, no NPU fused optimizer comes out of it, so what its result does then is
            # no hazard to one.
            callee = subclass_base(self.view, call) or call.func
            classes = self._origins(callee)
            if classes != [callee] and any(map(self._optimizer_class, classes)):
                return True
        if not wrapper:
            return False
        for arg in arguments(call):
            for origin in self._origins(arg.value):
                if isinstance(origin, ast.Call) and self._builds_optimizer(origin, wrapper=False):
                    return True
        return False

    def _mapped_pick(self, func: ast.expr) -> bool:
        """``{...: <NPU fused class>, ...}.get(key, default)``: the mapping NPU101 writes for a
        class chosen by name or as a value, which gives a fused class or the class as written
        (``default``: the lookup, or the class value)."""
        if not mapped_get(self.view, func):
            return False
        assert isinstance(func, ast.Call)
        if len(func.args) != 2:
            return False
        default = func.args[1]
        classes = self._origins(default)
        return optimizer_lookup(self.view, default) or (
            bool(classes) and all(map(self._optimizer_class, classes))
        )

    def _optimizer_class(self, node: ast.expr) -> bool:
        name = self.view.qualified_name_in(node, _OPTIMIZER_CLASSES)
        if isinstance(name, str) or npu_fused_name(self.view, node) is not None:
            return True
        name = self.view.qualified_name(node)  # any class of an optimizer module (Adagrad)
        return isinstance(name, str) and of_optimizer_module(name)

    # -- other optimizers over the same parameters ----------------------------------------------

    def _sharing_optimizers(self, constructor: ast.Call, params: ast.expr | None) -> list[Hazard]:
        """Another optimizer built in the same function from parameters of the same model (or
        a part of it), which may live beside this one: an NPU fused optimizer packs its
        parameters into flat buffers of its own at its first step, so a second fused one packs
        them again (the first then updates buffers the model no longer reads), and an unfused
        one sets their gradients to None in ``zero_grad()``. Two constructors on the two sides
        of an `if`, one returned before the other is built, assigned to the same name (the
        second replaces the first), or two values of a dict or list subscripted at once (nnUNet's
        `{"sgd": FusedSGD(...), "adam": FusedAdam(...)}[name]`) are alternatives, not
        neighbours."""
        mine = _models_named(self.flow, params)
        if not mine:
            return []
        scope = self.flow.scope_of(constructor)
        found: list[Hazard] = []
        for other in self._constructors:
            if other is constructor or self.flow.scope_of(other) is not scope:
                continue
            if any(a is other for a in self.index.ancestors(constructor)) or any(
                a is constructor for a in self.index.ancestors(other)
            ):
                continue  # one wraps the other: `Lookahead(SGD(...))`
            if self.alternatives(constructor, other):
                continue
            theirs = _models_named(self.flow, _params_argument(other))
            shared = sorted({m for m in mine for t in theirs if overlaps(m, t)})
            if not shared:
                continue
            found.append(
                Hazard(
                    other,
                    f"`{self.view.written(other.func)}(...)`",
                    f"also holds parameters of `{shared[0]}`, and NPU fused optimizers pack "
                    "their parameters into flat buffers of their own at their first step: a "
                    "second fused optimizer packs them again (the first then updates buffers "
                    "the model no longer reads), an unfused one sets their gradients to None "
                    "in `zero_grad()`",
                    "give each parameter to one optimizer (parameter groups with their own "
                    "settings), or build the second one after the first is no longer used",
                )
            )
        return found

    @cached_property
    def _constructors(self) -> list[ast.Call]:
        """The calls of the file that build an optimizer npu-migrate knows."""
        return [
            call
            for call in self.index.nodes(ast.Call)
            if self._builds_optimizer(call, wrapper=False)
            and not isinstance(self.view.qualified_name_in(call.func, FP16_OPTIMIZERS), str)
        ]

    def alternatives(self, first: ast.Call, second: ast.Call) -> bool:
        """``first`` and ``second`` never hold the parameters at once (see
        :meth:`_sharing_optimizers`)."""
        if self.flow.exclusive(first, second) or self.flow.exclusive(second, first):
            return True
        if self._opposite_arms(first, second):
            return True  # `NpuFusedAdam(...) if args.is_npu else torch.optim.Adam(...)`
        container = self.index.parent(first)
        if isinstance(container, ast.Dict | ast.List | ast.Tuple):
            picked = self.index.parent(container)
            if (
                self.index.parent(second) is container
                and isinstance(picked, ast.Subscript)
                and picked.value is container
            ):
                return True  # `{"sgd": SGD(...), "adam": Adam(...)}[name]`: one is kept
        earlier, later = sorted((first, second), key=line_of)
        # `return SGD(...)` ends the call: what comes after it never runs beside it.
        if isinstance(self.index.parent(earlier), ast.Return) and line_of(later) > line_of(earlier):
            return True
        statements = [self.index.parent(first), self.index.parent(second)]
        targets = [_assigned_name(statement) for statement in statements]
        return targets[0] is not None and targets[0] == targets[1]

    def _opposite_arms(self, first: ast.AST, second: ast.AST) -> bool:
        """``first`` and ``second`` are in the two arms of one conditional expression."""
        child = first
        for ancestor in self.index.ancestors(first):
            if isinstance(ancestor, ast.IfExp) and child is not ancestor.test:
                other = ancestor.orelse if child is ancestor.body else ancestor.body
                if second is other or any(a is other for a in self.index.ancestors(second)):
                    return True
            if isinstance(ancestor, ast.stmt):
                return False
            child = ancestor
        return False

    # -- code of other modules ------------------------------------------------------------------

    def _handed_elsewhere(self, constructor: ast.Call) -> Iterator[Hazard]:
        """Calls that pass the optimizer to a function, a class or a method (of another module
        of the run, or of this file) whose code resets gradients, and calls in the functions
        where the optimizer lives of such code given other things (SlowFast's
        ``contrastive_parameter_surgery(model, ...)`` between ``unscale_`` and ``step``, which
        sets some gradients to None); see :mod:`._handed`."""
        units = self._units_of(constructor)
        for call, callee, bound, built in self._calls_elsewhere:
            given = self._holding(bound, constructor)
            unit = self.unit_of(call)
            if not given and (unit is self.index.tree or id(unit) not in units):
                continue  # not given the optimizer, and not run where it is stepped
            assert self.elsewhere is not None
            # The parameters given any optimizer zero their own with `zero_grad()`: not a reset;
            # so do the elements of a list of optimizers unpacked there (`optim_g, optim_d =
            # optims`).
            holding = given | self._given_optimizers(bound)
            holding |= elements_held(bound, lambda element: bool(self._optimizers_held(element)))
            built_with: set[str] = set()
            built_with_it: set[str] = set()  # ... with this optimizer itself
            for instance in built:
                built_with_it |= self._holding(instance, constructor)
                built_with |= self._holding(instance, constructor) | self._given_optimizers(
                    instance
                )
            breaks = callee.wrapper["breaks"] if given and callee.wrapper is not None else []
            if breaks:
                where = ", ".join(
                    f"{os.path.normpath(callee.path or '')}:{line}" for line in breaks
                )
                yield Hazard(
                    call,
                    f"`{_short(self.view, call)}`",
                    f"hands it to {callee.shown()}, which stores a new tensor ({where}) in place "
                    "of optimizer state or of a parameter's `.data`, which an NPU fused "
                    "optimizer keeps in its flat buffers (it then keeps stepping the old one)",
                    "update those tensors in place there (`.zero_()`, `.copy_(...)`)",
                )
                continue
            resets = self.elsewhere.resets(callee, holding, built_with, traced_only=not given)
            if callee.path is None:
                resets = [r for r in resets if id(self._function_at(r.function)) not in units]
            verb = "hands it to" if given else "runs"
            resets = [reset for reset in resets if reset.effect != REACHES_AMP]
            # Only an `amp.initialize` of this very optimizer counts (not another one given to
            # the same call, nor one the instance was built with).
            amp = []
            if given or built_with_it:
                amp = [
                    reset
                    for reset in self.elsewhere.resets(callee, given, built_with_it)
                    if reset.effect == REACHES_AMP
                ]
                if callee.path is None:
                    amp = [r for r in amp if id(self._function_at(r.function)) not in units]
            if callee.path is None:
                # The flow follows the optimizer into the file's own functions' `amp.initialize`
                # (and places the class by it); not into a class's methods.
                reached = self.flow.amp_calls_reached.get(id(constructor), [])
                followed = {line_of(amp_call) for amp_call in reached}
                amp = [reset for reset in amp if reset.line not in followed]
            if amp:
                yield Hazard(
                    call,
                    f"`{_short(self.view, call)}`",
                    f"{verb} {callee.shown()}, where {amp[0].shown()}",
                    "pick its class where its path through amp is known (`apex.optimizers`' "
                    "where that code always runs `amp.initialize`, `torch_npu.optim`'s where it "
                    "never does)",
                )
            if not resets:
                continue
            fixable = self._fixable_resets(resets) if callee.path is None else None
            if fixable is not None:
                yield from fixable  # fixed as where the optimizer steps, if the planner proves it
                continue
            more = f" (and {len(resets) - 1} more reset there)" if len(resets) > 1 else ""
            yield Hazard(
                call,
                f"`{_short(self.view, call)}`",
                f"{verb} {callee.shown()}, where {resets[0].shown()}{more}",
                "keep that code's gradients in place (zero them with the optimizer's "
                "`zero_grad()`, write into them with `.copy_(...)`)",
            )

    def _fixable_resets(self, resets: Sequence[Reset]) -> list[Hazard] | None:
        """The hazards, with their edits, of ``resets`` met in this file's own functions when
        each is a module's ``zero_grad()`` that :attr:`_module_zero_grads` knows how to fix
        (SimCLR's ``test(args, loader, simclr_model, model, criterion, optimizer)``, given the
        optimizer but never stepping it, with ``model.zero_grad()``): the planner proves the
        edit at the function's calls as for a function that steps it. None otherwise."""
        found: list[Hazard] = []
        for reset in resets:
            function = self._function_at(reset.function)
            hazard = self._module_zero_grads_at.get((id(function), reset.line))
            if (
                hazard is None
                or hazard.fix is None
                or not any(function is statement for statement in self.index.tree.body)
                or not self._parameter_of(hazard.node, function)
            ):
                return None
            found.append(hazard)
        return found

    @cached_property
    def _module_zero_grads_at(self) -> dict[tuple[int, int], Hazard]:
        """:attr:`_module_zero_grads` by (id of the unit, line of the call)."""
        return {(id(unit), line_of(h.node)): h for unit, h in self._module_zero_grads}

    def _parameter_of(self, zero_grad: ast.AST, function: ast.AST | None) -> bool:
        """``zero_grad``'s receiver is a plain name bound only as a parameter of
        ``function`` (``model`` in ``def test(loader, model, ...)``)."""
        assert isinstance(zero_grad, ast.Call) and isinstance(zero_grad.func, ast.Attribute)
        receiver = zero_grad.func.value
        if not isinstance(receiver, ast.Name) or not isinstance(function, _FUNCTIONS):
            return False
        parameter = self.index.parameter_bound(receiver)
        return parameter is not None and any(parameter is a for a in ast.walk(function.args))

    @cached_property
    def _calls_elsewhere(self) -> list[tuple[ast.Call, Callee, _Bound, list[_Bound]]]:
        """The calls of this file that run code of another module of the run (or of this
        file's own functions and classes), each with the callee, the parameters its arguments
        are bound to and, for a method, how each call that built the receiver bound its class's
        ``__init__``."""
        if not self.elsewhere:
            return []
        found: list[tuple[ast.Call, Callee, _Bound, list[_Bound]]] = []
        for call in self.index.nodes(ast.Call):
            callee = self.elsewhere.callee(call.func)
            built: list[_Bound] = []
            if (
                callee is None
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in self.elsewhere.method_names
            ):
                instances = self._origins(call.func.value)
                callee = self.elsewhere.method(instances, call.func.attr)
                if callee is not None and callee.owner is not None:
                    constructor = Callee(callee.path, callee.owner, callee.facts)
                    built = [constructor.bind(i) for i in instances if isinstance(i, ast.Call)]
            if callee is not None:
                found.append((call, callee, callee.bind(call), built))
        return found

    # -- zero_grad -----------------------------------------------------------------------------

    def _own_zero_grads(self, constructor: ast.Call) -> Iterator[Hazard]:
        for call, optimizers in self._optimizer_calls:
            if id(constructor) not in optimizers or not _is_method(call, "zero_grad"):
                continue
            set_to_none = argument(call, "set_to_none", 0)
            if set_to_none is None:
                continue  # the fused optimizers default to zeroing in place
            value = literal_value(set_to_none.value)
            written = f"`{self.view.written(call)}`"
            # Dropping a plain flag or a literal loses nothing; a call may do something else.
            # Where the call may also zero another optimizer (a training function given each
            # in turn), only a literal True, torch's own default, may go: a flag that is false
            # there would turn that optimizer's zeros into None.
            shared = len(optimizers) > 1 and value is not True
            fix = GradFix(call) if _plain_value(set_to_none.value) and not shared else None
            if value is NOT_LITERAL:
                yield Hazard(
                    call,
                    written,
                    "raises ValueError in the NPU fused optimizers when "
                    f'`{self.view.written(set_to_none.value)}` is true ("set_to_none is not '
                    'supported in fused optimizers")',
                    "call `zero_grad()` without `set_to_none` there",
                    fix,
                )
            elif value:
                yield Hazard(
                    call,
                    written,
                    'raises ValueError in the NPU fused optimizers ("set_to_none is '
                    'not supported in fused optimizers")',
                    "call `zero_grad()` without `set_to_none` there (the fused optimizers zero "
                    "their flat gradient buffer in place)",
                    fix,
                )

    def _wrapper_zero_grads(self, constructor: ast.Call) -> Iterator[Hazard]:
        """``optimizer.zero_grad()`` where ``optimizer`` is a wrapper built around this one
        (timm's ``Lookahead(optimizer)``): the wrapper's own ``zero_grad``, torch's
        ``Optimizer.zero_grad`` for an Optimizer subclass, which sets the gradients of the
        shared parameter groups to None by default. Horovod's ``DistributedOptimizer`` is a
        subclass of the wrapped optimizer's own class: its ``zero_grad`` is the fused one's."""
        for call, given, held in self._zero_grad_wrappers:
            assert isinstance(call.func, ast.Attribute)
            wrappers = [
                origin
                for origin in given
                if origin is not constructor and self._wraps(origin, constructor)
            ]
            if not wrappers:
                continue
            set_to_none = argument(call, "set_to_none", 0)
            value = True if set_to_none is None else literal_value(set_to_none.value)
            if value is False:
                continue
            wrapper = wrappers[0]
            if set_to_none is None and self._zeroes_wrapped(wrapper, constructor):
                continue  # the optimizer's own zero_grad, as written
            written = f"`{self.view.written(call)}`"
            shown = f"`{self.view.written(wrapper.func)}(...)` (line {line_of(wrapper)})"
            run_class = self._run_wrapper(wrapper)
            optimizer_like = self._optimizer_wrapper(wrapper) and not (
                run_class is not None
                and run_class.wrapper is not None
                and run_class.wrapper["zero_grad"]
            )
            known = None if optimizer_like else self._known_zero_grad(wrapper, constructor)
            if known is not None and not known[1]:
                continue  # the project's wrapper zeroes in place (its code, followed)
            how = (
                "torch's Optimizer.zero_grad, which it inherits, sets the gradients to None by "
                "default"
                if optimizer_like
                else "npu-migrate does not know what its `zero_grad` does, and setting the "
                "gradients to None (torch's Optimizer.zero_grad's default) or replacing them"
            )
            effect = (
                f"is the `zero_grad` of {shown}, which wraps this optimizer: {how}, which "
                "detaches them from the NPU fused optimizer's flat gradient buffer (it then keeps "
                "stepping with stale gradients)"
            )
            if known is not None:
                callee, resets = known
                effect = (
                    f"is the `zero_grad` of {shown}, which wraps this optimizer: it runs "
                    f"{callee.shown()}, where {resets[0].shown()}"
                )
            remedy = (
                f"pass `set_to_none=False` to {written}"
                if optimizer_like
                else "zero the gradients in place there (`zero_()`, or the optimizer's own "
                "`zero_grad()`)"
            )
            plain = set_to_none is None or _plain_value(set_to_none.value)
            receiver = dotted_name(call.func.value)
            # `set_to_none=False` there is for every optimizer the call may zero: only where
            # each is this one or a wrapper of it (through a function's parameter, `train(model,
            # optimizer)` may also be given another optimizer elsewhere in the module).
            others = [
                origin
                for origin in held
                if origin is not constructor and all(origin is not w for w in wrappers)
            ]
            only_wrappers = not others
            if others and optimizer_like:
                other = others[0]
                shown_other = (
                    f"{self.view.written(other.func)}(...)"
                    if isinstance(other, ast.Call)
                    else self.view.written(other)
                )
                remedy += (
                    f" (which also zeroes `{shown_other}` (line {line_of(other)}): see that it "
                    "does not need None gradients)"
                )
            fix = (
                GradFix(call, receiver, wrapper=self.view.written(wrapper.func))
                if plain and optimizer_like and receiver is not None and only_wrappers
                else None
            )
            yield Hazard(call, written, effect, remedy, fix, wrapper=wrapper)

    def _known_zero_grad(
        self, wrapper: ast.Call, constructor: ast.Call
    ) -> tuple[Callee, list[Reset]] | None:
        """The ``zero_grad`` of a wrapper whose class is of the run (this file or another
        module) and defines it, with the resets it meets; None when it is not known."""
        if not self.elsewhere:
            return None
        callee = self.elsewhere.callee(wrapper.func)
        if callee is None or not callee.is_class:
            return None
        holding = self._holding(callee.bind(wrapper), constructor)
        resets = self.elsewhere.method_resets(callee, holding, "zero_grad")
        if resets is None:
            return None
        return Callee(callee.path, f"{callee.name}.zero_grad", callee.facts), resets

    def _given_optimizers(self, bound: _Bound) -> set[str]:
        """The parameters among ``bound`` given an optimizer (any of the file's)."""
        return {parameter for parameter, value in bound if self._optimizers_held(value)}

    def _holding(self, bound: _Bound, constructor: ast.Call) -> set[str]:
        """The parameters among ``bound`` that may be given the optimizer of ``constructor``."""
        holding: set[str] = set()
        for parameter, value in bound:
            origins = self._traced(value)
            if any(origin is constructor for origin in origins):
                holding.add(parameter)
        return holding

    def _returned_wrappers(self, constructor: ast.Call) -> Iterator[Hazard]:
        """An optimizer wrapper around this optimizer (timm's ``Lookahead``) that a ``return``
        hands to callers, whose ``optimizer.zero_grad()`` is then the wrapper's (ConvNeXt's
        ``create_optimizer`` for ``--opt lookahead_adamw``): no edit here can reach it. None
        where the wrapper's class is of another module of the run and its ``zero_grad`` is the
        wrapped optimizer's (NPU101 adds one to timm's ``Lookahead`` there)."""
        reported: set[int] = set()
        for statement, origin in self._returned_wrapper_calls:
            if id(origin) in reported or origin is constructor:
                continue
            if self._wraps(origin, constructor):
                reported.add(id(origin))
                if self._zeroes_wrapped(origin, constructor):
                    continue
                shown = f"`{self.view.written(origin.func)}(...)`"
                returned = f"wraps this optimizer and is returned (line {statement.lineno})"
                if self._known_zero_grad(origin, constructor) is not None:
                    # A class of the run with its own zero_grad: its code is followed where it
                    # is handed the optimizer (_handed_elsewhere).
                    continue
                effect = (
                    f"{returned}: its callers' `zero_grad()` is the wrapper's, torch's "
                    "Optimizer.zero_grad, which sets the gradients to None by default and "
                    "detaches them from the NPU fused optimizer's flat gradient buffer (it then "
                    "keeps stepping with stale gradients)"
                )
                remedy = "zero the gradients with `zero_grad(set_to_none=False)` where it is used"
                yield Hazard(origin, shown, effect, remedy, wrapper=origin)

    def _zeroes_wrapped(self, wrapper: ast.Call, constructor: ast.Call) -> bool:
        """``wrapper`` builds a wrapper class of another module of the run whose ``zero_grad``
        is the wrapped optimizer's (:meth:`HandedCode.zeroes_wrapped`): timm's ``Lookahead``,
        once NPU101 gives it one in its file."""
        callee = self._run_wrapper(wrapper)
        if callee is None:
            return False
        assert self.elsewhere is not None
        holding = self._holding(callee.bind(wrapper), constructor)
        return self.elsewhere.zeroes_wrapped(callee, holding)

    @cached_property
    def _returned_wrapper_calls(self) -> list[tuple[ast.Return, ast.Call]]:
        """The optimizer wrapper calls whose result a ``return`` of the file gives back."""
        found: list[tuple[ast.Return, ast.Call]] = []
        for statement in self.index.nodes(ast.Return):
            if statement.value is None:
                continue
            for origin in self._origins(statement.value):
                if isinstance(origin, ast.Call) and self._optimizer_wrapper(origin):
                    found.append((statement, origin))
        return found

    @cached_property
    def _zero_grad_wrappers(self) -> list[tuple[ast.Call, list[ast.Call], list[ast.expr]]]:
        """Each ``x.zero_grad(...)`` with the calls ``x`` may hold that are given something
        (candidate wrappers; which optimizer they wrap is asked per constructor), and all that
        ``x`` may hold (but the parameters that stand for what their calls pass, traced too)."""
        found: list[tuple[ast.Call, list[ast.Call], list[ast.expr]]] = []
        for call, _ in self._optimizer_calls:
            if not _is_method(call, "zero_grad"):
                continue
            assert isinstance(call.func, ast.Attribute)
            held = [o for o in self._traced(call.func.value) if not self.flow.parameters_of(o)]
            given = [o for o in held if isinstance(o, ast.Call) and arguments(o)]
            if given:
                found.append((call, given, held))
        return found

    def _wraps(self, call: ast.Call, constructor: ast.Call) -> bool:
        """``call`` is given the optimizer ``constructor`` builds and is not Horovod's
        ``DistributedOptimizer`` (nor `amp.initialize`, which the flow looks through, nor
        apex's ``FP16_Optimizer``, which NPU106 and NPU101 handle on their own)."""
        name = self.view.qualified_name_in(call.func, FP16_OPTIMIZERS)
        if isinstance(name, str):
            return False  # apex's FP16_Optimizer: NPU106 replaces it, else NPU101 reports it
        name = self.view.qualified_name(call.func)
        if isinstance(name, str) and name.rpartition(".")[2] == "DistributedOptimizer":
            return False
        return any(
            origin is constructor for arg in arguments(call) for origin in self._origins(arg.value)
        )

    def _optimizer_wrapper(self, call: ast.Call) -> bool:
        """``call`` builds an optimizer wrapper whose ``zero_grad`` takes ``set_to_none``: a
        class of an optimizer package (``timm.optim.Lookahead``, ``torchcontrib.optim.SWA``),
        or one whose name says so; not an LR scheduler (``torch.optim.lr_scheduler``, a
        ``...LR`` or ``...Scheduler`` class) nor ``torch.optim.swa_utils``' model averaging."""
        name = self.view.qualified_name(call.func)
        if isinstance(name, Ambiguous):
            return any(self._wrapper_name(candidate) for candidate in name.candidates)
        if not isinstance(name, str):
            return False
        return self._wrapper_name(name) or self._run_wrapper(call) is not None

    @staticmethod
    def _wrapper_name(name: str) -> bool:
        module, _, last = name.rpartition(".")
        if last in _OPTIMIZER_WRAPPERS:
            return True
        scheduler = "sched" in module.lower() or last.endswith(("LR", "Scheduler", "Lr"))
        return "optim" in module.lower() and not scheduler and not module.endswith("swa_utils")

    def _run_wrapper(self, call: ast.Call) -> Callee | None:
        """The subclass of torch's Optimizer, of another module of the run, that ``call``
        builds (:func:`._handed.optimizer_wrappers`)."""
        if not self.elsewhere:
            return None
        callee = self.elsewhere.callee(call.func)
        return callee if callee is not None and callee.wrapper is not None else None

    @cached_property
    def _module_zero_grads(self) -> list[tuple[ast.AST, Hazard]]:
        """``x.zero_grad()`` on something that holds no optimizer (a module, or untraced)
        that sets the gradients to None: torch >= 2.0's default, or ``set_to_none=True``."""
        found: list[tuple[ast.AST, Hazard]] = []
        for call, optimizers in self._optimizer_calls:
            if optimizers or not _is_method(call, "zero_grad") or self._own_method(call):
                continue
            assert isinstance(call.func, ast.Attribute)
            receiver = self.view.written(call.func.value)
            instance = self._zero_grad_elsewhere(call)
            if instance is not None:
                if instance.effect:
                    found.append((self.unit_of(call), instance))
                continue
            set_to_none = argument(call, "set_to_none", 0)
            value = True if set_to_none is None else literal_value(set_to_none.value)
            written = f"`{self.view.written(call)}`"
            if value is NOT_LITERAL:
                assert set_to_none is not None
                effect = (
                    "sets the gradients to None when "
                    f"`{self.view.written(set_to_none.value)}` is true, which detaches them from "
                    "the NPU fused optimizer's flat gradient buffer (it then keeps stepping with "
                    "stale gradients)"
                )
            elif value:
                default = MODULE_DEFAULT if set_to_none is None else ""
                effect = SETS_NONE.format(default=default)
            else:
                continue
            remedy = (
                f"use `optimizer.zero_grad()` (zeroes in place) instead of "
                f"`{receiver}.zero_grad(...)`, or pass `set_to_none=False`"
            )
            plain = set_to_none is None or _plain_value(set_to_none.value)
            model = dotted_name(call.func.value)
            fix = GradFix(call, model) if plain and model is not None else None
            hazard = Hazard(call, written, effect, remedy, fix, module_default=set_to_none is None)
            found.append((self.unit_of(call), hazard))
        return found

    def _function_at(self, line: int) -> ast.AST | None:
        """The top-level function or method of the file defined at ``line``."""
        return self._functions_by_line.get(line)

    @cached_property
    def _functions_by_line(self) -> dict[int, ast.AST]:
        found: dict[int, ast.AST] = {}
        for statement in self.index.tree.body:
            members = statement.body if isinstance(statement, ast.ClassDef) else [statement]
            for member in members:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[member.lineno] = member
        return found

    def _zero_grad_elsewhere(self, call: ast.Call) -> Hazard | None:
        """``trainer.zero_grad()`` on an instance of a class of another module of the run that
        defines it: a hazard (with an empty effect when its code keeps the gradients in place),
        or None for any other receiver."""
        assert isinstance(call.func, ast.Attribute)
        if not self.elsewhere:
            return None
        if "zero_grad" not in self.elsewhere.method_names:
            return None
        callee = self.elsewhere.method(self._origins(call.func.value), "zero_grad")
        if callee is None:
            return None
        resets = self.elsewhere.resets(callee, set())
        effect = f"runs {callee.shown()}, where {resets[0].shown()}" if resets else ""
        remedy = "zero the gradients in place there (`optimizer.zero_grad()`)"
        return Hazard(call, f"`{_short(self.view, call)}`", effect, remedy)

    def _own_method(self, call: ast.Call) -> bool:
        """``self.zero_grad()`` in a class that defines its own ``zero_grad`` (a trainer that
        forwards to its optimizer, not a module)."""
        assert isinstance(call.func, ast.Attribute)
        if not isinstance(call.func.value, ast.Name) or call.func.value.id != "self":
            return False
        owner = next((a for a in self.index.ancestors(call) if isinstance(a, ast.ClassDef)), None)
        return owner is not None and any(
            isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef))
            and statement.name == "zero_grad"
            for statement in owner.body
        )

    # -- gradients replaced --------------------------------------------------------------------

    @cached_property
    def _grad_stores(self) -> list[tuple[ast.AST, Hazard]]:
        """``p.grad = None``, ``p.grad = t``, ``del p.grad`` (not ``p.grad /= n``: a tensor's
        augmented operators work in place and store the same tensor back)."""
        found: list[tuple[ast.AST, Hazard]] = []
        for attribute in self.index.attributes("grad"):
            if isinstance(attribute.ctx, ast.Load):
                continue
            statement = self.index.statement_of(attribute)
            if statement is None:
                continue
            if isinstance(statement, ast.AugAssign) and statement.target is attribute:
                continue  # `p.grad /= n`: the tensor's in-place operator, stored back as is
            target = self.view.written(attribute)
            value = getattr(statement, "value", None)
            fix = None
            if isinstance(statement, ast.Delete) or (
                isinstance(value, ast.Constant) and value.value is None
            ):
                written = f"`{target} = None`" if value is not None else f"`del {target}`"
                effect = DROPS
                remedy = f"{_ZERO_IN_PLACE} instead of setting them to None"
                fix = self._none_loop_fix(statement, attribute)
            else:
                written = f"`{target} = ...`"
                effect = REPLACES
                remedy = f"write into the existing gradient in place (`{target}.copy_(...)`)"
            hazard = Hazard(attribute, written, effect, remedy, fix)
            found.append((self.unit_of(attribute), hazard))
        return found

    def _none_loop_fix(self, statement: ast.stmt, attribute: ast.Attribute) -> GradFix | None:
        """``for p in model.parameters(): p.grad = None`` (the whole loop, no comment in it):
        the same as ``model.zero_grad(set_to_none=True)``, fixed as that call is."""
        loop = self.index.parent(statement)
        if not (
            isinstance(statement, ast.Assign)
            and isinstance(loop, ast.For)
            and loop.body == [statement]
            and not loop.orelse
            and isinstance(loop.target, ast.Name)
            and isinstance(attribute.value, ast.Name)
            and attribute.value.id == loop.target.id
            and statement.targets == [attribute]
        ):
            return None
        iterated = loop.iter
        if not (
            isinstance(iterated, ast.Call)
            and isinstance(iterated.func, ast.Attribute)
            and iterated.func.attr == "parameters"
            and not iterated.args
            and not iterated.keywords
        ):
            return None
        model = dotted_name(iterated.func.value)
        lines = range(loop.lineno, (loop.end_lineno or loop.lineno) + 1)
        if model is None or any("#" in self.view.source.line_text(n) for n in lines):
            return None  # a comment in the loop would be lost with it
        return GradFix(iterated, model, loop=loop)

    # -- dtypes --------------------------------------------------------------------------------

    @cached_property
    def _default_dtypes(self) -> list[tuple[ast.AST, Hazard]]:
        """``torch.set_default_dtype(torch.bfloat16)``."""
        found: list[tuple[ast.AST, Hazard]] = []
        for attribute in self.index.attributes("set_default_dtype"):
            call = self.index.parent(attribute)
            if not isinstance(call, ast.Call) or call.func is not attribute or not call.args:
                continue
            if self.view.qualified_name(attribute) != "torch.set_default_dtype":
                continue
            refused = self._refused_dtype(call.args[0])
            if refused is not None:
                effect = (
                    f"makes new parameters {refused}, and the NPU fused optimizers take only "
                    "float32 and float16 parameters (TypeError at the first step)"
                )
                remedy = _KEEP_FLOAT32
                written = f"`{self.view.written(call)}`"
                found.append((self.unit_of(call), Hazard(call, written, effect, remedy)))
        return found

    def _refused_dtype(self, node: ast.expr) -> str | None:
        name = self.view.qualified_name(node)
        return _REFUSED_DTYPES.get(name) if isinstance(name, str) else None

    def _model_casts(self, units: set[int], params: ast.expr | None) -> list[Hazard]:
        """Casts to a refused dtype of the model whose ``.parameters()`` feed the optimizer:
        ``model.bfloat16()``, ``model.to(torch.bfloat16)``, ``model = Net().to(dtype=...)``."""
        models = models_feeding(self.flow, params)
        if not models:
            return []
        found: list[Hazard] = []
        for call, dtype in self._dtype_casts:
            if id(self.unit_of(call)) not in units or not self._casts_model(call, models):
                continue
            written = f"`{self.view.written(call)}`"
            if dtype is None:
                effect = (
                    "may cast this optimizer's parameters to a dtype the NPU fused "
                    "optimizers refuse (they take only float32 and float16; TypeError at the "
                    "first step)"
                )
            else:
                effect = (
                    f"casts this optimizer's parameters to {dtype}, and the NPU fused "
                    "optimizers take only float32 and float16 parameters (TypeError at the "
                    "first step)"
                )
            remedy = _KEEP_FLOAT32
            found.append(Hazard(call, written, effect, remedy, loud=dtype is None))
        return found

    def _casts_model(self, call: ast.Call, models: set[str]) -> bool:
        """``call`` casts ``model`` (``model.cuda().bfloat16()``), or its value is assigned to
        it (``model = Net().to(torch.bfloat16)``)."""
        assert isinstance(call.func, ast.Attribute)
        if dotted_name(_strip_method_calls(call.func.value)) in models:
            return True
        statement = self.index.statement_of(call)
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            return any(dotted_name(target) in models for target in targets)
        return False

    @cached_property
    def _dtype_casts(self) -> list[tuple[ast.Call, str | None]]:
        """``x.bfloat16()``, ``x.double()``, ``x.to(...)`` / ``x.type(...)`` with a refused dtype;
        the dtype's name, or None for ``dtype=<run-time value>``."""
        found: list[tuple[ast.Call, str | None]] = []
        for method, dtype in _REFUSED_DTYPE_METHODS.items():
            for attribute in self.index.attributes(method):
                call = self.index.parent(attribute)
                if isinstance(call, ast.Call) and call.func is attribute and not call.args:
                    found.append((call, dtype))
        for method in ("to", "type"):
            for attribute in self.index.attributes(method):
                call = self.index.parent(attribute)
                if isinstance(call, ast.Call) and call.func is attribute:
                    casts, refused = self._cast_dtype(call)
                    if casts:
                        found.append((call, refused))
        return found

    def _cast_dtype(self, call: ast.Call) -> tuple[bool, str | None]:
        """Whether ``call`` may cast to a refused dtype, and which (None: ``dtype=`` is a
        run-time value)."""
        for arg in call.args:
            refused = self._refused_dtype(arg)
            if refused is not None:
                return True, refused
        for keyword in call.keywords:
            if keyword.arg != "dtype":
                continue
            refused = self._refused_dtype(keyword.value)
            if refused is not None:
                return True, refused
            name = self.view.qualified_name(keyword.value)
            return not (isinstance(name, str) and name in _ACCEPTED_DTYPES), None
        return False, None

    # -- sparse gradients ----------------------------------------------------------------------

    @cached_property
    def _sparse_layers(self) -> list[Hazard]:
        """``nn.Embedding(..., sparse=True)`` (or a run-time ``sparse=``) anywhere in the file."""
        found: list[Hazard] = []
        for call in self.index.nodes(ast.Call):
            sparse = next((k for k in call.keywords if k.arg == "sparse"), None)
            if sparse is None or not self.view.may_name(call.func, NPU1_ROOTS):
                continue
            name = self.view.qualified_name(call.func)
            if not isinstance(name, str) or name not in _SPARSE_LAYERS:
                continue
            value = literal_value(sparse.value)
            layer = self.view.written(call.func)
            if value is NOT_LITERAL:
                written = f"`{layer}(..., sparse={self.view.written(sparse.value)})`"
                effect = (
                    "makes sparse gradients when that is true, which the NPU fused optimizers "
                    "do not support"
                )
            elif value:
                written = f"`{layer}(..., sparse=True)`"
                effect = "makes sparse gradients, which the NPU fused optimizers do not support"
            else:
                continue
            remedy = (
                "use dense embeddings (`sparse=False`), or keep the embedding's parameters in an "
                "unfused optimizer of their own"
            )
            found.append(Hazard(call, written, effect, remedy))
        return found


def models_feeding(flow: OptimizerFlow, params: ast.expr | None) -> set[str]:
    """The spellings of ``x`` in the ``x.parameters()`` / ``x.named_parameters()`` calls that
    ``params`` (an optimizer's first argument) comes from: ``model``, ``self.model``; and of
    what ``x`` may be a part or another name of: ``model.layers`` for ``model.layers[0]``,
    ``netG.body`` for ``block`` in ``for block in netG.body[1:]``, the names an assignment to
    ``x`` mentions (``netG.head`` for ``part = netG.head``, ``net`` for ``model = DDP(net)``).
    A list grown with ``params += [...]`` is followed through what is added."""
    if params is None:
        return set()
    models: set[str] = set()
    for receiver in _parameter_receivers(_params_sources(flow, params)):
        models |= _receiver_spellings(flow, receiver)
    return models


def _params_sources(flow: OptimizerFlow, params: ast.expr) -> list[ast.expr]:
    """``params`` and its origins, with what ``x += <value>`` adds to a name among them."""
    found = [params, *flow.origins(params)]
    for origin in list(found):
        if not isinstance(origin, ast.Name):
            continue
        for binding in flow.index.bindings_of(origin):
            parent = flow.index.parent(binding.node) if binding.node is not None else None
            if isinstance(parent, ast.AugAssign) and parent.target is binding.node:
                found.append(parent.value)
    return found


def _receiver_spellings(flow: OptimizerFlow, receiver: ast.expr) -> set[str]:
    """The spelling of the module in ``receiver.parameters()`` and of what it may be a part or
    another name of (see :func:`models_feeding`)."""
    base = receiver
    while True:
        if isinstance(base, ast.Subscript):
            base = base.value
        elif isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
            base = base.func.value
        else:
            break
    spelled = dotted_name(base)
    if spelled is None:
        return set()
    found = {spelled}
    for origin in flow.origins(base):
        if origin is not base:
            found.update(_mentioned(origin))
            continue
        root = base_name(base)
        for binding in flow.index.bindings_of(root) if root is not None else []:
            iterable = _iterated_by(flow.index, binding.node)
            if iterable is not None:
                found.update(_mentioned(iterable))
    return found


def _iterated_by(index: ModuleIndex, target: ast.AST | None) -> ast.expr | None:
    """The iterable of the ``for`` loop or comprehension whose target binds ``target``."""
    if target is None:
        return None
    node, parent = target, index.parent(target)
    while isinstance(parent, (ast.Tuple, ast.List, ast.Starred)):
        node, parent = parent, index.parent(parent)
    if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.target is node:
        return parent.iter
    return None


def _mentioned(expression: ast.AST) -> Iterator[str]:
    """The dotted names ``expression`` computes its value from: the receivers of its method
    calls, the arguments of its calls, what it subscripts (not the callees, nor the index)."""
    pending: list[ast.AST] = [expression]
    while pending:
        node = pending.pop()
        spelled = dotted_name(node)
        if spelled is not None:
            yield spelled
        elif isinstance(node, ast.Call):
            pending += [*node.args, *(keyword.value for keyword in node.keywords)]
            if isinstance(node.func, ast.Attribute):
                pending.append(node.func.value)
        elif isinstance(node, ast.Subscript):
            pending.append(node.value)
        else:
            pending += ast.iter_child_nodes(node)


def whole_models(view: FileView, params: ast.expr | None) -> frozenset[str]:
    """The models every parameter of which is in an optimizer built from ``params``, by their
    spelling: ``model`` for ``model.parameters()``, and each model whose ``.parameters()`` is
    put in whole into a concatenation: ``itertools.chain(g.parameters(), e.parameters())``,
    ``list(g.parameters()) + list(e.parameters())``, ``[*g.parameters(), *e.parameters()]``,
    parameter groups ``[{"params": g.parameters(), "lr": ...}, ...]``.

    The parameters that require gradients count as the whole model:
    ``filter(lambda p: p.requires_grad, model.parameters())``, ``[p for p in
    model.parameters() if p.requires_grad]`` (or over ``model.named_parameters()``). A
    parameter left out gets no gradient from backward, and one that still holds an old gradient
    is in no optimizer that could step it (no other optimizer may hold the model's parameters,
    see the NPU101 planner): zeros or None there change nothing.

    A name stands for its value only when that is its one binding in its scope and this is its
    one read: an iterator read elsewhere first may be partly consumed, a list changed in place
    (``params.pop()``), a name bound twice may hold another value on some path. Anything else
    (a condition, another filter) holds no model whole."""
    return _whole_models(view, params, 0) if params is not None else frozenset()


def _whole_models(view: FileView, node: ast.expr, depth: int) -> frozenset[str]:
    if depth > _WHOLE_DEPTH:
        return frozenset()
    depth += 1
    if isinstance(node, ast.Name):
        value = _only_value(view, node)
        return _whole_models(view, value, depth) if value is not None else _grown(view, node, depth)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _whole_models(view, node.left, depth) | _whole_models(view, node.right, depth)
    if isinstance(node, (ast.List, ast.Tuple)):
        found: frozenset[str] = frozenset()
        groups: list[ast.expr] = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                found |= _whole_models(view, element.value, depth)
            elif isinstance(element, ast.Dict):
                group = group_params(element)
                if group is not None:
                    found |= _whole_models(view, group, depth)
                    groups.append(group)
        return found | _split_models(view, node, groups)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return _trainable_models(view, node, depth)
    if not isinstance(node, ast.Call) or node.keywords:
        return frozenset()
    if isinstance(node.func, ast.Attribute) and node.func.attr == "parameters" and not node.args:
        model = dotted_name(node.func.value)
        return frozenset({model}) if model is not None else frozenset()
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        return frozenset()
    callee = view.qualified_name(node.func)
    if callee == "itertools.chain" or (callee in _COPIES and len(node.args) == 1):
        return frozenset().union(*(_whole_models(view, arg, depth) for arg in node.args))
    if callee == "builtins.filter" and len(node.args) == 2 and _keeps_trainable(node.args[0]):
        return _whole_models(view, node.args[1], depth)
    return frozenset()


def _keeps_trainable(function: ast.expr) -> bool:
    """``lambda p: p.requires_grad``."""
    if not isinstance(function, ast.Lambda):
        return False
    arguments = function.args
    if arguments.posonlyargs or arguments.vararg or arguments.kwonlyargs or arguments.kwarg:
        return False
    if len(arguments.args) != 1 or arguments.defaults:
        return False
    return _is_requires_grad(function.body, arguments.args[0].arg)


def _trainable_models(
    view: FileView, comprehension: ast.ListComp | ast.GeneratorExp, depth: int
) -> frozenset[str]:
    """The whole models of ``[p for p in <params> if p.requires_grad]`` (the test optional):
    those of ``<params>``; ``model`` for ``(p for n, p in model.named_parameters())``, which
    yields every parameter ``model.parameters()`` does. Nothing for any other comprehension."""
    if len(comprehension.generators) != 1 or not isinstance(comprehension.elt, ast.Name):
        return frozenset()
    loop = comprehension.generators[0]
    name = comprehension.elt.id
    if loop.is_async or len(loop.ifs) > 1:
        return frozenset()
    if loop.ifs and not _is_requires_grad(loop.ifs[0], name):
        return frozenset()
    target, iterated = loop.target, loop.iter
    if isinstance(target, ast.Name) and target.id == name:
        return _whole_models(view, iterated, depth)
    key, value = (
        target.elts if isinstance(target, ast.Tuple) and len(target.elts) == 2 else (None, None)
    )
    if not (
        isinstance(key, ast.Name)
        and isinstance(value, ast.Name)
        and value.id == name != key.id
        and isinstance(iterated, ast.Call)
        and isinstance(iterated.func, ast.Attribute)
        and iterated.func.attr == "named_parameters"
        and not iterated.args
        and not iterated.keywords
    ):
        return frozenset()
    model = dotted_name(iterated.func.value)
    return frozenset({model}) if model is not None else frozenset()


def _split_models(
    view: FileView, display: ast.List | ast.Tuple, groups: list[ast.expr]
) -> frozenset[str]:
    """The models whose parameters two groups of ``display`` split by one test and its negation:
    BERT's ``no_decay`` groups, ``[p for n, p in model.named_parameters() if not any(nd in n
    for nd in no_decay)]`` and ``[... if any(nd in n for nd in no_decay)]``, together hold every
    parameter of ``model`` (each may also keep only those that require gradients). The test
    must read the same in both: names, attributes, constants, operators, ``any``/``all`` and
    string tests, and the display calls nothing else that could change what it reads."""
    if any(_changes_something(view, node) for node in ast.walk(display)):
        return frozenset()
    split: dict[tuple[str, str], set[bool]] = {}  # (model, test as written) -> polarities
    for group in groups:
        parts = _named_filter(view, group)
        if parts is not None:
            model, test, holds = parts
            split.setdefault((model, test), set()).add(holds)
    return frozenset(model for (model, _), polarities in split.items() if len(polarities) == 2)


def _named_filter(view: FileView, group: ast.expr) -> tuple[str, str, bool] | None:
    """``[p for n, p in model.named_parameters() if <test>]``: (``model``, the test as
    ``ast.dump`` gives it without a leading ``not``, whether it is not negated). A
    ``p.requires_grad`` conjunct is left out (see :func:`whole_models`). The pairs may come
    from a list of them, ``param_optimizer = list(model.named_parameters())``, that nothing
    but such loops reads."""
    if not isinstance(group, ast.ListComp | ast.GeneratorExp) or len(group.generators) != 1:
        return None
    loop = group.generators[0]
    target, iterated = loop.target, loop.iter
    if loop.is_async or len(loop.ifs) != 1 or not isinstance(group.elt, ast.Name):
        return None
    if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
        return None
    key, value = target.elts
    if not (isinstance(key, ast.Name) and isinstance(value, ast.Name)):
        return None
    if value.id != group.elt.id or key.id == value.id:
        return None
    pairs = _listed_pairs(view, iterated) if isinstance(iterated, ast.Name) else iterated
    model = _named_parameters_of(pairs)
    test = loop.ifs[0]
    terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    kept = [term for term in terms if not _is_requires_grad(term, value.id)]
    if model is None or len(kept) != 1:
        return None
    [term] = kept
    holds = not (isinstance(term, ast.UnaryOp) and isinstance(term.op, ast.Not))
    if not holds:
        assert isinstance(term, ast.UnaryOp)
        term = term.operand
    if isinstance(term, ast.Compare) and len(term.ops) == 1:
        # `n[-4:] != "bias"` is `not (n[-4:] == "bias")` (faster-rcnn's RFCN groups): `not in`
        # and `is not` are by definition, `!=` for the strings and numbers a name test reads.
        positive = _NEGATED.get(type(term.ops[0]))
        if positive is not None:
            term = ast.Compare(left=term.left, ops=[positive()], comparators=term.comparators)
            holds = not holds
    return model, ast.dump(term), holds


_NEGATED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.NotEq: ast.Eq,
    ast.NotIn: ast.In,
    ast.IsNot: ast.Is,
}


def _named_parameters_of(node: ast.expr | None) -> str | None:
    """``model`` of ``model.named_parameters()``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "named_parameters"
        and not node.args
        and not node.keywords
    ):
        return dotted_name(node.func.value)
    return None


def _listed_pairs(view: FileView, name: ast.Name) -> ast.expr | None:
    """``model.named_parameters()`` of ``name = list(model.named_parameters())`` when that is
    the one binding of ``name`` and every read of it is the iterable of a comprehension."""
    bindings = view.index.bindings_of(name)
    if len(bindings) != 1:
        return None
    value = bindings[0].assigned_value
    if not (
        isinstance(value, ast.Call)
        and len(value.args) == 1
        and not value.keywords
        and view.qualified_name(value.func) == "builtins.list"
    ):
        return None
    for read in view.index.references(bindings[0]):
        loop = view.index.parent(read)
        if not (isinstance(loop, ast.comprehension) and loop.iter is read):
            return None
    return value.args[0]


# What a test of the parameter names may call: it reads, and changes nothing.
_NAME_TESTS = frozenset({"any", "all", "startswith", "endswith", "named_parameters"})


def _changes_something(view: FileView, node: ast.AST) -> bool:
    """A call other than the reads of :data:`_NAME_TESTS`, or an assignment expression."""
    if isinstance(node, ast.NamedExpr):
        return True
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr not in _NAME_TESTS
    if isinstance(func, ast.Name) and func.id in ("any", "all"):
        return view.qualified_name(func) != f"builtins.{func.id}"
    return True


def _is_requires_grad(test: ast.expr, name: str) -> bool:
    """``<name>.requires_grad``."""
    return (
        isinstance(test, ast.Attribute)
        and test.attr == "requires_grad"
        and isinstance(test.value, ast.Name)
        and test.value.id == name
    )


def _grown(view: FileView, name: ast.Name, depth: int) -> frozenset[str]:
    """The models of ``params = []`` grown by one loop over a model's parameters that adds each
    parameter it meets on every path through its body: ``model`` for faster-rcnn.pytorch's
    per-parameter groups (``for key, value in dict(model.named_parameters()).items(): if
    value.requires_grad: params += [{"params": [value], ...}]``) and for
    deep-text-recognition-benchmark's ``for p in filter(lambda p: p.requires_grad,
    model.parameters()): filtered.append(p)``.

    The loop goes over ``model.named_parameters()`` (or ``dict(...).items()`` of it) with a
    ``(name, value)`` target, or with one target over what :func:`whole_models` holds whole. Its
    body adds ``value`` (or a group ``{"params": [value], ...}``) with ``params.append(...)`` or
    ``params += [...]``, under an optional ``if value.requires_grad:`` or in both arms of an
    ``if``; its other statements may do anything but rebind ``value`` (they cannot name
    ``params``: every read of it is accounted for). ``params`` is bound nowhere else and read
    only by ``name`` (and other optimizer constructors); the loop has no ``break`` or
    ``continue``."""
    index = view.index
    bindings = index.bindings_of(name)
    starts = [binding for binding in bindings if binding.statement is not None]
    if len(starts) != 1:
        return frozenset()
    start = starts[0].statement
    if not (isinstance(start, ast.Assign) and isinstance(start.value, ast.List)):
        return frozenset()
    reads = [read for binding in bindings for read in index.references(binding)]
    appends = [read for read in reads if _appended(index, read) is not None]
    others = [read for read in reads if all(read is not other for other in appends)]
    if start.value.elts or not _read_whole(view, name, others):
        return frozenset()
    growing = [
        index.parent(binding.node)
        for binding in bindings
        if binding.statement is None and binding.node is not None
    ]
    growing += [_appended(index, read) for read in appends]
    loops = [_loop_around(index, statement) for statement in growing]
    loop = loops[0] if loops else None
    if loop is None or any(other is not loop for other in loops):
        return frozenset()
    if not start.lineno < loop.lineno < name.lineno or loop.orelse:
        return frozenset()
    if any(isinstance(node, ast.Break | ast.Continue) for node in ast.walk(loop)):
        return frozenset()
    target, iterated = loop.target, loop.iter
    if isinstance(target, ast.Name):
        models = _whole_models(view, iterated, depth)
        value: ast.expr = target
    elif isinstance(target, ast.Tuple) and len(target.elts) == 2:
        value = target.elts[1]
        if (
            isinstance(iterated, ast.Call)
            and isinstance(iterated.func, ast.Attribute)
            and iterated.func.attr == "items"
            and not iterated.args
            and isinstance(iterated.func.value, ast.Call)
            and view.qualified_name(iterated.func.value.func) == "builtins.dict"
            and len(iterated.func.value.args) == 1
        ):
            iterated = iterated.func.value.args[0]  # `dict(model.named_parameters()).items()`
        model = _named_parameters_of(iterated)
        models = frozenset({model}) if model is not None else frozenset()
    else:
        return frozenset()
    if not isinstance(value, ast.Name) or _rebinds(loop.body, value.id):
        return frozenset()
    growth = [s for s in loop.body if any(s is g or _contains(s, g) for g in growing)]
    if len(growth) != 1 or not _adds_each(growth[0], name.id, value.id, top=True):
        return frozenset()
    return models


def _appended(index: ModuleIndex, read: ast.AST) -> ast.Expr | None:
    """The statement ``params.append(<one argument>)`` whose ``params`` is ``read``."""
    call = index.method_call(read, "append")
    statement = index.parent(call) if call is not None else None
    return statement if isinstance(statement, ast.Expr) else None


def _loop_around(index: ModuleIndex, statement: ast.AST | None) -> ast.For | None:
    """The innermost ``for`` loop of the same function around ``statement``."""
    if statement is None:
        return None
    for ancestor in index.ancestors(statement):
        if isinstance(ancestor, ast.For):
            return ancestor
        if isinstance(ancestor, (*_FUNCTIONS, ast.ClassDef)):
            return None
    return None


def _contains(statement: ast.stmt, node: ast.AST | None) -> bool:
    return any(child is node for child in ast.walk(statement))


def _rebinds(body: list[ast.stmt], name: str) -> bool:
    """A statement of ``body`` assigns or deletes ``name``."""
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store | ast.Del)
        for statement in body
        for node in ast.walk(statement)
    )


def _adds_each(statement: ast.stmt, params: str, value: str, top: bool = False) -> bool:
    """Every path through ``statement`` adds ``value`` to ``params`` once (see :func:`_grown`):
    ``params.append(item)``, ``params += [item]``, both arms of an ``if`` doing so, or (as the
    loop body's own statement, ``top``) ``if value.requires_grad:`` around one of those."""
    if isinstance(statement, ast.If):
        arms = [statement.body, statement.orelse]
        if not statement.orelse:
            if not (top and _is_requires_grad(statement.test, value)):
                return False
            arms = [statement.body]
        return all(len(arm) == 1 and _adds_each(arm[0], params, value, top=False) for arm in arms)
    if isinstance(statement, ast.Expr):
        call = statement.value
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == params
            and call.func.attr == "append"
            and len(call.args) == 1
        ):
            return False
        return _is_item(call.args[0], value)
    if (
        isinstance(statement, ast.AugAssign)
        and isinstance(statement.op, ast.Add)
        and isinstance(statement.target, ast.Name)
        and statement.target.id == params
        and isinstance(statement.value, ast.List)
        and len(statement.value.elts) == 1
    ):
        return _is_item(statement.value.elts[0], value)
    return False


def _is_item(item: ast.expr, value: str) -> bool:
    """``value``, or the group ``{"params": [value], ...}``."""
    if isinstance(item, ast.Dict):
        group = group_params(item)
        return (
            isinstance(group, ast.List)
            and len(group.elts) == 1
            and isinstance(group.elts[0], ast.Name)
            and group.elts[0].id == value
        )
    return isinstance(item, ast.Name) and item.id == value


def _only_value(view: FileView, name: ast.Name) -> ast.expr | None:
    """What ``name = <value>`` gave ``name`` when that is its only binding and ``name`` is
    read nowhere else."""
    bindings = view.index.bindings_of(name)
    if len(bindings) != 1:
        return None
    value = bindings[0].assigned_value
    references = view.index.references(bindings[0])
    if value is None or not references or not _read_whole(view, name, references):
        return None
    if len(references) > 1 and not _is_list(view, value):
        return None  # an iterator: a second constructor may get what the first left of it
    return value


def _read_whole(view: FileView, name: ast.Name, reads: Sequence[ast.AST]) -> bool:
    """``name`` is among ``reads``, and every other read hands the list to another optimizer
    constructor, which copies it (faster-rcnn.pytorch's `torch.optim.Adam(params)` and
    `torch.optim.SGD(params, ...)` in the arms of `if args.optimizer == ...`): the list is
    the same for each of them, and the owners are then weighed one at a time."""
    if not any(read is name for read in reads):
        return False
    for read in reads:
        if read is name:
            continue
        call = view.index.parent(read)
        if not (isinstance(call, ast.Call) and call.args and call.args[0] is read):
            return False
        if not isinstance(view.qualified_name_in(class_of(view, call), KNOWN_OPTIMIZERS), str):
            return False
    return True


def _is_list(view: FileView, value: ast.expr) -> bool:
    """A list display or comprehension, or ``list(...)``: read twice, it gives the same items."""
    if isinstance(value, ast.List | ast.ListComp):
        return True
    return isinstance(value, ast.Call) and view.qualified_name(value.func) == "builtins.list"


def group_params(group: ast.Dict) -> ast.expr | None:
    """The ``"params"`` of a parameter group written as a dict display (with no ``**other``,
    or a computed key, either of which could replace them)."""
    if not all(isinstance(key, ast.Constant) for key in group.keys):
        return None
    values = [
        value
        for key, value in zip(group.keys, group.values, strict=True)
        if isinstance(key, ast.Constant) and key.value == "params"
    ]
    return values[0] if len(values) == 1 else None


def overlaps(model: str, other: str) -> bool:
    """``model`` and ``other`` may share parameters: the same spelling, or one a part of the
    other (``model`` and ``model.head``)."""
    return model == other or model.startswith(other + ".") or other.startswith(model + ".")


def _plain_value(node: ast.expr) -> bool:
    """A literal, a name or an attribute of names: removing or replacing it does nothing else."""
    return isinstance(node, ast.Constant) or dotted_name(node) is not None


def describe(hazards: list[Hazard]) -> str:
    """The hazards for a message, the same code doing the same thing listed once with all its
    lines: "`model.zero_grad()` (lines 44, 58) sets the gradients to None, ..."."""
    lines: dict[tuple[str, str], list[int]] = {}
    for hazard in hazards:
        lines.setdefault((hazard.code, hazard.effect), []).append(hazard.line)
    parts: list[str] = []
    for (code, effect), numbers in lines.items():
        parts.append(f"{code} ({lines_named(numbers)}) {effect}")
    return "; ".join(parts)


def _models_named(flow: OptimizerFlow, params: ast.expr | None) -> set[str]:
    """The ``x`` of the ``x.parameters()`` / ``x.named_parameters()`` calls that ``params``
    comes from, as written (``model``, ``self.netG``, ``model.layers`` for
    ``model.layers[0]``): narrower than :func:`models_feeding`, which also takes what an
    assignment to ``x`` mentions."""
    if params is None:
        return set()
    models: set[str] = set()
    for receiver in _parameter_receivers(_added_before(flow, params)):
        while isinstance(receiver, ast.Subscript):
            receiver = receiver.value
        name = dotted_name(receiver)
        if name is not None:
            models.add(name)
    return models


def _parameter_receivers(expressions: list[ast.expr]) -> Iterator[ast.expr]:
    """The ``x`` of every ``x.parameters()`` / ``x.named_parameters()`` call in
    ``expressions``."""
    for expression in expressions:
        for node in ast.walk(expression):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _PARAMETER_METHODS
            ):
                yield node.func.value


def _added_before(flow: OptimizerFlow, params: ast.expr) -> list[ast.expr]:
    """``params`` and its origins, with what ``params += <value>`` adds between the last plain
    assignment of the name before ``params`` and ``params`` (a list reused for the next
    optimizer is not grown by what was added for the previous one)."""
    found = [params, *flow.origins(params)]
    if not isinstance(params, ast.Name):
        return found
    at = line_of(params)
    stores: list[tuple[int, ast.expr | None]] = []
    for binding in flow.index.bindings_of(params):
        if binding.node is None:
            continue
        parent = flow.index.parent(binding.node)
        added = parent.value if isinstance(parent, ast.AugAssign) else None
        if line_of(binding.node) < at:
            stores.append((line_of(binding.node), added))
    stores.sort(key=lambda store: store[0])
    for _, added in reversed(stores):
        if added is None:
            break  # the last plain assignment before `params`
        found.append(added)
    return found


def _params_argument(call: ast.Call) -> ast.expr | None:
    """The params argument of an optimizer constructor (first positional or `params=`)."""
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "params"), None)


def _assigned_name(statement: ast.AST | None) -> str | None:
    """``x`` (or ``self.x``) for ``x = <value>``, the one target of an assignment."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return dotted_name(statement.targets[0])
    if isinstance(statement, ast.AnnAssign):
        return dotted_name(statement.target)
    return None


def _short(view: FileView, call: ast.Call) -> str:
    """``call`` as written when it fits on one line, else its callee with ``(...)``."""
    written = view.written(call)
    return written if "\n" not in written else f"{view.written(call.func)}(...)"


def _is_method(call: ast.Call, name: str) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == name


def _strip_method_calls(node: ast.expr) -> ast.expr:
    """``model.cuda().half()`` -> ``model``: the object a chain of method calls starts from."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node
