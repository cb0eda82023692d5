"""NPU104: replace DDP by Ascend apex's `combine_ddp=True` (opt-in)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from migrator.analysis.calls import argument, arguments, has_star, literal_value
from migrator.analysis.effects import DATA_PARALLEL, DDP_CLASSES, dotted_path, show
from migrator.analysis.names import Ambiguous
from migrator.callargs import append_arg, find_keyword, keyword
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._flow import fused_name
from migrator.rules.optimizers._plans import FusedPlans, RemovedWraps, planned

AMP_INITIALIZE = "apex.amp.initialize"
APEX_DDP = frozenset(
    {"apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"}
)
# amp.initialize(models, optimizers, enabled, opt_level, ...): positions of what is checked.
_OPTIMIZERS, _OPT_LEVEL, _MASTER_WEIGHTS = 1, 3, 7
# DDP arguments that only place or schedule the all-reduce: combine_ddp does its own.
_DROPPABLE = frozenset(
    {
        "device_ids", "output_device", "dim", "bucket_cap_mb", "gradient_as_bucket_view",
        "static_graph", "check_reduction", "delay_allreduce", "message_size",
        "allreduce_trigger_params", "retain_allreduce_buffers", "num_allreduce_streams",
    }
)  # fmt: skip
# Methods of a DDP model that behave the same on the module it wraps.
_NEUTRAL_METHODS = frozenset(
    {
        "train", "eval", "parameters", "buffers", "zero_grad", "forward", "to", "cuda", "npu",
        "cpu", "float", "half", "bfloat16", "double", "requires_grad_",
    }
)  # fmt: skip
# Methods whose results name parameters: DDP's names start with `module.`, the module's do not.
_NAMED_METHODS = frozenset(
    {
        "state_dict", "load_state_dict", "named_parameters", "named_buffers", "named_modules",
        "named_children", "modules", "children", "get_submodule", "get_parameter",
    }
)  # fmt: skip


@dataclass
class WrapPlan:
    """One `target = DDP(source, ...)` and what removing it takes."""

    statement: ast.stmt  # the statement removed (the wrap, or the `if` holding only it)
    wrap: ast.Assign
    call: ast.Call
    target: str
    source: str
    amp_call: ast.Call
    condition: ast.expr | None  # `if args.distributed:` around the wrap
    edits: list[Edit] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, why not)
    needs_contextlib: bool = False


class AmpCombineDdp(Rule):
    """
    ## What it does
    Where a model goes through `amp.initialize` with NPU fused optimizers and is then wrapped
    in torch's or apex's DistributedDataParallel, removes the wrap and adds
    `combine_ddp=True` (and `combine_grad=True`, which it needs) to the `amp.initialize` call:
    Ascend apex then averages the packed gradient buffers across processes itself. What depended
    on the wrapper is rewritten: `model.module` becomes the model, `with model.no_sync():`
    becomes `with contextlib.nullcontext():`, `find_unused_parameters=False` and
    `broadcast_buffers=False` go with the wrap. A wrap inside `if args.distributed:` (the `if`
    holding only it) becomes `combine_ddp=args.distributed`.

    ## Why
    Ascend apex's distributed switch: `combine_ddp=True` with the framework's DDP turned off
    all-reduces a few large flat buffers instead of many per-parameter buckets.

    ## Example
    ```python
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", combine_grad=True)
    model = DDP(model, device_ids=[rank], broadcast_buffers=False)
    torch.save(model.module.state_dict(), path)
    ```

    ## Use instead
    ```python
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O1", combine_grad=True, combine_ddp=True
    )
    torch.save(model.state_dict(), path)
    ```

    ## Fix safety
    Safe, and opt-in: it runs only when selected by its full code. The rewrite is made only
    when the program keeps its numbers: every optimizer reaching `amp.initialize` is (or NPU101
    makes it) an NPU fused one, `opt_level` is O1 or O2 (with master weights under O2), the
    `amp.initialize` call and the wrap are in the same block (or the wrap alone in an `if` of
    that block whose condition nothing in between changes), and every use of the wrapped model
    after the wrap is one the rule understands: calling it, `train()` / `eval()` /
    `parameters()` / device moves, `.module`, `no_sync()`, `x.module if hasattr(x, "module")
    else x`, or passing it to a function of the same module that uses it only in those ways.
    Everything else is reported at the wrap, with the reason: `find_unused_parameters=True`
    (parameters without a gradient at the first step stay out of combine_ddp's buffers for
    good), `broadcast_buffers` left at its default (DDP copies rank 0's buffers, such as
    BatchNorm statistics, to every process at each forward; combine_ddp only at
    `amp.initialize`: pass `broadcast_buffers=False` if that is fine), a process group other
    than the default one, `state_dict()` / `named_parameters()` of the wrapper (its names start
    with `module.`), or the wrapper passed where the rule cannot follow it.
    With `no_sync()` gone the gradients are averaged after every backward instead of once per
    accumulation: the same sum, rounded in another order.
    """

    CODE = "NPU104"
    NAME = "amp-combine-ddp"
    SUMMARY = "DDP around an amp-initialized model with NPU fused optimizers (opt-in)"
    FIX_SAFETY = FixSafety.SAFE
    OPT_IN = True
    # Every wrap it acts on resolves to a DistributedDataParallel class, so the file names it.
    TRIGGER = ("DistributedDataParallel",)
    PROVIDES = (RemovedWraps,)
    READS = (FusedPlans,)

    def check(self) -> None:
        plans: dict[int, WrapPlan] = {}
        for call in self.calls_to({"torch", "apex"}):
            name = self.qualified_name_in(call.func, DDP_CLASSES - DATA_PARALLEL)
            if isinstance(name, Ambiguous):
                if self.amp_calls:
                    self.report(
                        call,
                        f"`combine_ddp` not used: `{self.code(call.func)}` may be "
                        f"DistributedDataParallel ({name.describe()})",
                    )
                continue
            if name is None or not self.amp_calls:
                continue
            plan = self.plan(call, name)
            if plan is None:
                continue
            if plan.problems:
                line, why = plan.problems[0]
                where = f" (line {line})" if line != call.lineno else ""
                self.report(call, f"DDP kept, `combine_ddp` not used: {why}{where}")
                continue
            plans[id(call)] = plan
            self.apply(plan, name)
        self.publish(RemovedWraps(frozenset(plans)))

    @property
    def amp_calls(self) -> list[ast.Call]:
        found = getattr(self, "_amp_calls", None)
        if found is None:
            found = [
                call
                for call in self.calls_to({"apex"})
                if self.qualified_name_in(call.func, {AMP_INITIALIZE}) == AMP_INITIALIZE
            ]
            self._amp_calls = found
        return found

    # -- the wrap and the amp.initialize it follows ----------------------------------------------

    def plan(self, call: ast.Call, name: str) -> WrapPlan | None:
        wrap = self.index.parent(call)
        if not (isinstance(wrap, ast.Assign) and wrap.value is call and len(wrap.targets) == 1):
            self.refused(call, "the wrapped model is not assigned to a name")
            return None
        target = dotted_path(wrap.targets[0])
        given = arguments(call)
        module = next((a for a in given if a.keyword == "module"), None)
        if module is None and given and given[0].keyword is None and not given[0].star:
            module = given[0]
        source = dotted_path(module.value) if module is not None else None
        if target is None or source is None or len(target) != 1 or len(source) != 1:
            self.refused(call, "it wraps or binds something other than a plain name")
            return None
        statement, condition = self.removable_statement(wrap)
        body = self.body_of(statement)
        if body is None:
            self.refused(call, "the wrap is not a statement of a block")
            return None
        amp_call = self.amp_before(body, statement, source[0])
        if amp_call is None:
            later = [c for c in self.amp_calls if c.lineno > call.lineno]
            if later:
                self.refused(
                    call,
                    "`amp.initialize` of this model comes after the wrap; once NPU203 has moved "
                    "it above the wrap, a second run can use combine_ddp",
                    later[0].lineno,
                )
            return None  # not an amp-initialized model: not this rule's business
        plan = WrapPlan(statement, wrap, call, target[0], source[0], amp_call, condition)
        self.check_amp(plan)
        self.check_arguments(plan, name)
        self.check_between(plan, body)
        if not plan.problems:
            self.check_uses(plan)
        return plan

    def refused(self, call: ast.Call, why: str, line: int | None = None) -> None:
        """Report a wrap the rule does not act on (in a file that calls amp.initialize); the
        plan is None."""
        if self.amp_calls:
            where = f" (line {line})" if line is not None else ""
            self.report(call, f"DDP kept, `combine_ddp` not used: {why}{where}")

    def removable_statement(self, wrap: ast.Assign) -> tuple[ast.stmt, ast.expr | None]:
        """The wrap, or the ``if`` (no else) holding only it, and that ``if``'s condition."""
        holder = self.index.parent(wrap)
        if (
            isinstance(holder, ast.If)
            and holder.body == [wrap]
            and not holder.orelse
            and not self.source.segment(holder).startswith("elif")
        ):
            return holder, holder.test
        return wrap, None

    def body_of(self, statement: ast.stmt) -> list[ast.stmt] | None:
        parent = self.index.parent(statement)
        for field_name in ("body", "orelse", "finalbody"):
            body = getattr(parent, field_name, None)
            if isinstance(body, list) and any(s is statement for s in body):
                return body
        return None

    def amp_before(self, body: list[ast.stmt], statement: ast.stmt, model: str) -> ast.Call | None:
        """``model, ... = amp.initialize(model, ...)`` earlier in ``body``."""
        position = next(i for i, s in enumerate(body) if s is statement)
        for earlier in reversed(body[:position]):
            if not isinstance(earlier, ast.Assign) or not isinstance(earlier.value, ast.Call):
                continue
            call = earlier.value
            if not any(call is c for c in self.amp_calls):
                continue
            first = argument(call, "models", 0)
            if first is not None and dotted_path(first.value) == (model,):
                return call
        return None

    def check_amp(self, plan: WrapPlan) -> None:
        call = plan.amp_call
        line = call.lineno
        if has_star(call):
            plan.problems.append((line, "`amp.initialize` gets arguments through `*`/`**`"))
            return
        for name, why in (("combine_grad", "sets `combine_grad` to something other than True"),):
            given = argument(call, name, None)
            if given is not None and literal_value(given.value) is not True:
                plan.problems.append((line, f"`amp.initialize` {why}"))
        level_arg = argument(call, "opt_level", _OPT_LEVEL)
        level = "O1" if level_arg is None else literal_value(level_arg.value)
        if level not in ("O1", "O2"):
            plan.problems.append(
                (line, "combine_ddp needs opt_level O1 or O2, which this call may not use")
            )
        if level == "O2":
            master = argument(call, "master_weights", _MASTER_WEIGHTS)
            if master is not None and literal_value(master.value) is not True:
                plan.problems.append((line, "with opt_level O2 combine_ddp needs master weights"))
        existing = argument(call, "combine_ddp", None)
        if existing is not None:
            plan.problems.append((line, "`amp.initialize` already sets `combine_ddp`"))
        optimizers = argument(call, "optimizers", _OPTIMIZERS)
        if optimizers is None:
            plan.problems.append((line, "`amp.initialize` gets no optimizer"))
            return
        unfused = self.unfused_optimizer(plan, optimizers.value)
        if unfused is not None:
            plan.problems.append((line, unfused))

    def unfused_optimizer(self, plan: WrapPlan, value: ast.expr) -> str | None:
        """Why the optimizer passed may not be an NPU fused one (None when it is)."""
        if not isinstance(value, ast.Name):
            return "the optimizer passed to `amp.initialize` is not a plain name"
        body = self.body_of(self.index.statement_of(plan.amp_call) or plan.statement)
        statement = self.index.statement_of(plan.amp_call)
        if body is None or statement is None:
            return "cannot see where the optimizer is built"
        position = next(i for i, s in enumerate(body) if s is statement)
        for earlier in reversed(body[:position]):
            bound = {
                n.id
                for n in ast.walk(earlier)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            if value.id not in bound:
                continue
            if (
                isinstance(earlier, ast.Assign)
                and len(earlier.targets) == 1
                and isinstance(earlier.targets[0], ast.Name)
                and isinstance(earlier.value, ast.Call)
            ):
                if fused_name(self.view, planned(self), earlier.value) is not None:
                    return None
                return (
                    f"`{value.id}` (line {earlier.lineno}) is not an NPU fused optimizer, nor "
                    "one that NPU101 makes NPU fused"
                )
            break
        return (
            f"cannot see which optimizer `{value.id}` is (npu-migrate follows "
            f"`{value.id} = ...` in this block)"
        )

    def check_arguments(self, plan: WrapPlan, name: str) -> None:
        line = plan.call.lineno
        if has_star(plan.call):
            plan.problems.append((line, "the wrap gets arguments through `*`/`**`"))
            return
        given = arguments(plan.call)
        keywords = {a.keyword: a for a in given if a.keyword is not None}
        if len([a for a in given if a.keyword is None]) > 1:
            plan.problems.append(
                (line, "the wrap gets more than the model as positional arguments")
            )
        for key, arg in keywords.items():
            if key == "module" or key in _DROPPABLE:
                continue
            value = literal_value(arg.value)
            if key == "find_unused_parameters" and value is False:
                continue
            if key == "broadcast_buffers" and value is False:
                continue
            if key == "find_unused_parameters":
                why = (
                    "`find_unused_parameters` may be True: parameters without a gradient at the "
                    "first step would stay out of combine_ddp's buffers for good"
                )
            elif key == "broadcast_buffers":
                why = "`broadcast_buffers` may be True (see the default below)"
            else:
                why = f"the wrap's `{key}=` has no combine_ddp equivalent"
            plan.problems.append((line, why))
        if name not in APEX_DDP and "broadcast_buffers" not in keywords:
            plan.problems.append(
                (
                    line,
                    "DDP broadcasts rank 0's buffers (BatchNorm statistics) at every forward "
                    "and combine_ddp does not; pass `broadcast_buffers=False` to the wrap if the "
                    "model needs no such sync",
                )
            )

    def check_between(self, plan: WrapPlan, body: list[ast.stmt]) -> None:
        """Nothing between amp.initialize and the wrap rebinds the model or the condition."""
        amp_statement = self.index.statement_of(plan.amp_call)
        start = next(i for i, s in enumerate(body) if s is amp_statement)
        end = next(i for i, s in enumerate(body) if s is plan.statement)
        watched = {plan.source}
        if plan.condition is not None:
            if any(isinstance(n, ast.Call) for n in ast.walk(plan.condition)):
                plan.problems.append(
                    (plan.condition.lineno, "the wrap's condition calls a function")
                )
            watched |= {n.id for n in ast.walk(plan.condition) if isinstance(n, ast.Name)}
        for statement in body[start + 1 : end]:
            for node in ast.walk(statement):
                if (
                    isinstance(node, ast.Name)
                    and not isinstance(node.ctx, ast.Load)
                    and node.id in watched
                ):
                    plan.problems.append(
                        (
                            node.lineno,
                            f"`{node.id}` is bound again between `amp.initialize` and the wrap",
                        )
                    )
                    return
                if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                    root = dotted_path(node)
                    if root is not None and root[0] in watched:
                        plan.problems.append(
                            (node.lineno, f"`{show(root)}` is changed before the wrap")
                        )
                        return

    # -- uses of the wrapper ---------------------------------------------------------------------

    def check_uses(self, plan: WrapPlan) -> None:
        scope = self.index.scope_of(plan.wrap)
        end = (plan.statement.end_lineno or 0, plan.statement.end_col_offset or 0)
        for name in self.index.names(plan.target):
            if self.index.scope_of(name) is not scope:
                continue
            if (name.lineno, name.col_offset) <= end:
                continue
            if not isinstance(name.ctx, ast.Load):
                plan.problems.append(
                    (name.lineno, f"`{plan.target}` is bound again after the wrap")
                )
                return
            problem = self.use_problem(plan, name, plan.target, plan.source, top=True)
            if problem is not None:
                plan.problems.append((name.lineno, problem))
                return
        if self.inside_loop(plan.wrap):
            plan.problems.append((plan.wrap.lineno, "the wrap is inside a loop"))

    def inside_loop(self, node: ast.AST) -> bool:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, ast.For | ast.While | ast.AsyncFor):
                return True
            if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                return False
        return False

    def use_problem(
        self, plan: WrapPlan, name: ast.Name, wrapper: str, model: str, *, top: bool
    ) -> str | None:
        """Why this use of the wrapper cannot be rewritten (None: fine, edits recorded when
        ``top``; a use inside another function must need no edit)."""
        if self.in_hasattr_idiom(name):
            return None  # right for the wrapper and for the module alike
        parent = self.index.parent(name)
        grand = self.index.parent(parent) if parent is not None else None
        if isinstance(parent, ast.Call) and parent.func is name:
            return None  # model(inputs)
        if isinstance(parent, ast.Attribute) and parent.value is name:
            method_call = isinstance(grand, ast.Call) and grand.func is parent
            if parent.attr == "module":
                if not top:
                    return "`.module` of the DDP model is used in a function it is passed to"
                plan.edits.append(self.replace(parent, cst.Attribute, _named(model)))
                return None
            if parent.attr == "no_sync" and method_call:
                if not top:
                    return "`no_sync()` of the DDP model is used in a function it is passed to"
                assert isinstance(grand, ast.Call)
                plan.edits.append(self.replace(grand, cst.Call, _null_context))
                plan.needs_contextlib = True
                return None
            if parent.attr in _NEUTRAL_METHODS and method_call:
                return None
            if parent.attr in _NAMED_METHODS:
                return (
                    f"`{wrapper}.{parent.attr}` names parameters with the `module.` prefix, which "
                    "goes with the wrap; use `.module` or the unwrapped model there"
                )
            return f"`{wrapper}.{parent.attr}` may be specific to DDP"
        if isinstance(parent, ast.Call):
            return self.passed_to(plan, parent, name, top)
        if isinstance(parent, ast.keyword):
            call = self.index.parent(parent)
            if isinstance(call, ast.Call):
                return self.passed_to(plan, call, name, top)
        return f"the DDP-wrapped `{wrapper}` is used in a way npu-migrate cannot follow"

    def in_hasattr_idiom(self, name: ast.Name) -> bool:
        """``name`` is part of ``x.module if hasattr(x, "module") else x``."""
        node: ast.AST | None = name
        for _ in range(3):
            node = self.index.parent(node) if node is not None else None
            if isinstance(node, ast.IfExp):
                break
        if not isinstance(node, ast.IfExp):
            return False
        test = node.test
        return (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "hasattr"
            and len(test.args) == 2
            and dotted_path(test.args[0]) == (name.id,)
            and literal_value(test.args[1]) == "module"
            and dotted_path(node.body) == (name.id, "module")
            and dotted_path(node.orelse) == (name.id,)
        )

    def passed_to(self, plan: WrapPlan, call: ast.Call, name: ast.Name, top: bool) -> str | None:
        """The wrapper passed to a function: fine when a function of this module uses its
        parameter only in ways that need no edit."""
        func = call.func
        if not isinstance(func, ast.Name):
            if self.qualified_name_in(func, {"apex.amp.scale_loss"}) == "apex.amp.scale_loss":
                return None
            return (
                f"the DDP-wrapped `{name.id}` is passed to `{self.code(func)}`, which "
                "npu-migrate cannot see into"
            )
        definition = next(
            (
                s
                for s in self.index.tree.body
                if isinstance(s, ast.FunctionDef) and s.name == func.id
            ),
            None,
        )
        bindings = self.index.bindings_of(func)
        if definition is None or len(bindings) != 1 or bindings[0].node is not definition:
            if func.id in ("print", "isinstance", "type", "id", "len"):
                return (
                    None
                    if func.id in ("print", "id")
                    else f"`{func.id}(...)` of the DDP model changes"
                )
            return (
                f"the DDP-wrapped `{name.id}` is passed to `{func.id}`, which npu-migrate "
                "cannot see into"
            )
        if not top:
            return f"the DDP model is passed on from `{func.id}`"
        parameter = _parameter_for(definition, call, name)
        if parameter is None:
            return f"cannot tell which parameter of `{func.id}` gets the DDP model"
        for inner in ast.walk(definition):
            if isinstance(inner, ast.Name) and inner.id == parameter:
                if not isinstance(inner.ctx, ast.Load):
                    return f"`{func.id}` binds `{parameter}` again"
                problem = self.use_problem(plan, inner, parameter, parameter, top=False)
                if problem is not None:
                    return f"in `{func.id}` (line {inner.lineno}): {problem}"
        return None

    # -- the rewrite -----------------------------------------------------------------------------

    def apply(self, plan: WrapPlan, name: str) -> None:
        condition = self.code(plan.condition) if plan.condition is not None else None
        edits: list[Edit] = [
            self.replace_statement(plan.statement, _replacement(plan, self.alone(plan))),
            self.replace(plan.amp_call, cst.Call, _combine(condition)),
            *plan.edits,
        ]
        where = f" when `{condition}`" if condition else ""
        message = (
            f"removed the DDP wrap; `amp.initialize` (line {plan.amp_call.lineno}) averages the "
            f"gradients with `combine_ddp=True`{where} instead"
        )
        if self.fix(plan.call, message, *edits):
            if plan.needs_contextlib:
                self.add_import("contextlib")
            for module, obj, asname in self.imports_of(plan.call):
                self.remove_import_if_unused(module, obj, asname)

    def alone(self, plan: WrapPlan) -> bool:
        body = self.body_of(plan.statement)
        return body is not None and len(body) == 1

    def imports_of(self, call: ast.Call) -> Iterator[tuple[str, str | None, str | None]]:
        """The ``from ... import DistributedDataParallel [as X]`` the callee comes from."""
        base = call.func
        if not isinstance(base, ast.Name):
            return
        for binding in self.index.bindings_of(base):
            statement, alias = binding.node, binding.alias
            if isinstance(statement, ast.ImportFrom) and alias is not None and statement.module:
                yield statement.module, alias.name, alias.asname
                if statement.module.startswith("apex.parallel"):
                    # NPU202 may have respelled it as torch's before the removal is decided.
                    yield "torch.nn.parallel", alias.name, alias.asname


