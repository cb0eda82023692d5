"""The call sites, in other modules of the run, of the functions that return a module's optimizers.
Not a rule.

The link stage (:mod:`~migrator.rules.optimizers._factories`) records, for each function of a
module that other files call to get an optimizer (a *factory*), every call of it there and the
``amp.initialize`` calls its result reaches, as JSON facts. This module reads those facts back
for one module, without a rule: :func:`factory_sites` says which constructors of the module each
factory returns and where it is called, for NPU101's planner (in the module's own check and in
the link stage alike); :func:`method_callers` what the link stage found of the callers of a
method of the module that returns an optimizer
(:mod:`~migrator.rules.optimizers._method_callers`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migrator.analysis.calls import arguments
from migrator.analysis.clipping import class_of
from migrator.analysis.index import ModuleIndex
from migrator.analysis.view import FileView
from migrator.rules.optimizers._flow import OptimizerFlow, npu_fused_name
from migrator.rules.optimizers._tables import KNOWN_OPTIMIZERS, of_optimizer_module


@dataclass(frozen=True)
class ExternalAmp:
    """An ``amp.initialize`` call in another file that a factory's optimizer reaches."""

    at: str  # "train.py:20"
    disabled: bool
    refusal: str | None
    notes: tuple[str, ...]
    switch: str | None
    # It runs, or enables amp ("verb"), only when "test" is true ("amp_when_true") or false,
    # and that condition does not also guard the call of the factory.
    gate: tuple[str, bool, str] | None = None
    computed: bool = False  # the refusing level is one arm of a level computed at run time

    @property
    def condition(self) -> str:
        assert self.gate is not None
        test, when_true, _ = self.gate
        return f"`{test}` holds" if when_true else f"`{test}` is false"


@dataclass(frozen=True)
class CallSite:
    """A call, in another file of the run, of a function of this module that returns the
    optimizer a constructor builds."""

    factory: str  # the function's name
    at: str  # "train.py:15"
    amps: tuple[ExternalAmp, ...]
    # Code there that breaks an NPU fused optimizer, described ("" without).
    hazards: str = ""
    # How the caller shards or re-allocates the parameters it may hand the factory ("": never).
    breaks: str = ""
    # The value of amp's condition at the call ("True", "False" or the test under which its
    # `amp.initialize` runs), for a factory that picks the class by it; None: why says why not.
    argument: str | None = None
    why: str | None = None
    # Where the factory is used other than by the calls npu-migrate found (None: nowhere).
    escapes: str | None = None
    # Why npu-migrate cannot tell that a call that reaches no `amp.initialize` in its file
    # never reaches one (its optimizer handed on out of sight); "" when it can.
    handed_on: str = ""
    # The line of the DDP wrap in its file that NPU203 moves the call above (None: not after one).
    moved_above: int | None = None

    @property
    def placed(self) -> str:
        """Where the call is, and that NPU203 moves it above a DDP wrap when it does."""
        if self.moved_above is None:
            return self.at
        return f"{self.at}, which NPU203 moves above the DDP wrap at line {self.moved_above}"

    @property
    def with_amp(self) -> tuple[ExternalAmp, ...]:
        return tuple(amp for amp in self.amps if not amp.disabled)


def factory_sites(
    view: FileView, factories: Mapping[str, Any], level: str | None
) -> Mapping[int, list[CallSite]]:
    """id(constructor or other origin) -> the call sites of the factories of this module that
    return it, with their ``amp.initialize`` calls as NPU102's ``opt-level`` switch to ``level``
    leaves them. ``factories`` are the module's facts from the link stage (name -> its line and
    sites); empty without them."""
    exported = _exported(view, factories)
    found: dict[int, list[CallSite]] = {}
    for key, names in exported.items():
        for name in names:
            for site in factories[name]["sites"]:
                amps = tuple(_external_amp(amp, level or "") for amp in site["amp"])
                found.setdefault(key, []).append(
                    CallSite(
                        name,
                        site["at"],
                        amps,
                        site.get("hazards", ""),
                        site.get("breaks", ""),
                        site.get("argument"),
                        site.get("why"),
                        factories[name].get("escapes"),
                        site.get("handed_on", ""),
                        site.get("moved_above"),
                    )
                )
    return found


