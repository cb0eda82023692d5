"""NPU201: apex `FusedLayerNorm` / `FusedRMSNorm` -> `torch.nn.LayerNorm` / `torch.nn.RMSNorm`."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from migrator.analysis.calls import Argument, arguments, positional, string_literal
from migrator.analysis.calls import keyword as keyword_argument
from migrator.analysis.names import Ambiguous, compared_with_none
from migrator.callargs import append_arg, keyword, remove_arg_objects
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FileContext, FixSafety, Rule
from migrator.rules.normalization_parallel._common import (
    APEX_ROOTS,
    NewHome,
    absolute_module,
    alone_on_its_line,
    argument_code,
    binding_imports,
    bound_name,
    candidate_attributes,
    candidate_names,
    dotted_expression,
    is_star,
    queue_removal_of_base_import,
    rehome_statement,
    starts_its_line,
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
# Where `super().__init__(...)` of a subclass of an apex class needs the same argument fixes.
SUPER = "super"
INIT = "__init__"
# Short names of everything this rule resolves: only attributes spelled so can be apex's.
ATTRIBUTE_NAMES = frozenset(name.rpartition(".")[2] for name in ALL_NAMES)
TORCH_CLASS_NAMES = frozenset(norm.torch_name for norm in CLASSES.values())


@dataclass
class ImportPlan:
    """One `from apex.normalization... import` statement that is rewritten to torch.nn."""

    statement: ast.ImportFrom
    moves: dict[str, NewHome]  # apex class name -> its new home
    uses: list[Edit] = field(default_factory=list)  # renamed uses of the names it binds


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

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.nn = "torch.nn"
        self.clashes: set[str] = set()  # torch class names the file binds to something else
        self.collapsible: dict[int, ast.Try] = {}  # id(Try) -> a try whose fallback can't run
        self.imports: dict[int, ImportPlan] = {}  # id(ImportFrom) -> how it is rewritten
        self.renamed: set[str] = set()  # apex names imported without alias, uses get renamed
        self.kept: set[str] = set()  # local names whose import stays (suppressed)
        self.subclasses: dict[int, NormClass | None] = {}  # id(ClassDef) -> its apex base

    def migrates(self, norm: NormClass) -> bool:
        return not norm.unsafe or self.settings.unsafe_fixes

    def check(self) -> None:
        self.nn = torch_nn_prefix(self.view)
        for statement in self.index.nodes(ast.Try):
            if self.fallback_unreachable(statement):
                self.collapsible[id(statement)] = statement
        self.plan_imports()
        self.check_names()  # before the import fixes: the renamed uses go with them
        self.fix_imports()
        self.check_attributes()  # before the calls: same order as a bottom-up visit
        self.check_calls()
        self.collapse_fallbacks()

    # -- planning --------------------------------------------------------------------------------

    def clashes_with_torch(self, target: str) -> bool:
        """``LayerNorm`` / ``RMSNorm`` bound (in any scope) to something other than torch's class
        or the apex class that becomes it."""
        index = self.index
        if any(isinstance(name.ctx, ast.Store) for name in index.names(target)):
            return True
        definitions: list[ast.AST] = [
            *index.nodes(ast.ClassDef),
            *index.nodes(ast.FunctionDef),
            *index.nodes(ast.AsyncFunctionDef),
            *index.nodes(ast.ExceptHandler),
            *index.nodes(ast.MatchAs),
            *index.nodes(ast.MatchStar),
        ]
        if any(getattr(node, "name", None) == target for node in definitions):
            return True
        if any(parameter.arg == target for parameter in index.nodes(ast.arg)):
            return True
        for statement in index.imports():
            for alias in statement.names:
                if alias.name == "*":
                    continue
                binds = [alias.asname] if alias.asname else _bound_prefixes(statement, alias)
                if target in binds and not _binds_torch_or_apex(statement, alias, target):
                    return True
        return False

    def fallback_unreachable(self, statement: ast.Try) -> bool:
        """The try body will only import torch.nn.LayerNorm (and set constants): it cannot raise,
        so no handler can run. Not for RMSNorm: torch before 2.4 has none, so its fallback
        stays reachable."""
        if statement.finalbody or not statement.handlers:
            return False
        # Indented blocks only (`try: x` on one line is left alone), so that their statement
        # lines can take the place of the whole statement.
        if not starts_its_line(self.view, statement.body[0]):
            return False
        if statement.orelse and not starts_its_line(self.view, statement.orelse[0]):
            return False
        found_import = False
        for small in statement.body:
            if isinstance(small, ast.ImportFrom) and self.imports_only_layer_norm(small):
                found_import = True
                if self.suppressed(small):
                    return False
            elif not self.is_constant_assignment(small) and not isinstance(small, ast.Pass):
                return False
        return found_import

    def imports_only_layer_norm(self, statement: ast.ImportFrom) -> bool:
        if absolute_module(statement) not in APEX_MODULES or is_star(statement):
            return False
        for alias in statement.names:
            norm = CLASSES.get(alias.name)
            if norm is None or norm.torch_name != "LayerNorm" or not self.migrates(norm):
                return False
        return True

    def is_constant_assignment(self, statement: ast.stmt) -> bool:
        """``APEX_AVAILABLE = True``: cannot raise."""
        if not isinstance(statement, ast.Assign) or not all(
            isinstance(target, ast.Name) for target in statement.targets
        ):
            return False
        value = statement.value
        if not isinstance(value, ast.Constant):
            return False
        if value.value is None or isinstance(value.value, bool | int | float):
            return True
        # one string token (libcst's SimpleString), not an implicit concatenation
        literal = string_literal(self.source, value)
        return isinstance(value.value, str | bytes) and literal is not None

    def plan_imports(self) -> None:
        statements = [
            statement
            for statement in self.index.nodes(ast.ImportFrom)
            if absolute_module(statement) in APEX_MODULES
        ]
        if statements:  # only an import from apex is renamed, or spelled out on a clash
            self.clashes = {name for name in TORCH_CLASS_NAMES if self.clashes_with_torch(name)}
        for statement in statements:
            if is_star(statement):
                self.report(
                    statement,
                    "star import from apex's normalization: import `LayerNorm` / `RMSNorm` from "
                    "`torch.nn` instead, and replace the apex names this file uses",
                )
                continue
            moves = self.import_moves(statement)
            if moves:
                self.imports[id(statement)] = ImportPlan(statement, moves)

    def import_moves(self, statement: ast.ImportFrom) -> dict[str, NewHome]:
        inside_kept_try = self.inside_try(statement) and not self.in_collapsed(statement)
        suppressed = self.suppressed(statement)
        if not suppressed and not alone_on_its_line(self.view, statement):
            self.report(
                statement,
                "this apex normalization import shares its line with another statement: "
                "put it on its own line so that it can be rewritten to torch.nn",
            )
            suppressed = True  # keep the import and every use of its names as they are
        moves: dict[str, NewHome] = {}
        for alias in statement.names:
            norm = CLASSES.get(alias.name)
            if norm is None or not self.migrates(norm):
                continue
            local = bound_name(alias)
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
        return moves

    def inside_try(self, statement: ast.stmt) -> bool:
        for ancestor in self.index.ancestors(statement):
            if isinstance(ancestor, ast.Try):
                return True
            if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                return False
        return False

    def in_collapsed(self, node: ast.AST) -> bool:
        """Whether ``node`` is inside a try statement that goes away (its fallback with it)."""
        if id(node) in self.collapsible:
            return True
        return any(id(ancestor) in self.collapsible for ancestor in self.index.ancestors(node))

    # -- imports and the fallback block ----------------------------------------------------------

    def fix_imports(self) -> None:
        for plan in self.imports.values():
            statement = plan.statement
            edit = rehome_statement(self, statement, plan.moves)
            if not self.fix(statement, self.import_message(plan.moves), edit, *plan.uses):
                continue
            if any(home.module is None for home in plan.moves.values()):
                self.ensure_torch_spelling()

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

    def collapse_fallbacks(self) -> None:
        for statement in self.collapsible.values():
            self.fix(
                statement,
                "removed the `try`/`except` around the FusedLayerNorm import: importing LayerNorm "
                "from torch.nn cannot fail, so the fallback could never run",
                self.replace_statement(statement, collapse_try),
            )

    # -- uses ------------------------------------------------------------------------------------

    def apex_name_of(self, node: ast.AST) -> str | Ambiguous | None:
        """The apex name ``node`` refers to; a name bound only inside a fallback block that
        becomes a plain import counts as that import."""
        name = self.qualified_name_in(node, ALL_NAMES)
        if isinstance(name, Ambiguous) and isinstance(node, ast.Name):
            collapsed = self.collapsed_binding(node)
            if collapsed is not None:
                return collapsed
        return name

    def collapsed_binding(self, node: ast.Name) -> str | None:
        """The apex class a name stands for when every binding of it is in a try statement that
        goes away: the apex import of its body becomes the only one (what the fallback imports
        or defines is gone)."""
        found: str | None = None
        for binding in self.index.bindings_of(node):
            if binding.node is None or not self.in_collapsed(binding.node):
                return None
            statement = binding.node
            if isinstance(statement, ast.ImportFrom) and not is_star(statement):
                for alias in statement.names:
                    name = f"{statement.module or ''}.{alias.name}"
                    if bound_name(alias) == node.id and name in CLASS_BY_QUALIFIED:
                        found = name
        return found

    def check_names(self) -> None:
        for name in candidate_names(self):
            if isinstance(name.ctx, ast.Load) and not self.in_collapsed(name):
                self.check_name(name)

    def check_name(self, node: ast.Name) -> None:
        if compared_with_none(self.index, node):
            return  # `if FusedLayerNorm is None:` tests an optional import, nothing to migrate
        name = self.apex_name_of(node)
        if name is None:
            return
        if isinstance(name, Ambiguous):
            self.report_ambiguous(node, name)
            return
        norm = CLASS_BY_QUALIFIED.get(name)
        if norm is None:
            self.report(node, f"`{name}` has no NPU version: {FUNCTIONAL[name]}")
        elif not self.migrates(norm):
            self.report_unsafe(node, norm)
        elif node.id in self.renamed and node.id == norm.apex_name:
            self.rename_use(node, norm)
        # else an alias: the import is renamed, the uses stay

    def rename_use(self, node: ast.Name, norm: NormClass) -> None:
        """Queue the renaming of a use with the fix of the import that binds it."""
        if norm.torch_name in self.clashes:
            replacement = f"{self.nn}.{norm.torch_name}"

            def rename(name: cst.Name) -> cst.BaseExpression:
                return dotted_expression(replacement)

        else:

            def rename(name: cst.Name) -> cst.BaseExpression:
                return name.with_changes(value=norm.torch_name)

        for statement in binding_imports(self.view, node):
            plan = self.imports.get(id(statement))
            if plan is not None and norm.apex_name in plan.moves:
                plan.uses.append(self.replace(node, cst.Name, rename))
                return

    def check_attributes(self) -> None:
        for attribute in candidate_attributes(self.view, ATTRIBUTE_NAMES):
            if not self.in_collapsed(attribute):
                self.check_attribute(attribute)

    def check_attribute(self, node: ast.Attribute) -> None:
        name = self.apex_name_of(node)
        if not isinstance(name, str):
            return
        norm = CLASS_BY_QUALIFIED.get(name)
        if norm is None:
            self.report(node, f"`{name}` has no NPU version: {FUNCTIONAL[name]}")
            return
        if not self.migrates(norm):
            self.report_unsafe(node, norm)
            return
        torch_name = f"torch.nn.{norm.torch_name}"
        message = f"replaced `{name}` with `{torch_name}`" + self.class_notes([norm])
        replacement = f"{self.nn}.{norm.torch_name}"
        edit = self.replace(node, cst.Attribute, lambda _: dotted_expression(replacement))
        if self.fix(node, message, edit):
            self.ensure_torch_spelling()
            queue_removal_of_base_import(self, node)

    def report_ambiguous(self, node: ast.AST, name: Ambiguous) -> None:
        self.report(
            node,
            f"cannot tell whether `{self.view.written(node)}` is apex's normalization: "
            f"{name.describe()}; if it is, use `torch.nn.LayerNorm` / `torch.nn.RMSNorm` (with "
            "`eps=1e-5`) and drop `memory_efficient`",
        )

    def report_unsafe(self, node: ast.AST, norm: NormClass) -> None:
        self.report(
            node,
            f"`{norm.apex_name}` returns the weight's dtype; `torch.nn.{norm.torch_name}` returns "
            "the input's. Replace it by hand (or run with --unsafe-fixes) and cast the output "
            "if the next layer needs the weight's dtype",
        )

    # -- calls and subclasses --------------------------------------------------------------------

    def check_calls(self) -> None:
        calls = {id(call): call for call in self.calls_to(APEX_ROOTS)}
        calls.update((id(call), call) for call in self.super_init_calls())
        # inner calls first (`FusedLayerNorm(8)(x)`), as a bottom-up visit leaves them
        for call in sorted(calls.values(), key=_start_then_end):
            if self.in_collapsed(call):
                continue
            norm = self.called_class(call)
            if norm is not None:
                self.check_call(call, norm)

    def super_init_calls(self) -> Iterator[ast.Call]:
        for attribute in self.index.attributes(INIT):
            call = self.index.parent(attribute)
            if isinstance(call, ast.Call) and call.func is attribute and _is_super(attribute.value):
                yield call

    def called_class(self, call: ast.Call) -> NormClass | None:
        """The migrated apex class this call constructs (or initialises, via super())."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == INIT and _is_super(func.value):
            classdef = next(
                (a for a in self.index.ancestors(call) if isinstance(a, ast.ClassDef)), None
            )
            return None if classdef is None else self.subclass_norm(classdef)
        name = self.apex_name_of(func)
        if not isinstance(name, str) or name not in CLASS_BY_QUALIFIED:
            return None
        norm = CLASS_BY_QUALIFIED[name]
        if not self.migrates(norm):
            return None
        if isinstance(func, ast.Name) and func.id in self.kept:
            return None
        return norm

    def subclass_norm(self, classdef: ast.ClassDef) -> NormClass | None:
        """The migrated apex class that ``classdef`` derives from (the last such base)."""
        if id(classdef) not in self.subclasses:
            base_norm: NormClass | None = None
            for base in classdef.bases:
                expression = base.value if isinstance(base, ast.Starred) else base
                name = self.apex_name_of(expression)
                if isinstance(name, str) and name in CLASS_BY_QUALIFIED:
                    norm = CLASS_BY_QUALIFIED[name]
                    base_norm = norm if self.migrates(norm) else None
            self.subclasses[id(classdef)] = base_norm
        return self.subclasses[id(classdef)]

    def check_call(self, call: ast.Call, norm: NormClass) -> None:
        given = arguments(call)
        starred = next((argument for argument in given if argument.star), None)
        if starred is not None:
            self.report(
                call,
                f"check that `{argument_code(self.view, starred)}` passes no `memory_efficient` "
                f"(torch.nn.{norm.torch_name} does not take it)"
                + (" and pass `eps=1e-5` unless it sets eps" if norm.needs_eps else ""),
            )
            return
        doomed = self.memory_efficient_args(call)
        add_eps = norm.needs_eps and not self.passes_eps(call)
        if not doomed and not add_eps:
            return
        notes = []
        if doomed:
            notes.append(
                f"dropped `memory_efficient={self.view.written(doomed[0].value)}`: torch.nn."
                f"{norm.torch_name} has no such option (apex used it to recompute activations "
                "in backward and save memory; the results are the same)"
            )
        if add_eps:
            notes.append(
                f"passed apex's default `eps={APEX_EPS}`: torch.nn.RMSNorm's default is the "
                "dtype's machine epsilon"
            )
        edit = self.replace(call, cst.Call, fix_arguments([a.index for a in doomed], add_eps))
        self.fix(call, "; ".join(notes), edit)

    @staticmethod
    def memory_efficient_args(call: ast.Call) -> list[Argument]:
        by_keyword = keyword_argument(call, "memory_efficient")
        if by_keyword is not None:
            return [by_keyword]
        given = positional(call)
        return [given[MEMORY_EFFICIENT_POSITION]] if len(given) > MEMORY_EFFICIENT_POSITION else []

    @staticmethod
    def passes_eps(call: ast.Call) -> bool:
        return keyword_argument(call, "eps") is not None or len(positional(call)) > EPS_POSITION


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


