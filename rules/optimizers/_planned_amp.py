"""The ``amp.initialize`` calls that rules earlier in the chain write into a file, as NPU101's
planner sees them. Not a rule.

NPU106 turns ``FP16_Optimizer(inner, ...)`` into ``amp.initialize(model, inner,
opt_level="O2", ...)`` (its :class:`~migrator.rules.optimizers._plans.Fp16Rewrites`); NPU105
adds ``amp.initialize(..., combine_grad=True)`` after the optimizers of a training loop (its
:class:`~migrator.rules.optimizers._plans.AddedAmp`). Every rule analyses the original file, so
NPU101 learns of those calls from the plans, not from the code.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from migrator.analysis.view import FileView
from migrator.rules.optimizers._amp import AmpOptions
from migrator.rules.optimizers._fp16 import uncovered_condition
from migrator.rules.optimizers._plans import AddedAmp, Fp16Rewrites
from migrator.rules.optimizers._tables import APEX_HOME, TORCH_NPU_HOME


def picked_by(test: str, amp_when_true: bool, target: str) -> str:
    """The class ``target`` from Ascend apex on the path where amp runs (``test`` holds, or is
    false when not ``amp_when_true``), from torch_npu on the other: ``(apex.optimizers.X if
    test else torch_npu.optim.X)``, an expression to call.

    Neither class fits both paths: apex's raises in ``step()`` without amp, and torch_npu's
    steps stale gradients under apex amp (which sets the gradients of any other optimizer to
    None before each backward) and is refused with ``combine_grad=True``."""
    apex, torch_npu = f"{APEX_HOME}.{target}", f"{TORCH_NPU_HOME}.{target}"
    first, second = (apex, torch_npu) if amp_when_true else (torch_npu, apex)
    return f"({first} if {test} else {second})"


@dataclass(frozen=True)
class PlannedAmp:
    """The ``amp.initialize`` calls NPU105 and NPU106 write in this run, for NPU101's planner
    (empty when neither runs)."""

    fp16: Fp16Rewrites | None = None
    added: AddedAmp | None = None

    def rewritten_wrappers(self) -> Mapping[int, object]:
        """id(``FP16_Optimizer`` call) for each wrapper NPU106 rewrites."""
        return self.fp16.by_wrapper if self.fp16 is not None else {}

    def wrappers_of(self, call: ast.Call) -> tuple[ast.Call, ...]:
        """The ``FP16_Optimizer`` calls that NPU106 rewrites around the optimizer ``call``."""
        if self.fp16 is None:
            return ()
        return tuple(rewrite.wrapper for rewrite in self.fp16.of_inner(call))

    def added_for(self, call: ast.Call) -> AddedAmp | None:
        """NPU105's plan, when the optimizer ``call`` goes through the amp.initialize it adds."""
        if self.added is not None and id(call) in self.added.constructors:
            return self.added
        return None

    def options(self, call: ast.Call) -> list[AmpOptions]:
        """What NPU106's ``amp.initialize`` calls ask for, for the optimizer ``call``: opt level
        O2 with master weights (O2's default, which Ascend's fused optimizers need)."""
        return [_o2_options(wrapper) for wrapper in self.wrappers_of(call)]

    def uncovered(self, view: FileView, call: ast.Call) -> tuple[ast.Call, str, bool] | None:
        """Where NPU106's ``amp.initialize`` calls do not cover every path on which the optimizer
        ``call`` runs: a wrapper, the `if` test and whether amp runs only when it holds."""
        wrappers = self.wrappers_of(call)
        if not wrappers:
            return None
        condition = uncovered_condition(view, wrappers, call)
        if condition is None:
            return None
        test, when_true = condition
        return wrappers[0], test, when_true

    def added_why(self, added: AddedAmp) -> str:
        """Why an optimizer under NPU105's ``amp.initialize`` gets Ascend apex's class."""
        level = f'opt_level="{added.level}"' if added.level else "opt_level from the command line"
        return (
            f"NPU105 adds `amp.initialize(..., {level}, combine_grad=True)` after line "
            f"{added.anchor.end_lineno}, and Ascend apex's fused optimizers step only under amp"
        )


def _o2_options(wrapper: ast.Call) -> AmpOptions:
    return AmpOptions(
        call=wrapper,
        level="O2",
        level_code=None,
        written_level="O2",
        master_weights=None,
        master_code=None,
        enabled=True,
        enabled_code=None,
        starred=False,
    )
