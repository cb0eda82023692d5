"""Functions of the same module that NPU203 may call earlier than written. Not a rule.

DINO builds its parameter groups with a helper, ``params_groups = get_params_groups(student)``,
after ``student`` is wrapped in DDP. Moving that call above the wrap is safe when

- the function is *pure*: it binds only its own local names, calls only side-effect-free
  builtins, read-only methods (``named_parameters()``, ``endswith()``), ``append`` / ``extend``
  on its own lists and other pure functions of the module, and reads no other module-level
  name than what the call site can check (its *free names*);
- and, for an argument that is the DDP-wrapped model, the function gives the same result for
  the wrapper and for the module it wraps. DDP has no parameters of its own: its
  ``parameters()`` are the module's, in the same order, and its ``named_parameters()`` names are
  the module's with ``module.`` in front. So the function may call ``parameters()`` and iterate
  over ``named_parameters()``, and use a name only in tests that this prefix cannot change:
  ``"bias" in name`` (a text without a dot that is not part of ``module``) and
  ``name.endswith("weight")``. ``name.endswith(".bias")`` differs for one name only: a parameter
  called exactly ``bias`` (``module.bias`` ends with ``.bias``, ``bias`` does not); the function is
  accepted with that stated as an assumption, which NPU203's message repeats.

Everything else (attribute assignment, an unknown call, a name stored or returned, ``startswith``)
makes the function impure or the argument not wrapper-invariant, and NPU203 reports as before.

**Functions of other modules.** In DINO's repository the helper lives in ``utils.py``
(``import utils`` ... ``params_groups = utils.get_params_groups(student)``). Through the project
facts of :mod:`migrator.analysis.project`, NPU203 judges such a function by the same analysis,
run on its own module:

1. **Summary** (the files NPU203 checks: their text holds ``DataParallel``): the qualified names
   of the functions they call that may be defined in the repository (imported names, not
   torch's, apex's or builtins), as the rule's name resolution gives them:
   ``utils.get_params_groups`` for ``import utils`` and for ``from utils import
   get_params_groups as groups`` alike, ``.utils.get_params_groups`` for a relative import.
2. **Link** (once per run): each name is resolved to a file of the run and must be a function
   bound once, by its ``def``, at the top of that module (a re-export through ``from .x import
   f`` is followed); unresolved, ambiguous (two equally close ``utils.py``) or anything else: no
   facts, and the call stays an unknown call. Each module named is parsed once, and the verdict
   on each function asked for is kept as plain data under the module's path (:func:`verdict`):
   pure or not, its parameters, its free names, and per parameter the wrapper-invariance
   problem or the assumptions.
3. **Check**: :meth:`CallNames.function_summary <migrator.analysis.effects.CallNames>`
   turns a call whose qualified name the facts know into the same :class:`FunctionSummary` as a
   function of the module would give, named as the call writes it; what the call reads is the
   callee's path, and, for ``utils.f``, the ``utils.<free name>`` it reads in its module.

One module deep: a function of another module that calls a function of a third one is not pure
(only calls of its own module's pure functions are followed).

A callee bound by a ``class`` statement is located the same way; the link keeps, under
``classes``, the verdict of :mod:`migrator.analysis.classes` on each optimizer class among
them (DINO's ``utils.LARS``), and :func:`linked_class` gives it back to the check.
"""

from __future__ import annotations

import ast
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from migrator.analysis import names
from migrator.analysis.classes import (
    ModuleClasses,
    OptimizerClass,
    is_docstring,
    is_optimizer_class,
    is_super_of,
)
from migrator.analysis.classes import summary_from_facts as class_from_facts
from migrator.analysis.index import ModuleIndex, full_name, resolution_base
from migrator.analysis.project import Facts, ProjectFiles, Resolved
from migrator.analysis.scopes import BindingKind

DDP_PREFIX = "module."
# Every non-empty end of "module.": a text that starts with one of them can match across the
# prefix DDP adds to parameter names.
_PREFIX_ENDS = tuple(DDP_PREFIX[i:] for i in range(len(DDP_PREFIX)))

_PURE_BUILTINS = frozenset(
    {
        "list", "dict", "tuple", "set", "frozenset", "filter", "map", "sorted", "reversed", "len",
        "float", "int", "bool", "str", "min", "max", "sum", "zip", "enumerate", "any", "all",
        "range", "isinstance", "hasattr", "abs", "round",
    }
)  # fmt: skip
_READ_ONLY_METHODS = frozenset(
    {
        "parameters", "named_parameters", "keys", "values", "items", "get", "endswith",
        "startswith", "numel", "dim", "size", "format", "lower", "split", "join",
    }
)  # fmt: skip
_LOCAL_BUILDING_METHODS = frozenset({"append", "extend", "update", "insert", "pop", "setdefault"})
_REFUSED = (
    ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await, ast.FunctionDef,
    ast.AsyncFunctionDef, ast.ClassDef, ast.With, ast.AsyncWith, ast.TryStar,
    ast.Delete, ast.Import, ast.ImportFrom, ast.While, ast.Match,
)  # fmt: skip
# What a `try` of a pure function may catch: the built-in exceptions a read raises (IDEA's DINO:
# `try: param_dict_type = args.param_dict_type` / `except: param_dict_type = 'default'`).
_CAUGHT = frozenset(
    {"Exception", "AttributeError", "KeyError", "IndexError", "TypeError", "ValueError"}
)
# Calls that create a new container: a local bound only to one of them (or to a literal) is the
# function's own, and only such a local may be changed.
_NEW_CONTAINERS = frozenset({"list", "dict", "set", "sorted"})
# timm's grouping of a model's parameters for weight decay (MAE's and ConvNeXt-V2's
# `optim_factory.add_weight_decay(model_without_ddp, args.weight_decay)`): they read
# `model.named_parameters()` and return new lists of the parameters in new dicts, nothing else.
WEIGHT_DECAY_GROUPS = frozenset(
    {
        "timm.optim.optim_factory.add_weight_decay",
        "timm.optim.optim_factory.param_groups_weight_decay",
        "timm.optim.param_groups_weight_decay",
        "timm.optim._param_groups.param_groups_weight_decay",
    }
)
# Library functions without side effects (by qualified name).
_PURE_LIBRARY = WEIGHT_DECAY_GROUPS | frozenset(
    {
        "json.dumps", "math.sqrt", "math.log", "torch.cuda.is_available", "torch.npu.is_available",
        "itertools.chain",
        # what the process group is: a DDP wrap does not change it
        "torch.distributed.is_available", "torch.distributed.is_initialized",
        "torch.distributed.get_world_size", "torch.distributed.get_rank",
    }
)  # fmt: skip
# What a `raise` may build: the built-in exceptions (raised, the program stops either way).
_EXCEPTIONS = frozenset(
    {"ValueError", "TypeError", "KeyError", "RuntimeError", "NotImplementedError", "AssertionError"}
)
# Methods of a model that timm's convention makes read-only: the names of the parameters to keep
# out of weight decay. Accepted as an assumption the message states.
MODEL_NAME_METHODS = frozenset({"no_weight_decay", "no_weight_decay_keywords"})


