"""Which ``FP16_Optimizer`` wrappers become amp O2, and how: NPU106's analysis. Not a rule.

NVIDIA's ``apex.fp16_utils.FP16_Optimizer(optimizer, static_loss_scale=...,
dynamic_loss_scale=...)`` around a model cast with ``model.half()`` keeps fp32 master weights,
scales the loss in ``optimizer.backward(loss)`` and steps the wrapped optimizer on the masters:
what
``amp.initialize(model, optimizer, opt_level="O2", keep_batchnorm_fp32=False, loss_scale=...)``
and ``amp.scale_loss`` do. :func:`fp16_sites` finds every wrapper of a file and works out, on the
original ``ast``, whether it can be rewritten so (its :class:`Fp16Site` has no ``blockers``),
whether the rewrite keeps the arithmetic (no ``differences``) and what the edits are made of.

NPU106 rewrites from it; NPU101, once it reads NPU106's run plan, plans the wrapped optimizers
from the same answer (the analysis is kept per file, so both rules see one result).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from migrator.analysis.calls import NOT_LITERAL, Argument, arguments, literal_value
from migrator.analysis.index import line_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import reaching_definitions
from migrator.analysis.scopes import BindingKind, Scope, ScopeKind
from migrator.analysis.view import FileView
from migrator.rules.optimizers._flow import OptimizerFlow

# apex.fp16_utils' wrapper: the one rewritten.
FP16_UTILS = frozenset(
    {"apex.fp16_utils.FP16_Optimizer", "apex.fp16_utils.fp16_optimizer.FP16_Optimizer"}
)
# The cut-down wrapper for apex's pre-2019 FusedAdam (apex.optimizers until October 2019, then
# apex.contrib.optimizers): reported with its own recipe.
OLD_FUSED_ADAM_WRAPPERS = frozenset(
    {
        "apex.optimizers.FP16_Optimizer",
        "apex.optimizers.fp16_optimizer.FP16_Optimizer",
        "apex.contrib.optimizers.FP16_Optimizer",
        "apex.contrib.optimizers.fp16_optimizer.FP16_Optimizer",
    }
)
WRAPPERS = FP16_UTILS | OLD_FUSED_ADAM_WRAPPERS
TRIGGER = ("FP16_Optimizer",)

# FP16_Optimizer(init_optimizer, static_loss_scale=1.0, dynamic_loss_scale=False,
#                dynamic_loss_args=None, verbose=True)
PARAMETERS = (
    "init_optimizer",
    "static_loss_scale",
    "dynamic_loss_scale",
    "dynamic_loss_args",
    "verbose",
)
# `dynamic_loss_args` keys (apex.amp.scaler.LossScaler's, which FP16_Optimizer uses since
# February 2019) -> amp.initialize's keyword in Ascend apex.
DYNAMIC_ARGS = {
    "init_scale": "dynamic_init_scale",
    "scale_window": "scale_window",
    "min_loss_scale": "min_loss_scale",
    "max_loss_scale": "max_loss_scale",
}
# Where the string "dynamic" goes in the loss-scale code (written in the file's quotes later).
DYNAMIC = "\x00dynamic\x00"
# LossScaler accepts `scale_factor` and ignores it (the factor is 2); apex before 2019 used it.
IGNORED_FACTOR = "scale_factor"

_PARALLEL_WRAPPERS = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "apex.parallel.DistributedDataParallel",
        "apex.parallel.distributed.DistributedDataParallel",
    }
)
_HALF_HELPERS = {
    "apex.fp16_utils.network_to_half": "wraps the model in `nn.Sequential(tofp16(), ...)`, "
    "which changes its state-dict keys",
    "apex.fp16_utils.fp16util.network_to_half": "wraps the model in `nn.Sequential(tofp16(), "
    "...)`, which changes its state-dict keys",
    "apex.fp16_utils.FP16Model": "wraps the model, which changes its state-dict keys",
    "apex.fp16_utils.fp16util.FP16Model": "wraps the model, which changes its state-dict keys",
    "apex.fp16_utils.convert_network": "casts the model",
    "apex.fp16_utils.fp16util.convert_network": "casts the model",
    "apex.fp16_utils.BN_convert_float": "keeps batchnorm in fp32",
    "apex.fp16_utils.fp16util.BN_convert_float": "keeps batchnorm in fp32",
}
# Methods that leave the model object and its dtype as they are (`model = model.to(device)`).
_KEEPING_METHODS = frozenset({"to", "cuda", "npu", "cpu", "train", "eval", "requires_grad_"})
_CASTING_METHODS = frozenset({"float", "double", "bfloat16", "type"})
_FLOATING_DTYPES = frozenset(
    f"torch.{name}"
    for name in ("half", "float16", "float", "float32", "double", "float64", "bfloat16")
)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)

UseKind = Literal["backward", "clip", "neutral"]


@dataclass(frozen=True)
class HalfCast:
    """``model.half()`` (removed: the statement does nothing else) or ``.half()`` in a chain
    (``model = Net().cuda().half()``: the ``.half()`` is dropped)."""

    statement: ast.stmt
    call: ast.Call  # the `.half()` call
    whole: bool


@dataclass(frozen=True)
class Use:
    """A use of the wrapper that the rewrite maps: ``backward`` and ``clip`` are edited,
    ``neutral`` ones (``step()``, ``zero_grad()``, ``param_groups``) mean the same after it."""

    kind: UseKind
    call: ast.Call | None  # the method call (None for an attribute read)
    statement: ast.stmt
    loss: ast.expr | None = None  # backward's loss
    retain_graph: ast.expr | None = None


@dataclass
class Fp16Site:
    """One ``FP16_Optimizer(...)`` call and what migrating it takes."""

    call: ast.Call
    qualified: str
    statement: ast.Assign | None = None
    optimizer: str | None = None  # the name the wrapper is assigned to
    model: str | None = None  # the model whose parameters the wrapped optimizer holds
    inner: Argument | None = None  # the wrapped optimizer, as passed
    inner_call: ast.Call | None = None  # its constructor
    # amp.initialize's loss-scaling keywords: (name, code), `DYNAMIC` where "dynamic" goes
    scale: list[tuple[str, str]] = field(default_factory=list)
    casts: list[HalfCast] = field(default_factory=list)
    uses: list[Use] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)  # why it is reported
    differences: list[str] = field(default_factory=list)  # why the rewrite is unsafe
    amp: str = "amp"  # how the rewritten code spells apex.amp
    torch: str = "torch"

    @property
    def rewritable(self) -> bool:
        return not self.blockers

    @property
    def old_api(self) -> bool:
        return self.qualified in OLD_FUSED_ADAM_WRAPPERS

    def scale_keywords(self, quote: str = '"') -> list[tuple[str, str]]:
        """The loss-scaling keywords with "dynamic" written in ``quote``s."""
        literal = f"{quote}dynamic{quote}"
        return [(name, code.replace(DYNAMIC, literal)) for name, code in self.scale]


def fp16_sites(view: FileView) -> tuple[Fp16Site, ...]:
    """Every ``FP16_Optimizer`` call of the file, analysed (kept per file)."""
    return view.memo("fp16-sites", lambda: _Analysis(view).run())


def ambiguous_wrappers(view: FileView) -> list[tuple[ast.Call, Ambiguous]]:
    """``FP16_Optimizer(...)`` calls whose name has several origins, or may come from a star
    import of apex (``from apex.fp16_utils import *``, also inside ``try:``)."""
    found = []
    for call in OptimizerFlow.of(view).candidates:
        name = view.qualified_name_in(call.func, WRAPPERS)
        if isinstance(name, Ambiguous):
            found.append((call, name))
    stars = [
        statement
        for statement in view.index.nodes(ast.ImportFrom)
        if statement.module
        and any(alias.name == "*" for alias in statement.names)
        and f"{statement.module}.FP16_Optimizer" in WRAPPERS
    ]
    if stars:
        seen = {id(call) for call, _ in found}
        for read in view.index.names("FP16_Optimizer"):
            call = view.index.parent(read)
            if not (isinstance(call, ast.Call) and call.func is read) or id(call) in seen:
                continue
            if view.qualified_name(read) is None:
                candidates = tuple(sorted({f"{s.module}.FP16_Optimizer" for s in stars}))
                reason = f"`FP16_Optimizer` may come from `from {stars[0].module} import *`"
                found.append((call, Ambiguous(candidates, reason)))
    return found


def uncovered_condition(
    view: FileView, wrappers: Sequence[ast.Call], call: ast.Call
) -> tuple[str, bool] | None:
    """Whether the ``amp.initialize`` calls NPU106 writes in place of ``wrappers`` run on every
    path where ``call`` (the optimizer they wrap) runs: None when they do, else an `if` test (as
    written) and whether amp runs only when it holds (True) or only when it is false.

    Each wrapper runs under the conditions of the `if` statements around it that are not
    around ``call``; the wrappers cover every path when those sets of conditions, merged pairwise
    where they differ in one condition only, held true in one and false in the other
    (`if args.loss_scale == 0:` ... `else:`), leave an empty set. Conditions are compared by
    their text, as the optimizer flow does.
    """

    def conditions(node: ast.AST) -> frozenset[tuple[str, bool]]:
        found: set[tuple[str, bool]] = set()
        child = node
        for parent in view.index.ancestors(node):
            if isinstance(parent, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
                break
            if isinstance(parent, ast.If) and child is not parent.test:
                found.add((view.written(parent.test), any(s is child for s in parent.body)))
            child = parent
        return frozenset(found)

    around_call = conditions(call)
    terms = merged_terms({conditions(wrapper) - around_call for wrapper in wrappers})
    if frozenset() in terms:
        return None
    smallest: frozenset[tuple[str, bool]] = min(terms, key=lambda term: (len(term), sorted(term)))
    return sorted(smallest)[0]


Condition = tuple[str, bool]  # an `if` test as written, and whether it holds


def merged_terms(terms: set[frozenset[Condition]]) -> set[frozenset[Condition]]:
    """``terms`` (each a set of conditions that all hold on some path), with every two that
    differ in one condition only, held true in one and false in the other, merged into what
    they share (`if c: ...` / `else: ...` under the same conditions): the empty set among them
    means every path."""
    merged = True
    while merged and frozenset() not in terms:
        merged = False
        for first, second in itertools.combinations(sorted(terms, key=sorted), 2):
            difference = first ^ second
            if len(difference) == 2 and len({test for test, _ in difference}) == 1:
                terms = (terms - {first, second}) | {first & second}
                merged = True
                break
    return terms


def brief(view: FileView, node: ast.AST) -> str:
    """The code of ``node`` as written, cut to its first line."""
    code = view.written(node)
    first, newline, _ = code.partition("\n")
    return f"{first.rstrip()} ..." if newline else code


class _Analysis:
    def __init__(self, view: FileView) -> None:
        self.view = view
        self.index = view.index
        self.flow = OptimizerFlow.of(view)
        self.reaching = reaching_definitions(view)

    def run(self) -> tuple[Fp16Site, ...]:
        sites = []
        for call in self.flow.candidates:
            name = self.view.qualified_name_in(call.func, WRAPPERS)
            if isinstance(name, str):
                sites.append(Fp16Site(call, name))
        for site in sites:
            if site.old_api:
                continue
            self._examine(site)
        self._share_casts(sites)
        for site in sites:
            self._check_uses_together(site, sites)
        return tuple(sites)

    # -- the call --------------------------------------------------------------------------------

    def _examine(self, site: Fp16Site) -> None:
        statement = self.index.parent(site.call)
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and statement.value is site.call
        ):
            site.blockers.append(
                "it is not assigned to a plain name (`optimizer = FP16_Optimizer(...)`), so "
                "npu-migrate cannot follow where it is used"
            )
            return
        if not self._alone_on_its_lines(statement):
            site.blockers.append("its statement shares a line with another one")
            return
        site.statement = statement
        target = statement.targets[0]
        assert isinstance(target, ast.Name)
        site.optimizer = target.id
        bound = self._bind(site)
        if bound is None:
            return
        inner = bound.get("init_optimizer")
        if inner is None:
            site.blockers.append("it is given no optimizer to wrap")
            return
        site.inner = inner
        site.scale = self._loss_scale(site, bound)
        site.inner_call = self._constructor(site, inner.value)
        if site.inner_call is None:
            return
        site.model = self._model(site, site.inner_call)
        if site.model is None:
            return
        self._find_casts(site)
        self._check_model_between(site)
        self._spell_amp(site)
        self._find_uses(site)

    def _alone_on_its_lines(self, statement: ast.stmt) -> bool:
        """Nothing but indentation before ``statement`` and a comment at most after it."""
        source = self.index.source
        text = source.text
        start, end = source.span(statement)
        line_start = source.line_starts[statement.lineno - 1]
        if text[line_start:start].strip():
            return False
        line_end = text.find("\n", end)
        rest = text[end : line_end if line_end >= 0 else len(text)].strip()
        return not rest or rest.startswith("#")

    def _bind(self, site: Fp16Site) -> dict[str, Argument] | None:
        bound: dict[str, Argument] = {}
        position = 0
        for arg in arguments(site.call):
            if arg.star:
                site.blockers.append(
                    f"arguments passed as `{arg.star}{self.view.written(arg.value)}` cannot be read"
                )
                return None
            if arg.keyword is None:
                if position >= len(PARAMETERS):
                    site.blockers.append("it is given more positional arguments than it takes")
                    return None
                bound[PARAMETERS[position]] = arg
                position += 1
            elif arg.keyword in PARAMETERS:
                bound[arg.keyword] = arg
            else:
                site.blockers.append(f"`{arg.keyword}=` is not a parameter of `FP16_Optimizer`")
                return None
        return bound

    # -- loss scaling ----------------------------------------------------------------------------

    def _loss_scale(self, site: Fp16Site, bound: dict[str, Argument]) -> list[tuple[str, str]]:
        """amp.initialize's loss-scaling keywords for the wrapper's arguments."""
        static = bound.get("static_loss_scale")
        static_code = self._operand(static.value) if static is not None else "1.0"
        dynamic = bound.get("dynamic_loss_scale")
        keywords: list[tuple[str, str]] = []
        if dynamic is None:
            keywords.append(("loss_scale", static_code))
            return keywords
        value = literal_value(dynamic.value)
        if value is NOT_LITERAL:
            flag = self._operand(dynamic.value)
            keywords.append(("loss_scale", f"{DYNAMIC} if {flag} else {static_code}"))
        elif value:
            keywords.append(("loss_scale", DYNAMIC))
        else:
            keywords.append(("loss_scale", static_code))
            return keywords
        keywords += self._dynamic_args(site, bound.get("dynamic_loss_args"))
        return keywords

    def _operand(self, node: ast.expr) -> str:
        """``node`` as written, parenthesised where it binds looser than ``a if b else c``."""
        code = self.view.written(node)
        if isinstance(node, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
            return f"({code})"
        return code

    def _dynamic_args(self, site: Fp16Site, arg: Argument | None) -> list[tuple[str, str]]:
        if arg is None or literal_value(arg.value) is None:
            return []
        items = self._literal_items(arg.value)
        if items is None:
            site.blockers.append(
                f"`dynamic_loss_args={self.view.written(arg.value)}` is not a dict literal, so "
                "npu-migrate cannot map it to `amp.initialize`'s loss-scaling arguments"
            )
            return []
        keywords: list[tuple[str, str]] = []
        for key, value in items:
            if key in DYNAMIC_ARGS:
                keywords.append((DYNAMIC_ARGS[key], self.view.written(value)))
            elif key == IGNORED_FACTOR and literal_value(value) == 2:
                continue  # the factor amp's scaler (and Ascend's default) uses
            elif key == IGNORED_FACTOR:
                site.blockers.append(
                    f"`dynamic_loss_args` sets `scale_factor` to "
                    f"{self.view.written(value)}: apex since February 2019 ignores it (the "
                    "factor is 2), older apex used it, so the schedule you trained with "
                    "depends on your apex version: pass `scale_growth_factor` and "
                    "`scale_backoff_factor` to `amp.initialize` yourself"
                )
            else:
                site.blockers.append(
                    f"`dynamic_loss_args` key {key!r} has no `amp.initialize` counterpart"
                )
        return keywords

    def _literal_items(self, node: ast.expr) -> list[tuple[str, ast.expr]] | None:
        if isinstance(node, ast.Dict):
            items = []
            for key, value in zip(node.keys, node.values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    return None
                items.append((key.value, value))
            return items
        if (
            isinstance(node, ast.Call)
            and self.view.qualified_name(node.func) == "builtins.dict"
            and not node.args
            and all(keyword.arg is not None for keyword in node.keywords)
        ):
            return [(keyword.arg, keyword.value) for keyword in node.keywords]  # type: ignore[misc]
        return None

    # -- the wrapped optimizer and its model -----------------------------------------------------

    def _constructor(self, site: Fp16Site, value: ast.expr) -> ast.Call | None:
        """The constructor call of the wrapped optimizer: passed directly, or through a name
        assigned once before (and used nowhere else after the wrapper)."""
        if isinstance(value, ast.Call):
            return value
        if not isinstance(value, ast.Name):
            site.blockers.append(
                f"the wrapped optimizer `{self.view.written(value)}` is neither a constructor "
                "call nor a name"
            )
            return None
        definitions = self.reaching.of_name(value) or []
        values = [self._assigned(d) for d in definitions]
        if not values or any(v is None for v in values) or len(values) != 1:
            site.blockers.append(
                f"npu-migrate cannot tell which optimizer `{value.id}` holds here (it needs a "
                "single assignment of a constructor call before the wrapper)"
            )
            return None
        constructor = values[0]
        if not isinstance(constructor, ast.Call):
            site.blockers.append(f"`{value.id}` is not assigned a constructor call")
            return None
        if value.id != site.optimizer:
            later = [read for read in self._reads_reached_by(definitions[0]) if read is not value]
            if later:
                site.blockers.append(
                    f"the wrapped optimizer `{value.id}` is also used at line "
                    f"{line_of(later[0])}, which the rewrite does not map"
                )
                return None
        return constructor

    def _assigned(self, definition: ast.AST) -> ast.expr | None:
        parent = self.index.parent(definition)
        if (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and parent.targets[0] is definition
        ):
            return parent.value
        return None

    def _reads_reached_by(self, definition: ast.AST) -> list[ast.Name]:
        if not isinstance(definition, ast.Name):
            return []
        found = []
        for read in self.index.names(definition.id):
            if isinstance(read.ctx, ast.Load):
                reaching = self.reaching.of_name(read)
                if reaching and any(d is definition for d in reaching):
                    found.append(read)
        return found

    def _model(self, site: Fp16Site, constructor: ast.Call) -> str | None:
        """The one model name whose ``.parameters()`` / ``.named_parameters()`` the
        constructor's first argument is built from (following names assigned in its scope)."""
        params = constructor.args[0] if constructor.args else None
        for keyword in constructor.keywords:
            if keyword.arg == "params":
                params = keyword.value
        if params is None:
            site.blockers.append("the wrapped optimizer is given no parameters")
            return None
        found: set[str] = set()
        unreadable: list[str] = []
        self._parameter_sources(params, found, unreadable, set(), 0)
        if unreadable:
            site.blockers.append(
                f"the wrapped optimizer's parameters come from `{unreadable[0]}`, which is not a "
                "model held in a local name"
            )
            return None
        if len(found) != 1:
            names = ", ".join(f"`{name}`" for name in sorted(found)) or "no model"
            site.blockers.append(
                f"the wrapped optimizer's parameters come from {names}: `amp.initialize` needs "
                "the one model they belong to"
            )
            return None
        model = found.pop()
        if model not in self.index.scope_of(site.call).bindings:
            site.blockers.append(f"`{model}` is not a name of the function that builds the wrapper")
            return None
        return model

    def _parameter_sources(
        self, expr: ast.AST, found: set[str], unreadable: list[str], seen: set[int], depth: int
    ) -> None:
        for node in self.index.walk(expr):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("parameters", "named_parameters")
            ):
                owner = node.func.value
                if isinstance(owner, ast.Name):
                    found.add(owner.id)
                else:
                    unreadable.append(self.view.written(owner))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and depth < 4:
                for definition in self.reaching.of_name(node) or []:
                    value = self._assigned(definition)
                    if value is not None and id(value) not in seen:
                        seen.add(id(value))
                        self._parameter_sources(value, found, unreadable, seen, depth + 1)

    # -- model.half() ----------------------------------------------------------------------------

    def _find_casts(self, site: Fp16Site) -> None:
        assert site.model is not None and site.statement is not None
        function = self._function_of(site.call)
        for attribute in self.index.attributes("half"):
            call = self.index.parent(attribute)
            if not (isinstance(call, ast.Call) and call.func is attribute) or call.args:
                continue
            if self._function_of(call) is not function:
                continue
            cast = self._cast_of(site.model, call)
            if cast is not None:
                site.casts.append(cast)
                if cast.whole and not self._alone_on_its_lines(cast.statement):
                    site.blockers.append(
                        f"`{brief(self.view, cast.statement)}` (line {line_of(call)}) shares "
                        "its line with another statement"
                    )
                    return
        helpers = self._half_helpers(function, site.model)
        if helpers:
            node, reason = helpers[0]
            site.blockers.append(
                f"the model is cast by `{brief(self.view, node)}` (line {line_of(node)}), which "
                f"{reason}: call `{site.model}.half()` instead (npu-migrate then lets amp O2 do "
                "the cast), or migrate by hand"
            )
            return
        if not site.casts:
            site.blockers.append(
                f"npu-migrate does not see `{site.model}.half()` in this function: without it "
                "FP16_Optimizer keeps an fp32 model and only scales the loss, which amp O2 does "
                "not"
            )
            return
        if len(site.casts) > 1:
            lines = ", ".join(str(line_of(cast.statement)) for cast in site.casts)
            site.blockers.append(f"`{site.model}` is cast to half more than once (lines {lines})")
            return
        cast = site.casts[0]
        problem = self._cast_reaches(cast, site)
        if problem is not None:
            site.blockers.append(problem)

    def _cast_of(self, model: str, call: ast.Call) -> HalfCast | None:
        """``call`` (a ``.half()``) casts ``model``: a statement ``model.half()`` /
        ``model.cuda().half()``, or ``model = <chain>.half()``."""
        statement = self.index.statement_of(call)
        chain = self._chain(call)
        if chain is None:
            return None
        top, base = chain
        # Only a bare `model.half()` goes whole: `model.cuda().half()` keeps its device move.
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        bare = top is call and isinstance(receiver, ast.Name) and receiver.id == model
        if isinstance(statement, ast.Expr) and statement.value is top:
            if isinstance(base, ast.Name) and base.id == model:
                return HalfCast(statement, call, whole=bare)
            return None
        if (
            isinstance(statement, ast.Assign)
            and statement.value is top
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and statement.targets[0].id == model
        ):
            return HalfCast(statement, call, whole=bare)
        return None

    def _chain(self, call: ast.Call) -> tuple[ast.expr, ast.expr] | None:
        """The outermost expression of the method chain ``call`` is part of, and its base."""
        top: ast.expr = call
        while True:
            parent = self.index.parent(top)
            if isinstance(parent, ast.Attribute) and parent.value is top:
                grand = self.index.parent(parent)
                if isinstance(grand, ast.Call) and grand.func is parent:
                    top = grand
                    continue
            break
        base: ast.expr = call
        while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
            base = base.func.value
        return top, base

    def _half_helpers(self, function: ast.AST, model: str) -> list[tuple[ast.Call, str]]:
        found = []
        for call in self.index.nodes(ast.Call):
            if self._function_of(call) is not function:
                continue
            if not any(isinstance(a, ast.Name) and a.id == model for a in call.args):
                continue
            name = self.view.qualified_name_in(call.func, _HALF_HELPERS.keys())
            if isinstance(name, str):
                found.append((call, _HALF_HELPERS[name]))
        return found[:1]

    def _cast_reaches(self, cast: HalfCast, site: Fp16Site) -> str | None:
        """Why the cast may not be what the wrapper's model went through, or None."""
        if cast.statement.lineno >= site.call.lineno:
            return (
                f"`{site.model}` is cast to half at line {line_of(cast.statement)}, after the "
                "wrapper is built"
            )
        if self._loop_of(cast.statement) is not self._loop_of(site.call):
            return (
                f"`{site.model}.half()` (line {line_of(cast.statement)}) and the wrapper are not "
                "in the same loop"
            )
        guard = self.flow.guard_only_for(cast.statement, site.call)
        if guard is not None:
            test, in_body = guard
            condition = f"`{test}` holds" if in_body else f"`{test}` is false"
            return (
                f"`{site.model}.half()` (line {line_of(cast.statement)}) runs only when "
                f"{condition}, which does not guard the wrapper"
            )
        return None

    def _check_model_between(self, site: Fp16Site) -> None:
        """Nothing rebinds, wraps or recasts the model between its cast and the wrapper."""
        if site.blockers or not site.casts:
            return
        assert site.model is not None
        cast = site.casts[0]
        function = self._function_of(site.call)
        for name in self.index.names(site.model):
            if self._function_of(name) is not function:
                continue
            if not cast.statement.lineno < name.lineno < site.call.lineno:
                continue
            if isinstance(name.ctx, ast.Store):
                statement = self.index.statement_of(name)
                if statement is None or statement is cast.statement:
                    continue
                value = statement.value if isinstance(statement, ast.Assign) else None
                if value is None or not self._keeps_model(value, site.model):
                    site.blockers.append(
                        f"`{site.model}` is rebound at line {line_of(name)} "
                        f"(`{brief(self.view, statement)}`) between its cast and the wrapper: "
                        "`amp.initialize` must get the model itself, before any parallel "
                        "wrapper (and NPU203 wants the optimizer built before it)"
                    )
                    return
            parent = self.index.parent(name)
            if isinstance(parent, ast.Attribute) and parent.attr in _CASTING_METHODS:
                site.blockers.append(
                    f"`{site.model}.{parent.attr}(...)` at line {line_of(name)} casts the model "
                    "again before the wrapper"
                )
                return
        for call in self.index.nodes(ast.Call):
            if self._function_of(call) is not function or call.lineno >= site.call.lineno:
                continue
            if not any(isinstance(a, ast.Name) and a.id == site.model for a in call.args):
                continue
            wrapper = self.view.qualified_name_in(call.func, _PARALLEL_WRAPPERS)
            if isinstance(wrapper, str):
                site.blockers.append(
                    f"`{site.model}` is wrapped in `{wrapper}` at line {line_of(call)} before the "
                    "wrapper: `amp.initialize` must come before any parallel wrapper"
                )
                return

    def _keeps_model(self, value: ast.expr, model: str) -> bool:
        """``model.to(device)`` / ``model.cuda()``: the same module, dtype unchanged."""
        node = value
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in _KEEPING_METHODS:
                return False
            if node.func.attr == "to" and self._mentions_dtype(node):
                return False
            node = node.func.value
        return isinstance(node, ast.Name) and node.id == model and node is not value

    def _mentions_dtype(self, call: ast.Call) -> bool:
        if any(keyword.arg == "dtype" for keyword in call.keywords):
            return True
        for arg in call.args:
            name = self.view.qualified_name(arg)
            if isinstance(name, str) and name in _FLOATING_DTYPES:
                return True
            if not isinstance(arg, (ast.Name, ast.Attribute, ast.Constant, ast.Call)):
                return True
        return False

    # -- spelling amp and torch ------------------------------------------------------------------

    def _spell_amp(self, site: Fp16Site) -> None:
        if site.blockers:
            return
        module = self.index.module_scope
        amp = module.bindings.get("amp", [])
        if amp and all(self._imports(binding, "apex.amp") for binding in amp):
            site.amp = "amp"
        else:
            apex = module.bindings.get("apex", [])
            if apex and not all(self._imports(binding, "apex") for binding in apex):
                site.blockers.append(
                    "`apex` is bound to something else than the package in this module"
                )
                return
            site.amp = "apex.amp"
        torch = module.bindings.get("torch", [])
        if torch and not all(self._imports(binding, "torch") for binding in torch):
            site.blockers.append("`torch` is bound to something else than the package here")

    def _imports(self, binding: object, qualified: str) -> bool:
        kind = getattr(binding, "kind", None)
        if kind is not BindingKind.IMPORT:
            return False
        names = binding.qualified_names(binding.name)  # type: ignore[attr-defined]
        return {name.name for name in names} == {qualified}

    def _shadowed(self, scope: Scope, name: str) -> bool:
        while scope.kind not in (ScopeKind.MODULE, ScopeKind.BUILTIN):
            if name in scope.bindings:
                return True
            if scope.parent is None:
                break
            scope = scope.parent
        return False

    # -- uses of the wrapper ---------------------------------------------------------------------

    def _find_uses(self, site: Fp16Site) -> None:
        if site.blockers:
            return
        assert site.statement is not None and site.optimizer is not None
        target = site.statement.targets[0]
        site_scope = self.index.scope_of(site.call)
        for name in ("amp", "apex", "torch"):
            if self._shadowed(site_scope, name.split(".")[0]) and site.amp.startswith(name):
                site.blockers.append(f"`{name}` is a local name where the rewrite would use it")
                return
        for read in self.index.names(site.optimizer):
            if not isinstance(read.ctx, ast.Load):
                continue
            scope = self.index.scope_of(read)
            if scope is not site_scope:
                if any(binding.node is target for binding in self.index.bindings_of(read)):
                    site.blockers.append(
                        f"`{site.optimizer}` is used in a nested function (line {line_of(read)}), "
                        "which npu-migrate does not follow"
                    )
                    return
                continue
            reaching = self.reaching.of_name(read) or []
            if not any(definition is target for definition in reaching):
                continue
            use = self._use(site, read)
            if use is None:
                return
            site.uses.append(use)
        if not any(use.kind == "backward" for use in site.uses):
            site.blockers.append(
                f"no `{site.optimizer}.backward(loss)` of this function is called on the wrapper "
                "(none that its assignment reaches), so npu-migrate cannot tell how the loss is "
                "scaled"
            )

    def _use(self, site: Fp16Site, read: ast.Name) -> Use | None:
        parent = self.index.parent(read)
        statement = self.index.statement_of(read)
        assert statement is not None
        at = f"`{self.view.written(parent if parent is not None else read)}` (line {line_of(read)})"
        if not isinstance(parent, ast.Attribute) or parent.value is not read:
            site.blockers.append(
                f"the wrapper is used as a value at line {line_of(read)} "
                f"(`{brief(self.view, statement)}`), where npu-migrate cannot tell what is done "
                "with it"
            )
            return None
        call = self.index.parent(parent)
        called = isinstance(call, ast.Call) and call.func is parent
        attr = parent.attr
        if not called:
            if attr in ("param_groups", "state"):
                return Use("neutral", None, statement)
            site.blockers.append(f"{at}: {_ATTRIBUTE_ADVICE.get(attr, _UNKNOWN_ATTRIBUTE)}")
            return None
        assert isinstance(call, ast.Call)
        alone = isinstance(statement, ast.Expr) and statement.value is call
        if attr == "backward":
            return self._backward(site, call, statement, alone, at)
        if attr in ("step", "zero_grad"):
            if call.args or call.keywords:
                site.blockers.append(f"{at}: {_CALL_ADVICE[attr]}")
                return None
            return Use("neutral", call, statement)
        if attr == "clip_master_grads":
            if not alone:
                site.blockers.append(
                    f"{at}: its result is used, and it differs after an overflow (-1 from "
                    "`clip_master_grads`, the non-finite norm from `clip_grad_norm_`): replace "
                    f"it with `{site.torch}.nn.utils.clip_grad_norm_({site.amp}.master_params("
                    f"{site.optimizer}), ...)` by hand"
                )
                return None
            if any(arg.star for arg in arguments(call)):
                site.blockers.append(f"{at}: its arguments are passed with `*`/`**`")
                return None
            return Use("clip", call, statement)
        site.blockers.append(f"{at}: {_CALL_ADVICE.get(attr, _UNKNOWN_ATTRIBUTE)}")
        return None

    def _backward(
        self, site: Fp16Site, call: ast.Call, statement: ast.stmt, alone: bool, at: str
    ) -> Use | None:
        if not alone or not self._alone_on_its_lines(statement):
            site.blockers.append(f"{at}: it is not a statement on its own line")
            return None
        loss: ast.expr | None = None
        retain: ast.expr | None = None
        for position, arg in enumerate(arguments(call)):
            name = arg.keyword or (
                ("loss", "update_master_grads", "retain_graph")[position] if position < 3 else None
            )
            if arg.star or name is None:
                site.blockers.append(f"{at}: its arguments cannot be read")
                return None
            if name == "loss":
                loss = arg.value
            elif name == "retain_graph":
                retain = arg.value
            elif name == "update_master_grads" and literal_value(arg.value) is not True:
                site.blockers.append(
                    f"{at}: with `update_master_grads={self.view.written(arg.value)}` the "
                    "master gradients are updated by hand, which amp does at the end of "
                    "`scale_loss`"
                )
                return None
            elif name not in ("update_master_grads",):
                site.blockers.append(f"{at}: `{name}=` is not a parameter of `backward`")
                return None
        if loss is None:
            site.blockers.append(f"{at}: no loss is passed")
            return None
        return Use("backward", call, statement, loss=loss, retain_graph=retain)

    # -- sites together --------------------------------------------------------------------------

    def _share_casts(self, sites: Sequence[Fp16Site]) -> None:
        """Two wrappers may share one ``model.half()`` only when they are alternatives
        (``if args.loss_scale == 0: ... else: ...``)."""
        by_cast: dict[int, list[Fp16Site]] = {}
        for site in sites:
            for cast in site.casts:
                by_cast.setdefault(id(cast.call), []).append(site)
        for group in by_cast.values():
            for first, second in itertools.pairwise(group):
                if not self.flow.exclusive(first.call, second.call):
                    for site in (first, second):
                        site.blockers.append(
                            f"another `FP16_Optimizer` (line {line_of(second.call)}) wraps an "
                            f"optimizer of the same model `{site.model}`"
                        )

    def _check_uses_together(self, site: Fp16Site, sites: Sequence[Fp16Site]) -> None:
        """Uses reached by other definitions of the name, and the arithmetic checks."""
        if site.blockers or site.old_api:
            return
        targets = {id(other.statement.targets[0]) for other in sites if other.statement}
        for use in site.uses:
            if use.kind == "neutral":
                continue
            read = self._receiver(use)
            reaching = self.reaching.of_name(read) or []
            others = [d for d in reaching if id(d) not in targets]
            for other in others:
                if not self._overridden(other, site, use, sites):
                    site.blockers.append(
                        f"`{brief(self.view, use.call or read)}` (line {line_of(read)}) may also "
                        f"see `{site.optimizer}` as assigned at line {line_of(other)}, which is "
                        "not an `FP16_Optimizer`"
                    )
                    return
        self._check_arithmetic(site)

    def _overridden(
        self, other: ast.AST, site: Fp16Site, use: Use, sites: Sequence[Fp16Site]
    ) -> bool:
        """Whether the definition ``other`` of the wrapper's name cannot be what ``use`` sees:
        it is in the branch opposite to the wrapper (`if args.fp16:` ... `else:`) while the use
        runs only on the wrapper's side, or it comes before an `if` that the use shares, whose
        branch reassigns the name on every path (the wrappers of `if args.loss_scale == 0:` /
        `else:` inside `if args.fp16:`). Conditions are compared by their text, as the
        optimizer flow does."""
        statement = self._statement(other)
        if self.flow.exclusive(statement, site.call):
            return self.flow.guard_only_for(site.call, use.statement) is None
        assert site.optimizer is not None
        site_lines = {id(s.statement) for s in sites if s.statement is not None}
        use_guards = {
            (self.view.written(guard.test), in_body)
            for guard, in_body in self._guards(use.statement)
        }
        for guard, in_body in self._guards(site.call):
            if (self.view.written(guard.test), in_body) not in use_guards:
                continue
            branch = guard.body if in_body else guard.orelse
            if line_of(statement) < guard.lineno and self._assigns_always(
                branch, site.optimizer, site_lines
            ):
                return True
        return False

    def _guards(self, node: ast.AST) -> Iterator[tuple[ast.If, bool]]:
        child = node
        for parent in self.index.ancestors(node):
            if isinstance(parent, (*_FUNCTIONS, ast.ClassDef)):
                return
            if isinstance(parent, ast.If) and child is not parent.test:
                yield parent, any(statement is child for statement in parent.body)
            child = parent

    def _assigns_always(self, body: list[ast.stmt], name: str, wrappers: set[int]) -> bool:
        """Every path through ``body`` ends with one of the wrapper assignments (``wrappers``,
        by id) as the last assignment of ``name``."""
        assigned = False
        for statement in body:
            if id(statement) in wrappers:
                assigned = True
            elif isinstance(statement, ast.If):
                both = self._assigns_always(statement.body, name, wrappers) and (
                    self._assigns_always(statement.orelse, name, wrappers)
                )
                assigned = assigned or both
                if not both and self._stores(statement, name):
                    return False
            elif self._stores(statement, name):
                return False
        return assigned

    def _stores(self, statement: ast.stmt, name: str) -> bool:
        return any(
            isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
            for node in ast.walk(statement)
        )

    def _receiver(self, use: Use) -> ast.Name:
        assert use.call is not None and isinstance(use.call.func, ast.Attribute)
        receiver = use.call.func.value
        assert isinstance(receiver, ast.Name)
        return receiver

    def _statement(self, node: ast.AST) -> ast.AST:
        return self.index.statement_of(node) or node

    def _check_arithmetic(self, site: Fp16Site) -> None:
        """Where amp O2 computes differently from the wrapper: a loss computed from the
        model's outputs (amp hands them over in fp32), gradients accumulated over several
        backward passes (amp sums them in the fp32 masters)."""
        backwards = [use for use in site.uses if use.kind == "backward"]
        steps = [use for use in site.uses if use.call is not None and _method(use.call) == "step"]
        if len(backwards) > 1:
            site.differences.append(
                f"`{site.optimizer}.backward` is called {len(backwards)} times: amp sums the "
                "gradients of several backward passes in the fp32 master gradients, "
                "FP16_Optimizer in the fp16 model gradients"
            )
        for backward in backwards:
            if len(steps) != 1:
                site.differences.append(
                    f"npu-migrate cannot tell that `{site.optimizer}.step()` follows every "
                    f"`{site.optimizer}.backward` (it is called {len(steps)} times): with "
                    "gradient accumulation amp sums the gradients in the fp32 master gradients, "
                    "FP16_Optimizer in the fp16 model gradients"
                )
                break
            step = steps[0]
            guard = self.flow.guard_only_for(step.statement, backward.statement)
            same_loop = self._loop_of(step.statement) is self._loop_of(backward.statement)
            if guard is not None or not same_loop:
                reason = f"only when `{guard[0]}` holds" if guard else "in another loop"
                site.differences.append(
                    f"`{site.optimizer}.step()` (line {line_of(step.statement)}) runs {reason}, "
                    "so several backward passes may accumulate: amp sums them in the fp32 "
                    "master gradients, FP16_Optimizer in the fp16 model gradients"
                )
            assert backward.loss is not None
            computed = self._computed_from_outputs(site, backward.loss, backward.statement)
            if computed is not None:
                site.differences.append(
                    f"the loss is computed from the model's outputs ({computed}): under amp O2 "
                    f"`{site.model}(...)` returns them in fp32, so that computation runs in fp32 "
                    "where it ran in fp16 (call `.float()` on the outputs first to compute it "
                    "in fp32 on both sides)"
                )

    def _computed_from_outputs(self, site: Fp16Site, loss: ast.expr, at: ast.stmt) -> str | None:
        """Where the loss is computed in the outputs' dtype, as written, or None when it is
        the model's output itself (or its part), or computed from outputs cast with
        ``.float()``."""
        assert site.model is not None
        outputs = self._output_names(site)
        return self._arithmetic_on(loss, outputs, site.model, set(), 0)

    def _output_names(self, site: Fp16Site) -> set[int]:
        """ids of the Name stores that receive the model's output (or parts of it)."""
        assert site.model is not None
        function = self._function_of(site.call)
        found: set[int] = set()
        changed = True
        while changed:
            changed = False
            for statement in self.index.nodes(ast.Assign):
                if self._function_of(statement) is not function:
                    continue
                if not self._is_output(statement.value, site.model, found):
                    continue
                for target in statement.targets:
                    for node in ast.walk(target):
                        if isinstance(node, ast.Name) and id(node) not in found:
                            found.add(id(node))
                            changed = True
        return found

    def _is_output(self, value: ast.expr, model: str, outputs: set[int]) -> bool:
        """``model(...)``, ``model(...)[0]``, ``model(...).loss``, or a part of an output."""
        node = value
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Name) and node.func.id == model
        if isinstance(node, ast.Name) and node is not value:
            return self._holds_output(node, outputs)
        return False

    def _holds_output(self, name: ast.Name, outputs: set[int]) -> bool:
        reaching = self.reaching.of_name(name) or []
        return bool(reaching) and all(id(d) in outputs for d in reaching)

    def _arithmetic_on(
        self, expr: ast.expr, outputs: set[int], model: str, seen: set[int], depth: int
    ) -> str | None:
        """The first computation on model outputs inside ``expr`` that is not a ``.float()``,
        following local names; None when there is none."""
        if self._is_output(expr, model, outputs) or (
            isinstance(expr, ast.Name) and self._holds_output(expr, outputs)
        ):
            return None
        for node in self.index.walk(expr):
            if not isinstance(node, (ast.Name, ast.Call)):
                continue
            if isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Name) and node.func.id == model
            ):
                continue
            output = isinstance(node, ast.Call) or (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Load)
                and self._holds_output(node, outputs)
            )
            if output:
                if self._floated(node):
                    continue
                return f"`{brief(self.view, expr)}`, line {line_of(expr)}"
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and depth < 6:
                for definition in self.reaching.of_name(node) or []:
                    value = self._assigned(definition)
                    if value is None or id(value) in seen:
                        continue
                    seen.add(id(value))
                    found = self._arithmetic_on(value, outputs, model, seen, depth + 1)
                    if found is not None:
                        return found
        return None

    def _floated(self, node: ast.expr) -> bool:
        """``node`` (an output, or a part of it) is cast with ``.float()`` before anything else."""
        current: ast.AST = node
        while True:
            parent = self.index.parent(current)
            if isinstance(parent, (ast.Subscript, ast.Attribute)) and parent.value is current:
                if isinstance(parent, ast.Attribute) and parent.attr == "float":
                    call = self.index.parent(parent)
                    return isinstance(call, ast.Call) and call.func is parent and not call.args
                current = parent
                continue
            return False

    # -- structure -------------------------------------------------------------------------------

    def _function_of(self, node: ast.AST) -> ast.AST:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
                return ancestor
        return self.index.tree

    def _loop_of(self, node: ast.AST) -> ast.AST | None:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _LOOPS):
                return ancestor
            if isinstance(ancestor, (*_FUNCTIONS, ast.ClassDef)):
                return None
        return None


