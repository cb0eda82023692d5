"""NPU102: `amp.initialize(...)` of NPU fused optimizers without `combine_grad=True`."""

from __future__ import annotations

import ast

import libcst as cst

from migrator.callargs import append_arg, keyword
from migrator.calls import NOT_LITERAL, argument, has_star, literal_value
from migrator.rule import FixSafety, Rule
from migrator.rules.npu1_common import (
    KNOWN_OPTIMIZERS,
    NPU1_ROOTS,
    NPU101,
    AmpSink,
    OptimizerFlow,
    code_of,
    fused_name,
    line_of,
)

# Positions in Ascend's `initialize(models, optimizers, enabled, opt_level, cast_model_type,
# patch_torch_functions, keep_batchnorm_fp32, master_weights, ..., combine_grad, ...)`.
OPT_LEVEL_POSITION = 3
MASTER_WEIGHTS_POSITION = 7
COMBINE_GRAD_POSITION = 18
DEFAULT_OPT_LEVEL = "O1"
COMBINE_GRAD_LEVELS = ("O1", "O2")


class AmpCombineGrad(Rule):
    """
    ## What it does
    Adds `combine_grad=True` to `apex.amp.initialize(...)` calls (any alias; keyword, positional
    or list-form optimizers; `amp_inits = amp.initialize(...)`) whose optimizers are all NPU fused
    optimizers (`apex.optimizers.NpuFused*`, `torch_npu.optim.NpuFused*`), built in the same
    module. An explicit `combine_grad=` is kept as written. Not added, and reported, when the
    literal `opt_level` is O0 or O3 or when O2 is combined with `master_weights=False`, which
    Ascend apex rejects; added with a note when `opt_level` is not a literal.

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
    gradients from the buffers: check such code by hand.
    """

    CODE = "NPU102"
    NAME = "amp-combine-grad"
    SUMMARY = "`amp.initialize(...)` of NPU fused optimizers without `combine_grad=True`"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("initialize",)
    # Optimizers that NPU101 rewrites count as NPU fused ones (its plan, in context.facts).
    READS = (NPU101,)

    def check(self) -> None:
        self.flow = OptimizerFlow.of(self)
        for call, ambiguous in self.flow.ambiguous_amp:
            self.report(
                call,
                f"cannot tell whether this is `apex.amp.initialize`: {ambiguous.describe()}; "
                "if it is and its optimizers are NPU fused ones, add `combine_grad=True` by hand",
            )
        for sink in self.flow.amp_sinks:
            self._examine(sink)

    def _examine(self, sink: AmpSink) -> None:
        call = sink.call
        if sink.optimizers is None or literal_value(sink.optimizers) is None:
            return  # models only: nothing to combine
        if argument(call, "combine_grad", COMBINE_GRAD_POSITION) is not None:
            return
        if has_star(call):
            self.report(
                call,
                "arguments passed with `*`/`**` may already set `opt_level` or `combine_grad`: "
                "if its optimizers are NPU fused ones, add `combine_grad=True` by hand",
            )
            return
        if not self._all_fused(sink):
            return
        blocks, note = self._opt_level_check(call)
        if blocks:
            self.report(call, note)
            return
        message = "added `combine_grad=True`: the gradients of its NPU fused optimizers are packed "
        message += "into flat buffers"
        if note:
            message += f"; {note}"
        edit = self.replace(call, cst.Call, _add_combine_grad)
        self.fix(call, message, edit)

    def _all_fused(self, sink: AmpSink) -> bool:
        """True when every optimizer reaching the call is NPU fused; reports the unclear cases."""
        assert sink.optimizers is not None
        fused: list[ast.expr] = []
        unfused: list[ast.expr] = []
        unknown: list[ast.expr] = []
        for origin in self.flow.origins(sink.optimizers):
            if self.flow.exclusive(sink.call, origin):
                continue  # built only on the path where this amp.initialize does not run
            if isinstance(origin, ast.Call) and fused_name(self, origin):
                fused.append(origin)
            elif isinstance(origin, ast.Call) and self._known_optimizer(origin):
                unfused.append(origin)
            else:
                unknown.append(origin)
        if fused and not unfused and not unknown:
            return True
        if fused:
            others = ", ".join(
                f"`{code_of(self, o.func if isinstance(o, ast.Call) else o)}` (line {line_of(o)})"
                for o in unfused + unknown
            )
            self.report(
                sink.call,
                "`combine_grad=True` not added: only some of the optimizers passed here are NPU "
                f"fused ones; the others come from {others}. Make them NPU fused optimizers too, "
                "then add `combine_grad=True`",
            )
        elif unknown and not unfused:
            origins = ", ".join(f"`{code_of(self, o)}`" for o in unknown)
            self.report(
                sink.call,
                "cannot see where the optimizer passed here is built (npu-migrate traces it "
                f"back to {origins} and no further); if it is an NPU fused optimizer, add "
                "`combine_grad=True`",
            )
        return False

    def _known_optimizer(self, call: ast.Call) -> bool:
        """A torch / apex optimizer that stays unfused (NPU101 reported it, or does not run)."""
        if not self.may_name(call.func, NPU1_ROOTS):
            return False
        return isinstance(self.qualified_name_in(call.func, KNOWN_OPTIMIZERS), str)

    def _opt_level_check(self, call: ast.Call) -> tuple[bool, str]:
        """(True, why) when `combine_grad` must not be added; (False, note or "") otherwise."""
        arg = argument(call, "opt_level", OPT_LEVEL_POSITION)
        level = DEFAULT_OPT_LEVEL if arg is None else literal_value(arg.value)
        if level is NOT_LITERAL:
            assert arg is not None
            return False, (
                f"`combine_grad` needs opt_level O1 or O2, and `{code_of(self, arg.value)}` must "
                "be one of them at run time"
            )
        if level not in COMBINE_GRAD_LEVELS:
            return True, (
                f"not added `combine_grad=True`: Ascend apex accepts it only with opt_level O1 or "
                f"O2, and this call uses {level!r}; switch to O1 or O2 to get combined gradients"
            )
        if level == "O2":
            master = argument(call, "master_weights", MASTER_WEIGHTS_POSITION)
            value = literal_value(master.value) if master is not None else None
            if value is False:
                return True, (
                    "not added `combine_grad=True`: with opt_level O2 Ascend apex needs master "
                    "weights for it, and this call sets `master_weights=False`; drop that "
                    "argument to get combined gradients"
                )
            if value is NOT_LITERAL:
                assert master is not None
                return False, (
                    f"with opt_level O2, `combine_grad` needs master weights: "
                    f"`{code_of(self, master.value)}` must not be False at run time"
                )
        return False, ""


def _add_combine_grad(call: cst.Call) -> cst.Call:
    return append_arg(call, keyword("combine_grad", cst.Name("True")))