@dataclass(frozen=True)
class Invariance:
    """Whether a function gives the same result for a DDP wrapper as for the module inside."""

    problem: str | None = None  # why it may not; None when it does
    assumptions: tuple[str, ...] = ()  # what must hold for it to (see the module docstring)


@dataclass
class FunctionSummary:
    """A pure module-level function: what its call reads, and how it treats each parameter."""

    name: str  # as the call writes it (`get_params_groups`, `utils.get_params_groups`)
    parameters: tuple[str, ...]
    free_names: frozenset[str]
    invariance: dict[str, Invariance] = field(default_factory=dict)
    home: str | None = None  # the path of the module that defines it, when not the caller's
    # What moving a call of it assumes, whatever it is given (see _Summarizer.assumed).
    assumptions: tuple[str, ...] = ()
    # The parameters it calls, with their default as written ("" without one): what a call
    # passes there must only read what it is given, which the caller's message assumes.
    called: dict[str, str] = field(default_factory=dict)

    def reads(self, callee: tuple[str, ...]) -> list[tuple[str, ...]]:
        """What a call of the function through the path ``callee`` reads: the callee, and the
        module-level names the function reads, as the caller reaches them (``utils.WD`` for
        ``utils.f``; none through a name imported from the module)."""
        module = callee[:-1] if self.home is not None else ()
        if self.home is not None and not module:
            return [callee]
        return [callee, *((*module, free) for free in sorted(self.free_names))]

    def parameter_for(self, call: ast.Call, argument: ast.expr) -> str | None:
        """The parameter ``argument`` of ``call`` binds, or None (``*args``, an unknown name)."""
        for position, given in enumerate(call.args):
            if given is argument and not isinstance(given, ast.Starred):
                return self.parameters[position] if position < len(self.parameters) else None
        for keyword in call.keywords:
            if keyword.value is argument and keyword.arg in self.parameters:
                return keyword.arg
        return None

    def given(self, call: ast.Call) -> tuple[dict[str, ast.expr], bool]:
        """Parameter -> the argument ``call`` binds it to, and whether the call also passes
        arguments through ``*`` or ``**`` (which may bind any other parameter)."""
        bound = {
            parameter: value
            for value in [*call.args, *(k.value for k in call.keywords)]
            if (parameter := self.parameter_for(call, value)) is not None
        }
        spread = any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        )
        return bound, spread

    def call_assumptions(self, call: ast.Call, written: Callable[[ast.AST], str]) -> list[str]:
        """What moving ``call`` assumes: the function's own assumptions, and for each function
        it calls that the call hands it (`get_num_layer=assigner.get_layer_id`), that it only
        reads what it is given; ``written`` gives a node's source text."""
        found = list(self.assumptions)
        given, spread = self.given(call)
        for parameter, default in self.called.items():
            value = given.get(parameter)
            if value is None and spread:
                found.append(
                    f"what the call may pass as `{parameter}` through `*`/`**`, which "
                    f"`{self.name}` calls, only reads what it is given"
                )
                continue
            if value is None and default in ("", "None"):
                continue  # None is never called; no default: a TypeError
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            shown = written(value) if value is not None else default
            found.append(f"`{shown}`, which `{self.name}` calls, only reads what it is given")
        return found


class ModuleFunctions:
    """The pure functions of one module, found once per file and only when asked for."""

    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self.summaries: dict[str, FunctionSummary | None] = {}
        self.in_progress: set[str] = set()
        self.definitions = {
            statement.name: statement
            for statement in index.tree.body
            if isinstance(statement, ast.FunctionDef)
        }

    @cached_property
    def classes(self) -> ModuleClasses:
        """The module's optimizer classes (a pure function may build those that only build
        an optimizer)."""
        return ModuleClasses(self.index, lambda node: _resolve(self.index, node))

    def is_constant(self, name: str) -> bool:
        """``name`` is bound once in the whole module, by a module-level ``name = (...)``."""
        stored = [node for node in self.index.names(name) if not isinstance(node.ctx, ast.Load)]
        if len(stored) != 1:
            return False
        statement = self.index.parent(stored[0])
        return (
            isinstance(statement, ast.Assign)
            and statement in self.index.tree.body
            and isinstance(statement.value, ast.Tuple)
            and not any(
                isinstance(n, ast.Global) and name in n.names for n in self.index.nodes(ast.Global)
            )
        )

    @cached_property
    def records(self) -> dict[str, FunctionSummary]:
        """The module's record classes (see :func:`record_summary`), by name."""
        found: dict[str, FunctionSummary] = {}
        for statement in self.index.tree.body:
            if isinstance(statement, ast.ClassDef):
                summary = record_summary(statement, lambda node: _resolve(self.index, node))
                if summary is not None:
                    found[statement.name] = summary
        return found

    def summary_of_call(self, call: ast.Call) -> FunctionSummary | None:
        """The summary of the function ``call`` calls, when it is a pure function or a record
        class of the module that the name at the call can only mean."""
        func = call.func
        if not isinstance(func, ast.Name):
            return None
        bindings = self.index.bindings_of(func)
        if len(bindings) != 1:
            return None
        if bindings[0].kind is BindingKind.CLASS and func.id in self.records:
            return self.records[func.id] if bindings[0].node in self.index.tree.body else None
        definition = self.definitions.get(func.id)
        if definition is None or bindings[0].kind is not BindingKind.FUNCTION:
            return None
        if bindings[0].node is not definition:
            return None
        return self.summary(func.id)

    def summary(self, name: str) -> FunctionSummary | None:
        if name in self.summaries:
            return self.summaries[name]
        if name in self.in_progress:  # recursion: not shown to terminate, so not pure
            return None
        self.in_progress.add(name)
        try:
            found = _Summarizer(self, self.definitions[name]).summary()
        finally:
            self.in_progress.discard(name)
        self.summaries[name] = found
        return found


