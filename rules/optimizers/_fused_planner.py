"""NPU101's analysis: which optimizer constructors of a file become which NPU fused class, from
which home, with which argument edits, and what is reported instead, and why. Not a rule.

:func:`plan_fused` is pure: it reads a :class:`~migrator.analysis.view.FileView` and what it
needs of the run as plain arguments (the ``opt_level`` NPU102's switch sets, the link stage's
facts about the functions of the module that other files call for an optimizer, the suppression
comments) and returns :class:`FusedDecisions`. It records no diagnostic and builds no libcst node:
NPU101 turns the decisions into fixes, reports and edits, and the link stage
(:mod:`~migrator.rules.optimizers._factories`) runs it on a factory's module to learn what the
factory returns once NPU101 has run there.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import combinations
from pathlib import PurePosixPath
from typing import Any, Literal

from migrator.analysis.calls import (
    NOT_LITERAL,
    Argument,
    argument,
    arguments,
    has_star,
    literal_value,
)
from migrator.analysis.clipping import class_of
from migrator.analysis.index import ModuleIndex, full_name, line_of, resolution_base
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import values_kept
from migrator.analysis.receivers import class_attribute_reads
from migrator.analysis.scopes import Binding, BindingKind
from migrator.analysis.view import FileView
from migrator.diagnostics import Severity, first_few
from migrator.rules.optimizers._amp import AmpOptions, amp_options
from migrator.rules.optimizers._call_sites import (
    CallSite,
    ExternalAmp,
    MethodCallers,
    amp_attributes,
    attribute_stores,
    factory_sites,
    forwarders,
    method_callers,
    returned_origins,
    untraced_amp,
    values_returning,
    wrapped_returning,
)
from migrator.rules.optimizers._conditions import (
    amp_runs_when,
    and_operand,
    and_term,
    any_amp_condition,
    calls_function,
    stores_of,
    unportable_test,
    unreadable_test,
)
from migrator.rules.optimizers._contract import Break, ParameterContract
from migrator.rules.optimizers._contract import describe as describe_breaks
from migrator.rules.optimizers._flow import (
    OptimizerFlow,
    defined_here,
    escape,
    fused_class,
    fused_mapping,
    mapped_get,
    npu_fused_name,
    takes,
)
from migrator.rules.optimizers._fp16 import uncovered_condition
from migrator.rules.optimizers._handed import HandedCode
from migrator.rules.optimizers._hazards import (
    FusionHazards,
    GradFix,
    Hazard,
    models_feeding,
    overlaps,
    whole_models,
)
from migrator.rules.optimizers._hazards import describe as describe_hazards
from migrator.rules.optimizers._kwargs import ForwardedKeys, KeyDrop, forwarded_keys
from migrator.rules.optimizers._lightning import default_doubt as default_lightning_doubt
from migrator.rules.optimizers._planned_amp import PlannedAmp, picked_by
from migrator.rules.optimizers._subclass import derived_names, subclass_base
from migrator.rules.optimizers._tables import (
    APEX_HOME,
    APEX_HOME_SOURCES,
    FP16_OPTIMIZERS,
    FUSED_PREFIX,
    KNOWN_OPTIMIZERS,
    NO_FUSED_ROOTS,
    NO_FUSED_VERSION,
    NPU1_ROOTS,
    OPTIMIZER_LAST_NAMES,
    OPTIMIZER_MODULES,
    SOURCES,
    TARGET_PARAMETERS,
    TORCH_NPU_HOME,
    UNSUPPORTED,
    Source,
)
from migrator.suppressions import Suppressions

CODE = "NPU101"  # the rule the decisions are for: its suppression comments apply

# Switches that only choose a CUDA kernel or a memory strategy; the update is the same without.
PERFORMANCE_ONLY = frozenset(
    {"foreach", "fused", "capturable", "set_grad_none", "materialize_master_grads"}
)
# Arguments that are harmless at the given value and change the update at any other value.
NEUTRAL_AT: dict[str, tuple[object, str]] = {
    "maximize": (False, "`maximize=True` (gradient ascent) has no NPU fused equivalent"),
    "differentiable": (
        False,
        "`differentiable=True` (autograd through the optimizer step) has no NPU fused equivalent",
    ),
    "bias_correction": (
        True,
        "`bias_correction=False` has no NPU equivalent: the NPU fused Adam optimizers always "
        "apply bias correction",
    ),
    "wd_after_momentum": (
        False,
        "`wd_after_momentum=True` has no NPU equivalent: NpuFusedSGD applies weight decay "
        "before momentum, as torch.optim.SGD does",
    ),
    "decoupled_weight_decay": (
        False,
        "`decoupled_weight_decay=True` makes it AdamW: use `NpuFusedAdamW` with the same "
        "`weight_decay` instead",
    ),
    "master_weights": (
        False,
        "FusedAdam's own fp32 master weights have no NPU equivalent: "
        '`amp.initialize(..., opt_level="O2")` keeps fp32 master weights instead',
    ),
    "amsgrad": (False, "the NPU fused Adam optimizers do not implement AMSGrad"),
}
# Arguments the NPU fused optimizers also take, for which the neutral value is kept as written.
KEPT_WHEN_NEUTRAL = frozenset({"amsgrad"})

# Modules of Python's own whose functions never keep a model's parameters for an update.
_NOT_OPTIMIZER_ROOTS = frozenset(
    {"builtins", "itertools", "functools", "operator", "collections", "copy", "math", "logging"}
)

# torch's LR schedulers: built from an optimizer, they never hold the model's parameters.
_SCHEDULER_MODULES = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.SWALR")

TORCH_SGD_DEFAULT_LR = "0.001"  # torch.optim.SGD's default; NpuFusedSGD requires lr

# How a rewritten call spells the new class: the whole dotted name, only its last attribute
# (`apex_optimizers.FusedAdam` -> `apex_optimizers.NpuFusedAdamW`), the unchanged alias of a
# rewritten `from ... import X as A`, or the new name of a rewritten `from ... import X`.
# A `getattr(torch.optim, name)` lookup becomes a mapping of the fusable names ("lookup").
FuncStyle = Literal["dotted", "attr", "alias", "rename", "lookup"]


# -- the decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgumentEdits:
    """What changes in a rewritten call's arguments (indices into its arguments as written)."""

    dropped: frozenset[int] = frozenset()
    to_keyword: Mapping[int, str] = field(default_factory=dict)  # positional index -> its name
    added: tuple[tuple[str, str], ...] = ()  # (keyword, value code)
    # `**mapping` argument index -> defaults (keyword, value code) pinned ahead of the mapping:
    # `**{"weight_decay": 0.0, **mapping}`
    pinned: Mapping[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class AmpGate:
    """An ``amp.initialize`` that runs, or enables amp, only when ``test`` is true
    (``amp_when_true``) or only when it is false."""

    amp_call: ast.AST  # the call, or the statement NPU105 adds its amp.initialize after
    test: str
    amp_when_true: bool
    verb: str = "runs"  # "enables amp" for `enabled=<run-time value>`
    # NPU105's own switch (`enabled=args.amp` after the optimizers it names, `args.amp` its own
    # flag): it reads the same at the constructor by construction.
    planned: bool = False


@dataclass(frozen=True)
class ImportRewrite:
    """``from m import X [as A]`` rewritten in place: alias index -> new name, maybe new module."""

    statement: ast.ImportFrom
    names: Mapping[int, str]
    module: str | None


@dataclass(frozen=True)
class AmpParameter:
    """A keyword-only parameter added to ``function``, whose callers in other files pass amp's
    condition there (``True``, ``False`` or the test under which their ``amp.initialize``
    runs): the constructors it returns pick their class by it."""

    function: ast.FunctionDef | ast.AsyncFunctionDef
    name: str
    # The functions of the module that return a call of ``function`` (see
    # :func:`~migrator.rules.optimizers._call_sites.forwarders`): each gets the parameter too
    # and passes it on in that call.
    forwarding: tuple[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call], ...] = ()
    # The calls of ``function`` in its own module, with the value each passes (the module's own
    # edits; the calls in other files get theirs from the link stage).
    own_calls: tuple[tuple[ast.Call, str], ...] = ()


@dataclass(frozen=True)
class Rewrite:
    """One constructor call that becomes an NPU fused optimizer."""

    call: ast.Call
    arguments: tuple[Argument, ...]
    source: Source
    target: str  # "NpuFusedSGD"
    home: str  # APEX_HOME or TORCH_NPU_HOME
    edits: ArgumentEdits
    func_style: FuncStyle
    message: str  # what the fix says
    # The `from ... import` rewritten along with this call (carried by the first call using it).
    import_rewrite: ImportRewrite | None = None
    # amp.initialize runs only when this test (as written) holds (True) or is false (False):
    # the class is picked by it, `(apex.optimizers.X if test else torch_npu.optim.X)`.
    choice: tuple[str, bool] | None = None
    # `zero_grad(...)` calls edited along with this call so that its gradients stay in the
    # fused optimizer's flat buffer (each carried by the first rewrite that needs it).
    grad_fixes: tuple[GradFix, ...] = ()
    # Performance-only keys dropped from the dicts forwarded with `**` (each carried by the first
    # call that forwards its dict).
    key_drops: tuple[KeyDrop, ...] = ()
    # The callee's new code, for the "lookup" style.
    func_code: str | None = None
    # That code keys its mapping by torch's classes (`{torch.optim.SGD: ...}`): it needs
    # `import torch`, which a module that imports only `from torch.optim import SGD` lacks.
    keyed_by_class: bool = False
    # The mapping maps every class the callee may hold: NPU fused on every path.
    mapped_on_every_path: bool = False
    # Where ``func_code`` goes instead of the callee: the base of a thin subclass that the call
    # builds (`class CustomOptimizer(<func_code>):`).
    func_at: ast.Name | None = None
    # The factory (a function of the module) that gets a keyword-only parameter, the name in
    # ``choice``, which its callers set to amp's condition (carried by its first rewrite).
    amp_parameter: AmpParameter | None = None
    # The class as written stays where this test holds, the NPU fused one is built where it does
    # not: `(optim.SGD if test else torch_npu.optim.NpuFusedSGD)` (see KeptWhen).
    kept: KeptWhen | None = None

    @property
    def qualified_target(self) -> str:
        """The class on the amp path (the only one without a ``choice``)."""
        return f"{self.home}.{self.target}"

    @property
    def callee(self) -> str:
        """The callee a ``dotted`` rewrite writes."""
        return _callee(self.qualified_target, self.target, self.choice, self.kept)


@dataclass(frozen=True)
class KeptWhen:
    """Where an optimizer keeps the class it is written with: on the paths where ``test``
    holds, a wrapper whose ``zero_grad`` would detach a fused optimizer's gradients and cannot
    be fixed (the installed timm's ``Lookahead``, returned to the callers) wraps it. ``test`` is
    the condition of that wrap, read at the constructor: nothing it reads can change in
    between (see :func:`kept_when`)."""

    test: str
    written: str  # the callee as written, `optim.SGD`
    wrap: ast.Call  # `Lookahead(optimizer)`
    # NVIDIA's FusedSGD runs nowhere on Ascend: the paths the wrapper runs on get the torch
    # class of the same arithmetic and parameters instead (`torch.optim.SGD`), ``replaces``
    # holding the written class.
    replaces: str | None = None


def _callee(
    qualified_target: str, target: str, choice: tuple[str, bool] | None, kept: KeptWhen | None
) -> str:
    fused = picked_by(*choice, target) if choice else qualified_target
    return f"({kept.written} if {kept.test} else {fused})" if kept else fused


@dataclass(frozen=True)
class Finding:
    """Something reported, not rewritten, at ``node``."""

    node: ast.AST
    message: str
    severity: Severity = Severity.MANUAL


@dataclass(frozen=True)
class ReleasedImport:
    """An import of the old spelling that goes if nothing else uses it once the calls change."""

    module: str
    obj: str | None
    asname: str | None


@dataclass(frozen=True)
class FusedDecisions:
    """NPU101's decisions for one file: the findings in the order found, the rewrites, and the
    imports of the old spellings to release."""

    findings: tuple[Finding, ...]
    rewrites: tuple[Rewrite, ...]
    released_imports: tuple[ReleasedImport, ...]
    # ids of the constructors left unfused whose gradients stay where Ascend apex's
    # `combine_grad=True` packs them (see _Planner._combinable): NPU102 combines them too.
    combinable: frozenset[int] = frozenset()

    def lines(self, suppressions: Suppressions) -> set[int]:
        """The lines where NPU101 says something (a finding, a fix) that no suppression
        comment covers."""
        nodes: list[ast.AST] = [finding.node for finding in self.findings]
        nodes += [rewrite.call for rewrite in self.rewrites]
        lines = {line_of(node) for node in nodes}
        return {line for line in lines if not suppressions.covers(line, CODE)}


def plan_fused(
    view: FileView,
    *,
    level: str | None,
    factories: Mapping[str, Any],
    suppressions: Suppressions,
    shared: Mapping[str, str] | None = None,
    amp_always: bool = False,
    unsafe_fixes: bool = False,
    planned_amp: PlannedAmp | None = None,
    methods: Mapping[str, Any] | None = None,
    lightning: str | None = default_lightning_doubt(),
    elsewhere: Mapping[str, Any] | None = None,
    after_ddp: Callable[[], Mapping[int, str]] | None = None,
    config_types: Collection[int] = (),
) -> FusedDecisions:
    """NPU101's decisions for the file of ``view``.

    ``level`` is the ``opt_level`` NPU102's switch sets on every ``amp.initialize`` (None: no
    switch, or NPU102 does not run); ``factories`` the link stage's facts about the module's
    functions that other files of the run call for an optimizer (empty without any);
    ``suppressions`` the file's suppression comments (a covered constructor is not planned);
    ``shared`` the module's functions that another file starts as hogwild workers on a model
    in shared memory (name -> where ``share_memory()`` is called); ``amp_always`` the setting
    ``amp = "always"``: an ``amp.initialize`` that runs only on some paths counts as reached;
    ``unsafe_fixes`` also applies the `zero_grad` edits that may change other optimizers;
    ``planned_amp`` the ``amp.initialize`` calls NPU105 and NPU106 write in this run;
    ``methods`` the link stage's verdicts on the callers of the module's methods that return
    an optimizer (:mod:`~migrator.rules.optimizers._method_callers`); ``lightning`` why the
    run's Lightning Trainers may shard the parameters of a LightningModule's optimizers (None:
    they cannot; :mod:`~migrator.rules.optimizers._lightning`); ``elsewhere`` the link
    stage's facts about the code of other modules that the file calls
    (:mod:`~migrator.rules.optimizers._handed`); ``after_ddp`` computes the optimizer calls
    that stay after a DDP wrap of their model, with why (NPU203's plan), when first needed;
    ``config_types`` the ids of the classes that the optimizer dicts of an mmengine config
    name in `type` (NPU107's to rewrite or report, not class values of NPU101's).
    """
    # A module's `zero_grad(set_to_none=False)` is safe when the optimizer that holds all of that
    # module's parameters is fused too: plan assuming every constructor is, then again with only
    # those that were, until the assumption holds (each round assumes fewer: it ends).
    # An Ascend apex class written by hand weighs the module's other gradient resets, some of
    # which the same run may remove (a `model.zero_grad()` fixed with another constructor's
    # swap, an optimizer the reset's receiver may hold made fused): when one was weighed, the
    # module is planned once more knowing the first consistent round's rewrites (PoolNet's
    # apex `NpuFusedAdam` in `__init__`, unblocked by the swap of the `Adam` built at each decay
    # of the rate); a round that then loses any of them falls back to the plan made without.
    assumed: set[int] | None = None
    known = _Planned()
    fallback: FusedDecisions | None = None
    while True:
        planner = _Planner(
            view,
            level,
            factories,
            suppressions,
            shared or {},
            planned_amp,
            lightning,
            elsewhere,
            after_ddp,
        )
        planner.amp_always, planner.unsafe_fixes = amp_always, unsafe_fixes
        planner.assumed_fused = assumed
        planner.known = known
        planner.methods = methods or {}
        planner.config_types = config_types
        decisions = planner.decide()
        rewritten = {id(rewrite.call) for rewrite in decisions.rewrites}
        if not planner.relied_on <= rewritten:
            assumed = rewritten if assumed is None else assumed & rewritten
            continue
        done = _Planned.of(decisions)
        if fallback is None:
            if not done.removes(planner.weighed):
                return decisions
            fallback, known = decisions, done  # once: plan again knowing these rewrites
            continue
        return decisions if known.within(done) else fallback


@dataclass(frozen=True)
class _Planned:
    """What a consistent round of :func:`plan_fused` rewrites: the constructors it fuses and the
    `zero_grad` calls it fixes (ids)."""

    fused: frozenset[int] = frozenset()
    fixed: frozenset[int] = frozenset()

    @staticmethod
    def of(decisions: FusedDecisions) -> _Planned:
        rewrites = decisions.rewrites
        return _Planned(
            frozenset(id(rewrite.call) for rewrite in rewrites if rewrite.kept is None),
            frozenset(id(fix.call) for rewrite in rewrites for fix in rewrite.grad_fixes),
        )

    def within(self, other: _Planned) -> bool:
        return self.fused <= other.fused and self.fixed <= other.fixed

    def removes(self, weighed: Collection[int]) -> bool:
        """Whether this round fixes one of the ``weighed`` resets, or fuses an optimizer their
        receivers may hold."""
        return any(key in self.fused or key in self.fixed for key in weighed)


# -- the analysis --------------------------------------------------------------------------------


@dataclass
class _Draft:
    """A rewrite while it is being planned."""

    call: ast.Call
    arguments: list[Argument]
    source: Source
    target: str
    home: str
    amp_line: int | None
    edits: ArgumentEdits = ArgumentEdits()
    notes: list[str] = field(default_factory=list)
    func_style: FuncStyle = "dotted"
    disabled_amp_line: int | None = None  # the `amp.initialize(..., enabled=False)` it reaches
    why: str | None = None  # the reason for the home, when other files' calls decide it
    choice: tuple[str, bool] | None = None  # see Rewrite.choice
    grad_fixes: tuple[GradFix, ...] = ()  # see Rewrite.grad_fixes
    key_drops: list[KeyDrop] = field(default_factory=list)
    dropped_keys: set[str] = field(default_factory=set)  # the keys of ``key_drops``
    # The `**mapping` arguments: (argument index, what the flow shows of their keys).
    forwarded: list[tuple[int, ForwardedKeys]] = field(default_factory=list)
    lookup: _Lookup | None = None  # a `getattr(torch.optim, name)(...)` construction
    named_by: str | None = None  # such a lookup whose name an `if` tests: the class, when
    amp_parameter: AmpParameter | None = None  # see Rewrite.amp_parameter
    kept: KeptWhen | None = None  # see Rewrite.kept
    # The keys the constructor may be given, as written or through `**` (None: any may come),
    # and whether `lr` is among them on every path: what the kept class must take as written.
    given_keys: frozenset[str] | None = None
    lr_given: bool = False

    @property
    def qualified_target(self) -> str:
        return f"{self.home}.{self.target}"

    @property
    def callee(self) -> str:
        return _callee(self.qualified_target, self.target, self.choice, self.kept)