def _external_amp(facts: Mapping[str, Any], level: str) -> ExternalAmp:
    options = facts["levels"][level]
    gate = facts.get("gate")
    return ExternalAmp(
        facts["at"],
        facts["disabled"],
        options["refusal"],
        tuple(options["notes"]),
        options["switch"],
        (gate[0], gate[1], gate[2]) if gate else None,
        options.get("computed", False),
    )


def _exported(view: FileView, factories: Mapping[str, Any]) -> dict[int, list[str]]:
    """id(origin) -> the names of the module's factories (with call sites) that return it."""
    found: dict[int, list[str]] = {}
    for name, facts in factories.items():
        if not facts["sites"]:
            continue
        for origin in returned_origins(view, name):
            found.setdefault(id(origin), []).append(name)
    return found


def returned_origins(view: FileView, name: str) -> list[ast.expr]:
    """Where the values that the function ``name`` at the top of the module returns come
    from, through the module's flow (its local helpers included), in source order."""
    function = top_level_function(view.index, name)
    if function is None:
        return []
    flow = OptimizerFlow.of(view)
    found: list[ast.expr] = []
    for statement in view.index.walk(function):
        if not isinstance(statement, ast.Return) or statement.value is None:
            continue
        if _function_of(view.index, statement) is not function:
            continue
        for origin in flow.origins(statement.value):
            if all(origin is not seen for seen in found):
                found.append(origin)
    return found


def returned_element_origins(view: FileView, name: str, position: int) -> list[ast.expr] | None:
    """Where the element at ``position`` of what the function ``name`` at the top of the module
    returns comes from, when every ``return`` of it gives a tuple display of one length (``return
    optimizer, scheduler``); None when one does not."""
    function = top_level_function(view.index, name)
    if function is None:
        return None
    flow = OptimizerFlow.of(view)
    found: list[ast.expr] = []
    lengths: set[int] = set()
    for statement in view.index.walk(function):
        if (
            not isinstance(statement, ast.Return)
            or _function_of(view.index, statement) is not function
        ):
            continue
        value = statement.value
        if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in value.elts):
            return None
        lengths.add(len(value.elts))
        if position >= len(value.elts) or len(lengths) > 1:
            return None
        for origin in flow.origins(value.elts[position]):
            if all(origin is not seen for seen in found):
                found.append(origin)
    return found if lengths else None


def untraced_amp(view: FileView) -> bool:
    """Whether an apex ``amp.initialize`` of the module may be given an optimizer the module
    does not build itself: one of its optimizers' origins is not a constructor of a known
    optimizer class (a parameter, another call, a value the flow cannot follow). Only there can
    an optimizer built out of the flow's sight (a factory handed on as a value) meet it.
    Computed once per file."""
    return view.memo("untraced-amp", lambda: _untraced_amp(view))


def _untraced_amp(view: FileView) -> bool:
    flow = OptimizerFlow.of(view)
    for sink in flow.amp_sinks:
        if sink.optimizers is None:
            continue
        if not all(traced_optimizer(view, o) for o in flow.origins(sink.optimizers)):
            return True
    return False