class _Summarizer:
    """Checks one function for purity and summarises it.

    Pure, for NPU203, means that a call of it may run earlier, above a DDP wrap and the lines
    between: it changes nothing its caller can see but what it returns. It binds only its own
    names (its parameters included: rebinding one leaves the caller's value alone) and changes
    only the containers it creates (a local bound only to a literal or to
    ``list()``/``dict()``/``set()``/``sorted()``, and, through ``groups[name]["params"]``, the
    literals stored in one); it calls side-effect-free builtins and library functions,
    read-only methods, the pure functions of its module, and optimizer classes (torch's,
    apex's, torch_npu's, the module's own that only build an optimizer). Its ``print`` output
    moves with it, and an ``assert`` or ``raise`` stops the program wherever it runs. Some
    calls are accepted as stated assumptions (:attr:`assumed`): optimizer classes imported
    from outside (timm's ``Nadam``, ``Lookahead``: that they only build the optimizer),
    ``model.no_weight_decay()`` (that it only reads the model), and the functions it is given
    through a parameter with a ``None`` default and calls (recorded in :attr:`called`, stated by
    the caller for what it passes; a required parameter may be the model, whose forward pass
    would change the buffers DDP broadcasts when it is set up).
    """

    def __init__(self, functions: ModuleFunctions, definition: ast.FunctionDef) -> None:
        self.functions = functions
        self.definition = definition
        arguments = definition.args
        self.parameters = tuple(a.arg for a in [*arguments.posonlyargs, *arguments.args])
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        self.all_parameters = {a.arg for a in every}
        self.defaults = _defaults(arguments)
        self.locals = self._local_names()
        self.fresh = self._fresh_names()
        self.assumed: list[str] = []
        self.called: dict[str, str] = {}
        self.outside: list[str] = []  # the optimizer classes it builds from outside the run

    def summary(self) -> FunctionSummary | None:
        if self.definition.decorator_list or not self._is_pure():
            return None
        free = {
            node.id
            for node in self._walk()
            if isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id not in self.locals
            and node.id not in self.all_parameters
            and node.id not in _PURE_BUILTINS
        }
        if self.outside:
            listed = ", ".join(f"`{name}`" for name in dict.fromkeys(self.outside))
            self.assumed.append(
                f"the optimizer classes `{self.definition.name}` may build from outside the "
                f"files given ({listed}) only build an optimizer"
            )
        summary = FunctionSummary(
            self.definition.name,
            self.parameters,
            frozenset(free),
            assumptions=tuple(dict.fromkeys(self.assumed)),
            called=dict(sorted(self.called.items())),
        )
        for parameter in self.parameters:
            summary.invariance[parameter] = self._invariance(parameter)
        return summary

    def _walk(self) -> Iterator[ast.AST]:
        for statement in self.definition.body:
            yield from ast.walk(statement)

    def _local_names(self) -> set[str]:
        found: set[str] = set()
        for node in self._walk():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.add(node.id)
            elif isinstance(node, ast.Lambda):
                found.update(a.arg for a in node.args.args)
        return found - self.all_parameters

    def _fresh_names(self) -> set[str]:
        """The locals bound only to containers the function creates: ``groups = []``."""
        values: dict[str, list[ast.expr | None]] = {}
        for node in self._walk():
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                values.setdefault(node.id, []).append(self._bound_value(node))
        return {
            name
            for name, bound in values.items()
            if name in self.locals and all(v is not None and self._creates(v) for v in bound)
        }

    def _bound_value(self, name: ast.Name) -> ast.expr | None:
        """The value ``name = value`` (or ``a, name = x, value``) binds; None for any other
        binding (a loop, an augmented assignment, unpacking a value)."""
        parent = self.functions.index.parent
        holder = parent(name)
        if isinstance(holder, ast.Assign) and holder.targets == [name]:
            return holder.value
        assignment = parent(holder) if isinstance(holder, ast.Tuple | ast.List) else None
        if not (
            isinstance(assignment, ast.Assign)
            and isinstance(holder, ast.Tuple | ast.List)
            and assignment.targets == [holder]
            and isinstance(assignment.value, ast.Tuple | ast.List)
            and len(assignment.value.elts) == len(holder.elts)
        ):
            return None
        position = next(i for i, e in enumerate(holder.elts) if e is name)
        return assignment.value.elts[position]

    def _creates(self, value: ast.expr) -> bool:
        """``value`` is a new container: a literal or comprehension, or ``list(...)`` etc."""
        containers = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
        if isinstance(value, containers):
            return True
        return (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in _NEW_CONTAINERS
            and value.func.id not in self.locals
            and value.func.id not in self.all_parameters
            and value.func.id not in self.functions.definitions
        )

    # -- purity ----------------------------------------------------------------------------------

    def _is_pure(self) -> bool:
        for node in self._walk():
            if isinstance(node, _REFUSED):
                return False
            if isinstance(node, ast.Try) and not _catches_reads(node):
                return False
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if not all(self._is_local_target(t) for t in targets):
                    return False
            if isinstance(node, ast.For) and not self._is_local_target(node.target):
                return False
            if isinstance(node, ast.Call) and not self._is_pure_call(node):
                return False
        return True

    def _is_local_target(self, target: ast.expr) -> bool:
        if isinstance(target, ast.Tuple | ast.List):
            return all(self._is_local_target(e) for e in target.elts)
        if isinstance(target, ast.Starred):
            return self._is_local_target(target.value)
        if isinstance(target, ast.Subscript):
            return self._own_container(target.value)
        # A parameter rebound (SSD's `lr = cfg.SOLVER.BASE_LR if lr is None else lr`) is the
        # function's own name from then on; the caller's value is untouched.
        return isinstance(target, ast.Name) and (
            target.id in self.locals or target.id in self.all_parameters
        )

    def _own_container(self, node: ast.expr) -> bool:
        """``node`` is a container the function created: a fresh local, or, in one,
        ``groups[key]["params"]`` where every value stored in ``groups`` is a dict literal
        whose ``"params"`` is a new container."""
        keys: list[ast.expr] = []
        while isinstance(node, ast.Subscript):
            keys.append(node.slice)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.fresh:
            return False
        if not keys:
            return True
        path: list[str] = []
        for key in reversed(keys[:-1]):  # after the first key, which may be anything
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return False
            path.append(key.value)
        return all(self._creates_at(value, path) for value in self._stored_in(node.id))

    def _stored_in(self, name: str) -> Iterator[ast.expr]:
        """Every value put into the container ``name`` holds: its literals' values and
        ``name[key] = value``; an ``ast.Name`` stands for anything else (an unknown value)."""
        unknown = ast.Name(id=name, ctx=ast.Load())
        for node in self._walk():
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and target.id == name:
                    value = node.value
                    if isinstance(value, ast.Dict):
                        yield from value.values
                    elif not (isinstance(value, ast.List | ast.Set) and not value.elts):
                        yield unknown  # `list(x)` or a comprehension: what it holds is unknown
                elif (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == name
                ):
                    yield node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == name
                and node.func.attr in _LOCAL_BUILDING_METHODS
            ):
                yield unknown

    def _creates_at(self, value: ast.expr, path: list[str]) -> bool:
        """Following the keys ``path`` into the literal ``value`` reaches a new container."""
        for key in path:
            if not isinstance(value, ast.Dict):
                return False
            found = [
                v
                for k, v in zip(value.keys, value.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == key
            ]
            if len(found) != 1 or any(k is None for k in value.keys):
                return False
            value = found[0]
        return self._creates(value)

    def _is_pure_call(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.locals:
                return False
            if func.id in self.all_parameters:
                # A hook it is given (`get_num_layer=None`): what the caller passes must only
                # read (stated there). A required parameter may be the model itself, and a
                # forward pass changes the buffers DDP broadcasts when it is set up.
                return self._hook(func.id)
            if func.id in _PURE_BUILTINS:
                return True
            if func.id == "print":
                return all(k.arg in ("sep", "end", "flush") for k in call.keywords)
            if func.id in _EXCEPTIONS:
                return isinstance(self.functions.index.parent(call), ast.Raise)
            if func.id in self.functions.definitions:
                return self._pure_function_call(call)
            return self._builds_optimizer(call)
        if isinstance(func, ast.Attribute):
            if func.attr in _READ_ONLY_METHODS:
                return True
            receiver = func.value
            if func.attr in _LOCAL_BUILDING_METHODS and self._own_container(receiver):
                return True
            if (
                func.attr in MODEL_NAME_METHODS
                and isinstance(receiver, ast.Name)
                and receiver.id in self.all_parameters
                and not call.args
                and not call.keywords
            ):
                self.assumed.append(model_method_assumption(f"{receiver.id}.{func.attr}"))
                return True
            name = _resolve(self.functions.index, func)
            if isinstance(name, str) and name in _PURE_LIBRARY:
                return True
            return self._builds_optimizer(call)
        return False

    def _hook(self, parameter: str) -> bool:
        """A parameter the function calls is accepted as a hook only with a `None` default."""
        if self.defaults.get(parameter) != "None":
            return False
        self.called[parameter] = "None"
        return True

    def _pure_function_call(self, call: ast.Call) -> bool:
        """A call of a pure function of the module: its assumptions become this function's,
        and each function it calls that this call hands it must be one of this function's
        parameters (which this function then calls), or None."""
        callee = self.functions.summary_of_call(call)
        if callee is None:
            return False
        self.assumed.extend(callee.assumptions)
        given, spread = callee.given(call)
        for parameter, default in callee.called.items():
            value = given.get(parameter)
            if value is None:
                if spread or default not in ("", "None"):
                    return False
            elif isinstance(value, ast.Name) and value.id in self.all_parameters:
                if not self._hook(value.id):
                    return False
            elif not (isinstance(value, ast.Constant) and value.value is None):
                return False
        return True

    def _builds_optimizer(self, call: ast.Call) -> bool:
        """``call`` builds an optimizer: a class of torch, apex or torch_npu, one of the
        module's that only builds one (migrator.analysis.classes), or, as an assumption, one
        imported from a package named ``*optim*`` outside them (timm's ``Nadam``)."""
        classes = self.functions.classes
        if isinstance(call.func, ast.Name) and call.func.id in classes.definitions:
            found = classes.verdict(call.func.id)
            return found is not None and found["problem"] is None
        name = _resolve(self.functions.index, call.func)
        if not isinstance(name, str):
            return False
        if is_optimizer_class(name):
            return True
        module, _, short = name.rpartition(".")
        parts = module.split(".")
        if not short[:1].isupper() or parts[0] in _LIBRARY_ROOTS:
            return False
        if not any("optim" in part for part in parts):
            return False
        self.outside.append(name)
        return True

    # -- wrapper invariance ----------------------------------------------------------------------

    def _invariance(self, parameter: str) -> Invariance:
        assumptions: list[str] = []
        for node in self._walk():
            if not (isinstance(node, ast.Name) and node.id == parameter):
                continue
            if not isinstance(node.ctx, ast.Load):
                return Invariance(f"`{parameter}` is rebound in `{self.definition.name}`")
            problem = self._parameter_use(node, assumptions)
            if problem is not None:
                return Invariance(problem)
        return Invariance(None, tuple(dict.fromkeys(assumptions)))

    def _parameter_use(self, name: ast.Name, assumptions: list[str]) -> str | None:
        index = self.functions.index
        attribute = index.parent(name)
        call = index.parent(attribute) if attribute is not None else None
        is_method = (
            isinstance(attribute, ast.Attribute)
            and isinstance(call, ast.Call)
            and call.func is attribute
            and not call.args
            and not call.keywords
        )
        if not is_method:
            return f"it uses `{name.id}` other than through `parameters()`/`named_parameters()`"
        assert isinstance(attribute, ast.Attribute) and isinstance(call, ast.Call)
        if attribute.attr == "parameters":
            return None
        if attribute.attr != "named_parameters":
            return f"it calls `{name.id}.{attribute.attr}()`"
        loop = index.parent(call)
        if isinstance(loop, ast.For | ast.comprehension) and loop.iter is call:
            return self._names_problem(loop, assumptions)
        return "it uses the parameter names, which DDP prefixes with `module.`"

    def _names_problem(
        self, loop: ast.For | ast.comprehension, assumptions: list[str]
    ) -> str | None:
        target = loop.target
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
            return "it uses the parameter names, which DDP prefixes with `module.`"
        name_var = target.elts[0]
        if not isinstance(name_var, ast.Name):
            return "it uses the parameter names, which DDP prefixes with `module.`"
        # A for loop's variable outlives the loop: every use in the function counts.
        region = self._walk() if isinstance(loop, ast.For) else ast.walk(self._holder(loop))
        for node in region:
            if isinstance(node, ast.Name) and node.id == name_var.id and node is not name_var:
                problem = self._name_use(node, assumptions)
                if problem is not None:
                    return problem
        return None

    def _holder(self, loop: ast.comprehension) -> ast.AST:
        holder = self.functions.index.parent(loop)
        assert holder is not None
        return holder

    def _name_use(self, name: ast.Name, assumptions: list[str]) -> str | None:
        index = self.functions.index
        parent = index.parent(name)
        tested = index.method_call(name, "endswith")
        if tested is not None:
            texts = _strings(tested.args[0])
            if texts is None:
                return "it tests the parameter names with `endswith` on a value it computes"
            for text in texts:
                problem = _suffix_problem(text, assumptions)
                if problem is not None:
                    return problem
            return None
        if (
            isinstance(parent, ast.Compare)
            and len(parent.ops) == 1
            and isinstance(parent.ops[0], ast.In | ast.NotIn)
            and parent.comparators[0] is name
        ):
            texts = self._contained_texts(parent.left)
            if texts is None:
                return "it tests the parameter names with `in` on a value it computes"
            bad = next((t for t in texts if not _substring_is_invariant(t)), None)
            if bad is not None:
                return f"`{bad!r} in name` can match the `module.` that DDP puts in front of names"
            return None
        return "it uses the parameter names, which DDP prefixes with `module.`"

    def _contained_texts(self, node: ast.expr) -> tuple[str, ...] | None:
        """The texts ``node`` may be: a string, or the variable of a loop over strings."""
        direct = _strings(node)
        if direct is not None or not isinstance(node, ast.Name):
            return direct
        for candidate in self._walk():
            if (
                isinstance(candidate, ast.comprehension | ast.For)
                and isinstance(candidate.target, ast.Name)
                and candidate.target.id == node.id
            ):
                return self._iterated_strings(candidate.iter)
        return None

    def _iterated_strings(self, node: ast.expr) -> tuple[str, ...] | None:
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return _strings(ast.Tuple(elts=node.elts))
        if not isinstance(node, ast.Name) or node.id in self.all_parameters:
            return None
        if node.id in self.locals:
            statements: Iterator[ast.AST] = self._walk()
        else:  # a module-level constant, bound once to a tuple (a list might be changed)
            statements = iter(self.functions.index.tree.body)
        values = [
            statement.value
            for statement in statements
            if isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in statement.targets)
        ]
        if len(values) != 1 or not isinstance(values[0], ast.List | ast.Tuple | ast.Set):
            return None
        if node.id not in self.locals and not self.functions.is_constant(node.id):
            return None
        return _strings(ast.Tuple(elts=values[0].elts))


# What a record class may derive from: its construction is then the base's, which only builds
# the new object from what it is given.
_RECORD_BASES = frozenset({"builtins.dict", "builtins.object"})
_KEEPS = "the new object keeps what it is given"
# Methods that run code of the class's own while it is built.
_RECORD_BREAKERS = frozenset({"__new__", "__setattr__", "__setitem__"})


def record_summary(
    definition: ast.ClassDef, resolve: Callable[[ast.expr], object]
) -> FunctionSummary | None:
    """A *record class* summarised as the pure function its construction is, or None.

    ALBEF's ``utils.AttrDict(config['optimizer'])`` sits between the DDP wrap and the optimizer
    it configures. Constructing such a class changes nothing but the new object when the class
    derives from ``dict`` or ``object`` only (``resolve`` says what a base names), has no
    decorator, metaclass, decorated method (a property's setter), ``__new__``, ``__setattr__``
    or ``__setitem__`` of its own (class attributes that alias ``dict``'s or ``object``'s
    methods, ``__getattr__ = dict.get``, are fine), and its ``__init__``, if any, only passes
    its own parameters on to the base's
    ``__init__`` (``super().__init__(*args, **kwargs)``, ``super(AttrDict, self).__init__(...)``,
    ``dict.__init__(self, ...)``) and stores its parameters, or the object itself
    (``self.__dict__ = self``), in attributes of ``self``. The summary reads only what the call
    passes; every parameter is kept in the new object, so none is invariant under a DDP wrap."""
    if definition.decorator_list or definition.keywords:
        return None
    for base in definition.bases:
        if resolve(base) not in _RECORD_BASES:
            return None
    init: ast.FunctionDef | None = None
    for statement in definition.body:
        if isinstance(statement, ast.FunctionDef):
            # A decorated method may be a property whose setter an attribute store runs.
            if statement.decorator_list or statement.name in _RECORD_BREAKERS:
                return None
            if statement.name == "__init__":
                init = statement
        elif isinstance(statement, ast.Assign):
            if not all(isinstance(t, ast.Name) for t in statement.targets):
                return None
            if not _names_base_member(statement.value, resolve):
                return None
        elif not (isinstance(statement, ast.Pass) or is_docstring(statement)):
            return None
    parameters: tuple[str, ...] = ()
    if init is not None:
        if not _record_init(definition, init, resolve):
            return None
        arguments = init.args
        parameters = tuple(a.arg for a in [*arguments.posonlyargs, *arguments.args][1:])
    return FunctionSummary(
        definition.name,
        parameters,
        frozenset(),
        invariance={parameter: Invariance(_KEEPS) for parameter in parameters},
    )


def _names_base_member(value: ast.expr, resolve: Callable[[ast.expr], object]) -> bool:
    """``dict.get`` or ``object.__setattr__``: a method of a record's base, by attribute."""
    return isinstance(value, ast.Attribute) and resolve(value.value) in _RECORD_BASES


def _record_init(
    owner: ast.ClassDef, init: ast.FunctionDef, resolve: Callable[[ast.expr], object]
) -> bool:
    """``__init__`` only hands its parameters to the base's and stores them, or ``self``, in
    attributes of ``self`` (see :func:`record_summary`)."""
    arguments = init.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    if not every:
        return False
    self_name, given = every[0].arg, {a.arg for a in every[1:]}

    def plain(value: ast.expr) -> bool:
        inner = value.value if isinstance(value, ast.Starred) else value
        return isinstance(inner, ast.Name) and inner.id in given | {self_name}

    for statement in init.body:
        if is_docstring(statement) or isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Assign):
            if not (isinstance(statement.value, ast.Name) and plain(statement.value)):
                return False
            for target in statement.targets:
                if not (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == self_name
                ):
                    return False
            continue
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
            return False
        call = statement.value
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr != "__init__":
            return False
        passed = [*call.args, *(k.value for k in call.keywords)]
        if is_super_of(owner, func.value, self_name):
            if not all(plain(value) and not _is_name(value, self_name) for value in passed):
                return False
        elif resolve(func.value) in _RECORD_BASES:
            if not (call.args and _is_name(call.args[0], self_name)):
                return False  # `dict.__init__(self, ...)`
            if not all(plain(value) for value in passed[1:]):
                return False
        else:
            return False
    return True


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _catches_reads(statement: ast.Try) -> bool:
    """A `try` whose handlers catch nothing but built-in exceptions (or all, bare) and that has
    no `finally`: its statements are checked like any other of the function."""
    if statement.finalbody:
        return False
    for handler in statement.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught else []
        if not all(isinstance(name, ast.Name) and name.id in _CAUGHT for name in names):
            return False
    return True


