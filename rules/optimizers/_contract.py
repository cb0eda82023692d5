"""The NPU fused optimizers' contract, checked before NPU101 swaps one in. Not a rule.

Ascend documents one constraint for every ``torch_npu.optim.NpuFused*`` and
``apex.optimizers.NpuFused*``: the parameter objects handed to the optimizer must not be
re-allocated while it is in use. The sources say why, and when it starts to matter:

- torch_npu's ``NpuFusedOptimizerBase`` packs at its first ``step()`` (also at a ``zero_grad()``
  once gradients exist, ``_maybe_init_combined_params_and_grads``): ``npu_combine_tensors``
  copies every parameter and gradient into one flat NPU buffer per dtype and points each tensor
  at its slice (``npu_change_data_ptr``); every later step updates the buffers only.
- Ascend apex's fused optimizers pack the same way under amp, at the end of the first
  ``amp.scale_loss`` (``combined_init_*``, through ``combine_npu``); only with
  ``check_combined_tensors=True`` does amp notice a moved tensor and pack again.
- torch's ``Module._apply`` (behind ``.cpu()``, ``.to()``, ``.half()``, ``.float()``...) keeps
  each Parameter object and assigns it a new ``.data`` (``torch.__future__.
  get_overwrite_module_params_on_conversion()`` is False), except where ``fn`` returns the
  tensor itself: a move to where the parameters already are changes nothing.

So a re-allocation before the first step is harmless (nothing is packed yet: the
usual ``optimizer = SGD(model.parameters()); model.cuda()`` still works), and so is one after the
last step; one *between two steps* leaves the optimizer updating buffers that the model no longer
reads, with no error. :class:`ParameterContract` finds, for one optimizer constructor:

- **re-allocations between steps** (:meth:`ParameterContract.reallocations`): moves away from
  the device and casts of the model whose ``.parameters()`` feed the optimizer, or of a submodule
  (``.cpu()``, ``.to("cpu")``, ``.to(<dtype>)``, ``.half()``, ``.bfloat16()``, ``.double()``,
  ``._apply(fn)``), stores to a parameter or its ``.data``, ``setattr``, ``register_parameter``,
  ``del``, wherever one of them may run after a step of this optimizer and before another one:
  directly, or in a function of the module called with the model (``save_checkpoint(model)``).
  Moves back (``.cuda()``, ``.npu()``, ``.to(device)``, ``.float()``) are no-ops where the
  parameters already are, and come after a move away, which is what is reported. So is an
  ``add_param_group`` on the optimizer (or on something built with it, a wrapper that forwards
  it) between two steps: torch_npu's and Ascend apex's fused classes size their packed lists by
  the groups they had at packing, so the next step fails on the new group (an IndexError, or a
  KeyError for the Adam family's missing ``step`` state), however late in training;
- **sharding and partitioning layers** (:meth:`ParameterContract.sharding`), whatever the order:
  FSDP (``FullyShardedDataParallel``, ``fully_shard``), tensor and sequence parallelism
  (``parallelize_module``, ``distribute_module``, ``distribute_tensor``), DeepSpeed
  (``deepspeed.initialize``), ``ZeroRedundancyOptimizer``, ``share_memory()`` (hogwild workers):
  they re-allocate or share the parameters themselves; and Accelerate's ``accelerator.prepare``
  and Lightning Fabric's ``fabric.setup``, which do either or neither, as the launch
  configuration says.

"May run between two steps" is decided on the module's ``ast`` with an automaton over three
events in program order: the optimizer's construction (it starts unpacked), its steps (it is
packed) and the re-allocation; loops repeat their body, branches join, a call of a function of
the module brings that function's events, with the model and the optimizer followed into its
parameters. It over-approximates (``return`` and ``break`` are not cut), so a doubt reports.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from migrator.analysis.calls import Argument, arguments, literal_value
from migrator.analysis.index import line_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.scopes import BindingKind
from migrator.analysis.view import FileView
from migrator.diagnostics import lines_named
from migrator.rules.optimizers import _lightning as lightning_facts
from migrator.rules.optimizers._flow import OptimizerFlow
from migrator.rules.optimizers._hazards import group_params

Path = tuple[str, ...]
Part = Literal["module", "tensor", "any", "optimizer"]
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)

# -- what re-allocates ---------------------------------------------------------------------------

# Methods of a module that re-allocate its parameters (when they are not already so).
_AWAY = {
    "cpu": "moves this optimizer's parameters to the CPU",
    "half": "casts this optimizer's parameters to float16",
    "bfloat16": "casts this optimizer's parameters to bfloat16",
    "double": "casts this optimizer's parameters to float64",
    "_apply": "re-creates this optimizer's parameters through `_apply`",
}
_CAST_DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float64": "float64",
    "torch.double": "float64",
}
_ALL_DTYPES = frozenset(
    {
        "torch.float16", "torch.half", "torch.bfloat16", "torch.float32", "torch.float",
        "torch.float64", "torch.double",
    }
)  # fmt: skip
_PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_MODULE_ITERATORS = frozenset({"modules", "named_modules", "children", "named_children"})
_PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})
_TENSOR_NAMES = frozenset({"weight", "bias", "data", "grad"})
# Module methods that return the module itself (`model.eval().cpu()` moves `model`).
_RETURNS_SELF = frozenset(
    {
        "eval", "train", "cuda", "npu", "xpu", "cpu", "to", "to_empty", "half", "float",
        "double", "bfloat16", "type", "requires_grad_", "apply", "_apply", "share_memory",
    }
)  # fmt: skip
# How a function becomes a worker process: `Process(target=f)`, `mp.spawn(f, ...)`.
_SPAWNERS = frozenset({"spawn", "start_processes"})
# Wrappers whose iteration yields the modules or parameters of their argument.
_ITERATION_WRAPPERS = frozenset({"enumerate", "list", "tuple", "reversed", "sorted", "zip"})

# -- what shards ---------------------------------------------------------------------------------

# The last part of the qualified names of the layers that own their parameters' storage, with
# what they do to it. Matched in any library (torch, Megatron, fairscale...).
_FSDP = (
    "shards this optimizer's parameters (FSDP swaps their storage at every forward and backward)"
)
_DTENSOR = "turns this optimizer's parameters into DTensor shards"
SHARDING = {
    "FullyShardedDataParallel": _FSDP,
    "fully_shard": _FSDP,
    "fully_shard_model": _FSDP,
    "fully_shard_optimizer": _FSDP,
    "parallelize_module": _DTENSOR,
    "distribute_module": _DTENSOR,
    "ZeroRedundancyOptimizer": (
        "partitions this optimizer's parameters (ZeRO re-allocates them into its own buckets)"
    ),
}
_DEEPSPEED = "deepspeed.initialize"
_DEEPSPEED_EFFECT = "hands this optimizer's parameters to DeepSpeed, which partitions them"


# Hugging Face Accelerate's `accelerator.prepare(model, optimizer, ...)` and Lightning Fabric's
# `fabric.setup(model, optimizer)` wrap the model and the optimizer as the launch configuration
# says (`accelerate launch` / `lightning run model` options, a config file, environment
# variables; for Fabric also its `strategy=`), which the call does not show: plain DDP, or FSDP
# (the optimizer's parameter groups are pointed at the sharded flat parameters), or DeepSpeed
# (ZeRO partitions them and replaces their gradients at every step).
@dataclass(frozen=True)
class _Launcher:
    package: str  # the import root of a file that may use it
    classes: frozenset[str]  # qualified names of the object whose methods wrap
    methods: tuple[str, ...]
    name: str  # as messages say it


_LAUNCHERS = (
    _Launcher(
        "accelerate",
        frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"}),
        ("prepare", "prepare_model", "prepare_optimizer"),
        "Accelerate",
    ),
    _Launcher(
        "lightning",
        frozenset(
            {"lightning.Fabric", "lightning.fabric.Fabric", "lightning.fabric.fabric.Fabric"}
        ),
        ("setup", "setup_module", "setup_optimizers"),
        "Lightning Fabric",
    ),
    _Launcher(
        "lightning_fabric",
        frozenset({"lightning_fabric.Fabric", "lightning_fabric.fabric.Fabric"}),
        ("setup", "setup_module", "setup_optimizers"),
        "Lightning Fabric",
    ),
)


# Hugging Face's Trainer, given the optimizer (`optimizers=(optimizer, scheduler)`), runs its own
# loop: it zeroes the gradients with `model.zero_grad()` (None since torch 2.0, which detaches
# them from a fused optimizer's flat buffer) and prepares model and optimizer through
# Accelerate, with FSDP or DeepSpeed when its arguments ask for them.
_HF_TRAINER_ROOTS = frozenset({"transformers", "trl"})
_HF_TRAINER_EFFECT = (
    "hands this optimizer to Hugging Face's Trainer, whose loop zeroes the gradients with "
    "`model.zero_grad()` (to None, which detaches them from a fused optimizer's flat buffer) and "
    "which shards or partitions the parameters when its arguments ask for FSDP or DeepSpeed"
)


def _group_members(elements: Sequence[ast.expr]) -> list[ast.expr] | None:
    """``elements`` with each parameter group written as a dict display replaced by what its
    ``"params"`` holds (the parts of a list or tuple display, else the value itself); None when
    a group's ``"params"`` cannot be read (:func:`group_params`)."""
    members: list[ast.expr] = []
    for element in elements:
        if not isinstance(element, ast.Dict):
            members.append(element)
            continue
        value = group_params(element)
        if value is None:
            return None
        members.extend(value.elts if isinstance(value, ast.List | ast.Tuple) else [value])
    return members


