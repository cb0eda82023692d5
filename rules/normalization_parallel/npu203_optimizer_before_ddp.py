"""NPU203: optimizer (and amp.initialize) created after the model is wrapped in DDP."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from migrator.analysis import functions
from migrator.analysis.effects import (
    DATA_PARALLEL,
    DDP_CLASSES,
    CallNames,
    Effects,
    Path,
    UseKind,
    Wrap,
    dotted_path,
    effects_of,
    is_optimizer_class,
    related,
    show,
    uses,
    walk_line,
)
from migrator.analysis.index import ModuleIndex
from migrator.analysis.names import Ambiguous
from migrator.analysis.project import Facts, Module
from migrator.edits import Edit, Lines
from migrator.lazy_imports import cst
from migrator.rule import FileContext, FixSafety, Linking, Rule
from migrator.rules.optimizers._plans import FusedPlans, RemovedWraps, planned

_TARGET_WORDS = (b"optim", b"add_param_group", b"initialize")
NOT_MOVABLE = "it is built inside a loop or a block this rule does not move statements out of"

Line = list[ast.stmt]  # one statement line: `a = 1; b = 2` is one line of two statements

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match,
)  # fmt: skip
_BODY_FIELDS = ("body", "orelse", "finalbody")


def plural(word: str, numbers: Sequence[int]) -> str:
    listed = ", ".join(map(str, numbers))
    return f"{word}s {listed}" if len(numbers) > 1 else f"{word} {listed}"


@dataclass
class Target:
    """A statement line after the wrap that builds or changes an optimizer."""

    index: int
    call: ast.Call  # where the diagnostic points
    movable: bool


@dataclass
class BlockPlan:
    """The lines of a block to move above the wrap at line ``start``, and the targets refused."""

    start: int
    wrap_call: ast.Call
    targets: list[Target]
    moved: list[int] = field(default_factory=list)
    refused: list[tuple[Target, ast.Call, str]] = field(default_factory=list)


@dataclass
class Block:
    """An indented body (or the module's): the unit inside which statements are reordered."""

    owner: ast.AST
    body: list[ast.stmt]


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
    move. Accepted in between: device moves and casts (`model.cuda(gpu)`, `model.to(device)`,
    `model = DataParallel(model).cuda()`), and calls of any kind (prints, loaders, the loss)
    that are given nothing the moved statements read. Accepted in the moved statements: pure
    functions of the same module, or of another module of the files
    given (DINO's `utils.get_params_groups(student)` with `utils.py` in the run), also with
    the DDP-wrapped model as an argument when they give the same result for it as for the
    model inside; a name test
    such as `name.endswith(".bias")`, which differs for a parameter of the model's own named
    `bias` only, is accepted with that assumption spelled out in the message; and optimizer
    classes of the repository whose construction does nothing but build the optimizer
    (DINO's `utils.LARS(params_groups)`, see `migrator.analysis.classes`). When nothing
    can move above the first wrap of a block, the statements go above a later one, if they
    read nothing wrapped before it (DINO's teacher, then its student). Everything else is
    reported, with the reason found at the wrap of the model the optimizer takes.
    """

    CODE = "NPU203"
    NAME = "optimizer-before-ddp"
    SUMMARY = "optimizer or `amp.initialize` after the model is wrapped in DDP"
    FIX_SAFETY = FixSafety.SAFE
    # Every wrap the rule acts on is a call that may be one of DDP_CLASSES (an ambiguous
    # `DataParallel` counts as a possible DDP), and each of those names contains this.
    TRIGGER = ("DataParallel",)
    # NPU101's respelling of optimizer classes: a moved statement reads its callee as rewritten;
    # NPU104's removed wraps (replaced by combine_ddp) are no wraps to move above.
    READS = (FusedPlans, RemovedWraps)
    # The files it checks are summarised: the functions and classes of other modules of the run
    # they call (migrator.analysis.functions and .classes), whose verdicts the link computes.
    PROJECT_TRIGGER = TRIGGER

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        # A function of another module matters only in a file with something to move: an
        # optimizer (every class it knows lives in a package named `*optim*`), an
        # `add_param_group` or an `amp.initialize`.
        return b"DataParallel" in source and any(word in source for word in _TARGET_WORDS)

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        return functions.summarize(index)

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        return functions.link(linking.project.summaries(cls.project_key()), linking.files)

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        respelled = {key: plan.qualified_target for key, plan in planned(self).items()}
        links = self.project.links(self.project_key())
        self.calls = CallNames(self.view, context.path, links, respelled)

    def check(self) -> None:
        if not self.wrap_calls:
            return
        hidden = [
            name
            for function in self.wrapping_functions
            for name in self.index.names(function)
            if _calls(self.index.parent(name), name)
        ]
        wraps = [call for call, _ in self.wrap_calls]
        for block in self.blocks_around([*wraps, *hidden]):
            self.reorder(block)

    # -- where to look ---------------------------------------------------------------------------

    @cached_property
    def wrap_calls(self) -> list[tuple[ast.Call, str | Ambiguous]]:
        """The calls that are, or may be (ambiguous names), a DDP or DataParallel class."""
        found = []
        for call in self.calls_to({"torch", "apex"}):
            name = self.qualified_name_in(call.func, DDP_CLASSES)
            if name is not None:
                found.append((call, name))
        return found

    @cached_property
    def wrapping_functions(self) -> dict[str, ast.Call]:
        """Module-level functions that wrap a model in DDP: name -> the wrap inside.

        The last ``return DDP(...)`` in the function counts, else the last ``x = DDP(...)``;
        a function defined again under the same name replaces the earlier one's entry.
        """
        found: list[tuple[int, int, ast.Call, str]] = []  # (function, kind, the wrap, name)
        for call, name in self.wrap_calls:
            function = self.top_level_function(call)
            if function is None or not isinstance(name, str):
                continue
            holder = self.index.parent(call)
            if isinstance(holder, ast.Assign) and holder.value is call:
                wrap = self.calls.wrap_of(holder)
                if wrap is not None and not wrap.data_parallel:
                    found.append((function.lineno, 0, call, function.name))
            elif isinstance(holder, ast.Return) and name not in DATA_PARALLEL:
                found.append((function.lineno, 1, call, function.name))
        # calls come in source order; a stable sort keeps it within a function and a kind
        found.sort(key=lambda entry: entry[:2])
        return {name: call for _, _, call, name in found}

    @cached_property
    def optimizer_functions(self) -> set[str]:
        """Module-level functions that build an optimizer somewhere in their body."""
        found = set()
        for call in self.calls_to({"torch", "apex", "torch_npu"}):
            name = self.qualified_name(call.func)
            if isinstance(name, str) and is_optimizer_class(name):
                function = self.top_level_function(call)
                if function is not None:
                    found.add(function.name)
        return found

    def top_level_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The module-level function whose body holds ``node``."""
        below: ast.AST | None = None
        child = node
        for parent in self.index.ancestors(node):
            if parent is self.index.tree:
                inside = below is not None and any(below is s for s in getattr(child, "body", ()))
                return child if isinstance(child, _FUNCTIONS) and inside else None
            below, child = child, parent
        return None

    def blocks_around(self, nodes: Iterable[ast.AST]) -> list[Block]:
        """Every block that holds one of ``nodes``, however deep, inner blocks first."""
        found: dict[tuple[int, str], tuple[tuple[int, int, int], Block]] = {}
        for node in nodes:
            child = node
            ancestors = [*self.index.ancestors(node)]
            for level, parent in enumerate(ancestors):
                key = self.block_key(parent, child)
                if key is not None and key not in found:
                    body = getattr(parent, key[1])
                    last = body[-1]
                    # the order libcst leaves them in: by where they end, the deeper first
                    order = (last.end_lineno, last.end_col_offset, level - len(ancestors))
                    found[key] = (order, Block(parent, body))
                child = parent
        return [block for _, block in sorted(found.values(), key=lambda item: item[0])]

    def block_key(self, parent: ast.AST, child: ast.AST) -> tuple[int, str] | None:
        """(owner, field) of the indented body of ``parent`` that holds ``child``, if any."""
        if not isinstance(child, ast.stmt):
            return None
        for field_name in _BODY_FIELDS:
            body = getattr(parent, field_name, None)
            if isinstance(body, list) and any(s is child for s in body):
                if self.is_indented(parent, field_name, body):
                    return id(parent), field_name
                return None
        return None

    def is_indented(self, parent: ast.AST, field_name: str, body: list[ast.stmt]) -> bool:
        """A body on lines of its own (libcst's IndentedBlock), or the module's."""
        if isinstance(parent, ast.Module):
            return True
        first = body[0]
        if field_name == "orelse" and isinstance(parent, ast.If) and self.is_elif(first):
            return False
        line, column = self.source.position(first)
        return not self.source.line_text(line)[: column - 1].strip()

    def is_elif(self, statement: ast.stmt) -> bool:
        return isinstance(statement, ast.If) and self.source.segment(statement).startswith("elif")

    # -- one block -------------------------------------------------------------------------------

    def reorder(self, block: Block) -> None:
        original = self.index.lines(block.body)
        effects = [effects_of(self.calls, line) for line in original]
        wrap_lines = [i for i, e in enumerate(effects) if self.real_wraps(e)]
        if not wrap_lines:
            self.check_hidden_wraps(original, effects)
            return
        plans = [self.plan_block(original, effects, wrap_lines[0], [])]
        # An optimizer over the student need not go above the teacher's wrap: when nothing can
        # move above the first wrap, try just above each later one, for what reads none of the
        # models wrapped before it.
        for attempt in range(1, len(wrap_lines)):
            if plans[-1].moved:
                break
            plans.append(
                self.plan_block(original, effects, wrap_lines[attempt], wrap_lines[:attempt])
            )
        plan = plans[-1]
        for target, wrap_call, reason in self.refusals(original, effects, plans, wrap_lines):
            wraps_before = [i for i in wrap_lines if i < target.index]
            if not self.in_place(original, effects, target.index, wraps_before):
                self.report_target(target, wrap_call, reason)
        if plan.moved:
            self.apply_move(original, effects, plan.start, plan.moved, plan.targets, plan.wrap_call)

    def refusals(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        plans: Sequence[BlockPlan],
        wrap_lines: list[int],
    ) -> list[tuple[Target, ast.Call, str]]:
        """Each target that no attempt moves, with the wrap and the reason to report.

        A target refused by several attempts gets the reason of the last attempt whose wrap
        it could go above, reading no model wrapped before that wrap: the wrap of the model
        whose parameters it takes (DINO's student), not the first wrap of the block (its
        teacher's, which the student's optimizer need not go above), nor one after its model's
        wrap, where the reason would only be that its model is wrapped already. The first
        attempt, with no wrap before it, is always such an attempt.
        """
        moved = set(plans[-1].moved)
        chosen: dict[int, tuple[Target, ast.Call, str]] = {}
        for attempt, plan in enumerate(plans):
            earlier = wrap_lines[:attempt]
            for target, wrap_call, reason in plan.refused:
                if target.index in moved:
                    continue
                if target.index not in chosen or self.reads_none_wrapped_before(
                    original, effects, target.index, plan.start, earlier
                ):
                    chosen[target.index] = (target, wrap_call, reason)
        return [chosen[index] for index in sorted(chosen)]

    def reads_none_wrapped_before(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        target: int,
        start: int,
        earlier_wraps: list[int],
    ) -> bool:
        """The target at ``target`` and the lines after ``start`` it needs read none of the
        models wrapped at ``earlier_wraps``."""
        if not earlier_wraps:
            return True
        needed = [target]
        for index in needed:
            for dependency in self.dependencies(effects, start, index, needed):
                if dependency not in needed:
                    needed.append(dependency)
        return self.earlier_wrap_problem(original, effects, needed, earlier_wraps) is None

    def plan_block(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        start: int,
        earlier_wraps: list[int],
    ) -> BlockPlan:
        """What moves to just above line ``start`` (a wrap), and why the rest cannot."""
        wrap_call = self.real_wraps(effects[start])[0].call
        plan = BlockPlan(start, wrap_call, self.targets_after(original, start))
        for target in plan.targets:
            if not target.movable:
                plan.refused.append((target, wrap_call, NOT_MOVABLE))
                continue
            candidate, reason = self.plan_move(original, effects, start, plan.moved, target.index)
            if reason is None:
                reason = self.earlier_wrap_problem(original, effects, candidate, earlier_wraps)
            if reason is not None:
                plan.refused.append((target, wrap_call, reason))
                continue
            plan.moved = candidate
        return plan

    def in_place(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        target: int,
        wraps_before: list[int],
    ) -> bool:
        """The optimizer at ``target`` and what it needs after the first wrap concern none of
        the models wrapped before it (the student's optimizer after the teacher's wrap, as a
        first run of this rule leaves it): nothing to do."""
        needed = [target]
        for index in needed:
            for dependency in self.dependencies(effects, wraps_before[0], index, needed):
                if dependency not in needed:
                    needed.append(dependency)
        return self.earlier_wrap_problem(original, effects, needed, wraps_before) is None

    def earlier_wrap_problem(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        moved: list[int],
        earlier_wraps: list[int],
    ) -> str | None:
        """Lines moved to above a later wrap must not concern a model wrapped before it."""
        for index in earlier_wraps:
            for wrap in self.real_wraps(effects[index]):
                if wrap.source is None:
                    line = self.line(original[index][0])
                    return f"line {line} wraps a model npu-migrate cannot name in DDP before"
                wrapped = {wrap.target, wrap.source}
                for line in moved:
                    read = next(
                        (r for r in sorted(effects[line].reads) for w in wrapped if related(r, w)),
                        None,
                    )
                    if read is not None:
                        return (
                            f"it reads `{show(read)}`, which line "
                            f"{self.line(original[index][0])} wraps in DDP before"
                        )
        return None

    def real_wraps(self, effects: Effects) -> list[Wrap]:
        """The DDP wraps of a line, but those NPU104 removes (combine_ddp replaces them)."""
        removed_wraps = self.read_plan(RemovedWraps)
        removed = removed_wraps.calls if removed_wraps is not None else frozenset()
        return [w for w in effects.wraps if not w.data_parallel and id(w.call) not in removed]

    def targets_after(self, original: Sequence[Line], start: int) -> list[Target]:
        targets: list[Target] = []
        for index in range(start + 1, len(original)):
            line = original[index]
            if isinstance(line[0], _DEFINITIONS):
                continue  # runs later, when called: not part of this block's order
            call = next(
                (
                    node
                    for node in walk_line(line)
                    if isinstance(node, ast.Call) and self.calls.builds_optimizer(node)
                ),
                None,
            )
            if call is not None:
                targets.append(Target(index, call, self.is_movable(line)))
        return targets

    def is_movable(self, line: Line) -> bool:
        """A simple statement, or an if/elif/else whose branches are all simple statements."""
        statement = line[0]
        if not isinstance(statement, _COMPOUND):
            return True
        if not isinstance(statement, ast.If):
            return False
        branch = statement
        while self.is_simple_body(branch, "body", branch.body):
            orelse = branch.orelse
            if not orelse:
                return True
            if not isinstance(orelse[0], ast.If) or not self.is_elif(orelse[0]):
                return self.is_simple_body(branch, "orelse", orelse)
            branch = orelse[0]
        return False

    def is_simple_body(self, parent: ast.AST, field_name: str, body: list[ast.stmt]) -> bool:
        indented = self.is_indented(parent, field_name, body)
        return indented and not any(isinstance(s, _COMPOUND) for s in body)

    # -- proving a move safe ---------------------------------------------------------------------

    def plan_move(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        first_wrap: int,
        accepted: list[int],
        target: int,
    ) -> tuple[list[int], str | None]:
        """The lines to move (``accepted`` ones, ``target`` and what it needs), or why they
        cannot move."""
        moved = sorted({*accepted, target})
        changed = True
        while changed:
            changed = False
            for index in list(moved):
                for dependency in self.dependencies(effects, first_wrap, index, moved):
                    if dependency not in moved:
                        if not self.is_movable(original[dependency]):
                            return [], (
                                f"it needs what line {self.line(original[dependency][0])} sets "
                                "between the wrap and here, which cannot be moved"
                            )
                        moved = sorted({*moved, dependency})
                        changed = True
        reason = self.unsafe_reason(original, effects, first_wrap, moved, accepted)
        return moved, reason

    @staticmethod
    def dependencies(
        effects: Sequence[Effects], first_wrap: int, index: int, moved: list[int]
    ) -> Iterator[int]:
        """Lines between the first wrap and ``index`` that set what ``index`` reads (bind it,
        or build it: ``groups.append(...)``). Wraps and device moves are not dependencies:
        unsafe_reason decides whether they may be skipped over."""
        for read in sorted(effects[index].reads):  # sorted: the same message every run
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
        original: Sequence[Line],
        effects: Sequence[Effects],
        first_wrap: int,
        moved: list[int],
        accepted: list[int],
    ) -> str | None:
        ranges = self.jumped_lines(first_wrap, moved, accepted)
        wraps = {
            index: [w for i in jumped for w in effects[i].wraps] for index, jumped in ranges.items()
        }
        # amp.initialize must stay after the device moves of what it gets, and what a moved line
        # before it builds (an optimizer over `head`'s parameters) may be what it gets.
        amp_lines = [i for i in moved if self.contains_amp(original[i])]
        amp_models: set[str] = set()
        bound_by_moved: set[str] = set()
        for index in moved:
            line, effect = original[index], effects[index]
            if effect.unknown_calls:
                call = effect.unknown_calls[0]
                return (
                    f"it calls `{self.code(call.func)}(...)`, which might depend on or change "
                    f"what happens in between{self.why_unknown(call)}"
                )
            reason = self.wrapped_use_problem(line, wraps[index])
            if reason is not None:
                return reason
            has_amp = any(a >= index for a in amp_lines)
            for read in sorted(effect.reads):
                if read[0] in bound_by_moved:
                    continue
                reason = self.read_conflict(original, effects, ranges[index], read, has_amp)
                if reason is not None:
                    return reason
            bound_by_moved |= effect.binds
            amp_models |= effect.amp_models
        for index in moved:
            for write in effects[index].writes():
                reason = self.write_conflict(original, effects, ranges[index], write, amp_models)
                if reason is not None:
                    return reason
        return None

    def why_unknown(self, call: ast.Call) -> str:
        """For an optimizer class of the repository that does more than build an optimizer:
        what it does (see migrator.analysis.classes)."""
        found = self.calls.optimizer_class(call)
        if found is None or found.problem is None:
            return ""
        return f" (`{found.name}` {found.problem})"

    @staticmethod
    def jumped_lines(
        first_wrap: int, moved: list[int], accepted: list[int]
    ) -> dict[int, list[int]]:
        """For each line to move, the lines staying behind that it is checked against.

        A new line (the target and what it needs) is checked, as the rule has always done,
        against every line that stays behind up to the last line to move. A line that an
        earlier target moves was proved safe over the lines up to the last of those, and the
        lines after that stay after it: checking it again over the longer range could refuse
        this target for its sake, and a second run, with that line moved already, would then
        move the target (the rewrite would not be idempotent).
        """
        skipped = [i for i in range(first_wrap, moved[-1]) if i not in moved]
        before_accepted = [i for i in skipped if not accepted or i < accepted[-1]]
        return {index: before_accepted if index in accepted else skipped for index in moved}

    def read_conflict(
        self,
        original: Sequence[Line],
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
                line = self.line(original[index][0])
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
        original: Sequence[Line],
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
                    f"line {self.line(original[index][0])} uses `{show(clash)}`, which the "
                    "statements to move set"
                )
        return None

    def wrapped_use_problem(self, line: Line, wraps: list[Wrap]) -> str | None:
        """Uses of a wrapped model that cannot be rewritten to the model it wraps."""
        found = uses(self.index, line)
        for wrap in wraps:
            for use in found:
                if use.path != wrap.target or self.is_rewritable(use.kind, use.call, wrap):
                    continue
                if use.kind is UseKind.ARGUMENT and use.call is not None:
                    problem = self.argument_problem(use.call, wrap)
                    if problem is not None:
                        return problem
                return (
                    f"it uses the DDP-wrapped `{show(wrap.target)}` itself (parameter names of "
                    "a wrapped model start with `module.`); use its `.module` or the unwrapped "
                    "model"
                )
        return None

    def is_rewritable(self, kind: UseKind, call: ast.Call | None, wrap: Wrap) -> bool:
        if wrap.source is None:
            return False
        if kind in (UseKind.MODULE, UseKind.PARAMETERS):
            return True
        if kind is UseKind.ARGUMENT and call is not None and self.invariant_argument(call, wrap):
            return True
        if wrap.source == wrap.target and kind is UseKind.ARGUMENT:
            return call is not None and self.calls.is_amp_initialize(call)
        # A part of a longer path (`model.module.x` when the wrap target is `model`): the
        # longer path decides; or a name being assigned (amp rebinding the model).
        return kind in (UseKind.ELEMENT, UseKind.ASSIGNED)

    def invariant_argument(self, call: ast.Call, wrap: Wrap) -> bool:
        """``call`` is a pure function of this module that gives the same result for the DDP
        wrapper ``wrap.target`` as for the module it wraps (see migrator.analysis.functions)."""
        summary = self.calls.function_summary(call)
        if summary is None:
            return False
        given = [*call.args, *(k.value for k in call.keywords)]
        for value in given:
            if dotted_path(value) != wrap.target:
                continue
            parameter = summary.parameter_for(call, value)
            if parameter is None or summary.invariance[parameter].problem is not None:
                return False
        return True

    def argument_problem(self, call: ast.Call, wrap: Wrap) -> str | None:
        """Why a function of this module may give another result for the DDP wrapper."""
        summary = self.calls.function_summary(call)
        if summary is None:
            return None
        for value in [*call.args, *(k.value for k in call.keywords)]:
            parameter = summary.parameter_for(call, value)
            if dotted_path(value) != wrap.target:
                continue
            if parameter is None:
                return (
                    f"`{summary.name}` gets the DDP-wrapped `{show(wrap.target)}` through `*`/`**`"
                )
            problem = summary.invariance[parameter].problem
            if problem is not None:
                return (
                    f"`{summary.name}` may give another result for the DDP-wrapped "
                    f"`{show(wrap.target)}` than for the model it wraps: {problem}"
                )
        return None

    def assumptions(self, line: Line, wraps: Sequence[Wrap]) -> list[str]:
        """What a moved line's pure-function calls assume about the models they get."""
        found: list[str] = []
        for node in walk_line(line):
            if not isinstance(node, ast.Call):
                continue
            summary = self.calls.function_summary(node)
            if summary is None:
                continue
            for wrap in wraps:
                for value in [*node.args, *(k.value for k in node.keywords)]:
                    parameter = summary.parameter_for(node, value)
                    if dotted_path(value) != wrap.target or parameter is None:
                        continue
                    model = show(wrap.source or wrap.target)
                    found += [
                        f"`{model}` {assumption} (`{summary.name}` tests its parameter names, "
                        "which DDP prefixes with `module.`)"
                        for assumption in summary.invariance[parameter].assumptions
                    ]
        return list(dict.fromkeys(found))

    def contains_amp(self, line: Line) -> bool:
        return any(self.calls.is_amp_initialize(node) for node in walk_line(line))

    def check_hidden_wraps(self, original: Sequence[Line], effects: Sequence[Effects]) -> None:
        """The model is wrapped in another function, or by a name that may be DDP."""
        hidden: tuple[ast.Call, str] | None = None
        for index, line in enumerate(original):
            if isinstance(line[0], _DEFINITIONS):
                continue  # their bodies are blocks of their own
            if hidden is None:
                hidden = self.hidden_wrap(line, effects[index])
                continue
            for node in walk_line(line):
                if isinstance(node, ast.Call) and self.builds_or_gets_optimizer(node):
                    wrap_call, why = hidden
                    self.report(
                        node,
                        f"{why} at line {self.line(wrap_call)}, before this optimizer is built: "
                        "build the optimizer (and call `amp.initialize`) before the wrap, or the "
                        "optimizer only takes effect on the main card",
                    )
                    break

    def builds_or_gets_optimizer(self, call: ast.Call) -> bool:
        if self.calls.builds_optimizer(call):
            return True
        return isinstance(call.func, ast.Name) and call.func.id in self.optimizer_functions

    def hidden_wrap(self, line: Line, effect: Effects) -> tuple[ast.Call, str] | None:
        if effect.ambiguous:
            call, name = effect.ambiguous[0]
            return (
                call,
                f"`{self.code(call.func)}` may be DistributedDataParallel: {name.describe()}; if "
                "it is, it wraps the model",
            )
        for node in walk_line(line):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                wrap = self.wrapping_functions.get(node.func.id)
                if wrap is not None:
                    return wrap, f"`{node.func.id}()` wraps the model in DDP"
        return None

    # -- moving ----------------------------------------------------------------------------------

    def apply_move(
        self,
        original: Sequence[Line],
        effects: Sequence[Effects],
        first_wrap: int,
        moved: list[int],
        targets: list[Target],
        wrap_call: ast.Call,
    ) -> None:
        lines = [self.line(original[i][0]) for i in moved]
        if any(self.context.suppressions.covers(line, self.CODE) for line in lines):
            return
        wraps = [w for i in range(first_wrap, moved[-1]) for w in effects[i].wraps]
        edits: list[Edit] = [self.rebuild_block(list(original), _reordered(first_wrap, moved))]
        for index in moved:
            edits.extend(self.unwrapped_uses(original[index], wraps))
        target_indexes = {t.index for t in targets}
        wrap_line = self.line(wrap_call)
        assumed = [a for index in moved for a in self.assumptions(original[index], wraps)]
        assuming = f", assuming {'; and '.join(dict.fromkeys(assumed))}" if assumed else ""
        for index in moved:
            if index not in target_indexes:
                continue
            needs = [self.line(original[i][0]) for i in moved if i not in target_indexes]
            extra = f" (with {plural('line', needs)}, which it needs)" if needs else ""
            if self.fix(
                original[index][0],
                f"moved above the DDP wrap at line {wrap_line}{extra}: an optimizer created or "
                f"changed after DDP wraps the model only takes effect on the main card{assuming}",
                *edits,
            ):
                edits = []  # the block is rebuilt once, with the first diagnostic

    def unwrapped_uses(self, line: Line, wraps: Sequence[Wrap]) -> Iterator[Edit]:
        """``model.module.x`` -> ``model.x`` (and ``ddp_model.parameters()`` ->
        ``model.parameters()``) in a line moved above the wrap."""
        sourced = [w for w in wraps if w.source is not None]
        if not sourced:
            return
        for node in walk_line(line):
            if isinstance(node, ast.Call) and self.calls.function_summary(node) is not None:
                yield from self.unwrapped_arguments(node, sourced)
            if not isinstance(node, ast.Attribute):
                continue
            path = dotted_path(node)
            for wrap in sourced:
                assert wrap.source is not None
                if path == (*wrap.target, "module"):
                    yield self.replace(node, cst.Attribute, _becomes(wrap.source))
                    break
                if (
                    wrap.target != wrap.source
                    and dotted_path(node.value) == wrap.target
                    and node.attr == "parameters"
                ):
                    yield self.replace(node, cst.Attribute, _receiver_becomes(wrap.source))
                    break

    def unwrapped_arguments(self, call: ast.Call, wraps: Sequence[Wrap]) -> Iterator[Edit]:
        """``get_params_groups(ddp_model)`` -> ``get_params_groups(model)``."""
        for value in [*call.args, *(k.value for k in call.keywords)]:
            path = dotted_path(value)
            for wrap in wraps:
                if path == wrap.target and wrap.source is not None and wrap.source != path:
                    kind = cst.Name if isinstance(value, ast.Name) else cst.Attribute
                    yield self.replace(value, kind, _becomes(wrap.source))
                    break

    # -- messages --------------------------------------------------------------------------------

    def report_target(self, target: Target, wrap_call: ast.Call, reason: str) -> None:
        self.report(
            target.call,
            f"build this optimizer before the model is wrapped in DDP (line "
            f"{self.line(wrap_call)}): it only takes effect on the main card otherwise. Not moved "
            f"automatically: {reason}",
        )


def _calls(parent: ast.AST | None, name: ast.Name) -> bool:
    return isinstance(parent, ast.Call) and parent.func is name


def _reordered(first_wrap: int, moved: list[int]) -> Callable[[Lines], list[cst.BaseStatement]]:
    """The block's lines with ``moved`` taken out and put just before line ``first_wrap``."""

    def rebuild(lines: Lines) -> list[cst.BaseStatement]:
        rest = [i for i in range(first_wrap, len(lines)) if i not in moved]
        order = [*range(first_wrap), *moved, *rest]
        return [statement for i in order for statement in lines[i]]

    return rebuild


def _becomes(path: Path) -> Callable[[cst.Attribute], cst.BaseExpression]:
    return lambda node: cst.parse_expression(show(path))


def _receiver_becomes(path: Path) -> Callable[[cst.Attribute], cst.BaseExpression]:
    return lambda node: node.with_changes(value=cst.parse_expression(show(path)))
