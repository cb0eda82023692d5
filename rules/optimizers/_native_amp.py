"""torch's native mixed precision in a module, as NPU105's ``from-native`` option converts it to
apex amp. Not a rule.

:func:`native_amp` finds the ``autocast`` regions (``with torch.cuda.amp.autocast():``,
``with torch.autocast("cuda", ...)``, ``with torch.amp.autocast(device_type="cuda")``), the one
``GradScaler`` and its calls, and what switches them on (``enabled=``). What has no apex
counterpart is a :class:`~migrator.rules.optimizers._amp_steps.Problem`: bfloat16 (apex amp
computes in float16 on Ascend), a dtype or device chosen at run time, ``autocast`` used as a
value or a decorator, ``custom_fwd``/``custom_bwd``, several scalers, scaler calls without an
apex equivalent, different switches for autocast and scaler.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from migrator.analysis.calls import argument, literal_value
from migrator.analysis.index import dotted_name
from migrator.analysis.view import FileView
from migrator.rules.optimizers._amp_steps import Problem

AUTOCASTS = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cuda.amp.autocast_mode.autocast",
    }
)
_CUDA_ONLY = frozenset({"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"})
SCALERS = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
    }
)
CUSTOM = frozenset(
    {
        "torch.amp.custom_fwd",
        "torch.amp.custom_bwd",
        "torch.cuda.amp.custom_fwd",
        "torch.cuda.amp.custom_bwd",
    }
)
_HALF = frozenset({"torch.float16", "torch.half"})
_BFLOAT16 = frozenset({"torch.bfloat16"})
# GradScaler's dynamic scaling knobs and the amp.initialize arguments that mean the same.
SCALER_KNOBS = {
    "init_scale": "dynamic_init_scale",
    "growth_factor": "scale_growth_factor",
    "backoff_factor": "scale_backoff_factor",
    "growth_interval": "scale_window",
}
_SCALER_POSITIONS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
# Scaler methods with an apex counterpart: what becomes of each call.
SCALER_METHODS = frozenset({"scale", "step", "update", "unscale_", "state_dict", "load_state_dict"})
BF16_PRODUCTS = (
    "Atlas training series products (Ascend 910, 910 Pro) and Atlas inference products "
    "(Ascend 310P) have no bfloat16, only Atlas A2/A3 training products (Ascend 910B and "
    "later) do"
)


@dataclass
class Autocast:
    """One ``with`` item that opens an autocast region."""

    statement: ast.With
    item: int  # its position among the statement's items


@dataclass
class NativeAmp:
    autocasts: list[Autocast] = field(default_factory=list)
    scaler: ast.stmt | None = None  # `scaler = GradScaler(...)`
    scaler_name: str | None = None
    scaler_call: ast.Call | None = None
    scaler_uses: list[ast.Call] = field(default_factory=list)  # scaler.<method>(...) calls
    enabled: ast.expr | None = None  # the run-time switch, when one is given
    knobs: dict[str, ast.expr] = field(default_factory=dict)  # amp.initialize keyword -> value
    # The scaler handed to functions of the module: (call, argument), and their parameters.
    passed: list[tuple[ast.Call, ast.expr]] = field(default_factory=list)
    parameters: list[ast.FunctionDef] = field(default_factory=list)
    imports: list[ast.expr] = field(default_factory=list)  # names bound by `from ... import`
    problems: list[Problem] = field(default_factory=list)
    first: ast.AST | None = None  # the first native amp code of the module

    @property
    def scalers(self) -> frozenset[str]:
        return frozenset({self.scaler_name}) if self.scaler_name else frozenset()


def native_amp(view: FileView) -> NativeAmp:
    return view.memo("npu105-native-amp", lambda: _Finder(view).run())


class _Finder:
    def __init__(self, view: FileView) -> None:
        self.view = view
        self.index = view.index
        self.found = NativeAmp()
        self.switches: list[tuple[ast.AST, ast.expr]] = []  # (where, enabled= value)

    def run(self) -> NativeAmp:
        for node in self._references():
            name = self.view.qualified_name(node)
            if not isinstance(name, str):
                continue
            if self.found.first is None and name in AUTOCASTS | SCALERS | CUSTOM:
                self.found.first = node
            base = node
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base not in self.found.imports:
                self.found.imports.append(base)
            if name in AUTOCASTS:
                self._autocast(node, name)
            elif name in SCALERS:
                self._scaler(node)
            elif name in CUSTOM:
                self._problem(
                    node,
                    f"`{self.view.written(node)}` fixes the dtype of a custom autograd function "
                    "for torch's autocast, which apex amp does not honour; convert it by hand "
                    "(`amp.half_function` / `amp.float_function`)",
                )
        self._scaler_uses()
        self._every_call_passes_the_scaler()
        self._switch()
        self._guarded_states()
        return self.found

    def _problem(self, node: ast.AST, why: str) -> None:
        self.found.problems.append(Problem(node, why))

    def _references(self) -> list[ast.expr]:
        last_names = {name.rpartition(".")[2] for name in AUTOCASTS | SCALERS | CUSTOM}
        nodes: list[ast.expr] = []
        for last in last_names:
            nodes += [a for a in self.index.attributes(last) if isinstance(a.ctx, ast.Load)]
            nodes += [n for n in self.index.names(last) if isinstance(n.ctx, ast.Load)]
        nodes = [n for n in nodes if not isinstance(self.index.parent(n), ast.Attribute)]
        nodes = [n for n in nodes if self.view.may_name(n, {"torch"})]
        return sorted(nodes, key=lambda n: (n.lineno, n.col_offset))

    # -- autocast ---------------------------------------------------------------------------------

    def _autocast(self, node: ast.expr, name: str) -> None:
        call = self.index.parent(node)
        if not (isinstance(call, ast.Call) and call.func is node):
            self._problem(
                node, f"`{self.view.written(node)}` is used as a value: convert it by hand"
            )
            return
        holder = self.index.parent(call)
        if isinstance(holder, ast.withitem) and holder.context_expr is call:
            statement = self.index.parent(holder)
            assert isinstance(statement, ast.With)
            if holder.optional_vars is not None:
                self._problem(call, "the autocast region is bound to a name: convert it by hand")
                return
            if not self._autocast_arguments(call, name):
                return
            position = next(i for i, item in enumerate(statement.items) if item is holder)
            self.found.autocasts.append(Autocast(statement, position))
            return
        where = "a decorator" if _is_decorator(self.index, call) else "a value"
        self._autocast_arguments(call, name)
        self._problem(
            call,
            f"`{self.view.written(call)}` is {where}, not a `with` region (nanoGPT's `ctx = ...`): "
            "npu-migrate cannot tell where it applies; convert it by hand",
        )

    def _autocast_arguments(self, call: ast.Call, name: str) -> bool:
        """Whether the region is a float16 GPU region apex amp can take over (each reason
        why not is reported)."""
        fine = True
        if name not in _CUDA_ONLY:
            device = argument(call, "device_type", 0)
            value = literal_value(device.value) if device is not None else None
            if value != "cuda":
                shown = f"`{self.view.written(device.value)}`" if device is not None else "missing"
                self._problem(
                    call,
                    f'the autocast device is {shown}, not "cuda": npu-migrate converts only '
                    "GPU autocast regions to apex amp",
                )
                fine = False
        dtype = argument(call, "dtype", None if name not in _CUDA_ONLY else 1)
        if dtype is not None:
            given = self.view.qualified_name(dtype.value)
            if given in _BFLOAT16:
                self._problem(
                    call,
                    f"this region autocasts to bfloat16, and apex amp computes in float16 "
                    f"({BF16_PRODUCTS}): keep torch's native amp for it",
                )
                fine = False
            elif given not in _HALF:
                self._problem(
                    call,
                    f"the autocast dtype `{self.view.written(dtype.value)}` is chosen at run "
                    f"time, and apex amp computes in float16 (where it may be bfloat16: "
                    f"{BF16_PRODUCTS}); convert it by hand",
                )
                fine = False
        enabled = argument(call, "enabled", None if name not in _CUDA_ONLY else 0)
        if enabled is not None and literal_value(enabled.value) is not True:
            self.switches.append((call, enabled.value))
        return fine

    # -- the scaler -------------------------------------------------------------------------------

    def _scaler(self, node: ast.expr) -> None:
        call = self.index.parent(node)
        statement = self.index.parent(call) if call is not None else None
        target = (
            statement.targets[0]
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1
            else None
        )
        name = dotted_name(target) if target is not None else None
        if not (isinstance(call, ast.Call) and call.func is node and name is not None):
            self._problem(node, "the GradScaler is not assigned to a name: convert it by hand")
            return
        assert isinstance(statement, ast.Assign)
        if self.found.scaler is not None:
            self._problem(
                call,
                "a second GradScaler: apex amp has one loss scaler per loss (`num_losses`), "
                "which npu-migrate does not map scalers to; convert them by hand",
            )
            return
        self.found.scaler, self.found.scaler_name, self.found.scaler_call = statement, name, call
        scaler_name = self.view.qualified_name(node)
        names = list(_SCALER_POSITIONS)
        if scaler_name in ("torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"):
            device = argument(call, "device", 0)
            if device is not None and literal_value(device.value) != "cuda":
                self._problem(call, 'this GradScaler is not for "cuda": convert it by hand')
            names = ["device", *names]
        for knob, keyword in SCALER_KNOBS.items():
            given = argument(call, knob, names.index(knob))
            if given is not None:
                self.found.knobs[keyword] = given.value
        enabled = argument(call, "enabled", names.index("enabled"))
        if enabled is not None and literal_value(enabled.value) is not True:
            self.switches.append((call, enabled.value))

    def _scaler_uses(self) -> None:
        name = self.found.scaler_name
        if name is None:
            return
        short = name.rpartition(".")[2]
        reads: list[ast.expr] = [n for n in self.index.names(short) if isinstance(n.ctx, ast.Load)]
        reads += [a for a in self.index.attributes(short) if isinstance(a.ctx, ast.Load)]
        for read in reads:
            if dotted_name(read) is None or not (dotted_name(read) or "").endswith(short):
                continue
            parent = self.index.parent(read)
            call = self.index.parent(parent) if parent is not None else None
            if (
                isinstance(parent, ast.Attribute)
                and parent.value is read
                and isinstance(call, ast.Call)
                and call.func is parent
            ):
                if parent.attr in SCALER_METHODS:
                    self.found.scaler_uses.append(call)
                    continue
                self._problem(
                    call,
                    f"`{self.view.written(parent)}` has no apex amp counterpart npu-migrate "
                    "writes (the loss scale is `amp._amp_state.loss_scalers[0].loss_scale()`): "
                    "convert it by hand",
                )
            elif isinstance(parent, ast.Attribute) and parent.value is read:
                continue  # `self.scaler` read as the base of `self.scaler.x`: the outer read
            elif not self._passed_on_by_name(read, short):
                self._problem(
                    read,
                    f"the GradScaler `{short}` is used here in a way npu-migrate cannot follow",
                )

    def _passed_on_by_name(self, read: ast.expr, short: str) -> bool:
        """``train(model, scaler)`` (or ``scaler=scaler``) into a parameter of the same name
        of a function of this module, which goes with the scaler."""
        parent = self.index.parent(read)
        call = self.index.parent(parent) if isinstance(parent, ast.keyword) else parent
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            return False
        definitions = [d for d in self.index.nodes(ast.FunctionDef) if d.name == call.func.id]
        if len(definitions) != 1:
            return False
        definition = definitions[0]
        arguments = definition.args
        names = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        if isinstance(parent, ast.keyword):
            known = names + [a.arg for a in arguments.kwonlyargs]
            fits = parent.arg == short and short in known
        else:
            position = call.args.index(read) if read in call.args else len(names)
            fits = position < len(names) and names[position] == short
            fits = fits and position == len(call.args) - 1 and not call.keywords
        if not fits or arguments.vararg is not None:
            return False
        self.found.passed.append((call, read))
        if definition not in self.found.parameters:
            self.found.parameters.append(definition)
        return True

    def _every_call_passes_the_scaler(self) -> None:
        passing = {id(call) for call, _ in self.found.passed}
        for definition in self.found.parameters:
            for name in self.index.names(definition.name):
                call = self.index.parent(name)
                if isinstance(call, ast.Call) and call.func is name and id(call) not in passing:
                    self._problem(
                        call,
                        f"`{definition.name}` takes the GradScaler, and this call does not pass "
                        "it: npu-migrate removes the parameter only when every call passes it",
                    )

    def _guarded_states(self) -> None:
        """With a switch, apex's ``amp.state_dict()`` fails while amp is off (torch's scaler
        returns ``{}``): the scaler's state must be read under the same condition."""
        enabled = self.found.enabled
        if enabled is None:
            return
        switch = self.view.code(enabled)
        for call in self.found.scaler_uses:
            assert isinstance(call.func, ast.Attribute)
            if call.func.attr not in ("state_dict", "load_state_dict"):
                continue
            child: ast.AST = call
            guarded = False
            for ancestor in self.index.ancestors(call):
                if isinstance(ancestor, ast.If) and any(s is child for s in ancestor.body):
                    guarded = guarded or self.view.code(ancestor.test) == switch
                child = ancestor
            if not guarded:
                self._problem(
                    call,
                    f"apex's `amp.{call.func.attr}` fails while amp is off, and this runs "
                    f"whether or not `{switch}` holds: put it under `if {switch}:`, then convert",
                )

    def _switch(self) -> None:
        codes = {self.view.code(value) for _, value in self.switches}
        if len(codes) > 1:
            where, _ = self.switches[1]
            self._problem(
                where,
                "autocast and the scaler are switched by different conditions "
                f"({', '.join(f'`{c}`' for c in sorted(codes))}); apex amp has one `enabled`",
            )
            return
        if self.switches:
            self.found.enabled = self.switches[0][1]


def _is_decorator(index: object, call: ast.Call) -> bool:
    parent = index.parent(call)  # type: ignore[attr-defined]
    return (
        isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef) and call in parent.decorator_list
    )