def _parameter_for(definition: ast.FunctionDef, call: ast.Call, value: ast.expr) -> str | None:
    positional = [a.arg for a in [*definition.args.posonlyargs, *definition.args.args]]
    for position, given in enumerate(call.args):
        if given is value:
            if isinstance(given, ast.Starred) or position >= len(positional):
                return None
            return positional[position]
    for item in call.keywords:
        if item.value is value and item.arg is not None:
            return item.arg
    return None


def _named(name: str) -> Callable[[cst.Attribute], cst.BaseExpression]:
    return lambda node: cst.Name(name)


def _null_context(call: cst.Call) -> cst.Call:
    return cst.Call(
        func=cst.Attribute(value=cst.Name("contextlib"), attr=cst.Name("nullcontext")),
        lpar=call.lpar,
        rpar=call.rpar,
    )


def _replacement(plan: WrapPlan, alone: bool) -> Callable[[cst.CSTNode], object]:
    """The wrap becomes ``target = source`` when the names differ; otherwise it goes (``pass``
    when it is all its block holds)."""

    def change(node: cst.CSTNode) -> object:
        if plan.target != plan.source:
            alias = cst.parse_statement(f"{plan.target} = {plan.source}\n")
            return alias.with_changes(leading_lines=getattr(node, "leading_lines", ()))
        if alone:
            return cst.parse_statement("pass\n")
        return cst.RemovalSentinel.REMOVE

    return change


def _combine(condition: str | None) -> Callable[[cst.Call], cst.Call]:
    def change(call: cst.Call) -> cst.Call:
        if find_keyword(call, "combine_grad") is None:  # NPU102 may have added it already
            call = append_arg(call, keyword("combine_grad", cst.Name("True")))
        value = cst.parse_expression(condition) if condition else cst.Name("True")
        return append_arg(call, keyword("combine_ddp", value))

    return change
