"""NPU203: optimizer (and amp.initialize) created after the model is wrapped in DDP."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ParentNodeProvider

from migrator.names import Ambiguous
from migrator.rule import FileContext, FixSafety, Rule

DDP_CLASSES = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DataParallel",  # not a trigger: only recognised as a wrapper with `.module`
        "torch.nn.parallel.DataParallel",
        "apex.parallel.DistributedDataParallel",
        "apex.parallel.distributed.DistributedDataParallel",
    }
)
DATA_PARALLEL = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel"})
OPTIMIZER_PACKAGES = ("torch.optim", "apex.optimizers", "torch_npu.optim")
AMP_INITIALIZE = "apex.amp.initialize"
ADD_PARAM_GROUP = "add_param_group"

# Methods that neither change their receiver nor the parameters behind it.
READ_ONLY_METHODS = frozenset(
    {
        "parameters",
        "named_parameters",
        "state_dict",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "buffers",
        "named_buffers",
        "keys",
        "values",
        "items",
        "get",
        "format",
        "startswith",
        "endswith",
        "numel",
        "dim",
        "size",
    }
)
# Methods that move or cast a module in place and keep its Parameter objects (torch swaps
# `param.data`; torch_npu does the same for NPU tensors), so an optimizer built before them
# still holds the right parameters. amp.initialize, though, must come after them.
DEVICE_METHODS = frozenset(
    {"cuda", "npu", "to", "cpu", "half", "float", "bfloat16", "double", "train", "eval"}
)
# Methods a moved statement may call on its own lists and dicts.
BUILDING_METHODS = frozenset({"append", "extend", "update", "insert", ADD_PARAM_GROUP})
# Functions without side effects that moved statements may call.
PURE_FUNCTIONS = frozenset(
    "builtins." + name
    for name in [
        "list",
        "dict",
        "tuple",
        "set",
        "frozenset",
        "filter",
        "map",
        "sorted",
        "reversed",
        "len",
        "float",
        "int",
        "bool",
        "str",
        "min",
        "max",
        "sum",
        "zip",
        "enumerate",
        "any",
        "all",
        "range",
        "isinstance",
        "getattr",
        "hasattr",
        "abs",
        "round",
    ]
)
PURE_MODULES = ("math.",)
# Functions that only read their arguments, in the statements that are skipped over.
READING_FUNCTIONS = PURE_FUNCTIONS | {"builtins.print", "builtins.repr", "builtins.type"}

Path = tuple[str, ...]


def dotted_path(node: cst.BaseExpression) -> Path | None:
    name = get_full_name_for_node(node) if isinstance(node, cst.Name | cst.Attribute) else None
    return tuple(name.split(".")) if name else None


def related(a: Path, b: Path) -> bool:
    """One path is a prefix of the other: a change to one can be seen through the other."""
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def show(path: Path) -> str:
    return ".".join(path)


def plural(word: str, numbers: Sequence[int]) -> str:
    listed = ", ".join(map(str, numbers))
    return f"{word}s {listed}" if len(numbers) > 1 else f"{word} {listed}"


@dataclass
class Wrap:
    """``target = DDP(source, ...)``."""

    target: Path
    source: Path | None  # None when the wrapped value is not a plain name or attribute
    call: cst.Call
    data_parallel: bool = False


@dataclass
class Effects:
    """What one statement reads and changes, by dotted path."""

    reads: set[Path] = field(default_factory=set)
    binds: set[str] = field(default_factory=set)  # every name bound
    plain_binds: set[str] = field(default_factory=set)  # bound to a new object
    mutates: set[Path] = field(default_factory=set)  # attribute/item assignment, unknown calls
    wrap_targets: set[Path] = field(default_factory=set)  # bound to a DDP/DP wrapper
    device_moves: set[Path] = field(default_factory=set)  # x.cuda(), x = x.to(device)
    wraps: list[Wrap] = field(default_factory=list)
    wrap_sources: set[Path] = field(default_factory=set)  # read only as the value DDP wraps
    unknown_calls: list[cst.Call] = field(default_factory=list)
    amp_models: set[str] = field(default_factory=set)  # names amp.initialize rebinds in place
    ambiguous: list[tuple[cst.Call, Ambiguous]] = field(default_factory=list)

    def writes(self) -> set[Path]:
        return {(n,) for n in self.binds} | self.mutates | self.wrap_targets | self.device_moves

    def replaces(self, path: Path) -> bool:
        """``path`` gets a new object here, or is changed in a way other than wrapping/moving."""
        return (len(path) == 1 and path[0] in self.plain_binds) or path in self.mutates


class EffectsCollector(cst.CSTVisitor):
    """Fills :class:`Effects` for one statement (original nodes: the rule resolves names)."""

    def __init__(self, rule: OptimizerBeforeDdp) -> None:
        super().__init__()
        self.rule = rule
        self.effects = Effects()
        self.local_names: set[str] = set()  # comprehension variables and lambda parameters

    # binding forms
    def visit_Assign(self, node: cst.Assign) -> bool:
        wrap = self.rule.wrap_of(node)
        if wrap is not None:
            self.effects.wraps.append(wrap)
            if wrap.source is not None:
                self.effects.wrap_sources.add(wrap.source)
            for arg in wrap.call.args[1:]:
                arg.value.visit(self)
            self.effects.wrap_targets.add(wrap.target)
            if len(wrap.target) == 1:
                self.effects.binds.add(wrap.target[0])
            return False
        identity = self.identity_move(node)
        if identity is not None:
            self.effects.device_moves.add(identity)
            node.value.visit(self)
            return False
        if self.rule.is_amp_initialize(node.value):
            self.effects.amp_models |= self.amp_rebound_models(node)
        for target in node.targets:
            self.bind_target(target.target)
        node.value.visit(self)
        return False

    def identity_move(self, node: cst.Assign) -> Path | None:
        """``model = model.cuda()``: modules return themselves from these methods."""
        if len(node.targets) != 1:
            return None
        target = dotted_path(node.targets[0].target)
        call = node.value
        if target is None or not isinstance(call, cst.Call):
            return None
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in DEVICE_METHODS:
            return target if dotted_path(func.value) == target else None
        return None

    def amp_rebound_models(self, node: cst.Assign) -> set[str]:
        """``model, optimizer = amp.initialize(model, optimizer)``: ``model`` is rebound to the
        same object (apex patches it in place)."""
        call = node.value
        assert isinstance(call, cst.Call)
        first = call.args[0].value if call.args else None
        if len(node.targets) != 1 or first is None:
            return set()
        target = node.targets[0].target
        outputs = target.elements if isinstance(target, cst.Tuple | cst.List) else [target]
        first_output = outputs[0]
        output = first_output.value if isinstance(first_output, cst.Element) else first_output
        if isinstance(output, cst.Name) and isinstance(first, cst.Name):
            return {output.value} if output.value == first.value else set()
        return set()

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        node.value.visit(self)
        path = dotted_path(node.target)
        if path is not None:
            self.effects.reads.add(path)
        self.bind_target(node.target)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        if node.value is not None:
            node.value.visit(self)
        self.bind_target(node.target)
        return False

    def visit_For(self, node: cst.For) -> bool:
        self.bind_target(node.target)
        return True

    def visit_AsName(self, node: cst.AsName) -> bool:
        self.bind_target(node.name)
        return False

    def visit_Del(self, node: cst.Del) -> bool:
        self.bind_target(node.target)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        node.value.visit(self)
        self.bind_target(node.target)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.target((node.name.value,))
        return False  # its body runs later, when called

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.target((node.name.value,))
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            bound = (
                alias.evaluated_alias or (get_full_name_for_node(alias.name) or "").split(".")[0]
            )
            self.target((bound,))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                self.target((alias.evaluated_alias or alias.evaluated_name,))
        return False

    def visit_CompFor(self, node: cst.CompFor) -> bool:
        self.collect_local(node.target)
        return True

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        for param in node.params.params:
            self.local_names.add(param.name.value)
        return True

    def collect_local(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.local_names.add(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self.collect_local(element.value)

    def target(self, path: Path) -> None:
        if len(path) == 1:
            self.effects.binds.add(path[0])
            self.effects.plain_binds.add(path[0])
        else:
            self.effects.mutates.add(path)

    def bind_target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self.bind_target(element.value)
            return
        if isinstance(target, cst.StarredElement):
            self.bind_target(target.value)
            return
        if isinstance(target, cst.Subscript):
            for index_element in target.slice:
                index_element.visit(self)
            path = dotted_path(target.value)
            if path is not None:
                self.effects.mutates.add(path)
            return
        path = dotted_path(target)
        if path is not None:
            self.target(path)

    # uses
    def visit_Call(self, node: cst.Call) -> bool:
        name = self.rule.qualified_name(node.func)
        if isinstance(name, Ambiguous) and any(c in DDP_CLASSES for c in name.candidates):
            self.effects.ambiguous.append((node, name))
        func = node.func
        if isinstance(func, cst.Attribute) and not isinstance(name, str):
            receiver = dotted_path(func.value)
            method = func.attr.value
            if receiver is not None:
                self.read(receiver)
                if method in DEVICE_METHODS:
                    self.effects.device_moves.add(receiver)
                elif method not in READ_ONLY_METHODS:
                    self.effects.mutates.add(receiver)
                    if method not in BUILDING_METHODS:
                        self.effects.unknown_calls.append(node)
            else:
                func.value.visit(self)
                if method not in READ_ONLY_METHODS:
                    self.effects.unknown_calls.append(node)
        elif isinstance(name, str) and (
            name in PURE_FUNCTIONS
            or name.startswith(PURE_MODULES)
            or self.rule.is_optimizer_class(name)
            or name == AMP_INITIALIZE
            or name in DDP_CLASSES
        ):
            pass
        elif isinstance(name, str) and name in READING_FUNCTIONS:
            self.effects.unknown_calls.append(node)  # prints: visible, so never moved
        else:
            if not isinstance(func, cst.Name | cst.Attribute):
                func.visit(self)
            self.effects.unknown_calls.append(node)
            for arg in node.args:
                path = dotted_path(arg.value)
                if path is not None and path[0] not in self.local_names:
                    self.effects.mutates.add(path)  # an unknown function may change it
        for arg in node.args:
            arg.value.visit(self)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        path = dotted_path(node)
        if path is None:
            node.value.visit(self)  # `f().x`: `x` is not a name read here
        else:
            self.read(path)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        self.read((node.value,))
        return False

    def read(self, path: Path) -> None:
        if path[0] not in self.local_names:
            self.effects.reads.add(path)


def effects_of(rule: OptimizerBeforeDdp, statement: cst.CSTNode) -> Effects:
    collector = EffectsCollector(rule)
    statement.visit(collector)
    # Comprehension variables are only known once the comprehension is visited.
    effects = collector.effects
    effects.reads = {p for p in effects.reads if p[0] not in collector.local_names}
    return effects


class WrappedModelRewriter(cst.CSTTransformer):
    """``model.module.x`` -> ``model.x`` (and ``ddp_model.parameters()`` -> ``model.parameters()``)
    in statements moved above the wrap."""

    def __init__(self, wraps: Sequence[Wrap]) -> None:
        super().__init__()
        self.wraps = [w for w in wraps if w.source is not None]

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        path = dotted_path(original_node)
        for wrap in self.wraps:
            assert wrap.source is not None
            if path == (*wrap.target, "module"):
                return cst.parse_expression(show(wrap.source))
            if (
                wrap.target != wrap.source
                and dotted_path(original_node.value) == wrap.target
                and original_node.attr.value == "parameters"
            ):
                return updated_node.with_changes(value=cst.parse_expression(show(wrap.source)))
        return updated_node


@dataclass
class Target:
    """A statement after the wrap that builds or changes an optimizer."""

    index: int
    call: cst.Call  # where the diagnostic points
    movable: bool


class OptimizerBeforeDdp(Rule):
    """
    ## What it does
    Finds optimizers built (or changed with `add_param_group`, or passed to `amp.initialize`)
    after the model was wrapped in DistributedDataParallel in the same block, and moves those
    statements, with the statements they need, to just before the wrap when that is provably
    safe: `model.module.parameters()` becomes `model.parameters()`. Otherwise it reports where
    the wrap is.

    ## Why
    On Ascend, an optimizer created or changed after DDP initialisation only takes effect on
    the main card and the model goes wrong; and `amp.initialize` must see the unwrapped model.

    ## Example
    ```python
    model = DDP(model, device_ids=[rank])
    optimizer = torch.optim.SGD(model.module.parameters(), lr=0.1)
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = DDP(model, device_ids=[rank])
    ```

    ## Fix safety
    Safe: a statement is moved only when every name it reads is bound before the wrap to the
    same object, nothing it skips over changes what it reads or reads what it sets, and it
    calls nothing unknown. A DDP model has the same Parameter objects as the module it wraps,
    and moving a module to a device keeps them; `amp.initialize` is never moved above a device
    move. Everything else is reported.
    """

    CODE = "NPU203"
    NAME = "optimizer-before-ddp"
    SUMMARY = "optimizer or `amp.initialize` after the model is wrapped in DDP"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"DistributedDataParallel")

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.wrapping_functions: dict[str, cst.Call] = {}  # def name -> the wrap inside it
        self.optimizer_functions: set[str] = set()

    # -- recognising calls -----------------------------------------------------------------------

    @staticmethod
    def is_optimizer_class(name: str) -> bool:
        package, _, short = name.rpartition(".")
        return package in OPTIMIZER_PACKAGES and short[:1].isupper() and short != "Optimizer"

    def is_amp_initialize(self, node: cst.BaseExpression) -> bool:
        return (
            isinstance(node, cst.Call)
            and self.qualified_name_in(node.func, {AMP_INITIALIZE}) == AMP_INITIALIZE
        )

    def builds_optimizer(self, call: cst.Call) -> bool:
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == ADD_PARAM_GROUP:
            return True
        name = self.qualified_name(call.func)
        return isinstance(name, str) and (self.is_optimizer_class(name) or name == AMP_INITIALIZE)

    def wrap_of(self, node: cst.Assign) -> Wrap | None:
        if len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return None
        call = node.value
        name = self.qualified_name_in(call.func, DDP_CLASSES)
        target = dotted_path(node.targets[0].target)
        if not isinstance(name, str) or target is None:
            return None
        module = next((a for a in call.args if a.keyword and a.keyword.value == "module"), None)
        if module is None and call.args and call.args[0].keyword is None and not call.args[0].star:
            module = call.args[0]
        source = dotted_path(module.value) if module is not None else None
        return Wrap(target, source, call, data_parallel=name in DATA_PARALLEL)

    # -- whole-file facts ------------------------------------------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        for statement in node.body:
            if isinstance(statement, cst.FunctionDef):
                self.note_function(statement)

    def note_function(self, function: cst.FunctionDef) -> None:
        for assign in m.findall(function.body, m.Assign(value=m.Call())):
            assert isinstance(assign, cst.Assign)
            wrap = self.wrap_of(assign)
            if wrap is not None and not wrap.data_parallel:
                self.wrapping_functions[function.name.value] = wrap.call
        for returned in m.findall(function.body, m.Return(value=m.Call())):
            assert isinstance(returned, cst.Return) and isinstance(returned.value, cst.Call)
            name = self.qualified_name_in(returned.value.func, DDP_CLASSES)
            if isinstance(name, str) and name not in DATA_PARALLEL:
                self.wrapping_functions[function.name.value] = returned.value
        for call in m.findall(function.body, m.Call()):
            assert isinstance(call, cst.Call)
            name = self.qualified_name(call.func)
            if isinstance(name, str) and self.is_optimizer_class(name):
                self.optimizer_functions.add(function.name.value)

    # -- blocks ----------------------------------------------------------------------------------

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.BaseSuite:
        body = self.reorder(original_node.body, updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = self.reorder(original_node.body, updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def reorder(
        self, original: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement] | None:
        if len(original) != len(updated):
            return None
        effects = [effects_of(self, statement) for statement in original]
        first_wrap = next((i for i, e in enumerate(effects) if self.real_wraps(e)), None)
        if first_wrap is None:
            self.check_hidden_wraps(original, effects)
            return None
        wrap_call = self.real_wraps(effects[first_wrap])[0].call
        targets = self.targets_after(original, first_wrap)
        moved: list[int] = []
        for target in targets:
            if not target.movable:
                self.report_target(
                    target,
                    wrap_call,
                    "it is built inside a loop or a block "
                    "this rule does not move statements out of",
                )
                continue
            candidate, reason = self.plan_move(
                original, effects, first_wrap, [*moved, target.index]
            )
            if reason is not None:
                self.report_target(target, wrap_call, reason)
                continue
            moved = candidate
        if not moved:
            return None
        return self.apply_move(original, updated, effects, first_wrap, moved, targets, wrap_call)

    def real_wraps(self, effects: Effects) -> list[Wrap]:
        return [w for w in effects.wraps if not w.data_parallel]

    def targets_after(self, original: Sequence[cst.BaseStatement], start: int) -> list[Target]:
        targets: list[Target] = []
        for index in range(start + 1, len(original)):
            statement = original[index]
            if isinstance(statement, cst.FunctionDef | cst.ClassDef):
                continue  # runs later, when called: not part of this block's order
            calls = [
                c
                for c in m.findall(statement, m.Call())
                if isinstance(c, cst.Call) and self.builds_optimizer(c)
            ]
            if not calls:
                continue
            targets.append(Target(index, calls[0], self.is_movable(statement)))
        return targets

    @staticmethod
    def is_movable(statement: cst.BaseStatement) -> bool:
        """A simple statement, or an if/elif/else whose branches are all simple statements."""
        if isinstance(statement, cst.SimpleStatementLine):
            return True
        if not isinstance(statement, cst.If):
            return False
        branch: cst.If | cst.Else | None = statement
        while branch is not None:
            if not all(isinstance(s, cst.SimpleStatementLine) for s in branch.body.body):
                return False
            branch = branch.orelse if isinstance(branch, cst.If) else None
        return True

    # -- proving a move safe ---------------------------------------------------------------------

    def plan_move(
        self,
        original: Sequence[cst.BaseStatement],
        effects: Sequence[Effects],
        first_wrap: int,
        wanted: list[int],
    ) -> tuple[list[int], str | None]:
        """The statements to move (``wanted`` and what they need), or why they cannot move."""
        moved = sorted(set(wanted))
        changed = True
        while changed:
            changed = False
            for index in list(moved):
                for dependency in self.dependencies(effects, first_wrap, index, moved):
                    if dependency not in moved:
                        if not self.is_movable(original[dependency]):
                            return [], (
                                f"it needs what line {self.line(original[dependency])} sets "
                                "between the wrap and here, which cannot be moved"
                            )
                        moved = sorted({*moved, dependency})
                        changed = True
        reason = self.unsafe_reason(original, effects, first_wrap, moved)
        return moved, reason

    def dependencies(
        self, effects: Sequence[Effects], first_wrap: int, index: int, moved: list[int]
    ) -> Iterable[int]:
        """Statements between the first wrap and ``index`` that set what ``index`` reads (bind
        it, or build it: ``groups.append(...)``). Wraps and device moves are not dependencies:
        unsafe_reason decides whether they may be skipped over."""
        for read in effects[index].reads:
            for earlier in range(index - 1, first_wrap, -1):
                effect = effects[earlier]
                if earlier in moved or effect.wraps:
                    continue
                writes = {(name,) for name in effect.plain_binds} | effect.mutates
                if any(related(read, w) and len(w) <= len(read) for w in writes):
                    yield earlier
                    break

    def unsafe_reason(
        self,
        original: Sequence[cst.BaseStatement],
        effects: Sequence[Effects],
        first_wrap: int,
        moved: list[int],
    ) -> str | None:
        skipped = [i for i in range(first_wrap, moved[-1]) if i not in moved]
        wraps = [w for i in skipped for w in effects[i].wraps]
        has_amp = any(self.contains_amp(original[i]) for i in moved)
        amp_models: set[str] = set()
        bound_by_moved: set[str] = set()
        for index in moved:
            statement, effect = original[index], effects[index]
            if effect.unknown_calls:
                call = effect.unknown_calls[0]
                return (
                    f"it calls `{self.code(call.func)}(...)`, which might depend on or change "
                    "what happens in between"
                )
            reason = self.wrapped_use_problem(statement, wraps)
            if reason is not None:
                return reason
            for read in effect.reads:
                if read[0] in bound_by_moved:
                    continue
                reason = self.read_conflict(original, effects, skipped, read, has_amp)
                if reason is not None:
                    return reason
            bound_by_moved |= effect.binds
            amp_models |= effect.amp_models
        for index in moved:
            for write in effects[index].writes():
                reason = self.write_conflict(original, effects, skipped, write, amp_models)
                if reason is not None:
                    return reason
        return None

    def read_conflict(
        self,
        original: Sequence[cst.BaseStatement],
        effects: Sequence[Effects],
        skipped: list[int],
        read: Path,
        has_amp: bool,
    ) -> str | None:
        for index in skipped:
            effect = effects[index]
            for write in sorted(effect.writes()):
                if not related(read, write):
                    continue
                line = self.line(original[index])
                if not effect.replaces(write):
                    if write in effect.wrap_targets:
                        continue  # its uses were checked by wrapped_use_problem
                    if write in effect.device_moves and not has_amp:
                        continue  # same Parameter objects after a device move
                    if write in effect.device_moves:
                        return (
                            f"`amp.initialize` must stay after line {line}, which moves "
                            f"`{show(write)}` to the device"
                        )
                return f"it reads `{show(read)}`, which line {line} changes before it"
        return None

    def write_conflict(
        self,
        original: Sequence[cst.BaseStatement],
        effects: Sequence[Effects],
        skipped: list[int],
        write: Path,
        amp_models: set[str],
    ) -> str | None:
        for index in skipped:
            effect = effects[index]
            seen = effect.reads | effect.writes() | effect.wrap_sources
            if len(write) == 1 and write[0] in amp_models:
                # The wrap must wrap the amp-initialised model: that is the point of the move.
                seen -= effect.wrap_sources | effect.wrap_targets
            clash = next((p for p in sorted(seen) if related(p, write)), None)
            if clash is not None:
                return (
                    f"line {self.line(original[index])} uses `{show(clash)}`, which the "
                    "statements to move set"
                )
        return None

    def wrapped_use_problem(self, statement: cst.CSTNode, wraps: list[Wrap]) -> str | None:
        """Uses of a wrapped model that cannot be rewritten to the model it wraps."""
        for wrap in wraps:
            for node in m.findall(statement, m.Name() | m.Attribute()):
                assert isinstance(node, cst.Name | cst.Attribute)
                if dotted_path(node) != wrap.target or self.is_rewritable(statement, node, wrap):
                    continue
                return (
                    f"it uses the DDP-wrapped `{show(wrap.target)}` itself (parameter names of "
                    "a wrapped model start with `module.`); use its `.module` or the unwrapped "
                    "model"
                )
        return None

    def is_rewritable(self, statement: cst.CSTNode, node: cst.CSTNode, wrap: Wrap) -> bool:
        parent = self.parent_in(statement, node)
        if wrap.source is None:
            return False
        if isinstance(parent, cst.Attribute) and parent.value is node:
            if parent.attr.value == "module":
                return True
            grand = self.parent_in(statement, parent)
            return (
                parent.attr.value == "parameters"
                and isinstance(grand, cst.Call)
                and grand.func is parent
            )
        if wrap.source == wrap.target and isinstance(parent, cst.Arg):
            call = self.parent_in(statement, parent)
            return isinstance(call, cst.Call) and self.is_amp_initialize(call)
        # A part of a longer path (`model.module.x` when the wrap target is `model`): the
        # longer path decides; or a name being assigned (amp rebinding the model).
        return isinstance(parent, cst.Element | cst.AssignTarget)

    def parent_in(self, root: cst.CSTNode, child: cst.CSTNode) -> cst.CSTNode | None:
        del root  # the statements are nodes of the visited tree: metadata knows their parents
        return self.get_metadata(ParentNodeProvider, child, None)

    def contains_amp(self, statement: cst.CSTNode) -> bool:
        return any(
            isinstance(c, cst.Call) and self.is_amp_initialize(c)
            for c in m.findall(statement, m.Call())
        )

    def check_hidden_wraps(
        self, original: Sequence[cst.BaseStatement], effects: Sequence[Effects]
    ) -> None:
        """The model is wrapped in another function, or by a name that may be DDP."""
        hidden: tuple[int, cst.Call, str] | None = None
        for index, statement in enumerate(original):
            if isinstance(statement, cst.FunctionDef | cst.ClassDef):
                continue  # their bodies are blocks of their own
            if hidden is None:
                hidden = self.hidden_wrap(statement, effects[index], index)
                continue
            for call in m.findall(statement, m.Call()):
                assert isinstance(call, cst.Call)
                if self.builds_optimizer(call) or (
                    isinstance(call.func, cst.Name) and call.func.value in self.optimizer_functions
                ):
                    _, wrap_call, why = hidden
                    self.report(
                        call,
                        f"{why} at line {self.line(wrap_call)}, before this optimizer is built: "
                        "build the optimizer (and call `amp.initialize`) before the wrap, or the "
                        "optimizer only takes effect on the main card",
                    )
                    break

    def hidden_wrap(
        self, statement: cst.BaseStatement, effect: Effects, index: int
    ) -> tuple[int, cst.Call, str] | None:
        if effect.ambiguous:
            call, name = effect.ambiguous[0]
            return (
                index,
                call,
                f"`{self.code(call.func)}` may be DistributedDataParallel: {name.describe()}; if "
                "it is, it wraps the model",
            )
        for found in m.findall(statement, m.Call(func=m.Name())):
            assert isinstance(found, cst.Call) and isinstance(found.func, cst.Name)
            wrap = self.wrapping_functions.get(found.func.value)
            if wrap is not None:
                return index, wrap, f"`{found.func.value}()` wraps the model in DDP"
        return None

    # -- moving ----------------------------------------------------------------------------------

    def apply_move(
        self,
        original: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        effects: Sequence[Effects],
        first_wrap: int,
        moved: list[int],
        targets: list[Target],
        wrap_call: cst.Call,
    ) -> list[cst.BaseStatement] | None:
        lines = [self.line(original[i]) for i in moved]
        if any(self.context.suppressions.covers(line, self.CODE) for line in lines):
            return None
        wraps = [w for i in range(first_wrap, moved[-1]) for w in effects[i].wraps]
        rewriter = WrappedModelRewriter(wraps)
        target_indexes = {t.index for t in targets}
        wrap_line = self.line(wrap_call)
        for index in moved:
            if index not in target_indexes:
                continue
            needs = [self.line(original[i]) for i in moved if i not in target_indexes]
            extra = f" (with {plural('line', needs)}, which it needs)" if needs else ""
            self.fix(
                original[index],
                f"moved above the DDP wrap at line {wrap_line}{extra}: an optimizer created or "
                "changed after DDP wraps the model only takes effect on the main card",
            )
        moved_statements = [updated[i].visit(rewriter) for i in moved]
        rest = [s for i, s in enumerate(updated) if i >= first_wrap and i not in moved]
        result = list(updated[:first_wrap])
        result.extend(s for s in moved_statements if isinstance(s, cst.BaseStatement))
        result.extend(rest)
        return result

    # -- messages --------------------------------------------------------------------------------

    def report_target(self, target: Target, wrap_call: cst.Call, reason: str) -> None:
        self.report(
            target.call,
            f"build this optimizer before the model is wrapped in DDP (line "
            f"{self.line(wrap_call)}): it only takes effect on the main card otherwise. Not moved "
            f"automatically: {reason}",
        )

    def line(self, node: cst.CSTNode) -> int:
        return self.position(node)[0]

    @staticmethod
    def code(node: cst.CSTNode) -> str:
        return cst.Module(body=[]).code_for_node(node).strip()
