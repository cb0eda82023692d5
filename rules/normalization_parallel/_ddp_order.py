"""NPU203's analysis, the "analyse -> plan" half: which statements move above which DDP wrap,
and which optimizers are reported instead, and why.

:func:`plan_ddp_order` reads a file through its :class:`~migrator.analysis.view.FileView` and
its :class:`~migrator.analysis.effects.CallNames` (what a call is: an optimizer class, an
``amp.initialize``, a pure function of the run, with NPU101's respellings), given the wrap calls
NPU104 removes, and returns a :class:`DdpOrderPlan`: for every block that holds a wrap, the
:class:`Move` of statement lines to just above a wrap, the :class:`Refusal` of each optimizer
that stays after it (with the reason), and the optimizers built after a wrap hidden in a
function or behind a name that may be DDP (:class:`AfterHiddenWrap`). No libcst and no
diagnostics: the rule (``npu203_optimizer_before_ddp``) turns the plan into fixes, reports and
edits. The proof that a move is safe is :mod:`._ddp_proof`.

How a block is planned: its statement lines and what each reads and changes; the optimizers
(targets) after its first real wrap, each with the lines it needs, moved above that wrap when
the proof accepts them. When nothing can move above the first wrap, the planner tries above
each later wrap in turn, for what reads none of the models wrapped before it (DINO's teacher,
then its student).

Not a rule (it defines no ``Rule`` subclass); the registry imports it and finds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from migrator.analysis.clipping import class_of
from migrator.analysis.effects import (
    DATA_PARALLEL,
    DDP_CLASSES,
    CallNames,
    Effects,
    Path,
    Wrap,
    dotted_path,
    effects_of,
    is_optimizer_class,
    show,
    walk_line,
)
from migrator.analysis.names import Ambiguous
from migrator.analysis.view import FileView
from migrator.rules.normalization_parallel._ddp_proof import (
    DEFINITIONS,
    Line,
    MoveProof,
    is_indented,
    is_movable,
    needed_lines,
)

NOT_MOVABLE = "it is built inside a loop or a block this rule does not move statements out of"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BODY_FIELDS = ("body", "orelse", "finalbody")


# -- the plan ------------------------------------------------------------------------------------


# Where NPU203's project facts (the functions of other modules it follows) are kept; NPU101
# reads them to know which optimizers NPU203 moves above a wrap.
DDP_ORDER_KEY = "NPU203"
# NPU203's code: a suppression comment for it at a statement to move keeps the move from being
# made, which NPU101 must know too.
MOVING_CODE = "NPU203"


@dataclass(frozen=True)
class Unwrap:
    """A use of a DDP-wrapped model in a moved line, which becomes a use of the model inside:
    ``model.module`` -> ``model``, ``get_params_groups(ddp_model)`` -> ``...(model)``, or, with
    ``receiver_only``, ``ddp_model.parameters`` -> ``model.parameters``."""

    node: ast.Name | ast.Attribute
    becomes: Path
    receiver_only: bool = False


@dataclass(frozen=True)
class Move:
    """Statement lines of a block that move to just above the wrap at index ``above``."""

    lines: tuple[Line, ...]  # every statement line of the block
    above: int  # the index of the wrap's line
    moved: tuple[int, ...]  # the indexes of the lines that move, in their order
    wrap_line: int  # the source line of the wrap call
    optimizers: tuple[ast.stmt, ...]  # the first statement of each moved optimizer line
    needed: tuple[int, ...]  # the source lines of the moved lines that are not optimizers
    unwraps: tuple[Unwrap, ...]
    assumptions: tuple[str, ...]  # what the move assumes about the models (names it tests)

    @property
    def moved_lines(self) -> list[int]:
        """The source lines where the moved lines start."""
        return [self.lines[index][0].lineno for index in self.moved]

    def suppressed(self, covers: Callable[[int], bool]) -> bool:
        """A suppression comment for NPU203 (``covers``: does one cover this line) keeps the
        move from being made."""
        return any(covers(line) for line in self.moved_lines)


@dataclass(frozen=True)
class Refusal:
    """An optimizer built after the wrap at ``wrap_line`` that stays there, and why."""

    call: ast.Call
    wrap_line: int
    reason: str
    # Every optimizer-building call of its line (`if sgd: SGD(...) else: AdamW(...)`): all of
    # them stay after the wrap, though the report points at the first.
    line_calls: tuple[ast.Call, ...] = ()


@dataclass(frozen=True)
class AfterHiddenWrap:
    """An optimizer built after a wrap the rule cannot move anything above: one inside a
    function the block calls, or a call of a name that may be DDP; ``why`` says which."""

    call: ast.Call
    wrap_line: int
    why: str
    line_calls: tuple[ast.Call, ...] = ()  # as Refusal's


@dataclass(frozen=True)
class BlockOrder:
    """The plan of one block: what moves, and what is reported."""

    owner: ast.AST  # the module or statement whose body the block is
    move: Move | None = None
    refusals: tuple[Refusal, ...] = ()
    after_hidden_wraps: tuple[AfterHiddenWrap, ...] = ()


@dataclass(frozen=True)
class DdpOrderPlan:
    """The plans of a file's blocks, in the order libcst leaves them (inner blocks first)."""

    blocks: tuple[BlockOrder, ...] = ()

    @property
    def moves(self) -> list[Move]:
        return [block.move for block in self.blocks if block.move is not None]

    @property
    def refusals(self) -> list[Refusal]:
        return [refusal for block in self.blocks for refusal in block.refusals]

    @property
    def after_hidden_wraps(self) -> list[AfterHiddenWrap]:
        return [found for block in self.blocks for found in block.after_hidden_wraps]

    def moved_calls(self, covers: Callable[[int], bool]) -> set[int]:
        """The ids of the calls in the statements NPU203 moves above a wrap, when it runs;
        ``covers``: does a suppression comment for NPU203 cover a line."""
        return {
            id(node)
            for move in self.moves
            if not move.suppressed(covers)
            for statement in move.optimizers
            for node in ast.walk(statement)
        }

    def left_after_wraps(
        self, moves_run: bool, covers: Callable[[int], bool] = lambda line: False
    ) -> dict[int, str]:
        """id(call) -> why, for each optimizer-building call that stays after a DDP wrap of
        its block: refused, after a hidden wrap, and those it would move when NPU203 does not
        run (``moves_run`` False) or a suppression comment for it covers the move (``covers``:
        does one cover a line). For NPU101, which must not fuse an optimizer built after DDP
        initialisation."""
        left: dict[int, str] = {}
        for refusal in self.refusals:
            for call in (refusal.call, *refusal.line_calls):
                left[id(call)] = (
                    f"is built after its model is wrapped in DDP (line {refusal.wrap_line}), "
                    f"and NPU203 cannot move it above the wrap ({refusal.reason})"
                )
        for found in self.after_hidden_wraps:
            for call in (found.call, *found.line_calls):
                left[id(call)] = (
                    f"is built after a wrap NPU203 does not move anything above ({found.why}, "
                    f"line {found.wrap_line})"
                )
        for move in self.moves:
            if moves_run and not move.suppressed(covers):
                continue
            why = "does not run" if not moves_run else "is told not to (a suppression comment)"
            for statement in move.optimizers:
                for node in ast.walk(statement):
                    if isinstance(node, ast.Call):
                        left.setdefault(
                            id(node),
                            f"is built after its model is wrapped in DDP (line "
                            f"{move.wrap_line}), and NPU203, which would move it above the "
                            f"wrap, {why}",
                        )
        return left


