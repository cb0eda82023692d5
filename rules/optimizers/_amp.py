"""What one ``amp.initialize`` call asks for, with NPU102's opt-level switch applied. Not a rule."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from migrator.analysis.calls import NOT_LITERAL, Argument, argument, has_star, literal_value
from migrator.analysis.flow import ENTRY
from migrator.analysis.index import line_of
from migrator.analysis.origins import reaching_definitions
from migrator.analysis.view import FileView
from migrator.rules.optimizers._flow import OptimizerFlow
from migrator.rules.optimizers._tables import (
    _O1_O2_ONLY,
    _O1_ONLY,
    _O1_REFUSES,
    AMP_POSITIONS,
    DEFAULT_OPT_LEVEL,
    FUSED_LEVELS,
    OPT_LEVELS,
)


@dataclass(frozen=True)
class AmpOptions:
    """What one ``amp.initialize`` call asks for, as far as it can be read from the code, with
    NPU102's ``opt-level`` switch applied where NPU102 will apply it.

    ``level`` is the opt level the call runs with (``None``: computed at run time, ``level_code``
    says how, or hidden in ``**kwargs``); ``written_level`` the literal level as written (the
    default O1 when absent); ``switch`` the level NPU102 sets, when it changes the call, and
    ``switch_blocker`` why it does not, when the option asks for one it cannot set.

    A level computed in the module is followed over every arm the analysis sees
    (:func:`level_arms`): ``amp_opt_level = 'O1' if fp16 else 'O0'``, an ``if``/``else`` that
    assigns it, the default of an ``--opt-level`` command-line option. Where one arm is a level
    Ascend apex refuses NPU fused optimizers at (O0, O3), ``level`` is that one and
    ``level_path`` says when it is taken: the call is planned as if that level were written,
    because that path must keep running. Where every arm is the same level, that is ``level``.
    """

    call: ast.Call
    level: str | None
    level_code: str | None
    written_level: str | None
    master_weights: object  # a literal value, NOT_LITERAL, or None when not passed
    master_code: str | None
    enabled: object  # a literal value, NOT_LITERAL, or True when not passed
    enabled_code: str | None
    starred: bool
    switch: str | None = None
    switch_blocker: str | None = None
    level_path: str | None = None  # when a computed level takes the refusing value
    level_line: int | None = None  # where that value is written
    arms_fused: bool = False  # a computed level whose every arm is O1 or O2

    def level_shown(self, path: str | None = None) -> str:
        """The level for a message: "'O0'", or "'O0' on one path: ... (line 46)" for a computed
        one (``path``: the file, for a message about another file)."""
        shown = repr(self.level)
        if self.level_path is None:
            return shown
        where = f"{path}:{self.level_line}" if path else f"line {self.level_line}"
        return f"{shown} on one path: {self.level_path} ({where})"

    @property
    def disabled(self) -> bool:
        """``enabled=False``: amp.initialize returns its arguments untouched."""
        return self.enabled is False

    def refuses_fused(self, path: str | None = None) -> str | None:
        """Why Ascend apex refuses an NPU fused optimizer (either home) here, or None
        (``path``: the call's file, for a message about another file)."""
        if self.disabled or self.level is None:
            return None
        if self.level not in FUSED_LEVELS:
            return (
                f"Ascend apex refuses NPU fused optimizers (from `apex.optimizers` and "
                f"`torch_npu.optim` alike) unless opt_level is O1 or O2, and this call uses "
                f"{self.level_shown(path)}"
            )
        if self.level == "O2" and self.master_weights is False:
            return (
                "with opt_level O2 Ascend apex needs master weights for NPU fused optimizers, "
                "and this call sets `master_weights=False`"
            )
        return None

    def run_time_notes(self, with_enabled: bool = True) -> list[str]:
        """What must hold at run time for an NPU fused optimizer to be accepted here; without
        the note on a run-time ``enabled=`` when the caller reports that on its own."""
        if self.disabled:
            return []
        if self.starred and self.level is None:
            return [
                "the arguments passed with `**` must select opt_level O1 or O2 (and master "
                "weights with O2), which Ascend apex requires for NPU fused optimizers"
            ]
        notes: list[str] = []
        if self.enabled is NOT_LITERAL and with_enabled:
            notes.append(
                f"warning: `{self.enabled_code}` decides at run time whether amp is enabled, and "
                "with amp disabled Ascend apex's fused optimizers refuse to step: use the "
                "`torch_npu.optim` version on that path"
            )
        if self.level is None and not self.arms_fused:
            notes.append(
                f"`{self.level_code}` must be O1 or O2 at run time, the levels at which Ascend "
                "apex accepts NPU fused optimizers"
            )
        if self.level in ("O2", None) and self.master_weights is NOT_LITERAL:
            notes.append(
                "with opt_level O2, NPU fused optimizers need master weights: "
                f"`{self.master_code}` must not be False at run time"
            )
        return notes


def amp_options(view: FileView, call: ast.Call, requested: str | None) -> AmpOptions:
    """The options of the ``amp.initialize`` call ``call`` when NPU102's ``opt-level`` switch
    asks for ``requested`` (None: no switch); kept per file, call and level."""
    return view.memo(("amp-options", id(call), requested), lambda: _read(view, call, requested))


def _read(view: FileView, call: ast.Call, requested: str | None) -> AmpOptions:
    options = _written_amp_options(view, call)
    if requested is None or (requested == options.written_level and not options.starred):
        return options
    blocker = _switch_blocker(view, call, options, requested)
    if blocker is not None:
        return replace(options, switch_blocker=blocker)
    return replace(options, level=requested, switch=requested)


def _written_amp_options(view: FileView, call: ast.Call) -> AmpOptions:
    starred = has_star(call)
    level_arg = _amp_argument(call, "opt_level")
    written = DEFAULT_OPT_LEVEL if level_arg is None else literal_value(level_arg.value)
    written_level = written if isinstance(written, str) else None
    level_code = view.written(level_arg.value) if level_arg is not None else None
    level = None if starred and level_arg is None else written_level
    level_path: str | None = None
    level_line: int | None = None
    arms_fused = False
    if level_arg is not None and written_level is None:
        arms = level_arms(view, call, level_arg.value)
        arms_fused = all(arm.level in FUSED_LEVELS for arm in arms)
        level, level_path, level_line = _computed_level(view, arms, level_arg.value)
    master = _amp_argument(call, "master_weights")
    enabled = _amp_argument(call, "enabled")
    return AmpOptions(
        call=call,
        level=level,
        level_path=level_path,
        level_line=level_line,
        arms_fused=arms_fused,
        level_code=level_code,
        written_level=written_level,
        master_weights=literal_value(master.value) if master is not None else None,
        master_code=view.written(master.value) if master is not None else None,
        enabled=literal_value(enabled.value) if enabled is not None else True,
        enabled_code=view.written(enabled.value) if enabled is not None else None,
        starred=starred,
    )


def _amp_argument(call: ast.Call, name: str) -> Argument | None:
    return argument(call, name, AMP_POSITIONS.get(name))


def _switch_blocker(
    view: FileView, call: ast.Call, options: AmpOptions, requested: str
) -> str | None:
    """Why NPU102 cannot set ``opt_level=requested`` on ``call``, or None."""
    if options.starred:
        return "arguments passed with `*`/`**` may set `opt_level` themselves"
    if options.written_level is None:
        return f"its level is computed at run time (`{options.level_code}`)"
    if options.written_level not in OPT_LEVELS:
        return f"it passes {options.written_level!r}, which is not an opt level"
    conflicts: list[str] = []
    for name in AMP_POSITIONS:
        arg = _amp_argument(call, name)
        if arg is None:
            continue
        value = literal_value(arg.value)
        if value is None or value is False:
            continue
        written = f"`{name}={view.written(arg.value)}`"
        if requested == "O1" and name in _O1_REFUSES:
            conflicts.append(f"{written} (Ascend apex refuses it with O1)")
        elif requested != "O1" and name in _O1_ONLY:
            conflicts.append(f"{written} (only allowed with O1)")
        elif requested not in FUSED_LEVELS and name in _O1_O2_ONLY:
            conflicts.append(f"{written} (only allowed with O1 or O2)")
        elif requested == "O2" and name == "master_weights" and value is not True:
            conflicts.append(f"{written} (NPU fused optimizers need master weights with O2)")
    if requested == "O2" and options.master_weights is False:
        conflicts = conflicts or ["`master_weights=False` (NPU fused optimizers need them)"]
    if conflicts:
        return f"the call also passes {', '.join(conflicts)}"
    return None


# -- computed levels ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelArm:
    """One value an ``opt_level`` expression may take: ``level`` (None: not known before run
    time), ``when`` it is taken ("" for always), and the line where it is written."""

    level: str | None
    when: str
    line: int


_MAX_DEPTH = 4  # names followed through names


def _computed_level(
    view: FileView, arms: list[LevelArm], value: ast.expr
) -> tuple[str | None, str | None, int | None]:
    """The level to plan for when ``opt_level=value`` is computed and takes ``arms``, the path
    it is taken on and the line where it is written (see :class:`AmpOptions`); Nones when the
    arms do not settle it."""
    code = view.written(value)
    for arm in arms:
        if arm.level is not None and arm.level not in FUSED_LEVELS:
            when = f" {arm.when}" if arm.when else ""
            return arm.level, f"`{code}` is {arm.level!r}{when}", arm.line
    levels = {arm.level for arm in arms}
    if len(levels) == 1 and None not in levels:
        return arms[0].level, None, None
    return None, None, None


def level_arms(view: FileView, call: ast.Call, value: ast.expr, depth: int = 0) -> list[LevelArm]:
    """The values ``value`` (the ``opt_level`` of the ``amp.initialize`` ``call``) may take,
    over every arm the module shows: literals, both sides of a conditional expression, the
    assignments of a name that reach the call (each under its ``if``), the default of the
    command-line option an ``args.<name>`` comes from. An arm that cannot be read is one with
    level None."""
    line = line_of(value)
    literal = literal_value(value)
    if isinstance(literal, str):
        return [LevelArm(literal, "", line)]
    if depth == 0:
        tested = _tested_levels(view, call, value)
        if tested is not None:
            return tested
    if depth > _MAX_DEPTH:
        return [LevelArm(None, "", line)]
    if isinstance(value, ast.IfExp):
        test = view.written(value.test)
        return [
            *_under(level_arms(view, call, value.body, depth + 1), f"when `{test}` holds"),
            *_under(level_arms(view, call, value.orelse, depth + 1), f"when `{test}` is false"),
        ]
    if isinstance(value, ast.Name):
        return _name_arms(view, call, value, depth)
    if isinstance(value, ast.Subscript):
        table = _dict_literal(view, value.value)
        if table is not None:
            key = view.written(value.slice)
            arms: list[LevelArm] = []
            for entry, item in zip(table.keys, table.values, strict=True):
                if entry is None:
                    return [LevelArm(None, "", line)]  # `**other`: more entries than shown
                when = f"when `{key}` is {view.written(entry)}"
                arms += _under(level_arms(view, call, item, depth + 1), when)
            return arms
    if isinstance(value, ast.Attribute):
        default = _option_default(view, value.attr)
        if default is not None:
            option, written, default_line = default
            passed = LevelArm(None, "", line)  # what the command line passes instead
            if not written and OptimizerFlow.of(view).truthy_at(call, view.written(value)):
                return [passed]  # `if args.fp16:` keeps the empty default away from the call
            return [LevelArm(written, f"by default (`{option}`)", default_line), passed]
    return [LevelArm(None, "", line)]


def _tested_levels(view: FileView, call: ast.Call, value: ast.expr) -> list[LevelArm] | None:
    """The levels ``value`` can have at ``call`` when an enclosing `if` of its function
    compares that same expression with literal levels (``if args.opt_level == 'O0':``,
    ``elif level in ('O1', 'O2'):``, the ``else`` of ``!=``; see
    :meth:`~migrator.rules.optimizers._flow.OptimizerFlow.tested`); None when no test pins it,
    or when the test lets through levels that Ascend apex refuses NPU fused optimizers at along
    with levels it accepts them at (ESPnet's ``if args.train_dtype in ("O0", "O1", "O2",
    "O3"):`` says no more than a level chosen at run time)."""
    tested = OptimizerFlow.of(view).tested(call, view.written(value))
    if tested is None or not all(isinstance(level, str) for level in tested.values):
        return None
    if len({level in FUSED_LEVELS for level in tested.values}) > 1:
        return None
    return [LevelArm(str(level), tested.when, tested.line) for level in tested.values]


def _dict_literal(view: FileView, node: ast.expr) -> ast.Dict | None:
    """``{"fp32": "O0", "fp16": "O1"}``, written in place or bound once to the name ``node``."""
    if isinstance(node, ast.Dict):
        return node
    if not isinstance(node, ast.Name):
        return None
    definitions = reaching_definitions(view).of_name(node)
    statement: ast.AST | None = None
    if definitions is None:  # a global read in a function: its one binding, if it has one
        bindings = view.index.bindings_of(node)
        statement = bindings[0].statement if len(bindings) == 1 else None
    elif len(definitions) == 1 and definitions[0] is not ENTRY:
        statement = view.index.parent(definitions[0])
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Dict):
        return statement.value
    return None