class _Planner:
    def __init__(
        self,
        view: FileView,
        level: str | None,
        factories: Mapping[str, Any],
        suppressions: Suppressions,
        shared: Mapping[str, str],
        planned_amp: PlannedAmp | None = None,
        lightning: str | None = default_lightning_doubt(),
        elsewhere: Mapping[str, Any] | None = None,
        after_ddp: Callable[[], Mapping[int, str]] | None = None,
    ) -> None:
        self.view = view
        self.planned_amp = planned_amp or PlannedAmp()
        self.index = view.index
        self.level = level
        self.suppressions = suppressions
        self.flow = OptimizerFlow.of(view)
        self.hazards = FusionHazards(
            view, self.flow, elsewhere=HandedCode(view, elsewhere or {}), after_ddp=after_ddp
        )
        self.contract = ParameterContract(view, self.flow, shared, lightning)
        self.sites = factory_sites(view, factories, level)
        self.factory_names = frozenset(factories)  # whose calls in other files the link found
        self.factories = factories
        # A file of the run with apex's `amp.initialize` that this file sees (link stage; only
        # for a file whose functions returning an optimizer are used as values).
        self.amp_seen: str | None = (elsewhere or {}).get("amp_seen")
        # Functions returning their optimizer inside another value -> a file that calls apex's
        # amp.initialize with an optimizer built out of its sight and names them.
        self.wrapped_amp: Mapping[str, str] = (elsewhere or {}).get("wrapped_amp", {})
        # attribute an optimizer is stored in -> a file whose apex amp may read it there
        self.amp_stored: Mapping[str, str] = (elsewhere or {}).get("amp_stored", {})
        # The module's functions that zero a parameter's gradients and that no other file of
        # the run names: their calls are all here (link stage; see _followed_risk).
        self.own_zeroing: frozenset[str] = frozenset(
            (elsewhere or {}).get("own_zero_grad_helpers", ())
        )
        self.findings: list[Finding] = []
        self.drafts: list[_Draft] = []
        self.import_rewrites: dict[int, _ImportDraft] = {}  # id(ImportFrom) -> its rewrite
        self.released: list[ReleasedImport] = []
        self.amp_always = False  # `amp = "always"`: gated amp.initialize calls count as reached
        self.unsafe_fixes = False  # --unsafe-fixes: apply zero_grad edits that are not provable
        self.assumed_fused: set[int] | None = None  # constructors assumed fused (None: all)
        self.known = _Planned()  # what an earlier round of plan_fused rewrites
        # ids of the `zero_grad` resets an apex class written by hand met, and of the
        # constructors their receivers may hold: what this run's rewrites may settle
        self.weighed: set[int] = set()
        self.relied_on: set[int] = set()  # constructors whose being fused a safe edit assumes
        # id(unsupported constructor) -> zero_grad calls a safe edit excused because it raises
        self.excused: dict[int, list[ast.Call]] = {}
        self._mapped_values: set[int] = set()  # class values whose call NPU101 maps
        # id(call) -> where its callee is given the classes a mapping at the call fuses: the
        # keys of a `**mapping` stored apart from all of them never reach those classes.
        self._class_paths: dict[int, list[ast.expr]] = {}
        self.methods: Mapping[str, Any] = {}  # the callers of the module's methods (link stage)
        self.config_types: Collection[int] = ()  # see plan_fused
        # id(function of the module) -> its parameters that receive an optimizer of Ascend
        # apex's own class, where the optimizer is followed (see _kept_by)
        self._kept_names: dict[int, set[str]] = {}

    def decide(self) -> FusedDecisions:
        wrapped = self._report_fp16_wrappers()
        for call in self._dynamic_lookups():
            if id(call) not in wrapped and not self._suppressed(call):
                self._plan_lookup(call)
        for call in self.flow.candidates:
            if id(call) not in wrapped:
                self._examine_call(call)
        for class_def in self.index.nodes(ast.ClassDef):
            self._examine_subclass(class_def)
        self._plan_class_value_calls()
        self._plan_subclass_calls()
        self._report_class_values()
        self._report_no_fused_version()
        self._plan_call_names()
        rewrites = self._rewrites()
        return FusedDecisions(
            self._noted_findings(rewrites),
            rewrites,
            tuple(self.released),
            self._combinable(rewrites),
        )

    @cached_property
    def _gains_gradients_later(self) -> bool:
        """A parameter may first get a gradient after the first `scale_loss` (see
        :func:`_unfreezes`): Ascend apex leaves it out of the combined gradients."""
        return _unfreezes(self.index)

    def _combinable(self, rewrites: Sequence[Rewrite]) -> frozenset[int]:
        """The constructors left unfused that reach an `amp.initialize` of the file and whose
        gradients stay in the flat buffers `combine_grad=True` packs them into at the first
        `scale_loss`: Ascend apex combines the gradients of any optimizer it is given (its
        guide shows `torch.optim.SGD` with `combine_grad=True`), then unscales, checks and
        zeroes them per buffer; only code that sets a gradient to None or replaces it detaches
        it from the buffer, and a parameter without a gradient at the first `scale_loss` stays
        out of it. So: torch's classes and Hugging Face's AdamW (NVIDIA apex's do not run on
        Ascend), no `requires_grad` set and no parameter group added in the module, parameters
        neither sharded nor re-allocated, no `.grad` store, no `zero_grad` that sets gradients
        to None but a module's default one on a model that feeds the optimizer (Ascend apex
        makes `nn.Module.zero_grad` zero in place under `combine_grad`), and no code of another
        module the optimizer goes to that may break it."""
        rewritten = {id(rewrite.call) for rewrite in rewrites}
        found: set[int] = set()
        for call in self.flow.calls_reaching_amp:
            if id(call) in rewritten:
                continue
            if not self._suppressed(call) and self._keeps_gradients(call):
                found.add(id(call))
        return frozenset(found)

    def _keeps_gradients(self, call: ast.Call) -> bool:
        name = self.view.qualified_name(class_of(self.view, call))
        if not isinstance(name, str) or not (
            name.startswith("torch.optim.") or name in NO_FUSED_VERSION
        ):
            return False  # NVIDIA apex's classes do not run on Ascend at all
        if has_star(call) or self._call_sites(call) or self._escaped(call) is not None:
            return False  # forwarded arguments, or code of other modules that gets it
        if self._gains_gradients_later:
            return False
        given = argument(call, "params", 0)
        params = given.value if given is not None else None
        if params is None or self.contract.sharding(call, params):
            return False
        if self.contract.reallocations(call, params):
            return False
        models = models_feeding(self.flow, params)
        return all(
            _module_default_zero_grad(hazard, models)
            or (hazard.node is call and id(call) in self.hazards.after_ddp)
            for hazard in self.hazards.of(call, params)
        )

    def _noted_findings(self, rewrites: Sequence[Rewrite]) -> tuple[Finding, ...]:
        """The findings, where an unsupported optimizer shares a module with a rewritten one,
        with the `zero_grad(set_to_none=False)` edits that also run on its path."""
        applied = {id(fix.call): fix for rewrite in rewrites for fix in rewrite.grad_fixes}
        findings = []
        for finding in self.findings:
            excused = {id(c): c for c in self.excused.get(id(finding.node), ()) if id(c) in applied}
            if excused:
                calls = ", ".join(
                    f"`{self.view.written(call.func)}(set_to_none=False)` (line {line_of(call)})"
                    for call in excused.values()
                )
                finding = replace(
                    finding,
                    message=f"{finding.message}. npu-migrate wrote {calls} for the optimizer "
                    "it fused on the other path; if you replace this one by an optimizer that "
                    "skips parameters whose gradient is None, check that call",
                )
            findings.append(finding)
        return tuple(findings)

    def _report(self, node: ast.AST, message: str, severity: Severity = Severity.MANUAL) -> None:
        self.findings.append(Finding(node, message, severity))

    def _suppressed(self, node: ast.AST) -> bool:
        """A suppression comment covers the line where ``node`` starts (then nothing is planned
        for it, and the imports it uses are left to the calls that are rewritten)."""
        return self.suppressions.covers(line_of(node), CODE)

    def _call_sites(self, call: ast.Call) -> list[CallSite]:
        return self.sites.get(id(call), [])

    def _escaped(self, call: ast.Call) -> str | None:
        """Where the function that returns the optimizer ``call`` builds is used as a value (in
        this module, or in another file of the run) while apex's ``amp.initialize`` is in sight
        of that place: who calls it there, and whether its optimizer then goes through amp, is
        out of npu-migrate's sight; also where it is returned inside another value and a file
        that names the function may take it out for its ``amp.initialize``; None otherwise."""
        value = values_returning(self.view).get(id(call))
        if value is not None:
            name, line = value
            amp = "this module" if untraced_amp(self.view) else self.amp_seen
            if amp is not None:
                return (
                    f"{name} returns it and is used as a value (line {line}), and {amp} "
                    "calls apex's `amp.initialize` with an optimizer built out of its sight"
                )
        wrapped = wrapped_returning(self.view).get(id(call))
        if wrapped is not None:
            name, line, wrapper = wrapped
            amp = self.wrapped_amp.get(name)
            if amp is None and untraced_amp(self.view) and self._named_here(name):
                amp = "this module"
            if amp is not None:
                return (
                    f"`{name}` returns it inside `{wrapper}(...)` (line {line}), and {amp} "
                    "calls apex's `amp.initialize` with an optimizer built out of its sight"
                )
        for name, facts in self.factories.items():
            where = facts.get("escapes_amp")
            if where is not None and any(o is call for o in returned_origins(self.view, name)):
                how = (
                    "is called by a name that may also be another module's function"
                    if facts.get("escapes_open")
                    else "is used as a value"
                )
                return (
                    f"`{name}` returns it and {how} at {where}, which sees a file that calls "
                    "apex's `amp.initialize`"
                )
        return None

    def _named_here(self, name: str) -> bool:
        """The module reads the name ``name`` (calls the function, or hands it on)."""
        return any(
            node.id == name and isinstance(node.ctx, ast.Load)
            for node in self.view.index.nodes(ast.Name)
        )

    def _stored_for_amp(self, call: ast.Call) -> str | None:
        """Where the optimizer ``call`` builds is stored on an object (``self.optimizer_G``)
        that an apex ``amp.initialize`` may read without the flow tracing it (see
        :func:`amp_attributes`): in a module of the run this one sees, or in this module; None
        otherwise."""
        stored = attribute_stores(self.view).get(id(call))
        if stored is None:
            return None
        amp = self.amp_stored.get(stored.ref.key)
        if any(stored.ref.meets(read) for read in amp_attributes(self.view)):
            amp = "this module"
        if amp is None:
            return None
        pattern = stored.ref.pattern
        naming = "" if pattern.endswith("*") else f" and reads `{pattern}`"
        return (
            f"it is stored in `{stored.written}` (line {stored.line}), and {amp} gives apex's "
            f"`amp.initialize` an optimizer it does not build{naming}"
        )

    # -- wrappers, dynamic lookups, class values ----------------------------------------------

    def _report_fp16_wrappers(self) -> set[int]:
        """Report ``FP16_Optimizer(...)``; the ids of the constructors it wraps, left as they are
        so that the user migrates wrapper and optimizer together."""
        wrapped: set[int] = set()
        wrappers_of: dict[int, tuple[ast.Call, list[ast.Call]]] = {}
        for call in self.flow.candidates:
            if isinstance(self.view.qualified_name_in(call.func, FP16_OPTIMIZERS), str):
                if self._suppressed(call) or id(call) in self.planned_amp.rewritten_wrappers():
                    continue  # (NPU106 rewrites it: its optimizer is planned for amp O2)
                inner: list[tuple[ast.Call, str]] = []
                for arg in arguments(call):
                    for origin in self.flow.origins(arg.value):
                        wrapped.add(id(origin))
                        if not isinstance(origin, ast.Call):
                            continue
                        wrappers_of.setdefault(id(origin), (origin, []))[1].append(call)
                        name = self.view.qualified_name_in(
                            class_of(self.view, origin), KNOWN_OPTIMIZERS
                        )
                        if isinstance(name, str):
                            inner.append((origin, name))
                self._report(call, _fp16_wrapper_advice(inner, self._no_counterpart))
        for origin, wrappers in wrappers_of.values():
            self._report_wrapped(origin, wrappers)
        return wrapped

    def _report_wrapped(self, origin: ast.Call, wrappers: list[ast.Call]) -> None:
        """A constructor built on another line than its `FP16_Optimizer` wrappers says there
        why it is left alone (the wrappers' lines have the advice)."""
        lines = sorted({line_of(wrapper) for wrapper in wrappers} - {line_of(origin)})
        name = self.view.qualified_name_in(class_of(self.view, origin), KNOWN_OPTIMIZERS)
        if not lines or not isinstance(name, str) or self._suppressed(origin):
            return
        where = f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
        missing = self._no_counterpart(origin, name)
        if missing is not None:
            self._report(
                origin,
                f"`{name}` is not rewritten: {missing}; it is wrapped in `FP16_Optimizer` at "
                f"{where}, which goes with it",
            )
            return
        self._report(
            origin,
            f"`{name}` is not rewritten: it is wrapped in `FP16_Optimizer` at {where}; migrate "
            "the two together (see the finding there)",
        )

    def _no_counterpart(self, call: ast.Call, name: str) -> str | None:
        """Why the optimizer ``call`` builds (a ``name`` class) has no NPU fused counterpart at
        all, whatever else changes around it: an unsupported class, or an argument written
        with a value no NPU fused optimizer implements (``bias_correction=False``); else None."""
        if name in UNSUPPORTED:
            return UNSUPPORTED[name]
        source = SOURCES.get(name)
        if source is None:
            return None
        args = arguments(call)
        names, _ = _bind(self.view, args, source)
        for arg, parameter in zip(args, names, strict=True):
            if parameter in NEUTRAL_AT:
                neutral, reason = NEUTRAL_AT[parameter]
                value = literal_value(arg.value)
                if value is not NOT_LITERAL and value != neutral:
                    return reason
        return None

    def _report_class_values(self) -> None:
        """An optimizer class used as a value (``{"adam": FusedAdam}[name]``, ``opt_class =
        torch.optim.SGD``, ``getattr(apex.optimizers, name)``): the optimizer it builds later
        cannot be rewritten, so say what to put in its place."""
        for node in self._class_value_candidates():
            if self._suppressed(node) or not self._used_as_value(node):
                continue
            if id(node) in self.config_types:
                continue  # `type=SGD` in an mmengine config: NPU107's
            if self._alias_called_here(node) or id(node) in self._mapped_values:
                continue  # the call of the alias is reported (a value alias is ambiguous)
            name = self.view.qualified_name_in(node, KNOWN_OPTIMIZERS)
            if isinstance(name, str):
                # NVIDIA apex's classes fail on Ascend: manual; torch's run unfused: info.
                apex = name.startswith(APEX_HOME + ".")
                severity = Severity.MANUAL if apex else Severity.INFO
                code = self.view.written(node)
                sharder = self._sharder_given(node)
                if sharder is not None:
                    message = _sharded_class_message(code, name, sharder)
                elif self._given_to_rpc_optimizer(node):
                    message = _rpc_class_message(code, name)
                else:
                    message = _class_value_message(code, name)
                self._report(node, message, severity)
        for lookup in self._getattr_values():
            if not self._suppressed(lookup):
                self._report(lookup, _DYNAMIC_LOOKUP_ADVICE)

    def _class_value_candidates(self) -> list[ast.expr]:
        """Names and attributes that may resolve to an optimizer class, in source order."""
        found: list[ast.expr] = []
        for last in OPTIMIZER_CLASS_NAMES:
            found += [a for a in self.index.attributes(last) if isinstance(a.ctx, ast.Load)]
        reaching = self.flow.reaching_names
        for identifier in sorted(self.index.identifiers()):
            if identifier in reaching:
                found += [n for n in self.index.names(identifier) if isinstance(n.ctx, ast.Load)]
        found.sort(key=lambda node: (node.lineno, node.col_offset))
        return [node for node in found if self.view.may_name(node, NPU1_ROOTS)]

    def _sharder_given(self, node: ast.expr) -> str | None:
        """``ZeroRedundancyOptimizer(params, optimizer_class=<node>)``: the sharding layer that
        builds its optimizers from the class ``node``, as written."""
        call = self.index.parent(node)
        if isinstance(call, ast.keyword):
            call = self.index.parent(call)
        if not isinstance(call, ast.Call) or node is call.func:
            return None
        name = self.view.qualified_name(call.func)
        if isinstance(name, str) and name.rpartition(".")[2] == "ZeroRedundancyOptimizer":
            return self.view.written(call.func)
        return None

    def _given_to_rpc_optimizer(self, node: ast.expr) -> bool:
        """``DistributedOptimizer(<node>, param_rrefs, ...)`` of ``torch.distributed.optim``
        (first argument or ``optimizer_class=``): the class it builds its optimizers from on the
        workers that own the parameters."""
        parent = self.index.parent(node)
        call = self.index.parent(parent) if isinstance(parent, ast.keyword) else parent
        if not isinstance(call, ast.Call):
            return False
        given = (
            call.args[:1]
            if parent is call
            else [k.value for k in call.keywords if k.arg == "optimizer_class"]
        )
        if not any(arg is node for arg in given):
            return False
        name = self.view.qualified_name(call.func)
        return isinstance(name, str) and name in _RPC_OPTIMIZERS

    def _alias_called_here(self, node: ast.expr) -> bool:
        """``Optimizer = torch.optim.SGD`` where this file calls ``Optimizer(...)`` and every
        such call is reported as ambiguous or maps the class (``{torch.optim.SGD:
        ...}.get(Optimizer, Optimizer)(...)``, planned now or written by an earlier run). A
        mapped call says that it calls any other value as before, which for NVIDIA apex's
        classes (they do not run on Ascend) is reported where the value is assigned."""
        statement = self.index.parent(node)
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is not node:
            return False
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if not all(isinstance(target, ast.Name) for target in targets):
            return False
        mapped = {
            id(draft.call): {display for display, _ in draft.lookup.mapped}
            for draft in self.drafts
            if draft.lookup is not None
        }
        name = self.view.qualified_name_in(node, KNOWN_OPTIMIZERS)
        display = SOURCES[name].display if isinstance(name, str) and name in SOURCES else None
        nvidia = isinstance(name, str) and name.startswith(APEX_HOME + ".")
        called = False
        for target in targets:
            assert isinstance(target, ast.Name)
            for read in self.index.names(target.id):
                call = self.index.parent(read)
                if not isinstance(call, ast.Call):
                    continue
                if not any(b.node is target for b in self.index.bindings_of(read)):
                    continue  # another scope's name
                if call.func is read and id(call) in mapped:
                    classes = mapped[id(call)]
                elif mapped_get(self.view, call):
                    classes = self._mapping_keys(call)
                else:
                    called = called or call.func is read
                    continue
                if display not in classes and nvidia:
                    return False  # left as it is at that call, where it does not run
                called = True
        return called

    def _mapping_keys(self, call: ast.Call) -> set[str]:
        """The classes a ``{torch.optim.SGD: torch_npu.optim.NpuFusedSGD}.get(...)`` maps."""
        if not mapped_get(self.view, call):
            return set()
        assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Dict)
        keys = (self.view.qualified_name(key) for key in call.func.value.keys if key is not None)
        return {SOURCES[key].display for key in keys if isinstance(key, str) and key in SOURCES}

    def _report_no_fused_version(self) -> None:
        """Constructions of another package's optimizer that has no NPU fused version with the
        same arithmetic (Hugging Face's ``AdamW``): they run on NPU unfused, and the report says
        why none is fused."""
        nodes: list[ast.expr] = []
        for last in sorted({name.rpartition(".")[2] for name in NO_FUSED_VERSION}):
            nodes += self.index.attributes(last)
        reaching = self.index.names_reaching(NO_FUSED_ROOTS)
        for identifier in sorted(self.index.identifiers()):
            if identifier in reaching:
                nodes += self.index.names(identifier)
        for node in sorted(nodes, key=lambda node: (node.lineno, node.col_offset)):
            call = self.index.parent(node)
            if not isinstance(call, ast.Call) or call.func is not node or self._suppressed(call):
                continue
            name = self.view.qualified_name(node)
            if isinstance(name, str) and name in NO_FUSED_VERSION:
                message = f"`{name}` is not rewritten: {NO_FUSED_VERSION[name]}"
                self._report(call, message, Severity.INFO)

    def _used_as_value(self, node: ast.expr) -> bool:
        """Not called, not part of a longer dotted name, not a type test (``isinstance``,
        ``is None``, ``==``), not a base class or an annotation."""
        parent = self.index.parent(node)
        if isinstance(parent, ast.Attribute):
            return False  # `torch.optim` in `torch.optim.SGD`, or `SGD.__name__`
        if isinstance(parent, ast.keyword):
            parent = self.index.parent(parent)
        if isinstance(parent, ast.Call):
            if parent.func is node:
                return False
            built = self.index.parent(parent)
            if isinstance(built, ast.Call) and class_of(self.view, built) is node:
                return False  # given to a gradient-clipping wrapper: examined at `built`
            if isinstance(parent.func, ast.Name) and parent.func.id in _TYPE_TESTS:
                return False
            if self.view.qualified_name(parent.func) in _INTROSPECTION:
                return False  # `inspect.signature(torch.optim.AdamW)` builds no optimizer
        if isinstance(parent, ast.Tuple):
            grandparent = self.index.parent(parent)
            if isinstance(grandparent, ast.Call) and isinstance(grandparent.func, ast.Name):
                return grandparent.func.id not in _TYPE_TESTS  # isinstance(x, (SGD, Adam))
        if isinstance(parent, (ast.Compare, ast.ClassDef)):
            return False
        if isinstance(parent, ast.IfExp) and parent.body is node:
            called = self.index.parent(parent)
            if isinstance(called, ast.Call) and called.func is parent:
                # `(optim.SGD if <wrapped> else torch_npu.optim.NpuFusedSGD)(...)`: KeptWhen
                return not fused_class(self.view, parent.orelse)
        if (
            isinstance(parent, ast.Dict)
            and any(node is key for key in parent.keys)
            and fused_mapping(self.view, parent)
        ):
            return False  # `{torch.optim.SGD: torch_npu.optim.NpuFusedSGD}`: NPU101's mapping
        return not self._in_annotation(node)

    def _in_annotation(self, node: ast.expr) -> bool:
        child: ast.AST = node
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, ast.arg) and ancestor.annotation is child:
                return True
            if isinstance(ancestor, ast.AnnAssign) and ancestor.annotation is child:
                return True
            if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return ancestor.returns is child
            if isinstance(ancestor, ast.stmt):
                return False
            child = ancestor
        return False

    def _getattr_values(self) -> list[ast.Call | ast.Subscript]:
        """Lookups of a class by name not called on the spot (``opt_class = getattr(...)``);
        the called form is reported by :meth:`_dynamic_lookups`."""
        found: list[ast.Call | ast.Subscript] = []
        for lookup in self._getattr_lookups():
            call = self.index.parent(lookup)
            called = isinstance(call, ast.Call) and call.func is lookup
            if not called and not self._mapped_default(lookup) and not self._registered(lookup):
                found.append(lookup)
        return found

    def _registered(self, lookup: ast.Call | ast.Subscript) -> bool:
        """``_optim = getattr(torch.optim, name)`` that is only tested and put in a registry
        (mmcv's and mmengine's ``register_torch_optimizers``: ``if inspect.isclass(_optim) and
        issubclass(_optim, torch.optim.Optimizer): OPTIMIZERS.register_module()(_optim)``):
        nothing is built here; the configs name the class (NPU107)."""
        target = self.index.assigned_name(lookup)
        if target is None:
            return False
        name = target.id
        scope = self.flow.scope_of(lookup)
        # Every read of the name in the function (whatever the assignment it sees).
        reads = [
            node
            for node in self.index.names(name)
            if isinstance(node.ctx, ast.Load) and _inside(self.index, node, scope)
        ]
        return bool(reads) and all(_registers_or_tests(self.index, read) for read in reads)

    def _mapped_default(self, lookup: ast.Call | ast.Subscript) -> bool:
        """``{"SGD": torch_npu.optim.NpuFusedSGD, ...}.get(name, <lookup>)``: the mapping NPU101
        writes, whose other names keep torch's class."""
        get = self.index.parent(lookup)
        if not (
            isinstance(get, ast.Call)
            and isinstance(get.func, ast.Attribute)
            and get.func.attr == "get"
            and isinstance(get.func.value, ast.Dict)
            and len(get.args) == 2
            and get.args[1] is lookup
        ):
            return False
        return fused_mapping(self.view, get.func.value)

    def _getattr_lookups(self) -> list[ast.Call | ast.Subscript]:
        """Lookups of a class by name in ``torch.optim`` or ``apex.optimizers``:
        ``getattr(<module>, name)``, ``<module>.__dict__[name]`` and ``vars(<module>)[name]``,
        in source order."""
        found: list[ast.Call | ast.Subscript] = []
        callees: list[ast.expr] = [*self.index.names("getattr"), *self.index.attributes("getattr")]
        for callee in callees:
            lookup = self.index.parent(callee)
            if not isinstance(lookup, ast.Call) or lookup.func is not callee or not lookup.args:
                continue
            if self.view.qualified_name(callee) != "builtins.getattr":
                continue
            module = self.view.qualified_name(arguments(lookup)[0].value)
            if isinstance(module, str) and module in OPTIMIZER_MODULES:
                found.append(lookup)
        namespaces: list[ast.expr] = list(self.index.attributes("__dict__"))
        for callee in self.index.names("vars"):
            call = self.index.parent(callee)
            if (
                isinstance(call, ast.Call)
                and call.func is callee
                and len(call.args) == 1
                and self.view.qualified_name(callee) == "builtins.vars"
            ):
                namespaces.append(call)
        for namespace in namespaces:
            lookup = self.index.parent(namespace)
            if isinstance(lookup, ast.Subscript) and lookup.value is namespace:
                module = self.view.qualified_name(_namespace_module(namespace))
                if isinstance(lookup.ctx, ast.Load) and module in OPTIMIZER_MODULES:
                    found.append(lookup)
        found.sort(key=lambda node: (node.lineno, node.col_offset))
        return found

    def _dynamic_lookups(self) -> list[ast.Call]:
        """``getattr(torch.optim, name)(...)``, found from the ``getattr`` names."""
        found: list[ast.Call] = []
        for lookup in self._getattr_lookups():
            call = self.index.parent(lookup)
            if isinstance(call, ast.Call) and call.func is lookup:
                found.append(call)
        return found

    # -- constructors --------------------------------------------------------------------------

    def _examine_call(self, call: ast.Call) -> None:
        """Plan the rewrite of ``call``, or report why it cannot be rewritten."""
        self._check_apex_home(call)
        name = self.view.qualified_name_in(class_of(self.view, call), KNOWN_OPTIMIZERS)
        if isinstance(name, Ambiguous):
            if self._suppressed(call) or not self._plan_class_value(call):
                test = self._class_tested(call.func)
                if test is not None and not self._suppressed(call):
                    self._report(call, self._tested_class_message(call, test))
                else:
                    self._report(call, self._ambiguous_message(call, name))
        elif name in UNSUPPORTED:
            self._report(call, f"`{name}` is not rewritten: {UNSUPPORTED[name]}")
        elif name in SOURCES and not self._suppressed(call):
            self._plan(call, SOURCES[name])

    def _check_apex_home(self, call: ast.Call) -> None:
        """An Ascend apex fused optimizer written by hand raises in `step()` where it reaches no
        `amp.initialize`: planned as the torch constructors are, with torch_npu's class of the
        same name (same arguments, same update) for the paths without amp, where every path of
        the optimizer can be followed; reported where it cannot."""
        name = npu_fused_name(self.view, class_of(self.view, call))
        if (
            name is None
            or not name.startswith(APEX_HOME + ".")
            or self._suppressed(call)
            or self._apex_home_settled(call)
        ):
            return
        source = APEX_HOME_SOURCES.get(name)
        sites = self._call_sites(call)
        without_amp = [site for site in sites if not site.with_amp]
        torch_npu_class = f"{TORCH_NPU_HOME}.{name.rsplit('.', 1)[1]}"
        handed_on = self._apex_home_handed_on(call)
        self._note_receivers(call)
        resets = self._unfollowed_resets(call)
        if id(call) in self.flow.reaches_amp or (sites and not without_amp):
            # amp runs on some paths only (in this module, or where its factory is called): the
            # class is picked by amp's condition where npu-migrate can write it; where it
            # cannot, nothing is said, as before (the paths with amp train as written).
            in_sight = sites or self._reaches_enabled_amp(call) or handed_on is None
            if source is not None and in_sight:
                said = len(self.findings)
                self._plan_apex_home(call, source, resets)
                del self.findings[said:]
            return
        if sites:
            handed_on = None  # the call sites show where it goes
        if source is not None and handed_on is None:
            self._plan_apex_home(call, source, resets)
            return
        if without_amp:
            self._report(
                call,
                f"`{name}` is returned by `{without_amp[0].factory}` to calls where it does not "
                f"reach `amp.initialize` ({_sites_listed(without_amp)}), and "
                f"Ascend apex's fused optimizers raise in `step()` without amp: build "
                f"`{torch_npu_class}` for those calls (torch_npu's steps "
                "stale gradients under apex amp, so keep apex's where amp runs)",
                Severity.INFO,
            )
            return
        where = (
            f" ({self._handed_on_phrase(handed_on)}, so npu-migrate cannot tell)"
            if handed_on is not None
            else ""
        )
        self._report(
            call,
            f"`{name}` does not reach `amp.initialize` in this module{where}, and Ascend apex's "
            "fused optimizers raise in `step()` without amp: if no other module passes it to "
            f"`amp.initialize`, use `{torch_npu_class}`, which works without amp",
            Severity.INFO,
        )

    def _plan_apex_home(self, call: ast.Call, source: Source, resets: Sequence[ast.AST]) -> None:
        """:meth:`_plan` with Ascend apex's own class, reported instead where a rewrite would
        meet gradient resets that its checks do not weigh against this optimizer."""
        drafted = len(self.drafts)
        self._plan(call, source)
        if resets and len(self.drafts) > drafted:
            del self.drafts[drafted:]
            self._report(call, _unfollowed_resets_message(self.view, source, resets))

    def _apex_home_settled(self, call: ast.Call) -> bool:
        """Ascend apex's class stays as written, with nothing to say: the optimizer goes through
        an enabled `amp.initialize` of this module on every path (whatever the callers of a
        function that returns it do), or through one at every call of that function, or NPU105
        or NPU106 give it one."""
        if self.planned_amp.wrappers_of(call) or self.planned_amp.added_for(call):
            return True
        reached = self.flow.amp_calls_reached.get(id(call), [])
        if reached:
            settings = [amp_options(self.view, amp_call, self.level) for amp_call in reached]
            enabled = [options for options in settings if not options.disabled]
            if not enabled:
                return False  # `enabled=False`: amp does nothing there
            return self.amp_always or self._amp_gate(call, enabled) is None
        sites = self._call_sites(call)
        if not sites or any(not site.with_amp for site in sites):
            return False
        return self.amp_always or self._gated_site(sites) is None

    def _reaches_enabled_amp(self, call: ast.Call) -> bool:
        return any(
            not amp_options(self.view, amp_call, self.level).disabled
            for amp_call in self.flow.amp_calls_reached.get(id(call), [])
        )

    def _apex_home_handed_on(self, call: ast.Call) -> ast.AST | None:
        """Where an optimizer that reaches no `amp.initialize` in its module may leave the
        module's sight, for an `amp.initialize` npu-migrate does not see (None: nowhere).

        It must be assigned to a name, whose reads only step, read or test it, or give it to
        an LR scheduler, a GradScaler or a function of the module that does the same with it:
        returned, stored, or given to anything else, torch_npu's class could meet apex amp
        elsewhere and step stale gradients where apex's raised."""
        statement = self.index.parent(call)
        assigned = (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ) or (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name))
        if not assigned:
            return statement
        visited: set[tuple[int, frozenset[str]]] = set()

        def constructed(value: ast.expr) -> bool:
            return any(origin is call for origin in self.flow.origins(value))

        return escape(
            self.view,
            call,
            lambda given: (
                self.flow.is_amp_initialize(given) or self._kept_by(given, constructed, visited)
            ),
        )

    def _kept_by(
        self,
        given: ast.Call,
        is_optimizer: Callable[[ast.expr], bool],
        visited: set[tuple[int, frozenset[str]]],
    ) -> bool:
        """``given`` calls a function of the module (its name's one binding), whose
        parameters that receive the optimizer (the arguments ``is_optimizer``) only step, read
        or test it, or give it to an LR scheduler, a GradScaler or a function that does the
        same (``visited``: the functions checked or being checked)."""
        function = self._function_named(given.func)
        if function is None or function.decorator_list:
            return False
        received = _parameters_given(given, function, is_optimizer)
        if not received:
            return False
        key = (id(function), frozenset(received))
        if key in visited:
            return True
        visited.add(key)
        for node in self.index.walk(function):
            if not (isinstance(node, ast.Name) and node.id in received):
                continue
            if not isinstance(node.ctx, ast.Load):
                return False  # rebound: what the name holds is no longer followed
            parent = self.index.parent(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue
            if isinstance(parent, ast.Compare | ast.BoolOp | ast.UnaryOp):
                continue
            if isinstance(parent, ast.If | ast.IfExp | ast.While) and parent.test is node:
                continue
            inner = self.index.parent(parent) if isinstance(parent, ast.keyword) else parent
            if not isinstance(inner, ast.Call) or inner.func is node:
                return False
            if not (takes(self.view, inner) or self._kept_by(inner, _is(node), visited)):
                return False
        return True

    def _note_receivers(self, call: ast.Call) -> None:
        """Note the parameters of the module's functions that the optimizer of ``call`` is given
        to, directly or through other functions (for :meth:`_fused_receiver`)."""
        seen: set[tuple[int, frozenset[str]]] = set()
        reads = [
            node
            for node in self.index.nodes(ast.Name)
            if isinstance(node.ctx, ast.Load)
            and any(origin is call for origin in self.flow.origins(node))
        ]
        while reads:
            read = reads.pop()
            parent = self.index.parent(read)
            given = self.index.parent(parent) if isinstance(parent, ast.keyword) else parent
            if not isinstance(given, ast.Call) or given.func is read:
                continue
            function = self._function_named(given.func)
            received = _parameters_given(given, function, _is(read)) if function else set()
            key = (id(function), frozenset(received))
            if function is None or not received or key in seen:
                continue
            seen.add(key)
            self._kept_names.setdefault(id(function), set()).update(received)
            reads += [
                node
                for node in self.index.walk(function)
                if isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Load)
                and node.id in received
            ]

    def _unfollowed_resets(self, call: ast.Call) -> list[ast.AST]:
        """The gradient resets of the module that the hazard checks of :meth:`_plan` do not
        weigh against the optimizer of ``call`` (they look in its own function and where the
        flow shows it stepped): a `zero_grad` that may set gradients to None, or a store to or
        `del` of a `.grad`, in any other function. Any of them may detach the gradients of
        this optimizer's parameters from torch_npu's flat buffer. A `zero_grad` of this
        optimizer (by the flow, or a parameter it is followed into) or of another NPU fused one,
        without arguments, zeroes in place and is not one."""
        unit = self.hazards.unit_of(call)
        found: list[ast.AST] = []
        for attribute in self.index.attributes("zero_grad"):
            reset = self.index.parent(attribute)
            if not isinstance(reset, ast.Call) or reset.func is not attribute:
                continue
            if self.hazards.unit_of(reset) is unit or id(reset) in self.known.fixed:
                continue
            set_to_none = argument(reset, "set_to_none", 0)
            if set_to_none is not None and literal_value(set_to_none.value) is False:
                continue
            if set_to_none is None and self._fused_receiver(attribute.value, call):
                continue
            found.append(reset)
            self.weighed.add(id(reset))
            self.weighed.update(id(origin) for origin in self.flow.origins(attribute.value))
        for attribute in self.index.attributes("grad"):
            # `p.grad /= n` updates the tensor in place and stores it back: not a reset.
            in_place = isinstance(self.index.parent(attribute), ast.AugAssign)
            stored = isinstance(attribute.ctx, ast.Store | ast.Del) and not in_place
            if stored and self.hazards.unit_of(attribute) is not unit:
                found.append(attribute)
        return sorted(found, key=line_of)

    def _fused_receiver(self, receiver: ast.expr, call: ast.Call) -> bool:
        """``receiver`` holds the optimizer of ``call``, or another NPU fused one."""
        if isinstance(receiver, ast.Name):
            scope = self.flow.scope_of(receiver)
            if receiver.id in self._kept_names.get(id(scope), set()):
                return True
        origins = self.flow.origins(receiver)
        return bool(origins) and all(
            origin is call
            or id(origin) in self.known.fused
            or (
                isinstance(origin, ast.Call)
                and npu_fused_name(self.view, class_of(self.view, origin)) is not None
            )
            for origin in origins
        )

    def _function_named(self, func: ast.expr) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function of the module that ``func`` names by its only binding."""
        if not isinstance(func, ast.Name):
            return None
        bindings = self.index.bindings_of(func)
        if len(bindings) != 1 or bindings[0].kind is not BindingKind.FUNCTION:
            return None
        function = bindings[0].node
        return function if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) else None

    def _handed_on_phrase(self, node: ast.AST) -> str:
        """Where an optimizer leaves the module's sight, as a message says it."""
        line = f"line {line_of(node)}"
        while isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict | ast.Starred):
            parent = self.index.parent(node)
            if parent is None:
                break
            node = parent
        if isinstance(node, ast.Call):
            return f"it is given to `{self.view.written(node.func)}(...)` at {line}"
        if isinstance(node, ast.Return):
            return f"it is returned at {line}"
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            return f"it is stored at {line}"
        return f"it is handed on at {line}"

    def _ambiguous_message(self, call: ast.Call, name: Ambiguous) -> str:
        hints = [f"`{c}` -> {SOURCES[c].target_hint}" for c in name.candidates if c in SOURCES]
        advice = (
            f"replace it by hand ({', '.join(hints)}; from `apex.optimizers` when the optimizer "
            "goes through `amp.initialize`, from `torch_npu.optim` otherwise)"
            if hints
            else "migrate it by hand"
        )
        return (
            f"cannot tell which optimizer `{self.view.written(call.func)}` is: {name.describe()}; "
            f"npu-migrate only rewrites names with a single origin: {advice}"
        )

    def _examine_subclass(self, class_def: ast.ClassDef) -> None:
        for base in class_def.bases:
            if not self.view.may_name(base, NPU1_ROOTS):
                continue
            name = self.view.qualified_name_in(base, KNOWN_OPTIMIZERS)
            if not isinstance(name, str):
                continue
            if name in UNSUPPORTED:
                advice = UNSUPPORTED[name]
            else:
                advice = (
                    f"rebase it on {SOURCES[name].target_hint} from `torch_npu.optim` (or "
                    "`apex.optimizers` if it goes through `amp.initialize`) and check that every "
                    "override still holds, because the fused optimizers keep their state in "
                    "flat buffers"
                )
            self._report(
                class_def,
                f"`{class_def.name}` subclasses `{name}`, and npu-migrate does not rewrite "
                f"subclasses: {advice}",
            )

    def _plan(self, call: ast.Call, source: Source, keep: bool = True) -> None:
        """Plan the rewrite of ``call`` to ``source``'s NPU fused class, or report why not;
        ``keep``: the written class may stay on the paths a returned wrapper wraps it (not for
        a lookup, whose class is mapped by name)."""
        args = arguments(call)
        names, problems = _bind(self.view, args, source)
        target = source.target
        if target is None:
            target, problem = _fused_adam_target(self.view, args, names)
            if problem:
                problems.append(problem)
        if target is None or problems:
            self._report(call, _blocked_message(source, target, problems))
            return
        # The shapes issue 19 made rewritable need every caller of the method in the run and
        # safe; a direct constructor keeps its earlier behaviour (rewritten) unless the run
        # shows a use of the method that is unsafe or cannot be sorted (see _method_blocks).
        newly = any(arg.star == "**" for arg in args) or not isinstance(
            self.view.qualified_name_in(class_of(self.view, call), KNOWN_OPTIMIZERS), str
        )
        method = self._returned_by_method(call) if newly or self.methods else None
        callers = self._method_callers(method)
        if method is not None and _method_blocks(newly, callers):
            self._report(call, _method_message(source, target, method, callers))
            return
        params = args[names.index("params")].value if "params" in names else None
        # What no edit can make fusable goes first: then the code a person could change.
        unmatched = [] if source.npu_class else _no_counterpart(args, names)
        if unmatched:
            self._report(call, _blocked_message(source, target, unmatched))
            return
        sharded = self.contract.sharding(call, params)
        if sharded:
            self._report(call, _sharded_message(source, target, sharded))
            return
        reallocated = self.contract.reallocations(call, params)
        if reallocated:
            self._report(call, _reallocated_message(source, target, reallocated))
            return
        hazards = self.hazards.of(call, params)
        # A dtype chosen at run time that the fused optimizers may refuse: a TypeError at the
        # first step on those paths, the same training on the others.
        loud = [hazard for hazard in hazards if hazard.loud]
        hazards = [hazard for hazard in hazards if not hazard.loud]
        # A wrapper (timm's Lookahead) that breaks it, on some paths only, where no edit of the
        # wrapper's `zero_grad` calls fixes it: the written class stays on those paths, the
        # fused one is built on the others.
        fixable = all(hazard.fix is not None for hazard in hazards)
        kept = kept_when(self.view, self.flow, call, hazards) if keep and not fixable else None
        wrapped = hazards
        if isinstance(kept, KeptWhen):
            hazards = []
        grad_fixes: list[GradFix] = []
        unsafe: dict[int, str] = {}  # id(zero_grad call) -> why its edit is an unsafe fix
        # Reported once nothing else blocks the constructor: its zero_grad fixes rely on other
        # optimizers that stay unfused (whatever blocks this one is the better message).
        pending: str | None = None
        if hazards:
            risks = {id(h): self._grad_fix_risk(h.fix, call) for h in hazards if h.fix is not None}
            unfixable = [h for h in hazards if h.fix is None]
            risky = {key: risk for key, (risk, _) in risks.items() if risk is not None}
            if unfixable or (risky and not self.unsafe_fixes):
                message = _hazard_message(source, target, hazards)
                if isinstance(kept, str):
                    message += _kept_refusal(source, kept)
                if not unfixable:
                    message += _unsafe_hint([h for h in hazards if id(h) in risky], risky)
                if unfixable or not all(relies for risk, relies in risks.values() if risk):
                    self._report(call, message)
                    return
                pending = message
            grad_fixes = [h.fix for h in hazards if h.fix is not None]
            unsafe = {id(h.fix.call): risky[id(h)] for h in hazards if id(h) in risky and h.fix}
            if pending is not None:
                grad_fixes, unsafe = [], {}
        # A model NPU105 or NPU106 hands to the amp.initialize they write is on its device, as
        # one handed to an amp.initialize of the file is (apex needs it there).
        planned = self.planned_amp.wrappers_of(call) or self.planned_amp.added_for(call)
        on_cpu = None if planned else self.contract.stays_on_cpu(call, params)
        if on_cpu is not None:
            # torch's optimizer is right on the CPU; NVIDIA apex's does not run on Ascend at all.
            severity = Severity.INFO if source.unfused_replacement is None else Severity.MANUAL
            self._report(call, _cpu_message(source, target, on_cpu), severity)
            return
        amp_calls = self.flow.amp_calls_reached.get(id(call), [])
        settings = [amp_options(self.view, amp_call, self.level) for amp_call in amp_calls]
        settings += self.planned_amp.options(call)  # NPU106's, in place of FP16_Optimizer
        added = self.planned_amp.added_for(call)  # NPU105's
        for options in settings:
            refusal = options.refuses_fused()
            if refusal is not None:
                self._report(call, _refused_message(source, target, options, refusal))
                return
        sites = self._call_sites(call)
        for site in sites:
            for amp in site.amps:
                if amp.refusal is not None:
                    self._report(call, _refused_elsewhere_message(source, target, site, amp))
                    return
        breaking = [site for site in sites if site.breaks]
        if breaking:
            self._report(call, _site_break_message(source, target, breaking))
            return
        hazardous = [site for site in sites if site.hazards]
        if hazardous:
            self._report(call, _site_hazard_message(source, target, hazardous))
            return
        handed = [site for site in sites if site.handed_on and not site.with_amp]
        if handed:
            self._report(call, _handed_on_message(source, target, handed))
            return
        enabled = [options for options in settings if not options.disabled]
        amp_call = enabled[0].call if enabled else None
        with_amp = [site for site in sites if site.with_amp]
        without_amp = [site for site in sites if not site.with_amp]
        # Callers of the factory that returns it, some with amp and some without (or with amp
        # only under a condition): the factory picks the class by a parameter they set.
        parameter: AmpParameter | str | None = None
        if with_amp and (without_amp or self._gated_site(with_amp)):
            parameter = (
                "it also goes through `amp.initialize` in this module"
                if amp_call is not None or added is not None
                else self._amp_parameter(call, sites)
            )
        mixed = (amp_call is not None or with_amp or added is not None) and without_amp
        if mixed and not isinstance(parameter, AmpParameter):
            # apex's class raises without amp; torch_npu's steps stale gradients under apex amp.
            refusal = _mixed_callers_refusal(source, target, with_amp, without_amp, parameter)
            self._report(call, refusal)
            return
        # (A parameter that cannot be threaded is reported below, with where the function
        # is used as a value.)
        escaped = self._escaped(call) if not isinstance(parameter, str) else None
        if escaped is not None:
            self._report(call, _escaped_message(source, target, escaped))
            return
        stored = self._stored_for_amp(call) if not isinstance(parameter, str) else None
        if stored is not None:
            self._report(call, _stored_message(source, target, stored))
            return
        apex = amp_call is not None or bool(with_amp) or added is not None
        draft = _Draft(
            call,
            args,
            source,
            target,
            APEX_HOME if apex else TORCH_NPU_HOME,
            line_of(amp_call) if amp_call is not None else None,
        )
        gated_site = self._gated_site(with_amp) if apex else None
        gate = self._planned_gate(call, enabled) if apex else None
        gated = _gated_path(gate, gated_site)
        if isinstance(parameter, AmpParameter) and (without_amp or not self.amp_always):
            draft.choice = (parameter.name, True)
            draft.amp_parameter = parameter
        elif gated is not None and not self.amp_always:
            # apex's class raises in step() without amp, and torch_npu's steps stale gradients
            # under apex amp: pick the class by the condition, where it can be read here.
            unportable = None if gate and gate.planned else self._unportable_gate(call, gate)
            if gate is None and isinstance(parameter, str):
                unportable = parameter
            own = None
            if unportable is not None and gate is not None and not sites:
                own = self._own_parameter(call)
                if isinstance(own, AmpParameter):
                    draft.choice = (own.name, True)
                    draft.amp_parameter = own
                else:
                    unportable += f" (and npu-migrate cannot pass it as a parameter: {own})"
            if unportable is not None and not isinstance(own, AmpParameter):
                self._report(call, _gated_refusal(source, target, gated, unportable))
                return
            if draft.amp_parameter is None:
                assert gate is not None
                draft.choice = (gate.test, gate.amp_when_true)
        if source.npu_class and draft.home == APEX_HOME and draft.choice is None:
            return  # Ascend apex's class, as written, is the class of the amp path
        # torch_npu's class of the same name takes the same arguments: nothing to map.
        problems = [] if source.npu_class else self._map_arguments(draft, names)
        if problems:
            self._report(call, _blocked_message(source, target, problems))
            return
        if isinstance(kept, KeptWhen):
            refusal = _kept_problem(draft)
            if refusal is not None:
                message = _hazard_message(source, target, wrapped) + _kept_refusal(source, refusal)
                self._report(call, message)
                return
            unfused = source.unfused_class(draft.target)
            if unfused is not None:
                kept = replace(kept, written=unfused, replaces=source.display)
            draft.kept = kept
            draft.notes.append(_kept_note(self.view, kept))
        if grad_fixes:
            draft.grad_fixes = tuple(grad_fixes)
            draft.notes.append(_grad_fix_note(self.view, grad_fixes, unsafe))
        if loud:
            draft.notes.append(
                f"{describe_hazards(loud)}: where it does, the fused optimizer stops the program "
                "at its first step (torch_npu: \"Fused optimizer's parameters must be either "
                'float32 or float16") instead of training'
            )
        if sites:
            draft.why = _factory_why(draft, amp_call, with_amp, without_amp)
        if added is not None:
            draft.why = self.planned_amp.added_why(added)
        if callers is not None and callers.why is None:
            draft.notes.append(callers.note(method.name if method is not None else ""))
        if self.planned_amp.wrappers_of(call):
            draft.notes.append("NPU106 writes that `amp.initialize` in place of `FP16_Optimizer`")
        if gated is not None:
            draft.why = _gated_why(draft, gated, self.amp_always)
        if draft.amp_parameter is not None:
            draft.why = _parameter_why(draft.amp_parameter, sites)
            notes = [note for note in draft.notes if not note.startswith("at ")]
            draft.notes = notes
        if settings and not enabled:
            draft.disabled_amp_line = line_of(settings[0].call)
        if source.npu_class and draft.choice is None and not sites:
            draft.why = _apex_home_why(draft, in_sight=not settings)
        elif source.npu_class:
            draft.notes.append(f"torch_npu's `{target}` {_SAME_CLASS}")
        for options in enabled:
            if options.switch is not None:
                draft.notes.append(
                    f'NPU102 sets `opt_level="{options.switch}"` at line {line_of(options.call)}'
                )
            draft.notes.extend(options.run_time_notes(with_enabled=gate is None))
        for site in with_amp:
            for amp in site.with_amp:
                if amp.switch is not None:
                    draft.notes.append(f'NPU102 sets `opt_level="{amp.switch}"` at {amp.at}')
                draft.notes.extend(f"at {amp.at}: {note}" for note in amp.notes)
        if pending is not None:
            self._report(call, pending)
            return
        self.drafts.append(draft)

    def _amp_parameter(self, call: ast.Call, sites: Sequence[CallSite]) -> AmpParameter | str:
        """The parameter to add to the factory that returns ``call``, so that each of its
        callers says whether the optimizer goes through apex's ``amp.initialize`` there; or why
        there is none: the constructor must be in the factory itself (or in the function it
        returns a call of), which must be used only by calls npu-migrate edits, each able to
        tell amp's condition at the call."""
        function = self.flow.scope_of(call)
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            return "it is not built in a function"
        if self.index.parent(function) is not self.index.tree:
            return f"it is built in `{function.name}`, which is not at the top of the module"
        forwarding = forwarders(self.index, function.name)
        functions = [function, *dict.fromkeys(outer for outer, _ in forwarding)]
        names = {f.name for f in functions}
        others = sorted({site.factory for site in sites} - names)
        if others:
            return f"it is returned by `{others[0]}`, not by `{function.name}` or a call of it"
        builders = {id(self.flow.scope_of(candidate)) for candidate in self.flow.candidates}
        for outer, _ in forwarding:
            if id(outer) in builders:
                return f"`{outer.name}` returns a call of `{function.name}` and builds one too"
        for each in functions:
            if each.name not in self.factory_names:
                return f"npu-migrate did not look for the calls of `{each.name}` in other files"
            if each.decorator_list:
                return f"`{each.name}` is decorated, and a decorator may call it without it"
            if each.args.posonlyargs:
                return f"`{each.name}` has positional-only parameters"
        passed_on = {id(inner.func) for _, inner in forwarding}
        for node in self.index.nodes(ast.Name):
            if node.id in names and isinstance(node.ctx, ast.Load) and id(node) not in passed_on:
                return f"`{node.id}` is also used at line {node.lineno}, not as a call it edits"
        escapes = next((site.escapes for site in sites if site.escapes), None)
        if escapes is not None:
            return f"`{sites[0].factory}` is also used at {escapes}, not as a call it edits"
        for site in sites:
            if site.argument is None:
                return f"at its call at {site.at}, {site.why}"
        taken = {
            node.arg if isinstance(node, ast.arg) else node.id
            for each in functions
            for node in self.index.walk(each)
            if isinstance(node, ast.arg | ast.Name)
        }
        parameter = next((p for p in AMP_PARAMETERS if p not in taken), None)
        if parameter is None:
            return f"`{function.name}` already uses the names {', '.join(AMP_PARAMETERS)}"
        return AmpParameter(function, parameter, tuple(forwarding))

    def _own_parameter(self, call: ast.Call) -> AmpParameter | str:
        """The parameter to add to the function of the module that builds ``call`` when its
        calls in the module, not the function itself, decide whether the optimizer goes
        through a gated ``amp.initialize`` (a script's `create_optimizer(args, model)` called by
        its `main()`, which runs `amp.initialize` only `if use_amp == "apex"`); or why not.

        Each call passes the condition under which the `amp.initialize` its result reaches (the
        name it is assigned to, read there, not reassigned on the way) runs, or `False` when
        its result reaches none and stays in sight; every `amp.initialize` the optimizer reaches
        must be reached that way."""
        function = self.flow.scope_of(call)
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            return "it is not built in a function"
        name = function.name
        if self.index.parent(function) is not self.index.tree:
            return f"`{name}` is not at the top of the module"
        if function.decorator_list or function.args.posonlyargs:
            return f"`{name}` is decorated or has positional-only parameters"
        if name in self.factory_names or forwarders(self.index, name):
            return f"`{name}` is also called through other functions or files"
        calls: list[ast.Call] = []
        for node in self.index.nodes(ast.Name):
            if node.id != name or not isinstance(node.ctx, ast.Load):
                continue
            parent = self.index.parent(node)
            if not isinstance(parent, ast.Call) or parent.func is not node:
                return f"`{name}` is used at line {node.lineno} other than by a call"
            calls.append(parent)
        if not calls:
            return f"`{name}` is not called in this module"
        reached = {id(amp) for amp in self.flow.amp_calls_reached.get(id(call), [])}
        accounted: set[int] = set()
        passed: list[tuple[ast.Call, str]] = []
        for own_call in calls:
            value, why = self._own_argument(own_call, reached, accounted)
            if value is None:
                return why
            passed.append((own_call, value))
        if reached - accounted:
            return "an `amp.initialize` it reaches is not reached from one of its calls directly"
        taken = {
            node.arg if isinstance(node, ast.arg) else node.id
            for node in self.index.walk(function)
            if isinstance(node, ast.arg | ast.Name)
        }
        parameter = next((p for p in AMP_PARAMETERS if p not in taken), None)
        if parameter is None:
            return f"`{name}` already uses the names {', '.join(AMP_PARAMETERS)}"
        return AmpParameter(function, parameter, own_calls=tuple(passed))

    def _own_argument(
        self, own_call: ast.Call, reached: set[int], accounted: set[int]
    ) -> tuple[str | None, str]:
        """What a call of the module's own factory passes for amp's condition (among the
        `amp.initialize` calls the optimizer ``reached``, adding to ``accounted`` the one this
        call's result goes to); None and why when it cannot say."""
        at = f"its call at line {line_of(own_call)}"
        target = self.index.assigned_name(own_call)
        if target is None:
            return None, f"{at} does not assign its result to a name"
        held = target.id
        scope = self.flow.scope_of(own_call)
        amps = [
            sink.call
            for sink in self.flow.amp_sinks
            if id(sink.call) in reached
            and isinstance(sink.optimizers, ast.Name)
            and sink.optimizers.id == held
            and self.flow.scope_of(sink.call) is scope
            and line_of(sink.call) > line_of(own_call)
            and not self.flow.exclusive(sink.call, own_call)
        ]
        for amp in amps:
            for store in stores_of(scope, held, line_of(own_call), line_of(amp)):
                if store is self.index.parent(own_call) or any(
                    node is amp for node in ast.walk(store)
                ):
                    continue  # the call's own assignment, or what amp.initialize hands back
                if self.flow.exclusive(store, amp):
                    continue  # the other arm of an `if` (its own amp.initialize's result)
                if calls_function(store, own_call):
                    # Another call of the same function (CSWin's `if args.resume:` and
                    # `if not args.resume:` blocks): it passes the same condition, and the
                    # optimizer it replaces never gets to this amp.initialize.
                    continue
                if not self.flow.exclusive(store, own_call):
                    return None, f"`{held}` is assigned again at line {store.lineno}"
        if not amps:
            if escape(self.view, own_call, self._own_sight) is not None:
                return None, f"{at} hands its result on where npu-migrate does not follow it"
            return "False", ""
        gate: ast.AST = amps[0]  # the amp.initialize, or the `if` whose arms hold both
        run_time: str | None = None
        if len(amps) > 1:
            # Both arms of one `if`: amp runs when that statement runs (see both_arms).
            arms = self.flow.both_arms(amps)
            literal = all(
                amp_options(self.view, each, self.level).enabled is not NOT_LITERAL for each in amps
            )
            if arms is None or not literal:
                return None, f"{at} gives its result to more than one `amp.initialize`"
            gate = arms
        else:
            options = amp_options(self.view, amps[0], self.level)
            run_time = options.enabled_code if options.enabled is NOT_LITERAL else None
        accounted.update(id(each) for each in amps)
        test = amp_runs_when(self.flow.guards_only_for(gate, own_call), run_time)
        if test is None:
            return "True", ""
        why = unportable_test(self.flow, own_call, gate, test, what="the call")
        return (test, "") if why is None else (None, f"at {at}, {why}")

    def _own_sight(self, given: ast.Call) -> bool:
        """A call that an optimizer may be handed to and stay in the module's sight: an
        ``amp.initialize``, an LR scheduler or a GradScaler's step, a function of the module."""
        return (
            self.flow.is_amp_initialize(given)
            or takes(self.view, given)
            or defined_here(self.view, given)
        )

    @staticmethod
    def _gated_site(sites: Sequence[CallSite]) -> tuple[CallSite, ExternalAmp] | None:
        """A call site in another file whose `amp.initialize` runs, or enables amp, only under
        a condition that does not also guard the call."""
        for site in sites:
            for amp in site.with_amp:
                if amp.gate is not None:
                    return site, amp
        return None

    def _amp_gate(self, call: ast.Call, enabled: list[AmpOptions]) -> AmpGate | None:
        """The condition under which the optimizer of ``call`` goes through amp, when it may
        also run without: an `if` around `amp.initialize` that does not also guard ``call``,
        or an `enabled=` computed at run time. Calls in the branches of an `if`/`else` (the
        static and dynamic loss scales of BERT scripts) cover every path together: no gate."""
        run_time = any(o.enabled is NOT_LITERAL and o.enabled_code for o in enabled)
        calls = [options.call for options in enabled]
        if len(calls) > 1 and not run_time and uncovered_condition(self.view, calls, call) is None:
            return None
        if len(calls) > 1:
            return self._any_amp_gate(call, enabled)
        for options in enabled:
            guards = self.flow.guards_only_for(options.call, call)
            run_time_enabled = options.enabled is NOT_LITERAL and options.enabled_code is not None
            if len(guards) == 1 and not run_time_enabled:
                test, in_body = guards[0]
                return AmpGate(options.call, test, amp_when_true=in_body)
            if guards:
                # `if a:` / `elif b:` / nested ifs (and `enabled=c`): amp runs when all hold.
                terms = [and_term(test, in_body) for test, in_body in reversed(guards)]
                if run_time_enabled:
                    assert options.enabled_code is not None
                    terms.append(and_term(options.enabled_code, True))
                return AmpGate(options.call, " and ".join(terms), amp_when_true=True)
        for options in enabled:
            if options.enabled is NOT_LITERAL and options.enabled_code is not None:
                return AmpGate(options.call, options.enabled_code, True, verb="enables amp")
        return None

    def _any_amp_gate(self, call: ast.Call, enabled: list[AmpOptions]) -> AmpGate | None:
        """Several ``amp.initialize`` calls that do not cover every path: amp runs where any of
        them runs and enables it, so the gate is the condition over all of them (`if args.amp:`
        around `if args.combine_grad:` / `else:` gives `args.amp`); one call's own condition
        would leave the other's paths with the wrong class. None when they cover every path."""
        test = any_amp_condition(self.flow, enabled, call)
        if test is None:
            return None
        first = min((options.call for options in enabled), key=line_of)
        run_time = any(o.enabled is NOT_LITERAL and o.enabled_code for o in enabled)
        return AmpGate(first, test, amp_when_true=True, verb="enables amp" if run_time else "runs")

    def _grad_fix_risk(self, fix: GradFix, constructor: ast.Call) -> tuple[str | None, bool]:
        """Why ``fix`` may change the training (None: it cannot).

        Dropping ``set_to_none`` from the optimizer's own ``zero_grad`` cannot: torch's default
        sets the gradients to None just as that argument did, and the fused optimizers zero in
        place. ``model.zero_grad(set_to_none=False)`` instead of None gradients cannot when
        every parameter of ``model`` is in one optimizer, fused in this run or an NPU fused class
        as written, and in no other:
        a fused optimizer updates every parameter it packed at each step whether its gradient is
        None or zero (it steps its flat buffer), so only another optimizer could see the zeros.
        That optimizer may hold other models too (`chain(G.parameters(), E.parameters())`, see
        :func:`whole_models`): each of them is then in it whole.
        The second value is True when the only risk is that that one optimizer stays unfused.
        """
        model = fix.receiver
        if model is None or fix.wrapper is not None:
            return None, False  # the wrapper zeroes this optimizer's own parameters
        return self._risk_at(fix.call, fix.call, model, constructor, follow=True)

    def _risk_at(
        self, zero_grad: ast.Call, at: ast.Call, model: str, constructor: ast.Call, follow: bool
    ) -> tuple[str | None, bool]:
        """:meth:`_grad_fix_risk` of ``zero_grad`` for ``model`` as named at ``at`` (the call
        itself, or a call of its function); ``follow``: where ``model`` is a parameter of the
        function and no optimizer of the function holds it, what the calls of the function pass
        there (:meth:`_followed_risk`)."""
        candidates = self._sharing_names(at, model)
        owners = [c for c in candidates if model in whole_models(self.view, self._params_of(c))]
        # One owner at a time will do: one on each path (`if args.optimizer == "adam": ...
        # elif ...: ...`), or each replacing the one before (vit's `optimizer = SGD(...)` again
        # under a flag, PoolNet's `self.optimizer = Adam(...)` at a decay of the rate).
        one_per_path = all(
            self.hazards.alternatives(first, second) for first, second in combinations(owners, 2)
        )
        if not owners:
            if follow and not candidates and not self._parameter_takers(at, model):
                followed = self._followed_risk(zero_grad, at, model, constructor)
                if followed is not None:
                    return followed
            return (
                f"no single optimizer holds all of `{model}.parameters()` where `{model}` is in "
                "scope, so some of its parameters may be in an optimizer that skips None "
                "gradients"
            ), False
        if not one_per_path:
            lines = " and ".join(str(line_of(owner)) for owner in owners)
            return (
                f"the optimizers at lines {lines} may each hold all of `{model}.parameters()` "
                "at once, and the edit is proven for one such optimizer at a time"
            ), False
        for other in candidates:
            if any(other is owner for owner in owners):
                continue
            fed = models_feeding(self.flow, self._params_of(other))
            if not fed or any(overlaps(model, part) for part in fed):
                return (
                    f"the optimizer at line {line_of(other)} may also hold parameters of "
                    f"`{model}`, and it would see zeros where it skipped None gradients"
                ), False
        takers = self._parameter_takers(at, model)
        if takers:
            other = takers[0]
            return (
                f"`{self.view.written(other.func)}(...)` (line {line_of(other)}) is given "
                f"parameters of `{model}` and may be an optimizer npu-migrate does not know, "
                "which would see zeros where it skipped None gradients"
            ), False
        for owner in owners:
            if owner is constructor:
                continue  # applied only with this constructor's own rewrite
            if npu_fused_name(self.view, class_of(self.view, owner)) is not None:
                continue  # an NPU fused class as written (Tacotron2's under `if args.amp:`)
            if self._fails_on_ascend(owner):  # that path raises before any step
                self.excused.setdefault(id(owner), []).append(zero_grad)
                continue
            if self.assumed_fused is not None and id(owner) not in self.assumed_fused:
                return f"the optimizer of `{model}` (line {line_of(owner)}) stays unfused", True
            self.relied_on.add(id(owner))
        return None, False

    def _followed_risk(
        self, zero_grad: ast.Call, at: ast.Call, model: str, constructor: ast.Call
    ) -> tuple[str | None, bool] | None:
        """FixMatch's ``model.zero_grad()`` in ``train(args, ..., model, optimizer, ...)``,
        which ``main`` calls with the model it built the optimizer over: where ``model`` is a
        parameter of a top-level function, never bound again, whose module no other file of the
        run that names the function imports (the link stage), and every use of the function's
        name in the module is a direct call passing a plain name there, the risk is that of each
        call with that name (one level: the caller's own parameters are not followed again).
        None where that does not hold."""
        receiver = zero_grad.func.value if isinstance(zero_grad.func, ast.Attribute) else None
        if not isinstance(receiver, ast.Name) or receiver.id != model:
            return None
        parameter = self.index.parameter_bound(receiver)
        if parameter is None:
            return None
        function = self.hazards.unit_of(at)
        if (
            not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            or function.name not in self.own_zeroing
            or not any(function is statement for statement in self.index.tree.body)
        ):
            return None
        if all(parameter is not a for a in _plain_parameters(function)):
            return None
        uses = [
            name
            for name in self.index.names(function.name)
            if isinstance(name.ctx, ast.Load)
            and [b.node for b in self.index.bindings_of(name)] == [function]
        ]
        sites: list[tuple[ast.Call, str]] = []
        passed = {id(value) for value in self.flow.passed_to(parameter)}
        for use in uses:
            call = self.index.parent(use)
            if not isinstance(call, ast.Call) or call.func is not use:
                return None  # handed on as a value: its calls are not all here
            value = next(
                (v for v in [*call.args, *(k.value for k in call.keywords)] if id(v) in passed),
                None,
            )
            if (
                not isinstance(value, ast.Name)
                or any(isinstance(a, ast.Starred) for a in call.args)
                or any(k.arg is None for k in call.keywords)
            ):
                return None
            sites.append((call, value.id))
        if not sites:
            return None
        for call, name in sites:
            risk, only_unfused = self._risk_at(zero_grad, call, name, constructor, follow=False)
            if risk is not None:
                return f"`{model}` is `{name}` at line {line_of(call)}: {risk}", only_unfused
        return None, False

    def _fails_on_ascend(self, call: ast.Call) -> bool:
        """``call`` builds one of NVIDIA apex's optimizers that have no NPU version and need
        apex's CUDA extension: on Ascend it raises when constructed, so no step follows."""
        name = self.view.qualified_name_in(class_of(self.view, call), KNOWN_OPTIMIZERS)
        return name in UNSUPPORTED

    def _sharing_names(self, call: ast.Call, model: str) -> list[ast.Call]:
        """The optimizer constructors where ``model`` may name what it names at ``call``: in
        the same function (with the functions nested in it), at module level, and for
        ``self.<attr>`` in every method of the class."""
        constructors = [c for c in self.flow.candidates if self._may_construct(c)]
        return self._in_units_of(call, model, filter(self._may_hold_parameters, constructors))

    def _in_units_of(self, call: ast.Call, model: str, calls: Iterable[ast.Call]) -> list[ast.Call]:
        """The ``calls`` where ``model`` may name what it names at ``call``."""
        unit = self.hazards.unit_of(call)
        units = {id(unit), id(self.index.tree)}
        owner_class = None
        if model.split(".", 1)[0] == "self":
            ancestors = self.index.ancestors(call)
            owner_class = next((a for a in ancestors if isinstance(a, ast.ClassDef)), None)
        return [
            other
            for other in calls
            if id(self.hazards.unit_of(other)) in units
            or (
                owner_class is not None
                and any(a is owner_class for a in self.index.ancestors(other))
            )
        ]

    def _parameter_takers(self, call: ast.Call, model: str) -> list[ast.Call]:
        """The calls other than the optimizer constructors npu-migrate knows, where ``model``
        may name what it names at ``call`` (as for :meth:`_sharing_names`), that are given its
        parameters, `x(model.parameters(), ...)`, and may keep them: any of them may be an
        optimizer of a class npu-migrate does not know (`torch.optim.Adagrad`, a project's
        own LAMB)."""
        given = [
            other
            for other in self.index.nodes(ast.Call)
            if not self._may_construct(other) and self._params_of(other) is not None
        ]
        found = []
        for other in self._in_units_of(call, model, filter(self._may_hold_parameters, given)):
            params = self._params_of(other)
            if _is_text(params):
                continue  # `logger.info("{:.2f}M".format(sum(p.numel() for p in ...)))`
            origins = self.flow.origins(params)
            if any(isinstance(o, ast.Call) and self._may_construct(o) for o in origins):
                continue  # given an optimizer (`scaler.unscale_(optimizer)`), not parameters
            if any(overlaps(model, part) for part in models_feeding(self.flow, params)):
                found.append(other)
        return found

    def _may_construct(self, call: ast.Call) -> bool:
        """Whether ``call`` may build an optimizer npu-migrate knows, wrap one
        (``FP16_Optimizer``) or hand them back (``amp.initialize``): its callee is a name that
        an import or a value alias may bind under torch, apex or torch_npu, or a dotted name
        from such a name that ends in one of their class names (``optim.Adam``, ``NpuFused*``).

        What the flow's candidate filter keeps in fast mode, decided here whatever the mode:
        with the filters off every call is a candidate, and counting `criterion(output, y)` or
        `netD.parameters()` as an optimizer whose parameters cannot be traced would refuse in
        slow mode the `zero_grad` fixes that fast mode applies.
        """
        func = class_of(self.view, call)
        dotted = full_name(func)  # through calls and subscripts, as names are resolved
        if dotted is None:
            return False
        _, dot, last = dotted.rpartition(".")
        if dot and last not in OPTIMIZER_LAST_NAMES and not last.startswith(FUSED_PREFIX):
            return False
        base = resolution_base(func)
        return base is not None and base.id in self.flow.reaching_names

    def _may_hold_parameters(self, call: ast.Call) -> bool:
        """Whether ``call`` may build an optimizer of its own: not `amp.initialize` (it hands
        back the optimizers it is given), nor a class or function of torch, apex or torch_npu
        outside their optimizer modules (`DistributedDataParallel(model)`), nor one of their LR
        schedulers (`LambdaLR(optimizer, ...)`, given the optimizer), nor one of Python's own
        (`list(model.parameters())`), nor a name that holds only such classes (`Tensor =
        torch.cuda.FloatTensor if cuda else torch.FloatTensor`), nor a call given no parameters
        (no positional argument, `params=` or `**`: torch_npu's `Profile(start_step=10)`), which
        every optimizer class of those packages takes."""
        if self.flow.is_amp_initialize(call):
            return False
        if not call.args and all(k.arg not in (None, "params") for k in call.keywords):
            return False
        if isinstance(call.func, ast.Name):
            held = self.flow.origins(call.func)
            if held and all(
                origin is not call.func
                and isinstance(origin, (ast.Name, ast.Attribute))
                and not self._may_name_optimizer(origin)
                for origin in held
            ):
                return False
        return self._may_name_optimizer(class_of(self.view, call))

    def _may_name_optimizer(self, func: ast.expr) -> bool:
        """Whether ``func`` may name a callable that builds an optimizer, by its qualified name
        (see :meth:`_may_hold_parameters`)."""
        name = self.view.qualified_name(func)
        if not isinstance(name, str):
            return True
        root = name.split(".", 1)[0]
        if root in _NOT_OPTIMIZER_ROOTS or name.startswith(_SCHEDULER_MODULES):
            return False
        return root not in NPU1_ROOTS or any("optim" in part.lower() for part in name.split("."))

    def _params_of(self, call: ast.Call) -> ast.expr | None:
        """The params argument of an optimizer constructor (first positional or `params=`)."""
        if call.args and not isinstance(call.args[0], ast.Starred):
            return call.args[0]
        return next((k.value for k in call.keywords if k.arg == "params"), None)

    def _planned_gate(self, call: ast.Call, enabled: list[AmpOptions]) -> AmpGate | None:
        """:meth:`_amp_gate`, with the ``amp.initialize`` calls NPU105 and NPU106 write: NPU105's
        `enabled=<switch>`, NPU106's that leave a path of the optimizer without amp."""
        added = self.planned_amp.added_for(call)
        if added is not None and added.switch is not None:
            return AmpGate(added.anchor, added.switch, True, verb="enables amp", planned=True)
        uncovered = self.planned_amp.uncovered(self.view, call)
        if uncovered is not None:
            wrapper, test, when_true = uncovered
            return AmpGate(wrapper, test, when_true)
        wrappers = {id(wrapper) for wrapper in self.planned_amp.wrappers_of(call)}
        return self._amp_gate(call, [o for o in enabled if id(o.call) not in wrappers])

    def _unportable_gate(self, call: ast.Call, gate: AmpGate | None) -> str | None:
        """Why the condition under which amp runs cannot pick the class at ``call``; None when
        it can (see :func:`unportable_test`)."""
        if gate is None:
            return "that call is in another file"
        return unportable_test(self.flow, call, gate.amp_call, gate.test)

    def _map_arguments(self, draft: _Draft, names: list[str]) -> list[str]:
        """Set the draft's argument edits (and their notes); the problems that block it."""
        problems = self._read_forwarded(draft)
        dropped: set[int] = set()
        dropped_notes: list[str] = []
        for index, (arg, name) in enumerate(zip(draft.arguments, names, strict=True)):
            value_code = self.view.written(arg.value)
            if name == "adam_w_mode":
                dropped.add(index)
                draft.notes.append(f"`adam_w_mode={value_code}` chose `{draft.target}`")
            elif name in PERFORMANCE_ONLY:
                dropped.add(index)
                dropped_notes.append(f"`{name}={value_code}`")
            elif name in NEUTRAL_AT:
                neutral, reason = NEUTRAL_AT[name]
                value = literal_value(arg.value)
                if value is NOT_LITERAL:
                    problems.append(
                        f"`{name}={value_code}` is not a literal, so npu-migrate cannot "
                        "tell whether it changes the update"
                    )
                elif value != neutral:
                    problems.append(reason)
                elif name not in KEPT_WHEN_NEUTRAL:
                    dropped.add(index)
                    dropped_notes.append(f"`{name}={value_code}`")
        if problems:
            return problems
        to_keyword = _reposition(draft.target, draft.arguments, names, dropped)
        added: list[tuple[str, str]] = []
        present = set(names)
        forwarded = draft.forwarded
        maybe = {reading.key for _, keys in forwarded for reading in keys.keys}
        if any(not keys.complete for _, keys in forwarded):
            maybe |= {"weight_decay", "lr"}  # any key may come
        present |= {key for _, keys in forwarded for key in keys.in_every_arm}
        complete = all(keys.complete for _, keys in forwarded)
        kept_names = {name for index, name in enumerate(names) if index not in dropped}
        given = kept_names | (maybe - draft.dropped_keys)
        draft.given_keys = frozenset(given) if complete else None
        draft.lr_given = "lr" in present
        pinned: dict[int, tuple[tuple[str, str], ...]] = {}
        fused_adam_default = draft.source.target is None and draft.target == "NpuFusedAdamW"
        if fused_adam_default and "weight_decay" not in present and "weight_decay" in maybe:
            # A keyword next to `**mapping` would collide with the mapping's own weight_decay.
            if len(forwarded) > 1:
                return [_MAPPINGS_WEIGHT_DECAY]
            [(index, keys)] = forwarded
            pinned[index] = (("weight_decay", "0.0"),)
            draft.notes.append(
                f"set `weight_decay` to FusedAdam's default 0.0 ahead of `**{keys.code}`, which "
                "still overrides it (NpuFusedAdamW's default is 1e-2)"
            )
        elif fused_adam_default and "weight_decay" not in present:
            added.append(("weight_decay", "0.0"))
            draft.notes.append(
                "added `weight_decay=0.0`: FusedAdam's default is 0.0, NpuFusedAdamW's is 1e-2"
            )
        torch_sgd = not draft.source.requires_lr
        if draft.target == "NpuFusedSGD" and "lr" not in present and "lr" in maybe:
            draft.notes.append(
                "NpuFusedSGD requires `lr`: where none comes through `**`, it raises ValueError "
                "at construction"
            )
        elif draft.target == "NpuFusedSGD" and "lr" not in present:
            if _groups_set(draft.arguments, names, "lr"):
                draft.notes.append(
                    "no `lr` added: every parameter group sets its own, so the class's default "
                    "is never read (NpuFusedSGD requires one; a group added later without `lr` "
                    "raises ValueError there)"
                )
            elif torch_sgd:
                added.append(("lr", TORCH_SGD_DEFAULT_LR))
                draft.notes.append(
                    f"added `lr={TORCH_SGD_DEFAULT_LR}`, torch's default, which NpuFusedSGD "
                    "requires"
                )
            else:
                draft.notes.append(
                    "no `lr` added: FusedSGD requires it as NpuFusedSGD does, so every "
                    "parameter group must carry its own `lr`"
                )
        if dropped_notes:
            draft.notes.append(f"dropped {', '.join(dropped_notes)} (no effect on the update)")
        draft.edits = ArgumentEdits(frozenset(dropped), to_keyword, tuple(added), pinned)
        return []

    def _read_forwarded(self, draft: _Draft) -> list[str]:
        """Read the keys of each ``**mapping`` argument of the draft's call: the performance-only
        switches the NPU class does not take are dropped where the dict is built; a key that
        changes the update, or one that cannot be dropped, blocks the rewrite (the problems).

        A key the flow cannot show is left to the NPU class's signature: every key it takes
        means what it means to the source class (``SOURCES``), and any other one raises
        TypeError at construction.
        """
        problems: list[str] = []
        for arg in draft.arguments:
            if arg.star != "**":
                continue
            given = self._class_paths.get(id(draft.call), ())
            keys = self._forwarded_on_path(arg, draft.call, given)
            draft.forwarded.append((arg.index, keys))
            dropped: list[str] = []
            for reading in keys.keys:
                problem, drop = _forwarded_key(self.view, draft, keys, reading.key, reading.value)
                if problem is not None:
                    problems.append(f"{problem} (`{keys.code}`, line {reading.line})")
                elif drop:
                    if reading.drop is None:
                        problems.append(
                            f"`{reading.key}` (line {reading.line}) would have to be dropped from "
                            f"`{keys.code}`, and npu-migrate cannot remove it where it is written"
                        )
                    elif keys.other_use is not None:
                        problems.append(
                            f"`{reading.key}` (line {reading.line}) would have to be dropped from "
                            f"`{keys.code}`, which is also used at line {line_of(keys.other_use)}"
                        )
                    else:
                        draft.key_drops.append(reading.drop)
                        draft.dropped_keys.add(reading.key)
                        dropped.append(f"`{reading.key}={self.view.written(reading.value)}`")
            if dropped:
                draft.notes.append(
                    f"dropped {', '.join(dict.fromkeys(dropped))} from `{keys.code}` (no effect on "
                    "the update)"
                )
            if not keys.complete:
                draft.notes.append(
                    f"`**{keys.code}` is passed on: every key `{draft.target}` takes means what it "
                    f"means to `{draft.source.display}`, and any other raises TypeError there"
                )
        return problems

    # -- getattr(torch.optim, name)(...) ------------------------------------------------------

    def _plan_lookup(self, call: ast.Call) -> None:
        """``getattr(torch.optim, name)(args)``: the names whose class takes these arguments as
        its NPU fused class does (no edit needed) go to that class through a mapping next to the
        lookup, ``{"SGD": torch_npu.optim.NpuFusedSGD, ...}.get(name, getattr(torch.optim,
        name))``; any other name keeps torch's class. The home, the amp levels and the code
        around the optimizer are checked once, as for a direct constructor."""
        lookup = call.func
        assert isinstance(lookup, ast.Call | ast.Subscript)
        module, name = _lookup_parts(lookup)
        reason = None
        if self.view.qualified_name(module) != "torch.optim":
            reason = "only `torch.optim` lookups are mapped"
        elif name is None or not _pure(name):
            reason = "the name is not a plain name, attribute or literal that can be read twice"
        if reason is None and name is not None and self._plan_tested_lookup(call, lookup, name):
            return
        fitting = [] if reason else self._fitting_sources(call)
        if not fitting:
            reason = reason or "no fusable class of `torch.optim` takes these arguments unchanged"
            self._report(call, f"{_DYNAMIC_LOOKUP_ADVICE} ({reason})")
            return
        before, reported = len(self.drafts), len(self.findings)
        self._plan(call, fitting[0], keep=False)
        self._restate(reported, lookup, fitting[0])
        if len(self.drafts) == before:
            return  # reported: what holds for one fused class holds for all of them
        draft = self.drafts[-1]
        draft.func_style = "lookup"
        assert name is not None
        draft.lookup = _Lookup(
            tuple((source.display.rpartition(".")[2], source.target or "") for source in fitting),
            self.view.written(name),
            self.view.written(lookup),
            self._indentation(lookup),
            draft.choice,
        )

    def _plan_tested_lookup(
        self, call: ast.Call, lookup: ast.Call | ast.Subscript, name: ast.expr
    ) -> bool:
        """``getattr(torch.optim, name)(args)`` under ``if name == "SGD":``
        (reid-strong-baseline's `make_optimizer`): the test names the class, so the call is
        planned as that class's constructor, written out (`torch_npu.optim.NpuFusedSGD(args)`),
        with the argument edits a direct call gets. False when no test names a single class;
        True with nothing planned when it names one without an NPU fused version (the call
        stays as written, as `torch.optim.Adagrad(...)` would)."""
        tested = self.flow.tested(call, self.view.written(name))
        if tested is None or len(tested.values) != 1 or not isinstance(tested.values[0], str):
            return False
        display = f"torch.optim.{tested.values[0]}"
        if display not in _LOOKUP_SOURCES:
            return True
        before, reported = len(self.drafts), len(self.findings)
        self._plan(call, SOURCES[display], keep=False)
        self._restate(reported, lookup, SOURCES[display])
        if len(self.drafts) > before:
            self.drafts[-1].named_by = (
                f"`{self.view.written(lookup)}`, which is `{display}` {tested.when} "
                f"(line {tested.line}),"
            )
        return True

    def _indentation(self, node: ast.AST) -> str:
        """The leading whitespace of the line where ``node`` starts."""
        source = self.view.source
        start = source.line_starts[line_of(node) - 1]
        line = source.text[start : source.text.find("\n", start) % (len(source.text) + 1)]
        return line[: len(line) - len(line.lstrip())]

    def _plan_class_value(self, call: ast.Call, base: ast.Name | None = None) -> bool:
        """``Optimizer(args)`` where ``Optimizer`` holds one of several classes (a value alias
        assigned on more than one path): the torch.optim classes among them whose NPU fused
        class takes ``args`` as written are mapped by identity at the call,
        ``{torch.optim.SGD: torch_npu.optim.NpuFusedSGD, ...}.get(Optimizer, Optimizer)``;
        any other value is called as before. ``base``: the call builds a thin subclass of the
        classes ``base`` holds (see :mod:`._subclass`), mapped where the class statement reads
        them. False when nothing can be mapped."""
        callee = call.func if base is None else base
        if not _pure(callee) or not self._torch_bound() or self._class_tested(callee) is not None:
            return False
        giving: dict[str, list[ast.expr]] = {}  # display -> the class expressions giving it
        for origin in self.flow.origins(callee):
            name = self.view.qualified_name_in(origin, KNOWN_OPTIMIZERS)
            if isinstance(name, str) and name in SOURCES:
                display = SOURCES[name].display
                if display in _LOOKUP_SOURCES:
                    giving.setdefault(display, []).append(origin)
        displays = [d for d in _LOOKUP_SOURCES if d in giving]
        fitting = self._fitting_sources(call, displays, giving)
        if not fitting:
            return False
        before, reported = len(self.drafts), len(self.findings)
        mapped = [o for s in fitting for o in giving[s.display]]
        self._class_paths[id(call)] = mapped
        # NPU fused on every path: each value is mapped or is an NPU fused class already (EDSR's
        # `optimizer_class = NpuFusedAdam` beside `optim.SGD` and `optim.RMSprop`).
        complete = all(
            any(origin is m for m in mapped) or npu_fused_name(self.view, origin) is not None
            for origin in self.flow.origins(callee)
        )
        self._plan(call, fitting[0], keep=False)
        self._restate(reported, callee, fitting[0])
        if len(self.drafts) > before:
            draft = self.drafts[-1]
            draft.func_style = "lookup"
            # (the base of a class statement reads as written with the statement's parentheses)
            written = self.view.written(callee) if base is None else base.id
            draft.lookup = _Lookup(
                tuple((source.display, source.target or "") for source in fitting),
                written,
                written,
                self._indentation(callee),
                draft.choice,
                at=base,
                complete=complete,
            )
        return True

    def _tested_class_message(self, call: ast.Call, test: ast.AST) -> str:
        callee = self.view.written(call.func)
        return (
            f"`{callee}` is not mapped to the NPU fused classes at this call: `"
            f"{self.view.written(test)}` (line {line_of(test)}) tests the class it gives, and an "
            "NPU fused optimizer is no instance of torch's class, so the migrated program would "
            "take another branch there. It still runs on NPU unfused; to fuse it, make that test "
            "accept the fused classes too, then map them at the call (`{torch.optim.SGD: "
            f"torch_npu.optim.NpuFusedSGD, ...}}.get({callee}, {callee})(...)`)"
        )

    def _class_tested(self, callee: ast.expr) -> ast.AST | None:
        """The class ``callee`` gives (a name, or a dict of classes subscripted) is also tested
        somewhere its value reaches: ``isinstance(optimizer, cls)``, ``issubclass``, ``type(opt)
        is cls``, ``cls == ...``. Mapped at the call, the optimizer would be of the fused class
        and those tests would turn (the migrated program would take other branches)."""
        name = callee.value if isinstance(callee, ast.Subscript) else callee
        if not isinstance(name, ast.Name):
            return None
        bound = {id(binding.node) for binding in self.index.bindings_of(name)}
        for read in self.index.names(name.id):
            if not isinstance(read.ctx, ast.Load) or read is name:
                continue
            if not any(id(b.node) in bound for b in self.index.bindings_of(read)):
                continue
            parent = self.index.parent(read)
            tested: ast.AST = read
            if isinstance(callee, ast.Subscript):
                if not (isinstance(parent, ast.Subscript) and parent.value is read):
                    continue
                tested = parent
            test = _class_test(self.view, tested)
            if test is not None and not _none_test(test):
                return test
        return None

    def _outside_reads(self, name: ast.Name) -> list[ast.Name]:
        """The reads of the class ``name`` binds outside its own statement (its methods'
        ``super(K, self)`` are not uses of the class)."""
        [binding] = self.index.bindings_of(name)
        return [
            read
            for read in self.index.names(name.id)
            if isinstance(read.ctx, ast.Load)
            and self.index.bindings_of(read) == [binding]
            and not any(a is binding.node for a in self.index.ancestors(read))
        ]

    def _plan_subclass_calls(self) -> None:
        """``K(args)`` where ``K`` is a thin subclass of a class chosen as a value (EDSR's
        ``class CustomOptimizer(optimizer_class)``, see :mod:`._subclass`), called once: the
        classes of its base are mapped as for a call of the base itself."""
        derived = derived_names(self.view)
        if not derived:
            return
        seen = {id(draft.call) for draft in self.drafts}
        for call in self.index.nodes(ast.Call):
            base = subclass_base(self.view, call)
            if base is None or id(call) in seen or self._suppressed(call):
                continue
            assert isinstance(call.func, ast.Name)  # subclass_base takes a plain name only
            if self._outside_reads(call.func) != [call.func]:
                continue  # built more than once, or used otherwise: a plan at each would clash
            if not any(
                isinstance(self.view.qualified_name_in(origin, KNOWN_OPTIMIZERS), str)
                for origin in self.flow.origins(base)
            ):
                continue
            drafted = len(self.drafts)
            self._plan_class_value(call, base)  # a finding of its own when it is not mapped
            if len(self.drafts) > drafted and self.drafts[-1].lookup is not None:
                mapped = {name for name, _ in self.drafts[-1].lookup.mapped}
                for origin in self.flow.origins(base):
                    if self._gives_one_of(origin, mapped):
                        self._mapped_values.add(id(origin))

    def _gives_one_of(self, node: ast.expr, classes: Collection[str]) -> bool:
        """``node`` names one of the torch.optim ``classes`` (as SOURCES displays them)."""
        name = self.view.qualified_name_in(node, KNOWN_OPTIMIZERS)
        return isinstance(name, str) and name in SOURCES and SOURCES[name].display in classes

    def _restate(self, first: int, callee: ast.expr, source: Source) -> None:
        """Findings from ``first`` on were made for ``source``, standing for every class the
        callee may give: say so."""
        display = f"`{source.display}`"
        stand_in = f"`{self.view.written(callee)}` (when it gives {display})"
        for index in range(first, len(self.findings)):
            finding = self.findings[index]
            message = finding.message.replace(display, stand_in, 1)
            self.findings[index] = Finding(finding.node, message, finding.severity)

    def _returned_by_method(self, call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method of a class whose ``return`` hands the optimizer ``call`` builds to its
        callers: the code that steps and zeroes it there is out of sight (the link stage
        follows top-level functions only)."""
        for function in self.index.nodes(ast.FunctionDef) + self.index.nodes(ast.AsyncFunctionDef):
            if not isinstance(self.index.parent(function), ast.ClassDef):
                continue
            for statement in self.index.walk(function):
                if self._returns(statement, call):
                    return function
        return None

    def _method_callers(
        self, method: ast.FunctionDef | ast.AsyncFunctionDef | None
    ) -> MethodCallers | None:
        """The link stage's verdict on the callers of ``method`` in the run (None: none)."""
        owner = self.index.parent(method) if method is not None else None
        if method is None or not isinstance(owner, ast.ClassDef):
            return None
        return method_callers(self.methods, owner.name, method.name)

    def _returns(self, statement: ast.AST, call: ast.Call) -> bool:
        """``return <value>`` whose value may be what ``call`` builds."""
        if not isinstance(statement, ast.Return) or statement.value is None:
            return False
        return any(origin is call for origin in self.flow.origins(statement.value))

    def _plan_class_value_calls(self) -> None:
        """Calls of a name assigned a choice of classes (``cls = O.AdamW if c else O.SGD``,
        ``cls = {"sgd": torch.optim.SGD, ...}[name]``) that the resolution of names leaves
        alone (it resolves a name to one origin, or calls it ambiguous)."""
        seen = {id(draft.call) for draft in self.drafts} | {
            id(finding.node) for finding in self.findings
        }
        mapped: dict[int, set[str]] = {}  # id(call) -> the classes mapped there
        for node in self._class_value_candidates():
            registry = self._registry_of(node)
            # (a name a star import may bind is no class of a dict: `opt["dir"] = data_dir`)
            if registry is not None and isinstance(
                self.view.qualified_name_in(node, KNOWN_OPTIMIZERS), str
            ):
                self._plan_registry_calls(node, registry, seen, mapped)
                continue
            target = self._chosen_into(node)
            if target is None:
                continue
            for read in self.index.names(target.id):
                call = self.index.parent(read)
                if not isinstance(call, ast.Call):
                    continue
                if call.func is read and id(call) not in seen and not self._suppressed(call):
                    seen.add(id(call))
                    drafted = len(self.drafts)
                    self._plan_class_value(call)  # a finding of its own when it is not mapped
                    if len(self.drafts) > drafted and self.drafts[-1].lookup is not None:
                        mapped[id(call)] = {name for name, _ in self.drafts[-1].lookup.mapped}
                classes = mapped.get(id(call)) or self._mapping_keys(call)
                if self._gives_one_of(node, classes):
                    self._mapped_values.add(id(node))  # mapped at the call

    def _plan_registry_calls(
        self, node: ast.expr, registry: ast.Name, seen: set[int], mapped: dict[int, set[str]]
    ) -> None:
        """``OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}`` read as
        ``OPTIMIZERS[name](params, ...)``, or as ``optimizer_cls = OPTIMIZERS[name]`` called
        later: each such call maps the classes as for a name that holds one of them
        (``{torch.optim.SGD: ..., ...}.get(OPTIMIZERS[name], OPTIMIZERS[name])``,
        :meth:`_plan_class_value`). ``node`` is no longer used as a value when every read of the
        registry is such a call that maps its class, or reads only the keys (``choices=``,
        ``name in OPTIMIZERS``, ``sorted(OPTIMIZERS)``)."""
        reads, covered = self._registry_reads(registry)
        test = next(filter(None, map(self._registry_entry_test, reads)), None)
        if test is not None:
            # Mapped, the optimizer would be no instance of the class it is tested on.
            self._report_tested_registry(reads, test, seen)
            return
        for read in reads:
            if _fills_registry(self.index, read):
                continue  # `OPTIMIZERS["adam"] = ...`, `.update(...)`, a refill
            lookup = self.index.parent(read)
            got = self.index.method_call(read, "get")
            if got is not None:  # `optimizer_cls = OPTIMIZERS.get(name)`, called later
                held = self.index.assigned_name(got)
                calls, alone = self._calls_of_held(held) if held is not None else ([], False)
                covered = covered and alone
                for held_call in calls:
                    covered = self._map_registry_call(node, held_call, seen, mapped) and covered
                continue
            if not (isinstance(lookup, ast.Subscript) and lookup.value is read):
                covered = covered and _reads_keys(self.view, read)
                continue
            call = self.index.parent(lookup)
            if isinstance(call, ast.Call) and any(lookup is arg for arg in call.args):
                # `{torch.optim.SGD: ...}.get(OPTIMIZERS[name], OPTIMIZERS[name])`, written by
                # an earlier run
                keys = self._mapping_keys(call)
                covered = covered and self._gives_one_of(node, keys)
                continue
            held = self.index.assigned_name(lookup)
            if held is not None:  # `optimizer_cls = OPTIMIZERS[name]`, called later
                calls, alone = self._calls_of_held(held)
                covered = covered and alone
                for held_call in calls:
                    covered = self._map_registry_call(node, held_call, seen, mapped) and covered
                continue
            if not isinstance(call, ast.Call) or call.func is not lookup:
                covered = False
                continue
            covered = self._map_registry_call(node, call, seen, mapped) and covered
        if reads and covered:
            self._mapped_values.add(id(node))  # mapped at each call

    def _registry_reads(self, registry: ast.Name) -> tuple[list[ast.Name | ast.Attribute], bool]:
        """The reads of the dict of classes ``registry`` binds, and whether they are all of
        them: a module's or function's name is read as itself; a class attribute
        (``OPTIM_OPTS = {...}`` in a class body, ParlAI's agents) as ``Agent.OPTIM_OPTS`` or
        ``self.OPTIM_OPTS`` (see :func:`~migrator.analysis.receivers.class_attribute_reads`)."""
        statement = self.index.statement_of(registry)
        owner = self.index.parent(statement) if statement is not None else None
        if isinstance(owner, ast.ClassDef):
            attributes, complete = class_attribute_reads(self.index, owner, registry.id)
            return list(attributes), complete
        bound = [b.node for b in self.index.bindings_of(registry)]
        names = [
            read
            for read in self.index.names(registry.id)
            if isinstance(read.ctx, ast.Load)
            and [b.node for b in self.index.bindings_of(read)] == bound
        ]
        return list(names), True

    def _registry_entry_test(self, read: ast.expr) -> ast.expr | None:
        """The class test an entry of the registry ``read`` reads is the class of
        (``isinstance(optimizer, OPTIMIZERS["sgd"])``), or None."""
        lookup = self.index.parent(read)
        if isinstance(lookup, ast.Subscript) and lookup.value is read:
            return _class_test(self.view, lookup)
        return None

    def _report_tested_registry(
        self, reads: list[ast.Name | ast.Attribute], test: ast.AST, seen: set[int]
    ) -> None:
        """Each call of a class the registry ``reads`` read gives, left as written because
        ``test`` tests one of its entries: say why at the call."""
        for read in reads:
            lookup = self.index.parent(read)
            call = self.index.parent(lookup) if lookup is not None else None
            if not (isinstance(call, ast.Call) and call.func is lookup):
                continue
            if id(call) not in seen and not self._suppressed(call):
                seen.add(id(call))
                self._report(call, self._tested_class_message(call, test))

    def _map_registry_call(
        self, node: ast.expr, call: ast.Call, seen: set[int], mapped: dict[int, set[str]]
    ) -> bool:
        """Plan the mapping at ``call`` (once); whether it settles the class ``node``: maps it,
        or leaves it as written with a finding of its own at the call that says why (the
        fused optimizers' contract, a hazard). A mapping an earlier run wrote is only read."""
        if mapped_get(self.view, call):
            return self._gives_one_of(node, self._mapping_keys(call))
        if id(call) not in seen and not self._suppressed(call):
            seen.add(id(call))
            drafted = len(self.drafts)
            test = self._class_tested(call.func)
            if test is not None:
                self._report(call, self._tested_class_message(call, test))
            else:
                self._plan_class_value(call)  # a finding of its own when it is not mapped
            if len(self.drafts) > drafted and self.drafts[-1].lookup is not None:
                mapped[id(call)] = {name for name, _ in self.drafts[-1].lookup.mapped}
        if self._gives_one_of(node, mapped.get(id(call), ())):
            return True
        return id(call) not in mapped and any(finding.node is call for finding in self.findings)

    def _calls_of_held(self, held: ast.Name) -> tuple[list[ast.Call], bool]:
        """The calls of the class a name is assigned (``optimizer_cls(params, ...)``, or the
        mapping an earlier run wrote, ``{...}.get(optimizer_cls, optimizer_cls)``) wherever that
        assignment reaches, and whether they are its only reads. Mapped at the call, the name
        still holds the class as written, so its other reads (handed to fairscale's ``OSS``,
        ``cls is None``) see what they saw; a test of the class an optimizer is an instance of
        keeps the call as written (:meth:`_class_tested`)."""
        calls: list[ast.Call] = []
        alone = True
        for read in self.index.names(held.id):
            if not isinstance(read.ctx, ast.Load) or not any(
                b.node is held for b in self.index.bindings_of(read)
            ):
                continue
            call = self.index.parent(read)
            if _none_test(call):
                continue
            if not isinstance(call, ast.Call) or not (
                call.func is read or mapped_get(self.view, call)
            ):
                alone = False
            elif all(call is not known for known in calls):
                calls.append(call)
        return calls, alone and bool(calls)

    def _registry_of(self, node: ast.expr) -> ast.Name | None:
        """The name of the dict of classes that holds ``node`` as a value, assigned once in
        its scope (``OPTIMIZERS = {"sgd": torch.optim.SGD, ...}``, ``OPTIMIZERS =
        dict(sgd=torch.optim.SGD, ...)``) or refilled from itself (ESPnet's ``optim_classes =
        {k.lower(): v for k, v in optim_classes.items()}``); ``node`` may also be put there
        later (``OPTIMIZERS.update(adam=...)``, ``OPTIMIZERS["adam"] = ...``)."""
        registry = self._stored_registry(node) or self._registry_display(node)
        if registry is None:
            return None
        built = [
            binding.node
            for binding in self.index.bindings_of(registry)
            if not (isinstance(binding.node, ast.Name) and _refilled(self.index, binding.node))
        ]
        if len(built) != 1 or not isinstance(built[0], ast.Name):
            return None
        return built[0]  # (its binding, where the reads are found)

    def _registry_display(self, node: ast.expr) -> ast.Name | None:
        """The dict ``node`` is a value of: ``OPTIMIZERS = {"sgd": node}`` or
        ``dict(sgd=node)`` assigned to a name, or ``OPTIMIZERS.update({"sgd": node})``."""
        display = self.index.parent(node)
        if isinstance(display, ast.keyword):
            display = self.index.parent(display)
            if not (
                isinstance(display, ast.Call)
                and self.view.qualified_name(display.func) == "builtins.dict"
                and not display.args
                and all(keyword.arg is not None for keyword in display.keywords)
            ):
                return None
        elif not isinstance(display, ast.Dict) or not any(node is v for v in display.values):
            return None
        elif any(key is None for key in display.keys):
            return None  # `{**other, ...}`: classes npu-migrate does not see
        filled = self.index.parent(display)  # `OPTIMIZERS.update({"adam": ...})`
        if not (isinstance(filled, ast.Call) and any(display is arg for arg in filled.args)):
            filled = None
        return self.index.update_receiver(filled) or self.index.assigned_name(display)

    def _stored_registry(self, node: ast.expr) -> ast.Name | None:
        """The dict ``node`` is put into, ``OPTIMIZERS.update(adam=node)`` or
        ``OPTIMIZERS["adam"] = node`` (the dict's name read there), else None."""
        parent = self.index.parent(node)
        if isinstance(parent, ast.keyword) and parent.arg is not None:
            return self.index.update_receiver(self.index.parent(parent))
        if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1:
            target = parent.targets[0]
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                return target.value
        return None

    def _chosen_into(self, node: ast.expr) -> ast.Name | None:
        """The name a class expression is assigned to as one of several choices: through a
        conditional expression, or a dict display indexed on the spot."""
        child: ast.AST = node
        parent = self.index.parent(node)
        chosen = False
        while isinstance(parent, (ast.IfExp, ast.Dict, ast.Subscript)):
            if isinstance(parent, ast.IfExp) and child is parent.test:
                return None
            if isinstance(parent, ast.Dict) and not any(child is v for v in parent.values):
                return None
            if isinstance(parent, ast.Subscript) and child is not parent.value:
                return None
            chosen = True
            child, parent = parent, self.index.parent(parent)
        if not chosen or not isinstance(parent, ast.Assign) or parent.value is not child:
            return None
        if len(parent.targets) != 1 or not isinstance(parent.targets[0], ast.Name):
            return None
        return parent.targets[0]

    def _torch_bound(self) -> bool:
        """``torch`` names the torch package everywhere in the module, so ``torch.optim.SGD``
        can be written: nothing binds the name to anything else, and the module imports it
        (``import torch``) or has no star import that could bind it (NPU101 then adds
        ``import torch``: UNITER's ``from torch.optim import Adam, Adamax``)."""
        if any(_rebinds_torch(node) for node in ast.walk(self.index.tree)):
            return False
        imported = any(
            isinstance(statement, ast.Import)
            and any(alias.name == "torch" and alias.asname is None for alias in statement.names)
            for statement in self.index.tree.body
        )
        return imported or not self.index.star_imports

    def _fitting_sources(
        self,
        call: ast.Call,
        displays: Sequence[str] | None = None,
        giving: Mapping[str, Sequence[ast.expr]] | None = None,
    ) -> list[Source]:
        """The torch.optim classes that take ``call``'s arguments exactly as their NPU fused
        class does: same names, no argument to drop, add or move. ``giving``: where the
        callee is assigned each class (EDSR's `if args.optimizer == 'SGD': optimizer_class =
        optim.SGD; kwargs['momentum'] = ...` / `elif ...: optimizer_class = optim.Adam;
        kwargs['betas'] = ...`): a key of a ``**mapping`` stored only in the other arm of an
        `if` than every place that gives a class never reaches that class."""
        args = arguments(call)
        fitting: list[Source] = []
        for display in _LOOKUP_SOURCES if displays is None else displays:
            source = SOURCES[display]
            assert source.target is not None
            names, problems = _bind(self.view, args, source)
            given = (giving or {}).get(display, ())
            forwarded = [
                self._forwarded_on_path(arg, call, given) for arg in args if arg.star == "**"
            ]
            if problems or (
                source.target == "NpuFusedSGD"
                and "lr" not in names
                and not any("lr" in keys.in_every_arm for keys in forwarded)
                and not _groups_set(args, names, "lr")
            ):
                continue
            target_parameters = TARGET_PARAMETERS[source.target]
            if any(name and name not in target_parameters for name in names):
                continue  # `foreach=`, `maximize=`: the NPU class would raise TypeError
            if (
                "amsgrad" in names
                and literal_value(args[names.index("amsgrad")].value) is not False
            ):
                continue
            if _reposition(source.target, args, names, set()):
                continue
            if not all(self._forwarded_fits(keys, source) for keys in forwarded):
                continue
            fitting.append(source)
        return fitting

    def _forwarded_on_path(
        self, arg: Argument, call: ast.Call, given: Sequence[ast.expr]
    ) -> ForwardedKeys:
        """The keys ``arg`` may forward where one of the ``given`` class expressions was
        assigned (all its keys when none is given)."""
        keys = forwarded_keys(self.view, arg.value, call)
        if not given:
            return keys
        reaching = tuple(
            key
            for key in keys.keys
            if not all(self.flow.apart(key.value, origin) for origin in given)
        )
        return replace(keys, keys=reaching)

    def _forwarded_fits(self, keys: ForwardedKeys, source: Source) -> bool:
        """A ``**mapping`` whose ``keys`` need no edit for ``source``'s NPU fused class."""
        assert source.target is not None
        target_parameters = TARGET_PARAMETERS[source.target]
        for reading in keys.keys:
            if reading.key not in target_parameters:
                return False
            if reading.key == "amsgrad" and literal_value(reading.value) is not False:
                return False
        return True

    # -- spelling the new class ------------------------------------------------------------------

    def _plan_call_names(self) -> None:
        """Choose how each planned call spells the new class, and which imports change."""
        by_import: dict[int, list[_Draft]] = {}
        for draft in self.drafts:
            func = class_of(self.view, draft.call)
            if draft.lookup is not None:
                continue  # a mapping next to the lookup (its entries picked by any condition)
            if draft.choice is not None or draft.kept is not None:
                draft.func_style = "dotted"  # `(apex... if test else torch_npu...)`, spelled out
                continue
            if isinstance(func, ast.Attribute):
                base = self.view.qualified_name(func.value)
                draft.func_style = "attr" if base == draft.home else "dotted"
                continue
            binding = self._from_import_binding(func)
            if binding is not None:
                by_import.setdefault(id(binding.alias), []).append(draft)
        for drafts in by_import.values():
            self._plan_from_import(drafts)
        for draft in self.drafts:
            # A class kept as written is still written; FusedSGD's torch SGD in its place is not.
            if draft.func_style == "dotted" and (draft.kept is None or draft.kept.replaces):
                func = class_of(self.view, draft.call)
                if draft.named_by is not None:  # `getattr(optim, name)`: the module's import
                    assert isinstance(func, ast.Call | ast.Subscript)
                    func = _lookup_parts(func)[0]
                self._release_old_import(func)

    def _from_import_binding(self, name: ast.AST) -> Binding | None:
        """The single ``from m import x [as y]`` that binds ``name``, if that is its only origin."""
        if not isinstance(name, ast.Name):
            return None
        bindings = self.index.bindings_of(name)
        if len(bindings) != 1:
            return None
        binding = bindings[0]
        if binding.kind is not BindingKind.IMPORT or not isinstance(binding.node, ast.ImportFrom):
            return None
        return binding

    def _plan_from_import(self, drafts: list[_Draft]) -> None:
        """Rewrite ``from m import X [as A]`` in place when every use of it is rewritten alike."""
        binding = self._from_import_binding(class_of(self.view, drafts[0].call))
        assert binding is not None and binding.alias is not None
        statement = binding.node
        assert isinstance(statement, ast.ImportFrom)
        planned_funcs = {id(class_of(self.view, draft.call)) for draft in drafts}
        uniform = (
            len({(draft.home, draft.target) for draft in drafts}) == 1
            and all(id(access) in planned_funcs for access in self.index.references(binding))
            and not statement.level
        )
        module = statement.module or ""
        home = drafts[0].home
        single = len(statement.names) == 1
        if not uniform or not (single or module == home):
            for draft in drafts:
                draft.func_style = "dotted"
            return
        rewrite = self.import_rewrites.setdefault(id(statement), _ImportDraft(statement))
        position = next(i for i, alias in enumerate(statement.names) if alias is binding.alias)
        rewrite.names[position] = drafts[0].target
        if module != home:
            rewrite.module = home
        for draft in drafts:
            draft.func_style = "alias" if binding.alias.asname is not None else "rename"

    def _release_old_import(self, func: ast.AST) -> None:
        """The import that bound the old spelling goes if nothing else uses it.

        Only imports of the optimizer module or class (`from torch import optim`,
        `import torch.optim as O`, `from torch.optim import SGD`): `import torch` stays.
        """
        base = func
        while isinstance(base, ast.Attribute):
            base = base.value
        if not isinstance(base, ast.Name):
            return
        bound = self.view.qualified_name(base)
        if not isinstance(bound, str) or bound.count(".") < 1:
            return
        for binding in self.index.bindings_of(base):
            statement = binding.node
            if binding.kind is not BindingKind.IMPORT:
                continue
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.asname == base.id or (
                        alias.asname is None and alias.name.split(".")[0] == base.id
                    ):
                        self.released.append(ReleasedImport(alias.name, None, alias.asname))
            elif isinstance(statement, ast.ImportFrom) and statement.module is not None:
                if statement.level or any(alias.name == "*" for alias in statement.names):
                    continue
                for alias in statement.names:
                    if (alias.asname or alias.name) == base.id:
                        self.released.append(
                            ReleasedImport(statement.module, alias.name, alias.asname)
                        )

    # -- the result ------------------------------------------------------------------------------

    def _rewrites(self) -> tuple[Rewrite, ...]:
        """The drafts, final; each rewritten import is carried by the first call that uses it."""
        pending = {
            key: ImportRewrite(draft.statement, dict(draft.names), draft.module)
            for key, draft in self.import_rewrites.items()
        }
        rewrites: list[Rewrite] = []
        carried_fixes: set[int] = set()  # each zero_grad call is edited once
        carried_drops: set[tuple[int, int]] = set()  # a dict forwarded to several calls
        carried_parameters: set[int] = set()  # each factory gets its parameter once
        for draft in self.drafts:
            drops = []
            for drop in draft.key_drops:
                if (id(drop.node), drop.index) not in carried_drops:
                    carried_drops.add((id(drop.node), drop.index))
                    drops.append(drop)
            statement = self._rewritten_import(draft)
            carried = pending.pop(id(statement), None) if statement is not None else None
            rewrites.append(
                Rewrite(
                    draft.call,
                    tuple(draft.arguments),
                    draft.source,
                    draft.target,
                    draft.home,
                    draft.edits,
                    draft.func_style,
                    _fixed_message(draft),
                    carried,
                    choice=draft.choice,
                    grad_fixes=tuple(
                        f for f in draft.grad_fixes if self._first_carrier(f, carried_fixes)
                    ),
                    key_drops=tuple(drops),
                    func_code=draft.lookup.code(draft.home) if draft.lookup is not None else None,
                    keyed_by_class=draft.lookup is not None and draft.lookup.by_class,
                    mapped_on_every_path=draft.lookup is not None and draft.lookup.complete,
                    func_at=draft.lookup.at if draft.lookup is not None else None,
                    amp_parameter=self._first_parameter(draft.amp_parameter, carried_parameters),
                    kept=draft.kept,
                )
            )
        return tuple(rewrites)

    @staticmethod
    def _first_parameter(parameter: AmpParameter | None, carried: set[int]) -> AmpParameter | None:
        if parameter is None or id(parameter.function) in carried:
            return None
        carried.add(id(parameter.function))
        return parameter

    @staticmethod
    def _first_carrier(fix: GradFix, carried: set[int]) -> bool:
        if id(fix.call) in carried:
            return False
        carried.add(id(fix.call))
        return True

    def _rewritten_import(self, draft: _Draft) -> ast.ImportFrom | None:
        if draft.func_style not in ("alias", "rename"):
            return None
        binding = self._from_import_binding(class_of(self.view, draft.call))
        statement = binding.node if binding is not None else None
        return statement if isinstance(statement, ast.ImportFrom) else None


@dataclass(frozen=True)
class _Lookup:
    """The fusable names of a ``getattr(torch.optim, name)`` lookup: (name, NPU fused class)."""

    mapped: tuple[tuple[str, str], ...]
    name: str  # the name expression, as written
    lookup: str  # the `getattr(...)` call, as written
    indent: str  # of the line where the lookup starts
    choice: tuple[str, bool] | None = None  # each class picked by amp's condition (Rewrite.choice)
    at: ast.Name | None = None  # where the mapping goes when not at the callee (Rewrite.func_at)
    # Every value the name may hold is a class the mapping maps (a class value's, never a
    # lookup by name's: any other name falls back to torch's class).
    complete: bool = False

    @property
    def by_class(self) -> bool:
        """Keyed by the classes themselves (a class value), not by their names."""
        return "." in self.mapped[0][0]

    def spelled(self, home: str, target: str) -> str:
        """How an entry names its class: ``<home>.X``, or picked by amp's condition."""
        return picked_by(*self.choice, target) if self.choice else f"{home}.{target}"

    def code(self, home: str) -> str:
        """``{"SGD": <home>.NpuFusedSGD, ...}.get(name, getattr(torch.optim, name))``, one
        entry a line; by class, ``{torch.optim.SGD: <home>.NpuFusedSGD, ...}.get(cls, cls)``."""
        inner = self.indent + "    "
        entries = "".join(
            f"{inner}{_key(name)}: {self.spelled(home, target)},\n" for name, target in self.mapped
        )
        return f"{{\n{entries}{self.indent}}}.get({self.name}, {self.lookup})"


def _namespace_module(namespace: ast.expr) -> ast.expr:
    """The module of ``<module>.__dict__`` or ``vars(<module>)``."""
    if isinstance(namespace, ast.Call):
        return namespace.args[0]
    assert isinstance(namespace, ast.Attribute)
    return namespace.value


def _lookup_parts(lookup: ast.Call | ast.Subscript) -> tuple[ast.expr, ast.expr | None]:
    """The module and the name (None: not a plain positional argument) of a lookup by name:
    ``getattr(module, name)``, ``module.__dict__[name]`` or ``vars(module)[name]``."""
    if isinstance(lookup, ast.Subscript):
        return _namespace_module(lookup.value), lookup.slice
    args = arguments(lookup)
    name = args[1] if len(args) > 1 and args[1].keyword is None and not args[1].star else None
    return args[0].value, name.value if name is not None else None


def _plain_parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    arguments = function.args
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]


