"""NPU105: add Ascend apex amp (mixed precision) to a training loop that has none (opt-in)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migrator.analysis.index import line_of
from migrator.callargs import remove_arg_objects
from migrator.diagnostics import Severity
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._amp_place import (
    FLAG_OPTIONS,
    CommandLine,
    Placement,
    blockers,
    command_line,
    placement,
)
from migrator.rules.optimizers._amp_steps import (
    Backward,
    Checkpoint,
    Clip,
    Problem,
    TrainingSteps,
    training_steps,
)
from migrator.rules.optimizers._native_amp import SCALER_KNOBS, NativeAmp, native_amp
from migrator.rules.optimizers._planned_amp import picked_by
from migrator.rules.optimizers._plans import AddedAmp
from migrator.rules.optimizers._tables import APEX_HOME, NPU_FUSED

CODE = "NPU105"
LEVELS = ("O1", "O2")
SWITCHES = ("flag", "always")
OPTIONS = ("opt-level", "loss-scale", "switch", "from-native")
SCALED = "scaled_loss"
LINE_LIMIT = 99  # the inserted amp.initialize wraps its arguments beyond this width
NATIVE_AMP = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cuda.amp.autocast_mode.autocast",
        "torch.cpu.amp.autocast",
        "torch.npu.amp.autocast",
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.npu.amp.GradScaler",
        "torch.amp.custom_fwd",
        "torch.amp.custom_bwd",
        "torch.cuda.amp.custom_fwd",
        "torch.cuda.amp.custom_bwd",
    }
)
_NATIVE_LAST = frozenset(name.rpartition(".")[2] for name in NATIVE_AMP)


@dataclass(frozen=True)
class AmpOptions:
    """``[tool.npu-migrate.rules.NPU105]``, validated."""

    level: str = "O2"
    loss_scale: str | float = "dynamic"
    switch: str = "flag"
    from_native: bool = False

    @classmethod
    def read(cls, options: Mapping[str, Any]) -> AmpOptions:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(
                f"unknown option(s) for {CODE}: {', '.join(unknown)} (known: {', '.join(OPTIONS)})"
            )
        level = options.get("opt-level", "O2")
        if level not in LEVELS:
            raise ValueError(
                f'{CODE} option `opt-level` must be "O1" or "O2" (the levels at which Ascend '
                f"apex accepts combine_grad and its fused optimizers), got {level!r}"
            )
        scale = options.get("loss-scale", "dynamic")
        number = isinstance(scale, int | float) and not isinstance(scale, bool)
        if not (scale == "dynamic" or (number and scale > 0)):
            raise ValueError(
                f'{CODE} option `loss-scale` must be "dynamic" or a positive number, got {scale!r}'
            )
        switch = options.get("switch", "flag")
        if switch not in SWITCHES:
            raise ValueError(f'{CODE} option `switch` must be "flag" or "always", got {switch!r}')
        native = options.get("from-native", False)
        if not isinstance(native, bool):
            raise ValueError(f"{CODE} option `from-native` must be true or false, got {native!r}")
        return cls(level, float(scale) if number else "dynamic", switch, native)


class AddApexAmp(Rule):
    """
    ## What it does
    Turns mixed precision on in a training script that has none, the way Ascend's engineers
    do in their hand migrations: `from apex import amp`; `amp.initialize(model, optimizer,
    opt_level=..., loss_scale=..., combine_grad=True)` right after the optimizer is built (and
    after the model's device move, before any other use of model or optimizer, so a checkpoint
    is loaded after it); every `loss.backward()` whose gradients an optimizer steps wrapped in
    `with amp.scale_loss(loss, optimizer) as scaled_loss: scaled_loss.backward()` (keyword
    arguments such as `retain_graph=True` kept; several backwards before one step accumulate);
    gradient clipping of `model.parameters()` between backward and step rewritten to
    `amp.master_params(optimizer)` (under O2 the optimizer steps fp32 master copies). Several
    optimizers (a GAN) go through one call, lists in and lists out, with one loss scaler
    each (`num_losses`, `loss_id`). An `NpuFused*` optimizer of `torch_npu.optim` moves to
    Ascend apex's home, which amp needs.

    Options in `[tool.npu-migrate.rules.NPU105]`: `opt-level` ("O1" or "O2", default "O2"),
    `loss-scale` ("dynamic", the default, or a number), `switch` ("flag", the default: add
    `--amp`, `--opt-level` and `--loss-scale` to the script's argparse parser, amp off unless
    `--amp` is given, as ModelZoo's migrations do; "always": amp on unconditionally),
    `from-native` (false by default; true: convert torch's native amp instead: `autocast`
    regions removed, the `GradScaler`'s settings passed to `amp.initialize`, its `scale` /
    `step` / `update` / `unscale_` / `state_dict` calls mapped, its `enabled=` kept as the
    switch; bfloat16 regions, a dtype or device chosen at run time, `autocast` used as a value,
    `custom_fwd`, and several scalers are reported).

    Reported at their lines, and nothing added to the file: an optimizer or a backward it
    cannot follow, `step(closure)`, an optimizer built in a loop or in several functions,
    gradients changed between backward and step under O2, clipping of parameters other than
    the optimizer's under O2, `torch.compile`, `torch.autograd.grad`, custom autograd
    functions that cast, models cast to half, a model moved to its device after the optimizer
    is used; with `switch = "flag"`, no (or several) argparse parsers, or flags already there.
    A file that already uses apex amp is left alone, and so is one with torch's native amp
    (`autocast`, `GradScaler`), which is reported.

    ## Why
    Ascend's fused optimizers and `combine_grad` exist only under apex amp, and mixed precision
    is the first switch of Ascend's performance guide; ModelZoo's hand migrations of
    pytorch/examples' imagenet add exactly these lines.

    ## Example
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for images, target in loader:
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer = amp.initialize(
        model,
        optimizer,
        enabled=args.amp,
        opt_level=args.opt_level,
        loss_scale=args.loss_scale,
        combine_grad=True,
    )
    for images, target in loader:
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    ```
    with `--amp`, `--opt-level` and `--loss-scale` added to the parser. NPU101, in the same
    run, plans the optimizers for the new `amp.initialize` (see docs/rules-optimizers.md):
    with `switch = "always"` they become `apex.optimizers.NpuFused*`.

    ## Fix safety
    Safe, and opt-in: it changes the training arithmetic (half precision, loss scaling), which
    is what you ask for by selecting it. With `switch = "flag"` a run without `--amp` trains
    exactly as before: `amp.initialize(..., enabled=False)` returns model and optimizer
    untouched and `amp.scale_loss` then hands the loss through. Every backward whose gradients
    reach the optimizers goes through `amp.scale_loss`, or nothing is added: one left out
    would train nothing under O2.
    """

    CODE = CODE
    NAME = "add-apex-amp"
    SUMMARY = "training loop without mixed precision: add Ascend apex amp (opt-in)"
    FIX_SAFETY = FixSafety.SAFE
    OPT_IN = True
    # Every file it changes calls `backward()`.
    TRIGGER = ("backward",)
    # NPU101 gives the optimizers under the new amp.initialize their class in the same run.
    PROVIDES = (AddedAmp,)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        AmpOptions.read(options)

    def check(self) -> None:
        if not self.index.attributes("backward"):
            return  # no training step here (every finding needs one: TRIGGER)
        if self._has_apex_amp():
            return  # already mixed precision: the user's amp, or a previous run's
        config = AmpOptions.read(self.options)
        first_native = self._native_amp()
        native = native_amp(self.view) if first_native is not None else None
        steps = training_steps(self.view, native.scalers if native is not None else frozenset())
        if not steps.setups and not steps.optimizer_problems:
            return  # no training step of an optimizer (built here or elsewhere)
        if first_native is not None and not config.from_native:
            self.report(
                first_native,
                f"this file uses torch's native amp (`{self.view.written(first_native)}`); "
                "NPU105 adds apex amp only to code without mixed precision (`from-native = "
                "true` in [tool.npu-migrate.rules.NPU105] converts native amp to apex amp)",
                Severity.INFO,
            )
            return
        problems = [*steps.problems, *blockers(self.view, steps)]
        if native is not None:
            problems += native.problems
        if problems:
            self._refuse(problems)
            return
        place = placement(self.view, steps)
        if isinstance(place, Problem):
            self._refuse([place])
            return
        flags: CommandLine | None = None
        if native is not None:
            problem = self._native_switch_problem(native, place)
            if problem is not None:
                self._refuse([problem])
                return
        elif config.switch == "flag":
            found = command_line(self.view, place)
            if isinstance(found, Problem):
                self._refuse([found])
                return
            flags = found
        # O2 may run: master weights (a flag chooses the level at run time).
        master = config.level != "O1" or flags is not None
        problems = self._master_weight_problems(steps) if master else []
        for name in (SCALED, "amp"):
            taken = self.index.names(name)
            if taken:
                problems.append(
                    Problem(
                        taken[0],
                        f"the name `{name}` is already used in this file, and NPU105 writes it "
                        "(`from apex import amp`, `as scaled_loss`)",
                    )
                )
        if problems:
            self._refuse(problems)
            return
        _Writer(self, config, steps, place, flags, master, native).write()

    def _native_switch_problem(self, native: NativeAmp, place: Placement) -> Problem | None:
        """The native `enabled=` switch must be computable where amp.initialize goes."""
        if native.enabled is None:
            return None
        for node in ast.walk(native.enabled):
            if isinstance(node, ast.Name) and not _visible_in(self, node.id, place.anchor):
                return Problem(
                    native.enabled,
                    f"the switch `{self.view.written(native.enabled)}` reads `{node.id}`, which "
                    "is not visible where amp.initialize goes (after line "
                    f"{place.anchor.end_lineno})",
                )
        return None

    # -- what the file has ---------------------------------------------------------------------

    def _has_apex_amp(self) -> bool:
        for statement in self.index.imports():
            if isinstance(statement, ast.ImportFrom):
                module = statement.module or ""
                if statement.level:
                    continue
                if module.startswith("apex.amp") or (
                    module == "apex" and any(a.name == "amp" for a in statement.names)
                ):
                    return True
            elif any(
                a.name == "apex.amp" or a.name.startswith("apex.amp.") for a in statement.names
            ):
                return True
        return any(
            self.qualified_name(attribute) == "apex.amp"
            for attribute in self.index.attributes("amp")
            if self.may_name(attribute, {"apex"})
        )

    def _native_amp(self) -> ast.AST | None:
        """The first use of torch's native mixed precision, if any."""
        candidates: list[ast.AST] = []
        for last in _NATIVE_LAST:
            candidates += self.index.attributes(last)
            candidates += self.index.names(last)
        candidates.sort(key=lambda node: (node.lineno, node.col_offset))  # type: ignore[attr-defined]
        for node in candidates:
            parent = self.index.parent(node)
            if isinstance(parent, ast.Attribute | ast.alias):
                continue
            if not self.may_name(node, {"torch"}):
                continue
            if isinstance(self.qualified_name_in(node, NATIVE_AMP), str):
                return node
        return None

    # -- refusing ----------------------------------------------------------------------------

    def _refuse(self, problems: Sequence[Problem]) -> None:
        """Report why amp is not added, each at its line, once per line and reason."""
        seen: set[tuple[int, str]] = set()
        for problem in problems:
            key = (line_of(problem.node), problem.why)
            if key in seen:
                continue
            seen.add(key)
            self.report(problem.node, f"apex amp not added: {problem.why}")

    def _master_weight_problems(self, steps: TrainingSteps) -> list[Problem]:
        """Under O2 the optimizer steps fp32 master copies: gradients of the model's own
        parameters are not the ones it steps."""
        problems: list[Problem] = []
        for clip in steps.clips:
            if not clip.equals_optimizer:
                problems.append(
                    Problem(
                        clip.call,
                        f"under O2 the optimizer steps fp32 master copies, so clipping must "
                        f"use `amp.master_params(optimizer)`, and npu-migrate cannot tell that "
                        f"`{self.view.written(clip.parameters)}` are exactly the parameters of "
                        f"the optimizer stepped next; clip `amp.master_params(...)` by hand",
                    )
                )
        for node in steps.grad_writes:
            problems.append(
                Problem(
                    node,
                    "this changes `.grad` between backward and step: under O2 the optimizer "
                    "steps fp32 master copies whose gradients this does not change; change "
                    "`p.grad` of `amp.master_params(optimizer)` instead (or use opt-level O1)",
                )
            )
        return problems