@dataclass(frozen=True)
class AttributeRef:
    """An attribute an optimizer is stored in or read from: its name, a pattern for one made at
    run time (:func:`name_pattern`), and for ``self.<name>`` in a method, the class and the
    names of its bases (``self.optimizer`` of two unrelated classes are two objects)."""

    pattern: str
    owner: str | None = None
    bases: tuple[str, ...] = ()

    def meets(self, other: AttributeRef) -> bool:
        """May name the same attribute of the same object."""
        if not patterns_meet(self.pattern, other.pattern):
            return False
        if self.owner is None or other.owner is None:
            return True
        return self.owner == other.owner or self.owner in other.bases or other.owner in self.bases

    @property
    def key(self) -> str:
        return f"{self.owner}.{self.pattern}" if self.owner else self.pattern

    def to_json(self) -> list[Any]:
        return [self.pattern, self.owner, list(self.bases)]

    @classmethod
    def from_json(cls, value: list[Any]) -> AttributeRef:
        return cls(value[0], value[1], tuple(value[2]))


def _reference(view: FileView, receiver: ast.expr, pattern: str) -> AttributeRef:
    """``receiver.<pattern>``, owned by the class of the method when ``receiver`` is ``self``."""
    if not (isinstance(receiver, ast.Name) and receiver.id == "self"):
        return AttributeRef(pattern)
    owner = next((a for a in view.index.ancestors(receiver) if isinstance(a, ast.ClassDef)), None)
    if owner is None:
        return AttributeRef(pattern)
    bases = tuple(
        b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
        for b in owner.bases
    )
    return AttributeRef(pattern, owner.name, bases)


@dataclass(frozen=True)
class Stored:
    """Where an optimizer a constructor builds is stored on an object."""

    written: str  # the target as written: `self.optimizer_G`, `setattr(self, ...)`
    ref: AttributeRef
    line: int


def attribute_stores(view: FileView) -> dict[int, Stored]:
    """id(constructor) -> the first place its optimizer is stored as an attribute of an object
    (``self.optimizer_G = torch.optim.Adam(...)``, through names too, or in a list or dict so
    stored, or ``setattr(self, name, optimizer)``), for the constructors of optimizers
    npu-migrate knows. Code of other files may read it there (NVIDIA's vid2vid passes
    ``modelG.optimizer_G`` to apex's ``amp.initialize`` in another module), out of the flow's
    sight. Computed once per file."""
    return view.memo("attribute-stores", lambda: _attribute_stores(view))


def _attribute_stores(view: FileView) -> dict[int, Stored]:
    index = view.index
    stores: list[tuple[ast.expr, Stored]] = []
    for node in index.nodes(ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                ref = _reference(view, target.value, target.attr)
                stores.append((node.value, Stored(view.written(target), ref, node.lineno)))
    for name in index.names("setattr"):
        call = index.parent(name)
        if not isinstance(call, ast.Call) or call.func is not name or len(call.args) != 3:
            continue
        written = f"setattr({view.written(call.args[0])}, ...)"
        ref = _reference(view, call.args[0], name_pattern(call.args[1]))
        stores.append((call.args[2], Stored(written, ref, call.lineno)))
    if not stores:
        return {}
    flow = OptimizerFlow.of(view)
    found: dict[int, Stored] = {}
    for value, stored in sorted(stores, key=lambda item: item[1].line):
        # `self.optimizers = [opt_g, opt_d]`, `{"g": opt_g}`: the elements are stored too.
        values = [value]
        if isinstance(value, ast.List | ast.Tuple | ast.Set):
            values += value.elts
        elif isinstance(value, ast.Dict):
            values += value.values
        for each in values:
            for origin in flow.origins(each):
                if isinstance(origin, ast.Call) and _builds_known(view, origin):
                    found.setdefault(id(origin), stored)
    return found


def _builds_known(view: FileView, call: ast.Call) -> bool:
    func = class_of(view, call)
    return isinstance(view.qualified_name_in(func, KNOWN_OPTIMIZERS), str)


def amp_attributes(view: FileView) -> set[AttributeRef]:
    """The attributes an apex ``amp.initialize`` of the module reads its optimizers from where
    the flow does not trace them to a constructor: ``modelG.optimizer_G``, ``optimizer_D`` of
    ``[modelD.optimizer_D] + ...``, the pattern of a name made at run time given to
    ``getattr`` (vid2vid's ``getattr(modelD, "optimizer_D_T" + str(s))``: ``optimizer_D_T*``).
    Computed once per file."""
    return view.memo("amp-attributes", lambda: _amp_attributes(view))


def _amp_attributes(view: FileView) -> set[AttributeRef]:
    flow = OptimizerFlow.of(view)
    found: set[AttributeRef] = set()
    for sink in flow.amp_sinks:
        if sink.optimizers is None:
            continue
        # A list grown in place (`optimizer_D_T.append(getattr(modelD, ...))`): what is added.
        grown = {n.id for n in ast.walk(sink.optimizers) if isinstance(n, ast.Name)}
        origins = [*flow.origins(sink.optimizers), *_added_to(view, grown)]
        for node in [*ast.walk(sink.optimizers), *origins]:
            if not isinstance(node, ast.Attribute):
                continue
            held = flow.origins(node)
            if not held or not all(traced_optimizer(view, origin) for origin in held):
                found.add(_reference(view, node.value, node.attr))
        for origin in origins:
            for node in ast.walk(origin):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "getattr"
                    and len(node.args) >= 2
                    and not _called(view, node)  # `getattr(torch.optim, name)(...)`: a class
                ):
                    found.add(_reference(view, node.args[0], name_pattern(node.args[1])))
    return found