def _is_text(node: ast.expr | None) -> bool:
    """``node`` builds a string (an f-string, ``"...".format(...)``, ``"..." % ...``), which
    holds no parameter whatever it reads."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        node = node.left
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        node = node.func.value
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _rebinds_torch(node: ast.AST) -> bool:
    """A binding of the name ``torch`` to anything but the torch package."""
    if isinstance(node, ast.Name):
        return node.id == "torch" and not isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.alias):
        bound = node.asname or node.name.split(".")[0]
        return bound == "torch" and (node.asname is not None or node.name.split(".")[0] != "torch")
    if isinstance(node, ast.ImportFrom):
        return any(alias.asname is None and alias.name == "torch" for alias in node.names)
    if isinstance(node, ast.arg):
        return node.arg == "torch"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == "torch"
    return False


def _key(name: str) -> str:
    """A mapping key: the class itself (``torch.optim.SGD``), or its name as a string."""
    return name if "." in name else f'"{name}"'


# torch.optim's classes a name lookup may map, in the order of the mapping.
_LOOKUP_SOURCES = (
    "torch.optim.SGD",
    "torch.optim.Adam",
    "torch.optim.AdamW",
    "torch.optim.Adadelta",
    "torch.optim.RMSprop",
)


def _groups_set(args: list[Argument], names: list[str], key: str) -> bool:
    """``params`` is written as parameter groups that each set ``key`` themselves
    (``[{"params": ..., "lr": 0.1 * lr}, {"params": ..., "lr": lr}]``): the class's default for
    ``key`` is read by no group."""
    if "params" not in names:
        return False
    groups = args[names.index("params")].value
    return (
        isinstance(groups, ast.List | ast.Tuple)
        and bool(groups.elts)
        and all(
            isinstance(group, ast.Dict)
            and None not in group.keys
            and any(isinstance(k, ast.Constant) and k.value == key for k in group.keys)
            for group in groups.elts
        )
    )


def _pure(node: ast.expr) -> bool:
    """A name, attribute chain or literal, or a subscript of them by one (``OPTIMIZERS[name]``,
    ``names[args.optimizer]``): reading it twice gives the same value."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not _pure(node.slice):
            return False
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