# -- writing ---------------------------------------------------------------------------------------


class _Writer:
    """Records NPU105's edits for one file, all or none."""

    def __init__(
        self,
        rule: AddApexAmp,
        config: AmpOptions,
        steps: TrainingSteps,
        place: Placement,
        flags: CommandLine | None,
        master: bool,
        native: NativeAmp | None,
    ) -> None:
        self.rule = rule
        self.view = rule.view
        self.config = config
        self.steps = steps
        self.place = place
        self.flags = flags
        self.master = master
        self.native = native
        self.quote = flags.quote if flags is not None else _file_quote(rule)
        # The run-time switch (`enabled=`): the new flag, or native amp's own.
        self.switch: str | None = None
        self.switch_names: set[str] = set()
        if flags is not None:
            self.switch, self.switch_names = f"{flags.args}.amp", {flags.args}
        elif native is not None and native.enabled is not None:
            self.switch = self.view.written(native.enabled)
            self.switch_names = {n.id for n in ast.walk(native.enabled) if isinstance(n, ast.Name)}
        self.optimizers = [setup.target for setup in steps.setups]

    def write(self) -> None:
        sites: list[ast.AST] = [
            self.place.anchor,
            *(backward.call for backward in self.steps.backwards),
            *(clip.call for clip in self.clips),
        ]
        if self.flags is not None:
            sites.append(self.flags.last_add)
        sites += [checkpoint.node for checkpoint in self.steps.checkpoints]
        if self.native is not None:
            sites += [a.statement for a in self.native.autocasts]
            sites += self.native.scaler_uses
            sites += [given for _, given in self.native.passed]
            sites += self.native.parameters
            if self.native.scaler is not None:
                sites.append(self.native.scaler)
        suppressed = [site for site in sites if self.rule.suppressed(site)]
        if suppressed:
            at = self.steps.setups[-1].bindings[-1]
            if not self.rule.suppressed(at):
                self.rule.report(
                    at,
                    f"apex amp not added: line {line_of(suppressed[0])}, which it must change, "
                    "has a `# npu-migrate: ignore` comment",
                    Severity.INFO,
                )
            return
        rule = self.rule
        main = self.steps.setups[-1].bindings[-1]
        rule.fix(main, self._message(), self._insertion(), *self._homes())
        for backward in self.steps.backwards:
            rule.fix(
                backward.call,
                f"`{self.view.written(backward.call)}` runs inside `amp.scale_loss("
                f"{self.view.written(backward.loss)}, {self._stepped(backward)})`",
                rule.replace_statement(backward.statement, self._scaled(backward)),
            )
        for clip in self.clips:
            optimizer = clip.steps[0].spelled
            rule.fix(
                clip.call,
                f"clips `amp.master_params({optimizer})`: under O2 the optimizer steps fp32 "
                f"master copies of `{self.view.written(clip.parameters)}`",
                rule.replace(
                    clip.parameters,
                    _kind(clip.parameters),
                    _expression(f"amp.master_params({optimizer})"),
                ),
            )
        if self.flags is not None:
            rule.fix(
                self.flags.last_add,
                f"added {', '.join(f'`{flag}`' for flag in FLAG_OPTIONS)} to the command line "
                f"(`{self.flags.parser}`): amp is off unless `--amp` is given",
                rule.replace_statement(self.flags.last_add, _after(self._flag_lines())),
            )
        if self.native is not None:
            self._native_edits(self.native)
        saved_by_scaler = self.native is not None and any(
            isinstance(c.func, ast.Attribute) and c.func.attr == "state_dict"
            for c in self.native.scaler_uses
        )
        for checkpoint in [] if saved_by_scaler else self.steps.checkpoints:
            self._checkpoint(checkpoint)
        for call in self.steps.unsaved:
            rule.report(
                call,
                "amp's loss scale is not saved or restored with this optimizer state: keep "
                "`amp.state_dict()` next to it, and `amp.load_state_dict(...)` after "
                "`amp.initialize` when resuming",
                Severity.INFO,
            )
        for wrap in self.place.wraps_before:
            rule.report(
                wrap,
                f"apex's `amp.initialize` (added after line {self.place.anchor.end_lineno}) needs "
                "the model before it is wrapped, and this wrap comes first: NPU203 moves the "
                "optimizer and `amp.initialize` above it when it runs (`--select NPU105,NPU203`) "
                "and can; otherwise move them by hand",
            )
        for call in self.steps.unattributed:
            rule.report(
                call,
                "left outside `amp.scale_loss`: no optimizer steps its gradients in this "
                "function (check that none does elsewhere)",
                Severity.INFO,
            )
        rule.add_import("apex", name="amp")
        constructors = frozenset(id(c) for s in self.steps.setups for c in s.constructors)
        level = None if self.flags is not None else self.config.level
        rule.publish(AddedAmp(self.place.anchor, constructors, level, self.switch))

    def _checkpoint(self, checkpoint: Checkpoint) -> None:
        rule, q = self.rule, self.quote
        guard = None
        if self.switch is not None:
            if not all(_visible_in(rule, name, checkpoint.node) for name in self.switch_names):
                rule.report(
                    checkpoint.node,
                    f"amp's loss scale is not saved or restored here: `{self.switch}` is not "
                    "visible in this function to guard `amp.state_dict()` / "
                    "`amp.load_state_dict(...)`, which fail when amp is off; add them by hand",
                    Severity.INFO,
                )
                return
            guard = self.switch
        if checkpoint.saves and isinstance(checkpoint.node, ast.Dict):
            value = f"amp.state_dict() if {guard} else None" if guard else "amp.state_dict()"
            rule.fix(
                checkpoint.node,
                f"saves amp's loss scale with the optimizer state (`{q}amp{q}: {value}`)",
                rule.replace(checkpoint.node, cst.Dict, _with_entry(f"{q}amp{q}", value)),
            )
        elif checkpoint.saves:
            assert isinstance(checkpoint.node, ast.stmt) and checkpoint.container
            line = f"{checkpoint.container}[{q}amp{q}] = amp.state_dict()"
            if guard:
                line = f"if {guard}:\n    {line}"
            rule.fix(
                checkpoint.node,
                "saves amp's loss scale with the optimizer state",
                rule.replace_statement(checkpoint.node, _after([line])),
            )
        else:
            assert isinstance(checkpoint.node, ast.stmt) and checkpoint.container
            container = checkpoint.container
            test = f"{q}amp{q} in {container}"
            if guard:
                test = f"{guard} and {test}"
            line = f"if {test}:\n    amp.load_state_dict({container}[{q}amp{q}])"
            rule.fix(
                checkpoint.node,
                "restores amp's loss scale after the optimizer state (it runs after "
                "`amp.initialize`, as apex requires)",
                rule.replace_statement(checkpoint.node, _after([line])),
            )

    # -- native amp --------------------------------------------------------------------------------

    def _native_edits(self, native: NativeAmp) -> None:
        rule = self.rule
        for autocast in native.autocasts:
            statement = autocast.statement
            rule.fix(
                statement,
                f"removed `{self.view.written(statement.items[autocast.item].context_expr)}`: "
                "apex amp casts the model's forward itself",
                rule.replace_statement(statement, _without_item(autocast.item)),
            )
        if native.scaler is not None:
            rule.fix(
                native.scaler,
                "removed the GradScaler: `amp.scale_loss` scales the loss"
                + (", `amp.initialize` takes its settings" if native.knobs else ""),
                rule.replace_statement(native.scaler, _removed(self._alone(native.scaler))),
            )
        for call in native.scaler_uses:
            assert isinstance(call.func, ast.Attribute)
            method = call.func.attr
            statement = rule.index.parent(call)
            if method == "scale":
                continue  # the backward around it goes inside amp.scale_loss
            if method == "step":
                optimizer = self.view.written(call.args[0])
                rule.fix(
                    call,
                    f"`{self.view.written(call)}` -> `{optimizer}.step()` (amp skips the step "
                    "after an overflow itself)",
                    rule.replace(call, cst.Call, _stepped_directly),
                )
            elif method in ("update", "unscale_") and isinstance(statement, ast.Expr):
                why = (
                    "amp updates the loss scale at the end of `amp.scale_loss`"
                    if method == "update"
                    else "`amp.scale_loss` unscales the gradients when it ends"
                )
                rule.fix(
                    call,
                    f"removed `{self.view.written(call)}`: {why}",
                    rule.replace_statement(statement, _removed(self._alone(statement))),
                )
            elif method in ("state_dict", "load_state_dict"):
                rule.fix(
                    call,
                    f"`{self.view.written(call.func)}` -> `amp.{method}`: apex amp keeps the loss "
                    "scale",
                    rule.replace(call.func, cst.Attribute, _expression(f"amp.{method}")),
                )

        short = (native.scaler_name or "").rpartition(".")[2]
        for call, given in native.passed:
            rule.fix(
                given,
                f"no longer passes the GradScaler `{short}`, which apex amp replaces",
                rule.replace(call, cst.Call, _without_argument(short)),
            )
        for definition in native.parameters:
            rule.fix(
                definition,
                f"`{definition.name}` no longer takes the GradScaler `{short}`",
                rule.replace_statement(definition, _without_parameter(short)),
            )
        for name in native.imports:
            for binding in rule.index.bindings_of(name):
                statement, alias = binding.node, binding.alias
                if alias is None:
                    continue
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    rule.remove_import_if_unused(statement.module, alias.name, alias.asname)
                elif isinstance(statement, ast.Import) and alias.asname is not None:
                    rule.remove_import_if_unused(alias.name, None, alias.asname)

    def _alone(self, statement: ast.stmt) -> bool:
        parent = self.rule.index.parent(statement)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(s is statement for s in block):
                return len(block) == 1
        return False

    @property
    def clips(self) -> list[Clip]:
        """The clippings to rewrite: under O2 (or the flag) only; O1 has no master copies."""
        return self.steps.clips if self.master else []

    # -- amp.initialize ---------------------------------------------------------------------------

    def _message(self) -> str:
        config = self.config
        if self.native is not None:
            scale = (
                "GradScaler's dynamic loss scaling"
                if self.native.scaler
                else (f"loss scale {config.loss_scale}")
            )
            when = f"when `{self.switch}` holds" if self.switch else "always"
            how = f"in place of torch's native amp, {when}, at {config.level} with {scale}"
        elif self.flags is not None:
            how = (
                f"when `--amp` is given (`enabled={self.switch}`), at `--opt-level` (O2 by "
                f"default) with `--loss-scale` ({config.loss_scale} by default)"
            )
        else:
            how = f"always, at {config.level} with loss scale {config.loss_scale}"
        models, optimizers = _listed(self.steps.models), _listed(self.optimizers)
        return (
            f"added `amp.initialize({models}, {optimizers}, ...)` after line "
            f"{self.place.anchor.end_lineno}: mixed precision {how}, with `combine_grad=True`"
        )

    def _insertion(self) -> Edit:
        statement = self._initialize_statement()
        return self.rule.replace_statement(self.place.anchor, _after([statement]))

    def _initialize_statement(self) -> str:
        models, optimizers = self.steps.models, self.optimizers
        left_models = _listed(models)
        left_optimizers = _listed(optimizers)
        q = self.quote
        if self.native is not None:
            options = [f"enabled={self.switch}"] if self.switch else []
            scale = self.config.loss_scale if self.native.scaler is None else "dynamic"
            options += [
                f"opt_level={q}{self.config.level}{q}",
                f"loss_scale={q}dynamic{q}" if scale == "dynamic" else f"loss_scale={scale!r}",
            ]
            for keyword in SCALER_KNOBS.values():
                if keyword in self.native.knobs:
                    options.append(f"{keyword}={self.view.written(self.native.knobs[keyword])}")
        elif self.flags is not None:
            args = self.flags.args
            options = [
                f"enabled={args}.amp",
                f"opt_level={args}.opt_level",
                f"loss_scale={args}.loss_scale",
            ]
        else:
            scale = self.config.loss_scale
            options = [
                f"opt_level={q}{self.config.level}{q}",
                f"loss_scale={q}dynamic{q}" if scale == "dynamic" else f"loss_scale={scale!r}",
            ]
        options.append("combine_grad=True")
        if len(optimizers) > 1:
            options.append(f"num_losses={len(optimizers)}")
        head = f"{left_models}, {left_optimizers} = amp.initialize("
        arguments = [left_models, left_optimizers, *options]
        # Continuation lines are indented relative to the block (libcst adds its indentation).
        width = len(self.place.indent)
        one_line = f"{head}{', '.join(arguments)})"
        if width + len(one_line) <= LINE_LIMIT:
            return one_line
        middle = "    " + ", ".join(arguments)
        if width + len(middle) <= LINE_LIMIT:
            return f"{head}\n{middle}\n)"
        return head + "\n" + "".join(f"    {a},\n" for a in arguments) + ")"

    def _homes(self) -> list[Edit]:
        """NpuFused optimizers the file already has: Ascend apex's home under amp (with the
        flag: apex's when `--amp` is given, torch_npu's otherwise)."""
        edits: list[Edit] = []
        rule = self.rule
        for setup in self.steps.setups:
            for constructor in setup.constructors:
                name = rule.qualified_name(constructor.func)
                if not (isinstance(name, str) and NPU_FUSED.fullmatch(name)):
                    continue
                short = name.rpartition(".")[2]
                if self.switch is None:
                    if name.startswith(APEX_HOME + "."):
                        continue
                    new = f"{APEX_HOME}.{short}"
                else:
                    new = picked_by(self.switch, True, short)
                    rule.add_import("torch_npu", after="torch")
                rule.add_import("apex", after="apex")
                edits.append(
                    rule.replace(constructor.func, _kind(constructor.func), _expression(new))
                )
                self._release_import(constructor.func)
        return edits

    def _release_import(self, func: ast.expr) -> None:
        if not isinstance(func, ast.Name):
            return
        for binding in self.rule.index.bindings_of(func):
            statement = binding.node
            if isinstance(statement, ast.ImportFrom) and statement.module and binding.alias:
                self.rule.remove_import_if_unused(
                    statement.module, binding.alias.name, binding.alias.asname
                )

    # -- backwards ------------------------------------------------------------------------------

    def _stepped(self, backward: Backward) -> str:
        spelled = [step.spelled for step in backward.steps]
        return spelled[0] if len(spelled) == 1 else f"[{', '.join(spelled)}]"

    def _scaled(self, backward: Backward) -> Callable[[cst.SimpleStatementLine], cst.With]:
        optimizers = self._stepped(backward)
        from_scaler = backward.loss is not backward.call.func.value  # type: ignore[attr-defined]
        extra = ""
        if len(self.optimizers) > 1:
            first = backward.steps[0].setup.target
            extra = f", loss_id={self.optimizers.index(first)}"

        def wrap(line: cst.SimpleStatementLine) -> cst.With:
            expression = line.body[0]
            assert isinstance(expression, cst.Expr) and isinstance(expression.value, cst.Call)
            call = expression.value
            assert isinstance(call.func, cst.Attribute)
            loss = call.func.value
            if from_scaler:  # scaler.scale(loss).backward()
                assert isinstance(loss, cst.Call)
                loss = loss.args[0].value
            if getattr(loss, "lpar", None):
                loss = loss.with_changes(lpar=[], rpar=[])
            scale = cst.parse_expression(f"amp.scale_loss(_, {optimizers}{extra})")
            assert isinstance(scale, cst.Call)
            scale = scale.with_changes(
                args=[scale.args[0].with_changes(value=loss), *scale.args[1:]]
            )
            inner_call = call.with_changes(func=call.func.with_changes(value=cst.Name(SCALED)))
            inner = line.with_changes(
                body=[expression.with_changes(value=inner_call)], leading_lines=[]
            )
            return cst.With(
                items=[cst.WithItem(scale, asname=cst.AsName(cst.Name(SCALED)))],
                body=cst.IndentedBlock([inner]),
                leading_lines=line.leading_lines,
            )

        return wrap

    # -- the command line ------------------------------------------------------------------------

    def _flag_lines(self) -> list[str]:
        assert self.flags is not None
        parser, q = self.flags.parser, self.quote
        scale = self.config.loss_scale
        default = "dynamic" if scale == "dynamic" else repr(scale)
        return [
            f"{parser}.add_argument({q}--amp{q}, action={q}store_true{q}, "
            f"help={q}mixed precision (Ascend apex amp){q})",
            f"{parser}.add_argument({q}--opt-level{q}, default={q}{self.config.level}{q}, "
            f"choices=[{q}O1{q}, {q}O2{q}], help={q}amp opt_level{q})",
            f"{parser}.add_argument({q}--loss-scale{q}, default={q}{default}{q}, "
            f"help={q}amp loss scale (dynamic or a number){q})",
        ]


