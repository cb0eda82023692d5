"""NPU203's proof that statement lines of a block may move above a DDP wrap of that block.

Part of NPU203's analysis (:mod:`._ddp_order` plans with it). Given what every line of a block
reads and changes (:func:`migrator.analysis.effects.effects_of`), :class:`MoveProof` finds the
lines a target needs (:func:`dependencies`) and says why a set of lines cannot move over the
lines they skip, or ``None`` when they can. Pure: no libcst and no diagnostics; a reason is the
text the rule's report ends with.

Not a rule (it defines no ``Rule`` subclass); the registry imports it and finds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from migrator.analysis.effects import (
    CallNames,
    Effects,
    EffectsCollector,
    Path,
    UseKind,
    Wrap,
    dotted_path,
    related,
    show,
    uses,
    walk_line,
)
from migrator.analysis.view import FileView

Line = list[ast.stmt]  # one statement line: `a = 1; b = 2` is one line of two statements

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match,
)  # fmt: skip


# -- the shape of a line -------------------------------------------------------------------------


def is_movable(view: FileView, line: Line) -> bool:
    """A simple statement, or an if/elif/else whose branches are all simple statements."""
    statement = line[0]
    if not isinstance(statement, _COMPOUND):
        return True
    if not isinstance(statement, ast.If):
        return False
    branch = statement
    while _is_simple_body(view, branch, "body", branch.body):
        orelse = branch.orelse
        if not orelse:
            return True
        if not isinstance(orelse[0], ast.If) or not is_elif(view, orelse[0]):
            return _is_simple_body(view, branch, "orelse", orelse)
        branch = orelse[0]
    return False


def _is_simple_body(view: FileView, parent: ast.AST, field_name: str, body: Line) -> bool:
    indented = is_indented(view, parent, field_name, body)
    return indented and not any(isinstance(s, _COMPOUND) for s in body)


def is_indented(view: FileView, parent: ast.AST, field_name: str, body: Line) -> bool:
    """A body on lines of its own (libcst's IndentedBlock), or the module's."""
    if isinstance(parent, ast.Module):
        return True
    first = body[0]
    if field_name == "orelse" and isinstance(parent, ast.If) and is_elif(view, first):
        return False
    line, column = view.source.position(first)
    return not view.source.line_text(line)[: column - 1].strip()


def is_elif(view: FileView, statement: ast.stmt) -> bool:
    return isinstance(statement, ast.If) and view.source.segment(statement).startswith("elif")


# -- what a line needs ---------------------------------------------------------------------------


def dependencies(
    effects: Sequence[Effects], first_wrap: int, index: int, moved: Sequence[int]
) -> Iterator[int]:
    """Lines between the first wrap and ``index`` that set what ``index`` reads (bind it, or
    build it: ``groups.append(...)``). Wraps and device moves are not dependencies: the proof
    decides whether they may be skipped over."""
    for read in sorted(effects[index].reads):  # sorted: the same message every run
        for earlier in range(index - 1, first_wrap, -1):
            effect = effects[earlier]
            if earlier in moved or effect.wraps:
                continue
            writes = {(name,) for name in effect.plain_binds} | effect.mutates
            if any(related(read, w) and len(w) <= len(read) for w in writes):
                yield earlier
                break


def needed_lines(effects: Sequence[Effects], start: int, target: int) -> list[int]:
    """The line ``target`` and every line after ``start`` it needs, directly or not."""
    needed = [target]
    for index in needed:
        for dependency in dependencies(effects, start, index, needed):
            if dependency not in needed:
                needed.append(dependency)
    return needed


def jumped_lines(first_wrap: int, moved: list[int]) -> dict[int, list[int]]:
    """For each line to move, the lines staying behind that it jumps over: those between the
    first wrap and it. The moved lines keep their order among themselves, and so do the lines
    that stay, so only a moved line and a staying line that came before it change places: a
    staying line after it (simsiam's `assert len(parameters) == 2` between `parameters = ...`
    and the optimizer) sees what it saw before, and is checked against the moved lines that
    come after it.

    A line that an earlier target moves was proved safe over the lines before it in the same
    way, so a second run, with that line moved already, decides the same (the rewrite stays
    idempotent).
    """
    skipped = [i for i in range(first_wrap, moved[-1]) if i not in moved]
    return {index: [i for i in skipped if i < index] for index in moved}


def real_wraps(effects: Effects, removed: frozenset[int]) -> list[Wrap]:
    """The DDP wraps of a line, but those in ``removed`` (NPU104 replaces them by combine_ddp)."""
    return [w for w in effects.wraps if not w.data_parallel and id(w.call) not in removed]


# -- the proof -----------------------------------------------------------------------------------


class MoveProof:
    """Whether lines of one block may move to just above a wrap of it, and what they need.

    ``lines`` are the block's statement lines and ``effects`` what each reads and changes;
    ``removed`` the ids of the wrap calls NPU104 removes (no wraps to move above).
    """

    def __init__(
        self,
        view: FileView,
        calls: CallNames,
        lines: Sequence[Line],
        effects: Sequence[Effects],
        removed: frozenset[int],
    ) -> None:
        self.view = view
        self.calls = calls
        self.lines = lines
        self.effects = effects
        self.removed = removed

    def line(self, index: int) -> int:
        """The source line where the block's line ``index`` starts."""
        return self.view.line(self.lines[index][0])

    def real_wraps(self, index: int) -> list[Wrap]:
        return real_wraps(self.effects[index], self.removed)

    def lines_to_move(
        self, first_wrap: int, accepted: list[int], target: int
    ) -> tuple[list[int], str | None]:
        """The lines to move (``accepted`` ones, ``target`` and what it needs), or why they
        cannot move."""
        moved = sorted({*accepted, target})
        changed = True
        while changed:
            changed = False
            for index in list(moved):
                for dependency in dependencies(self.effects, first_wrap, index, moved):
                    if dependency not in moved:
                        if not is_movable(self.view, self.lines[dependency]):
                            return [], (
                                f"it needs what line {self.line(dependency)} sets between the "
                                "wrap and here, which cannot be moved"
                            )
                        moved = sorted({*moved, dependency})
                        changed = True
        return moved, self.unsafe_reason(first_wrap, moved)

    def earlier_wrap_problem(self, moved: list[int], earlier_wraps: list[int]) -> str | None:
        """Lines moved to above a later wrap must not concern a model wrapped before it."""
        for index in earlier_wraps:
            for wrap in self.real_wraps(index):
                if wrap.source is None:
                    return (
                        f"line {self.line(index)} wraps a model npu-migrate cannot name in DDP "
                        "before"
                    )
                wrapped = self.aliases({wrap.target, wrap.source})
                for line in moved:
                    read = next(
                        (
                            r
                            for r in sorted(self.effects[line].reads)
                            for w in wrapped
                            if related(r, w)
                        ),
                        None,
                    )
                    if read is not None:
                        return (
                            f"it reads `{show(read)}`, which line {self.line(index)} wraps in "
                            "DDP before"
                        )
        return None

    def aliases(self, models: set[Path]) -> set[Path]:
        """``models`` and the names the block binds to one of them or to a part of one
        (``model_without_ddp = model.module``, ``net = model``), and so on: the same modules
        under other names, whose parameters a wrap of ``models`` wraps too."""
        found = set(models)
        assignments = [
            (node.targets[0].id, path)
            for line in self.lines
            for statement in line
            for node in ast.walk(statement)
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and (path := dotted_path(node.value)) is not None
        ]
        grown = True
        while grown:
            grown = False
            for name, path in assignments:
                if (name,) not in found and any(related(path, model) for model in found):
                    found.add((name,))
                    grown = True
        return found

    def unsafe_reason(self, first_wrap: int, moved: list[int]) -> str | None:
        """Why ``moved`` cannot go above ``first_wrap``: an unknown call, a use of the wrapped
        model, a read of what a skipped line changes, a write of what it uses."""
        ranges = jumped_lines(first_wrap, moved)
        wraps = {
            index: [w for i in jumped for w in self.effects[i].wraps]
            for index, jumped in ranges.items()
        }
        # amp.initialize must stay after the device moves of what it gets, and what a moved line
        # before it builds (an optimizer over `head`'s parameters) may be what it gets.
        amp_lines = [i for i in moved if self.contains_amp(self.lines[i])]
        amp_models: set[str] = set()
        bound_by_moved: set[str] = set()
        for index in moved:
            line, effect = self.lines[index], self.effects[index]
            if effect.unknown_calls:
                call = effect.unknown_calls[0]
                return (
                    f"it calls `{self.view.code(call.func)}(...)`, which might depend on or "
                    f"change what happens in between{self.why_unknown(call)}"
                )
            reason = self.wrapped_use_problem(line, wraps[index])
            if reason is not None:
                return reason
            has_amp = any(a >= index for a in amp_lines)
            for read in sorted(effect.reads):
                if read[0] in bound_by_moved:
                    continue
                reason = self.read_conflict(ranges[index], read, has_amp)
                if reason is not None:
                    return reason
            bound_by_moved |= effect.binds
            amp_models |= effect.amp_models
        for index in moved:
            for write in self.effects[index].writes():
                reason = self.write_conflict(ranges[index], write, amp_models)
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

    def read_conflict(self, skipped: list[int], read: Path, has_amp: bool) -> str | None:
        """A skipped line changes what a moved line reads."""
        for index in skipped:
            effect = self.effects[index]
            for write in sorted(effect.writes()):
                if not related(read, write):
                    continue
                if len(write) == 1 and self.keeps_module(index, write[0]):
                    continue  # `model_without_ddp = model.module` after the wrap, see there
                if not effect.replaces(write):
                    # amp.initialize needs the model on the device: a device move in the block
                    # of the wrap counts too (`model.cuda()` before `model = DDP(model)`).
                    if write in effect.device_moves and has_amp:
                        done = (
                            f"converts the BatchNorm layers of `{show(write)}`"
                            if write in effect.conversions
                            else f"moves `{show(write)}` to the device"
                        )
                        return (
                            f"`amp.initialize` must stay after line {self.line(index)}, which "
                            f"{done}"
                        )
                    if write in effect.wrap_targets:
                        continue  # its uses were checked by wrapped_use_problem
                    if write in effect.device_moves:
                        continue  # same Parameter objects after a device move
                return f"it reads `{show(read)}`, which line {self.line(index)} changes before it"
        return None

    def keeps_module(self, index: int, name: str) -> bool:
        """Line ``index`` rebinds ``name`` only to the module inside a DDP wrap it makes, and
        ``name`` names that module already above the line, so it names the same module after
        the line on every path: DeiT's and BEiT's ``model_without_ddp = model``, then
        ``if args.distributed:`` / ``model = DDP(model, ...)`` / ``model_without_ddp =
        model.module``. A line that reads ``name`` may then move above the wrap."""
        stores = [
            node
            for statement in self.lines[index]
            for node in ast.walk(statement)
            if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
        ]
        sources = {self.unwrapped_module(index, store) for store in stores}
        if len(sources) != 1:
            return False
        (source,) = sources
        return source is not None and self.named_before(self.lines[index][0], name, source)

    def unwrapped_module(self, index: int, store: ast.Name) -> str | None:
        """The plain name ``S`` when ``store`` is the target of ``name = T.module`` right after
        ``T = DDP(S, ...)`` in the same body, reached from the top of line ``index`` through
        ``if`` statements only, with ``S`` rebound in the line by nothing but the wrap and
        device moves (modules return themselves from ``model.cuda()``)."""
        parent = self.view.index.parent
        assignment = parent(store)
        if not (
            isinstance(assignment, ast.Assign)
            and assignment.targets == [store]
            and isinstance(assignment.value, ast.Attribute)
            and assignment.value.attr == "module"
            and isinstance(assignment.value.value, ast.Name)
        ):
            return None
        holder = parent(assignment)
        body = next((b for b in _bodies(holder) if any(s is assignment for s in b)), None)
        if body is None:
            return None
        position = next(i for i, s in enumerate(body) if s is assignment)
        wrap_statement = body[position - 1] if position else None
        if not isinstance(wrap_statement, ast.Assign):
            return None
        wrap = self.calls.wrap_of(wrap_statement)
        if (
            wrap is None
            or wrap.target != (assignment.value.value.id,)
            or wrap.source is None
            or len(wrap.source) != 1
        ):
            return None
        top = self.lines[index][0]
        node: ast.AST | None = holder
        while node is not top:
            if not isinstance(node, ast.If):
                return None
            node = parent(node)
        source = wrap.source[0]
        for statement in self.lines[index]:
            for found in ast.walk(statement):
                if not isinstance(found, ast.Name) or found.id != source:
                    continue
                if isinstance(found.ctx, ast.Load) or found is wrap_statement.targets[0]:
                    continue
                if not _identity_move(parent(found)):
                    return None
        return source

    def named_before(self, statement: ast.stmt, name: str, source: str) -> bool:
        """``name = source`` runs before ``statement`` on every path, and neither name is
        rebound in between but by device moves of ``source``: the statements before it in its
        body, then before the ``if``/``with`` that holds that body, and so on up to the
        function (a loop may have rebound them in an earlier iteration: no)."""
        parent = self.view.index.parent
        node: ast.AST = statement
        while True:
            holder = parent(node)
            body = next((b for b in _bodies(holder) if any(s is node for s in b)), None)
            if holder is None or body is None:
                return False
            position = next(i for i, s in enumerate(body) if s is node)
            for earlier in reversed(body[:position]):
                found = _alias_verdict(earlier, name, source)
                if found is not None:
                    return found
            if not isinstance(holder, ast.If | ast.With):
                return False
            node = holder

    def write_conflict(self, skipped: list[int], write: Path, amp_models: set[str]) -> str | None:
        """A skipped line uses what a moved line sets."""
        for index in skipped:
            effect = self.effects[index]
            seen = effect.reads | effect.writes() | effect.wrap_sources
            if len(write) == 1 and write[0] in amp_models:
                # The wrap must wrap the amp-initialised model: that is the point of the move.
                seen -= effect.wrap_sources | effect.wrap_targets
            clash = next((p for p in sorted(seen) if related(p, write)), None)
            if clash is not None:
                return (
                    f"line {self.line(index)} uses `{show(clash)}`, which the statements to "
                    "move set"
                )
        return None

    def wrapped_use_problem(self, line: Line, wraps: list[Wrap]) -> str | None:
        """Uses of a wrapped model that cannot be rewritten to the model it wraps."""
        found = uses(self.view.index, line)
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
        """A use of the wrapped model that the move can turn into a use of the model inside."""
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
        """``call`` is a pure function that gives the same result for the DDP wrapper
        ``wrap.target`` as for the module it wraps (see migrator.analysis.functions)."""
        summary = self.calls.function_summary(call)
        if summary is None:
            return False
        for value in [*call.args, *(k.value for k in call.keywords)]:
            if dotted_path(value) != wrap.target:
                continue
            parameter = summary.parameter_for(call, value)
            if parameter is None or summary.invariance[parameter].problem is not None:
                return False
        return True

    def argument_problem(self, call: ast.Call, wrap: Wrap) -> str | None:
        """Why a pure function may give another result for the DDP wrapper."""
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

    def contains_amp(self, line: Line) -> bool:
        return any(self.calls.is_amp_initialize(node) for node in walk_line(line))


def _bodies(holder: ast.AST | None) -> list[list[ast.stmt]]:
    return [getattr(holder, f) for f in ("body", "orelse", "finalbody") if hasattr(holder, f)]


def _identity_move(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Assign) and EffectsCollector.identity_move(node) is not None


def _alias_verdict(statement: ast.stmt, name: str, source: str) -> bool | None:
    """True when ``statement`` is ``name = source``; False when it may rebind either name
    otherwise (a device move of ``source`` keeps it); None when it touches neither."""
    if (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and statement.targets[0].id == name
        and isinstance(statement.value, ast.Name)
        and statement.value.id == source
    ):
        return True
    for node in ast.walk(statement):
        if isinstance(node, ast.Global | ast.Nonlocal) and {name, source} & set(node.names):
            return False
        if not isinstance(node, ast.Name) or isinstance(node.ctx, ast.Load):
            continue
        if node.id == name or (node.id == source and not _identity_move(statement)):
            return False
    return None
