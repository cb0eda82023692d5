"""NPU104's analysis: which DistributedDataParallel wraps of an amp-initialized model give way to
``combine_ddp=True``, what else changes with them, and why the others stay. Not a rule.

:func:`plan_combine_ddp` is pure: it reads a :class:`~migrator.analysis.view.FileView` and
NPU101's plans (which constructors become NPU fused optimizers) and returns, in source order, a
:class:`WrapRemoval` for each wrap to remove or a :class:`WrapKept` with the reason for each
wrap that stays. NPU104 turns them into fixes, reports and edits.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from migrator.analysis.calls import argument, arguments, has_star, literal_value
from migrator.analysis.effects import DATA_PARALLEL, DDP_CLASSES, dotted_path, show
from migrator.analysis.names import Ambiguous
from migrator.analysis.view import FileView
from migrator.rules.optimizers._flow import fused_name
from migrator.rules.optimizers._plans import FusedPlan

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
_VISIBLE_BUILTINS = ("print", "isinstance", "type", "id", "len")


@dataclass(frozen=True)
class WrapKept:
    """A DDP wrap that stays, and why (reported at ``call``)."""

    call: ast.Call
    message: str


@dataclass(frozen=True)
class WrapRemoval:
    """``target = DDP(source, ...)`` removed in favour of ``combine_ddp`` at ``amp_call``."""

    call: ast.Call  # the wrap's call, where the fix is reported
    statement: ast.stmt  # what goes: the wrap, or the `if` holding only it
    target: str
    source: str
    amp_call: ast.Call
    condition: str | None  # `if args.distributed:` around the wrap: combine_ddp's value
    alone: bool  # the removed statement is all its block holds (it becomes `pass`)
    unwrapped: tuple[ast.Attribute, ...]  # `model.module`, which becomes the model
    no_sync: tuple[ast.Call, ...]  # `model.no_sync()`, which becomes `contextlib.nullcontext()`
    # The `from ... import DistributedDataParallel [as X]` the callee may come from.
    imports: tuple[tuple[str, str | None, str | None], ...]
    message: str


def plan_combine_ddp(
    view: FileView, fused: Mapping[int, FusedPlan]
) -> list[WrapRemoval | WrapKept]:
    """NPU104's decisions for the file of ``view``, in source order; ``fused`` are NPU101's
    plans of the file (id(constructor call) -> its rewrite), empty when NPU101 does not run."""
    return _Planner(view, fused).decide()


@dataclass
class _Wrap:
    """One `target = DDP(source, ...)` while it is being examined."""

    statement: ast.stmt
    wrap: ast.Assign
    call: ast.Call
    target: str
    source: str
    amp_call: ast.Call
    condition: ast.expr | None
    unwrapped: list[ast.Attribute] = field(default_factory=list)
    no_sync: list[ast.Call] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, why not)


class _Planner:
    def __init__(self, view: FileView, fused: Mapping[int, FusedPlan]) -> None:
        self.view = view
        self.index = view.index
        self.fused = fused
        self.decisions: list[WrapRemoval | WrapKept] = []
        self.amp_calls = [
            call
            for call in view.calls_to({"apex"})
            if view.qualified_name_in(call.func, {AMP_INITIALIZE}) == AMP_INITIALIZE
        ]

    def decide(self) -> list[WrapRemoval | WrapKept]:
        for call in self.view.calls_to({"torch", "apex"}):
            name = self.view.qualified_name_in(call.func, DDP_CLASSES - DATA_PARALLEL)
            if isinstance(name, Ambiguous):
                if self.amp_calls:
                    self._kept(
                        call,
                        f"`combine_ddp` not used: `{self.view.code(call.func)}` may be "
                        f"DistributedDataParallel ({name.describe()})",
                    )
                continue
            if name is None or not self.amp_calls:
                continue
            wrap = self._examine(call, name)
            if wrap is None:
                continue
            if wrap.problems:
                line, why = wrap.problems[0]
                where = f" (line {line})" if line != call.lineno else ""
                self._kept(call, f"DDP kept, `combine_ddp` not used: {why}{where}")
                continue
            self.decisions.append(self._removal(wrap))
        return self.decisions

    def _kept(self, call: ast.Call, message: str) -> None:
        self.decisions.append(WrapKept(call, message))

    def _refused(self, call: ast.Call, why: str, line: int | None = None) -> None:
        """A wrap the rule does not act on (in a file that calls amp.initialize)."""
        if self.amp_calls:
            where = f" (line {line})" if line is not None else ""
            self._kept(call, f"DDP kept, `combine_ddp` not used: {why}{where}")

    # -- the wrap and the amp.initialize it follows ----------------------------------------------

    def _examine(self, call: ast.Call, name: str) -> _Wrap | None:
        wrap = self.index.parent(call)
        if not (isinstance(wrap, ast.Assign) and wrap.value is call and len(wrap.targets) == 1):
            self._refused(call, "the wrapped model is not assigned to a name")
            return None
        target = dotted_path(wrap.targets[0])
        given = arguments(call)
        module = next((a for a in given if a.keyword == "module"), None)
        if module is None and given and given[0].keyword is None and not given[0].star:
            module = given[0]
        source = dotted_path(module.value) if module is not None else None
        if target is None or source is None or len(target) != 1 or len(source) != 1:
            self._refused(call, "it wraps or binds something other than a plain name")
            return None
        statement, condition = self._removable_statement(wrap)
        body = self._body_of(statement)
        if body is None:
            self._refused(call, "the wrap is not a statement of a block")
            return None
        amp_call = self._amp_before(body, statement, source[0])
        if amp_call is None:
            later = [c for c in self.amp_calls if c.lineno > call.lineno]
            if later:
                self._refused(
                    call,
                    "`amp.initialize` of this model comes after the wrap; once NPU203 has moved "
                    "it above the wrap, a second run can use combine_ddp",
                    later[0].lineno,
                )
            return None  # not an amp-initialized model: not this rule's business
        found = _Wrap(statement, wrap, call, target[0], source[0], amp_call, condition)
        self._check_amp(found)
        self._check_arguments(found, name)
        self._check_between(found, body)
        if not found.problems:
            self._check_uses(found)
        return found

    def _removable_statement(self, wrap: ast.Assign) -> tuple[ast.stmt, ast.expr | None]:
        """The wrap, or the ``if`` (no else) holding only it, and that ``if``'s condition."""
        holder = self.index.parent(wrap)
        if (
            isinstance(holder, ast.If)
            and holder.body == [wrap]
            and not holder.orelse
            and not self.view.source.segment(holder).startswith("elif")
        ):
            return holder, holder.test
        return wrap, None

    def _body_of(self, statement: ast.stmt) -> list[ast.stmt] | None:
        parent = self.index.parent(statement)
        for field_name in ("body", "orelse", "finalbody"):
            body = getattr(parent, field_name, None)
            if isinstance(body, list) and any(s is statement for s in body):
                return body
        return None

    def _amp_before(self, body: list[ast.stmt], statement: ast.stmt, model: str) -> ast.Call | None:
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

    def _check_amp(self, wrap: _Wrap) -> None:
        call = wrap.amp_call
        line = call.lineno
        if has_star(call):
            wrap.problems.append((line, "`amp.initialize` gets arguments through `*`/`**`"))
            return
        given = argument(call, "combine_grad", None)
        if given is not None and literal_value(given.value) is not True:
            wrap.problems.append(
                (line, "`amp.initialize` sets `combine_grad` to something other than True")
            )
        level_arg = argument(call, "opt_level", _OPT_LEVEL)
        level = "O1" if level_arg is None else literal_value(level_arg.value)
        if level not in ("O1", "O2"):
            wrap.problems.append(
                (line, "combine_ddp needs opt_level O1 or O2, which this call may not use")
            )
        if level == "O2":
            master = argument(call, "master_weights", _MASTER_WEIGHTS)
            if master is not None and literal_value(master.value) is not True:
                wrap.problems.append((line, "with opt_level O2 combine_ddp needs master weights"))
        existing = argument(call, "combine_ddp", None)
        if existing is not None:
            wrap.problems.append((line, "`amp.initialize` already sets `combine_ddp`"))
        optimizers = argument(call, "optimizers", _OPTIMIZERS)
        if optimizers is None:
            wrap.problems.append((line, "`amp.initialize` gets no optimizer"))
            return
        unfused = self._unfused_optimizer(wrap, optimizers.value)
        if unfused is not None:
            wrap.problems.append((line, unfused))

    def _unfused_optimizer(self, wrap: _Wrap, value: ast.expr) -> str | None:
        """Why the optimizer passed may not be an NPU fused one (None when it is)."""
        if not isinstance(value, ast.Name):
            return "the optimizer passed to `amp.initialize` is not a plain name"
        body = self._body_of(self.index.statement_of(wrap.amp_call) or wrap.statement)
        statement = self.index.statement_of(wrap.amp_call)
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
                if fused_name(self.view, self.fused, earlier.value) is not None:
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

    def _check_arguments(self, wrap: _Wrap, name: str) -> None:
        line = wrap.call.lineno
        if has_star(wrap.call):
            wrap.problems.append((line, "the wrap gets arguments through `*`/`**`"))
            return
        given = arguments(wrap.call)
        keywords = {a.keyword: a for a in given if a.keyword is not None}
        if len([a for a in given if a.keyword is None]) > 1:
            wrap.problems.append(
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
            wrap.problems.append((line, why))
        if name not in APEX_DDP and "broadcast_buffers" not in keywords:
            wrap.problems.append(
                (
                    line,
                    "DDP broadcasts rank 0's buffers (BatchNorm statistics) at every forward "
                    "and combine_ddp does not; pass `broadcast_buffers=False` to the wrap if the "
                    "model needs no such sync",
                )
            )

    def _check_between(self, wrap: _Wrap, body: list[ast.stmt]) -> None:
        """Nothing between amp.initialize and the wrap rebinds the model or the condition."""
        amp_statement = self.index.statement_of(wrap.amp_call)
        start = next(i for i, s in enumerate(body) if s is amp_statement)
        end = next(i for i, s in enumerate(body) if s is wrap.statement)
        watched = {wrap.source}
        if wrap.condition is not None:
            if any(isinstance(n, ast.Call) for n in ast.walk(wrap.condition)):
                wrap.problems.append(
                    (wrap.condition.lineno, "the wrap's condition calls a function")
                )
            watched |= {n.id for n in ast.walk(wrap.condition) if isinstance(n, ast.Name)}
        for statement in body[start + 1 : end]:
            for node in ast.walk(statement):
                if (
                    isinstance(node, ast.Name)
                    and not isinstance(node.ctx, ast.Load)
                    and node.id in watched
                ):
                    wrap.problems.append(
                        (
                            node.lineno,
                            f"`{node.id}` is bound again between `amp.initialize` and the wrap",
                        )
                    )
                    return
                if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
                    root = dotted_path(node)
                    if root is not None and root[0] in watched:
                        wrap.problems.append(
                            (node.lineno, f"`{show(root)}` is changed before the wrap")
                        )
                        return

    # -- uses of the wrapper ---------------------------------------------------------------------

    def _check_uses(self, wrap: _Wrap) -> None:
        scope = self.index.scope_of(wrap.wrap)
        end = (wrap.statement.end_lineno or 0, wrap.statement.end_col_offset or 0)
        for name in self.index.names(wrap.target):
            if self.index.scope_of(name) is not scope:
                continue
            if (name.lineno, name.col_offset) <= end:
                continue
            if not isinstance(name.ctx, ast.Load):
                wrap.problems.append(
                    (name.lineno, f"`{wrap.target}` is bound again after the wrap")
                )
                return
            problem = self._use_problem(wrap, name, wrap.target, wrap.source, top=True)
            if problem is not None:
                wrap.problems.append((name.lineno, problem))
                return
        if self._inside_loop(wrap.wrap):
            wrap.problems.append((wrap.wrap.lineno, "the wrap is inside a loop"))

    def _inside_loop(self, node: ast.AST) -> bool:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, ast.For | ast.While | ast.AsyncFor):
                return True
            if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                return False
        return False

    def _use_problem(
        self, wrap: _Wrap, name: ast.Name, wrapper: str, model: str, *, top: bool
    ) -> str | None:
        """Why this use of the wrapper cannot be rewritten (None: fine, the changes it needs
        recorded when ``top``; a use inside another function must need none)."""
        if self._in_hasattr_idiom(name):
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
                wrap.unwrapped.append(parent)
                return None
            if parent.attr == "no_sync" and method_call:
                if not top:
                    return "`no_sync()` of the DDP model is used in a function it is passed to"
                assert isinstance(grand, ast.Call)
                wrap.no_sync.append(grand)
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
            return self._passed_to(wrap, parent, name, top)
        if isinstance(parent, ast.keyword):
            call = self.index.parent(parent)
            if isinstance(call, ast.Call):
                return self._passed_to(wrap, call, name, top)
        return f"the DDP-wrapped `{wrapper}` is used in a way npu-migrate cannot follow"

    def _in_hasattr_idiom(self, name: ast.Name) -> bool:
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

    def _passed_to(self, wrap: _Wrap, call: ast.Call, name: ast.Name, top: bool) -> str | None:
        """The wrapper passed to a function: fine when a function of this module uses its
        parameter only in ways that need no edit."""
        func = call.func
        if not isinstance(func, ast.Name):
            scale_loss = "apex.amp.scale_loss"
            if self.view.qualified_name_in(func, {scale_loss}) == scale_loss:
                return None
            return (
                f"the DDP-wrapped `{name.id}` is passed to `{self.view.code(func)}`, which "
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
            if func.id in _VISIBLE_BUILTINS:
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
                problem = self._use_problem(wrap, inner, parameter, parameter, top=False)
                if problem is not None:
                    return f"in `{func.id}` (line {inner.lineno}): {problem}"
        return None

    # -- the removal -----------------------------------------------------------------------------

    def _removal(self, wrap: _Wrap) -> WrapRemoval:
        condition = self.view.code(wrap.condition) if wrap.condition is not None else None
        where = f" when `{condition}`" if condition else ""
        message = (
            f"removed the DDP wrap; `amp.initialize` (line {wrap.amp_call.lineno}) averages the "
            f"gradients with `combine_ddp=True`{where} instead"
        )
        body = self._body_of(wrap.statement)
        return WrapRemoval(
            wrap.call,
            wrap.statement,
            wrap.target,
            wrap.source,
            wrap.amp_call,
            condition,
            body is not None and len(body) == 1,
            tuple(wrap.unwrapped),
            tuple(wrap.no_sync),
            tuple(self._imports_of(wrap.call)),
            message,
        )

    def _imports_of(self, call: ast.Call) -> list[tuple[str, str | None, str | None]]:
        """The ``from ... import DistributedDataParallel [as X]`` the callee comes from."""
        base = call.func
        if not isinstance(base, ast.Name):
            return []
        found: list[tuple[str, str | None, str | None]] = []
        for binding in self.index.bindings_of(base):
            statement, alias = binding.node, binding.alias
            if isinstance(statement, ast.ImportFrom) and alias is not None and statement.module:
                found.append((statement.module, alias.name, alias.asname))
                if statement.module.startswith("apex.parallel"):
                    # NPU202 may have respelled it as torch's before the removal is decided.
                    found.append(("torch.nn.parallel", alias.name, alias.asname))
        return found


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