def _visible_in(rule: Rule, name: str, node: ast.AST) -> bool:
    """Whether ``name`` is bound where ``node`` is (a parameter, a local or a global)."""
    if not name:
        return False
    for ancestor in rule.index.ancestors(node):
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = ancestor.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            if any(a.arg == name for a in every):
                return True
            break
    return bool(rule.index.scope_of(node).lookup(name))


def _with_entry(key: str, value: str) -> Callable[[cst.Dict], cst.Dict]:
    """A dict display with ``key: value`` added last, in the display's own layout."""

    def change(node: cst.Dict) -> cst.Dict:
        elements = list(node.elements)
        entry = cst.DictElement(cst.parse_expression(key), cst.parse_expression(value))
        if not elements:
            return node.with_changes(elements=[entry])
        between: cst.BaseParenthesizableWhitespace = cst.SimpleWhitespace(" ")
        if len(elements) >= 2 and isinstance(elements[-2].comma, cst.Comma):
            after = elements[-2].comma.whitespace_after
            if isinstance(after, cst.ParenthesizedWhitespace):
                between = after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())
            else:
                between = after
        last = elements[-1]
        if isinstance(last.comma, cst.Comma):
            entry = entry.with_changes(comma=last.comma)
        elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=between))
        return node.with_changes(elements=[*elements, entry])

    return change


