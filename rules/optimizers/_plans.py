"""The plans the NPU1xx rules publish for each other (see ``Rule.publish``). Not a rule.

- :class:`FusedPlans` (NPU101): the constructor calls NPU101 rewrites into NPU fused optimizers,
  so that NPU102, NPU103, NPU104 and NPU203 treat those calls as NPU fused already (every rule
  analyses the original file; the edits of all of them land in one pass).
- :class:`FusedSwaps` (NPU101, for the run): NPU101 runs, so factories in other modules are
  judged as NPU101 will leave them.
- :class:`OptLevelSwitch` (NPU102, for the run): the ``opt_level`` NPU102's option sets on every
  ``amp.initialize``, which NPU101 must plan for.
- :class:`RemovedWraps` (NPU104): the DDP wraps NPU104 removes, which NPU203 must not move
  optimizers ahead of.
- :class:`AddedAmp` (NPU105): the ``amp.initialize`` NPU105 adds, so that NPU101 gives the
  optimizers it puts under amp Ascend apex's home in the same run (see
  docs/rules-optimizers.md, NPU105).
- :class:`Fp16Rewrites` (NPU106): the ``FP16_Optimizer`` wrappers NPU106 rewrites into
  ``amp.initialize(..., opt_level="O2")``, so that NPU101 plans the optimizers they wrap for amp
  O2 (and stops reporting them) and NPU102 adds ``combine_grad=True`` to the new call when they
  become NPU fused.
- :class:`DroppedKeys` (NPU101): the ``fused=`` / ``"fused"`` keys NPU101 drops from the dicts
  an optimizer gets through ``**``, so that NPU303 no longer keeps a device test for them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from migrator.rule import Rule


@dataclass(frozen=True)
class FusedPlan:
    """NPU101's rewrite of one constructor call into an NPU fused optimizer.

    Besides the new class, it says how the rewrite moves the text on the call's lines, for a
    later rule whose edit depends on columns of the rewritten code (NPU103's line wrapping):
    the callee's new spelling is ``shift`` characters longer (shorter when negative), which
    moves what follows it on its line, and the continuation lines in ``realigned`` that were
    aligned with the opening parenthesis move with it.
    """

    call: ast.Call
    qualified_target: str  # e.g. "apex.optimizers.NpuFusedSGD"
    func_end: tuple[int, int]  # 1-based line and 0-based column where the callee ends
    shift: int = 0
    realigned: frozenset[int] = frozenset()

    def output_column(self, line: int, column: int) -> int:
        """Where 0-based ``column`` of ``line`` (original code) is once the call is rewritten."""
        end_line, end_column = self.func_end
        if line in self.realigned or (line == end_line and column >= end_column):
            return column + self.shift
        return column


@dataclass(frozen=True)
class FusedPlans:
    """NPU101's plan for a file: id(constructor call) -> its rewrite; and the calls whose class
    it maps at run time (``{torch.optim.SGD: ..., ...}.get(cls, cls)(...)``): id(call) ->
    whether every class the call may give is then an NPU fused one."""

    by_call: Mapping[int, FusedPlan]
    lookups: Mapping[int, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class CombinableUnfused:
    """NPU101's constructors of a file that stay unfused, reach an `amp.initialize` there, and
    keep their gradients where `combine_grad=True` packs them (ids of the calls)."""

    calls: frozenset[int]


@dataclass(frozen=True)
class FusedSwaps:
    """NPU101 runs: the optimizers it can swap are swapped everywhere in the run."""


@dataclass(frozen=True)
class DdpMoves:
    """NPU203 runs: an optimizer built after its model's DDP wrap is moved above the wrap
    wherever that is safe (NPU101 fuses only those, and the ones built before it)."""


@dataclass(frozen=True)
class OptLevelSwitch:
    """NPU102's ``opt-level`` option: the ``opt_level`` it sets on every ``amp.initialize``."""

    level: str


@dataclass(frozen=True)
class RemovedWraps:
    """NPU104's plan for a file: the DDP wrap calls it removes, by id."""

    calls: frozenset[int]


@dataclass(frozen=True)
class Fp16Rewrite:
    """NPU106's rewrite of one ``optimizer = FP16_Optimizer(inner, ...)`` statement into
    ``model, optimizer = amp.initialize(model, inner, opt_level="O2", ...)``.

    ``wrapper`` is the ``FP16_Optimizer(...)`` call: the edit turns that very call node into
    the ``amp.initialize(...)`` call, so a later rule may edit it further (NPU102 appending
    ``combine_grad=True``); ``inner`` the wrapped optimizer's constructor call.
    """

    wrapper: ast.Call
    inner: ast.Call
    model: str
    optimizer: str


@dataclass(frozen=True)
class Fp16Rewrites:
    """NPU106's plan for a file: id(``FP16_Optimizer`` call) -> its rewrite (two wrappers in
    the branches of an `if` may wrap one optimizer)."""

    by_wrapper: Mapping[int, Fp16Rewrite]

    def of_inner(self, call: ast.Call) -> list[Fp16Rewrite]:
        """The rewrites of the wrappers around the optimizer that ``call`` constructs."""
        return [rewrite for rewrite in self.by_wrapper.values() if rewrite.inner is call]


@dataclass(frozen=True)
class DroppedKeys:
    """NPU101's plan for a file: the keys it drops from forwarded dicts (ids of the
    ``ast.keyword`` nodes and of the dict displays' key nodes)."""

    nodes: frozenset[int]


def dropped_keys(rule: Rule) -> frozenset[int]:
    """The keys NPU101 drops in the file ``rule`` checks (empty when NPU101 does not run)."""
    plan = rule.read_plan(DroppedKeys)
    return plan.nodes if plan is not None else frozenset()


def planned(rule: Rule) -> Mapping[int, FusedPlan]:
    """NPU101's plans of the file ``rule`` checks (empty when NPU101 does not run)."""
    plans = rule.read_plan(FusedPlans)
    return plans.by_call if plans is not None else {}


def planned_lookups(rule: Rule) -> Mapping[int, bool]:
    """The calls of the file ``rule`` checks whose class NPU101 maps at run time, and whether
    it maps every class they may give (empty when NPU101 does not run)."""
    plans = rule.read_plan(FusedPlans)
    return plans.lookups if plans is not None else {}


def switched_level(rule: Rule) -> str | None:
    """The ``opt_level`` NPU102's option sets in this run (None: no switch, or no NPU102)."""
    switch = rule.read_plan(OptLevelSwitch)
    return switch.level if switch is not None else None


@dataclass(frozen=True)
class AddedAmp:
    """NPU105's plan for a file: the ``amp.initialize`` it adds right after ``anchor`` (a
    statement of the original file), for the optimizers built by ``constructors`` (ids of
    their constructor calls).

    ``level`` is the opt level it sets ("O1" or "O2"; None when the command line chooses:
    ``opt_level=args.opt_level``, O1 or O2 by the flag's choices); ``switch`` the code of the
    run-time condition that enables amp (``args.amp``, passed as ``enabled=``), None when amp
    is always on. The call always has ``combine_grad=True``.
    """

    anchor: ast.stmt
    constructors: frozenset[int]
    level: str | None
    switch: str | None