def plan_ddp_order(
    view: FileView, calls: CallNames, removed_wraps: frozenset[int] = frozenset()
) -> DdpOrderPlan:
    """NPU203's plan for the file of ``view`` (see the module docstring); ``removed_wraps``
    holds the ids of the wrap calls NPU104 removes."""
    planner = FilePlanner(view, calls, removed_wraps)
    if not planner.wrap_calls:
        return DdpOrderPlan()
    return DdpOrderPlan(tuple(BlockPlanner(planner, block).plan() for block in planner.blocks()))


# -- the file: where to look ---------------------------------------------------------------------


@dataclass
class Block:
    """An indented body (or the module's): the unit inside which statements are reordered."""

    owner: ast.AST
    body: list[ast.stmt]


class FilePlanner:
    """The wraps of a file, the functions that wrap or build, and the blocks to plan."""

    def __init__(self, view: FileView, calls: CallNames, removed_wraps: frozenset[int]) -> None:
        self.view = view
        self.index = view.index
        self.calls = calls
        self.removed_wraps = removed_wraps

    def blocks(self) -> list[Block]:
        """The blocks around the wraps and the calls of functions that wrap."""
        hidden = [
            name
            for function in self.wrapping_functions
            for name in self.index.names(function)
            if _called(self.index.parent(name), name)
        ]
        wraps = [call for call, _ in self.wrap_calls]
        return self.blocks_around([*wraps, *hidden])

    @cached_property
    def wrap_calls(self) -> list[tuple[ast.Call, str | Ambiguous]]:
        """The calls that are, or may be (ambiguous names), a DDP or DataParallel class."""
        found = []
        for call in self.view.calls_to({"torch", "apex"}):
            name = self.view.qualified_name_in(call.func, DDP_CLASSES)
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
        for call in self.index.nodes(ast.Call):
            func = class_of(self.view, call)  # a class given to a gradient-clipping wrapper too
            if not self.view.may_name(func, {"torch", "apex", "torch_npu"}):
                continue
            name = self.view.qualified_name(func)
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
                if is_indented(self.view, parent, field_name, body):
                    return id(parent), field_name
                return None
        return None