def _removed(alone: bool) -> Callable[[Any], Any]:
    """Drop a statement (``pass`` when it is all its block holds)."""

    def remove(node: Any) -> Any:
        if alone:
            return cst.SimpleStatementLine(
                [cst.Pass()], leading_lines=getattr(node, "leading_lines", ())
            )
        return cst.RemovalSentinel.REMOVE

    return remove


def _without_argument(name: str) -> Callable[[cst.Call], cst.Call]:
    """A call without the argument that passes ``name`` (``name`` or ``name=name``)."""

    def change(call: cst.Call) -> cst.Call:
        doomed = [
            arg
            for arg in call.args
            if (arg.keyword is not None and arg.keyword.value == name)
            or (arg.keyword is None and isinstance(arg.value, cst.Name) and arg.value.value == name)
        ]
        return remove_arg_objects(call, doomed[-1:])

    return change


def _without_parameter(name: str) -> Callable[[cst.FunctionDef], cst.FunctionDef]:
    """A function without its parameter ``name``."""

    def change(node: cst.FunctionDef) -> cst.FunctionDef:
        parameters = node.params
        for field_name in ("params", "kwonly_params"):
            group = list(getattr(parameters, field_name))
            kept = [p for p in group if p.name.value != name]
            if len(kept) == len(group):
                continue
            if kept and group[-1].name.value == name:
                kept[-1] = kept[-1].with_changes(comma=group[-1].comma)
            parameters = parameters.with_changes(**{field_name: kept})
        return node.with_changes(params=parameters)

    return change