def _class_test(view: FileView, node: ast.AST) -> ast.expr | None:
    """The test ``node`` is the class of: an ``isinstance`` / ``issubclass`` call (alone or in a
    tuple of classes), or a comparison (``type(x) is node``); None otherwise."""
    parent = view.index.parent(node)
    if isinstance(parent, ast.Compare):
        return parent
    if isinstance(parent, ast.Tuple):
        node, parent = parent, view.index.parent(parent)
    if (
        isinstance(parent, ast.Call)
        and len(parent.args) == 2
        and parent.args[1] is node
        and view.qualified_name(parent.func) in ("builtins.isinstance", "builtins.issubclass")
    ):
        return parent
    return None


# Calls that read only the keys of a dict they are given.
_KEY_READERS = frozenset({"builtins.sorted", "builtins.list", "builtins.set", "builtins.len"})


def _none_test(node: ast.AST | None) -> bool:
    """``x is None`` / ``x is not None`` (either way round)."""
    return (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Is | ast.IsNot)
        and any(
            isinstance(side, ast.Constant) and side.value is None
            for side in (node.left, *node.comparators)
        )
    )


def _refilled(index: ModuleIndex, target: ast.Name) -> bool:
    """``target = {key(k): v for k, v in target.items()}``: the same classes under new keys
    (ESPnet lower-cases its names)."""
    statement = index.parent(target)
    if not isinstance(statement, ast.Assign) or statement.targets != [target]:
        return False
    kept = values_kept(statement.value)
    return isinstance(kept, ast.Name) and kept.id == target.id