def _called(parent: ast.AST | None, name: ast.Name) -> bool:
    return isinstance(parent, ast.Call) and parent.func is name


# -- one block -----------------------------------------------------------------------------------


@dataclass
class Target:
    """A statement line after the wrap that builds or changes an optimizer."""

    index: int
    call: ast.Call  # where a report points
    movable: bool


@dataclass
class Attempt:
    """The lines of a block to move above the wrap at line ``start``, and the targets refused."""

    start: int
    wrap_call: ast.Call
    targets: list[Target]
    moved: list[int] = field(default_factory=list)
    refused: list[tuple[Target, ast.Call, str]] = field(default_factory=list)


class BlockPlanner:
    """The plan of one block: the attempts at moving its targets above each of its wraps."""

    def __init__(self, file: FilePlanner, block: Block) -> None:
        self.file = file
        self.view = file.view
        self.calls = file.calls
        self.owner = block.owner
        self.lines = file.index.lines(block.body)
        self.effects = [effects_of(self.calls, line) for line in self.lines]
        self.proof = MoveProof(self.view, self.calls, self.lines, self.effects, file.removed_wraps)

    def plan(self) -> BlockOrder:
        wrap_lines = [i for i in range(len(self.lines)) if self.proof.real_wraps(i)]
        if not wrap_lines:
            return BlockOrder(self.owner, after_hidden_wraps=tuple(self.after_hidden_wraps()))
        attempts = [self.attempt(wrap_lines[0], [])]
        # An optimizer over the student need not go above the teacher's wrap: when nothing can
        # move above the first wrap, try just above each later one, for what reads none of the
        # models wrapped before it.
        for later in range(1, len(wrap_lines)):
            if attempts[-1].moved:
                break
            attempts.append(self.attempt(wrap_lines[later], wrap_lines[:later]))
        refusals = [
            Refusal(target.call, self.view.line(wrap_call), reason, self.line_calls(target.index))
            for target, wrap_call, reason in self.refusals(attempts, wrap_lines)
            if not self.in_place(target.index, [i for i in wrap_lines if i < target.index])
        ]
        chosen = attempts[-1]
        move = self.move(chosen) if chosen.moved else None
        return BlockOrder(self.owner, move, tuple(refusals))

    def attempt(self, start: int, earlier_wraps: list[int]) -> Attempt:
        """What moves to just above line ``start`` (a wrap), and why the rest cannot."""
        wrap_call = self.proof.real_wraps(start)[0].call
        attempt = Attempt(start, wrap_call, self.targets_after(start))
        for target in attempt.targets:
            if not target.movable:
                attempt.refused.append((target, wrap_call, NOT_MOVABLE))
                continue
            candidate, reason = self.proof.lines_to_move(start, attempt.moved, target.index)
            if reason is None:
                reason = self.proof.earlier_wrap_problem(candidate, earlier_wraps)
            if reason is not None:
                attempt.refused.append((target, wrap_call, reason))
                continue
            attempt.moved = candidate
        return attempt

    def targets_after(self, start: int) -> list[Target]:
        targets: list[Target] = []
        for index in range(start + 1, len(self.lines)):
            line = self.lines[index]
            if isinstance(line[0], DEFINITIONS):
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
                targets.append(Target(index, call, is_movable(self.view, line)))
        return targets

    def refusals(
        self, attempts: Sequence[Attempt], wrap_lines: list[int]
    ) -> list[tuple[Target, ast.Call, str]]:
        """Each target that no attempt moves, with the wrap and the reason to report.

        A target refused by several attempts gets the reason of the last attempt whose wrap
        it could go above, reading no model wrapped before that wrap: the wrap of the model
        whose parameters it takes (DINO's student), not the first wrap of the block (its
        teacher's, which the student's optimizer need not go above), nor one after its model's
        wrap, where the reason would only be that its model is wrapped already. The first
        attempt, with no wrap before it, is always such an attempt.
        """
        moved = set(attempts[-1].moved)
        chosen: dict[int, tuple[Target, ast.Call, str]] = {}
        for number, attempt in enumerate(attempts):
            earlier = wrap_lines[:number]
            for target, wrap_call, reason in attempt.refused:
                if target.index in moved:
                    continue
                if target.index not in chosen or self.reads_none_wrapped_before(
                    target.index, attempt.start, earlier
                ):
                    chosen[target.index] = (target, wrap_call, reason)
        return [chosen[index] for index in sorted(chosen)]

    def reads_none_wrapped_before(self, target: int, start: int, earlier_wraps: list[int]) -> bool:
        """The target at ``target`` and the lines after ``start`` it needs read none of the
        models wrapped at ``earlier_wraps``."""
        if not earlier_wraps:
            return True
        needed = needed_lines(self.effects, start, target)
        return self.proof.earlier_wrap_problem(needed, earlier_wraps) is None

    def in_place(self, target: int, wraps_before: list[int]) -> bool:
        """The optimizer at ``target`` and what it needs after the first wrap concern none of
        the models wrapped before it (the student's optimizer after the teacher's wrap, as a
        first run of this rule leaves it): nothing to do."""
        needed = needed_lines(self.effects, wraps_before[0], target)
        return self.proof.earlier_wrap_problem(needed, wraps_before) is None

    # -- the move --------------------------------------------------------------------------------

    def move(self, attempt: Attempt) -> Move:
        """The move the attempt accepts, with the uses it rewrites and what it assumes."""
        moved = attempt.moved
        wraps = [w for i in range(attempt.start, moved[-1]) for w in self.effects[i].wraps]
        targets = {target.index for target in attempt.targets}
        unwraps = [u for index in moved for u in self.unwrapped_uses(self.lines[index], wraps)]
        assumed = [a for index in moved for a in self.assumptions(index, wraps)]
        return Move(
            lines=tuple(self.lines),
            above=attempt.start,
            moved=tuple(moved),
            wrap_line=self.view.line(attempt.wrap_call),
            optimizers=tuple(self.lines[i][0] for i in moved if i in targets),
            needed=tuple(self.proof.line(i) for i in moved if i not in targets),
            unwraps=tuple(unwraps),
            assumptions=tuple(dict.fromkeys(assumed)),
        )

    def unwrapped_uses(self, line: Line, wraps: Sequence[Wrap]) -> Iterator[Unwrap]:
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
                    yield Unwrap(node, wrap.source)
                    break
                if (
                    wrap.target != wrap.source
                    and dotted_path(node.value) == wrap.target
                    and node.attr == "parameters"
                ):
                    yield Unwrap(node, wrap.source, receiver_only=True)
                    break

    def unwrapped_arguments(self, call: ast.Call, wraps: Sequence[Wrap]) -> Iterator[Unwrap]:
        """``get_params_groups(ddp_model)`` -> ``get_params_groups(model)``."""
        for value in [*call.args, *(k.value for k in call.keywords)]:
            path = dotted_path(value)
            for wrap in wraps:
                if path == wrap.target and wrap.source is not None and wrap.source != path:
                    assert isinstance(value, ast.Name | ast.Attribute)  # it has a dotted path
                    yield Unwrap(value, wrap.source)
                    break

    def assumptions(self, index: int, wraps: Sequence[Wrap]) -> list[str]:
        """What moving the line ``index`` assumes: about the models its pure-function calls
        get, about what those functions call (see migrator.analysis.functions), and about
        ``model.no_weight_decay()`` in the line itself."""
        line = self.lines[index]
        found: list[str] = list(self.effects[index].assumptions)
        for node in walk_line(line):
            if not isinstance(node, ast.Call):
                continue
            summary = self.calls.function_summary(node)
            if summary is None:
                continue
            found += summary.call_assumptions(node, self.view.written)
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

    # -- wraps the block cannot move anything above ----------------------------------------------

    def after_hidden_wraps(self) -> Iterator[AfterHiddenWrap]:
        """The model is wrapped in another function, or by a name that may be DDP: each
        optimizer built after the first such wrap (one per line)."""
        hidden: tuple[ast.Call, str] | None = None
        for index, line in enumerate(self.lines):
            if isinstance(line[0], DEFINITIONS):
                continue  # their bodies are blocks of their own
            if hidden is None:
                hidden = self.hidden_wrap(line, self.effects[index])
                continue
            for node in walk_line(line):
                if isinstance(node, ast.Call) and self.builds_or_gets_optimizer(node):
                    wrap_call, why = hidden
                    yield AfterHiddenWrap(
                        node, self.view.line(wrap_call), why, self.line_calls(index)
                    )
                    break

    def line_calls(self, index: int) -> tuple[ast.Call, ...]:
        """The calls of the line ``index`` that build or get an optimizer."""
        return tuple(
            node
            for node in walk_line(self.lines[index])
            if isinstance(node, ast.Call) and self.builds_or_gets_optimizer(node)
        )

    def builds_or_gets_optimizer(self, call: ast.Call) -> bool:
        if self.calls.builds_optimizer(call):
            return True
        return isinstance(call.func, ast.Name) and call.func.id in self.file.optimizer_functions

    def hidden_wrap(self, line: Line, effect: Effects) -> tuple[ast.Call, str] | None:
        if effect.ambiguous:
            call, name = effect.ambiguous[0]
            return (
                call,
                f"`{self.view.code(call.func)}` may be DistributedDataParallel: "
                f"{name.describe()}; if it is, it wraps the model",
            )
        for node in walk_line(line):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                wrap = self.file.wrapping_functions.get(node.func.id)
                if wrap is not None:
                    return wrap, f"`{node.func.id}()` wraps the model in DDP"
        return None