def _under(arms: list[LevelArm], condition: str) -> list[LevelArm]:
    return [LevelArm(arm.level, arm.when or condition, arm.line) for arm in arms]


def _name_arms(view: FileView, call: ast.Call, name: ast.Name, depth: int) -> list[LevelArm]:
    flow = OptimizerFlow.of(view)
    definitions = reaching_definitions(view).of_name(name)
    if not definitions:
        return [LevelArm(None, "", line_of(name))]
    arms: list[LevelArm] = []
    for definition in definitions:
        statement = view.index.parent(definition) if definition is not ENTRY else None
        if not (
            isinstance(statement, ast.Assign | ast.AnnAssign)
            and statement.value is not None
            and (
                statement.targets == [definition]
                if isinstance(statement, ast.Assign)
                else statement.target is definition
            )
        ):
            arms.append(LevelArm(None, "", line_of(name)))
            continue
        found = level_arms(view, call, statement.value, depth + 1)
        guard = flow.guard_only_for(statement, call)
        if guard is not None:
            test, in_body = guard
            found = _under(found, f"when `{test}` {'holds' if in_body else 'is false'}")
        arms.extend(found)
    return arms


def _option_default(view: FileView, dest: str) -> tuple[str, str, int] | None:
    """``parser.add_argument("--opt-level", default="O0")`` for ``args.<dest>``: the option as
    written, its literal string default and its line."""
    for attribute in view.index.attributes("add_argument"):
        call = view.index.parent(attribute)
        if not isinstance(call, ast.Call) or call.func is not attribute:
            continue
        options = [literal_value(arg) for arg in call.args]
        strings = [option for option in options if isinstance(option, str)]
        keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
        target = literal_value(keywords["dest"]) if "dest" in keywords else None
        if target is None:
            longs = [option for option in strings if option.startswith("--")]
            chosen = longs[0] if longs else (strings[0] if strings else "")
            target = chosen.lstrip("-").replace("-", "_")
        if target != dest or "default" not in keywords:
            continue
        default = literal_value(keywords["default"])
        if isinstance(default, str):
            return (strings[0] if strings else dest), default, call.lineno
    return None