def _method(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def iter_edit_uses(site: Fp16Site) -> Iterator[Use]:
    """The uses the rewrite edits, in source order."""
    yield from sorted(
        (use for use in site.uses if use.kind != "neutral"),
        key=lambda use: (use.statement.lineno, use.statement.col_offset),
    )


_CHECKPOINT = (
    "FP16_Optimizer's checkpoints hold its loss scaler and fp32 master weights, amp's hold "
    "neither (save `amp.state_dict()` beside them): migrate the checkpoint code by hand"
)
_CALL_ADVICE = {
    "step": "a closure passed to `step` needs `amp.scale_loss` inside it: migrate it by hand",
    "zero_grad": "`set_grads_to_None` has no amp counterpart: call `zero_grad()`",
    "update_master_grads": (
        "amp copies and unscales the master gradients at the end of `amp.scale_loss`, and "
        "FP16_Optimizer's `update_master_grads()` also counts a step of its loss scaler: "
        "migrate it by hand"
    ),
    "state_dict": _CHECKPOINT,
    "load_state_dict": _CHECKPOINT,
    "inspect_master_grad_data": "use `[p.grad for p in amp.master_params(optimizer)]`",
}
_ATTRIBUTE_ADVICE = {
    "loss_scale": (
        "amp keeps the loss scale in its scaler: read "
        "`amp._amp_state.loss_scalers[0].loss_scale()` instead"
    ),
    "optimizer": "after `amp.initialize` the optimizer is the wrapped one itself",
    "overflow": "amp skips the step itself after an overflow and does not expose the flag",
}
_UNKNOWN_ATTRIBUTE = "npu-migrate does not know its amp counterpart"
