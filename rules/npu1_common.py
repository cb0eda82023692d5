"""Facts and analyses shared by the NPU1xx rules (apex optimizers and amp). Not a rule itself.

- The optimizer tables of DOMAIN.md section 2: which constructors have an NPU fused version, their
  signatures, and which of their arguments can be dropped, kept or block the rewrite.
- :class:`OptimizerFlow`: where the optimizers passed to ``apex.amp.initialize`` are built, found by
  following names, ``self.<attr>`` assignments, containers and same-module function returns.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import Assignment, ParentNodeProvider, ScopeProvider

from migrator.callargs import argument
from migrator.names import Ambiguous
from migrator.rule import Rule

AMP_INITIALIZE = "apex.amp.initialize"
AMP_OPTIMIZERS_POSITION = 1

APEX_HOME = "apex.optimizers"
TORCH_NPU_HOME = "torch_npu.optim"
NPU_FUSED = re.compile(r"(apex\.optimizers|torch_npu\.optim)\.NpuFused\w+")

# Target signatures (Ascend apex and torch_npu agree): positional order after `params`.
TARGET_PARAMETERS: dict[str, tuple[str, ...]] = {
    "NpuFusedSGD": ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "NpuFusedAdam": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "NpuFusedAdamW": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "NpuFusedAdadelta": ("params", "lr", "rho", "eps", "weight_decay"),
    "NpuFusedRMSprop": (
        "params",
        "lr",
        "alpha",
        "eps",
        "weight_decay",
        "momentum",
        "centered",
    ),
}


@dataclass(frozen=True)
class Source:
    """A constructor with an NPU fused version. ``target`` is None when an argument decides it."""

    display: str
    target: str | None
    positional: tuple[str, ...]
    keyword_only: tuple[str, ...] = ()

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.positional + self.keyword_only


_TORCH_SGD = Source(
    "torch.optim.SGD",
    "NpuFusedSGD",
    ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    ("maximize", "foreach", "differentiable", "fused"),
)
_TORCH_ADAM = Source(
    "torch.optim.Adam",
    "NpuFusedAdam",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    ("foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay"),
)
_TORCH_ADAMW = Source(
    "torch.optim.AdamW",
    "NpuFusedAdamW",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    ("maximize", "foreach", "capturable", "differentiable", "fused"),
)
_TORCH_ADADELTA = Source(
    "torch.optim.Adadelta",
    "NpuFusedAdadelta",
    ("params", "lr", "rho", "eps", "weight_decay", "foreach"),
    ("capturable", "maximize", "differentiable"),
)
_TORCH_RMSPROP = Source(
    "torch.optim.RMSprop",
    "NpuFusedRMSprop",
    (
        "params",
        "lr",
        "alpha",
        "eps",
        "weight_decay",
        "momentum",
        "centered",
        "capturable",
        "foreach",
        "maximize",
        "differentiable",
    ),
)
_APEX_SGD = Source(
    "apex.optimizers.FusedSGD",
    "NpuFusedSGD",
    (
        "params",
        "lr",
        "momentum",
        "dampening",
        "weight_decay",
        "nesterov",
        "wd_after_momentum",
        "materialize_master_grads",
        "set_grad_none",
    ),
)
_APEX_ADAM = Source(
    "apex.optimizers.FusedAdam",
    None,  # adam_w_mode picks NpuFusedAdamW (default) or NpuFusedAdam
    (
        "params",
        "lr",
        "bias_correction",
        "betas",
        "eps",
        "adam_w_mode",
        "weight_decay",
        "amsgrad",
        "set_grad_none",
        "capturable",
        "master_weights",
    ),
)

# Every public spelling of each source: the package attribute and the defining submodule.
SOURCES: dict[str, Source] = {
    "torch.optim.SGD": _TORCH_SGD,
    "torch.optim.sgd.SGD": _TORCH_SGD,
    "torch.optim.Adam": _TORCH_ADAM,
    "torch.optim.adam.Adam": _TORCH_ADAM,
    "torch.optim.AdamW": _TORCH_ADAMW,
    "torch.optim.adamw.AdamW": _TORCH_ADAMW,
    "torch.optim.Adadelta": _TORCH_ADADELTA,
    "torch.optim.adadelta.Adadelta": _TORCH_ADADELTA,
    "torch.optim.RMSprop": _TORCH_RMSPROP,
    "torch.optim.rmsprop.RMSprop": _TORCH_RMSPROP,
    "apex.optimizers.FusedSGD": _APEX_SGD,
    "apex.optimizers.fused_sgd.FusedSGD": _APEX_SGD,
    "apex.optimizers.FusedAdam": _APEX_ADAM,
    "apex.optimizers.fused_adam.FusedAdam": _APEX_ADAM,
}

_LAMB_ADVICE = (
    "Ascend's `NpuFusedLamb` has no bias correction, clamps the weight norm at 10 and always "
    "applies the trust ratio, so it trains differently: switch to it only after comparing loss "
    "curves, or keep a pure-PyTorch LAMB"
)
# apex optimizers with no exact NPU version: reported, never rewritten.
UNSUPPORTED: dict[str, str] = {
    "apex.optimizers.FusedLAMB": _LAMB_ADVICE,
    "apex.optimizers.fused_lamb.FusedLAMB": _LAMB_ADVICE,
    "apex.optimizers.FusedMixedPrecisionLamb": _LAMB_ADVICE,
    "apex.optimizers.fused_mixed_precision_lamb.FusedMixedPrecisionLamb": _LAMB_ADVICE,
    "apex.optimizers.FusedNovoGrad": (
        "it is a CUDA extension with no NPU version: use a pure-PyTorch NovoGrad, or "
        "`torch_npu.optim.NpuFusedAdamW` if switching algorithms is acceptable"
    ),
    "apex.optimizers.fused_novograd.FusedNovoGrad": (
        "it is a CUDA extension with no NPU version: use a pure-PyTorch NovoGrad, or "
        "`torch_npu.optim.NpuFusedAdamW` if switching algorithms is acceptable"
    ),
    "apex.optimizers.FusedAdagrad": (
        "it is a CUDA extension with no NPU version: use `torch.optim.Adagrad`, which runs on NPU"
    ),
    "apex.optimizers.fused_adagrad.FusedAdagrad": (
        "it is a CUDA extension with no NPU version: use `torch.optim.Adagrad`, which runs on NPU"
    ),
}

FP16_OPTIMIZERS = frozenset(
    {
        "apex.fp16_utils.FP16_Optimizer",
        "apex.fp16_utils.fp16_optimizer.FP16_Optimizer",
        "apex.optimizers.FP16_Optimizer",
        "apex.optimizers.fp16_optimizer.FP16_Optimizer",
        "apex.contrib.optimizers.FP16_Optimizer",
        "apex.contrib.optimizers.fp16_optimizer.FP16_Optimizer",
    }
)

# Modules whose attributes `getattr(module, name)` may turn into an optimizer class at run time.
OPTIMIZER_MODULES = frozenset({"torch.optim", "apex.optimizers"})


# -- literals ----------------------------------------------------------------------------------


class NotLiteral:
    """The value of an expression that is not a plain literal."""

    def __repr__(self) -> str:
        return "NOT_LITERAL"


NOT_LITERAL = NotLiteral()


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def literal_value(node: cst.BaseExpression) -> object:
    """The Python value of a literal (`True`, `0.0`, `"O2"`, `(0.9, 0.999)`), else NOT_LITERAL."""
    try:
        return ast.literal_eval(code_of(node).strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return NOT_LITERAL


def dotted_name(node: cst.BaseExpression) -> str | None:
    return get_full_name_for_node(node)


# -- the module index and optimizer flow -------------------------------------------------------


class _Collector(cst.CSTVisitor):
    """One walk over the module: calls, class definitions, returns and attribute assignments."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.classes: list[cst.ClassDef] = []
        self.returns: dict[str, list[cst.BaseExpression]] = {}
        self.attribute_values: dict[str, list[cst.BaseExpression]] = {}
        self.subscripts: list[cst.Subscript] = []
        self.functions: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.functions.append("<lambda>")

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.functions.pop()

    def visit_Return(self, node: cst.Return) -> None:
        if self.functions and node.value is not None:
            self.returns.setdefault(self.functions[-1], []).append(node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._attribute_target(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._attribute_target(node.target, node.value)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self.subscripts.append(node)

    def _attribute_target(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Attribute):
            dotted = dotted_name(target)
            if dotted is not None:
                self.attribute_values.setdefault(dotted, []).append(value)


@dataclass(frozen=True)
class AmpSink:
    """An ``apex.amp.initialize`` call and the optimizers expression passed to it."""

    call: cst.Call
    optimizers: cst.BaseExpression | None


class OptimizerFlow:
    """Module-wide facts about optimizers, computed once per rule visit from the original tree.

    ``origins(expr)`` are the expressions that may produce the value of ``expr``: it follows
    names through their assignments in the scope where they are read, ``self.<attr>`` through
    every assignment to that attribute in the module, list / tuple / dict / conditional
    expressions through their parts, subscripts to what they index, and calls of functions
    defined in this module through their ``return`` values. What cannot be followed (a
    parameter, a call into another module) is itself an origin.
    """

    def __init__(self, rule: Rule, module: cst.Module) -> None:
        self.rule = rule
        collector = _Collector()
        module.visit(collector)
        self.calls = collector.calls
        self.classes = collector.classes
        self.subscripts = collector.subscripts
        self._returns = collector.returns
        self._attribute_values = collector.attribute_values
        self.amp_sinks: list[AmpSink] = []
        self.ambiguous_amp: list[tuple[cst.Call, Ambiguous]] = []
        for call in self.calls:
            name = qualified(rule, call.func, {AMP_INITIALIZE})
            if isinstance(name, Ambiguous):
                self.ambiguous_amp.append((call, name))
            elif name == AMP_INITIALIZE:
                arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
                self.amp_sinks.append(AmpSink(call, arg.value if arg is not None else None))
        # id(constructor call) -> the amp.initialize call it reaches
        self.reaches_amp: dict[int, cst.Call] = {}
        for sink in self.amp_sinks:
            if sink.optimizers is None:
                continue
            for origin in self.origins(sink.optimizers):
                exclusive = isinstance(origin, cst.Call) and self.exclusive(sink.call, origin)
                if isinstance(origin, cst.Call) and not exclusive:
                    self.reaches_amp.setdefault(id(origin), sink.call)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.rule.position(node)[0]

    def condition_only_for(self, node: cst.CSTNode, other: cst.CSTNode) -> str | None:
        """The `if` condition under which ``node`` runs that does not also guard ``other``.

        ``"`args.fp16` holds"`` or ``"`args.fp32` is false"`` (an ``else`` branch), else None.
        """
        # Two `if args.fp16:` blocks guard alike: compare the conditions, not the statements.
        guards_of_other = {(code_of(guard.test), in_body) for guard, in_body in self._guards(other)}
        for guard, in_body in self._guards(node):
            test = code_of(guard.test)
            if (test, in_body) not in guards_of_other:
                return f"`{test}` holds" if in_body else f"`{test}` is false"
        return None

    def exclusive(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """``node`` runs only where ``other`` does not: opposite branches of the same condition
        (`if args.fp16:` ... `else:` ...), compared by the condition's text."""
        branches = {(code_of(guard.test), in_body) for guard, in_body in self._guards(other)}
        return any(
            (code_of(guard.test), not in_body) in branches for guard, in_body in self._guards(node)
        )

    def _guards(self, node: cst.CSTNode) -> Iterator[tuple[cst.If, bool]]:
        """Enclosing `if` statements (innermost first) and whether ``node`` is in the body."""
        child = node
        parent = self.rule.get_metadata(ParentNodeProvider, child, None)
        while parent is not None and not isinstance(parent, cst.FunctionDef | cst.Module):
            if isinstance(parent, cst.If) and child is not parent.test:
                yield parent, child is parent.body
            child = parent
            parent = self.rule.get_metadata(ParentNodeProvider, child, None)

    def origins(self, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        found: list[cst.BaseExpression] = []
        self._follow(expr, found, set())
        return found

    def _follow(
        self, expr: cst.BaseExpression, found: list[cst.BaseExpression], seen: set[int]
    ) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        for part in self._sources_of(expr):
            if part is expr:
                found.append(expr)
            else:
                self._follow(part, found, seen)

    def _sources_of(self, expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
        """The expressions one step upstream of ``expr``; ``expr`` itself when it is an origin."""
        if isinstance(expr, cst.List | cst.Tuple | cst.Set):
            yield from (element.value for element in expr.elements)
        elif isinstance(expr, cst.Dict):
            yield from (e.value for e in expr.elements if isinstance(e, cst.DictElement))
        elif isinstance(expr, cst.IfExp):
            yield expr.body
            yield expr.orelse
        elif isinstance(expr, cst.Subscript | cst.NamedExpr):
            yield expr.value
        elif isinstance(expr, cst.Name):
            yield from self._name_sources(expr)
        elif isinstance(expr, cst.Attribute):
            values = self._attribute_values.get(dotted_name(expr) or "", [])
            yield from values if values else (expr,)
        elif isinstance(expr, cst.Call):
            yield from self._call_sources(expr)
        else:
            yield expr

    def _name_sources(self, name: cst.Name) -> Iterator[cst.BaseExpression]:
        try:
            scope = self.rule.get_metadata(ScopeProvider, name)
        except KeyError:
            scope = None
        if scope is None:
            yield name
            return
        values: list[cst.BaseExpression] = []
        opaque = False
        for assignment in scope[name.value]:
            if not isinstance(assignment, Assignment) or not isinstance(assignment.node, cst.Name):
                opaque = True
                continue
            value = self._assigned_value(assignment.node)
            if value is _FROM_AMP:
                continue  # `model, optimizer = amp.initialize(model, optimizer)`: same object
            if isinstance(value, cst.BaseExpression):
                values.append(value)
            else:
                opaque = True
        if opaque or not values:
            yield name
        yield from values

    def _assigned_value(self, target: cst.Name) -> cst.BaseExpression | object | None:
        parent = self.rule.get_metadata(ParentNodeProvider, target)
        if isinstance(parent, cst.AssignTarget):
            assign = self.rule.get_metadata(ParentNodeProvider, parent)
            return assign.value if isinstance(assign, cst.Assign) else None
        if isinstance(parent, cst.AnnAssign):
            return parent.value
        if isinstance(parent, cst.NamedExpr):
            return parent.value
        # `a, b = ...`: only the unpacking of amp.initialize's result is understood.
        node: cst.CSTNode = parent
        while isinstance(node, cst.Element | cst.Tuple | cst.List | cst.AssignTarget):
            node = self.rule.get_metadata(ParentNodeProvider, node)
        amp_result = (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Call)
            and self.is_amp_initialize(node.value)
        )
        return _FROM_AMP if amp_result else None

    def _call_sources(self, call: cst.Call) -> Iterator[cst.BaseExpression]:
        if self.is_amp_initialize(call):
            # `amp_inits = amp.initialize(...)`: the optimizers come back out.
            arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
            if arg is not None:
                yield arg.value
            return
        callee = call.func
        local_function = None
        if isinstance(callee, cst.Name):
            local_function = callee.value
        elif isinstance(callee, cst.Attribute):
            local_function = callee.attr.value  # `self.build_optimizer(...)`
        # Only calls that resolve to no import can be this module's functions.
        if local_function in self._returns and qualified(self.rule, callee) is None:
            yield from self._returns[local_function]
        else:
            yield call

    def is_amp_initialize(self, call: cst.Call) -> bool:
        return any(sink.call is call for sink in self.amp_sinks)


_FROM_AMP = object()


def qualified(
    rule: Rule, node: cst.BaseExpression, wanted: Collection[str] | None = None
) -> str | Ambiguous | None:
    """``rule.qualified_name(node)`` (or ``_in`` with ``wanted``), ``None`` where it recurses.

    The engine's value-alias resolution recurses without end on ``x = x.T`` followed by
    ``x.div_()``; such a name is never an optimizer or amp, and one bad name must not turn the
    whole file into an error.
    """
    try:
        if wanted is None:
            return rule.qualified_name(node)
        return rule.qualified_name_in(node, wanted)
    except RecursionError:
        return None


def npu_fused_name(rule: Rule, func: cst.BaseExpression) -> str | None:
    """``apex.optimizers.NpuFusedSGD`` etc. when ``func`` resolves to an NPU fused optimizer."""
    name = qualified(rule, func)
    if isinstance(name, str) and NPU_FUSED.fullmatch(name):
        return name
    return None