def _fills_registry(index: ModuleIndex, read: ast.Name | ast.Attribute) -> bool:
    """``read`` (a dict of classes) is filled there, not read: ``read[k] = cls``,
    ``read.update(...)``, or ``read = {k.lower(): v for k, v in read.items()}``."""
    parent = index.parent(read)
    if isinstance(parent, ast.Subscript) and parent.value is read:
        return isinstance(parent.ctx, ast.Store)
    if not isinstance(parent, ast.Attribute) or not isinstance(read, ast.Name):
        return False
    call = index.parent(parent)
    if index.update_receiver(call) is read:
        return True
    generator = index.parent(call) if call is not None else None  # `read.items()`
    comprehension = index.parent(generator) if generator is not None else None
    if not isinstance(comprehension, ast.DictComp):
        return False
    target = index.assigned_name(comprehension)
    return target is not None and _refilled(index, target) and values_kept(comprehension) is read


def _reads_keys(view: FileView, read: ast.expr) -> bool:
    """``read`` (a dict) is used for its keys only: ``name in read``, ``read.keys()``,
    ``sorted(read)`` and the like, or argparse's ``choices=read``."""
    index = view.index
    parent = index.parent(read)
    if isinstance(parent, ast.Compare):
        return all(isinstance(op, ast.In | ast.NotIn) for op in parent.ops) and any(
            read is comparator for comparator in parent.comparators
        )
    if isinstance(parent, ast.Attribute) and parent.attr == "keys":
        call = index.parent(parent)
        return isinstance(call, ast.Call) and call.func is parent and not call.args
    if isinstance(parent, ast.keyword):
        return parent.arg == "choices"
    if isinstance(parent, ast.Call) and parent.args == [read] and not parent.keywords:
        return view.qualified_name(parent.func) in _KEY_READERS
    return False