def model_method_assumption(written: str) -> str:
    """What accepting ``model.no_weight_decay()`` assumes, for the messages."""
    return f"`{written}()` only reads the model (timm's convention: it returns parameter names)"


def _defaults(arguments: ast.arguments) -> dict[str, str]:
    """Parameter -> its default as written (``ast.unparse``)."""
    positional = [*arguments.posonlyargs, *arguments.args]
    with_default = positional[len(positional) - len(arguments.defaults) :]
    found = {a.arg: ast.unparse(d) for a, d in zip(with_default, arguments.defaults, strict=True)}
    keyword_only = zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
    found.update({a.arg: ast.unparse(d) for a, d in keyword_only if d is not None})
    return found


def _strings(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _suffix_problem(text: str, assumptions: list[str]) -> str | None:
    """Whether ``("module." + name).endswith(text) == name.endswith(text)`` for every name.

    They differ only for the name ``text[len(end):]`` when ``text`` starts with an end ``end``
    of ``module.``; with the end ``.`` that name is a parameter of the model's own, and the
    function is accepted under the assumption that there is none of that name.
    """
    for end in _PREFIX_ENDS:
        if text.startswith(end):
            rest = text[len(end) :]
            if end == "." and rest and "." not in rest:
                assumptions.append(f"has no parameter of its own named `{rest}`")
                return None
            return f"`name.endswith({text!r})` can match the `module.` that DDP puts in front"
    return None


def _substring_is_invariant(text: str) -> bool:
    """``text in "module." + name`` equals ``text in name`` for every name: ``text`` neither
    lies inside ``module.`` nor starts with one of its ends (so it cannot straddle it)."""
    return bool(text) and text not in DDP_PREFIX and not text.startswith(_PREFIX_ENDS)


# -- functions of other modules of the run (see the module docstring) ---------------------------

# Names that are never a function of the repository.
_LIBRARY_ROOTS = frozenset({"torch", "apex", "torch_npu", "builtins"})
_MAX_REEXPORTS = 4  # `from .params import get_params_groups` in a package, followed this often


def summarize(index: ModuleIndex) -> Facts | None:
    """The qualified names of the calls that may be functions of the run, in the scopes NPU203
    reorders: those that wrap a model (DDP or DataParallel) and those that call a function that
    does. Calls anywhere else are never between a wrap and an optimizer it could move, and
    resolving (then linking) every call of a large file costs more than the rest of its check."""
    scopes = _wrapping_scopes(index)
    if not scopes:
        return None
    callees = sorted(
        {
            name
            for call in index.nodes(ast.Call)
            if _enclosing_function(index, call) in scopes and (name := _callee(index, call))
        }
    )
    return {"callees": callees} if callees else None


_WRAPPER_ROOTS = frozenset({"torch", "apex"})


def _wrapping_scopes(index: ModuleIndex) -> set[ast.AST | None]:
    """The innermost functions (None: the module level) that hold a call that may be a
    ``*DataParallel`` class of torch or apex, and the functions that call a module-level
    function holding one (NPU203's hidden wraps)."""
    reaching = index.names_reaching(_WRAPPER_ROOTS)
    # Spelled with DataParallel, or a name an import binds to one (`... import
    # DistributedDataParallel as DDP`): only those calls are resolved.
    aliases = {
        alias.asname
        for statement in index.imports()
        for alias in statement.names
        if alias.asname and alias.name.endswith("DataParallel")
    }
    scopes: set[ast.AST | None] = set()
    wrapping_names: set[str] = set()
    for call in index.nodes(ast.Call):
        spelled = full_name(call.func) or ""
        if "DataParallel" not in spelled and spelled.rsplit(".", 1)[-1] not in aliases:
            continue
        base = resolution_base(call.func)
        if base is None or base.id not in reaching:
            continue
        name = _resolve(index, call.func)
        candidates = name.candidates if isinstance(name, names.Ambiguous) else (name,)
        if not any(c and c.endswith("DataParallel") for c in candidates):
            continue
        function = _enclosing_function(index, call)
        scopes.add(function)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            wrapping_names.add(function.name)
    if wrapping_names:
        for name_node in index.nodes(ast.Name):
            if name_node.id in wrapping_names and isinstance(name_node.ctx, ast.Load):
                scopes.add(_enclosing_function(index, name_node))
    return scopes


def _enclosing_function(index: ModuleIndex, node: ast.AST) -> ast.AST | None:
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef):
            return ancestor
    return None