def _called(view: FileView, node: ast.expr) -> bool:
    parent = view.index.parent(node)
    return isinstance(parent, ast.Call) and parent.func is node


_GROWING = frozenset({"append", "extend", "insert"})


def _added_to(view: FileView, names: set[str]) -> list[ast.expr]:
    """The arguments of ``name.append(...)`` / ``extend`` / ``insert`` calls on ``names`` in
    the module."""
    found: list[ast.expr] = []
    for method in _GROWING:
        for attribute in view.index.attributes(method):
            call = view.index.parent(attribute)
            if (
                isinstance(call, ast.Call)
                and call.func is attribute
                and isinstance(attribute.value, ast.Name)
                and attribute.value.id in names
            ):
                found += call.args
    return found


def name_pattern(key: ast.expr) -> str:
    """An attribute name given to ``getattr`` / ``setattr``: the name, ``prefix*`` for
    ``"optimizer_D_T" + str(s)`` or ``f"optimizer_{s}"``, ``*`` for anything else."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    first = key.left if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add) else None
    if isinstance(key, ast.JoinedStr) and key.values:
        first = key.values[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value + "*"
    return "*"


def patterns_meet(first: str, second: str) -> bool:
    """Two :func:`name_pattern` results may name the same attribute."""
    if first.endswith("*") and second.endswith("*"):
        a, b = first[:-1], second[:-1]
        return a.startswith(b) or b.startswith(a)
    if first.endswith("*"):
        return second.startswith(first[:-1])
    if second.endswith("*"):
        return first.startswith(second[:-1])
    return first == second


def traced_optimizer(view: FileView, origin: ast.AST) -> bool:
    """``origin`` is a constructor of an optimizer npu-migrate knows, an NPU fused one, or None."""
    if isinstance(origin, ast.Constant) and origin.value is None:
        return True
    if not isinstance(origin, ast.Call):
        return False
    func = class_of(view, origin)
    known = isinstance(view.qualified_name_in(func, KNOWN_OPTIMIZERS), str)
    return known or npu_fused_name(view, func) is not None


def values_returning(view: FileView) -> dict[int, tuple[str, int]]:
    """id(origin) -> the function of the module (a nested one too, or a lambda; not a method)
    that returns it, as messages show it, and the first line where it is used as a value, for
    each function (or lambda bound to a name) whose name the
    module uses other than by calling it: handed to a call (FastSpeech's
    ``Trainer(..., optimizer_fn=get_optimizer)``), stored or returned. Whoever calls it then
    is out of the flow's sight, and so is whether its optimizer goes through ``amp.initialize``.
    Any use of the name counts (a binding of the same name elsewhere too): that only reports.
    Computed once per file."""
    return view.memo("values-returning", lambda: _values_returning(view))


def _values_returning(view: FileView) -> dict[int, tuple[str, int]]:
    index = view.index
    defined: list[ast.FunctionDef | ast.AsyncFunctionDef] = [*index.nodes(ast.FunctionDef)]
    defined += index.nodes(ast.AsyncFunctionDef)
    functions = [node for node in defined if not isinstance(index.parent(node), ast.ClassDef)]
    # `build = lambda m: SGD(...)` stands for a function `build`; any other lambda that returns
    # an optimizer is a value where it is written (`Trainer(optimizer_fn=lambda m: ...)`).
    lambdas: dict[str, list[ast.Lambda]] = {}
    loose: list[ast.Lambda] = []
    for written in index.nodes(ast.Lambda):
        parent = index.parent(written)
        if (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
        ):
            lambdas.setdefault(parent.targets[0].id, []).append(written)
        else:  # (one called where it is written too: the flow does not follow it)
            loose.append(written)
    if not functions and not lambdas and not loose:
        return {}
    names = {function.name for function in functions} | set(lambdas)
    uses: dict[str, int] = {}
    for node in index.nodes(ast.Name):
        if node.id not in names or not isinstance(node.ctx, ast.Load) or node.id in uses:
            continue
        parent = index.parent(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            continue
        uses[node.id] = node.lineno
    if not uses and not loose:
        return {}
    flow = OptimizerFlow.of(view)
    found: dict[int, tuple[str, int]] = {}
    for name, bound in lambdas.items():
        if name in uses:
            for lambda_ in bound:
                for origin in flow.origins(lambda_.body):
                    found.setdefault(id(origin), (f"`{name}`", uses[name]))
    for lambda_ in loose:
        for origin in flow.origins(lambda_.body):
            found.setdefault(id(origin), ("a lambda", lambda_.lineno))
    for function in functions:
        if function.name not in uses:
            continue
        for statement in index.walk(function):
            if not isinstance(statement, ast.Return) or statement.value is None:
                continue
            if _function_of(index, statement) is not function:
                continue
            for origin in flow.origins(statement.value):
                found.setdefault(id(origin), (f"`{function.name}`", uses[function.name]))
    return found


def wrapped_returning(view: FileView) -> dict[int, tuple[str, int, str]]:
    """id(constructor) -> the function of the module that returns its optimizer inside another
    value, the line of that ``return`` and the call that wraps it, as messages show them:
    ESPnet's ``return NoamOpt(d_model, factor, warmup, base)``, detectron2's ``return
    maybe_add_gradient_clipping(cfg, optimizer)``. The optimizer leaves the module where the
    flow does not follow it, and a caller may take it out again and hand it to apex's
    ``amp.initialize`` (ESPnet's ``amp.initialize(model, optimizer.optimizer)``). A function
    that also returns the optimizer itself (``return [opt], [StepLR(opt)]``) is not listed:
    its callers are followed as a factory's; nor is an optimizer that reaches an
    ``amp.initialize`` of the module. Computed once per file."""
    return view.memo("wrapped-returning", lambda: _wrapped_returning(view))


def _wrapped_returning(view: FileView) -> dict[int, tuple[str, int, str]]:
    flow = OptimizerFlow.of(view)
    # (One that reaches an `amp.initialize` of the module, through a helper given it too, is
    # planned by that call.)
    reached = flow.amp_calls_reached
    candidates = {
        id(call)
        for call in flow.candidates
        if id(call) not in reached and _may_build_optimizer(view, call)
    }
    if not candidates:
        return {}
    found: dict[int, tuple[str, int, str]] = {}
    for statement in view.index.nodes(ast.Return):
        function = _function_of(view.index, statement)
        if statement.value is None or not isinstance(
            function, ast.FunctionDef | ast.AsyncFunctionDef
        ):
            continue
        direct: set[int] | None = None  # the origins of the whole value, read when needed
        for call in (node for node in ast.walk(statement.value) if isinstance(node, ast.Call)):
            if id(call) in candidates or flow.is_amp_initialize(call):
                continue
            for argument in arguments(call):
                for origin in flow.origins(argument.value):
                    if id(origin) not in candidates:
                        continue
                    if direct is None:
                        direct = {id(o) for o in flow.origins(statement.value)}
                    if id(origin) not in direct:
                        where = (function.name, statement.lineno, view.written(call.func))
                        found.setdefault(id(origin), where)
    return found


def _may_build_optimizer(view: FileView, call: ast.Call) -> bool:
    """Whether NPU101 may plan ``call``, as the only reader of :func:`wrapped_returning` does:
    its class is a known optimizer class or one of several names that may be one (a value
    alias), a class of an optimizer module, or a value the resolution of names cannot name (a
    lookup, a registry, a parameter). Not a function or class of torch that builds no
    optimizer (torch's own ``OrderedSet``): every name a module imports from torch is a
    candidate of the flow, and following the returns of torch's own sources for them cost more
    than the rest of their analysis."""
    callee = class_of(view, call)
    name = view.qualified_name(callee)
    if name is None or view.qualified_name_in(callee, KNOWN_OPTIMIZERS) is not None:
        return True
    return isinstance(name, str) and of_optimizer_module(name)


# A function at the top of a module and a call it returns: `return f(...)`.
_Returned = tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call]


def forwarders(index: ModuleIndex, name: str) -> list[_Returned]:
    """The other functions at the top of the module that return a call of the function
    ``name`` there, with each such call: timm's ``create_optimizer(args, model)``, which
    returns ``create_optimizer_v2(model, **optimizer_kwargs(args))``."""
    return [(outer, call) for outer, call in returned_calls(index) if call.func.id == name]  # type: ignore[attr-defined]


def returned_calls(index: ModuleIndex) -> list[_Returned]:
    """Each ``return f(...)`` (``f`` a plain name) in the functions at the top of the module,
    with the function it returns from (not counting the functions nested in it)."""
    found: list[_Returned] = []
    for statement in index.tree.body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in index.walk(statement):
            if (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id != statement.name
                and _function_of(index, node) is statement
            ):
                found.append((statement, node.value))
    return found


def top_level_function(
    index: ModuleIndex, name: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = [
        statement
        for statement in index.tree.body
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name == name
    ]
    return found[-1] if found else None


def _function_of(index: ModuleIndex, node: ast.AST) -> ast.AST | None:
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return ancestor
    return None


@dataclass(frozen=True)
class MethodCallers:
    """What the link stage found about the callers of a method of this module."""

    callers: tuple[str, ...]
    why: str | None  # None: every caller is in the run and safe
    fixes: tuple[str, ...]  # where the callers' files get `set_to_none` dropped
    uses: int = 0  # uses of the name in the run that may call the method, sorted or not

    def note(self, name: str) -> str:
        """For the constructor's message: who calls the method, what their files get."""
        calls = ", ".join(self.callers)
        note = f"every call of `{name}` is in this run and keeps it working ({calls})"
        if self.fixes:
            note += (
                "; `set_to_none` is dropped from its `zero_grad` there (the fused optimizers "
                f"zero in place): {', '.join(self.fixes)}"
            )
        return note


def method_callers(facts: Mapping[str, Any], class_name: str, name: str) -> MethodCallers | None:
    """The link stage's verdict on the callers of ``class_name.name`` (``facts``: the module's
    ``methods`` facts); None without one."""
    entry = facts.get(f"{class_name}.{name}")
    if entry is None:
        return None
    return MethodCallers(
        tuple(entry["callers"]), entry["why"], tuple(entry["fixes"]), entry.get("uses", 0)
    )