def _hf_trainer_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and name.split(".", 1)[0] in _HF_TRAINER_ROOTS
        and name.rpartition(".")[2].endswith("Trainer")
    )


def launcher_effect(name: str) -> str:
    return (
        f"lets {name} wrap this optimizer's parameters as its launch configuration (not the "
        "code) says: sharded by FSDP, partitioned by DeepSpeed, or left as they are"
    )


_DTENSOR_MAKERS = frozenset({"distribute_tensor", "from_local"})

# What a tensor has and an nn.Module does not: `x.cpu().numpy()` copied a tensor.
_TENSOR_ONLY = frozenset(
    {"numpy", "tolist", "item", "detach", "clone", "numel", "size", "shape", "dtype", "view"}
)

# -- calls that take the optimizer without stepping it -------------------------------------------

_NOT_STEPPING_ROOTS = ("builtins.", "torch.optim.lr_scheduler.", "copy.", "logging.")
_NOT_STEPPING = frozenset({"apex.amp.initialize", "torch.save"})

# What a function of another module may do with an optimizer it is given without stepping it:
# read or load its state and groups, test it.
_READ_ONLY = frozenset({"load_state_dict", "state_dict", "param_groups", "defaults", "state"})
_TESTS = frozenset({"isinstance", "type", "id"})


def _parameter_for(function: ast.FunctionDef | ast.AsyncFunctionDef, given: Argument) -> str | None:
    """The parameter of ``function`` that the argument ``given`` binds (None: `*args`,
    `**kwargs`, or none that can be told)."""
    if given.star:
        return None
    parameters = function.args
    positional = [a.arg for a in [*parameters.posonlyargs, *parameters.args]]
    if given.keyword is None:
        return positional[given.index] if given.index < len(positional) else None
    named = {a.arg for a in [*parameters.args, *parameters.kwonlyargs]}
    return given.keyword if given.keyword in named else None


def _only_reads_optimizer(function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> bool:
    """Every use of ``parameter`` in ``function`` reads, loads or tests the optimizer
    (`p.load_state_dict(...)`, `p.state_dict()`, `p.param_groups`, `p is None`,
    `isinstance(p, ...)`), and nothing assigns the name or captures it in a nested function."""
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(function):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(function):
        nested = node is not function and isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef))
        if nested and any(isinstance(n, ast.Name) and n.id == parameter for n in ast.walk(node)):
            return False
        if not (isinstance(node, ast.Name) and node.id == parameter):
            continue
        parent = parents.get(id(node))
        if not isinstance(node.ctx, ast.Load):
            return False
        if isinstance(parent, ast.Attribute) and parent.attr in _READ_ONLY:
            continue
        if isinstance(parent, ast.Compare) or (
            isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)
        ):
            continue
        if isinstance(parent, ast.If | ast.While) and parent.test is node:
            continue
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in _TESTS
        ):
            continue
        return False
    return True


# -- the automaton -------------------------------------------------------------------------------

# States: 0 built (nothing packed), 1 stepped (packed), 2 stepped then re-allocated, 3 broken
# (a step after a re-allocation). A transfer is, for each state, the bit set of the states it may
# end in; sequencing composes, branches join, loops take the reflexive transitive closure.
Transfer = tuple[int, int, int, int]
_BROKEN = 3
IDENTITY: Transfer = (1, 2, 4, 8)
_BUILT: Transfer = (1, 1, 1, 8)
_STEPPED: Transfer = (2, 2, 8, 8)
_REALLOCATED: Transfer = (1, 4, 4, 8)


def _then(first: Transfer, second: Transfer) -> Transfer:
    def apply(states: int) -> int:
        out = 0
        for state in range(4):
            if states & (1 << state):
                out |= second[state]
        return out

    return (apply(first[0]), apply(first[1]), apply(first[2]), apply(first[3]))


def _either(first: Transfer, second: Transfer) -> Transfer:
    return (first[0] | second[0], first[1] | second[1], first[2] | second[2], first[3] | second[3])


def _repeated(body: Transfer) -> Transfer:
    """Zero or more runs of ``body``."""
    result = IDENTITY
    while True:
        grown = _either(result, _then(result, body))
        if grown == result:
            return result
        result = grown


def _breaks(transfer: Transfer) -> bool:
    return bool(transfer[0] & (1 << _BROKEN))


# What a piece of code does to the automaton, with what does nothing left out (None: the
# identity; nothing in it can step, build, re-allocate or call a function of the module):
# ("sequence", parts), ("call", arguments, call), ("statement", children, a candidate's
# statement), ("branch", test, body, orelse), ("repeat", body), ("maybe", first, later
# operands of `and` / `or`), ("for", iterable, body, orelse), ("while", test, body, orelse),
# ("try", body statements, handlers, orelse, finalbody), ("match", subject, cases).
_Op = tuple[Any, ...] | None


def _sequence(parts: Sequence[_Op]) -> _Op:
    kept = tuple(part for part in parts if part is not None)
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else ("sequence", kept)


def _branch(test: _Op, body: _Op, orelse: _Op) -> _Op:
    return (
        None if test is None and body is None and orelse is None else ("branch", test, body, orelse)
    )


# -- findings ------------------------------------------------------------------------------------


# torch's tensor factories: without `device=` they make CPU tensors (no default device switch).
_CPU_FACTORIES = frozenset(
    f"torch.{name}"
    for name in (
        "zeros",
        "ones",
        "empty",
        "full",
        "rand",
        "randn",
        "randint",
        "tensor",
        "arange",
        "linspace",
        "eye",
        "zeros_like",
        "ones_like",
        "randn_like",
        "rand_like",
        "Tensor",  # the legacy constructors: `torch.Tensor([5.0, 2.0])`
        "FloatTensor",
    )
)
# What gives a parameter made from the tensor it is given, on the same device.
_WRAPPING_TENSORS = frozenset(
    {
        "torch.nn.Parameter",
        "torch.nn.parameter.Parameter",
        "torch.autograd.Variable",
        "torch.autograd.variable.Variable",
    }
)
# What an `add_param_group` between two steps does to an NPU fused optimizer.
_LATE_GROUP = (
    "which the NPU fused optimizers never pack once they have stepped (torch_npu's and Ascend "
    "apex's classes then fail at their next step, with an IndexError or a KeyError)"
)
# Attributes of a tensor through which it may end up on a device.
_MOVES = frozenset({"cuda", "npu", "to", "data", "set_", "copy_"})


@dataclass(frozen=True)
class Break:
    """One piece of code that breaks the contract for an optimizer."""

    node: ast.AST
    code: str  # as quoted in messages, e.g. "`model.cpu()`"
    effect: str  # "moves this optimizer's parameters to the CPU between two of its steps"
    where: str = ""  # ", in `save_checkpoint`" when not in the optimizer's own function
    late_group: bool = False  # an `add_param_group`, not a re-allocation

    @property
    def line(self) -> int:
        return line_of(self.node)


def describe(breaks: Sequence[Break]) -> str:
    """The breaks for a message, the same code doing the same thing listed once with all its
    lines: "`fully_shard(...)` (lines 74, 75) shards ..."."""
    lines: dict[tuple[str, str, str], list[int]] = {}
    for found in breaks:
        lines.setdefault((found.code, found.where, found.effect), []).append(found.line)
    parts: list[str] = []
    for (code, where, effect), numbers in lines.items():
        parts.append(f"{code} ({lines_named(numbers)}{where}) {effect}")
    return "; ".join(parts)


