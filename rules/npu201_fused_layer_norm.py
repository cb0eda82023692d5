"""NPU201: apex `FusedLayerNorm` / `FusedRMSNorm` -> `torch.nn.LayerNorm` / `torch.nn.RMSNorm`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    Assignment,
    ExpressionContext,
    ExpressionContextProvider,
    ParentNodeProvider,
    Scope,
    ScopeProvider,
)

from migrator.callargs import append_arg, find_keyword, keyword, positional, remove_arg_objects
from migrator.names import Ambiguous
from migrator.rule import FileContext, FixSafety, Rule
from migrator.rules.npu2_support import (
    NewHome,
    dotted_expression,
    import_statements,
    imported_name,
    local_name,
    node_ids,
    queue_removal_of_base_import,
    rehome_import_from,
    source_of,
    torch_nn_prefix,
)

APEX_MODULES = ("apex.normalization", "apex.normalization.fused_layer_norm")
FUNCTIONAL_MODULE = "apex.normalization.fused_layer_norm"


@dataclass(frozen=True)
class NormClass:
    """An apex normalization module class and the torch class that replaces it."""

    apex_name: str
    torch_name: str  # in torch.nn
    unsafe: bool  # the replacement computes in a different dtype
    needs_eps: bool  # torch's eps default differs from apex's 1e-5


CLASSES = {
    c.apex_name: c
    for c in (
        NormClass("FusedLayerNorm", "LayerNorm", unsafe=False, needs_eps=False),
        NormClass("FusedRMSNorm", "RMSNorm", unsafe=False, needs_eps=True),
        NormClass("MixedFusedLayerNorm", "LayerNorm", unsafe=True, needs_eps=False),
        NormClass("MixedFusedRMSNorm", "RMSNorm", unsafe=True, needs_eps=True),
    )
}
CLASS_BY_QUALIFIED = {
    f"{module}.{name}": norm for module in APEX_MODULES for name, norm in CLASSES.items()
}

_LAYER_NORM_ORDER = (
    "reorder the arguments: apex takes `(input, weight, bias, normalized_shape, eps=1e-6)`, "
    "torch takes `(input, normalized_shape, weight, bias, eps)`, and pass `eps=1e-6` if you "
    "relied on apex's default (torch's is 1e-5)"
)
_RMS_NORM_ORDER = (
    "reorder the arguments: apex takes `(input, weight, normalized_shape, eps=1e-6)`, torch "
    "takes `(input, normalized_shape, weight, eps)` (torch >= 2.4), and pass `eps=1e-6` if you "
    "relied on apex's default"
)
_MIXED = "; apex returned the weight's dtype, so cast the result if the caller needs that"
_FUNCTION_CLASS = (
    "an autograd Function with apex's own `.apply(...)` argument order; call `{torch}` instead "
    "and let autograd derive the backward"
)
FUNCTIONAL = {
    f"{FUNCTIONAL_MODULE}.{name}": advice
    for name, advice in {
        "fused_layer_norm_affine": f"use `torch.nn.functional.layer_norm`: {_LAYER_NORM_ORDER}",
        "mixed_dtype_fused_layer_norm_affine": "use `torch.nn.functional.layer_norm`: "
        + _LAYER_NORM_ORDER
        + _MIXED,
        "fused_layer_norm": "use `torch.nn.functional.layer_norm(input, normalized_shape, "
        "eps=eps)`; apex's default eps is 1e-6, torch's 1e-5",
        "fused_rms_norm_affine": f"use `torch.nn.functional.rms_norm`: {_RMS_NORM_ORDER}",
        "mixed_dtype_fused_rms_norm_affine": "use `torch.nn.functional.rms_norm`: "
        + _RMS_NORM_ORDER
        + _MIXED,
        "fused_rms_norm": "use `torch.nn.functional.rms_norm(input, normalized_shape, eps=eps)` "
        "(torch >= 2.4); apex's default eps is 1e-6",
        "FusedLayerNormAffineFunction": _FUNCTION_CLASS.format(
            torch="torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps)"
        ),
        "FusedLayerNormFunction": _FUNCTION_CLASS.format(
            torch="torch.nn.functional.layer_norm(input, normalized_shape, eps=eps)"
        ),
        "FusedLayerNormAffineMixedDtypesFunction": _FUNCTION_CLASS.format(
            torch="torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps)"
        ),
        "FusedRMSNormAffineFunction": _FUNCTION_CLASS.format(
            torch="torch.nn.functional.rms_norm(input, normalized_shape, weight, eps)"
        ),
        "FusedRMSNormFunction": _FUNCTION_CLASS.format(
            torch="torch.nn.functional.rms_norm(input, normalized_shape, eps=eps)"
        ),
        "FusedRMSNormAffineMixedDtypesFunction": _FUNCTION_CLASS.format(
            torch="torch.nn.functional.rms_norm(input, normalized_shape, weight, eps)"
        ),
    }.items()
}
ALL_NAMES = frozenset(CLASS_BY_QUALIFIED) | frozenset(FUNCTIONAL)

MEMORY_EFFICIENT_POSITION = 3  # (normalized_shape, eps, elementwise_affine, memory_efficient)
EPS_POSITION = 1
APEX_EPS = "1e-5"
SUPER_INIT = m.Call(func=m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name("__init__")))
_CONSTANT = (cst.Integer, cst.Float, cst.SimpleString)


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

    METADATA_DEPENDENCIES = (  # type: ignore[assignment]  # one more provider than Rule's
        *Rule.METADATA_DEPENDENCIES,
        ExpressionContextProvider,
    )

    CODE = "NPU201"
    NAME = "fused-layer-norm-to-torch"
    SUMMARY = "apex `FusedLayerNorm` / `FusedRMSNorm` (and their functional forms)"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"normalization|Fused(?:LayerNorm|RMSNorm)|fused_(?:layer|rms)_norm")

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.nn = "torch.nn"
        self.clashes: set[str] = set()  # torch class names the file binds to something else
        self.moves: dict[int, dict[str, NewHome]] = {}  # id(ImportFrom) -> its new homes
        self.renamed: set[str] = set()  # apex names imported without alias, uses get renamed
        self.kept: set[str] = set()  # local names whose import stays (suppressed)
        self.collapsible: set[int] = set()  # id(Try) whose fallback becomes unreachable
        self.collapsed_nodes: set[int] = set()  # ids of every node inside those statements
        self.collapsed_names: dict[str, str] = {}  # local name bound there -> apex qualified name
        self.try_depth = 0
        self.subclass_stack: list[NormClass | None] = []

    # -- planning --------------------------------------------------------------------------------

    def migrates(self, norm: NormClass) -> bool:
        return not norm.unsafe or self.settings.unsafe_fixes

    def visit_Module(self, node: cst.Module) -> None:
        self.nn = torch_nn_prefix(node)
        self.clashes = self.find_clashes()
        for statement in m.findall(node, m.Try()):
            assert isinstance(statement, cst.Try)
            if self.fallback_unreachable(statement):
                self.collapsible.add(id(statement))
                self.collapsed_nodes |= node_ids(statement)
        self.plan_imports(node)

    def find_clashes(self) -> set[str]:
        """``LayerNorm`` / ``RMSNorm`` already bound to something other than torch's class."""
        clashes: set[str] = set()
        scopes: set[Scope] = {
            s for s in self.metadata.get(ScopeProvider, {}).values() if isinstance(s, Scope)
        }
        for scope in scopes:
            for target in ("LayerNorm", "RMSNorm"):
                for assignment in scope.assignments[target]:
                    if not self.binds_torch_or_apex(assignment, target):
                        clashes.add(target)
        return clashes

    def binds_torch_or_apex(self, assignment: object, target: str) -> bool:
        if not isinstance(assignment, Assignment):
            return False
        statement = assignment.node
        if not isinstance(statement, cst.ImportFrom) or isinstance(statement.names, cst.ImportStar):
            return False
        module = "" if statement.module is None else get_full_name_for_node(statement.module)
        for alias in statement.names:
            if local_name(alias) != target:
                continue
            if module == "torch.nn" and imported_name(alias) == target:
                return True
            if module in APEX_MODULES and imported_name(alias) in CLASSES:
                return CLASSES[imported_name(alias)].torch_name == target
        return False

    def fallback_unreachable(self, statement: cst.Try) -> bool:
        """The try body will only import torch.nn.LayerNorm (and set constants): it cannot raise,
        so no handler can run. Not for RMSNorm: torch before 2.4 has none, so its fallback
        stays reachable."""
        if statement.finalbody is not None or not statement.handlers:
            return False
        found_import = False
        for line in statement.body.body:
            if not isinstance(line, cst.SimpleStatementLine):
                return False
            for small in line.body:
                if isinstance(small, cst.ImportFrom) and self.imports_only_layer_norm(small):
                    found_import = True
                    if self.context.suppressions.covers(self.position(small)[0], self.CODE):
                        return False
                elif not self.is_constant_assignment(small) and not isinstance(small, cst.Pass):
                    return False
        return found_import

    def imports_only_layer_norm(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return False
        if get_full_name_for_node(node.module) not in APEX_MODULES:
            return False
        for alias in node.names:
            norm = CLASSES.get(imported_name(alias))
            if norm is None or norm.torch_name != "LayerNorm" or not self.migrates(norm):
                return False
        return True

    @staticmethod
    def is_constant_assignment(small: cst.BaseSmallStatement) -> bool:
        """``APEX_AVAILABLE = True``: cannot raise."""
        if not isinstance(small, cst.Assign):
            return False
        value = small.value
        named = isinstance(value, cst.Name) and value.value in {"True", "False", "None"}
        return (named or isinstance(value, _CONSTANT)) and all(
            isinstance(t.target, cst.Name) for t in small.targets
        )

    def plan_imports(self, module: cst.Module) -> None:
        for node in m.findall(module, m.ImportFrom()):
            assert isinstance(node, cst.ImportFrom)
            if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
                continue
            if get_full_name_for_node(node.module) not in APEX_MODULES:
                continue
            inside_kept_try = self.inside_try(node) and id(node) not in self.collapsed_nodes
            suppressed = self.context.suppressions.covers(self.position(node)[0], self.CODE)
            line = self.get_metadata(ParentNodeProvider, node, None)
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) != 1 and not suppressed:
                self.report(
                    node,
                    "this apex normalization import shares its line with another statement: "
                    "put it on its own line so that it can be rewritten to torch.nn",
                )
                suppressed = True  # keep the import and every use of its names as they are
            moves: dict[str, NewHome] = {}
            for alias in node.names:
                norm = CLASSES.get(imported_name(alias))
                if norm is None or not self.migrates(norm):
                    continue
                local = local_name(alias)
                if suppressed:
                    self.kept.add(local)
                    continue
                if alias.asname is None and inside_kept_try:
                    # Its fallback still binds this name: keep it, as an alias of torch's class.
                    moves[norm.apex_name] = NewHome("torch.nn", norm.torch_name, keep_local=True)
                elif alias.asname is None and norm.torch_name in self.clashes:
                    moves[norm.apex_name] = NewHome(None, norm.torch_name)
                    self.renamed.add(local)
                else:
                    moves[norm.apex_name] = NewHome("torch.nn", norm.torch_name)
                    if alias.asname is None:
                        self.renamed.add(local)
            if moves:
                self.moves[id(node)] = moves

    def inside_try(self, node: cst.CSTNode) -> bool:
        parent = self.get_metadata(ParentNodeProvider, node, None)
        while parent is not None:
            if isinstance(parent, cst.Try):
                return True
            if isinstance(parent, cst.FunctionDef | cst.ClassDef):
                return False
            parent = self.get_metadata(ParentNodeProvider, parent, None)
        return False

    # -- imports and the fallback block ----------------------------------------------------------

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if (
            isinstance(node.names, cst.ImportStar)
            and node.module is not None
            and not node.relative
            and get_full_name_for_node(node.module) in APEX_MODULES
        ):
            self.report(
                node,
                "star import from apex's normalization: import `LayerNorm` / `RMSNorm` from "
                "`torch.nn` instead, and replace the apex names this file uses",
            )
        return False  # the names in an import are not uses

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        planned = [s for s in original_node.body if id(s) in self.moves]
        if not planned:
            return updated_node
        node = planned[0]
        assert isinstance(node, cst.ImportFrom)
        moves = self.moves[id(node)]
        self.fix(node, self.import_message(moves))
        if any(home.module is None for home in moves.values()):
            self.ensure_torch_spelling()
        statements = import_statements(updated_node, rehome_import_from(node, moves))
        if not statements:
            return cst.RemovalSentinel.REMOVE
        return cst.FlattenSentinel(statements)

    def import_message(self, moves: dict[str, NewHome]) -> str:
        parts = []
        for apex_name, home in moves.items():
            norm = CLASSES[apex_name]
            torch_name = f"torch.nn.{norm.torch_name}"
            how = "imported" if home.module is not None else "spelled out at every use"
            parts.append(f"`{apex_name}` -> `{torch_name}` ({how})")
        notes = self.class_notes([CLASSES[n] for n in moves])
        return "Ascend has no apex normalization kernels: " + ", ".join(parts) + notes

    @staticmethod
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

    def ensure_torch_spelling(self) -> None:
        if self.nn == "torch.nn":
            self.add_import("torch")

    def visit_Try(self, node: cst.Try) -> None:
        self.try_depth += 1

    def leave_Try(
        self, original_node: cst.Try, updated_node: cst.Try
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        self.try_depth -= 1
        if id(original_node) not in self.collapsible:
            return updated_node
        if not self.fix(
            original_node,
            "removed the `try`/`except` around the FusedLayerNorm import: importing LayerNorm "
            "from torch.nn cannot fail, so the fallback could never run",
        ):
            return updated_node
        statements = list(self.block_statements(updated_node.body))
        if updated_node.orelse is not None:
            statements.extend(self.block_statements(updated_node.orelse.body))
        first = statements[0]
        assert isinstance(first, cst.SimpleStatementLine)  # fallback_unreachable checked it
        statements[0] = first.with_changes(
            leading_lines=[*updated_node.leading_lines, *first.leading_lines]
        )
        return cst.FlattenSentinel(statements)

    @staticmethod
    def block_statements(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
        # fallback_unreachable only accepts indented blocks of statement lines
        assert isinstance(suite, cst.IndentedBlock)
        return suite.body

    # -- uses ------------------------------------------------------------------------------------

    def apex_name_of(self, node: cst.BaseExpression) -> str | Ambiguous | None:
        """The apex name ``node`` refers to; a name bound only inside a fallback block that
        becomes a plain import counts as that import."""
        name = self.qualified_name_in(node, ALL_NAMES)
        if isinstance(name, Ambiguous) and isinstance(node, cst.Name):
            collapsed = self.collapsed_binding(node)
            if collapsed is not None:
                return collapsed
        return name

    def collapsed_binding(self, node: cst.Name) -> str | None:
        scope = self.get_metadata(ScopeProvider, node, None)
        if scope is None:
            return None
        found: str | None = None
        for assignment in scope[node.value]:
            if (
                not isinstance(assignment, Assignment)
                or id(assignment.node) not in self.collapsed_nodes
            ):
                return None
            statement = assignment.node
            if isinstance(statement, cst.ImportFrom) and not isinstance(
                statement.names, cst.ImportStar
            ):
                module = get_full_name_for_node(statement.module) if statement.module else ""
                for alias in statement.names:
                    if local_name(alias) == node.value:
                        found = f"{module}.{imported_name(alias)}"
        return found

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if id(original_node) in self.collapsed_nodes:
            return updated_node  # in a fallback block that is removed
        context = self.get_metadata(ExpressionContextProvider, original_node, None)
        if context is not ExpressionContext.LOAD:
            return updated_node  # a class, function or variable being defined, not a use
        name = self.apex_name_of(original_node)
        if name is None:
            return updated_node
        if isinstance(name, Ambiguous):
            self.report_ambiguous(original_node, name)
            return updated_node
        norm = CLASS_BY_QUALIFIED.get(name)
        if norm is None:
            self.report(original_node, f"`{name}` has no NPU version: {FUNCTIONAL[name]}")
            return updated_node
        if not self.migrates(norm):
            self.report_unsafe(original_node, norm)
            return updated_node
        if original_node.value not in self.renamed or original_node.value != norm.apex_name:
            return updated_node  # an alias: the import was renamed, the uses stay
        if norm.torch_name in self.clashes:
            return dotted_expression(f"{self.nn}.{norm.torch_name}")
        return updated_node.with_changes(value=norm.torch_name)

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if id(original_node) in self.collapsed_nodes:
            return updated_node
        name = self.apex_name_of(original_node)
        if not isinstance(name, str):
            return updated_node
        norm = CLASS_BY_QUALIFIED.get(name)
        if norm is None:
            self.report(original_node, f"`{name}` has no NPU version: {FUNCTIONAL[name]}")
            return updated_node
        if not self.migrates(norm):
            self.report_unsafe(original_node, norm)
            return updated_node
        torch_name = f"torch.nn.{norm.torch_name}"
        message = f"replaced `{name}` with `{torch_name}`" + self.class_notes([norm])
        if not self.fix(original_node, message):
            return updated_node
        self.ensure_torch_spelling()
        queue_removal_of_base_import(self, original_node)
        return dotted_expression(f"{self.nn}.{norm.torch_name}")

    def report_ambiguous(self, node: cst.CSTNode, name: Ambiguous) -> None:
        self.report(
            node,
            f"cannot tell whether `{source_of(node)}` is apex's normalization: {name.describe()}; "
            "if it is, use `torch.nn.LayerNorm` / `torch.nn.RMSNorm` (with `eps=1e-5`) and drop "
            "`memory_efficient`",
        )

    def report_unsafe(self, node: cst.CSTNode, norm: NormClass) -> None:
        self.report(
            node,
            f"`{norm.apex_name}` returns the weight's dtype; `torch.nn.{norm.torch_name}` returns "
            "the input's. Replace it by hand (or run with --unsafe-fixes) and cast the output "
            "if the next layer needs the weight's dtype",
        )

    # -- calls and subclasses --------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        base_norm: NormClass | None = None
        for base in node.bases:
            name = self.apex_name_of(base.value)
            if isinstance(name, str) and name in CLASS_BY_QUALIFIED:
                norm = CLASS_BY_QUALIFIED[name]
                base_norm = norm if self.migrates(norm) else None
        self.subclass_stack.append(base_norm)

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.BaseStatement:
        self.subclass_stack.pop()
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if id(original_node) in self.collapsed_nodes:
            return updated_node
        norm = self.called_class(original_node)
        if norm is None:
            return updated_node
        if any(arg.star for arg in original_node.args):
            self.report(
                original_node,
                f"check that `{source_of(next(a for a in original_node.args if a.star))}` passes "
                f"no `memory_efficient` (torch.nn.{norm.torch_name} does not take it)"
                + (" and pass `eps=1e-5` unless it sets eps" if norm.needs_eps else ""),
            )
            return updated_node
        doomed = self.memory_efficient_args(original_node)
        add_eps = norm.needs_eps and not self.passes_eps(original_node)
        if not doomed and not add_eps:
            return updated_node
        notes = []
        if doomed:
            notes.append(
                f"dropped `memory_efficient={source_of(doomed[0].value)}`: torch.nn."
                f"{norm.torch_name} has no such option (apex used it to recompute activations "
                "in backward and save memory; the results are the same)"
            )
        if add_eps:
            notes.append(
                f"passed apex's default `eps={APEX_EPS}`: torch.nn.RMSNorm's default is the "
                "dtype's machine epsilon"
            )
        if not self.fix(original_node, "; ".join(notes)):
            return updated_node
        indexes = [i for i, arg in enumerate(original_node.args) if any(arg is d for d in doomed)]
        call = remove_arg_objects(updated_node, [updated_node.args[i] for i in indexes])
        if add_eps:
            call = append_arg(call, keyword("eps", cst.Float(APEX_EPS)))
        return call

    def called_class(self, call: cst.Call) -> NormClass | None:
        """The migrated apex class this call constructs (or initialises, via super())."""
        if m.matches(call, SUPER_INIT):
            return self.subclass_stack[-1] if self.subclass_stack else None
        name = self.apex_name_of(call.func)
        if not isinstance(name, str) or name not in CLASS_BY_QUALIFIED:
            return None
        norm = CLASS_BY_QUALIFIED[name]
        if not self.migrates(norm):
            return None
        if isinstance(call.func, cst.Name) and call.func.value in self.kept:
            return None
        return norm

    @staticmethod
    def memory_efficient_args(call: cst.Call) -> list[cst.Arg]:
        by_keyword = find_keyword(call, "memory_efficient")
        if by_keyword is not None:
            return [by_keyword]
        args = positional(call)
        return [args[MEMORY_EFFICIENT_POSITION]] if len(args) > MEMORY_EFFICIENT_POSITION else []

    @staticmethod
    def passes_eps(call: cst.Call) -> bool:
        return find_keyword(call, "eps") is not None or len(positional(call)) > EPS_POSITION
