"""NPU201's analysis, the "analyse -> plan" half: what becomes torch's LayerNorm / RMSNorm,
and what is reported instead, and why.

:func:`plan_layer_norm` reads a file through its :class:`~migrator.analysis.view.FileView` and
returns a :class:`LayerNormPlan`: the apex imports rewritten to ``torch.nn`` (with the uses of
the names they bind that get renamed), the ``apex.normalization.X`` accesses spelled as torch's,
the calls whose arguments change (``memory_efficient`` dropped, apex's ``eps`` passed to
``RMSNorm``), the ``try``/``except ImportError`` blocks whose fallback can no longer run (they
collapse to their body), and every use that is reported instead (a star import, an import that
shares its line, an ambiguous name, a ``MixedFused*`` class without ``--unsafe-fixes``, a
functional form, a call with ``*args``). No libcst and no diagnostics: the rule
(``npu201_fused_layer_norm``) turns the plan into fixes, reports and edits.

Not a rule (it defines no ``Rule`` subclass); the registry imports it and finds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from migrator.analysis.calls import Argument, arguments, positional, string_literal
from migrator.analysis.calls import keyword as keyword_argument
from migrator.analysis.names import Ambiguous, compared_with_none
from migrator.analysis.view import FileView
from migrator.rules.normalization_parallel._common import (
    APEX_ROOTS,
    ImportToRemove,
    NewHome,
    absolute_module,
    alone_on_its_line,
    base_import_removal,
    binding_imports,
    bound_name,
    candidate_attributes,
    candidate_names,
    is_star,
    start_then_end,
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
# The functional forms, reported with their torch equivalent: qualified name -> advice.
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
# Where `super().__init__(...)` of a subclass of an apex class needs the same argument fixes.
SUPER = "super"
INIT = "__init__"
# Short names of everything this rule resolves: only attributes spelled so can be apex's.
ATTRIBUTE_NAMES = frozenset(name.rpartition(".")[2] for name in ALL_NAMES)
TORCH_CLASS_NAMES = frozenset(norm.torch_name for norm in CLASSES.values())


# -- the plan: what is rewritten -----------------------------------------------------------------


@dataclass(frozen=True)
class UseRename:
    """A use of a name an apex import binds without ``as``, renamed with that import: to the
    torch class's name, or, ``spelled_out``, to its dotted path (the file binds the short name
    to something else)."""

    name: ast.Name
    becomes: str
    spelled_out: bool


@dataclass(frozen=True)
class ImportRewrite:
    """A ``from apex.normalization... import`` rewritten to import from ``torch.nn``."""

    statement: ast.ImportFrom
    moves: Mapping[str, NewHome]  # apex class name -> its new home
    renamed_uses: tuple[UseRename, ...] = ()

    @property
    def spells_out(self) -> bool:
        """Some name is dropped from the import: its uses spell torch.nn out."""
        return any(home.module is None for home in self.moves.values())


@dataclass(frozen=True)
class AttributeRewrite:
    """``apex.normalization.FusedLayerNorm`` -> ``torch.nn.LayerNorm`` (``becomes``, in the
    file's spelling of torch.nn); ``base_import`` is the import it went through, which goes
    when nothing else uses it."""

    node: ast.Attribute
    apex_name: str  # the qualified name
    norm: NormClass
    becomes: str
    base_import: ImportToRemove | None


@dataclass(frozen=True)
class CallRewrite:
    """A call of a migrated class (or ``super().__init__`` in its subclass) whose arguments
    change: ``memory_efficient`` dropped (``dropped``), apex's eps passed (``add_eps``)."""

    call: ast.Call
    norm: NormClass
    dropped: tuple[Argument, ...]
    add_eps: bool


# -- the plan: what is reported ------------------------------------------------------------------


@dataclass(frozen=True)
class StarImport:
    """``from apex.normalization import *``: the names it binds are unknown."""

    statement: ast.ImportFrom


@dataclass(frozen=True)
class SharedLineImport:
    """An apex import that shares its line with another statement: it cannot become several
    lines; it and every use of its names stay."""

    statement: ast.ImportFrom


@dataclass(frozen=True)
class AmbiguousName:
    """A name that may be apex's normalization (a fallback, a value alias...)."""

    node: ast.AST
    ambiguity: Ambiguous


@dataclass(frozen=True)
class UnsafeClass:
    """A ``MixedFused*`` class without ``--unsafe-fixes``: torch's returns another dtype."""

    node: ast.AST
    norm: NormClass


@dataclass(frozen=True)
class NoNpuVersion:
    """A functional form (``fused_layer_norm_affine``, ``FusedLayerNormAffineFunction``...)."""

    node: ast.AST
    name: str  # the qualified name, a key of FUNCTIONAL

    @property
    def advice(self) -> str:
        return FUNCTIONAL[self.name]


@dataclass(frozen=True)
class StarredArguments:
    """A call of a migrated class with ``*args`` / ``**kwargs``: what it passes is unknown."""

    call: ast.Call
    norm: NormClass
    starred: Argument


Unmigrated = StarImport | SharedLineImport | AmbiguousName | UnsafeClass | NoNpuVersion
Rewrite = ImportRewrite | AttributeRewrite | CallRewrite
_REWRITES = (ImportRewrite, AttributeRewrite, CallRewrite)
Decision = Rewrite | Unmigrated | StarredArguments


@dataclass(frozen=True)
class LayerNormPlan:
    """NPU201's plan for a file, in the order the rule acts on it."""

    nn: str  # how the file spells torch.nn: `nn` or `torch.nn`
    imports: tuple[ImportRewrite | StarImport | SharedLineImport, ...] = ()
    names: tuple[AmbiguousName | UnsafeClass | NoNpuVersion, ...] = ()  # uses reported
    attributes: tuple[AttributeRewrite | UnsafeClass | NoNpuVersion, ...] = ()
    calls: tuple[CallRewrite | StarredArguments, ...] = ()
    collapsed: tuple[ast.Try, ...] = ()  # try statements whose fallback cannot run

    @property
    def rewrites(self) -> list[Rewrite]:
        """Every decision that edits the file, but the collapsed try statements."""
        found = [*self.imports, *self.attributes, *self.calls]
        return [d for d in found if isinstance(d, _REWRITES)]

    @property
    def reported(self) -> list[Unmigrated | StarredArguments]:
        """Every decision that reports instead of editing."""
        found = [*self.imports, *self.names, *self.attributes, *self.calls]
        return [d for d in found if not isinstance(d, _REWRITES)]


def plan_layer_norm(
    view: FileView,
    *,
    unsafe_fixes: bool = False,
    suppressed: Callable[[int], bool] = lambda line: False,
) -> LayerNormPlan:
    """NPU201's plan for the file of ``view``. ``unsafe_fixes`` migrates the ``MixedFused*``
    classes too; ``suppressed`` tells the lines where NPU201 is suppressed (an import kept
    there keeps its names, and a try around it keeps its fallback)."""
    return LayerNormPlanner(view, unsafe_fixes, suppressed).plan()


# -- the planner ---------------------------------------------------------------------------------


class LayerNormPlanner:
    """Builds a :class:`LayerNormPlan` (see :func:`plan_layer_norm`)."""

    def __init__(
        self, view: FileView, unsafe_fixes: bool, suppressed: Callable[[int], bool]
    ) -> None:
        self.view = view
        self.index = view.index
        self.unsafe_fixes = unsafe_fixes
        self.is_suppressed = suppressed
        self.nn = "torch.nn"  # how the file spells torch.nn (see plan)
        self.clashes: set[str] = set()  # torch class names the file binds to something else
        self.collapsible: dict[int, ast.Try] = {}  # id(Try) -> a try whose fallback can't run
        self.moves: dict[int, dict[str, NewHome]] = {}  # id(ImportFrom) -> its names' homes
        self.renamed_uses: dict[int, list[UseRename]] = {}  # id(ImportFrom) -> renamed uses
        self.renamed: set[str] = set()  # apex names imported without alias, uses get renamed
        self.kept: set[str] = set()  # local names whose import stays (suppressed)
        self.subclasses: dict[int, NormClass | None] = {}  # id(ClassDef) -> its apex base

    def plan(self) -> LayerNormPlan:
        self.nn = torch_nn_prefix(self.view)
        for statement in self.index.nodes(ast.Try):
            if self.fallback_unreachable(statement):
                self.collapsible[id(statement)] = statement
        imports = self.plan_imports()
        names = tuple(self.plan_names())  # before the imports are frozen: renamed uses go there
        return LayerNormPlan(
            nn=self.nn,
            imports=tuple(self.with_renamed_uses(decision) for decision in imports),
            names=names,
            attributes=tuple(self.plan_attributes()),
            calls=tuple(self.plan_calls()),
            collapsed=tuple(self.collapsible.values()),
        )

    def migrates(self, norm: NormClass) -> bool:
        return not norm.unsafe or self.unsafe_fixes

    def suppressed(self, node: ast.AST) -> bool:
        return self.is_suppressed(self.view.position(node).line)

    # -- try blocks whose fallback cannot run ----------------------------------------------------

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
        literal = string_literal(self.view.source, value)
        return isinstance(value.value, str | bytes) and literal is not None

    def in_collapsed(self, node: ast.AST) -> bool:
        """Whether ``node`` is inside a try statement that goes away (its fallback with it)."""
        if id(node) in self.collapsible:
            return True
        return any(id(ancestor) in self.collapsible for ancestor in self.index.ancestors(node))

    # -- imports ---------------------------------------------------------------------------------

    def plan_imports(self) -> list[ImportRewrite | StarImport | SharedLineImport]:
        statements = [
            statement
            for statement in self.index.nodes(ast.ImportFrom)
            if absolute_module(statement) in APEX_MODULES
        ]
        if statements:  # only an import from apex is renamed, or spelled out on a clash
            self.clashes = {name for name in TORCH_CLASS_NAMES if self.clashes_with_torch(name)}
        decisions: list[ImportRewrite | StarImport | SharedLineImport] = []
        for statement in statements:
            if is_star(statement):
                decisions.append(StarImport(statement))
                continue
            shares_line = not self.suppressed(statement) and not alone_on_its_line(
                self.view, statement
            )
            if shares_line:
                decisions.append(SharedLineImport(statement))
            moves = self.import_moves(statement, kept=shares_line or self.suppressed(statement))
            if moves:
                self.moves[id(statement)] = moves
                decisions.append(ImportRewrite(statement, moves))
        return decisions

    def import_moves(self, statement: ast.ImportFrom, kept: bool) -> dict[str, NewHome]:
        """Where each migrated name of ``statement`` goes; none when the import is ``kept``
        (suppressed, or sharing its line), which keeps every use of its names too."""
        inside_kept_try = self.inside_try(statement) and not self.in_collapsed(statement)
        moves: dict[str, NewHome] = {}
        for alias in statement.names:
            norm = CLASSES.get(alias.name)
            if norm is None or not self.migrates(norm):
                continue
            local = bound_name(alias)
            if kept:
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

    def with_renamed_uses(
        self, decision: ImportRewrite | StarImport | SharedLineImport
    ) -> ImportRewrite | StarImport | SharedLineImport:
        if not isinstance(decision, ImportRewrite):
            return decision
        uses = tuple(self.renamed_uses.get(id(decision.statement), ()))
        return ImportRewrite(decision.statement, decision.moves, uses)

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

    def inside_try(self, statement: ast.stmt) -> bool:
        for ancestor in self.index.ancestors(statement):
            if isinstance(ancestor, ast.Try):
                return True
            if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                return False
        return False

    # -- names -----------------------------------------------------------------------------------

    def apex_name_of(self, node: ast.AST) -> str | Ambiguous | None:
        """The apex name ``node`` refers to; a name bound only inside a fallback block that
        becomes a plain import counts as that import."""
        name = self.view.qualified_name_in(node, ALL_NAMES)
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

    def plan_names(self) -> Iterator[AmbiguousName | UnsafeClass | NoNpuVersion]:
        """The uses reported; the uses renamed are queued with the import that binds them."""
        for node in candidate_names(self.view):
            if not isinstance(node.ctx, ast.Load) or self.in_collapsed(node):
                continue
            if compared_with_none(self.index, node):
                continue  # `if FusedLayerNorm is None:` tests an optional import
            name = self.apex_name_of(node)
            if name is None:
                continue
            if isinstance(name, Ambiguous):
                yield AmbiguousName(node, name)
                continue
            norm = CLASS_BY_QUALIFIED.get(name)
            if norm is None:
                yield NoNpuVersion(node, name)
            elif not self.migrates(norm):
                yield UnsafeClass(node, norm)
            elif node.id in self.renamed and node.id == norm.apex_name:
                self.queue_rename(node, norm)
            # else an alias: the import is renamed, the uses stay

    def queue_rename(self, node: ast.Name, norm: NormClass) -> None:
        """Rename a use with the rewrite of the import that binds it."""
        spelled_out = norm.torch_name in self.clashes
        becomes = f"{self.nn}.{norm.torch_name}" if spelled_out else norm.torch_name
        rename = UseRename(node, becomes, spelled_out)
        for statement in binding_imports(self.view, node):
            moves = self.moves.get(id(statement))
            if moves is not None and norm.apex_name in moves:
                self.renamed_uses.setdefault(id(statement), []).append(rename)
                return

    # -- attributes ------------------------------------------------------------------------------

    def plan_attributes(self) -> Iterator[AttributeRewrite | UnsafeClass | NoNpuVersion]:
        for node in candidate_attributes(self.view, ATTRIBUTE_NAMES):
            if self.in_collapsed(node):
                continue
            name = self.apex_name_of(node)
            if not isinstance(name, str):
                continue
            norm = CLASS_BY_QUALIFIED.get(name)
            if norm is None:
                yield NoNpuVersion(node, name)
            elif not self.migrates(norm):
                yield UnsafeClass(node, norm)
            else:
                removal = base_import_removal(self.view, node)
                yield AttributeRewrite(node, name, norm, f"{self.nn}.{norm.torch_name}", removal)

    # -- calls and subclasses --------------------------------------------------------------------

    def plan_calls(self) -> Iterator[CallRewrite | StarredArguments]:
        calls = {id(call): call for call in self.view.calls_to(APEX_ROOTS)}
        calls.update((id(call), call) for call in self.super_init_calls())
        # inner calls first (`FusedLayerNorm(8)(x)`), as a bottom-up visit leaves them
        for call in sorted(calls.values(), key=start_then_end):
            if self.in_collapsed(call):
                continue
            norm = self.called_class(call)
            if norm is not None:
                decision = self.plan_call(call, norm)
                if decision is not None:
                    yield decision

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

    @staticmethod
    def plan_call(call: ast.Call, norm: NormClass) -> CallRewrite | StarredArguments | None:
        starred = next((argument for argument in arguments(call) if argument.star), None)
        if starred is not None:
            return StarredArguments(call, norm, starred)
        dropped = _memory_efficient_args(call)
        add_eps = norm.needs_eps and not _passes_eps(call)
        if not dropped and not add_eps:
            return None
        return CallRewrite(call, norm, tuple(dropped), add_eps)


# -- small ast helpers ---------------------------------------------------------------------------


def _memory_efficient_args(call: ast.Call) -> list[Argument]:
    by_keyword = keyword_argument(call, "memory_efficient")
    if by_keyword is not None:
        return [by_keyword]
    given = positional(call)
    return [given[MEMORY_EFFICIENT_POSITION]] if len(given) > MEMORY_EFFICIENT_POSITION else []


def _passes_eps(call: ast.Call) -> bool:
    return keyword_argument(call, "eps") is not None or len(positional(call)) > EPS_POSITION


def _is_super(node: ast.AST) -> bool:
    """``super()`` (with or without arguments)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == SUPER


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