# -- the analysis ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """What is known inside one function while following the optimizer: the paths that spell
    its model (``model``, ``self.model``, a parameter given the model) and the parameters that
    hold the optimizer."""

    function: ast.AST  # a def, or the module
    models: frozenset[Path]
    optimizers: frozenset[str] = frozenset()


@dataclass
class _Candidate:
    """A re-allocation of something (its receiver ``target``, a module or, for a store, a
    module or a parameter), before knowing whose."""

    node: ast.AST
    target: ast.expr
    code: str
    effect: str
    part: Part = "module"


_Key = tuple[int, frozenset[Path], frozenset[str]]  # a function's id and its _Context's paths


@dataclass
class _Search:
    """One question: may ``candidate`` run between two steps of ``constructor``?

    A function's summary differs from one candidate to another only where its run may reach
    the candidate: ``visits`` holds the ids of those functions (the candidate's own and its
    callers', to a fixpoint). Every other summary is the same for all the candidates of one
    constructor, and ``shared`` (one dict per constructor) keeps them. Only exact ones go
    there: a summary computed while a recursive call stood in as the identity depends on where
    the recursion was entered (``open``: the summaries being computed; ``partial``: those that
    read an open one, directly or not), so it stays in this search's ``summaries``, where the
    search would have found it anyway."""

    constructor: ast.Call
    candidate: _Candidate
    visits: frozenset[int] = frozenset()
    shared: dict[_Key, Transfer] = field(default_factory=dict)
    summaries: dict[_Key, Transfer] = field(default_factory=dict)
    open: set[_Key] = field(default_factory=set)
    partial: set[_Key] = field(default_factory=set)
    inexact: bool = False  # the summary being computed read an open or partial one


class ParameterContract:
    """The contract checks of one file (see the module docstring)."""

    def __init__(
        self,
        view: FileView,
        flow: OptimizerFlow,
        shared: Mapping[str, str] | None = None,
        lightning: str | None = lightning_facts.default_doubt(),
        elsewhere: Callable[[ast.Call], ast.FunctionDef | ast.AsyncFunctionDef | None]
        | None = None,
    ) -> None:
        self.view = view
        self.index = view.index
        self.flow = flow
        # The function of another module of the run that a call reaches (None: not known), to
        # tell a call given the optimizer that cannot step it (see _quiet).
        self.elsewhere = elsewhere
        self._read_only: dict[tuple[int, str], bool] = {}
        # Functions of the module that another file starts as hogwild workers: where the model
        # they get is put in shared memory.
        self.shared = shared or {}
        # Why the run's Lightning Trainers may build a strategy that re-allocates parameters
        # (None: none of them can, and there is one).
        self.lightning = lightning
        self._names_cache: dict[int, frozenset[str]] = {}
        # The summaries that no candidate changes, per constructor (see _Search).
        self._shared: dict[int, dict[_Key, Transfer]] = {}
        self._visits: dict[int, frozenset[int]] = {}
        self._local_functions: dict[ast.Call, ast.AST | None] = {}
        self._class_methods: dict[ast.ClassDef, dict[str, ast.AST | None]] = {}
        self._containers: dict[ast.Call, bool] = {}  # _container_moved
        self._programs: dict[ast.AST, _Op] = {}
        self._carried: dict[ast.Call, tuple[frozenset[str], frozenset[ast.AST]]] = {}
        self._spelled: dict[ast.AST, frozenset[str]] = {}

    # -- re-allocations between steps ----------------------------------------------------------

    def reallocations(self, constructor: ast.Call, params: ast.expr | None) -> list[Break]:
        """The re-allocations of the parameters of ``constructor`` (``params``, its first
        argument), and the parameter groups added to it, that may run between two of its
        steps, in line order."""
        paths = self._models(params)
        candidates = self._every_candidate if paths else self._group_candidates
        if not candidates:
            return []
        home = self._function_of(constructor)
        found: list[Break] = []
        shared = self._shared.setdefault(id(constructor), {})
        for candidate in candidates:
            visits = self._functions_visiting(candidate.node)
            search = _Search(constructor, candidate, visits, shared)
            entries = self._entries_reaching(candidate.node)
            if candidate.part == "optimizer" and self._built_in_this_call(home, candidate):
                entries = [home]
            if any(_breaks(self._entry(search, entry, paths)) for entry in entries):
                function = self._function_of(candidate.node)
                where = ""
                if function is not home and isinstance(function, _FUNCTIONS):
                    where = f", in `{function.name}`"
                late = candidate.part == "optimizer"
                effect = f"{candidate.effect} between two of its steps"
                if late:
                    effect = f"{effect}, {_LATE_GROUP}"
                found.append(Break(candidate.node, candidate.code, effect, where, late))
        return found

    @cached_property
    def _entries(self) -> list[ast.AST]:
        """Where a run may start: the module's own code and every function."""
        return [
            self.index.tree,
            *self.index.nodes(ast.FunctionDef),
            *self.index.nodes(ast.AsyncFunctionDef),
        ]

    def _entries_reaching(self, node: ast.AST) -> list[ast.AST]:
        """The entries from which ``node`` may run: the module's code, the functions around it,
        and, to a fixpoint, every function that names one of those (a call, a method call, a
        function handed over as a value), a method's class counting as its name. Only these can
        see ``node`` between two steps; the others' summaries cannot contain it. A method run
        implicitly (a dunder method, `forward`) may run from anywhere: then every entry."""
        reaching: dict[int, ast.AST] = {
            id(a): a for a in self.index.ancestors(node) if isinstance(a, _FUNCTIONS)
        }
        names: set[str] = set()
        pending = list(reaching.values())
        while pending:
            function = pending.pop()
            assert isinstance(function, _FUNCTIONS)
            if function.name.startswith("__") or function.name == "forward":
                return self._entries
            names.add(function.name)
            owner = self.index.parent(function)
            if isinstance(owner, ast.ClassDef):
                names.add(owner.name)
            for other in self._entries[1:]:
                if id(other) not in reaching and self._names_in(other) & names:
                    reaching[id(other)] = other
                    pending.append(other)
        return [
            entry for entry in self._entries if entry is self.index.tree or id(entry) in reaching
        ]

    def _names_in(self, function: ast.AST) -> frozenset[str]:
        """The names and attribute names ``function``'s code mentions."""
        known = self._names_cache.get(id(function))
        if known is None:
            known = frozenset(
                node.id if isinstance(node, ast.Name) else node.attr
                for node in ast.walk(function)
                if isinstance(node, ast.Name | ast.Attribute)
            )
            self._names_cache[id(function)] = known
        return known

    def _entry(self, search: _Search, entry: ast.AST, models: frozenset[Path]) -> Transfer:
        return self._summary(search, _Context(entry, models))

    def _summary(self, search: _Search, context: _Context) -> Transfer:
        key = (id(context.function), context.models, context.optimizers)
        known = search.summaries.get(key)
        if known is not None:
            if key in search.open or key in search.partial:
                search.inexact = True
            return known
        candidate_free = key[0] not in search.visits
        if candidate_free:
            known = search.shared.get(key)
            if known is not None:
                return known
        search.summaries[key] = IDENTITY  # a recursive call adds nothing new
        search.open.add(key)
        caller_inexact, search.inexact = search.inexact, False
        transfer = self._run(search, context, self._program(context.function))
        search.open.discard(key)
        search.summaries[key] = transfer
        if search.inexact:
            search.partial.add(key)
        elif candidate_free:
            search.shared[key] = transfer
        search.inexact = caller_inexact or search.inexact
        return transfer

    def _functions_visiting(self, node: ast.AST) -> frozenset[int]:
        """The ids of the functions (and the module) whose summary may see ``node``: the one
        whose own code holds it, and every one that calls one of those, to a fixpoint."""
        home = self._function_of(node)
        known = self._visits.get(id(home))
        if known is None:
            reached = {id(home)}
            pending = [home]
            while pending:
                for caller in self._callers.get(id(pending.pop()), ()):
                    if id(caller) not in reached:
                        reached.add(id(caller))
                        pending.append(caller)
            known = self._visits[id(home)] = frozenset(reached)
        return known

    @cached_property
    def _callers(self) -> dict[int, list[ast.AST]]:
        """Function id -> the functions (or the module) whose code has a call that
        :meth:`_local_function` resolves to it (the summaries that follow such a call)."""
        callers: dict[int, list[ast.AST]] = {}
        for call in self.index.nodes(ast.Call):
            callee = self._local_function(call)
            if callee is not None:
                callers.setdefault(id(callee), []).append(self._function_of(call))
        return callers

    # programs: what of a function's code can move the automaton, in the order it is evaluated

    def _program(self, function: ast.AST) -> _Op:
        """``function``'s body as an :data:`_Op` (built once per function: the searches of
        every constructor and candidate run it)."""
        if function in self._programs:
            return self._programs[function]
        body = function.body  # type: ignore[attr-defined]
        program = self._programs[function] = self._compile_block(body)
        return program

    @cached_property
    def _candidate_statements(self) -> frozenset[ast.AST]:
        return frozenset(c.node for c in self._candidates if isinstance(c.node, ast.stmt))

    def _compile_block(self, body: Sequence[ast.stmt]) -> _Op:
        return _sequence([self._compile_statement(statement) for statement in body])

    def _compile_statement(self, node: ast.stmt) -> _Op:
        block, expression = self._compile_block, self._compile_expression
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            return None  # runs when called
        if isinstance(node, ast.If):
            return _branch(expression(node.test), block(node.body), block(node.orelse))
        if isinstance(node, (ast.For, ast.AsyncFor)):
            parts = (expression(node.iter), block(node.body), block(node.orelse))
            return None if parts == (None, None, None) else ("for", *parts)
        if isinstance(node, ast.While):
            parts = (expression(node.test), block(node.body), block(node.orelse))
            return None if parts == (None, None, None) else ("while", *parts)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            items = [expression(item.context_expr) for item in node.items]
            return _sequence([*items, block(node.body)])
        if isinstance(node, (ast.Try, ast.TryStar)):
            # A statement or a handler that does nothing adds no new state to the union.
            body = tuple(filter(None, map(self._compile_statement, node.body)))
            handlers = tuple(filter(None, (block(handler.body) for handler in node.handlers)))
            rest = (block(node.orelse), block(node.finalbody))
            if not body and not handlers and rest == (None, None):
                return None
            return ("try", body, handlers, *rest)
        if isinstance(node, ast.Match):
            cases = tuple(filter(None, (block(case.body) for case in node.cases)))
            subject = expression(node.subject)
            return None if not cases and subject is None else ("match", subject, cases)
        children = _sequence(
            [
                expression(child)
                for child in ast.iter_child_nodes(node)
                if isinstance(child, ast.expr)
            ]
        )
        if node in self._candidate_statements:
            return ("statement", children, node)
        return children

    def _compile_expression(self, node: ast.expr) -> _Op:
        expression = self._compile_expression
        if isinstance(node, ast.Lambda):
            return None
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            children = self._compile_children(node)
            return None if children is None else ("repeat", children)
        if isinstance(node, ast.IfExp):
            return _branch(expression(node.test), expression(node.body), expression(node.orelse))
        if isinstance(node, ast.BoolOp):
            first = expression(node.values[0])
            # `a or b`: b may not run; a part that does nothing adds nothing.
            rest = tuple(filter(None, map(expression, node.values[1:])))
            return None if first is None and not rest else ("maybe", first, rest)
        children = self._compile_children(node)
        if isinstance(node, ast.Call):
            return ("call", children, node)
        return children

    def _compile_children(self, node: ast.AST) -> _Op:
        parts: list[_Op] = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                parts.append(self._compile_expression(child))
            elif isinstance(child, ast.keyword):
                parts.append(self._compile_expression(child.value))
            elif isinstance(child, ast.comprehension):
                parts.append(self._compile_children(child))
        return _sequence(parts)

    # running a program: sequences compose, branches join, loops repeat their body

    def _run(self, search: _Search, context: _Context, op: _Op) -> Transfer:
        """The transfer of ``op`` in ``search``. The parts run in the order the analysis
        has always evaluated them (a branch's bodies before its test, a loop's body before
        its iterable), so that a recursive call meets the same summaries in progress."""
        if op is None:
            return IDENTITY
        run = self._run
        kind = op[0]
        if kind == "sequence":
            transfer = IDENTITY
            for part in op[1]:
                transfer = _then(transfer, run(search, context, part))
            return transfer
        if kind == "call":
            transfer = run(search, context, op[1])
            return _then(transfer, self._call(search, context, op[2]))
        if kind == "branch":
            branches = _either(run(search, context, op[2]), run(search, context, op[3]))
            return _then(run(search, context, op[1]), branches)
        if kind == "statement":
            transfer = run(search, context, op[1])
            if op[2] is search.candidate.node and self._reallocates(search, context):
                transfer = _then(transfer, _REALLOCATED)
            return transfer
        if kind == "repeat":
            return _repeated(run(search, context, op[1]))
        if kind == "maybe":
            transfer = run(search, context, op[1])
            for value in op[2]:
                transfer = _then(transfer, _either(IDENTITY, run(search, context, value)))
            return transfer
        if kind == "for":
            loop = _repeated(run(search, context, op[2]))
            after = _then(loop, run(search, context, op[3]))
            return _then(run(search, context, op[1]), after)
        if kind == "while":
            test = run(search, context, op[1])
            loop = _repeated(_then(test, run(search, context, op[2])))
            return _then(loop, _then(test, run(search, context, op[3])))
        if kind == "try":
            prefix = IDENTITY
            partial = IDENTITY  # an exception may leave the body after any statement
            for statement in op[1]:
                prefix = _then(prefix, run(search, context, statement))
                partial = _either(partial, prefix)
            handlers = IDENTITY
            for handler in op[2]:
                handlers = _either(handlers, run(search, context, handler))
            done = _then(prefix, run(search, context, op[3]))
            caught = _then(partial, handlers)
            return _then(_either(done, caught), run(search, context, op[4]))
        assert kind == "match"
        cases = IDENTITY
        for case in op[2]:
            cases = _either(cases, run(search, context, case))
        return _then(run(search, context, op[1]), cases)

    def _call(self, search: _Search, context: _Context, call: ast.Call) -> Transfer:
        """What the call itself does once its callee and arguments are evaluated."""
        if call is search.constructor:
            return _BUILT
        if call is search.candidate.node and self._reallocates(search, context):
            return _REALLOCATED
        function = self._local_function(call)
        if function is not None:
            return self._summary(search, self._callee_context(search, context, call, function))
        if self._steps(search, context, call):
            return _STEPPED
        return IDENTITY

    def _built_in_this_call(self, home: ast.AST, candidate: _Candidate) -> bool:
        """``candidate`` (an ``add_param_group``) is in the function ``home`` that builds the
        optimizer, on a local name bound there only to calls of ``home``: the object it adds
        to was built in the same run of ``home``, so the steps of an earlier run (YOLOv7's
        ``train()``, called again by its hyper-parameter evolution, builds a new optimizer
        each time) are another object's and the search starts at ``home``'s entry."""
        target = candidate.target
        if not isinstance(home, _FUNCTIONS) or not isinstance(target, ast.Name):
            return False
        if self._function_of(candidate.node) is not home:
            return False
        origins = self.flow.origins(target)
        return bool(origins) and all(
            isinstance(origin, ast.Call) and self._function_of(origin) is home for origin in origins
        )

    def _reallocates(self, search: _Search, context: _Context) -> bool:
        candidate = search.candidate
        if candidate.part == "optimizer":  # a group added to it, or to a wrapper of it
            return self._holds(search, context, candidate.target) is not None
        return self._on_model(context, candidate.target, candidate.part)

    # -- the optimizer's steps -----------------------------------------------------------------

    def _steps(self, search: _Search, context: _Context, call: ast.Call) -> bool:
        """``optimizer.step()``, a method of something given the optimizer
        (``scheduler.step()``, ``trainer.fit()``), or a call given it that may step it
        (``amp.scale_loss(loss, optimizer)``, ``train_one_epoch(model, optimizer)`` of another
        module)."""
        func = call.func
        if isinstance(func, ast.Attribute):
            receiver = self._holds(search, context, func.value)
            if receiver == "optimizer" and func.attr == "step":
                return True
            if receiver == "holder":
                return True
        given = [arg for arg in arguments(call) if self._holds(search, context, arg.value)]
        if not given:
            return False
        name = self.view.qualified_name(func)
        if isinstance(name, str) and (
            name in _NOT_STEPPING or name.startswith(_NOT_STEPPING_ROOTS)
        ):
            return False
        return not self._quiet(call, given)

    def _quiet(self, call: ast.Call, given: list[Argument]) -> bool:
        """``call`` reaches a function of another module of the run that only reads, loads or
        tests what it is given in ``given`` (YOLOv5's `smart_resume(ckpt, optimizer, ...)`, which
        loads its state before the first step): no step can happen there."""
        function = self.elsewhere(call) if self.elsewhere is not None else None
        if function is None:
            return False
        return all(
            (parameter := _parameter_for(function, arg)) is not None
            and self._reads_only(function, parameter)
            for arg in given
        )

    def _reads_only(self, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> bool:
        """:func:`_only_reads_optimizer`, once per function and parameter (the automaton asks
        at every search that meets the call)."""
        key = (id(function), parameter)
        known = self._read_only.get(key)
        if known is None:
            known = self._read_only[key] = _only_reads_optimizer(function, parameter)
        return known

    def _holds(self, search: _Search, context: _Context, node: ast.expr) -> str | None:
        """ "optimizer" when ``node`` may be the optimizer, "holder" when it may be something
        built with it (a scheduler, a wrapper, a trainer), else None."""
        if isinstance(node, ast.Name) and node.id in context.optimizers:
            return "optimizer"
        if not self._may_carry(search.constructor, node):
            return None
        found: str | None = None
        for origin in self.flow.origins(node):
            if origin is search.constructor:
                return "optimizer"
            if isinstance(origin, ast.Call) and self._given(search, origin):
                found = "holder"
        return found

    def _given(self, search: _Search, call: ast.Call) -> bool:
        """``call`` is given the optimizer: ``StepLR(optimizer)``, ``Trainer(model, optimizer)``."""
        for arg in arguments(call):
            if any(origin is search.constructor for origin in self.flow.origins(arg.value)):
                return True
        return False

    def _may_carry(self, constructor: ast.Call, node: ast.expr) -> bool:
        """A cheap test, before asking for the origins of ``node`` (which needs the reaching
        definitions of its scope): ``node`` holds ``constructor`` or spells a name that may
        carry its value (:meth:`_carriers`). An origin of ``node`` is a part of it, or a value
        stored to a name or attribute it spells, or returned by a function it calls by name;
        whatever the optimizer or something built with it flows through is such a name."""
        carriers, around = self._carriers(constructor)
        return node in around or not self._mentions(node).isdisjoint(carriers)

    def _carriers(self, constructor: ast.Call) -> tuple[frozenset[str], frozenset[ast.AST]]:
        """The names and attribute names that may hold ``constructor``'s value, or a value
        built from it, anywhere in the module, and the nodes around it: the targets of every
        assignment whose value holds it or spells a carrier, and the name of every function
        that returns such a value, to a fixpoint (scopes ignored: a superset)."""
        known = self._carried.get(constructor)
        if known is not None:
            return known
        around = frozenset([constructor, *self.index.ancestors(constructor)])
        stores, readers, targets = self._stores
        carriers: set[str] = set()
        pending = [position for node in around for position in stores.get(node, ())]
        done: set[int] = set()
        while pending:
            position = pending.pop()
            if position in done:
                continue
            done.add(position)
            for name in targets[position]:
                if name not in carriers:
                    carriers.add(name)
                    pending.extend(readers.get(name, ()))
        known = self._carried[constructor] = (frozenset(carriers), around)
        return known

    @cached_property
    def _stores(
        self,
    ) -> tuple[dict[ast.AST, list[int]], dict[str, list[int]], list[frozenset[str]]]:
        """The module's stores (see :meth:`_carriers`), numbered: their positions by the value
        stored and by each name the value spells, and the names each one stores to."""
        by_value: dict[ast.AST, list[int]] = {}
        readers: dict[str, list[int]] = {}
        targets: list[frozenset[str]] = []
        for value, names in self._store_pairs():
            position = len(targets)
            targets.append(names)
            by_value.setdefault(value, []).append(position)
            for name in self._mentions(value):
                readers.setdefault(name, []).append(position)
        return by_value, readers, targets

    def _store_pairs(self) -> Iterator[tuple[ast.expr, frozenset[str]]]:
        """Each value stored (assigned, or returned) with the names it is stored to: its
        targets' (a name, an attribute's last name), or the function's whose calls give it."""
        index = self.index
        stores: list[tuple[ast.expr | None, list[ast.expr]]] = []
        stores += [(assign.value, assign.targets) for assign in index.nodes(ast.Assign)]
        stores += [(store.value, [store.target]) for store in index.nodes(ast.AnnAssign)]
        stores += [(store.value, [store.target]) for store in index.nodes(ast.AugAssign)]
        stores += [(walrus.value, [walrus.target]) for walrus in index.nodes(ast.NamedExpr)]
        for value, spelled in stores:
            if value is not None:
                yield value, frozenset(name for node in spelled for name in _stored_names(node))
        for returned in index.nodes(ast.Return):
            function = self._function_of(returned)
            if returned.value is not None and isinstance(function, _FUNCTIONS):
                yield returned.value, frozenset([function.name])

    def _mentions(self, node: ast.AST) -> frozenset[str]:
        """The names and attribute names spelled in ``node``."""
        known = self._spelled.get(node)
        if known is None:
            known = self._spelled[node] = frozenset(
                part.id if isinstance(part, ast.Name) else part.attr
                for part in ast.walk(node)
                if isinstance(part, ast.Name | ast.Attribute)
            )
        return known

    # -- functions of the module ---------------------------------------------------------------

    def _local_function(self, call: ast.Call) -> ast.AST | None:
        """The function of this module that ``call`` runs: a function bound once to the
        callee's name, or ``self.<method>(...)`` of the class around the caller."""
        if call in self._local_functions:
            return self._local_functions[call]
        function = self._local_functions[call] = self._find_local_function(call)
        return function

    def _find_local_function(self, call: ast.Call) -> ast.AST | None:
        func = call.func
        if isinstance(func, ast.Name):
            bindings = self.index.bindings_of(func)
            if len(bindings) == 1 and bindings[0].kind is BindingKind.FUNCTION:
                return bindings[0].node
            return None
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            owner = next(
                (a for a in self.index.ancestors(call) if isinstance(a, ast.ClassDef)), None
            )
            if owner is None:
                return None
            return self._methods(owner).get(func.attr)
        return None

    def _methods(self, owner: ast.ClassDef) -> dict[str, ast.AST | None]:
        """Name -> the method of ``owner``'s body so named, None for a name defined twice."""
        known = self._class_methods.get(owner)
        if known is None:
            known = self._class_methods[owner] = {}
            for statement in owner.body:
                if isinstance(statement, _FUNCTIONS):
                    twice = statement.name in known
                    known[statement.name] = None if twice else statement
        return known

    def _callee_context(
        self, search: _Search, context: _Context, call: ast.Call, function: ast.AST
    ) -> _Context:
        """The model's and the optimizer's spellings inside ``function`` called by ``call``:
        the parameters given them, and the caller's spellings it can see (``self.model`` in a
        method, a global ``model`` it does not bind)."""
        assert isinstance(function, _FUNCTIONS)
        parameters = _parameters(function)
        models: set[Path] = {
            path for path in context.models if path[0] == "self" or path[0] not in parameters
        }
        optimizers: set[str] = set()
        for parameter, value in _bound_arguments(function, call):
            if self._on_model(context, value):
                models.add((parameter,))
            if self._holds(search, context, value) is not None:
                optimizers.add(parameter)
        return _Context(function, frozenset(models), frozenset(optimizers))

    # -- whose parameters ----------------------------------------------------------------------

    def _on_model(self, context: _Context, node: ast.expr, part: Part = "any") -> bool:
        """``node`` is the model or a part of it, through its spelling, an alias of it
        (``net = model.module``) or a loop over it (``for m in model.modules()``). ``part``:
        a module (what ``.cpu()`` and ``.half()`` re-allocate; a tensor's ``.cpu()`` makes a
        copy), a module or a parameter (what a store replaces), or anything of the model."""
        path = _path(node)
        if path is None:
            return False
        if _within(path, context.models):
            return part != "module" or not _tensor_like(path)
        root = _root_name(node)
        if root is None:
            return False
        rest = path[1:]
        for binding in self.index.bindings_of(root):
            iterable = self._loop_over(binding.node)
            looped = _iterated_path(iterable) if iterable is not None else None
            if iterable is None or looped is None or not _within(looped, context.models):
                continue
            kind = _iteration_kind(iterable)
            if part == "any" or (part == "tensor" and kind is not None):
                return True
            if part == "module" and kind == "module" and not _tensor_like(rest):
                return True
        for origin in self.flow.origins(root):
            aliased = _path(origin) if origin is not root else None
            if aliased is not None and _within(aliased, context.models):
                return part != "module" or not _tensor_like((*aliased, *rest))
        return False

    def _loop_over(self, target: ast.AST | None) -> ast.expr | None:
        """The iterable of the ``for`` loop that binds ``target``, unwrapped from
        ``enumerate(...)`` and the like."""
        node = target
        parent = self.index.parent(node) if node is not None else None
        while isinstance(parent, (ast.Tuple, ast.List)):
            node, parent = parent, self.index.parent(parent)
        if not isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
            return None
        if parent.target is not node:
            return None
        iterable = parent.iter
        while (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Name)
            and iterable.func.id in _ITERATION_WRAPPERS
            and iterable.args
        ):
            iterable = iterable.args[0]
        return iterable

    # -- candidates ----------------------------------------------------------------------------

    @cached_property
    def _candidates(self) -> list[_Candidate]:
        """Every re-allocation of something in the file, whoever it belongs to, in line order."""
        found = [*self._method_candidates(), *self._store_candidates(), *self._call_candidates()]
        found.sort(key=lambda c: (line_of(c.node), c.node.col_offset))  # type: ignore[attr-defined]
        return found

    @cached_property
    def _every_candidate(self) -> list[_Candidate]:
        """The re-allocations and the groups added, in line order."""
        found = [*self._candidates, *self._group_candidates]
        found.sort(key=lambda c: (line_of(c.node), c.node.col_offset))  # type: ignore[attr-defined]
        return found

    @cached_property
    def _group_candidates(self) -> list[_Candidate]:
        """Every ``x.add_param_group(...)`` of the file, whatever ``x`` holds."""
        found: list[_Candidate] = []
        for attribute in self.index.attributes("add_param_group"):
            call = self.index.parent(attribute)
            if isinstance(call, ast.Call) and call.func is attribute:
                code = f"`{self.view.written(call.func)}(...)`"
                effect = "adds a parameter group"
                found.append(_Candidate(call, attribute.value, code, effect, "optimizer"))
        return found

    def _method_candidates(self) -> Iterator[_Candidate]:
        for method, effect in _AWAY.items():
            for attribute in self.index.attributes(method):
                call = self.index.parent(attribute)
                if isinstance(call, ast.Call) and call.func is attribute:
                    if method != "_apply" and (call.args or call.keywords):
                        continue  # `tensor.half(memory_format=...)`-like calls are not modules'
                    if self._used_as_tensor(call):
                        continue  # `model.class_weights.cpu().numpy()`: a copy of a tensor
                    yield _Candidate(call, attribute.value, f"`{self.view.written(call)}`", effect)
        for attribute in self.index.attributes("to"):
            call = self.index.parent(attribute)
            if isinstance(call, ast.Call) and call.func is attribute:
                moved = self._moved_away(call)
                if moved is not None:
                    yield _Candidate(call, attribute.value, f"`{self.view.written(call)}`", moved)

    def _used_as_tensor(self, call: ast.Call) -> bool:
        """The result of ``call`` is used as only a tensor can be (`.numpy()`, `.item()`,
        arithmetic): its receiver is a tensor, which `.cpu()`/`.half()` copy, not a module,
        which they change in place. YOLOv5's `model.class_weights.cpu().numpy()`."""
        parent = self.index.parent(call)
        if isinstance(parent, ast.Attribute) and parent.value is call:
            return parent.attr in _TENSOR_ONLY
        return isinstance(parent, ast.BinOp)

    def _moved_away(self, call: ast.Call) -> str | None:
        """What ``x.to(...)`` does when it certainly leaves the device or the dtype."""
        values = [*call.args, *(k.value for k in call.keywords if k.arg in ("device", "dtype"))]
        for value in values:
            if literal_value(value) == "cpu" or self._is_cpu_device(value):
                return "moves this optimizer's parameters to the CPU"
            name = self.view.qualified_name(value)
            if isinstance(name, str) and name in _CAST_DTYPES:
                return f"casts this optimizer's parameters to {_CAST_DTYPES[name]}"
        return None

    def _is_cpu_device(self, node: ast.expr) -> bool:
        """``torch.device("cpu")``."""
        return (
            isinstance(node, ast.Call)
            and bool(node.args)
            and literal_value(node.args[0]) == "cpu"
            and self.view.qualified_name(node.func) == "torch.device"
        )

    def _store_candidates(self) -> Iterator[_Candidate]:
        """``p.data = t``, ``model.fc.weight = nn.Parameter(...)`` / ``= None``, ``del x.y``."""
        for attribute in self.index.attributes("data"):
            if isinstance(attribute.ctx, ast.Store):
                statement = self.index.statement_of(attribute)
                if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                    code = f"`{self.view.written(attribute)} = ...`"
                    effect = "points a parameter at a new tensor"
                    yield _Candidate(statement, attribute.value, code, effect, "tensor")
        for statement in self.index.nodes(ast.Assign):
            replaces = self._replaces_parameter(statement.value)
            if replaces is None:
                continue
            for target in statement.targets:
                if isinstance(target, ast.Attribute) and target.attr != "data":
                    code = f"`{self.view.written(target)} = {replaces}`"
                    effect = "replaces a parameter of the model"
                    yield _Candidate(statement, target.value, code, effect)
        for statement in self.index.nodes(ast.Delete):
            for target in statement.targets:
                if isinstance(target, ast.Attribute):
                    code = f"`del {self.view.written(target)}`"
                    effect = "deletes a parameter or submodule of the model"
                    yield _Candidate(statement, target.value, code, effect)

    def _replaces_parameter(self, value: ast.expr) -> str | None:
        if isinstance(value, ast.Constant) and value.value is None:
            return "None"
        if isinstance(value, ast.Call):
            name = self.view.qualified_name(value.func)
            if isinstance(name, str) and name in _PARAMETER_CLASSES:
                return f"{self.view.written(value.func)}(...)"
        return None

    def _call_candidates(self) -> Iterator[_Candidate]:
        """``setattr(model, ...)``, ``model.register_parameter(...)``."""
        for name in self.index.names("setattr"):
            call = self.index.parent(name)
            if (
                isinstance(call, ast.Call)
                and call.func is name
                and len(call.args) >= 2
                and self.view.qualified_name(name) == "builtins.setattr"
            ):
                code = f"`{self.view.written(call)}`"
                effect = "replaces an attribute of the model (a parameter or a submodule)"
                yield _Candidate(call, call.args[0], code, effect)
        for attribute in self.index.attributes("register_parameter"):
            call = self.index.parent(attribute)
            if isinstance(call, ast.Call) and call.func is attribute:
                code = f"`{self.view.written(call)}`"
                effect = "registers a parameter on the model"
                yield _Candidate(call, attribute.value, code, effect)

    # -- parameters that never reach a device --------------------------------------------------

    def stays_on_cpu(self, constructor: ast.Call, params: ast.expr | None) -> Break | None:
        """The model of ``constructor`` when its parameters certainly stay on the CPU: it is
        built in this file (a class of torch.nn or of the file, or a call with no device in a
        file that places nothing on a device), no placement (``.cuda()``, ``.npu()``,
        ``.to(<not only a dtype>)``, ``device=``) touches it, it is handed to no function that
        could move it nor returned, and nothing moves every new tensor
        (``torch.set_default_device``, ``with torch.device(...)``, ``transfer_to_npu``)."""
        paths = self._models(params)
        if self._device_switches:
            return None
        if not paths:
            return self._raw_cpu_parameter(params)
        built: list[ast.Call] = []
        wrapped: set[Path] = set()  # `DDP(model)`: the model it wraps is placed or not
        for model in self._model_reads(params):
            origins = self.flow.origins(model)
            if not origins or not all(isinstance(origin, ast.Call) for origin in origins):
                return None
            for origin in origins:
                assert isinstance(origin, ast.Call)
                if not isinstance(_strip_method_calls(origin), ast.Call):
                    return None  # `model.half()` of a model built elsewhere: not built here
                if self._placed(origin) or not self._builds_on_cpu(origin):
                    return None
                for value in _arguments_of(origin):
                    path = _path(value)
                    if path is not None:
                        wrapped.add(path)
                    if any(
                        isinstance(inner, ast.Call) and self._placed(inner)
                        for inner in self.flow.origins(value)
                    ):
                        return None
                built.append(origin)
        if not built:
            return None
        context = _Context(self.index.tree, paths | frozenset(wrapped))
        reads = [root for root in map(_root_name, self._model_reads(params)) if root is not None]
        for call in self._placements:
            assert isinstance(call.func, ast.Attribute)
            if self._same_model(reads, call.func.value) and self._on_model(
                context, call.func.value
            ):
                return None
        if self._handed_away(context, reads):
            return None
        origin = built[0]
        code = f"`{self.view.written(origin)}`"
        return Break(origin, code, "builds the model, which nothing in this file moves to a device")

    def _raw_cpu_parameter(self, params: ast.expr | None) -> Break | None:
        """The first parameter of ``params`` when it is a list or tuple of parameters made here
        from a torch factory without a device (`p = nn.Parameter(torch.zeros(0))`, the
        scheduler tests of detectron2 and timm), each read only by name, alone or in parameter
        groups (`[{"params": [x]}, {"params": [y], "lr": 1e-3}]`, pytext's SWA tests): on the
        CPU for good."""
        if isinstance(params, ast.List | ast.Tuple):
            elements = list(params.elts)
        elif isinstance(params, ast.Name) and self._only_read(params.id, params):
            elements = []
            for origin in self.flow.origins(params):  # a list display is followed to its parts
                if isinstance(origin, ast.List | ast.Tuple):
                    elements += origin.elts
                else:
                    elements.append(origin)
        else:
            return None
        members = _group_members(elements)
        if members is None:
            return None
        made: list[ast.Call] = []
        for element in members:
            if isinstance(element, ast.Name):
                origins = self.flow.origins(element)
                if not self._only_read(element.id, element):
                    return None
            else:
                origins = [element]
            if not origins:
                return None
            for origin in origins:
                if not isinstance(origin, ast.Call) or not self._cpu_parameter(origin):
                    return None
                made.append(origin)
        if not made:
            return None
        code = f"`{self.view.written(made[0])}`"
        return Break(
            made[0], code, "makes the parameter, which nothing in this file moves to a device"
        )

    def _cpu_parameter(self, call: ast.Call) -> bool:
        """`nn.Parameter(torch.zeros(0))` or `torch.randn(3, requires_grad=True)`: a tensor
        made by a torch factory without `device=`, on the CPU (also through the old
        `Variable(...)` wrapper, which gives the tensor itself)."""
        name = self.view.qualified_name(call.func)
        if name in _WRAPPING_TENSORS:
            if len(call.args) != 1 or not isinstance(call.args[0], ast.Call):
                return False
            call = call.args[0]
            name = self.view.qualified_name(call.func)
        return (
            isinstance(name, str)
            and name in _CPU_FACTORIES
            and not any(k.arg in ("device", None) for k in call.keywords)
        )

    def _only_read(self, identifier: str, near: ast.expr) -> bool:
        """Every use of ``identifier`` in the function around ``near`` is a plain read that
        cannot move it: no `p.cuda()` / `p.to(...)` / `p.data = ...`, not handed to a call
        other than torch's own (a gradient or a loss may read it)."""
        scope = self.flow.scope_of(near)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Name) or node.id != identifier:
                continue
            parent = self.index.parent(node)
            if isinstance(parent, ast.Attribute) and parent.attr in _MOVES:
                return False
            given = (
                [*parent.args, *(k.value for k in parent.keywords)]
                if isinstance(parent, ast.Call)
                else []
            )
            if any(value is node for value in given):
                assert isinstance(parent, ast.Call)
                name = self.view.qualified_name(parent.func)
                if not (isinstance(name, str) and name.split(".", 1)[0] in ("torch", "builtins")):
                    return False
        return True

    def _model_reads(self, params: ast.expr | None) -> list[ast.expr]:
        """The ``x`` of the ``x.parameters()`` calls ``params`` comes from."""
        if params is None:
            return []
        return [
            _strip_method_calls(node.func.value)
            for expression in [params, *self.flow.origins(params)]
            for node in ast.walk(expression)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PARAMETER_ITERATORS
        ]

    def _placed(self, origin: ast.Call) -> bool:
        """``Net().cuda()``, ``Net(device=...)``, ``Net().to(device)``: placed where it is built."""
        node: ast.expr = origin
        while isinstance(node, ast.Call):
            if any(k.arg in ("device", "device_map") for k in node.keywords):
                return True
            if isinstance(node.func, ast.Attribute):
                if any(call is node for call in self._placements):
                    return True
                node = node.func.value
            else:
                break
        return False

    def _builds_on_cpu(self, origin: ast.Call) -> bool:
        """The call a model comes from builds it on the CPU: a class of torch.nn, a class of
        this file that places nothing itself, or anything when the file places nothing at all."""
        if not self._placements:
            return True
        constructor = _strip_method_calls(origin)
        if not isinstance(constructor, ast.Call):
            return False
        name = self.view.qualified_name(constructor.func)
        if isinstance(name, str) and name.startswith("torch.nn."):
            return True
        if isinstance(constructor.func, ast.Name):
            for binding in self.index.bindings_of(constructor.func):
                if binding.kind is BindingKind.CLASS and binding.node is not None:
                    return not any(
                        any(call is node for call in self._placements)
                        for node in ast.walk(binding.node)
                    )
        return False

    def _handed_away(self, context: _Context, reads: list[ast.Name]) -> bool:
        """The model is passed to a function that may move it (anything but builtins, torch's
        functions and the optimizer's own constructor), or returned or yielded to a caller that
        may (pytorch/examples' ``load_train_objs()`` returns the model and its optimizer to a
        trainer that moves the model)."""
        returns: list[ast.Return | ast.Yield | ast.YieldFrom] = [
            *self.index.nodes(ast.Return),
            *self.index.nodes(ast.Yield),
            *self.index.nodes(ast.YieldFrom),
        ]
        for node in returns:
            if node.value is not None and any(
                self._same_model(reads, value) and self._names_model(context, value)
                for value in _returned_values(node.value)
            ):
                return True
        for call in self.index.nodes(ast.Call):
            values = [*call.args, *(k.value for k in call.keywords)]
            if not any(
                self._same_model(reads, value) and self._names_model(context, value)
                for value in values
            ):
                continue
            name = self.view.qualified_name(call.func)
            if _adds_a_module(call):
                return True  # a child of another module from now on, moved when that one is
            if name in _CONTAINERS:
                if self._container_moved(call):
                    return True
                continue
            if isinstance(name, str) and name.startswith(("builtins.", "torch.", "copy.")):
                continue
            return True
        return False

    def _container_moved(self, call: ast.Call) -> bool:
        """A torch container given the model (``model = nn.Sequential(backbone, head)``) that
        is placed on a device, handed on or not kept in a plain name: the model moves with it
        (vicreg's ``model.cuda(gpu)``) or may."""
        known = self._containers.get(call)
        if known is None:
            self._containers[call] = False  # `model = nn.Sequential(model, head)`: followed
            known = self._containers[call] = self._container_placed(call)
        return known

    def _container_placed(self, call: ast.Call) -> bool:
        holder = self.index.assigned_name(call)
        if holder is None:
            return True
        holding = [
            read
            for binding in self.index.bindings_of(holder)
            for read in self.index.references(binding)
            if isinstance(read, ast.Name)
        ]
        if not holding:
            return False
        context = _Context(self.index.tree, frozenset({(holder.id,)}))
        if any(
            self._same_model(holding, placed.func.value)
            and self._on_model(context, placed.func.value)
            for placed in self._placements
            if isinstance(placed.func, ast.Attribute)
        ):
            return True
        return self._handed_away(context, holding)

    def _same_model(self, reads: list[ast.Name], node: ast.expr) -> bool:
        """``node`` starts from the same variable as one of ``reads`` (the model as the
        optimizer's constructor reads it): a binding in common, or ``self`` in the same class.
        A ``model`` of another function is another model."""
        root = _root_name(node)
        if root is None:
            return False
        bindings = {id(binding) for binding in self.index.bindings_of(root)}
        for read in reads:
            if read.id != root.id:
                continue
            if read.id == "self":
                if self._class_of(read) is self._class_of(root):
                    return True
            elif bindings & {id(binding) for binding in self.index.bindings_of(read)}:
                return True
        return False

    def _class_of(self, node: ast.AST) -> ast.AST | None:
        return next((a for a in self.index.ancestors(node) if isinstance(a, ast.ClassDef)), None)

    def _names_model(self, context: _Context, value: ast.expr) -> bool:
        """``value`` is the model or a submodule, as spelled or through an alias (not what a
        loop over one of its attributes gives)."""
        if not isinstance(value, (ast.Name, ast.Attribute)):
            return False
        path = _path(value)
        if path is not None and _within(path, context.models):
            return True
        root = _root_name(value)
        if root is None:
            return False
        for origin in self.flow.origins(root):
            aliased = _path(origin) if origin is not root else None
            if aliased is not None and _within(aliased, context.models):
                return True
        return False

    @cached_property
    def _placements(self) -> list[ast.Call]:
        """``x.cuda()``, ``x.npu()``, ``x.xpu()``, ``x.to_empty(...)``, and ``x.to(...)`` with
        anything but a dtype."""
        found: list[ast.Call] = []
        for method in ("cuda", "npu", "xpu", "mps", "to_empty", "to"):
            for attribute in self.index.attributes(method):
                call = self.index.parent(attribute)
                if not isinstance(call, ast.Call) or call.func is not attribute:
                    continue
                if method == "to" and self._only_dtypes(call):
                    continue
                found.append(call)
        return found

    def _only_dtypes(self, call: ast.Call) -> bool:
        values = [*call.args, *(k.value for k in call.keywords if k.arg != "non_blocking")]
        for value in values:
            name = self.view.qualified_name(value)
            if not (isinstance(name, str) and name in _ALL_DTYPES):
                return False
        return bool(values)

    @cached_property
    def _device_switches(self) -> bool:
        """Something in the file moves every new tensor to a device."""
        for last in ("set_default_device", "set_default_tensor_type"):
            if self._calls_named(last):
                return True
        for statement in self.index.nodes(ast.With):
            for item in statement.items:
                expression = item.context_expr
                if isinstance(expression, ast.Call):
                    name = self.view.qualified_name(expression.func)
                    if name == "torch.device":
                        return True
        return any(
            "transfer_to_npu" in (getattr(statement, "module", None) or "")
            or any("transfer_to_npu" in alias.name for alias in statement.names)
            for statement in self.index.imports()
        )

    # -- sharding ------------------------------------------------------------------------------

    def sharding(self, constructor: ast.Call, params: ast.expr | None) -> list[Break]:
        """The layers that own the storage of the parameters of ``constructor`` (``params``,
        its first argument): a sharding call given its model (or a submodule), or the
        optimizer, or whose result feeds it; a ``share_memory()`` of the model; hogwild workers;
        DTensor parameters made by a class of this file that the model is built from."""
        paths = self._models(params)
        context = _Context(self.index.tree, paths)
        fed = self._feeding_calls(params)
        found: list[Break] = []
        for call, effect in self._sharding_calls:
            given = [arg.value for arg in arguments(call)]
            if (
                any(call is node for node in fed)
                or any(self._on_model(context, value) for value in given)
                or any(self._is_optimizer(constructor, value) for value in given)
            ):
                code = f"`{self.view.written(call.func)}(...)`"
                found.append(Break(call, code, effect))
        for call in self._shared_memory:
            assert isinstance(call.func, ast.Attribute)
            if self._on_model(context, call.func.value):
                effect = (
                    "puts this optimizer's parameters in shared memory for hogwild workers (each "
                    "worker's fused optimizer would move them into a buffer of its own)"
                )
                found.append(Break(call, f"`{self.view.written(call)}`", effect))
        worker = self._top_level_function(constructor)
        workers = {**self._local_workers, **self.shared}
        if worker is not None and worker.name in workers and self._model_is_handed_in(params):
            effect = (
                f"runs in hogwild worker processes that share the model's parameters "
                f"(`share_memory()` at {workers[worker.name]}), and each worker's fused "
                "optimizer would move them into a buffer of its own"
            )
            found.append(Break(worker, f"`{worker.name}`", effect))
        for call in self._dtensors:
            if any(self._builds_with(origin, call) for origin in fed):
                effect = "makes the model's parameters DTensors, which a sharding layer owns"
                found.append(Break(call, f"`{self.view.written(call.func)}(...)`", effect))
        ancestors = self.index.ancestors(constructor)
        classes = self._hf_trainer_classes
        trainer = next((c for c in classes if any(a is c for a in ancestors)), None)
        if trainer is not None:
            effect = _HF_TRAINER_EFFECT.replace("hands this optimizer to", "is", 1)
            found.append(Break(trainer, f"`{trainer.name}`", effect))
        module = lightning_facts.lightning_class(self.view, constructor)
        if module is not None and self.lightning is not None:
            effect = (
                "is a LightningModule: the Trainer hands this optimizer to its strategy, and "
                f"{self.lightning}, so one that shards the parameters (FSDP) or partitions them "
                "(DeepSpeed) cannot be ruled out"
            )
            found.append(Break(module, f"`{module.name}`", effect))
        found.sort(key=lambda b: (b.line, b.node.col_offset))  # type: ignore[attr-defined]
        return found

    @cached_property
    def _local_workers(self) -> dict[str, str]:
        """The functions of this file that it starts as worker processes (``Process(target=f)``,
        ``mp.spawn(f, ...)``) when it calls ``share_memory()``: name -> "line N"."""
        if not self._shared_memory:
            return {}
        where = f"line {self._shared_memory[0].lineno}"
        found: dict[str, str] = {}
        for call in self.index.nodes(ast.Call):
            targets = [k.value for k in call.keywords if k.arg == "target"]
            if isinstance(call.func, ast.Attribute) and call.func.attr in _SPAWNERS and call.args:
                targets.append(call.args[0])
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = where
        return found

    def _builds_with(self, origin: ast.expr, maker: ast.Call) -> bool:
        """``origin`` (where the model comes from) constructs a class of this file whose body
        holds ``maker``."""
        if not isinstance(origin, ast.Call) or not isinstance(origin.func, ast.Name):
            return False
        return any(
            binding.kind is BindingKind.CLASS
            and binding.node is not None
            and any(node is maker for node in ast.walk(binding.node))
            for binding in self.index.bindings_of(origin.func)
        )

    def _is_optimizer(self, constructor: ast.Call, node: ast.expr) -> bool:
        return any(origin is constructor for origin in self.flow.origins(node))

    def _models(self, params: ast.expr | None) -> frozenset[Path]:
        """How the models whose ``.parameters()`` (``.named_parameters()``) feed ``params`` are
        spelled: ``model``, ``self.model``, ``model.module``."""
        if params is None:
            return frozenset()
        found: set[Path] = set()
        for expression in [params, *self.flow.origins(params)]:
            for node in ast.walk(expression):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _PARAMETER_ITERATORS
                ):
                    path = _path(node.func.value)
                    if path is not None:
                        found.add(path)
        return frozenset(found)

    def _feeding_calls(self, params: ast.expr | None) -> list[ast.expr]:
        """The calls the model in ``params`` (``x`` of ``x.parameters()``) comes from."""
        return [
            origin for model in self._model_reads(params) for origin in self.flow.origins(model)
        ]

    def _model_is_handed_in(self, params: ast.expr | None) -> bool:
        """The model whose parameters feed the optimizer is a parameter of its function (a
        hogwild worker gets the shared model so)."""
        if params is None:
            return False
        for expression in [params, *self.flow.origins(params)]:
            for node in ast.walk(expression):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    root = _root_name(node.func.value)
                    if root is not None and any(
                        b.kind is BindingKind.PARAM for b in self.index.bindings_of(root)
                    ):
                        return True
        return False

    @cached_property
    def _sharding_calls(self) -> list[tuple[ast.Call, str]]:
        """The calls of a sharding layer in the file, whatever they are imported as."""
        spellings = {last: last for last in SHARDING}
        for statement in self.index.imports():
            for alias in statement.names:
                last = alias.name.rpartition(".")[2]
                if last in SHARDING and alias.asname is not None:
                    spellings[alias.asname] = last
        spellings["initialize"] = "initialize"
        found: list[tuple[ast.Call, str]] = []
        for spelled, last in spellings.items():
            for call in self._calls_named(spelled):
                name = self.view.qualified_name(call.func)
                candidates = name.candidates if isinstance(name, Ambiguous) else (name,)
                for candidate in candidates:
                    if candidate is None or candidate.rpartition(".")[2] != last:
                        continue
                    if last != "initialize":
                        found.append((call, SHARDING[last]))
                    elif candidate == _DEEPSPEED:
                        found.append((call, _DEEPSPEED_EFFECT))
                    break
        found += self._launcher_wraps
        found += [(call, _HF_TRAINER_EFFECT) for call in self._hf_trainers]
        return found

    @cached_property
    def _hf_trainer_classes(self) -> list[ast.ClassDef]:
        """The classes of this file derived from Hugging Face's ``Trainer``."""
        if "Trainer" not in self.index.source.text:
            return []
        return [
            class_def
            for class_def in self.index.nodes(ast.ClassDef)
            if any(_hf_trainer_name(self.view.qualified_name(base)) for base in class_def.bases)
        ]

    @cached_property
    def _hf_trainers(self) -> list[ast.Call]:
        """Calls of Hugging Face's ``Trainer`` (``transformers``, ``trl``: any class whose name
        ends with ``Trainer``), or of a class of this file derived from one."""
        local = {class_def.name for class_def in self._hf_trainer_classes}
        found: list[ast.Call] = []
        if "Trainer" not in self.index.source.text:
            return found
        for call in self.index.nodes(ast.Call):
            func = call.func
            local_class = isinstance(func, ast.Name) and func.id in local
            if not local_class and not self.view.may_name(func, _HF_TRAINER_ROOTS):
                continue  # resolved only for a callee that may come from those packages
            if local_class or _hf_trainer_name(self.view.qualified_name(func)):
                found.append(call)
        return found

    @cached_property
    def _launcher_wraps(self) -> list[tuple[ast.Call, str]]:
        """``accelerator.prepare(...)``, ``fabric.setup(...)`` and their siblings (see
        ``_LAUNCHERS``) in a file that imports the package, on an object of its class or on a
        receiver that cannot be followed (a parameter, an attribute set elsewhere): never on a
        receiver known to be something else (``processor.prepare(...)``)."""
        imports = self.index.imports()
        found: list[tuple[ast.Call, str]] = []
        for launcher in _LAUNCHERS:
            if not any(_imports_root(statement, launcher.package) for statement in imports):
                continue
            for method in launcher.methods:
                for call in self._calls_named(method):
                    if not isinstance(call.func, ast.Attribute):
                        continue
                    origins = self.flow.origins(call.func.value)
                    built = [origin for origin in origins if isinstance(origin, ast.Call)]
                    if not built or any(
                        self.view.qualified_name(origin.func) in launcher.classes
                        for origin in built
                    ):
                        found.append((call, launcher_effect(launcher.name)))
        return found

    @cached_property
    def _shared_memory(self) -> list[ast.Call]:
        return [
            call
            for call in self._calls_named("share_memory")
            if isinstance(call.func, ast.Attribute) and not call.args
        ]

    @cached_property
    def _dtensors(self) -> list[ast.Call]:
        found: list[ast.Call] = []
        for last in _DTENSOR_MAKERS:
            for call in self._calls_named(last):
                name = self.view.qualified_name(call.func)
                if isinstance(name, str) and name.startswith("torch.distributed"):
                    found.append(call)
        found.sort(key=lambda call: (call.lineno, call.col_offset))
        return found

    def _calls_named(self, last: str) -> list[ast.Call]:
        """Calls whose callee is spelled ``last`` or ``<something>.last``."""
        callees: list[ast.expr] = [*self.index.names(last), *self.index.attributes(last)]
        found = []
        for callee in callees:
            call = self.index.parent(callee)
            if isinstance(call, ast.Call) and call.func is callee:
                found.append(call)
        return found

    def _top_level_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        top: ast.FunctionDef | ast.AsyncFunctionDef | None = None
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _FUNCTIONS):
                top = ancestor
            elif isinstance(ancestor, ast.ClassDef):
                return None
        return top

    def _function_of(self, node: ast.AST) -> ast.AST:
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _FUNCTIONS):
                return ancestor
        return self.index.tree


