"""NPU201: apex `FusedLayerNorm` / `FusedRMSNorm` -> `torch.nn.LayerNorm` / `torch.nn.RMSNorm`.

The "plan -> edits" half: :mod:`._layer_norm` plans what becomes torch's and what is reported
(pure, on ``ast``); this rule records the plan as fixes and reports, with their messages, and
builds the libcst edits (imports re-homed, uses renamed, arguments fixed, try blocks collapsed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from migrator.callargs import append_arg, keyword, remove_arg_objects
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.normalization_parallel._common import (
    NewHome,
    argument_code,
    dotted_expression,
    rehome_statement,
)
from migrator.rules.normalization_parallel._layer_norm import (
    CLASSES,
    AmbiguousName,
    AttributeRewrite,
    CallRewrite,
    Decision,
    ImportRewrite,
    NoNpuVersion,
    NormClass,
    SharedLineImport,
    StarImport,
    StarredArguments,
    UnsafeClass,
    UseRename,
    plan_layer_norm,
)

APEX_EPS = "1e-5"


class FusedLayerNormToTorch(Rule):
    """
    ## What it does
    Replaces apex's `FusedLayerNorm` with `torch.nn.LayerNorm` and `FusedRMSNorm` with
    `torch.nn.RMSNorm`: imports (aliases kept), module access (`apex.normalization.X`),
    subclasses, `isinstance` checks and calls. Drops `memory_efficient=`, and passes
    `eps=1e-5` to `RMSNorm` where apex's default was relied on. A `try: from apex... import
    FusedLayerNorm as X / except ImportError: <fallback>` block becomes the plain torch import,
    because the fallback can no longer run. `MixedFusedLayerNorm` / `MixedFusedRMSNorm` are
    replaced only with `--unsafe-fixes`; the functional forms (`fused_layer_norm_affine`,
    `FusedLayerNormAffineFunction`, ...) are reported with their torch equivalent.

    ## Why
    Ascend's apex has no FusedLayerNorm; torch's LayerNorm runs on NPU, takes the same
    `normalized_shape`, `eps` and `elementwise_affine` in the same positions, and names its
    parameters `weight` and `bias` too, so checkpoints still load.

    ## Example
    ```python
    from apex.normalization import FusedLayerNorm as BertLayerNorm
    norm = BertLayerNorm(768, eps=1e-12, memory_efficient=True)
    ```

    ## Use instead
    ```python
    from torch.nn import LayerNorm as BertLayerNorm
    norm = BertLayerNorm(768, eps=1e-12)
    ```

    ## Fix safety
    Safe for `FusedLayerNorm` and `FusedRMSNorm`: same math, same parameters (`memory_efficient`
    only traded compute for activation memory). Unsafe for the `MixedFused*` classes: their
    output takes the weight's dtype, torch's takes the input's; applied only with
    `--unsafe-fixes`, reported otherwise.
    """

    CODE = "NPU201"
    NAME = "fused-layer-norm-to-torch"
    SUMMARY = "apex `FusedLayerNorm` / `FusedRMSNorm` (and their functional forms)"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = (
        "normalization",
        "FusedLayerNorm",
        "FusedRMSNorm",
        "fused_layer_norm",
        "fused_rms_norm",
    )

    nn = "torch.nn"  # how the file spells torch.nn (the plan's), for the imports to add

    def check(self) -> None:
        plan = plan_layer_norm(
            self.view,
            unsafe_fixes=self.settings.unsafe_fixes,
            suppressed=lambda line: self.context.suppressions.covers(line, self.CODE),
        )
        self.nn = plan.nn
        for decision in [*plan.imports, *plan.names, *plan.attributes, *plan.calls]:
            self.act_on(decision)
        for statement in plan.collapsed:
            self.fix(
                statement,
                "removed the `try`/`except` around the FusedLayerNorm import: importing LayerNorm "
                "from torch.nn cannot fail, so the fallback could never run",
                self.replace_statement(statement, collapse_try),
            )

    def act_on(self, decision: Decision) -> None:
        match decision:
            case ImportRewrite():
                self.fix_import(decision)
            case AttributeRewrite():
                self.fix_attribute(decision)
            case CallRewrite():
                self.fix_call(decision)
            case StarImport(statement=statement):
                self.report(
                    statement,
                    "star import from apex's normalization: import `LayerNorm` / `RMSNorm` from "
                    "`torch.nn` instead, and replace the apex names this file uses",
                )
            case SharedLineImport(statement=statement):
                self.report(
                    statement,
                    "this apex normalization import shares its line with another statement: "
                    "put it on its own line so that it can be rewritten to torch.nn",
                )
            case AmbiguousName(node=node, ambiguity=ambiguity):
                self.report(
                    node,
                    f"cannot tell whether `{self.view.written(node)}` is apex's normalization: "
                    f"{ambiguity.describe()}; if it is, use `torch.nn.LayerNorm` / "
                    "`torch.nn.RMSNorm` (with `eps=1e-5`) and drop `memory_efficient`",
                )
            case UnsafeClass(node=node, norm=norm):
                self.report(
                    node,
                    f"`{norm.apex_name}` returns the weight's dtype; `torch.nn.{norm.torch_name}` "
                    "returns the input's. Replace it by hand (or run with --unsafe-fixes) and "
                    "cast the output if the next layer needs the weight's dtype",
                )
            case NoNpuVersion(node=node, name=name):
                self.report(node, f"`{name}` has no NPU version: {decision.advice}")
            case StarredArguments(call=call, norm=norm, starred=starred):
                self.report(
                    call,
                    f"check that `{argument_code(self.view, starred)}` passes no "
                    f"`memory_efficient` (torch.nn.{norm.torch_name} does not take it)"
                    + (" and pass `eps=1e-5` unless it sets eps" if norm.needs_eps else ""),
                )

    # -- the plan as fixes and edits -------------------------------------------------------------

    def fix_import(self, rewrite: ImportRewrite) -> None:
        """The import re-homed to torch.nn, with the uses it renames."""
        statement = rewrite.statement
        edit = rehome_statement(self, statement, rewrite.moves)
        renames = [self.rename_edit(use) for use in rewrite.renamed_uses]
        fixed = self.fix(statement, import_message(rewrite.moves), edit, *renames)
        if fixed and rewrite.spells_out:
            self.ensure_torch_spelling()

    def rename_edit(self, use: UseRename) -> Edit:
        if use.spelled_out:
            return self.replace(use.name, cst.Name, lambda _: dotted_expression(use.becomes))
        return self.replace(use.name, cst.Name, lambda name: name.with_changes(value=use.becomes))

    def fix_attribute(self, rewrite: AttributeRewrite) -> None:
        torch_name = f"torch.nn.{rewrite.norm.torch_name}"
        message = f"replaced `{rewrite.apex_name}` with `{torch_name}`" + class_notes(
            [rewrite.norm]
        )
        edit = self.replace(
            rewrite.node, cst.Attribute, lambda _: dotted_expression(rewrite.becomes)
        )
        if self.fix(rewrite.node, message, edit):
            self.ensure_torch_spelling()
            if rewrite.base_import is not None:
                self.remove_import_if_unused(*rewrite.base_import)

    def fix_call(self, rewrite: CallRewrite) -> None:
        notes = []
        if rewrite.dropped:
            notes.append(
                f"dropped `memory_efficient={self.view.written(rewrite.dropped[0].value)}`: "
                f"torch.nn.{rewrite.norm.torch_name} has no such option (apex used it to "
                "recompute activations in backward and save memory; the results are the same)"
            )
        if rewrite.add_eps:
            notes.append(
                f"passed apex's default `eps={APEX_EPS}`: torch.nn.RMSNorm's default is the "
                "dtype's machine epsilon"
            )
        dropped = [argument.index for argument in rewrite.dropped]
        edit = self.replace(rewrite.call, cst.Call, fix_arguments(dropped, rewrite.add_eps))
        self.fix(rewrite.call, "; ".join(notes), edit)

    def ensure_torch_spelling(self) -> None:
        if self.nn == "torch.nn":
            self.add_import("torch")


# -- messages ------------------------------------------------------------------------------------


def import_message(moves: Mapping[str, NewHome]) -> str:
    parts = []
    for apex_name, home in moves.items():
        torch_name = f"torch.nn.{CLASSES[apex_name].torch_name}"
        how = "imported" if home.module is not None else "spelled out at every use"
        parts.append(f"`{apex_name}` -> `{torch_name}` ({how})")
    notes = class_notes([CLASSES[name] for name in moves])
    return "Ascend has no apex normalization kernels: " + ", ".join(parts) + notes


def class_notes(norms: list[NormClass]) -> str:
    notes = []
    if any(n.torch_name == "RMSNorm" for n in norms):
        notes.append("torch.nn.RMSNorm needs torch >= 2.4")
    if any(n.unsafe for n in norms):
        notes.append(
            "unsafe: the output now has the input's dtype, where apex's Mixed classes "
            "returned the weight's"
        )
    return "; " + "; ".join(notes) if notes else ""


# -- edits ---------------------------------------------------------------------------------------


def fix_arguments(doomed: list[int], add_eps: bool) -> Callable[[cst.Call], cst.Call]:
    """An edit of a call that drops the arguments at ``doomed`` and may pass apex's eps."""

    def edit(call: cst.Call) -> cst.Call:
        fixed = remove_arg_objects(call, [call.args[index] for index in doomed])
        if add_eps:
            fixed = append_arg(fixed, keyword("eps", cst.Float(APEX_EPS)))
        return fixed

    return edit


def collapse_try(node: cst.Try) -> cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
    """The statements of the try body and its ``else``, in place of the whole statement; the
    comments and blank lines above ``try`` stay above them."""
    statements = [*_block_statements(node.body)]
    if node.orelse is not None:
        statements += _block_statements(node.orelse.body)
    if not statements:
        return cst.RemovalSentinel.REMOVE
    first = statements[0]
    # every statement node has leading_lines (BaseStatement does not declare it)
    leading = [*node.leading_lines, *getattr(first, "leading_lines", ())]
    statements[0] = first.with_changes(leading_lines=leading)
    return cst.FlattenSentinel(statements)


def _block_statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(suite, cst.IndentedBlock):
        return list(suite.body)
    assert isinstance(suite, cst.SimpleStatementSuite)
    return [cst.SimpleStatementLine(body=suite.body)]