def _stepped_directly(call: cst.Call) -> cst.Call:
    """``scaler.step(optimizer)`` -> ``optimizer.step()``."""
    optimizer = call.args[0].value
    return cst.Call(func=cst.Attribute(value=optimizer, attr=cst.Name("step")))


def _without_item(position: int) -> Callable[[cst.With], Any]:
    """A ``with`` statement without its item at ``position``; with no item left, its body in
    its place (comments on the ``with`` line and above it stay above the body)."""

    def change(node: cst.With) -> Any:
        items = list(node.items)
        if len(items) > 1:
            del items[position]
            items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return node.with_changes(items=items)
        body = node.body
        assert isinstance(body, cst.IndentedBlock)
        statements = list(body.body)
        kept_lines = list(node.leading_lines)
        header = body.header
        if header.comment is not None:
            kept_lines.append(cst.EmptyLine(comment=header.comment))
        first = statements[0]
        statements[0] = first.with_changes(
            leading_lines=[*kept_lines, *getattr(first, "leading_lines", ())]
        )
        return cst.FlattenSentinel(statements)

    return change


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"[{', '.join(items)}]"


def _after(lines: Sequence[str]) -> Callable[[Any], Any]:
    """A statement change that keeps the statement and adds ``lines`` after it."""

    def insert(node: Any) -> Any:
        added = [cst.parse_statement(line + "\n") for line in lines]
        return cst.FlattenSentinel([node, *added])

    return insert


def _expression(code: str) -> Callable[[Any], cst.BaseExpression]:
    return lambda node: cst.parse_expression(code)


# The libcst node class (by name: libcst is imported only when a file is rewritten) that spans
# what an ``ast`` node of each kind spans.
_KINDS: dict[type[ast.AST], str] = {
    ast.Name: "Name",
    ast.Attribute: "Attribute",
    ast.Call: "Call",
    ast.Subscript: "Subscript",
    ast.List: "List",
    ast.Tuple: "Tuple",
    ast.ListComp: "ListComp",
    ast.GeneratorExp: "GeneratorExp",
}


def _kind(node: ast.expr) -> type[cst.CSTNode]:
    """The libcst node type that spans what ``node`` spans."""
    kind: type[cst.CSTNode] = getattr(cst, _KINDS[type(node)])
    return kind


def _file_quote(rule: Rule) -> str:
    """The quote most string literals of the file use."""
    counts = {"'": 0, '"': 0}
    for node in rule.index.nodes(ast.Constant):
        if isinstance(node.value, str):
            quote = rule.code(node).lstrip("rRbBuUfF")[:1]
            if quote in counts:
                counts[quote] += 1
    return "'" if counts["'"] > counts['"'] else '"'