@dataclass
class _ImportDraft:
    statement: ast.ImportFrom
    names: dict[int, str] = field(default_factory=dict)
    module: str | None = None


# -- arguments -----------------------------------------------------------------------------------


def _reposition(
    target: str, args: Sequence[Argument], names: list[str], dropped: set[int]
) -> dict[int, str]:
    """Positional arguments stay positional while they line up with the target's order; the
    others become keywords (positional index -> its name)."""
    target_parameters = TARGET_PARAMETERS[target]
    to_keyword: dict[int, str] = {}
    position = 0
    aligned = True
    for arg in args:
        index = arg.index
        if arg.keyword is not None or arg.star == "**" or index in dropped:
            if arg.keyword is None:
                aligned = False
            continue
        aligned = (
            aligned
            and position < len(target_parameters)
            and target_parameters[position] == names[index]
        )
        if aligned:
            position += 1
        else:
            to_keyword[index] = names[index]
    return to_keyword


def _is(node: ast.expr) -> Callable[[ast.expr], bool]:
    return lambda value: value is node


def _parameters_given(
    call: ast.Call,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    is_given: Callable[[ast.expr], bool],
) -> set[str]:
    """The parameters of ``function`` that ``call`` binds to the arguments ``is_given``; empty
    when one of them goes to ``*args`` / ``**kwargs`` or is unpacked."""
    positional = [arg.arg for arg in function.args.posonlyargs + function.args.args]
    keywords = {arg.arg for arg in function.args.args + function.args.kwonlyargs}
    received: set[str] = set()
    for index, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            if is_given(value.value):
                return set()
        elif is_given(value):
            if index >= len(positional):
                return set()
            received.add(positional[index])
    for keyword in call.keywords:
        if is_given(keyword.value):
            if keyword.arg is None or keyword.arg not in keywords:
                return set()
            received.add(keyword.arg)
    return received


