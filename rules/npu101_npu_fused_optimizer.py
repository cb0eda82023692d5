"""NPU101: torch / apex optimizer constructors that have an NPU fused version."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import ImportAssignment, PositionProvider, ScopeProvider

from migrator.callargs import append_arg, keyword, remove_arg_objects
from migrator.diagnostics import Severity
from migrator.names import Ambiguous
from migrator.rule import FixSafety, Rule
from migrator.rules.npu1_common import (
    APEX_HOME,
    FP16_OPTIMIZERS,
    NOT_LITERAL,
    OPTIMIZER_MODULES,
    SOURCES,
    TARGET_PARAMETERS,
    TORCH_NPU_HOME,
    UNSUPPORTED,
    OptimizerFlow,
    Source,
    code_of,
    literal_value,
    npu_fused_name,
    qualified,
)

# Switches that only choose a CUDA kernel or a memory strategy; the update is the same without.
PERFORMANCE_ONLY = frozenset(
    {"foreach", "fused", "capturable", "set_grad_none", "materialize_master_grads"}
)
# Arguments that are harmless at the given value and change the update at any other value.
NEUTRAL_AT: dict[str, tuple[object, str]] = {
    "maximize": (False, "`maximize=True` (gradient ascent) has no NPU fused equivalent"),
    "differentiable": (
        False,
        "`differentiable=True` (autograd through the optimizer step) has no NPU fused equivalent",
    ),
    "bias_correction": (
        True,
        "`bias_correction=False` has no NPU equivalent: the NPU fused Adam optimizers always "
        "apply bias correction",
    ),
    "wd_after_momentum": (
        False,
        "`wd_after_momentum=True` has no NPU equivalent: NpuFusedSGD applies weight decay "
        "before momentum, as torch.optim.SGD does",
    ),
    "decoupled_weight_decay": (
        False,
        "`decoupled_weight_decay=True` makes it AdamW: use `NpuFusedAdamW` with the same "
        "`weight_decay` instead",
    ),
    "master_weights": (
        False,
        "FusedAdam's own fp32 master weights have no NPU equivalent: "
        '`amp.initialize(..., opt_level="O2")` keeps fp32 master weights instead',
    ),
    "amsgrad": (False, "the NPU fused Adam optimizers do not implement AMSGrad"),
}
# Arguments the NPU fused optimizers also take, for which the neutral value is kept as written.
KEPT_WHEN_NEUTRAL = frozenset({"amsgrad"})

TORCH_SGD_DEFAULT_LR = "0.001"  # torch.optim.SGD's default; NpuFusedSGD requires lr


@dataclass
class Plan:
    """How one constructor call is rewritten; computed before the tree is transformed."""

    call: cst.Call
    source: Source
    target: str
    home: str
    amp_line: int | None
    dropped: set[int] = field(default_factory=set)  # argument indices
    to_keyword: dict[int, str] = field(default_factory=dict)  # positional index -> its name
    added: list[tuple[str, str]] = field(default_factory=list)  # (keyword, value code)
    notes: list[str] = field(default_factory=list)
    func_style: str = "dotted"  # "dotted", "attr" (replace the last attribute), "alias", "rename"

    @property
    def qualified_target(self) -> str:
        return f"{self.home}.{self.target}"


class NpuFusedOptimizer(Rule):
    """
    ## What it does
    Replaces `torch.optim.SGD/Adam/AdamW/Adadelta/RMSprop` and apex `FusedSGD/FusedAdam`
    constructors with the NPU fused optimizers. An optimizer that reaches `amp.initialize` in the
    same module becomes `apex.optimizers.NpuFused*` (Ascend apex); any other becomes
    `torch_npu.optim.NpuFused*`, which works without amp. Arguments are mapped: apex FusedAdam's
    `adam_w_mode` picks `NpuFusedAdamW` or `NpuFusedAdam`, and `weight_decay=0.0` is passed
    explicitly when FusedAdam relied on its default; performance-only switches (`foreach`,
    `fused`, `capturable`, `set_grad_none`, `materialize_master_grads`) are dropped.
    Reported for manual migration, never rewritten: arguments that change the update and have no
    NPU equivalent (`maximize`, `differentiable`, `amsgrad=True`, FusedAdam
    `bias_correction=False`, FusedSGD `wd_after_momentum=True`), apex `FusedLAMB`,
    `FusedNovoGrad`, `FusedAdagrad`, `FusedMixedPrecisionLamb`, `getattr(torch.optim, name)`,
    subclasses of these optimizers and `FP16_Optimizer` wrappers.

    ## Why
    The NPU fused optimizers keep parameters, gradients and optimizer states in a few flat
    buffers and update them with one kernel per buffer; the unfused ones launch kernels per
    tensor. Ascend apex's versions raise in `step()` unless the optimizer went through
    `amp.initialize`, which is why an optimizer outside amp gets torch_npu's version.

    ## Example
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    ```

    ## Use instead
    ```python
    optimizer = apex.optimizers.NpuFusedSGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    ```

    ## Fix safety
    Safe: the NPU fused optimizers compute the same update as the optimizers they replace, and
    any argument that would make them differ blocks the rewrite. Optimizer checkpoints keep their
    per-parameter state keys.
    """

    CODE = "NPU101"
    NAME = "npu-fused-optimizer"
    SUMMARY = "optimizer constructor that has an NPU fused version"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"(?i)optim|sgd|adam|adadelta|rmsprop|fused")

    def visit_Module(self, node: cst.Module) -> None:
        self.flow = OptimizerFlow(self, node)
        self.plans: dict[int, Plan] = {}
        self.import_rewrites: dict[int, tuple[str | None, str]] = {}  # id(alias) -> (module, name)
        wrapped = self._report_fp16_wrappers()
        for call in self.flow.calls:
            if id(call) not in wrapped:
                self._examine_call(call)
        for class_def in self.flow.classes:
            self._examine_subclass(class_def)
        self._plan_call_names()

    # -- analysis --------------------------------------------------------------------------------

    def _suppressed(self, node: cst.CSTNode) -> bool:
        return self.context.suppressions.covers(self.position(node)[0], self.CODE)

    def _report_fp16_wrappers(self) -> set[int]:
        """Report ``FP16_Optimizer(...)``; the ids of the constructors it wraps, left as they are
        so that the user migrates wrapper and optimizer together."""
        wrapped: set[int] = set()
        for call in self.flow.calls:
            if self._suppressed(call):
                continue
            if isinstance(qualified(self, call.func, FP16_OPTIMIZERS), str):
                self.report(call, _FP16_OPTIMIZER_ADVICE)
                for arg in call.args:
                    wrapped.update(id(origin) for origin in self.flow.origins(arg.value))
        return wrapped

    def _examine_call(self, call: cst.Call) -> None:
        """Plan the rewrite of ``call``, or report why it cannot be rewritten."""
        if self._suppressed(call):
            return
        if self._is_dynamic_lookup(call):
            self.report(call, _DYNAMIC_LOOKUP_ADVICE)
            return
        self._check_apex_home(call)
        wanted = SOURCES.keys() | UNSUPPORTED.keys()
        name = qualified(self, call.func, wanted)
        if isinstance(name, Ambiguous):
            self.report(call, self._ambiguous_message(call, name))
        elif name in UNSUPPORTED:
            self.report(call, f"`{name}` is not rewritten: {UNSUPPORTED[name]}")
        elif name in SOURCES:
            self._plan(call, SOURCES[name])

    def _check_apex_home(self, call: cst.Call) -> None:
        """An Ascend apex fused optimizer that never reaches amp here raises in `step()`."""
        name = npu_fused_name(self, call.func)
        if (
            name is None
            or not name.startswith(APEX_HOME + ".")
            or id(call) in self.flow.reaches_amp
        ):
            return
        self.report(
            call,
            f"`{name}` does not reach `amp.initialize` in this module, and Ascend apex's fused "
            "optimizers raise in `step()` without amp: if no other module passes it to "
            f"`amp.initialize`, use `{TORCH_NPU_HOME}.{name.rsplit('.', 1)[1]}`, which works "
            "without amp",
            severity=Severity.INFO,
        )

    def _is_dynamic_lookup(self, call: cst.Call) -> bool:
        """``getattr(torch.optim, name)(...)``."""
        lookup = call.func
        if not isinstance(lookup, cst.Call) or not lookup.args:
            return False
        if qualified(self, lookup.func) != "builtins.getattr":
            return False
        module = qualified(self, lookup.args[0].value)
        return isinstance(module, str) and module in OPTIMIZER_MODULES

    def _ambiguous_message(self, call: cst.Call, name: Ambiguous) -> str:
        hints = [f"`{c}` -> {_target_hint(SOURCES[c])}" for c in name.candidates if c in SOURCES]
        advice = (
            f"replace it by hand ({', '.join(hints)}; from `apex.optimizers` when the optimizer "
            "goes through `amp.initialize`, from `torch_npu.optim` otherwise)"
            if hints
            else "migrate it by hand"
        )
        return (
            f"cannot tell which optimizer `{code_of(call.func)}` is: {name.describe()}; "
            f"npu-migrate only rewrites names with a single origin: {advice}"
        )

    def _examine_subclass(self, class_def: cst.ClassDef) -> None:
        if self._suppressed(class_def):
            return
        for base in class_def.bases:
            name = qualified(self, base.value, SOURCES.keys() | UNSUPPORTED.keys())
            if not isinstance(name, str):
                continue
            if name in UNSUPPORTED:
                advice = UNSUPPORTED[name]
            else:
                advice = (
                    f"rebase it on {_target_hint(SOURCES[name])} from `torch_npu.optim` (or "
                    "`apex.optimizers` if it goes through `amp.initialize`) and check that every "
                    "override still holds, because the fused optimizers keep their state in "
                    "flat buffers"
                )
            self.report(
                class_def,
                f"`{class_def.name.value}` subclasses `{name}`, and npu-migrate does not rewrite "
                f"subclasses: {advice}",
            )

    def _plan(self, call: cst.Call, source: Source) -> None:
        names, problems = _bind(call, source)
        target = source.target
        if target is None:
            target, problem = _fused_adam_target(call, names)
            if problem:
                problems.append(problem)
        if target is None or problems:
            self.report(call, _blocked_message(source, target, problems))
            return
        amp_call = self.flow.reaches_amp.get(id(call))
        plan = Plan(
            call,
            source,
            target,
            APEX_HOME if amp_call is not None else TORCH_NPU_HOME,
            self.flow.line_of(amp_call) if amp_call is not None else None,
        )
        problems = self._map_arguments(plan, names)
        if problems:
            self.report(call, _blocked_message(source, target, problems))
            return
        if amp_call is not None:
            condition = self.flow.condition_only_for(amp_call, call)
            if condition is not None:
                plan.notes.append(
                    f"warning: `amp.initialize` runs only when {condition}, and without it this "
                    "optimizer refuses to step: call `amp.initialize` on every path, or use "
                    f"`{TORCH_NPU_HOME}.{target}` on the path without amp"
                )
        self.plans[id(call)] = plan

    def _map_arguments(self, plan: Plan, names: list[str]) -> list[str]:
        problems: list[str] = []
        dropped_notes: list[str] = []
        for index, (arg, name) in enumerate(zip(plan.call.args, names, strict=True)):
            if name == "adam_w_mode":
                plan.dropped.add(index)
                plan.notes.append(f"`adam_w_mode={code_of(arg.value)}` chose `{plan.target}`")
            elif name in PERFORMANCE_ONLY:
                plan.dropped.add(index)
                dropped_notes.append(f"`{name}={code_of(arg.value)}`")
            elif name in NEUTRAL_AT:
                neutral, reason = NEUTRAL_AT[name]
                value = literal_value(arg.value)
                if value is NOT_LITERAL:
                    problems.append(
                        f"`{name}={code_of(arg.value)}` is not a literal, so npu-migrate cannot "
                        "tell whether it changes the update"
                    )
                elif value != neutral:
                    problems.append(reason)
                elif name not in KEPT_WHEN_NEUTRAL:
                    plan.dropped.add(index)
                    dropped_notes.append(f"`{name}={code_of(arg.value)}`")
        if problems:
            return problems
        self._reposition(plan, names)
        present = set(names)
        fused_adam_default = plan.source.target is None and plan.target == "NpuFusedAdamW"
        if fused_adam_default and "weight_decay" not in present:
            plan.added.append(("weight_decay", "0.0"))
            plan.notes.append(
                "added `weight_decay=0.0`: FusedAdam's default is 0.0, NpuFusedAdamW's is 1e-2"
            )
        if plan.target == "NpuFusedSGD" and "lr" not in present:
            plan.added.append(("lr", TORCH_SGD_DEFAULT_LR))
            plan.notes.append(
                f"added `lr={TORCH_SGD_DEFAULT_LR}`, torch's default, which NpuFusedSGD requires"
            )
        if dropped_notes:
            plan.notes.append(f"dropped {', '.join(dropped_notes)} (no effect on the update)")
        return []

    def _reposition(self, plan: Plan, names: list[str]) -> None:
        """Positional arguments stay positional while they line up with the target's order."""
        target_parameters = TARGET_PARAMETERS[plan.target]
        position = 0
        aligned = True
        for index, arg in enumerate(plan.call.args):
            if arg.keyword is not None or index in plan.dropped:
                if arg.keyword is None:
                    aligned = False
                continue
            aligned = (
                aligned
                and position < len(target_parameters)
                and target_parameters[position] == names[index]
            )
            if aligned:
                position += 1
            else:
                plan.to_keyword[index] = names[index]

    def _plan_call_names(self) -> None:
        """Choose how each planned call spells the new class, and which imports change."""
        by_import: dict[int, list[Plan]] = {}
        for plan in self.plans.values():
            func = plan.call.func
            if isinstance(func, cst.Attribute):
                base = qualified(self, func.value)
                plan.func_style = "attr" if base == plan.home else "dotted"
                continue
            binding = self._from_import_binding(func)
            if binding is not None:
                by_import.setdefault(id(binding[1]), []).append(plan)
        for plans in by_import.values():
            self._plan_from_import(plans)
        for plan in self.plans.values():
            if plan.func_style == "dotted":
                self._release_old_import(plan.call.func, plan)

    def _from_import_binding(
        self, name: cst.BaseExpression
    ) -> tuple[ImportAssignment, cst.ImportAlias, cst.ImportFrom] | None:
        """The single ``from m import x [as y]`` that binds ``name``, if that is its only origin."""
        if not isinstance(name, cst.Name):
            return None
        scope = self.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return None
        assignments = list(scope[name.value])
        if len(assignments) != 1 or not isinstance(assignments[0], ImportAssignment):
            return None
        statement = assignments[0].node
        if not isinstance(statement, cst.ImportFrom) or isinstance(statement.names, cst.ImportStar):
            return None
        for alias in statement.names:
            if alias.evaluated_alias == name.value or (
                alias.asname is None and alias.evaluated_name == name.value
            ):
                return assignments[0], alias, statement
        return None

    def _plan_from_import(self, plans: list[Plan]) -> None:
        """Rewrite ``from m import X [as A]`` in place when every use of it is rewritten alike."""
        assignment, alias, statement = self._from_import_binding(plans[0].call.func)  # type: ignore[misc]
        planned_funcs = {id(plan.call.func) for plan in plans}
        uniform = (
            len({(plan.home, plan.target) for plan in plans}) == 1
            and all(id(access.node) in planned_funcs for access in assignment.references)
            and statement.relative == ()
        )
        module = code_of(statement.module) if statement.module is not None else ""
        home = plans[0].home
        single = isinstance(statement.names, tuple | list) and len(statement.names) == 1
        if not uniform or not (single or module == home):
            for plan in plans:
                plan.func_style = "dotted"
            return
        self.import_rewrites[id(alias)] = (None if module == home else home, plans[0].target)
        for plan in plans:
            plan.func_style = "alias" if alias.asname is not None else "rename"

    def _release_old_import(self, func: cst.BaseExpression, plan: Plan) -> None:
        """The import that bound the old spelling goes if nothing else uses it.

        Only imports of the optimizer module or class (`from torch import optim`,
        `import torch.optim as O`, `from torch.optim import SGD`): `import torch` stays.
        """
        base = func
        while isinstance(base, cst.Attribute):
            base = base.value
        if not isinstance(base, cst.Name):
            return
        bound = qualified(self, base)
        if not isinstance(bound, str) or bound.count(".") < 1:
            return
        scope = self.get_metadata(ScopeProvider, base, None)
        if scope is None:
            return
        for assignment in scope[base.value]:
            if not isinstance(assignment, ImportAssignment):
                continue
            statement = assignment.node
            if isinstance(statement, cst.Import):
                for alias in statement.names:
                    if alias.evaluated_alias == base.value or (
                        alias.asname is None and alias.evaluated_name.split(".")[0] == base.value
                    ):
                        self.remove_import_if_unused(
                            alias.evaluated_name, None, alias.evaluated_alias
                        )
            elif isinstance(statement, cst.ImportFrom) and statement.module is not None:
                if isinstance(statement.names, cst.ImportStar) or statement.relative:
                    continue
                for alias in statement.names:
                    if (alias.evaluated_alias or alias.evaluated_name) == base.value:
                        self.remove_import_if_unused(
                            code_of(statement.module), alias.evaluated_name, alias.evaluated_alias
                        )

    # -- transformation --------------------------------------------------------------------------

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        plan = self.plans.get(id(original_node))
        if plan is None or not self.fix(original_node, _fixed_message(plan)):
            return updated_node
        args = list(updated_node.args)
        for index, name in plan.to_keyword.items():
            args[index] = args[index].with_changes(
                keyword=cst.Name(name), equal=keyword(name, cst.Name("x")).equal
            )
        call = updated_node.with_changes(args=args)
        call = remove_arg_objects(call, [args[index] for index in sorted(plan.dropped)])
        for name, value in plan.added:
            call = append_arg(call, keyword(name, cst.parse_expression(value)))
        new_func = self._new_func(plan, updated_node.func)
        call = self._keep_visual_indent(original_node, call, new_func)
        return call.with_changes(func=new_func)

    def _keep_visual_indent(
        self, original: cst.Call, call: cst.Call, new_func: cst.BaseExpression
    ) -> cst.Call:
        """Continuation lines aligned with the opening parenthesis move with it."""
        shift = len(code_of(new_func)) - len(code_of(original.func))
        if shift == 0:
            return call
        func_end = self.get_metadata(PositionProvider, original.func).end.column
        aligned_column = func_end + len(code_of(original.whitespace_after_func)) + 1
        aligned_names = {
            code_of(arg.keyword) if arg.keyword else code_of(arg.value)
            for arg in original.args
            if self.get_metadata(PositionProvider, arg).start.column == aligned_column
        }
        args = list(call.args)
        for index, arg in enumerate(args[:-1]):
            after = arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else None
            following = args[index + 1]
            name = code_of(following.keyword) if following.keyword else code_of(following.value)
            if isinstance(after, cst.ParenthesizedWhitespace) and name in aligned_names:
                width = max(0, len(after.last_line.value) + shift)
                last_line = cst.SimpleWhitespace(" " * width)
                args[index] = arg.with_changes(
                    comma=arg.comma.with_changes(  # type: ignore[union-attr]
                        whitespace_after=after.with_changes(last_line=last_line)
                    )
                )
        return call.with_changes(args=args)

    def _new_func(self, plan: Plan, func: cst.BaseExpression) -> cst.BaseExpression:
        if plan.func_style == "alias":
            return func
        if plan.func_style == "rename":
            return cst.Name(plan.target)
        if plan.func_style == "attr" and isinstance(func, cst.Attribute):
            return func.with_changes(attr=cst.Name(plan.target))
        if plan.home == TORCH_NPU_HOME:
            self.add_import("torch_npu", after="torch")
        else:
            self.add_import("apex", after="apex")  # next to the file's other apex imports
        return cst.parse_expression(plan.qualified_target)

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom:
        if isinstance(original_node.names, cst.ImportStar) or not any(
            id(alias) in self.import_rewrites for alias in original_node.names
        ):
            return updated_node
        assert not isinstance(updated_node.names, cst.ImportStar)
        module: str | None = None
        names = []
        for original, alias in zip(original_node.names, updated_node.names, strict=True):
            rewrite = self.import_rewrites.get(id(original))
            if rewrite is not None:
                module = rewrite[0] or module
                alias = alias.with_changes(name=cst.Name(rewrite[1]))
            names.append(alias)
        updated_node = updated_node.with_changes(names=names)
        if module is not None:
            updated_node = updated_node.with_changes(module=cst.parse_expression(module))
        return updated_node


def _bind(call: cst.Call, source: Source) -> tuple[list[str], list[str]]:
    """The parameter name of each argument, by the source's signature, and binding problems."""
    names: list[str] = []
    problems: list[str] = []
    position = 0
    for arg in call.args:
        if arg.star:
            problems.append(
                f"arguments passed as `{arg.star}{code_of(arg.value)}` cannot be checked"
            )
            names.append("")
        elif arg.keyword is None:
            if position < len(source.positional):
                names.append(source.positional[position])
            else:
                problems.append(f"`{source.display}` takes fewer positional arguments")
                names.append("")
            position += 1
        elif arg.keyword.value in source.parameters:
            names.append(arg.keyword.value)
        else:
            problems.append(f"`{arg.keyword.value}=` is not a parameter of `{source.display}`")
            names.append(arg.keyword.value)
    return names, problems


def _fused_adam_target(call: cst.Call, names: list[str]) -> tuple[str | None, str | None]:
    """apex FusedAdam: ``adam_w_mode`` (default True) picks NpuFusedAdamW or NpuFusedAdam."""
    if "adam_w_mode" not in names:
        return "NpuFusedAdamW", None
    arg = call.args[names.index("adam_w_mode")]
    value = literal_value(arg.value)
    if value is NOT_LITERAL:
        return None, (
            f"`adam_w_mode={code_of(arg.value)}` is not a literal, so npu-migrate cannot choose "
            "between NpuFusedAdamW (True) and NpuFusedAdam (False)"
        )
    return ("NpuFusedAdamW" if value else "NpuFusedAdam"), None


def _target_hint(source: Source) -> str:
    if source.target is None:
        return "`NpuFusedAdamW` (`NpuFusedAdam` with `adam_w_mode=False`)"
    return f"`{source.target}`"


def _blocked_message(source: Source, target: str | None, problems: list[str]) -> str:
    fused = f"`{target}`" if target else _target_hint(source)
    return (
        f"`{source.display}` is not rewritten to {fused}: {'; '.join(problems)}. It still runs "
        "on NPU unfused; to fuse it, remove that argument and use the NPU fused optimizer"
    )


def _fixed_message(plan: Plan) -> str:
    if plan.home == APEX_HOME:
        why = (
            f"it goes through `amp.initialize` (line {plan.amp_line}), and Ascend apex's fused "
            "optimizers step only under amp"
        )
    else:
        why = (
            "it does not reach `amp.initialize` in this module, and torch_npu's fused optimizers "
            "work without amp"
        )
    notes = "".join(f"; {note}" for note in plan.notes)
    return f"replaced `{plan.source.display}` with `{plan.qualified_target}`: {why}{notes}"


_FP16_OPTIMIZER_ADVICE = (
    "`FP16_Optimizer` is not rewritten: the NPU fused optimizers get mixed precision from "
    "`amp.initialize`. Build the optimizer unwrapped, call "
    '`model, optimizer = amp.initialize(model, optimizer, opt_level="O2")`, and replace '
    "`optimizer.backward(loss)` with `with amp.scale_loss(loss, optimizer) as scaled: "
    "scaled.backward()`; npu-migrate then rewrites the optimizer"
)
_DYNAMIC_LOOKUP_ADVICE = (
    "the optimizer class is looked up by name at run time, so npu-migrate cannot rewrite it: map "
    "the names yourself, e.g. `{'SGD': torch_npu.optim.NpuFusedSGD, 'Adam': "
    "torch_npu.optim.NpuFusedAdam}` (use `apex.optimizers.NpuFused*` when the optimizer goes "
    "through `amp.initialize`)"
)