def _imports_root(statement: ast.Import | ast.ImportFrom, root: str) -> bool:
    """``statement`` imports the package ``root`` or something from it."""
    if isinstance(statement, ast.ImportFrom):
        modules = [statement.module or ""] if not statement.level else []
    else:
        modules = [alias.name for alias in statement.names]
    return any(module.split(".", 1)[0] == root for module in modules)


def _stored_names(target: ast.expr) -> Iterator[str]:
    """The name a store to ``target`` defines for a later read (``x``; ``self.optimizer``:
    ``optimizer``), each element's for an unpacking; a store into ``x[i]`` defines none."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _stored_names(element)
    elif isinstance(target, ast.Starred):
        yield from _stored_names(target.value)


# -- paths -----------------------------------------------------------------------------------------


def _strip_method_calls(node: ast.expr) -> ast.expr:
    """``model.cuda().eval()`` -> ``model``: the module a chain of the module methods that
    return the module itself starts from (``model.decode(x)`` is something else)."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _RETURNS_SELF
    ):
        node = node.func.value
    return node


def _path(node: ast.expr) -> Path | None:
    """``self.model.layers[0].eval()`` -> ("self", "model", "layers"): the names a chain of
    attributes, subscripts and self-returning module methods is spelled with, up to its first
    subscript; None for anything else (``model(x)``, ``model.decode(z)``, ``f().x``)."""
    node = _strip_method_calls(node)
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            parts.clear()  # `models[0]`: only what comes before the subscript is spelled
            node = node.value
        elif isinstance(node, ast.Call) and _strip_method_calls(node) is not node:
            node = _strip_method_calls(node)
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return tuple(reversed(parts))
        else:
            return None