# -- small ast helpers ---------------------------------------------------------------------------


def _is_super(node: ast.AST) -> bool:
    """``super()`` (with or without arguments)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == SUPER


def _start_then_end(node: ast.AST) -> tuple[int, int, int, int]:
    return (
        node.lineno,  # type: ignore[attr-defined]
        node.col_offset,  # type: ignore[attr-defined]
        node.end_lineno or 0,  # type: ignore[attr-defined]
        node.end_col_offset or 0,  # type: ignore[attr-defined]
    )


def _bound_prefixes(statement: ast.Import | ast.ImportFrom, alias: ast.alias) -> list[str]:
    """The names an alias without ``as`` binds (``import a.b`` binds ``a.b`` and ``a``)."""
    if isinstance(statement, ast.ImportFrom):
        return [alias.name]
    parts = alias.name.split(".")
    return [".".join(parts[:length]) for length in range(len(parts), 0, -1)]


def _binds_torch_or_apex(
    statement: ast.Import | ast.ImportFrom, alias: ast.alias, target: str
) -> bool:
    """``from torch.nn import LayerNorm``, or an apex class that becomes ``target``."""
    if not isinstance(statement, ast.ImportFrom):
        return False
    # as libcst spells the module: without the dots of a relative import
    module = statement.module or ""
    if module == "torch.nn" and alias.name == target:
        return True
    if module in APEX_MODULES and alias.name in CLASSES:
        return CLASSES[alias.name].torch_name == target
    return False
