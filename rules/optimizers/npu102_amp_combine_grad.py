"""NPU102: `amp.initialize(...)` without `combine_grad=True` where its optimizers allow it."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from migrator.analysis.calls import NOT_LITERAL, argument, has_star, literal_value
from migrator.analysis.clipping import class_of
from migrator.analysis.index import ModuleIndex, line_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.scopes import BindingKind
from migrator.callargs import append_arg, keyword
from migrator.callargs import argument as find_argument
from migrator.diagnostics import Severity
from migrator.edits import Change
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._amp import AmpOptions, amp_options
from migrator.rules.optimizers._factories import (
    KEY,
    OptimizerFactories,
    factory_verdict,
    own_helper,
)
from migrator.rules.optimizers._flow import AmpSink, OptimizerFlow, fused_name
from migrator.rules.optimizers._plans import (
    CombinableUnfused,
    Fp16Rewrite,
    Fp16Rewrites,
    FusedPlans,
    FusedSwaps,
    OptLevelSwitch,
    planned,
    planned_lookups,
    switched_level,
)
from migrator.rules.optimizers._tables import (
    AMP_POSITIONS,
    APEX_HOME,
    FUSED_LEVELS,
    KNOWN_OPTIMIZERS,
    NO_FUSED_ROOTS,
    NO_FUSED_VERSION,
    NPU1_ROOTS,
    TORCH_NPU_HOME,
    requested_opt_level,
)
from migrator.settings import Settings


class AmpCombineGrad(OptimizerFactories, Rule):
    """
    ## What it does
    Adds `combine_grad=True` to `apex.amp.initialize(...)` calls (any alias; keyword, positional
    or list-form optimizers; `amp_inits = amp.initialize(...)`) whose optimizers are all Ascend
    apex's NPU fused optimizers (`apex.optimizers.NpuFused*`), built in the same
    module (in program order: `model, optimizer = amp_inits` after the call does not count) or
    returned by a function of another module of the run (`create_optimizer(args, model)` from
    `utils/optim.py`, which NPU101 rewrites there; the message names it). In a helper of the
    module that takes the optimizer as a parameter (`def setup(model, optimizer)`, a class's
    `__init__`), the parameter stands for what the module's calls pass there when no other
    file of the run contains the helper's name, the module only calls it (never hands it on as
    a value) and every call passes the parameter. An
    explicit `combine_grad=` is kept as written. Reported, not added, for
    `torch_npu.optim.NpuFused*` optimizers: they pack their gradients into a flat buffer of
    their own at their first step, and Ascend apex's amp sets the gradients of any optimizer but
    its own fused ones to None before each backward, so under apex amp they step stale
    gradients (NPU101 picks `apex.optimizers` or the class by amp's condition instead). Not
    added, and reported, when the literal
    `opt_level` is O0 or O3 or when O2 is combined with `master_weights=False`, which Ascend apex
    rejects, and when one arm of a level computed in the module is O0 or O3 (`'O1' if fp16 else
    'O0'`: the default run must keep working); added with a note when `opt_level` is not a
    literal and its arms cannot all be read. Every other call given
    optimizers that gets no `combine_grad=True` says why at its line (optimizers not NPU fused or
    not traceable, `enabled=False`, `**kwargs`; for a factory: outside the run, an ambiguous
    import or module, a returned value it cannot follow, a constructor left unfused). The
    `amp.initialize` NPU106 writes in place of `FP16_Optimizer(...)` gets `combine_grad=True`
    when NPU101 makes the wrapped optimizer Ascend apex's fused one in the same run.

    Optimizers NPU101 leaves unfused (AMSGrad, `maximize`, Hugging Face's AdamW, an
    `amp.initialize` under a condition NPU101 cannot pick the class by) get combined gradients
    too when NPU101 shows that nothing detaches them: Ascend apex packs the gradients of any
    optimizer it is given (its guide's example is `torch.optim.SGD` with `combine_grad=True`)
    and makes `nn.Module.zero_grad` zero in place while it does. That is: torch's classes or
    Hugging Face's AdamW, built in the module with every argument written out, not returned to
    or called from other modules; a module that sets no `requires_grad` and adds no parameter
    group (a parameter that first gets a gradient after the first `scale_loss` stays out of the
    buffers); parameters neither sharded nor re-allocated; no `.grad` store and no `zero_grad`
    that sets gradients to None in the functions that build, step or zero it, but a module's
    default `zero_grad()` on a model that feeds it. Anything else is reported with the
    optimizer's line.

    An optimizer passed as one value (`optimizer`, `self.optimizer`) that is an NPU fused one
    on some paths only (its class mapped by NPU101 at run time with a class left out, fused in
    one arm of an `if` and not in another) or built out of sight (a helper's parameter, a
    factory outside the run) gets `combine_grad=getattr(optimizer, "is_npu_fused_optimizer",
    False)`: Ascend apex's fused classes carry that flag, which its own `amp.initialize`
    reads, so the gradients are combined exactly when the optimizer is fused and left as
    written otherwise (a false `combine_grad` is accepted at every opt level). Several such
    optimizers in a list, and constructions seen to build no NPU fused optimizer, stay
    reported.

    Option `opt-level` (`[tool.npu-migrate.rules.NPU102] opt-level = "O2"`, one of O0-O3): sets
    that `opt_level` on every `apex.amp.initialize` it can see, keeping the quotes of the literal
    it replaces; NPU101 and this rule then plan the optimizers' home and `combine_grad` for that
    level. Reported, not applied, where the level is computed at run time or may come from
    `**kwargs`, and where the call passes options Ascend apex refuses with the new level
    (`master_weights`/`keep_batchnorm_fp32`/`cast_model_type` with O1, `master_weights=False`
    with O2, `combine_grad` with O0/O3, O1-only options with another level).

    ## Why
    With `combine_grad=True`, Ascend apex packs the gradients into flat buffers, so unscaling,
    the overflow check and `zero_grad` run once per buffer instead of once per tensor, and the
    fused optimizers update those buffers directly.

    ## Example
    ```python
    optimizer = apex.optimizers.NpuFusedSGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2", loss_scale=32.0)
    ```

    ## Use instead
    ```python
    optimizer = apex.optimizers.NpuFusedSGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O2", loss_scale=32.0, combine_grad=True
    )
    ```
    (the keyword goes on the line style the call already uses).

    ## Fix safety
    Safe: the gradients keep their values; only their storage changes. Code that replaces
    `param.grad` tensors or calls `zero_grad(set_to_none=True)` after the first step detaches
    gradients from the buffers: check such code by hand. The `opt-level` switch changes the
    precision the model trains in: it is applied only because you asked for it.
    """

    CODE = "NPU102"
    NAME = "amp-combine-grad"
    SUMMARY = "`amp.initialize(...)` without `combine_grad=True` where its optimizers allow it"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("initialize", "FP16_Optimizer")  # NPU106 turns the latter into the former
    RUN_PLANS = (OptLevelSwitch,)
    # Optimizers that NPU101 rewrites count as NPU fused ones; factories of other modules are
    # judged as NPU101 leaves them when it runs; NPU106's new amp.initialize calls get
    # combine_grad when NPU101 fuses the optimizer they wrap.
    READS = (FusedPlans, FusedSwaps, OptLevelSwitch, Fp16Rewrites, CombinableUnfused)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        requested_opt_level(options)

    @classmethod
    def run_plans(cls, settings: Settings) -> tuple[object, ...]:
        level = requested_opt_level(settings.options_for(cls.CODE))
        return (OptLevelSwitch(level),) if level is not None else ()

    def check(self) -> None:
        self.flow = OptimizerFlow.of(self.view)
        requested = requested_opt_level(self.options)
        switch = f' and set `opt_level="{requested}"`' if requested is not None else ""
        for call, ambiguous in self.flow.ambiguous_amp:
            self.report(
                call,
                f"cannot tell whether this is `apex.amp.initialize`: {ambiguous.describe()}; "
                "if it is and its optimizers are NPU fused ones, add `combine_grad=True`"
                f"{switch} by hand",
            )
        for sink in self.flow.amp_sinks:
            self._switch_opt_level(sink.call)
            self._examine(sink)
        fp16 = self.read_plan(Fp16Rewrites)
        for rewrite in fp16.by_wrapper.values() if fp16 is not None else ():
            self._combine_fp16(rewrite)

    # -- the opt-level switch ------------------------------------------------------------------

    def _switch_opt_level(self, call: ast.Call) -> None:
        """``opt-level`` in the rule's options: set it on the call, or say why not."""
        options = amp_options(self.view, call, switched_level(self))
        requested = requested_opt_level(self.options)
        if options.switch_blocker is not None:
            self.report(
                call,
                f'`opt-level = "{requested}"` (from [tool.npu-migrate.rules.NPU102]) is not '
                f"applied here: {options.switch_blocker}; set the level by hand",
            )
            return
        if options.switch is None:
            return
        level = options.switch
        arg = argument(call, "opt_level", AMP_POSITIONS["opt_level"])
        was = f"was {options.written_level!r}" if arg is not None else "was the default 'O1'"
        self.fix(
            call,
            f'set `opt_level="{level}"` ({was}), as `opt-level` in '
            "[tool.npu-migrate.rules.NPU102] asks",
            self.replace(call, cst.Call, _set_opt_level(level)),
        )

    # -- combine_grad ----------------------------------------------------------------------------

    def _combine_fp16(self, rewrite: Fp16Rewrite) -> None:
        """NPU106 turns the ``FP16_Optimizer(...)`` call into ``amp.initialize(...,
        opt_level="O2")`` (master weights by default): ``combine_grad=True`` goes on it when
        NPU101 makes the wrapped optimizer Ascend apex's fused one (NPU106 adds it itself for
        an optimizer written NPU fused)."""
        plan = planned(self).get(id(rewrite.inner))
        if plan is None or not plan.qualified_target.startswith(APEX_HOME + "."):
            return
        self.fix(
            rewrite.wrapper,
            "added `combine_grad=True` to the `amp.initialize` NPU106 writes here: the "
            f"gradients of `{plan.qualified_target}` (line {line_of(rewrite.inner)}) are packed "
            "into flat buffers",
            self.replace(rewrite.wrapper, cst.Call, _add_combine_grad),
        )

    def _examine(self, sink: AmpSink) -> None:
        call = sink.call
        optimizers = sink.optimizers
        if optimizers is None or literal_value(optimizers) is None:
            return  # models only: nothing to combine
        if isinstance(optimizers, ast.List | ast.Tuple) and not optimizers.elts:
            return  # `amp.initialize(model, [], ...)` (inference): nothing to combine either
        if argument(call, "combine_grad", AMP_POSITIONS["combine_grad"]) is not None:
            return  # already decided, by the user or a previous run
        if has_star(call):
            self.report(
                call,
                "arguments passed with `*`/`**` may already set `opt_level` or `combine_grad`: "
                "if its optimizers are NPU fused ones, add `combine_grad=True` by hand",
            )
            return
        if not self._all_combinable(sink):
            return
        if self.standalone:
            self.report(call, _standalone_message(self.standalone))
            return
        options = amp_options(self.view, call, switched_level(self))
        if options.disabled:
            self.report(
                call,
                "`combine_grad=True` not added: this call disables amp (`enabled=False`), so "
                "it would have no effect",
                Severity.INFO,
            )
            return
        blocks, note = self._opt_level_check(options)
        if blocks:
            self.report(call, note)
            return
        if self.tested is not None:
            self._add_tested(call, sink.optimizers, note, *self.tested)
            return
        if self.combined:
            message = "added `combine_grad=True`: Ascend apex packs the gradients of the "
            message += "optimizers passed here into flat buffers, those of "
            message += f"{self._listed(self.combined)} too, left unfused by NPU101 (it "
            message += "combines any optimizer's gradients, and no code here sets them to None "
            message += "or replaces them)"
        else:
            message = "added `combine_grad=True`: the gradients of its NPU fused optimizers are "
            message += "packed into flat buffers"
        for factory in self.factories:
            message += f"; {factory}"
        if note:
            message += f"; {note}"
        edit = self.replace(call, cst.Call, _add_combine_grad)
        self.fix(call, message, edit)

    def _add_tested(
        self,
        call: ast.Call,
        optimizers: ast.expr | None,
        note: str | None,
        fused: list[ast.expr],
        others: list[ast.expr],
    ) -> None:
        """``combine_grad=getattr(optimizer, "is_npu_fused_optimizer", False)``: the optimizer
        passed here is an NPU fused one on some paths only (``fused`` beside ``others``, or
        ``self.maybe``: its class mapped at run time, a class the mapping leaves out unfused),
        and Ascend apex's fused classes carry that flag, the one its `amp.initialize` reads
        itself. Fused: combined, as for any NPU fused optimizer; otherwise off, as written."""
        assert optimizers is not None
        written = self.view.written(optimizers)
        whys = [
            f"{self._listed([origin])}: NPU101 maps its class at run time, and a class the "
            "mapping leaves out stays unfused"
            for origin in self.maybe
            if id(origin) in planned_lookups(self)
        ]
        if fused and others:
            whys.append(f"from {self._listed(fused)}, and maybe not from {self._listed(others)}")
        elif others and not self.maybe:
            whys += self._traced_reasons(others)
        whys += self.factories
        message = (
            f'added `combine_grad=getattr({written}, "is_npu_fused_optimizer", False)`: the '
            f"optimizer passed here {'is' if fused or self.maybe else 'may be'} an NPU fused "
            f"one{' on some paths only' if fused or self.maybe else ''} ({'; '.join(whys)}); "
            "Ascend apex's fused classes carry `is_npu_fused_optimizer`, the flag its "
            "`amp.initialize` reads, so the gradients are combined exactly when the optimizer "
            "is fused"
        )
        if note:
            message += f"; {note}"
        value = cst.parse_expression(f'getattr({written}, "is_npu_fused_optimizer", False)')
        edit = self.replace(
            call, cst.Call, lambda node: append_arg(node, keyword("combine_grad", value))
        )
        self.fix(call, message, edit)

    def _all_combinable(self, sink: AmpSink) -> bool:
        """True when every optimizer reaching the call is NPU fused, or left unfused with its
        gradients provably kept where `combine_grad` packs them (``self.combined``); reports
        every other case."""
        assert sink.optimizers is not None
        fused: list[ast.expr] = []
        unfused: list[ast.expr] = []
        unknown: list[ast.expr] = []
        self.factories: list[str] = []  # why optimizers from other modules count as fused
        self.standalone: list[str] = []  # the torch_npu.optim ones, as quoted in messages
        # Unfused optimizers whose gradients stay where combine_grad packs them (NPU101's
        # CombinableUnfused): Ascend apex combines the gradients of any optimizer.
        self.combined: list[ast.expr] = []
        plan = self.read_plan(CombinableUnfused)
        combinable = plan.calls if plan is not None else frozenset()
        lookups = planned_lookups(self)
        # Optimizers whose class NPU101 maps at run time, some classes left unfused: fused
        # exactly when the optimizer says so (``self.maybe``, tested at the call).
        self.maybe: list[ast.expr] = []
        # Set when the call gets the test: (the fused origins, the unfused or unseen ones).
        self.tested: tuple[list[ast.expr], list[ast.expr]] | None = None
        seen_unfused: set[int] = set()  # followed into another module, and not fused there
        # id(origin) -> why the other module's optimizer it stands for is not known to be fused
        self.traced: dict[int, str] = {}
        for origin in self._origins(sink.optimizers):
            if self.flow.exclusive(sink.call, origin):
                continue  # built only on the path where this amp.initialize does not run
            if _is_none(origin):
                continue  # no optimizer on that path: amp.initialize hands back the model alone
            element = self.flow.element_of(origin)
            if isinstance(origin, ast.Call):
                verdict = factory_verdict(self, origin)
            elif element is not None:
                verdict = factory_verdict(self, *element)  # `optimizer, sched = build(cfg)`
            else:
                verdict = None
            name = (
                fused_name(self.view, planned(self), origin)
                if isinstance(origin, ast.Call)
                else None
            )
            if name is not None:
                fused.append(origin)
                if name.startswith(TORCH_NPU_HOME + "."):
                    self.standalone.append(f"`{name}` (line {line_of(origin)})")
            elif id(origin) in lookups:
                (fused if lookups[id(origin)] else self.maybe).append(origin)
            elif isinstance(origin, ast.Call) and self._known_optimizer(origin):
                if id(origin) in combinable:
                    self.combined.append(origin)
                else:
                    unfused.append(origin)
            elif verdict is not None and verdict.fused:
                fused.append(origin)
                self.factories.append(verdict.why)
                self.standalone.extend(verdict.standalone)
            elif verdict is not None and verdict.maybe:
                self.maybe.append(origin)
                self.factories.append(verdict.why)
                self.standalone.extend(verdict.standalone)
            else:
                unknown.append(origin)
                if verdict is not None:
                    self.traced[id(origin)] = verdict.why
                    if not verdict.unseen:
                        seen_unfused.add(id(origin))
        if not self.maybe and (fused or self.combined) and not unfused and not unknown:
            return True
        single = _single_value(sink.optimizers)
        if (fused or self.maybe) and single:
            # An NPU fused optimizer on some paths only: combined exactly when it is one.
            self.tested = (fused, unfused + unknown + self.combined)
            return True
        unseen = not any(
            id(origin) in seen_unfused or self._seen_unfused(origin) for origin in unknown
        )
        if unknown and unseen and not unfused and not self.combined and single:
            # Built where npu-migrate cannot see (a helper's parameter, a callable passed in):
            # combined exactly when it is an NPU fused one.
            self.tested = ([], unknown)
            return True
        if self.maybe and not unfused and not unknown:
            self.report(
                sink.call,
                "`combine_grad=True` not added: the optimizers passed here are NPU fused ones on "
                f"some paths only ({self._listed(self.maybe)}: NPU101 maps their class at run "
                "time, and a class the mapping leaves out stays unfused), and they are passed "
                "together, so no one test of Ascend's `is_npu_fused_optimizer` speaks for "
                "each; pass `combine_grad=` yourself, true only when every one of them is fused",
            )
            return False
        if unknown and not fused and not unfused and self.traced:
            reasons = self._traced_reasons(unknown)
            self.report(
                sink.call,
                f"`combine_grad=True` not added: {'; '.join(reasons)}; if its optimizers are "
                "NPU fused ones, add `combine_grad=True` by hand",
            )
            return False
        if fused:
            others = self._listed(unfused + unknown)
            self.report(
                sink.call,
                "`combine_grad=True` not added: only some of the optimizers passed here are NPU "
                f"fused ones; the others come from {others}. Make them NPU fused optimizers too, "
                "then add `combine_grad=True`",
            )
        elif unfused and all(self._no_fused_version(origin) for origin in unfused):
            self.report(
                sink.call,
                "`combine_grad=True` not added: the optimizers passed here have no NPU fused "
                f"version: {self._listed(unfused)}, Hugging Face's AdamW, whose arithmetic no "
                f"fused optimizer has, {_UNSHOWN}. To fuse it, switch to `torch.optim.AdamW` "
                "after comparing loss curves (NPU101 fuses that), then add `combine_grad=True`",
            )
        elif unfused:
            self.report(
                sink.call,
                "`combine_grad=True` not added: the optimizers passed here stay unfused: "
                f"{self._listed(unfused)}, {_UNSHOWN}; check that (or make them NPU fused), "
                "then add `combine_grad=True`",
            )
        elif unknown:
            origins = ", ".join(f"`{self.view.written(o)}`" for o in unknown)
            self.report(
                sink.call,
                "cannot see where the optimizer passed here is built (npu-migrate traces it "
                f"back to {origins} and no further); if it is an NPU fused optimizer, add "
                "`combine_grad=True`",
            )
        else:
            self.report(
                sink.call,
                "`combine_grad=True` not added: no optimizer built in this module reaches this "
                "call on a path where it runs; if its optimizers are NPU fused ones, add "
                "`combine_grad=True` by hand",
            )
        return False

    def _origins(self, optimizers: ast.expr) -> list[ast.expr]:
        """Where the optimizers of an ``amp.initialize`` come from; a parameter of a helper of
        the module that only the module calls (``def setup(model, optimizer)``, a class's
        ``__init__``) stands for what every call of it passes there, a few calls deep."""
        own = frozenset(
            self.project.links(KEY).get(self.context.path, {}).get("own_amp_helpers", ())
        )
        found: list[ast.expr] = []
        pending = list(self.flow.origins(optimizers))
        followed = 0
        while pending:
            origin = pending.pop(0)
            parameters = self.flow.parameters_of(origin)
            passed = self._passed(parameters, own) if parameters and followed < 16 else None
            if passed is None:
                if all(origin is not seen for seen in found):
                    found.append(origin)
                continue
            followed += 1
            for value in passed:
                pending.extend(self.flow.origins(value))
        return found

    def _passed(self, parameters: list[ast.arg], own: frozenset[str]) -> list[ast.expr] | None:
        """What the calls of the helpers that have ``parameters`` pass to them, when each is a
        helper the link stage found named in no other file, the module only calls it (never
        uses it as a value), and every call passes the parameter; None otherwise."""
        passed: list[ast.expr] = []
        for parameter in parameters:
            name = own_helper(self.index, parameter)
            if name is None or name not in own:
                return None
            uses = [n for n in self.index.names(name) if isinstance(n.ctx, ast.Load)]
            calls = [n for n in uses if _called(self.index, n)]
            values = self.flow.passed_to(parameter)
            if not calls or len(calls) != len(uses) or len(values) != len(calls):
                return None
            passed += values
        return passed

    def _seen_unfused(self, origin: ast.expr) -> bool:
        """A construction seen to build no NPU fused optimizer: ``Lamb(params, lr)`` with
        ``Lamb`` a class this module defines, or a class name with several origins that are all
        optimizers other than the NPU fused ones (an import fallback between NVIDIA's
        ``FusedAdam`` and torch's ``AdamW``)."""
        if not isinstance(origin, ast.Call):
            return False
        func = class_of(self.view, origin)
        if isinstance(func, ast.Name) and any(
            binding.kind is BindingKind.CLASS for binding in self.index.bindings_of(func)
        ):
            return True
        name = self.qualified_name_in(func, KNOWN_OPTIMIZERS)
        return isinstance(name, Ambiguous) and not any(
            candidate.rpartition(".")[2].startswith("NpuFused") for candidate in name.candidates
        )

    def _traced_reasons(self, origins: list[ast.expr]) -> list[str]:
        """Why each of ``origins`` is not known to be an NPU fused optimizer, for a message."""
        return [
            f"`{self.view.written(o)}` (line {line_of(o)}): "
            + self.traced.get(id(o), "npu-migrate traces it no further")
            for o in origins
        ]

    def _listed(self, origins: list[ast.expr]) -> str:
        return ", ".join(
            f"`{self.view.written(o.func if isinstance(o, ast.Call) else o)}` (line {line_of(o)})"
            for o in origins
        )

    def _known_optimizer(self, call: ast.Call) -> bool:
        """A torch / apex optimizer that stays unfused (NPU101 reported it, or does not run),
        or another package's that has no NPU fused version (Hugging Face's ``AdamW``)."""
        if self._no_fused_version(call):
            return True
        func = class_of(self.view, call)
        if not self.may_name(func, NPU1_ROOTS):
            return False
        return isinstance(self.qualified_name_in(func, KNOWN_OPTIMIZERS), str)

    def _no_fused_version(self, origin: ast.expr) -> bool:
        """``origin`` builds another package's optimizer that has no NPU fused version."""
        if not isinstance(origin, ast.Call) or not self.may_name(origin.func, NO_FUSED_ROOTS):
            return False
        return self.qualified_name(origin.func) in NO_FUSED_VERSION

    def _opt_level_check(self, options: AmpOptions) -> tuple[bool, str]:
        """(True, why) when `combine_grad` must not be added; (False, note or "") otherwise."""
        level = options.level
        if level is None and options.arms_fused:
            return False, ""
        if level is None:
            return False, (
                f"`combine_grad` needs opt_level O1 or O2, and `{options.level_code}` must "
                "be one of them at run time"
            )
        if level not in FUSED_LEVELS:
            return True, (
                f"not added `combine_grad=True`: Ascend apex accepts it only with opt_level O1 or "
                f"O2, and this call uses {options.level_shown()}; switch to O1 or O2 to get "
                "combined gradients"
            )
        if level == "O2":
            if options.master_weights is False:
                return True, (
                    "not added `combine_grad=True`: with opt_level O2 Ascend apex needs master "
                    "weights for it, and this call sets `master_weights=False`; drop that "
                    "argument to get combined gradients"
                )
            if options.master_weights is NOT_LITERAL:
                return False, (
                    f"with opt_level O2, `combine_grad` needs master weights: "
                    f"`{options.master_code}` must not be False at run time"
                )
        return False, ""


# Why an optimizer NPU101 leaves unfused does not get combined gradients.
_UNSHOWN = (
    "and npu-migrate cannot show that their gradients stay in the flat buffers "
    "`combine_grad=True` packs them into (Ascend apex combines any optimizer's gradients, but "
    "code that sets them to None, replaces them or re-allocates the parameters detaches them "
    "from the buffers, and amp then no longer unscales them)"
)


def _standalone_message(standalone: list[str]) -> str:
    """Why a torch_npu fused optimizer under apex amp gets no `combine_grad=True`, and a report."""
    return (
        f"`combine_grad=True` not added: {', '.join(dict.fromkeys(standalone))} is torch_npu's "
        "fused optimizer, which packs its gradients into a flat buffer of its own at its first "
        "step, and Ascend apex's `amp.initialize` sets the gradients of every optimizer but its "
        "own fused ones to None before each backward, so from the second step on it would step "
        "stale gradients (with `combine_grad=True` too: amp's buffers would lose them). Under "
        "apex amp use `apex.optimizers.NpuFused*` (then add `combine_grad=True`); on paths "
        "without amp, torch_npu's"
    )


def _set_opt_level(level: str) -> Change:
    """Set the call's ``opt_level`` (keyword or fourth positional argument) to ``level``,
    keeping the quotes of the literal it replaces; add it as a keyword when absent."""

    def change(call: cst.Call) -> cst.Call:
        arg = find_argument(call, "opt_level", AMP_POSITIONS["opt_level"])
        if arg is None:
            return append_arg(call, keyword("opt_level", cst.SimpleString(f'"{level}"')))
        quote = '"'
        if isinstance(arg.value, cst.SimpleString):
            quote = arg.value.quote
        new_value = cst.SimpleString(f"{quote}{level}{quote}")
        args = [a.with_changes(value=new_value) if a is arg else a for a in call.args]
        return call.with_changes(args=args)

    return change


def _add_combine_grad(call: cst.Call) -> cst.Call:
    return append_arg(call, keyword("combine_grad", cst.Name("True")))


def _single_value(node: ast.expr | None) -> bool:
    """``optimizer`` or ``self.optimizer``: one optimizer, read twice to the same value."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_none(node: ast.expr) -> bool:
    """``None`` written as the optimizer (``optimizer = None`` before an ``if`` that builds it):
    on that path there is nothing to combine, with or without ``combine_grad``."""
    return isinstance(node, ast.Constant) and node.value is None


def _called(index: ModuleIndex, name: ast.Name) -> bool:
    call = index.parent(name)
    return isinstance(call, ast.Call) and call.func is name