def _arguments_of(call: ast.Call) -> list[ast.expr]:
    """The arguments of the calls a chain of module methods is made of (``DDP(model).eval()``)."""
    found: list[ast.expr] = []
    node: ast.expr = call
    while isinstance(node, ast.Call):
        found += [*node.args, *(k.value for k in node.keywords)]
        node = node.func.value if isinstance(node.func, ast.Attribute) else node.func
    return found


def _iterated_path(iterable: ast.expr) -> Path | None:
    """The path of what a loop goes over: ``model`` for ``model.parameters()``."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
        return _path(iterable.func.value)
    return _path(iterable)


def _root_name(node: ast.expr) -> ast.Name | None:
    """The name a chain of attributes, subscripts and method calls starts from."""
    node = _strip_method_calls(node)
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = _strip_method_calls(node.value)
    return node if isinstance(node, ast.Name) else None


def _tensor_like(path: Path) -> bool:
    """``model.fc.weight``: a parameter or a tensor by its name, not a module."""
    return bool(path) and (path[-1] in _TENSOR_NAMES or path[-1].endswith(("_weight", "_bias")))


def _iteration_kind(iterable: ast.expr) -> Literal["module", "parameter"] | None:
    """What a loop over ``iterable`` (part of a model) yields: modules (``model.modules()``,
    a ``ModuleList``), parameters (``model.parameters()``), or something else (None:
    ``model.state_dict().items()`` gives tensors that are not the parameters' storage holders)."""
    if isinstance(iterable, ast.Call):
        if not isinstance(iterable.func, ast.Attribute):
            return None
        method = iterable.func.attr
        if method in _MODULE_ITERATORS:
            return "module"
        return "parameter" if method in _PARAMETER_ITERATORS else None
    return "module" if isinstance(iterable, (ast.Attribute, ast.Name)) else None


def _within(path: Path, models: frozenset[Path]) -> bool:
    return any(path[: len(model)] == model for model in models)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments_ = function.args
    names = [a.arg for a in [*arguments_.posonlyargs, *arguments_.args, *arguments_.kwonlyargs]]
    if arguments_.vararg is not None:
        names.append(arguments_.vararg.arg)
    if arguments_.kwarg is not None:
        names.append(arguments_.kwarg.arg)
    return names


def _bound_arguments(
    function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call
) -> Iterator[tuple[str, ast.expr]]:
    """(parameter, value) for the arguments of ``call`` that bind a named parameter."""
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if positional and positional[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        positional = positional[1:]
    for position, value in enumerate(call.args):
        if isinstance(value, ast.Starred) or position >= len(positional):
            break
        yield positional[position], value
    for item in call.keywords:
        if item.arg is not None:
            yield item.arg, item.value


def _returned_values(value: ast.expr) -> list[ast.expr]:
    """What a ``return`` hands back: the value, or each element of a tuple or list it builds
    (``return train_set, model, optimizer``)."""
    if isinstance(value, ast.Tuple | ast.List):
        return [v for element in value.elts for v in _returned_values(element)]
    if isinstance(value, ast.Starred):
        return _returned_values(value.value)
    return [value]


# torch's module containers: a model put in one moves with it (vicreg's `nn.Sequential(backbone,
# head)` then `model.cuda(gpu)`, with an optimizer over `head.parameters()`).
_CONTAINERS = frozenset(
    f"torch.nn.{name}" for name in ("Sequential", "ModuleList", "ModuleDict")
) | frozenset(
    f"torch.nn.modules.container.{name}" for name in ("Sequential", "ModuleList", "ModuleDict")
)


def _adds_a_module(call: ast.Call) -> bool:
    """``parent.add_module(name, model)`` / ``parent.register_module(...)``: the model is a
    child of ``parent`` from then on."""
    return isinstance(call.func, ast.Attribute) and call.func.attr in (
        "add_module",
        "register_module",
    )
