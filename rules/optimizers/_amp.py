"""What one ``amp.initialize`` call asks for, with NPU102's opt-level switch applied. Not a rule."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from migrator.analysis.calls import NOT_LITERAL, Argument, argument, has_star, literal_value
from migrator.analysis.view import FileView
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

    @property
    def disabled(self) -> bool:
        """``enabled=False``: amp.initialize returns its arguments untouched."""
        return self.enabled is False

    def refuses_fused(self) -> str | None:
        """Why Ascend apex refuses an NPU fused optimizer (either home) here, or None."""
        if self.disabled or self.level is None:
            return None
        if self.level not in FUSED_LEVELS:
            return (
                f"Ascend apex refuses NPU fused optimizers (from `apex.optimizers` and "
                f"`torch_npu.optim` alike) unless opt_level is O1 or O2, and this call uses "
                f"{self.level!r}"
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
        if self.level is None:
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
    master = _amp_argument(call, "master_weights")
    enabled = _amp_argument(call, "enabled")
    return AmpOptions(
        call=call,
        level=None if starred and level_arg is None else written_level,
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