def _resolve(index: ModuleIndex, node: ast.AST) -> str | names.Ambiguous | None:
    try:
        return names.resolve(index, node)
    except RecursionError:  # a pathological alias chain: not followed (as Rule.qualified_name)
        return None


def _callee(index: ModuleIndex, call: ast.Call) -> str | None:
    if not isinstance(call.func, ast.Name | ast.Attribute):
        return None
    name = _resolve(index, call.func)
    if not isinstance(name, str) or name.split(".", 1)[0] in _LIBRARY_ROOTS:
        return None
    return name


# The link of each run's files, with the summaries it was made from: NPU203 links them, and
# NPU101's link stage (which comes first) needs the same facts to know what NPU203 moves.
_LINKED: weakref.WeakKeyDictionary[
    ProjectFiles, tuple[Mapping[str, Facts], Mapping[str, Facts] | None]
] = weakref.WeakKeyDictionary()


def link_once(summaries: Mapping[str, Facts], files: ProjectFiles) -> Mapping[str, Facts] | None:
    """:func:`link`, made once for the same summaries and files of a run."""
    found = _LINKED.get(files)
    if found is None or found[0] is not summaries:
        found = (summaries, link(summaries, files))
        _LINKED[files] = found
    return found[1]


def link(summaries: Mapping[str, Facts], files: ProjectFiles) -> Mapping[str, Facts] | None:
    """For each file of ``summaries`` (what :func:`summarize` gave, by path), the callees that
    are functions or classes at the top of a module of the run (``callees``: qualified name ->
    path and name); for each of those modules, the verdict on each function asked for
    (``functions``: name -> :func:`verdict`) and on each optimizer class (``classes``: name ->
    ``ModuleClasses.verdict``, see :mod:`migrator.analysis.classes`; a class that is no
    optimizer class is left out)."""
    facts: dict[str, dict[str, Any]] = {}
    wanted: dict[str, dict[BindingKind, set[str]]] = {}
    for path, summary in summaries.items():
        for callee in summary["callees"]:
            found = _locate(files, callee, path)
            if found is None:
                continue
            home, name, kind = found
            facts.setdefault(path, {}).setdefault("callees", {})[callee] = {
                "path": home,
                "name": name,
            }
            wanted.setdefault(home, {}).setdefault(kind, set()).add(name)
    for home, by_kind in sorted(wanted.items()):
        index = files.index(home)
        assert index is not None  # _locate parsed it
        function_names = by_kind.get(BindingKind.FUNCTION, set())
        if function_names:
            functions = ModuleFunctions(index)
            facts.setdefault(home, {})["functions"] = {
                name: verdict(functions, name) for name in sorted(function_names)
            }
        class_names = by_kind.get(BindingKind.CLASS, set())
        classes = _class_verdicts(index, class_names)
        if classes:
            facts.setdefault(home, {})["classes"] = classes
        records = _record_verdicts(index, class_names)
        if records:
            # A record class is called like a pure function: its verdict is kept as one.
            facts.setdefault(home, {}).setdefault("functions", {}).update(records)
    return facts or None


