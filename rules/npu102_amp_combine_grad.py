"""NPU102: `amp.initialize(...)` of NPU fused optimizers without `combine_grad=True`."""

from __future__ import annotations

import re

import libcst as cst

from migrator.callargs import append_arg, argument, keyword
from migrator.rule import FixSafety, Rule
from migrator.rules.npu1_common import (
    NOT_LITERAL,
    SOURCES,
    UNSUPPORTED,
    AmpSink,
    OptimizerFlow,
    code_of,
    literal_value,
    npu_fused_name,
    qualified,
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
    TRIGGER = re.compile(r"\binitialize\b")

    def visit_Module(self, node: cst.Module) -> None:
        self.flow = OptimizerFlow(self, node)
        self.additions: dict[int, str] = {}  # id(amp.initialize call) -> fix message
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
        if self._has_combine_grad(call):
            return
        if any(arg.star for arg in call.args):
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
        self.additions[id(call)] = message

    def _has_combine_grad(self, call: cst.Call) -> bool:
        return argument(call, "combine_grad", COMBINE_GRAD_POSITION) is not None

    def _all_fused(self, sink: AmpSink) -> bool:
        """True when every optimizer reaching the call is NPU fused; reports the unclear cases."""
        assert sink.optimizers is not None
        fused: list[cst.BaseExpression] = []
        unfused: list[cst.BaseExpression] = []
        unknown: list[cst.BaseExpression] = []
        for origin in self.flow.origins(sink.optimizers):
            if self.flow.exclusive(sink.call, origin):
                continue  # built only on the path where this amp.initialize does not run
            if isinstance(origin, cst.Call) and npu_fused_name(self, origin.func):
                fused.append(origin)
            elif isinstance(origin, cst.Call) and isinstance(
                qualified(self, origin.func, SOURCES.keys() | UNSUPPORTED.keys()), str
            ):
                unfused.append(origin)
            else:
                unknown.append(origin)
        if fused and not unfused and not unknown:
            return True
        if fused:
            others = ", ".join(
                f"`{code_of(o.func if isinstance(o, cst.Call) else o)}` (line "
                f"{self.flow.line_of(o)})"
                for o in unfused + unknown
            )
            self.report(
                sink.call,
                "`combine_grad=True` not added: only some of the optimizers passed here are NPU "
                f"fused ones; the others come from {others}. Make them NPU fused optimizers too, "
                "then add `combine_grad=True`",
            )
        elif unknown and not unfused:
            origins = ", ".join(f"`{code_of(o)}`" for o in unknown)
            self.report(
                sink.call,
                "cannot see where the optimizer passed here is built (npu-migrate traces it "
                f"back to {origins} and no further); if it is an NPU fused optimizer, add "
                "`combine_grad=True`",
            )
        return False

    def _opt_level_check(self, call: cst.Call) -> tuple[bool, str]:
        """(True, why) when `combine_grad` must not be added; (False, note or "") otherwise."""
        arg = argument(call, "opt_level", OPT_LEVEL_POSITION)
        level = DEFAULT_OPT_LEVEL if arg is None else literal_value(arg.value)
        if level is NOT_LITERAL:
            assert arg is not None
            return False, (
                f"`combine_grad` needs opt_level O1 or O2, and `{code_of(arg.value)}` must be one "
                "of them at run time"
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
                    f"`{code_of(master.value)}` must not be False at run time"
                )
        return False, ""

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        message = self.additions.get(id(original_node))
        if message is None or not self.fix(original_node, message):
            return updated_node
        return append_arg(updated_node, keyword("combine_grad", cst.Name("True")))