def _bind(view: FileView, args: list[Argument], source: Source) -> tuple[list[str], list[str]]:
    """The parameter name of each argument, by the source's signature, and binding problems.
    ``**mapping`` gets no name: its keys are read by :meth:`_Planner._read_forwarded`."""
    names: list[str] = []
    problems: list[str] = []
    position = 0
    for arg in args:
        if arg.star == "**":
            names.append("")
        elif arg.star:
            problems.append(
                f"arguments passed as `{arg.star}{view.written(arg.value)}` cannot be checked"
            )
            names.append("")
        elif arg.keyword is None:
            if position < len(source.positional):
                names.append(source.positional[position])
            else:
                problems.append(f"`{source.display}` takes fewer positional arguments")
                names.append("")
            position += 1
        elif arg.keyword in source.parameters:
            names.append(arg.keyword)
        else:
            problems.append(f"`{arg.keyword}=` is not a parameter of `{source.display}`")
            names.append(arg.keyword)
    return names, problems


def _unfreezes(index: ModuleIndex) -> bool:
    """The module may give a parameter its first gradient after training starts: it sets
    `requires_grad` (to anything but a literal False) or adds a parameter group."""
    for attribute in index.attributes("requires_grad"):
        statement = index.statement_of(attribute)
        if isinstance(attribute.ctx, ast.Store) and not _literal_false(
            getattr(statement, "value", None)
        ):
            return True
    if index.attributes("add_param_group"):
        return True
    for attribute in index.attributes("requires_grad_"):
        call = index.parent(attribute)
        if not (isinstance(call, ast.Call) and call.func is attribute):
            return True  # the method passed around: it may be called with anything
        given = argument(call, "requires_grad", 0)
        if given is None or not _literal_false(given.value):
            return True
    return False