def _record_verdicts(index: ModuleIndex, class_names: set[str]) -> dict[str, Facts]:
    """The :func:`verdict` of the construction of each record class among ``class_names``."""
    if not class_names:
        return {}
    found: dict[str, Facts] = {}
    for statement in index.tree.body:
        if isinstance(statement, ast.ClassDef) and statement.name in class_names:
            summary = record_summary(statement, lambda node: _resolve(index, node))
            if summary is not None:
                found[statement.name] = _facts_of(summary, statement.lineno, builds=False)
    return found


def _class_verdicts(index: ModuleIndex, class_names: set[str]) -> dict[str, Facts]:
    """The verdicts on the optimizer classes among ``class_names`` of the module."""
    if not class_names:
        return {}
    classes = ModuleClasses(index, lambda node: _resolve(index, node))
    found = {name: classes.verdict(name) for name in sorted(class_names)}
    return {name: facts for name, facts in found.items() if facts is not None}


def _locate(
    files: ProjectFiles, dotted: str, importer: str, hops: int = 0
) -> tuple[str, str, BindingKind] | None:
    """The module (path), name and kind of the function or class ``dotted`` names from
    ``importer``: one bound only by its ``def`` or ``class`` at the top of a module of the run,
    or re-exported by a ``from ... import``; None for anything else (not in the run,
    ambiguous, a variable)."""
    target = files.resolve(dotted, importer)
    if not isinstance(target, Resolved) or len(target.rest) != 1:
        return None  # outside the run, an AmbiguousModule, a module, or `utils.Class.method`
    path, name = target.module.path, target.rest[0]
    index = files.index(path)
    if index is None or _star_imports(index):
        return None  # a star import could rebind the name
    bindings = index.module_scope.bindings.get(name, [])
    if len(bindings) != 1:
        return None
    binding = bindings[0]
    node = binding.node
    if isinstance(node, ast.FunctionDef | ast.ClassDef) and binding.kind in _DEFINED:
        return (path, name, binding.kind) if any(node is s for s in index.tree.body) else None
    if binding.kind is BindingKind.IMPORT and isinstance(node, ast.ImportFrom):
        if hops >= _MAX_REEXPORTS or binding.alias is None:
            return None
        module = "." * node.level + (node.module or "")
        separator = "." if node.module else ""
        return _locate(files, f"{module}{separator}{binding.alias.name}", path, hops + 1)
    return None


_DEFINED = (BindingKind.FUNCTION, BindingKind.CLASS)


def _star_imports(index: ModuleIndex) -> bool:
    """Does the module import with ``*`` (legal at its top only; relative ones too)?"""
    return any(a.name == "*" for statement in index.nodes(ast.ImportFrom) for a in statement.names)


def verdict(functions: ModuleFunctions, name: str) -> Facts:
    """The analysis of the module-level function ``name`` as plain data: impure, or pure with
    its parameters, its free names and, per parameter, whether it is wrapper-invariant; and
    whether it builds an optimizer (``builds``: timm's ``create_optimizer``), so that a call of
    it after a DDP wrap is an optimizer built there."""
    definition = functions.definitions[name]
    summary = functions.summary(name)
    builds = _builds_optimizer(functions, name, set())
    if summary is None:
        return {"line": definition.lineno, "pure": False, "builds": builds}
    return _facts_of(summary, definition.lineno, builds)


def _facts_of(summary: FunctionSummary, line: int, builds: bool) -> Facts:
    return {
        "line": line,
        "pure": True,
        "builds": builds,
        "parameters": list(summary.parameters),
        "free": sorted(summary.free_names),
        "invariance": {
            parameter: {"problem": found.problem, "assumptions": list(found.assumptions)}
            for parameter, found in summary.invariance.items()
        },
        "assumptions": list(summary.assumptions),
        "called": summary.called,
    }