def _literal_false(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _module_default_zero_grad(hazard: Hazard, models: set[str]) -> bool:
    """``model.zero_grad()`` with torch's default on a model whose parameters feed the
    optimizer: under `combine_grad` Ascend apex makes that default zero in place."""
    node = hazard.node
    if not hazard.module_default or not isinstance(node, ast.Call):
        return False
    receiver = full_name(node.func)  # `model.zero_grad`
    return receiver is not None and any(
        overlaps(receiver.removesuffix(".zero_grad"), model) for model in models
    )


def _no_counterpart(args: list[Argument], names: list[str]) -> list[str]:
    """Why arguments given as literals change the update in a way no NPU fused optimizer
    makes (``bias_correction=False``, ``maximize=True``): nothing else matters for the
    constructor then (the rest of the arguments are mapped later, see _map_arguments)."""
    reasons: list[str] = []
    for arg, name in zip(args, names, strict=True):
        if name in NEUTRAL_AT:
            neutral, reason = NEUTRAL_AT[name]
            value = literal_value(arg.value)
            if value is not NOT_LITERAL and value != neutral:
                reasons.append(reason)
    return reasons


def _fused_adam_target(
    view: FileView, args: list[Argument], names: list[str]
) -> tuple[str | None, str | None]:
    """apex FusedAdam: ``adam_w_mode`` (default True) picks NpuFusedAdamW or NpuFusedAdam."""
    if "adam_w_mode" not in names:
        return "NpuFusedAdamW", None
    arg = args[names.index("adam_w_mode")]
    value = literal_value(arg.value)
    if value is NOT_LITERAL:
        return None, (
            f"`adam_w_mode={view.written(arg.value)}` is not a literal, so npu-migrate cannot "
            "choose between NpuFusedAdamW (True) and NpuFusedAdam (False)"
        )
    return ("NpuFusedAdamW" if value else "NpuFusedAdam"), None


def _forwarded_key(
    view: FileView, draft: _Draft, keys: ForwardedKeys, key: str, value: ast.expr
) -> tuple[str | None, bool]:
    """What a key forwarded with ``**`` needs: (the problem that blocks the rewrite, or None;
    whether it must be dropped)."""
    code = f"`{key}={view.written(value)}`"
    if key == "adam_w_mode" and draft.source.target is None:
        return (
            f"{code} in a forwarded dict: npu-migrate reads `adam_w_mode` only in the call",
            False,
        )
    if key in PERFORMANCE_ONLY:
        return None, key not in TARGET_PARAMETERS[draft.target]
    if key in NEUTRAL_AT:
        neutral, reason = NEUTRAL_AT[key]
        literal = literal_value(value)
        if literal is NOT_LITERAL:
            return (
                f"{code} is not a literal, so npu-migrate cannot tell if it changes the update",
                False,
            )
        if literal != neutral:
            return reason, False
        return None, key not in KEPT_WHEN_NEUTRAL
    return None, False


_MAPPINGS_WEIGHT_DECAY = (
    "FusedAdam's default `weight_decay` (0.0) must be passed to NpuFusedAdamW (default 1e-2), "
    "and with more than one `**` argument npu-migrate cannot place it where each of them still "
    "overrides it"
)


# -- messages ------------------------------------------------------------------------------------


def _not_rewritten(source: Source, target: str | None, fused: str | None = None) -> str:
    """How a report on a constructor it does not rewrite starts."""
    if source.npu_class:
        return f"`{source.display}` is not made `{TORCH_NPU_HOME}.{target}`"
    return f"`{source.display}` is not rewritten to {fused or f'`{target}`'}"


# torch_npu's class of the same name, for Ascend apex's own.
_SAME_CLASS = "takes the same arguments as Ascend apex's, and makes the same update"


def _apex_home_why(draft: _Draft, in_sight: bool) -> str:
    """Why Ascend apex's own class becomes torch_npu's (``in_sight``: it reaches no
    `amp.initialize` at all, rather than only a disabled one)."""
    if in_sight:
        reached = (
            "it reaches no `amp.initialize` (it is only stepped, read, or given to LR schedulers "
            "and to functions of this module that do the same, so no other module's "
            "`amp.initialize` can get it)"
        )
    else:
        reached = (
            f"the `amp.initialize` it goes through (line {draft.disabled_amp_line}) disables amp "
            "with `enabled=False`"
        )
    return (
        f"{reached}, and Ascend apex's fused optimizers raise in `step()` without amp "
        f'("should be used with AMP"); torch_npu\'s `{draft.target}` works without amp, '
        f"{_SAME_CLASS}"
    )


def _unfollowed_resets_message(view: FileView, source: Source, resets: Sequence[ast.AST]) -> str:
    found = ", ".join(f"`{view.written(reset)}` (line {line_of(reset)})" for reset in resets)
    return (
        f"{_not_rewritten(source, source.target)}: {found} may set gradients to None or replace "
        "them, where npu-migrate does not tell whether they are this optimizer's, and that "
        "detaches them from torch_npu's flat gradient buffer (it then keeps stepping with stale "
        f"ones). {_left_unfused(source, _ZERO_IN_PLACE)}"
    )


_ZERO_IN_PLACE = (
    "zero the gradients in place there (`zero_grad(set_to_none=False)`, or the optimizer's own "
    "`zero_grad()`)"
)


def _apex_home_raises(source: Source) -> str:
    """What Ascend apex's own class does where a report leaves it as written."""
    return (
        f'Where it reaches no `amp.initialize`, `{source.display}` raises in `step()` ("should be '
        'used with AMP")'
    )


def _left_unfused(source: Source, to_fuse: str) -> str:
    """What the unrewritten constructor does on NPU, and how to fuse it (``to_fuse``)."""
    if source.npu_class:
        return (
            f"{_apex_home_raises(source)}; `{TORCH_NPU_HOME}.{source.target}` works there "
            f"without amp: {to_fuse}"
        )
    if source.unfused_replacement is None:
        return f"It still runs on NPU unfused; to fuse it, {to_fuse}"
    return (
        f"{_not_on_ascend(source)}: with {source.unfused_replacement}, which runs on NPU "
        f"unfused, or, to fuse it, {to_fuse}"
    )


def _not_on_ascend(source: Source) -> str:
    name = source.display.rsplit(".", 1)[1]
    return (
        f"NVIDIA's `{name}` does not run on Ascend (it needs apex's CUDA extension `amp_C`, which "
        "Ascend's apex lacks, and fails when constructed), so replace it by hand"
    )


_USE_O1_O2 = (
    "use opt_level O1 or O2 there (by hand, or with `opt-level` in [tool.npu-migrate.rules.NPU102])"
)


def _blocked_message(source: Source, target: str | None, problems: list[str]) -> str:
    fused = f"`{target}`" if target else source.target_hint
    to_fuse = "remove that argument and use the NPU fused optimizer"
    return (
        f"{_not_rewritten(source, target, fused)}: {'; '.join(problems)}. "
        f"{_left_unfused(source, to_fuse)}"
    )


def _hazard_message(source: Source, target: str, hazards: Sequence[Hazard]) -> str:
    findings = describe_hazards(list(hazards))
    remedies = list(dict.fromkeys(hazard.remedy for hazard in hazards))
    to_fuse = f"{'; '.join(remedies)}, then use `{target}`"
    return (
        f"{_not_rewritten(source, target)}, which would break here: "
        f"{findings}. {_left_unfused(source, to_fuse)}"
    )


def _kept_problem(draft: _Draft) -> str | None:
    """Why the class kept on the paths its wrapper runs (see KeptWhen) cannot take the call's
    arguments as rewritten for the NPU class: the class as written, or for NVIDIA's classes
    the torch class of their arithmetic (FusedSGD's torch.optim.SGD)."""
    source, target = draft.source, draft.target
    kept = source.display if source.unfused_replacement is None else source.unfused_class(target)
    if source.npu_class or kept is None:
        return "the class as written does not run there"
    # The rewritten arguments (and `**` mappings) name the NPU class's parameters, which the
    # kept class takes in the same order, with the same meaning and defaults (DOMAIN.md section
    # 2): they drop only switches without effect on the update and add the defaults the source
    # class had.
    kept_source = SOURCES[kept]
    npu_parameters = TARGET_PARAMETERS[target]
    if kept_source.positional[: len(npu_parameters)] != npu_parameters:
        return f"`{kept}` does not take `{target}`'s arguments in the same order"
    if kept == source.display:
        return None
    # A torch class in NVIDIA's place: the same update for the same arguments, and a TypeError
    # where either class would refuse a key.
    written = source.display
    if draft.given_keys is None:
        return f"`**` may pass keys that `{kept}` takes and `{written}` does not"
    one_only = set(source.parameters) ^ set(kept_source.parameters)
    taken = sorted(draft.given_keys & one_only)
    if taken:
        return f"`{taken[0]}` is a parameter of only one of `{written}` and `{kept}`"
    if source.requires_lr and not draft.lr_given:
        return f"without `lr`, `{written}` raises where `{kept}` takes 1e-3"
    return None


def _kept_refusal(source: Source, why: str) -> str:
    return (
        f" (npu-migrate keeps `{source.display}` where the wrapper runs and fuses it elsewhere "
        f"only when it can tell those paths apart at the constructor; here {why})"
    )


def _kept_note(view: FileView, kept: KeptWhen) -> str:
    stays = (
        f"the class stays `{kept.written}`"
        if kept.replaces is None
        else f"the class is `{kept.written}`, `{kept.replaces}`'s arithmetic with the same "
        "arguments (NVIDIA's class does not run on Ascend),"
    )
    return (
        f"{stays} where `{kept.test}` holds: there `{view.written(kept.wrap.func)}(...)` (line "
        f"{line_of(kept.wrap)}) wraps it, and the wrapper's `zero_grad()` would detach the "
        "gradients from a fused optimizer's flat buffer"
    )


_CONTRACT = (
    "NPU fused optimizers pack the parameters handed to them into flat buffers at their first "
    "step and from then on update only the buffers, so the parameters must never be "
    "re-allocated while the optimizer is in use (Ascend's documented constraint)"
)


def _sharded_message(source: Source, target: str, breaks: Sequence[Break]) -> str:
    return (
        f"{_not_rewritten(source, target)}: {describe_breaks(breaks)}. {_CONTRACT}. {_keep(source)}"
    )


def _keep(source: Source) -> str:
    """What to do with a constructor the fused optimizers' contract keeps unfused."""
    if source.npu_class:
        unfused = next(
            (
                s.display
                for s in SOURCES.values()
                if s.target == source.target and s.display[:6] == "torch."
            ),
            None,
        )
        return (
            f"{_apex_home_raises(source)}: keep it where amp runs, and use `{unfused}` (it runs "
            "on NPU unfused) elsewhere"
        )
    if source.unfused_replacement is None:
        return f"Keep `{source.display}`: it runs on NPU unfused"
    return f"{_not_on_ascend(source)} with {source.unfused_replacement}, which runs on NPU unfused"


def _reallocated_message(source: Source, target: str, breaks: Sequence[Break]) -> str:
    if all(found.late_group for found in breaks):
        to_fuse = f"add every parameter group before its first step, then use `{target}`"
        return (
            f"{_not_rewritten(source, target)}: {describe_breaks(breaks)}. "
            f"{_left_unfused(source, to_fuse)}"
        )
    to_fuse = (
        "re-allocate before the optimizer is built, or work on a copy there "
        "(`copy.deepcopy(model).cpu()`, `{k: v.cpu() for k, v in model.state_dict().items()}`), "
        f"then use `{target}`"
    )
    return (
        f"{_not_rewritten(source, target)}: {describe_breaks(breaks)}. "
        f"{_CONTRACT}. {_left_unfused(source, to_fuse)}"
    )


def _cpu_message(source: Source, target: str, model: Break) -> str:
    message = (
        f"{_not_rewritten(source, target)}: its parameters stay on the CPU "
        f"({model.code}, line {model.line}, {model.effect}), and the NPU fused optimizers work "
        "on NPU tensors only (torch_npu's `npu_combine_tensors` raises for CPU tensors at the "
        f"first step). If the model is moved to the NPU elsewhere, use `{TORCH_NPU_HOME}.{target}`"
    )
    if source.unfused_replacement is None:
        return message
    name = source.display.rsplit(".", 1)[1]
    return (
        f"{message}; NVIDIA's `{name}` does not run on Ascend (it needs apex's CUDA extension "
        f"`amp_C`), so on the CPU use {source.unfused_replacement}"
    )


@dataclass(frozen=True)
class GatedPath:
    """How an optimizer goes through an ``amp.initialize`` that runs, or enables amp, only under
    a condition that does not also guard the optimizer's construction, as a message says it."""

    reaches: str  # "it goes through `amp.initialize` (line 11), which runs only when ..."


def _gated_path(
    gate: AmpGate | None, site: tuple[CallSite, ExternalAmp] | None
) -> GatedPath | None:
    if gate is not None:
        condition = f"`{gate.test}` holds" if gate.amp_when_true else f"`{gate.test}` is false"
        return GatedPath(
            f"it goes through `amp.initialize` (line {line_of(gate.amp_call)}), which "
            f"{gate.verb} only when {condition}"
        )
    if site is not None and site[1].gate is not None:
        call_site, amp = site
        return GatedPath(
            f"`{call_site.factory}` returns it to the call at {call_site.at}, whose "
            f"`amp.initialize` ({amp.at}) {site[1].gate[2]} only when {amp.condition}"
        )
    return None


AMP_ALWAYS = '`amp = "always"` ([tool.npu-migrate])'

# The keyword-only parameter a factory gets to pick the class by amp's condition, the first
# name its function does not use.
AMP_PARAMETERS = ("apex_amp", "with_apex_amp", "npu_apex_amp")

# Why neither class alone fits an optimizer whose amp.initialize runs only on some paths.
_NEITHER_HOME = (
    "Ascend apex's fused optimizers raise in `step()` without amp, and torch_npu's step stale "
    "gradients under apex amp (for any optimizer but its own fused ones, Ascend apex's "
    "`amp.initialize` sets the gradients to None before every backward, which detaches them "
    "from torch_npu's flat buffer)"
)


def _gated_why(draft: _Draft, gated: GatedPath, amp_always: bool) -> str:
    """Why the class of an optimizer whose ``amp.initialize`` runs only on some paths."""
    if amp_always:
        return (
            f"{gated.reaches}, and {AMP_ALWAYS} counts that `amp.initialize` as reached (the "
            "project trains with amp on); on the path without amp its `step()` raises "
            f'RuntimeError ("apex.optimizers.{draft.target} should be used with AMP")'
        )
    return (
        f"{gated.reaches}, so the class is picked by the same condition, as Ascend's ModelZoo "
        f"scripts do: {_NEITHER_HOME}"
    )


def _mixed_callers_refusal(
    source: Source,
    target: str,
    with_amp: Sequence[CallSite],
    without_amp: Sequence[CallSite],
    no_parameter: str | None = None,
) -> str:
    factory = (with_amp or without_amp)[0].factory
    reaching = _listed(
        [
            f"call at {site.at}, `amp.initialize` at {', '.join(a.at for a in site.with_amp)}"
            for site in with_amp
        ]
    )
    passed = f" ({reaching})" if reaching else " (and this module)"
    return (
        f"{_not_rewritten(source, target)}: `{factory}` returns it to calls that "
        "pass it to "
        f"`amp.initialize`{passed} and to calls that do not ({_sites_listed(without_amp)}), "
        f"so no single NPU fused class fits: {_NEITHER_HOME}. "
        + (
            f"npu-migrate gives `{factory}` a parameter that its callers set to amp's "
            f"condition, but not here: {no_parameter}. "
            if no_parameter
            else ""
        )
        + _left_unfused(
            source,
            f"build `{APEX_HOME}.{target}` for the callers that use amp and "
            f"`{TORCH_NPU_HOME}.{target}` for the others (a parameter of `{factory}`)",
        )
    )


def _site_break_message(source: Source, target: str, sites: Sequence[CallSite]) -> str:
    found = _grouped([(site.at, site.breaks) for site in sites], "at its call at {}, {}")
    return (
        f"{_not_rewritten(source, target)}: `{sites[0].factory}` returns it, "
        f"and {found}. {_CONTRACT}. {_keep(source)}"
    )


def _escaped_message(source: Source, target: str, escaped: str) -> str:
    return (
        f"{_not_rewritten(source, target)}: {escaped}, so npu-migrate does not see the calls "
        f"that build it or whether their optimizer goes through amp: {_NEITHER_HOME}. "
        + _left_unfused(
            source,
            "pick the class where the optimizer's path through amp is known (the code that "
            "calls the function)",
        )
    )


def _stored_message(source: Source, target: str, stored: str) -> str:
    return (
        f"{_not_rewritten(source, target)}: {stored}, so this optimizer may meet amp there, "
        f"out of npu-migrate's sight: {_NEITHER_HOME}. "
        + _left_unfused(
            source,
            "use Ascend apex's class if that code passes it to `amp.initialize` on every path, "
            "torch_npu's if it never does, or pick the class by the same condition",
        )
    )


def _handed_on_message(source: Source, target: str, sites: Sequence[CallSite]) -> str:
    found = _grouped([(site.at, site.handed_on) for site in sites], "at {}, {}")
    return (
        f"{_not_rewritten(source, target)}: `{sites[0].factory}` returns it "
        f"to calls that reach no `amp.initialize` in their file, and {found}: {_NEITHER_HOME}, "
        "so the class depends on a place npu-migrate cannot see. "
        + _left_unfused(
            source,
            "pick the class where the optimizer's path through amp is known, or pass it to "
            "`amp.initialize` (or not) in the file that calls the factory",
        )
    )


def _site_hazard_message(source: Source, target: str, sites: Sequence[CallSite]) -> str:
    found = _grouped([(site.at, site.hazards) for site in sites], "at {}: {}")
    return (
        f"{_not_rewritten(source, target)}: `{sites[0].factory}` returns it "
        f"to code that would break an NPU fused optimizer ({found}). "
        + _left_unfused(source, "change that code as the NPU fused optimizers need")
    )


def _parameter_why(parameter: AmpParameter, sites: Sequence[CallSite]) -> str:
    """Why the class of an optimizer is picked by the parameter its factory gets."""
    passed = _listed(
        [f"`{value}` at line {line_of(call)}" for call, value in parameter.own_calls]
        + [f"`{site.argument}` at {site.at}" for site in sites],
        most=8,  # the calls it edits
    )
    return (
        f"`{parameter.function.name}` returns it to calls whose optimizer goes through apex's "
        f"`amp.initialize` on some paths only, so the class is picked by a new keyword-only "
        f"parameter `{parameter.name}` that every call sets to the condition under which it "
        f"does ({passed}): {_NEITHER_HOME}"
    )


def _grad_fix_note(view: FileView, fixes: Sequence[GradFix], unsafe: Mapping[int, str]) -> str:
    """What the `zero_grad` edits that go with the rewrite do, one part per code as written;
    ``unsafe``: why the edit of a call (by id) is an unsafe fix."""
    lines: dict[tuple[str, str | None, str | None, str | None, bool], list[int]] = {}
    for fix in fixes:
        code = view.written(fix.call)
        if fix.loop is not None:
            target = view.written(fix.loop.target)
            code = f"for {target} in {code}: {target}.grad = None"
        key = (code, fix.receiver, unsafe.get(id(fix.call)), fix.wrapper, fix.loop is not None)
        lines.setdefault(key, []).append(fix.line)
    parts: list[str] = []
    for (code, model, risk, wrapper, loop), numbers in lines.items():
        where = ", ".join(str(n) for n in dict.fromkeys(numbers))
        quoted = f"`{code}` ({'lines' if ',' in where else 'line'} {where})"
        if loop:
            how = (
                f"an unsafe fix, applied with `--unsafe-fixes`: {risk}"
                if risk is not None
                else "every parameter of the module is in this optimizer, which updates each "
                "parameter it packed at every step, whether its gradient is None or zero"
            )
            parts.append(
                f"replaced the loop {quoted} that sets the gradients to None with "
                f"`{model}.zero_grad(set_to_none=False)`, which zeroes them in place in the fused "
                f"optimizer's flat buffer ({how})"
            )
        elif model is None:
            parts.append(f"dropped `set_to_none` from {quoted}: the fused optimizers zero in place")
        elif wrapper is not None:
            parts.append(
                f"passed `set_to_none=False` to {quoted}, the `zero_grad` of `{wrapper}(...)` "
                "around this optimizer: it zeroes the same parameters' gradients in place "
                "instead of setting them to None, so they stay in the fused optimizer's flat "
                "buffer"
            )
        elif risk is not None:
            parts.append(
                f"passed `set_to_none=False` to `{code}` ({'lines' if ',' in where else 'line'} "
                f"{where}; an unsafe fix, applied with `--unsafe-fixes`: {risk})"
            )
        else:
            parts.append(
                f"passed `set_to_none=False` to {quoted}, so that the gradients stay in the fused "
                "optimizer's flat buffer (every parameter of the module is in this optimizer, "
                "which updates each parameter it packed at every step, whether its gradient is "
                "None or zero)"
            )
    return "; ".join(parts)


def _unsafe_hint(hazards: Sequence[Hazard], risks: Mapping[int, str]) -> str:
    """What ``--unsafe-fixes`` would do about ``hazards``, and why it is unsafe."""
    reasons = "; ".join(dict.fromkeys(f"{h.code} (line {h.line}): {risks[id(h)]}" for h in hazards))
    loops = [h.fix for h in hazards if h.fix is not None and h.fix.loop is not None]
    edit = "passes `set_to_none=False` there"
    if loops:
        edit = (
            f"replaces the loop with `{loops[0].receiver}.zero_grad(set_to_none=False)`"
            if len(loops) == len(hazards)
            else "passes `set_to_none=False` there (a loop that sets the gradients to None "
            "becomes `zero_grad(set_to_none=False)`)"
        )
    return f". With `--unsafe-fixes` npu-migrate {edit} and fuses it; unsafe because {reasons}"


def _gated_refusal(source: Source, target: str, gated: GatedPath, unportable: str) -> str:
    choice = picked_by("<condition>", True, target)
    return (
        f"{_not_rewritten(source, target)}: {gated.reaches}, so no single NPU "
        f"fused class fits: {_NEITHER_HOME}. npu-migrate picks the class by the condition, "
        f"`{choice}(...)`, only where it can evaluate the condition at the constructor, and here "
        f"{unportable}. "
        + _left_unfused(
            source,
            "pick the class by the condition under which `amp.initialize` runs, or call "
            f"`amp.initialize` on every path, or set {AMP_ALWAYS} if the project always trains "
            "with amp",
        )
    )


_EVERY_PATH_O1_O2 = (
    "let every path of the opt level be O1 or O2 (by hand: NPU102's `opt-level` switch sets "
    "literal levels only)"
)


def _refused_message(source: Source, target: str, options: AmpOptions, refusal: str) -> str:
    to_fuse = _EVERY_PATH_O1_O2 if options.level_path is not None else _USE_O1_O2
    return (
        f"{_not_rewritten(source, target)}: it goes through `amp.initialize` "
        f"(line {line_of(options.call)}), and {refusal}. {_left_unfused(source, to_fuse)}"
    )


def _refused_elsewhere_message(
    source: Source, target: str, site: CallSite, amp: ExternalAmp
) -> str:
    return (
        f"{_not_rewritten(source, target)}: `{site.factory}` returns it to the "
        f"call at {site.at}, which passes it to `amp.initialize` at {amp.at}, and {amp.refusal}. "
        f"{_left_unfused(source, _EVERY_PATH_O1_O2 if amp.computed else _USE_O1_O2)}"
    )


def _sites_listed(sites: Sequence[CallSite]) -> str:
    return _listed([f"call at {site.placed}" for site in sites])


_MOST_LISTED = 3  # places named in one message; the others are counted


def _in_tests(place: str) -> bool:
    """``place`` ("path:line") is in a test file: ``test_*.py``, ``*_test.py`` or a ``tests``
    folder."""
    path = PurePosixPath(place.rsplit(":", 1)[0].replace("\\", "/"))
    return (
        path.name.startswith("test_")
        or path.name.endswith("_test.py")
        or "tests" in path.parts[:-1]
    )


def _listed(items: Sequence[str], separator: str = "; ", most: int = _MOST_LISTED) -> str:
    """``items`` joined, each once: the first ``most``, and how many more there are."""
    shown, more = first_few(items, most)
    return separator.join(shown) + (f"{separator}and {more} more" if more else "")


def _grouped(found: Sequence[tuple[str, str]], template: str) -> str:
    """(place, finding) pairs in ``template`` ("at {}: {}"), one entry per finding with the
    places where it is found (a factory called forty times by one test file says it once),
    the places in test files last: the first few named are the training code's."""
    places: dict[str, list[str]] = {}
    for place, finding in sorted(found, key=lambda pair: _in_tests(pair[0])):
        places.setdefault(finding, []).append(place)
    return _listed([template.format(_listed(at, ", "), finding) for finding, at in places.items()])


def _factory_why(
    draft: _Draft,
    amp_call: ast.Call | None,
    with_amp: Sequence[CallSite],
    without_amp: Sequence[CallSite],
) -> str:
    """Why the home of an optimizer that functions of the module return to other files."""
    factory = (with_amp or without_amp)[0].factory
    reaching = [
        f"call at {site.placed}, `amp.initialize` at {', '.join(a.at for a in site.with_amp)}"
        for site in with_amp
    ]
    if amp_call is not None:
        reaching.insert(0, f"`amp.initialize` at line {line_of(amp_call)}")
    if draft.home == APEX_HOME:
        return (
            f"`{factory}` returns it and every call of it passes it to `amp.initialize` "
            f"({_listed(reaching)}): Ascend apex's fused optimizers step only under amp"
        )
    return (
        f"`{factory}` returns it to calls where it reaches no enabled `amp.initialize` "
        f"({_sites_listed(without_amp)}): torch_npu's fused optimizers work without amp"
    )


def _fixed_message(draft: _Draft) -> str:
    if draft.why is not None:
        why = draft.why
    elif draft.home == APEX_HOME:
        why = (
            f"it goes through `amp.initialize` (line {draft.amp_line}), and Ascend apex's fused "
            "optimizers step only under amp"
        )
    elif draft.disabled_amp_line is not None:
        why = (
            f"the `amp.initialize` it goes through (line {draft.disabled_amp_line}) disables amp "
            "with `enabled=False`, and torch_npu's fused optimizers work without amp"
        )
    else:
        why = (
            "it does not reach `amp.initialize` in this module, and torch_npu's fused optimizers "
            "work without amp"
        )
    notes = "".join(f"; {note}" for note in draft.notes)
    if draft.lookup is not None:
        mapped = ", ".join(f"{name} -> {target}" for name, target in draft.lookup.mapped)
        home = (
            "NPU fused classes, each picked by amp's condition"
            if draft.choice is not None
            else f"`{draft.home}`"
        )
        if draft.lookup.by_class:
            derived = draft.call.func
            where = (
                f" where `{derived.id}` derives from them (line {draft.lookup.at.lineno}, "
                "a class that only adds methods of its own)"
                if draft.lookup.at is not None and isinstance(derived, ast.Name)
                else ""
            )
            return (
                f"mapped the torch.optim classes `{draft.lookup.name}` may hold{where} to {home} "
                f"({mapped}; any other value is called as before, and these arguments fit each "
                f"mapped class as written): {why}{notes}"
            )
        return (
            f"mapped the names of `{draft.lookup.lookup}` that have an NPU fused class to "
            f"{home} ({mapped}; any other name keeps torch's class, and these arguments "
            f"fit each mapped class as written): {why}{notes}"
        )
    if draft.named_by is not None:
        return f"replaced {draft.named_by} with `{draft.callee}`: {why}{notes}"
    return f"replaced `{draft.source.display}` with `{draft.callee}`: {why}{notes}"


def _method_blocks(newly: bool, callers: MethodCallers | None) -> bool:
    """Whether the constructor a method returns stays unfused for its callers: the shapes of
    issue 19 unless every caller is in the run and safe; a direct constructor (rewritten
    before the callers were followed, which stays so when the run shows no use of the method)
    when a use of the method in the run is unsafe or cannot be sorted."""
    if callers is None:
        return newly
    if callers.why is None:
        return False
    return newly or callers.uses > 0


def _method_message(
    source: Source,
    target: str,
    method: ast.FunctionDef | ast.AsyncFunctionDef,
    callers: MethodCallers | None = None,
) -> str:
    to_fuse = (
        f"check that no caller of `{method.name}` calls `zero_grad(set_to_none=True)`, sets "
        f"gradients to None or re-allocates the parameters, then use `{target}`"
    )
    if callers is None:
        followed = (
            "returns it to callers npu-migrate does not follow, where the code that zeroes and "
            "steps it may break an NPU fused optimizer (a training loop's "
            "`zero_grad(set_to_none=True)`, for one, is refused by NPU fused optimizers)"
        )
    else:
        followed = (
            "returns it to its callers, and npu-migrate swaps it only when every caller is in "
            f"the files of this run and keeps an NPU fused optimizer working: {callers.why}"
        )
    return (
        f"{_not_rewritten(source, target)}: the method `{method.name}` (line "
        f"{method.lineno}) {followed}. " + _left_unfused(source, to_fuse)
    )


def _sharded_class_message(code: str, name: str, sharder: str) -> str:
    """An optimizer class that a sharding layer builds its optimizers from."""
    if name in UNSUPPORTED or SOURCES[name].unfused_replacement is not None:
        instead = (
            f"NVIDIA's class does not run on Ascend (it needs apex's CUDA extension `amp_C`): "
            f"put {SOURCES[name].unfused_replacement if name in SOURCES else 'a torch optimizer'}"
            " here"
        )
    else:
        instead = "keep it: it runs on NPU unfused"
    return (
        f"`{code}` (`{name}`) is the class `{sharder}` builds its optimizer from over its shard "
        "of the parameters, which it re-allocates into buckets of its own; an NPU fused "
        f"optimizer there would break the fused optimizers' contract (parameters never "
        f"re-allocated while in use), so {instead}"
    )


# torch's RPC optimizer, which builds an optimizer from a class on each parameter owner.
_RPC_OPTIMIZERS = frozenset(
    {
        "torch.distributed.optim.DistributedOptimizer",
        "torch.distributed.optim.optimizer.DistributedOptimizer",
    }
)


def _rpc_class_message(code: str, name: str) -> str:
    """An optimizer class handed to torch's RPC ``DistributedOptimizer``."""
    if name.startswith(APEX_HOME + "."):
        instead = (
            "NVIDIA's class does not run on Ascend (it needs apex's CUDA extension `amp_C`): "
            f"put {SOURCES[name].unfused_replacement if name in SOURCES else 'a torch optimizer'}"
            " here"
        )
    else:
        instead = "keep it: it runs on NPU as written"
    return (
        f"`{code}` (`{name}`) is the class torch's RPC `DistributedOptimizer` builds an optimizer "
        "from on each worker that owns parameters; for a class it has no functional form of (an "
        "NPU fused one) it sets each parameter's `.grad` to the distributed autograd context's "
        "gradient before every step, which replaces a gradient tensor and detaches it from an "
        f"NPU fused optimizer's flat gradient buffer (it would step stale values), so {instead}"
    )


def _class_value_message(code: str, name: str) -> str:
    """What to do with an optimizer class that is used as a value."""
    if name in UNSUPPORTED:
        return (
            f"`{code}` (`{name}`) is used as a value, so npu-migrate does not see the optimizer "
            f"it builds: it has no NPU version ({UNSUPPORTED[name]}); replace it here by hand"
        )
    source = SOURCES[name]
    hint = source.target_hint
    message = (
        f"`{code}` (`{name}`) is used as a value, so npu-migrate cannot rewrite the optimizer it "
        f"builds: put {hint} from `torch_npu.optim` here (from `apex.optimizers` when that "
        "optimizer goes through `amp.initialize` on every path)"
    )
    if source.unfused_replacement is None:
        return message + ", or leave it: it runs on NPU unfused"
    return (
        message + f", or {source.unfused_replacement}; NVIDIA's class itself does not run on "
        "Ascend (it needs apex's CUDA extension `amp_C`)"
    )


_TYPE_TESTS = frozenset({"isinstance", "issubclass", "type"})
_INTROSPECTION = frozenset({"inspect.signature", "inspect.getfullargspec", "inspect.getsource"})
# The last part of every optimizer class name (dotted uses end with one of them).
OPTIMIZER_CLASS_NAMES = sorted({name.rpartition(".")[2] for name in KNOWN_OPTIMIZERS})

_FP16_OPTIMIZER_ADVICE = (
    "`FP16_Optimizer` is not rewritten: the NPU fused optimizers get mixed precision from "
    "`amp.initialize`. Build the optimizer unwrapped, call "
    '`model, optimizer = amp.initialize(model, optimizer, opt_level="O2")`, and replace '
    "`optimizer.backward(loss)` with `with amp.scale_loss(loss, optimizer) as scaled: "
    "scaled.backward()`; npu-migrate then rewrites the optimizer"
)


def _fp16_wrapper_advice(
    inner: Sequence[tuple[ast.Call, str]],
    no_counterpart: Callable[[ast.Call, str], str | None],
) -> str:
    """What to do with an `FP16_Optimizer` wrapping the optimizers ``inner`` (constructor,
    qualified name): the general advice, unless none of them has an NPU counterpart."""
    reasons = [(call, name, no_counterpart(call, name)) for call, name in inner]
    if not reasons or any(reason is None for _, _, reason in reasons):
        return _FP16_OPTIMIZER_ADVICE
    call, name, reason = reasons[0]
    return (
        f"`FP16_Optimizer` is not rewritten: the optimizer it wraps, `{name}` (line "
        f"{line_of(call)}), has no NPU fused counterpart ({reason}), so there is nothing to "
        "migrate it to; keep a pure-PyTorch optimizer with the same update and get mixed "
        'precision from `amp.initialize(model, optimizer, opt_level="O2")`'
    )


_DYNAMIC_LOOKUP_ADVICE = (
    "the optimizer class is looked up by name at run time, so npu-migrate cannot rewrite it: map "
    "the names yourself, e.g. `{'SGD': torch_npu.optim.NpuFusedSGD, 'Adam': "
    "torch_npu.optim.NpuFusedAdam}` (use `apex.optimizers.NpuFused*` when the optimizer goes "
    "through `amp.initialize`)"
)


def kept_when(
    view: FileView, flow: OptimizerFlow, call: ast.Call, hazards: Sequence[Hazard]
) -> KeptWhen | str | None:
    """Where ``call`` keeps its written class so that the NPU fused one is built only where
    nothing of ``hazards`` runs: they must all come from one wrapper call (timm's ``Lookahead``,
    whose ``zero_grad`` is torch's: returned to the callers, or zeroed here), which runs under
    `if` tests of the constructor's function that read, at the constructor, what they read at
    the wrap; the class is then picked by those tests. Why they cannot be read there; None when
    the hazards are others, or the wrap runs on every path of the constructor.

    Evaluated earlier, the tests do nothing else (no call but ``len``) and read the same values
    (nothing they read is assigned in between, and a sequence they index is a new one of the
    function's own, only ever indexed or measured)."""
    wraps = {id(hazard.wrapper): hazard.wrapper for hazard in hazards}
    if not hazards or len(wraps) != 1 or None in wraps.values():
        return None
    [wrap] = wraps.values()
    assert wrap is not None
    index = view.index
    statement = index.statement_of(wrap)
    built = index.statement_of(call)
    if statement is None or built is None:
        return None
    guards = flow.guards_only_for(statement, call)
    if not guards:
        return None
    test = " and ".join(and_operand(test, holds) for test, holds in reversed(guards))
    scope = flow.scope_of(call)
    if scope is not flow.scope_of(statement) or statement.lineno <= (built.end_lineno or 0):
        return f"`{test}` guards a wrap that is not after the constructor in its function"
    problem = unreadable_test(view, scope, built, statement, test)
    if problem is not None:
        return problem
    return KeptWhen(test, view.written(class_of(view, call)), wrap)


# What a registration loop does with a class it looks up (see FusedPlanner._registered).
_CLASS_TESTS = frozenset({"isclass", "issubclass"})
_REGISTERS = frozenset({"register_module", "register"})


def _inside(index: ModuleIndex, node: ast.AST, scope: ast.AST) -> bool:
    return scope is index.tree or any(a is scope for a in index.ancestors(node))


def _registers_or_tests(index: ModuleIndex, use: ast.Name) -> bool:
    """``use`` is an argument of ``inspect.isclass(...)`` / ``issubclass(...)``, or the class
    given to a registry: ``R.register_module()(use)``, ``R.register_module(module=use)``,
    ``R.register(use)``."""
    parent = index.parent(use)
    if isinstance(parent, ast.keyword):
        parent = index.parent(parent)
        if not (isinstance(parent, ast.Call) and _method_named(parent.func, _REGISTERS)):
            return False
        return any(k.arg == "module" and k.value is use for k in parent.keywords)
    if not isinstance(parent, ast.Call) or use not in parent.args:
        return False
    func = parent.func
    if _method_named(func, _REGISTERS):
        return True
    if isinstance(func, ast.Call) and _method_named(func.func, _REGISTERS):
        return True  # `R.register_module()(use)`
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return called in _CLASS_TESTS and parent.args[0] is use


def _method_named(func: ast.expr, names: frozenset[str]) -> bool:
    return isinstance(func, ast.Attribute) and func.attr in names