def _builds_optimizer(functions: ModuleFunctions, name: str, seen: set[str]) -> bool:
    """The module-level function ``name`` constructs an optimizer class of torch, apex or
    torch_npu, itself or through another function of its module that it calls by name."""
    seen.add(name)
    index = functions.index
    for node in ast.walk(functions.definitions[name]):
        if not isinstance(node, ast.Call):
            continue
        called = _resolve(index, node.func)
        if isinstance(called, str) and is_optimizer_class(called):
            return True
        if (
            isinstance(node.func, ast.Name)
            and node.func.id in functions.definitions
            and node.func.id not in seen
            and _builds_optimizer(functions, node.func.id, seen)
        ):
            return True
    return False


def linked_builder(links: Mapping[str, Facts], importer: str, qualified: str) -> bool:
    """The function of another module that ``qualified`` names from the file ``importer``
    builds an optimizer, per the linked facts (``links``: NPU203's)."""
    entry = links.get(importer, {}).get("callees", {}).get(qualified)
    if entry is None:
        return False
    facts = links.get(entry["path"], {}).get("functions", {}).get(entry["name"])
    return bool(facts and facts.get("builds"))


def summary_from_facts(name: str, facts: Facts, home: str) -> FunctionSummary | None:
    """The :class:`FunctionSummary` of a :func:`verdict` (None: not pure), named ``name``."""
    if not facts.get("pure"):
        return None
    invariance = {
        parameter: Invariance(found["problem"], tuple(found["assumptions"]))
        for parameter, found in facts["invariance"].items()
    }
    parameters = tuple(facts["parameters"])
    return FunctionSummary(
        name,
        parameters,
        frozenset(facts["free"]),
        invariance,
        home,
        tuple(facts.get("assumptions", ())),
        dict(facts.get("called", {})),
    )


def linked_summary(
    links: Mapping[str, Facts], importer: str, qualified: str, name: str
) -> FunctionSummary | None:
    """The summary of the function of another module that ``qualified`` names from the file
    ``importer``, per the linked facts (``links``: NPU203's), named ``name``; else None."""
    entry = links.get(importer, {}).get("callees", {}).get(qualified)
    if entry is None:
        return None
    facts = links.get(entry["path"], {}).get("functions", {}).get(entry["name"])
    return None if facts is None else summary_from_facts(name, facts, entry["path"])


def linked_class(
    links: Mapping[str, Facts], importer: str, qualified: str, name: str
) -> OptimizerClass | None:
    """The optimizer class of another module that ``qualified`` names from the file
    ``importer``, per the linked facts, named ``name``; else None (no optimizer class)."""
    entry = links.get(importer, {}).get("callees", {}).get(qualified)
    if entry is None:
        return None
    facts = links.get(entry["path"], {}).get("classes", {}).get(entry["name"])
    return None if facts is None else class_from_facts(name, facts)
