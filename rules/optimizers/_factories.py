"""Optimizer factories in other modules of the run, for NPU101 and NPU102. Not a rule itself.

Real training scripts often get the optimizer they pass to ``amp.initialize`` from a helper in
another module of the repository (``optimizer = create_optimizer(args, model)`` imported from
``utils/optim.py``, ``self.optimizer = build_optimizer(cfg, model)`` from a package's
``solver/build.py``). The per-module flow
(:class:`~migrator.rules.optimizers._flow.OptimizerFlow`) stops at such a call; this module
carries the flow across files, through the project facts of :mod:`migrator.analysis.project`,
in three steps:

1. **Summary** (every file whose text holds ``initialize`` and ``apex``, the words without which
   it cannot call ``apex.amp.initialize``): the calls that the optimizers passed to
   ``amp.initialize`` come from, whose callee resolves to a name that is not torch's, apex's or
   a builtin (``utils.optim.build_optimizer``, ``.solver.build_optimizer``).
2. **Link** (once per run, only when a summary names such a call): each callee is resolved to a
   file of the run (re-exports through a package's ``__init__`` are followed) and must be a
   function defined at the top of it. Its call sites are found in the files whose text names it,
   and for each the ``amp.initialize`` calls its result reaches there, with their options (for
   every level NPU102's ``opt-level`` switch could set). NPU101's planner
   (:func:`~migrator.rules.optimizers._fused_planner.plan_fused`) then runs on the factory's
   module with those call sites, and what the factory returns is judged: NPU fused as written,
   made NPU fused by NPU101 (and with which home), or why not.
3. **Check**: NPU101, in the factory's module, chooses the home of the constructors a factory
   returns from its call sites (:func:`factory_facts`, read by
   :mod:`~migrator.rules.optimizers._call_sites`); NPU102, at the ``amp.initialize`` of a
   caller, counts the factory's optimizer as NPU fused or reports why not
   (:func:`factory_verdict`).

One call deep: a factory's call site whose result is passed on (returned again, stored for
another module) counts as a call that does not reach ``amp.initialize``. Calls of a factory
inside its own module are the module's own flow, as before.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from migrator.analysis import functions
from migrator.analysis.calls import NOT_LITERAL, arguments
from migrator.analysis.clipping import class_of
from migrator.analysis.effects import DATA_PARALLEL, DDP_CLASSES, CallNames
from migrator.analysis.index import ModuleIndex, line_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.project import AmbiguousModule, Facts, FileViews, Module, Resolved
from migrator.analysis.view import FileView
from migrator.rule import Linking, Rule
from migrator.rules.normalization_parallel._ddp_order import (
    DDP_ORDER_KEY,
    MOVING_CODE,
    plan_ddp_order,
)
from migrator.rules.optimizers import _handed as handed
from migrator.rules.optimizers import _lightning as lightning
from migrator.rules.optimizers import _method_callers as method_callers
from migrator.rules.optimizers._amp import AmpOptions, amp_options
from migrator.rules.optimizers._call_sites import (
    AttributeRef,
    amp_attributes,
    attribute_stores,
    returned_calls,
    returned_element_origins,
    returned_origins,
    top_level_function,
    untraced_amp,
    values_returning,
    wrapped_returning,
)
from migrator.rules.optimizers._conditions import amp_runs_when, any_amp_condition, unportable_test
from migrator.rules.optimizers._contract import ParameterContract
from migrator.rules.optimizers._contract import describe as describe_breaks
from migrator.rules.optimizers._flow import (
    OptimizerFlow,
    defined_here,
    escape,
    npu_fused_name,
    optimizer_lookup,
    takes,
)
from migrator.rules.optimizers._fused_planner import plan_fused
from migrator.rules.optimizers._handed import HandedCode
from migrator.rules.optimizers._hazards import FusionHazards, Hazard, describe
from migrator.rules.optimizers._plans import DdpMoves, FusedSwaps, OptLevelSwitch
from migrator.rules.optimizers._tables import (
    KNOWN_OPTIMIZERS,
    OPT_LEVELS,
    OPTIMIZER_TRIGGER,
    TORCH_NPU_HOME,
)
from migrator.settings import AmpPolicy
from migrator.suppressions import Suppressions

# Where NPU101's and NPU102's shared facts are kept (Rule.PROJECT_KEY).
KEY = "NPU1"
KEY_CODE = "NPU101"  # the rule that writes the factories' and their callers' edits
# How NPU101's edit of a call of a factory that picks its class by amp's condition starts.
PASSED_CONDITION = "passed amp's condition to "
# A file that calls apex.amp.initialize names both (Rule.wants_summary); one that shares a model
# with hogwild workers calls `share_memory()`; one whose methods return an optimizer calls its
# class (see _method_callers).
# A file that mentions Lightning may build a Trainer or define a LightningModule (_lightning).
# A class NPU101 fuses written as a value of its module (`optim_fn = optim.RMSprop`,
# `torch.optim.SGD if c else ...`), and the words of a lookup by name in an optimizer module
# (with "optim"): a factory may build from either without spelling a constructor call.
_CLASS_WORDS = (b"optim.SGD", b"optim.Adam", b"optim.Adadelta", b"optim.RMSprop")
_LOOKUP_WORDS = (b"getattr(", b"__dict__[", b"vars(")
PROJECT_TRIGGER = ("initialize", "share_memory", "lightning", "optim", *method_callers.CONSTRUCTED)
_ALSO_NEEDED = b"apex"
_SHARED = b"share_memory"
# How a function becomes a worker process: `Process(target=f)`, `mp.spawn(f, ...)`.
_SPAWNERS = frozenset({"spawn", "start_processes"})
# Names that are never a factory of the repository.
_LIBRARY_ROOTS = frozenset({"torch", "apex", "torch_npu", "builtins"})
_MAX_REEXPORTS = 4  # `from .optim import build` in an __init__.py, followed this many times


def wants_summary(source: bytes) -> bool:
    if _SHARED in source:
        return True
    return b"initialize" in source and _ALSO_NEEDED in source


def _display(path: str) -> str:
    return os.path.normpath(path)


def _at(path: str, node: ast.AST) -> str:
    return f"{_display(path)}:{node.lineno}"  # type: ignore[attr-defined]


def _key(call: ast.AST) -> str:
    return f"{call.lineno}:{call.col_offset}"  # type: ignore[attr-defined]


# -- 1. summary: the calls of other modules' functions that reach amp.initialize -----------------


def summarize(index: ModuleIndex, module: Module) -> Facts | None:
    reader = FileView(index)
    flow = OptimizerFlow.of(reader)
    uses: list[dict[str, Any]] = []
    for sink in flow.amp_sinks:
        if sink.optimizers is None:
            continue
        for origin in flow.origins(sink.optimizers):
            element = flow.element_of(origin)
            if element is not None:
                # `optimizer, scheduler = build(cfg)`: the link tells what `build` returns there.
                call, position = element
                use = _use(reader, call)
                if use is not None and not flow.exclusive(sink.call, origin):
                    use["position"] = position
                    if use not in uses:
                        uses.append(use)
                continue
            if not isinstance(origin, ast.Call) or flow.is_amp_initialize(origin):
                continue
            if flow.exclusive(sink.call, origin):
                continue
            use = _use(reader, origin)
            if use is not None and use not in uses:
                uses.append(use)
    facts: dict[str, Any] = {"uses": uses} if uses else {}
    if flow.amp_sinks:
        facts["amp"] = True  # the run has an apex `amp.initialize` (see _Link.amp_in_run)
        if untraced_amp(reader):
            facts["amp_open"] = True  # ... that may take an optimizer built elsewhere
            attributes = amp_attributes(reader)
            if attributes:  # ... read from these attributes (see _stored_amp)
                facts["amp_attributes"] = [ref.to_json() for ref in sorted(attributes, key=str)]
        helpers = amp_helpers(reader, flow)
        if helpers:
            facts["amp_helpers"] = sorted(helpers)
    workers = _workers(reader)
    if workers:
        facts["workers"] = workers
    return facts or None


def _workers(reader: FileView) -> list[dict[str, Any]]:
    """In a file that calls ``x.share_memory()``, the functions it starts as worker processes
    (``Process(target=train, ...)``, ``mp.spawn(train, ...)``) that may be defined in another
    module: hogwild training, whose workers share the model's parameters."""
    shares = [
        call
        for call in reader.index.nodes(ast.Call)
        if isinstance(call.func, ast.Attribute) and call.func.attr == "share_memory"
    ]
    if not shares:
        return []
    found: list[dict[str, Any]] = []
    for call in reader.index.nodes(ast.Call):
        targets = [k.value for k in call.keywords if k.arg == "target"]
        if isinstance(call.func, ast.Attribute) and call.func.attr in _SPAWNERS and call.args:
            targets.append(call.args[0])
        for target in targets:
            use = _use(reader, ast.Call(func=target, args=[], keywords=[]), at=target)
            if use is not None and "callee" in use:
                worker = {"callee": use["callee"], "share": shares[0].lineno}
                if worker not in found:
                    found.append(worker)
    return found


_ZEROES = b".zero_grad("


def zero_grad_helpers(index: ModuleIndex) -> list[str]:
    """The module's top-level functions that call ``zero_grad`` on one of their parameters
    and that the module calls itself (FixMatch's ``def train(args, ..., model, optimizer, ...)``
    with ``model.zero_grad()``, called from ``main``): whether every call of them is in the
    module decides whether the planner may follow the parameter to them
    (``own_zero_grad_helpers``, see :func:`_own_helpers`). Only in a module that may build an
    optimizer (its text names ``optim``): elsewhere nothing of the module's is followed."""
    if "optim" not in index.source.text:
        return []
    found: set[str] = set()
    for attribute in index.attributes("zero_grad"):
        receiver = attribute.value
        if not isinstance(receiver, ast.Name):
            continue
        parameter = index.parameter_bound(receiver)
        if parameter is not None:
            arguments = index.parent(parameter)
            function = index.parent(arguments) if arguments is not None else None
            if (
                isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
                and any(function is statement for statement in index.tree.body)
                and _called_here(index, function)
            ):
                found.add(function.name)
    return sorted(found)


def _called_here(index: ModuleIndex, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        isinstance(call := index.parent(name), ast.Call) and call.func is name
        for name in index.names(function.name)
        if isinstance(name.ctx, ast.Load)
    )


def _own_helpers(
    linking: Linking, key: str, facts: dict[str, dict[str, Any]], *, by_import: bool = False
) -> None:
    """``own_<key>``: the names among each file's ``key`` summary whose calls are all in their
    own module: no other file of the run contains the name, or (``by_import``) none that
    contains it imports the file's module (an import that resolves to it, or may: ambiguous).
    A name as common as ``train`` is in many files; only those that can import the module are
    read."""
    helpers = {
        path: summary[key]
        for path, summary in linking.project.summaries(KEY).items()
        if summary.get(key)
    }
    if not helpers:
        return
    named = linking.files.containing(sorted({name for names in helpers.values() for name in names}))
    importing: dict[tuple[str, str], bool] = {}
    seeing: dict[tuple[str, str], bool] = {}  # (importer's folder, path): its imports may reach it
    words: dict[str, frozenset[bytes] | None] = {}  # importer -> the words of its imports
    for path, names in helpers.items():
        own = []
        for name in names:
            others = [other for other in named[name] if other != path]
            if by_import:
                stem = _module_stem(path).encode()
                others = [
                    other
                    for other in others
                    if stem in (_import_words(linking, other, words) or {stem})
                    and _sees(linking, other, path, seeing)
                ]
                if len(others) > _MAX_IMPORTERS_READ:
                    continue  # too many files to read for one name: not known to be its own
                others = [other for other in others if _imports(linking, other, path, importing)]
            if not others:
                own.append(name)
        if own:
            facts.setdefault(path, {})[f"own_{key}"] = own


# The most files that name a helper and may import its module that are read to tell whether
# one does: a name as common as `train` in a large monorepo folder is not worth the parsing.
_MAX_IMPORTERS_READ = 32


def _sees(linking: Linking, importer: str, path: str, seen: dict[tuple[str, str], bool]) -> bool:
    """:meth:`ProjectFiles.sees`, once per folder of importers (it depends on the folder)."""
    key = (os.path.dirname(importer), path)
    if key not in seen:
        seen[key] = linking.files.sees(importer, path)
    return seen[key]


def _module_stem(path: str) -> str:
    """The last part of the module name of ``path`` (its package's for an ``__init__.py``)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return os.path.basename(os.path.dirname(path)) if stem == "__init__" else stem


# An import statement's text: its line, with a parenthesised list or backslash continuations.
_IMPORT_TEXT = re.compile(rb"(?m)^[ \t]*(?:from|import)\b(?:[^\n(\\]|\\\n)*(?:\([^)]*\))?")
_WORD = re.compile(rb"\w+")


def _import_words(
    linking: Linking, importer: str, cache: dict[str, frozenset[bytes] | None]
) -> frozenset[bytes] | None:
    """The words of ``importer``'s import statements, read before any parsing (None: the file
    cannot be read); once per file."""
    if importer not in cache:
        data = linking.files.read(importer)
        cache[importer] = (
            None
            if data is None
            else frozenset(
                word
                for statement in _IMPORT_TEXT.findall(data)
                for word in _WORD.findall(statement)
            )
        )
    return cache[importer]


def _imports(linking: Linking, importer: str, path: str, seen: dict[tuple[str, str], bool]) -> bool:
    """Whether an import of ``importer`` may bring in the module of ``path`` (or a name of
    it); True where ``importer`` cannot be read."""
    key = (importer, path)
    if key not in seen:
        seen[key] = _imports_module(linking, importer, path)
    return seen[key]


def _imports_module(linking: Linking, importer: str, path: str) -> bool:
    # Only an import that spells the module's name can reach it (`import train`, `from .train
    # import x`, `from pkg import train`): the others are not resolved.
    stem = _module_stem(path)
    index = linking.files.index(importer)
    if index is None:
        return True
    for statement in index.imports():
        if isinstance(statement, ast.Import):
            dotted = [alias.name for alias in statement.names]
        else:
            module = "." * statement.level + (statement.module or "")
            separator = "." if statement.module else ""
            dotted = [module, *(f"{module}{separator}{a.name}" for a in statement.names)]
        for name in dotted:
            if stem not in name.split("."):
                continue
            target = linking.files.resolve(name, importer)
            if isinstance(target, AmbiguousModule):
                return True
            if target is not None and target.module.path == path:
                return True
    return False


def amp_helpers(view: FileView, flow: OptimizerFlow) -> set[str]:
    """The names of the module's top-level functions, and of its top-level classes by their
    ``__init__``, that pass one of their parameters to an apex ``amp.initialize`` as its
    optimizers (``def setup(model, optimizer): return amp.initialize(model, optimizer)``)."""
    found: set[str] = set()
    for sink in flow.amp_sinks:
        if sink.optimizers is None:
            continue
        for origin in flow.origins(sink.optimizers):
            for parameter in flow.parameters_of(origin):
                owner = own_helper(view.index, parameter)
                if owner is not None:
                    found.add(owner)
    return found


def own_helper(index: ModuleIndex, parameter: ast.arg) -> str | None:
    """The name a call of ``parameter``'s function is spelled with: a top-level function's
    own, a top-level class's for its ``__init__``; None otherwise."""
    arguments = index.parent(parameter)
    function = index.parent(arguments) if arguments is not None else None
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    owner = index.parent(function)
    if owner is index.tree:
        return function.name
    if (
        isinstance(owner, ast.ClassDef)
        and function.name == "__init__"
        and index.parent(owner) is index.tree
    ):
        return owner.name
    return None


def _returning(view: FileView) -> list[str]:
    """The functions at the top of the module that return an optimizer NPU101 knows: their
    callers in other files are where the optimizer is zeroed and stepped."""
    index = view.index
    names = [
        statement.name
        for statement in index.tree.body
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(isinstance(node, ast.Return) for node in index.walk(statement))
    ]
    if not names:
        return []
    return [
        name
        for name in names
        if any(
            isinstance(origin, ast.Call) and _known_optimizer(view, origin)
            for origin in returned_origins(view, name)
        )
    ]


def _names_a_class(source: bytes) -> bool:
    """Does the text build, or name, a class NPU101 fuses (a byte search)? A factory may build
    its optimizer from a class chosen as a value (`optim_fn = optim.RMSprop`) or looked up by
    name (`getattr(torch.optim, name)`), whose call the text never spells."""
    if method_callers.constructs(source) or any(word in source for word in _CLASS_WORDS):
        return True
    return b"optim" in source and any(word in source for word in _LOOKUP_WORDS)


def _use(reader: FileView, call: ast.Call, at: ast.expr | None = None) -> dict[str, Any] | None:
    """The callee of ``call`` when it may be a function of another module of the run (``at``:
    the node that stands for the call, when it is not one)."""
    if not isinstance(call.func, ast.Name | ast.Attribute):
        return None
    name = reader.qualified_name(call.func)
    node = at if at is not None else call
    where: dict[str, Any] = {"line": node.lineno, "col": node.col_offset}
    if isinstance(name, Ambiguous):
        if any(_is_library(candidate) for candidate in name.candidates):
            return None  # an optimizer class of torch or apex: NPU101 reports the ambiguity
        use = {**where, "code": reader.written(call.func), "ambiguous": name.describe()}
        modules = _star_sources(reader, call.func)
        if modules:
            use["star"] = modules  # the link stage reads which of them exports the name
        return use
    if name is None or _is_library(name):
        return None
    return {**where, "code": reader.written(call.func), "callee": name}


def _star_sources(reader: FileView, func: ast.expr) -> list[str]:
    """The modules ``from m import *`` binds the plain name ``func`` from, in source order,
    when nothing else in the file binds it and every star import of the file is such a one at
    its top (a star import under `try` or a relative one would be another source)."""
    index = reader.index
    if not isinstance(func, ast.Name) or index.bindings_of(func) or func.id.startswith("_"):
        return []
    return list(index.star_imports) if len(_star_lines(index)) == len(index.star_imports) else []


def _star_lines(index: ModuleIndex) -> list[int]:
    """The lines of the module's ``from m import *``, wherever they are."""
    return [
        node.lineno
        for node in index.nodes(ast.ImportFrom)
        if any(alias.name == "*" for alias in node.names)
    ]


def _is_library(name: str) -> bool:
    return name.split(".", 1)[0] in _LIBRARY_ROOTS


# -- 2. link: factories, their call sites, and what they return -----------------------------------


@dataclass(frozen=True)
class Factory:
    """A function defined at the top of a module of the run."""

    path: str
    name: str
    line: int

    @property
    def shown(self) -> str:
        return f"`{self.name}` ({_display(self.path)}:{self.line})"


@dataclass
class _Link:
    """The state of one link stage."""

    linking: Linking
    # The view of a file of the run (None: it cannot be read or parsed).
    reader: FileViews
    located: dict[tuple[str, str], Factory | str] = field(default_factory=dict)
    positions: dict[Factory, frozenset[int]] = field(default_factory=dict)  # _tuple_positions
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> facts
    # path -> the code of other modules its calls reach (_handed), for the hazards there.
    handed: Mapping[str, Facts] = field(default_factory=dict)

    @functools.cached_property
    def amp_files(self) -> list[str]:
        """The files of the run that call apex's ``amp.initialize``."""
        summaries = self.linking.project.summaries(KEY)
        return [path for path, summary in summaries.items() if summary.get("amp")]

    def amp_in_sight(self, path: str) -> bool:
        """Can the file ``path`` reach a file of the run that calls apex's ``amp.initialize``
        (one its imports may find: in a monorepo, of its own project)? Without one, an
        optimizer it hands on cannot meet apex amp in the run's code."""
        return any(self.linking.files.sees(path, amp) for amp in self.amp_files)

    @property
    def switched_level(self) -> str | None:
        """The ``opt_level`` NPU102's option sets in this run, if it runs and sets one."""
        switch = self.linking.plans.get(OptLevelSwitch)
        return switch.level if isinstance(switch, OptLevelSwitch) else None

    def of(self, path: str, part: str) -> dict[str, Any]:
        return self.facts.setdefault(path, {}).setdefault(part, {})

    @functools.cached_property
    def ddp_links(self) -> Mapping[str, Facts]:
        """NPU203's linked facts (the functions and classes of other modules it follows),
        made from its summaries ahead of NPU203's own link, which reuses them: whether NPU203
        moves a factory's call above a DDP wrap decides here whether the factory may build an
        NPU fused optimizer. Empty when NPU203 does not run."""
        summaries = self.linking.project.summaries(DDP_ORDER_KEY)
        return (functions.link_once(summaries, self.linking.files) or {}) if summaries else {}


def _wrapped_amp(
    linking: Linking,
    summaries: Mapping[str, Facts],
    open_amp: list[str],
    facts: dict[str, dict[str, Any]],
) -> None:
    """For each function that returns its optimizer inside another value (see
    :func:`wrapped_returning`), a file of the run that names it, sees its module and calls
    apex's ``amp.initialize`` with an optimizer built out of its sight: the caller may take the
    optimizer out of the wrapper there (ESPnet's ``amp.initialize(model, opt.optimizer)``)."""
    wrapped = [
        (path, name)
        for path, summary in summaries.items()
        for name in summary.get("wrapped_returning", [])
    ]
    if not wrapped or not open_amp:
        return
    named = linking.files.containing(sorted({name for _, name in wrapped}))
    for path, name in wrapped:
        amp = next(
            (
                amp
                for amp in open_amp
                if amp != path and amp in named[name] and linking.files.sees(amp, path)
            ),
            None,
        )
        if amp is not None:
            facts.setdefault(path, {}).setdefault("wrapped_amp", {})[name] = _display(amp)


def _stored_amp(
    linking: Linking,
    summaries: Mapping[str, Facts],
    open_amp: list[str],
    facts: dict[str, dict[str, Any]],
) -> None:
    """For each file that stores an optimizer on an object (``self.optimizer_G = ...``), the
    files of the run it sees whose apex ``amp.initialize`` reads an optimizer from that
    attribute of something the flow does not trace (:func:`amp_attributes`; names made at run
    time match by their patterns, ``self.<name>`` only within related classes):
    ``amp_stored``, :attr:`AttributeRef.key` -> such a file."""
    stored = {path: summary["stored"] for path, summary in summaries.items() if "stored" in summary}
    reading = {
        amp: [AttributeRef.from_json(read) for read in summaries[amp].get("amp_attributes", [])]
        for amp in open_amp
    }
    if not stored or not any(reading.values()):
        return
    for path, refs in stored.items():
        seen = [amp for amp in open_amp if amp != path and linking.files.sees(path, amp)]
        found: dict[str, str] = {}
        for ref in map(AttributeRef.from_json, refs):
            amp = next((a for a in seen if any(ref.meets(read) for read in reading[a])), None)
            if amp is not None:
                found[ref.key] = _display(amp)
        if found:
            facts.setdefault(path, {})["amp_stored"] = found


def link(
    linking: Linking, views: FileViews, handed_code: Mapping[str, Facts] | None = None
) -> Mapping[str, Facts] | None:
    """The factories' facts (NPU101's planner decides, in each factory's module, what the
    factory returns); ``views``: the files' views this link stage shares; ``handed_code``: the
    code of other modules each file's calls reach (:func:`._handed.link`)."""
    state = _Link(linking, views, handed=handed_code or {})
    # -> (caller, origin key, callee, the position unpacked from its result or None)
    callers: dict[Factory, list[tuple[str, str, str, int | None]]] = {}
    for path, summary in linking.project.summaries(KEY).items():
        for worker in summary.get("workers", []):
            found = _locate(state, worker["callee"], path)
            if isinstance(found, Factory):
                state.of(found.path, "shared")[found.name] = f"{_display(path)}:{worker['share']}"
        for use in summary.get("uses", []):
            key = f"{use['line']}:{use['col']}"
            found = _factory_of_use(state, path, use)
            if isinstance(found, Factory):
                site = (path, key, use["code"], use.get("position"))
                callers.setdefault(found, []).append(site)
            else:  # nothing to follow: what it returns is out of sight
                entry = _verdict_entry(False, found, False, found)
                state.of(path, "origins")[key] = {**entry, "code": use["code"], "unseen": True}
    _own_helpers(linking, "amp_helpers", state.facts)
    _own_helpers(linking, "zero_grad_helpers", state.facts, by_import=True)
    summaries = linking.project.summaries(KEY)
    # The files whose `amp.initialize` may take an optimizer built out of their sight.
    open_amp = [amp for amp in state.amp_files if summaries[amp].get("amp_open")]
    for path, summary in summaries.items():
        if summary.get("values_returning"):
            seen = next((amp for amp in open_amp if linking.files.sees(path, amp)), None)
            if seen is not None:
                state.facts.setdefault(path, {})["amp_seen"] = _display(seen)
    _stored_amp(linking, summaries, open_amp, state.facts)
    _wrapped_amp(linking, summaries, open_amp, state.facts)
    # Functions that return an optimizer, whose callers in other files (amp or not) are where
    # it is zeroed and stepped; calls in their own module are that module's flow.
    returning = [
        (path, name)
        for path, summary in linking.project.summaries(KEY).items()
        for name in summary.get("returning", [])
    ]
    named = linking.files.containing(sorted({name for _, name in returning}))
    unused: set[Factory] = set()  # linked for their callers only
    for path, name in returning:
        if any(other != path for other in named[name]):
            found = _top_level(state, path, name, 0)
            if isinstance(found, Factory) and found not in callers:
                callers[found] = []
                unused.add(found)
    if callers:
        _find_call_sites(state, _with_forwarders(state, list(callers)))
        # A function another linked factory forwards to keeps its entry (it carries the
        # condition threaded through the forwarder).
        forwarded = set(_with_forwarders(state, [f for f in callers if f not in unused]))
        for factory in unused - forwarded:
            facts = state.of(factory.path, "factories")
            entry = facts[factory.name]
            if not entry["sites"] and "escapes_amp" not in entry:
                # No call in another file after all (the name is only spelled there): the
                # function stays its own module's business, as before.
                del facts[factory.name]
                del callers[factory]
        for factory_path in sorted({factory.path for factory in callers}):
            wanted = {
                (factory, site[3])
                for factory in callers
                if factory.path == factory_path
                for site in callers[factory]
            }
            for (factory, position), entry in _verdicts(state, factory_path, wanted).items():
                for caller_path, key, code, unpacked in callers[factory]:
                    if unpacked == position:
                        state.of(caller_path, "origins")[key] = {
                            **entry,
                            "code": code,
                            "position": position,
                        }
    return state.facts or None


def _verdict_entry(planned: bool, planned_why: str, written: bool, written_why: str) -> Facts:
    """What NPU102 needs about one origin: fused or not, and why, when NPU101 runs (``planned``)
    and when it does not (``written``). The caller's entry also holds the callee as written
    (``code``): the facts are looked up by position, and the verification pass of a rewritten
    file sees positions that may have moved."""
    return {
        "fused": {"planned": planned, "written": written},
        "why": {"planned": planned_why, "written": written_why},
    }


def _factory_of_use(state: _Link, path: str, use: Mapping[str, Any]) -> Factory | str:
    if "ambiguous" in use:
        found = _from_star_imports(state, path, use["code"], use.get("star", []))
        if found is not None:
            return found
        return f"cannot tell which function `{use['code']}` is: {use['ambiguous']}"
    return _locate(state, use["callee"], path)


def _from_star_imports(
    state: _Link, path: str, name: str, modules: Sequence[str]
) -> Factory | str | None:
    """What ``name`` is in ``path``, which binds it only by ``from m import *`` of
    ``modules``: the last of them that exports it wins, as in Python. None when that cannot be
    told: a module outside the run or that does not parse, one with ``__all__``, or one with
    star imports of its own that may bind the name after (or instead of) its own binding."""
    for module in reversed(modules):
        target = state.linking.files.resolve(module, path)
        if not isinstance(target, Resolved) or target.rest:
            return None
        reader = state.reader(target.module.path)
        if reader is None:
            return None
        index = reader.index
        if any(True for _ in _top_level_bindings(index.tree.body, "__all__")):
            return None
        bound = [node.lineno for node in _top_level_bindings(index.tree.body, name)]
        stars = _star_lines(index)
        if stars and (not bound or max(stars) > min(bound)):
            return None
        if bound:
            return _top_level(state, target.module.path, name, 0)
    return None  # bound by none of them: a NameError at run time


def _locate(state: _Link, dotted: str, importer: str, hops: int = 0) -> Factory | str:
    """The function that ``dotted`` names from ``importer``, or why there is none to follow."""
    files = state.linking.files
    absolute = files.absolute(dotted, importer) or dotted
    cached = state.located.get((absolute, importer))
    if cached is not None:
        return cached
    target = files.resolve(dotted, importer)
    found: Factory | str
    if isinstance(target, AmbiguousModule):
        found = f"cannot tell which file defines `{absolute}`: {target}"
    elif target is None or not target.rest:
        found = (
            f"`{absolute}` is not defined in the files of this run (npu-migrate follows "
            "functions of the files it is given)"
        )
    elif len(target.rest) > 1:
        found = (
            f"`{absolute}` is not a function defined at the top of "
            f"{_display(target.module.path)}, which is what npu-migrate follows"
        )
    else:
        found = _top_level(state, target.module.path, target.rest[0], hops)
    state.located[(absolute, importer)] = found
    return found


def _top_level(state: _Link, path: str, name: str, hops: int) -> Factory | str:
    """``name`` at the top of the module ``path``: a function, or a re-export followed."""
    reader = state.reader(path)
    if reader is None:
        return f"{_display(path)}, where `{name}` would be defined, cannot be parsed"
    bindings = list(_top_level_bindings(reader.index.tree.body, name))
    if not bindings:
        return f"`{name}` is not defined at the top of {_display(path)}"
    if len(bindings) > 1:
        lines = ", ".join(str(node.lineno) for node in bindings)
        return f"`{name}` is bound more than once at the top of {_display(path)} (lines {lines})"
    node = bindings[0]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return Factory(path, name, node.lineno)
    if isinstance(node, ast.ImportFrom) and hops < _MAX_REEXPORTS:
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        module = "." * node.level + (node.module or "")
        dotted = f"{module}.{alias.name}" if node.module else f"{module}{alias.name}"
        return _locate(state, dotted, path, hops + 1)
    kind = "a class" if isinstance(node, ast.ClassDef) else "not a function"
    return (
        f"`{name}` in {_display(path)}:{node.lineno} is {kind}; npu-migrate follows the "
        "optimizers that functions return"
    )


def _top_level_bindings(body: list[ast.stmt], name: str) -> Iterator[ast.stmt]:
    """The statements at the top of a module (inside `if`/`try` too) that bind ``name``."""
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if statement.name == name:
                yield statement
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            bound = [(a.asname or a.name).split(".")[0] for a in statement.names]
            if name in bound:
                yield statement
        elif isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets: list[ast.expr] = (
                statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in _flat(targets)):
                yield statement
        elif isinstance(statement, ast.If):
            yield from _top_level_bindings(statement.body + statement.orelse, name)
        elif isinstance(statement, ast.Try):
            blocks = [statement.body, statement.orelse, statement.finalbody]
            blocks += [handler.body for handler in statement.handlers]
            for block in blocks:
                yield from _top_level_bindings(block, name)


def _flat(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            yield from _flat(target.elts)
        else:
            yield target


# -- call sites ----------------------------------------------------------------------------------

# The wraps that initialise DDP (DataParallel broadcasts nothing the optimizer depends on).
_DDP = DDP_CLASSES - DATA_PARALLEL


def _find_call_sites(state: _Link, factories: list[Factory]) -> None:
    """Every call of each factory in the other files of the run, and the ``amp.initialize``
    calls its result reaches there (``factories`` facts of the factory's module), with what
    NPU101 needs to thread amp's condition into the factory (:func:`_site_facts`)."""
    by_name: dict[str, list[Factory]] = {}
    for factory in factories:
        by_name.setdefault(factory.name, []).append(factory)
        entry = {"line": factory.line, "sites": [], "escapes": None}
        state.of(factory.path, "factories")[factory.name] = entry
    containing = state.linking.files.containing(list(by_name))
    paths = sorted({path for name in by_name for path in containing[name]})
    for path in paths:
        reader = state.reader(path)
        if reader is None:
            continue
        wanted = {name for name in by_name if path in containing[name]}
        found = [(call, f) for call, f in _calls_of(state, reader, path, wanted) if f in factories]
        called = [call for call, _ in found]
        references = _other_references(state, reader, path, wanted, called)
        for factory, (where, open_call) in references.items():
            if factory in factories:
                facts = state.of(factory.path, "factories")[factory.name]
                facts["escapes"] = facts["escapes"] or where
                if "escapes_amp" not in facts and state.amp_in_sight(path):
                    # Its calls there are out of sight, and so is whether they reach amp.
                    facts["escapes_amp"] = where
                    if open_call:
                        facts["escapes_open"] = True
        if not found:
            continue
        flow = OptimizerFlow.of(reader)
        after_ddp, moved = _called_after_ddp(state, reader, path, flow, called)
        holders = {id(call): _holders(state, reader, call, factory) for call, factory in found}
        hazards = FusionHazards(
            reader,
            flow,
            returned=frozenset(id(call) for call in called),
            elements={id(held): call for call in called for held in holders[id(call)]},
            elsewhere=HandedCode(reader, state.handed.get(path, {})),
            after_ddp=after_ddp,
        )
        contract = ParameterContract(reader, flow, elsewhere=partial(_function_called, state, path))
        for call, factory in found:
            held = holders[id(call)]
            amp_calls = []
            for holder in held or [call]:
                for amp in flow.amp_calls_reached.get(id(holder), []):
                    if amp not in amp_calls:
                        amp_calls.append(amp)
            amp_calls.sort(key=lambda amp: (amp.lineno, amp.col_offset))
            facts = state.of(factory.path, "factories")[factory.name]
            site_facts = _site_facts(
                state, reader, path, call, amp_calls, hazards.of(call, None), held
            )
            site = {
                "at": _at(path, call),
                "path": path,
                "amp": [_amp_facts(reader, path, amp, call) for amp in amp_calls],
                **site_facts,
                "breaks": _site_breaks(contract, call),
                "moved_above": moved.get(id(call)),  # the line of the DDP wrap NPU203 moves it over
            }
            facts["sites"].append(site)


def _holders(state: _Link, reader: FileView, call: ast.Call, factory: Factory) -> list[ast.expr]:
    """The targets that hold an optimizer in ``optimizer, scheduler = factory(...)`` (``call``
    in ``reader``): those at the positions where the factory's tuple holds one."""
    parent = reader.index.parent(call)
    if not (isinstance(parent, ast.Assign) and isinstance(parent.targets[0], ast.Tuple | ast.List)):
        return []
    element_of = OptimizerFlow.of(reader).element_of
    elements = parent.targets[0].elts
    return [
        elements[position]
        for position in _tuple_positions(state, factory)
        if position < len(elements) and element_of(elements[position]) == (call, position)
    ]


def _tuple_positions(state: _Link, factory: Factory) -> frozenset[int]:
    """The positions of the optimizers in the tuple ``factory`` returns on every ``return``
    (``return optimizer, scheduler``; ``return optimizer, optimizer_center``): those whose
    origins build an optimizer NPU101 knows; none for anything else."""
    if factory in state.positions:
        return state.positions[factory]
    found: set[int] = set()
    reader = state.reader(factory.path)
    position = 0
    origins = returned_element_origins(reader, factory.name, 0) if reader is not None else None
    while reader is not None and origins is not None:
        calls = [origin for origin in origins if isinstance(origin, ast.Call)]
        if any(
            _known_optimizer(reader, c) or npu_fused_name(reader, class_of(reader, c))
            for c in calls
        ):
            found.add(position)
        position += 1
        origins = returned_element_origins(reader, factory.name, position)
    state.positions[factory] = frozenset(found)
    return state.positions[factory]


def _function_called(
    state: _Link, path: str, call: ast.Call
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function at the top of another file of the run that ``call`` (in ``path``) calls by
    name (`smart_resume(ckpt, optimizer, ...)` imported from `utils/torch_utils.py`)."""
    reader = state.reader(path)
    if reader is None or not isinstance(call.func, ast.Name | ast.Attribute):
        return None
    name = reader.qualified_name(call.func)
    if not isinstance(name, str) or name.split(".", 1)[0] in _LIBRARY_ROOTS:
        return None
    found = _locate(state, name, path)
    if not isinstance(found, Factory) or found.path == path:
        return None
    callee = state.reader(found.path)
    if callee is None:
        return None
    for statement in _top_level_bindings(callee.index.tree.body, found.name):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            return statement
    return None


def _called_after_ddp(
    state: _Link, reader: FileView, path: str, flow: OptimizerFlow, calls: list[ast.Call]
) -> tuple[dict[int, str], dict[int, int]]:
    """id(call) -> why, for the factory calls made after a DDP wrap in the same function (or
    module-level code) that stay there: the optimizer is then built after DDP initialisation;
    and id(call) -> the wrap's line, for those NPU203 moves above the wrap in this run (BEiT's
    and ConvNeXt's `optimizer = create_optimizer(args, model_without_ddp)`): its plan is made
    here as NPU203 makes it (the same planner, on NPU203's facts)."""
    if "DistributedDataParallel" not in reader.index.source.text:
        return {}, {}
    wraps = [
        call
        for call in reader.index.nodes(ast.Call)
        if reader.qualified_name_in(call.func, _DDP) in _DDP
    ]
    after: dict[int, ast.Call] = {}  # id(call) -> the last wrap before it
    for call in calls:
        scope = flow.scope_of(call)
        earlier = [w for w in wraps if w.lineno < call.lineno and flow.scope_of(w) is scope]
        if earlier:
            after[id(call)] = earlier[-1]
    if not after:
        return {}, {}
    moved: set[int] = set()
    if state.linking.plans.get(DdpMoves) is not None:  # NPU203 runs
        plan = plan_ddp_order(reader, CallNames(reader, path, state.ddp_links, {}))
        suppressions = Suppressions.scan(reader.index.source.text)
        moved = plan.moved_calls(partial(suppressions.covers, code=MOVING_CODE))
    left = {
        key: (
            f"is called after a model is wrapped in DDP (line {wrap.lineno}), so the optimizer "
            "is built after DDP initialisation, and NPU203 does not move the call above the wrap"
        )
        for key, wrap in after.items()
        if key not in moved
    }
    return left, {key: wrap.lineno for key, wrap in after.items() if key in moved}


def _site_breaks(contract: ParameterContract, call: ast.Call) -> str:
    """How the caller breaks the fused optimizers' contract for the parameters it may hand the
    factory (parameters never sharded or re-allocated while the optimizer uses them), described;
    "" when it does not. Each argument may be parameters (``model.parameters()``, a list of
    them) or a model the factory takes them from."""
    for argument in arguments(call):
        if argument.star:
            continue
        given = argument.value
        candidates: list[ast.expr] = [given]
        if isinstance(given, ast.Name | ast.Attribute):
            owned = ast.Call(
                func=ast.Attribute(value=given, attr="parameters", ctx=ast.Load()),
                args=[],
                keywords=[],
            )
            ast.copy_location(owned, given)
            ast.copy_location(owned.func, given)
            candidates.append(owned)
        for params in candidates:
            breaks = contract.sharding(call, params) or contract.reallocations(call, params)
            if breaks:
                return describe_breaks(breaks)
    return ""


def _site_facts(
    state: _Link,
    reader: FileView,
    path: str,
    call: ast.Call,
    amp_calls: list[ast.Call],
    hazards: list[Hazard],
    holders: list[ast.expr] | None = None,
) -> dict[str, Any]:
    """What a factory's call site says about the optimizer the factory builds:

    - ``hazards``: code there that breaks an NPU fused optimizer (the training loop of the
      caller zeroes or replaces its gradients), described; "" without;
    - ``argument``: the value of amp's condition at the call, to pass to the factory when
      NPU101 makes the factory pick the class by it (``"True"``, ``"False"`` or the test under
      which ``amp.initialize`` runs there), with ``key`` and ``code`` to find the call again;
      None with ``why`` when it cannot be passed;
    - ``handed_on``: for a call that reaches no ``amp.initialize`` in its file, why that does
      not show it never reaches one (its optimizer leaves the file's sight); "" when it does."""
    blocking = [hazard for hazard in hazards if not hazard.loud]  # see Hazard.loud
    facts: dict[str, Any] = {
        "hazards": describe(blocking) if blocking else "",
        "key": _key(call),
        "code": reader.written(call.func),
        "argument": None,
        "why": None,
        "handed_on": "",
    }
    flow = OptimizerFlow.of(reader)
    enabled = [amp for amp in amp_calls if not amp_options(reader, amp, None).disabled]
    argument: str | None = "False"
    why: str | None = None
    amp: ast.AST | None = enabled[0] if len(enabled) == 1 else None
    run_time: str | None = None
    if len(enabled) > 1:
        # Both arms of one `if` (Vit_small's `if args.combine_grad:` ... `else:`): amp runs
        # when that statement runs, unless an arm enables it at run time.
        amp = flow.both_arms(enabled)
        options = [amp_options(reader, each, None) for each in enabled]
        if amp is None or any(each.enabled is NOT_LITERAL for each in options):
            # Else amp runs where any of them does (OSNet's `if cfg.amp:` around `if
            # cfg.use_npu: ... elif cfg.use_gpu: ...`), read at the call as one condition.
            amp = None
            argument, why = _any_amp_argument(flow, call, options)
    elif enabled:
        options = amp_options(reader, enabled[0], None)
        run_time = options.enabled_code if options.enabled is NOT_LITERAL else None
    if amp is not None:
        test = amp_runs_when(flow.guards_only_for(amp, call), run_time)
        if test is None:
            argument = "True"
        else:
            why = unportable_test(flow, call, amp, test, what="the call")
            argument = test if why is None else None
    if not enabled and state.amp_in_sight(path):
        handed = _handed_on(partial(_followed, state, reader, path), reader, call, holders)
        if handed is not None:
            facts["handed_on"] = (
                f"its optimizer is handed on there (`{reader.written(handed)}`, line "
                f"{line_of(handed)}), where npu-migrate does not see whether it goes through "
                "`amp.initialize`"
            )
            argument, why = None, facts["handed_on"]
    suppressions = Suppressions.scan(reader.index.source.text)
    text = reader.index.source.text
    if suppressions.skip_file:
        argument, why = None, f"{_display(path)} is left alone by its `skip-file` comment"
    elif suppressions.covers(call.lineno, KEY_CODE):
        argument, why = None, f"NPU101 is suppressed at {_at(path, call)}"
    elif not any(word in text for word in OPTIMIZER_TRIGGER):
        argument, why = None, f"NPU101 does not look at {_display(path)} (it names no optimizer)"
    facts["argument"], facts["why"] = argument, why
    return facts


def _any_amp_argument(
    flow: OptimizerFlow, call: ast.Call, options: list[AmpOptions]
) -> tuple[str | None, str | None]:
    """amp's condition at ``call`` over several ``amp.initialize`` calls of its function, to
    pass to the factory (``"True"`` when they cover every path); None with why it cannot be
    read at the call (each of them must be after it, with nothing the condition reads changed
    in between)."""
    test = any_amp_condition(flow, options, call)
    if test is None:
        return "True", None
    for each in options:
        why = unportable_test(flow, call, each.call, test, what="the call")
        if why is not None:
            return None, why
    return test, None


def _handed_on(
    followed: Callable[[ast.Call], bool],
    reader: FileView,
    call: ast.Call,
    holders: list[ast.expr] | None = None,
) -> ast.AST | None:
    """Where the optimizer that a factory's ``call`` gives leaves the sight of its file: the
    call returned, yielded or handed to another call directly, stored where the file's reads
    are not followed (a subscript, an unpacking, an attribute other than ``self.<name>``), or,
    through the names and ``self.<name>`` that hold it, given to a call whose effect the file
    does not show (``followed``: the calls it does). None: it stays in sight. ``holders``: the
    targets of an unpacking of the call's result that hold its optimizers (:func:`_holders`);
    the others hold something else."""
    index = reader.index
    for holder in holders or []:
        if isinstance(holder, ast.Name):
            found = escape(reader, holder, followed)
        elif isinstance(holder, ast.Attribute) and _is_self(holder.value):
            found = _self_attribute_handed_on(followed, reader, holder.attr)
        else:
            found = holder
        if found is not None:
            return found
    if holders:
        return None
    parent = index.parent(call)
    if isinstance(parent, ast.Expr):
        return None
    if isinstance(parent, ast.Lambda):
        # `_test_basic_cases(lambda w, b: create_optimizer([w, b], ...))`: the lambda's callers.
        outer = index.parent(parent)
        given = index.parent(outer) if isinstance(outer, ast.keyword) else outer
        if isinstance(given, ast.Call) and given.func is not parent and followed(given):
            return None
        return parent
    if not isinstance(parent, ast.Assign | ast.AnnAssign) or parent.value is not call:
        return parent
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    for target in targets:
        if isinstance(target, ast.Name):
            continue
        if isinstance(target, ast.Attribute) and _is_self(target.value):
            found = _self_attribute_handed_on(followed, reader, target.attr)
            if found is not None:
                return found
            continue
        return target
    return escape(reader, call, followed)


def _self_attribute_handed_on(
    followed: Callable[[ast.Call], bool], reader: FileView, name: str
) -> ast.AST | None:
    """Where a read of ``self.<name>`` in the file hands the optimizer it holds on: anything but
    its own attributes (``self.optimizer.step()``) and a call that ``followed`` sees."""
    index = reader.index
    for read in index.attributes(name):
        if not isinstance(read.ctx, ast.Load) or not _is_self(read.value):
            continue
        parent = index.parent(read)
        if isinstance(parent, ast.Attribute) and parent.value is read:
            continue
        given = index.parent(parent) if isinstance(parent, ast.keyword) else parent
        if isinstance(given, ast.Call) and given.func is not read and followed(given):
            continue
        return given
    return None


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _followed(state: _Link, reader: FileView, path: str, call: ast.Call) -> bool:
    """Calls given an optimizer that do not pass it to an ``amp.initialize`` the file's flow
    does not see: an ``amp.initialize``, an LR scheduler or a GradScaler's step, a function or a
    method (``self.train_epoch(...)``) defined in the file, a function at the top of another
    file of the run whose code never says ``initialize`` (``utils.auto_load_model(...)``; one
    call deep, as the factories' call sites are: where that function hands it on is not
    followed)."""
    if OptimizerFlow.of(reader).is_amp_initialize(call) or takes(reader, call):
        return True
    dotted = reader.qualified_name(call.func)
    if isinstance(dotted, str):
        found = _locate(state, dotted, path)
        other = state.reader(found.path) if isinstance(found, Factory) else None
        if other is None or not isinstance(found, Factory):
            return False
        function = top_level_function(other.index, found.name)
        return function is not None and "initialize" not in other.index.source.segment(function)
    return defined_here(reader, call)


def _with_forwarders(state: _Link, factories: list[Factory]) -> list[Factory]:
    """``factories`` and the functions of their modules that return a call of one of them, or
    whose call one of them returns (timm's ``create_optimizer``, which returns
    ``create_optimizer_v2(...)``): their calls in other files pass amp's condition too when
    NPU101 threads it through both."""
    found = list(factories)
    for factory in factories:
        reader = state.reader(factory.path)
        if reader is None:
            continue
        index = reader.index
        functions = {
            statement.name: statement
            for statement in index.tree.body
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        related = []
        for outer, call in returned_calls(index):
            callee = call.func.id  # type: ignore[attr-defined]
            if callee == factory.name:
                related.append(outer)
            elif outer.name == factory.name and callee in functions:
                related.append(functions[callee])  # the function whose call the factory returns
        for function in related:
            other = Factory(factory.path, function.name, function.lineno)
            if other not in found:
                found.append(other)
    return found


def _other_references(
    state: _Link, reader: FileView, path: str, names: set[str], calls: list[ast.Call]
) -> dict[Factory, tuple[str, bool]]:
    """factory -> where ``path`` (another file than its module) uses it other than by calling
    it (``calls``) or importing it: a value handed on, whose calls npu-migrate does not see, or
    a name that may be it or another function (True then)."""
    called = {id(call.func) for call in calls}
    nodes: list[ast.Name | ast.Attribute] = [
        node for node in reader.index.nodes(ast.Name) if node.id in names
    ]
    for name in names:
        nodes.extend(reader.index.attributes(name))
    found: dict[Factory, tuple[str, bool]] = {}
    for node in nodes:
        if not isinstance(node.ctx, ast.Load) or id(node) in called:
            continue
        dotted = reader.qualified_name(node)
        factory = _function_named(state, reader, path, node, dotted)
        if isinstance(factory, Factory) and factory.path != path:
            found.setdefault(factory, (_at(path, node), False))
        elif factory is None and isinstance(dotted, Ambiguous):
            # A call (or use) whose function cannot be told (star imports, two imports of the
            # name): each factory of the run it may be is handed on there.
            for candidate in dotted.candidates:
                maybe = _locate(state, candidate, path)
                if isinstance(maybe, Factory) and maybe.path != path:
                    found.setdefault(maybe, (_at(path, node), True))
    return found


def _function_named(
    state: _Link,
    reader: FileView,
    path: str,
    node: ast.Name | ast.Attribute,
    dotted: str | Ambiguous | None,
) -> Factory | str | None:
    """The function of the run that ``node`` (resolved to ``dotted``) names in ``path``: by
    its import, or by the star import that exports it; None when it names no one thing."""
    if isinstance(dotted, str):
        return _locate(state, dotted, path)
    if isinstance(dotted, Ambiguous) and isinstance(node, ast.Name):
        return _from_star_imports(state, path, node.id, _star_sources(reader, node))
    return None


def _calls_of(
    state: _Link, reader: FileView, path: str, names: set[str]
) -> Iterator[tuple[ast.Call, Factory]]:
    """The calls in ``path`` (another file than the factory's) of a function named in
    ``names``, with the factory each resolves to."""
    for call in reader.index.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr not in names:
            continue
        if not isinstance(func, ast.Name | ast.Attribute):
            continue
        dotted = reader.qualified_name(func)
        if isinstance(dotted, str):
            called = dotted.rpartition(".")[2]  # the name it was defined with, not an alias
        else:
            called = func.id if isinstance(func, ast.Name) else func.attr
        if called not in names:
            continue
        found = _function_named(state, reader, path, func, dotted)
        if isinstance(found, Factory) and found.path != path:
            yield call, found


def _amp_facts(reader: FileView, path: str, call: ast.Call, site: ast.Call) -> dict[str, Any]:
    """One ``amp.initialize`` call a factory's result reaches from the call ``site``: where,
    whether it is disabled, whether it runs (or enables amp) only under a condition that does
    not also guard the site (``gate``: [test, amp when true, verb]), and for no switch ("") and
    each level NPU102's switch may set: why Ascend apex would refuse an NPU fused optimizer
    there, what must hold at run time, the level set."""
    gate: list[Any] | None = None
    guard = OptimizerFlow.of(reader).guard_only_for(call, site)
    written = amp_options(reader, call, None)
    if guard is not None:
        gate = [guard[0], guard[1], "runs"]
    elif written.enabled is NOT_LITERAL and written.enabled_code is not None:
        gate = [written.enabled_code, True, "enables amp"]
    levels: dict[str, Any] = {}
    disabled = False
    for requested in ("", *OPT_LEVELS):
        options = amp_options(reader, call, requested or None)
        disabled = options.disabled
        levels[requested] = {
            "refusal": options.refuses_fused(_display(path)),
            "computed": options.level_path is not None,
            # A run-time `enabled=` is the gate itself: NPU101 says what it means for the home.
            "notes": options.run_time_notes(with_enabled=gate is None),
            "switch": options.switch,
        }
    return {"at": _at(path, call), "disabled": disabled, "gate": gate, "levels": levels}


# -- verdicts: what a factory returns, after NPU101 ----------------------------------------------


def _verdicts(
    state: _Link, path: str, wanted: set[tuple[Factory, int | None]]
) -> dict[tuple[Factory, int | None], Facts]:
    """For each factory of the module ``path`` and position of its result (None: the whole
    of it): is the optimizer it returns there NPU fused once NPU101 has run there (with the
    call sites just found), and as written?"""
    reader = state.reader(path)
    assert reader is not None  # _top_level parsed it
    index = reader.index
    suppressions = Suppressions.scan(index.source.text)
    if suppressions.skip_file:
        why = f"{_display(path)} is left alone by its `skip-file` comment"
        return {(f, at): _verdict_entry(False, f"{f.shown}: {why}", False, why) for f, at in wanted}
    facts = state.facts.get(path, {})
    view = FileView(index)
    decisions = plan_fused(
        view,
        level=state.switched_level,
        factories=facts.get("factories", {}),
        shared=facts.get("shared", {}),
        suppressions=suppressions,
        amp_always=state.linking.settings.amp is AmpPolicy.ALWAYS,
        lightning=_lightning_doubt(state.linking, path),
        elsewhere=state.handed.get(path, {}),
    )
    plans = {id(rewrite.call): rewrite for rewrite in decisions.rewrites}
    parameters: dict[str, str] = {}
    for rewrite in decisions.rewrites:
        threaded = rewrite.amp_parameter
        if threaded is not None:
            for function in (threaded.function, *(outer for outer, _ in threaded.forwarding)):
                parameters[function.name] = threaded.name
    for name, parameter in parameters.items():
        if name in facts.get("factories", {}):
            _pass_condition(state, path, name, parameter)
    findings = decisions.lines(suppressions)
    verdicts = {
        (factory, at): _verdict(view, factory, plans, findings, path, at)
        for factory, at in sorted(
            wanted, key=lambda pair: (pair[0].name, -1 if pair[1] is None else pair[1])
        )
    }
    # The decisions and the flow hold nodes of the index, which the link stage releases.
    view.release()
    return verdicts


def _pass_condition(state: _Link, path: str, name: str, parameter: str) -> None:
    """The edits of the callers of the factory ``name`` of the module ``path`` that NPU101
    gives the keyword-only ``parameter``: each call passes amp's condition there
    (``factory_arguments`` facts of the caller)."""
    facts = state.of(path, "factories")[name]
    shown = Factory(path, name, facts["line"]).shown
    for site in facts["sites"]:
        state.of(site["path"], "factory_arguments")[site["key"]] = {
            "code": site["code"],
            "keyword": parameter,
            "value": site["argument"],
            "factory": shown,
        }


def _verdict(
    view: FileView,
    factory: Factory,
    plans: Mapping[int, Any],
    findings: set[int],
    path: str,
    position: int | None,
) -> Facts:
    if position is None:
        returned: list[ast.expr] | None = returned_origins(view, factory.name)
    else:
        returned = returned_element_origins(view, factory.name, position)
    # `optimizer = None` on a path that builds none: nothing to combine there.
    origins = [
        origin
        for origin in returned or []
        if not (isinstance(origin, ast.Constant) and origin.value is None)
    ]
    if not origins:
        what = "returns nothing npu-migrate follows"
        if position is not None:
            what = (
                "does not write a tuple in every `return` (`return optimizer, scheduler`), so "
                f"npu-migrate cannot tell what its element {position} is"
            )
        why = f"its optimizer comes from {factory.shown}, which {what}"
        return _verdict_entry(False, why, False, why)
    problems: dict[str, list[str]] = {"planned": [], "written": []}
    # Mapped at run time, a class the mapping leaves out unfused: fused exactly when the
    # optimizer says so (Ascend's `is_npu_fused_optimizer`), which NPU102 can test at the call.
    maybe: list[str] = []
    fused: dict[str, list[str]] = {"planned": [], "written": []}
    standalone: dict[str, list[str]] = {"planned": [], "written": []}  # torch_npu.optim ones
    for origin in origins:
        where = f"{_display(path)}:{origin.lineno}"
        code = view.written(class_of(view, origin) if isinstance(origin, ast.Call) else origin)
        written = (
            npu_fused_name(view, class_of(view, origin)) if isinstance(origin, ast.Call) else None
        )
        plan = plans.get(id(origin))
        if plan is not None and plan.func_style == "lookup" and not plan.mapped_on_every_path:
            # A mapping at the call that may leave a class unmapped: that one stays torch's.
            problem = (
                f"`{code}` ({where}), whose class NPU101 maps to an NPU fused one at run time "
                "(`{...}.get(...)`), and a class the mapping leaves out stays unfused"
            )
            maybe.append(problem)
            problems["written"].append(problem)
        elif written is not None:
            fused["planned"].append(f"`{written}` ({where})")
            fused["written"].append(f"`{written}` ({where})")
            if written.startswith(TORCH_NPU_HOME + "."):
                standalone["planned"].append(f"`{written}` ({where})")
                standalone["written"].append(f"`{written}` ({where})")
        elif plan is not None:
            target = plan.qualified_target
            fused["planned"].append(f"`{code}` ({where}, made `{target}` by NPU101)")
            problems["written"].append(f"`{code}` ({where}), not an NPU fused optimizer")
            if target.startswith(TORCH_NPU_HOME + "."):
                standalone["planned"].append(f"`{target}` ({where}, made so by NPU101)")
        elif isinstance(origin, ast.Call) and _known_optimizer(view, origin):
            finding = ", see NPU101's finding there" if origin.lineno in findings else ""
            problem = f"`{code}` ({where}), which stays unfused{finding}"
            problems["planned"].append(problem)
            problems["written"].append(problem)
        else:
            problem = f"`{code}` ({where}), a value npu-migrate does not follow"
            problems["planned"].append(problem)
            problems["written"].append(problem)
    returns = f"its optimizer comes from {factory.shown}, which returns "
    whys = {
        state: returns + ("; ".join(problems[state]) or " or ".join(fused[state]))
        for state in ("planned", "written")
    }
    if maybe and not problems["planned"]:
        whys["planned"] = returns + "; ".join(maybe)
    entry = _verdict_entry(
        not problems["planned"] and not maybe,
        whys["planned"],
        not problems["written"],
        whys["written"],
    )
    return {**entry, "standalone": standalone, "maybe": bool(maybe) and not problems["planned"]}


def _known_optimizer(view: FileView, call: ast.Call) -> bool:
    """``call`` may build an optimizer NPU101 knows, and so may rewrite: a constructor, a class
    value with several origins (`optim_fn(params, **kw)`, mapped at the call), or a lookup by
    name in ``torch.optim`` or ``apex.optimizers``."""
    name = view.qualified_name_in(class_of(view, call), KNOWN_OPTIMIZERS)
    if isinstance(name, Ambiguous):
        return any(candidate in KNOWN_OPTIMIZERS for candidate in name.candidates)
    if isinstance(name, str):
        return True
    func = call.func
    if isinstance(func, ast.Name):  # `proto = {"adamw": torch.optim.AdamW, ...}[name]`
        origins = OptimizerFlow.of(view).origins(func)
        return any(
            isinstance(view.qualified_name_in(origin, KNOWN_OPTIMIZERS), str)
            for origin in origins
            if origin is not func
        )
    return optimizer_lookup(view, func)  # `getattr(torch.optim, name)` and the like


# -- 3. check: what NPU101 and NPU102 read -------------------------------------------------------


def factory_facts(rule: Rule) -> Mapping[str, Any]:
    """The link stage's facts about the functions of the module ``rule`` checks that other
    files of the run call for an optimizer (name -> line and call sites), for NPU101's planner;
    empty without any."""
    facts: Mapping[str, Any] = rule.project.links(KEY).get(rule.context.path, {})
    return facts.get("factories", {})


def _lightning_doubt(linking: Linking, path: str) -> str | None:
    """Why the Trainers of the run may shard the parameters of the LightningModules of the
    file ``path``; only a file that defines one needs the run's Trainers looked at."""
    summaries = linking.project.summaries(KEY)
    if not summaries.get(path, {}).get("lightning_modules"):
        return lightning.default_doubt()  # no LightningModule there: it is never asked
    return lightning.run_doubt(summaries, path, linking.files.sees)


def lightning_doubt(rule: Rule) -> str | None:
    """Why the run's Lightning Trainers may shard the parameters of the optimizers of the
    LightningModules in the module ``rule`` checks (None: none of them can)."""
    facts: Mapping[str, Any] = rule.project.links(KEY).get(rule.context.path, {})
    return facts.get("lightning", {}).get("doubt", lightning.default_doubt())


def handed_facts(rule: Rule) -> Mapping[str, Any]:
    """The functions and classes of other modules of the run that the module ``rule`` checks
    calls, with their gradient resets (:mod:`~migrator.rules.optimizers._handed`)."""
    return rule.project.links(KEY).get(rule.context.path, {})


def shared_workers(rule: Rule) -> Mapping[str, str]:
    """The functions of the module ``rule`` checks that another file of the run starts as
    hogwild workers on a model in shared memory (name -> where it calls ``share_memory()``)."""
    facts: Mapping[str, Any] = rule.project.links(KEY).get(rule.context.path, {})
    return facts.get("shared", {})


@dataclass(frozen=True)
class FactoryVerdict:
    """What NPU102 knows of an optimizer that a function of another module returns."""

    fused: bool
    why: str
    # The torch_npu.optim fused optimizers among them (as quoted in messages): they pack their
    # own gradients, so `combine_grad=True` is not for them.
    standalone: tuple[str, ...] = ()
    # Not fused on every path only because NPU101 maps its class at run time, leaving some
    # classes unfused: fused exactly when the optimizer is an NPU fused one (planned state).
    maybe: bool = False
    # The callee could not be followed (outside the run, ambiguous, not a top-level function):
    # what it returns is unknown, not seen to be unfused.
    unseen: bool = False


def factory_verdict(
    rule: Rule, call: ast.Call, position: int | None = None
) -> FactoryVerdict | None:
    """The verdict on the optimizer that ``call`` (a call of another module's function) gives,
    as NPU101 leaves it when it runs in this run, as written otherwise; None without facts.
    ``position``: the element of its result unpacked (``optimizer, scheduler = build(cfg)``)."""
    origins = rule.project.links(KEY).get(rule.context.path, {}).get("origins", {})
    entry = origins.get(_key(call))
    if entry is None or entry["code"] != rule.view.written(call.func):
        return None
    if entry.get("position") != position:
        return None
    state = "planned" if rule.read_plan(FusedSwaps) is not None else "written"
    standalone = entry.get("standalone", {}).get(state, [])
    maybe = state == "planned" and bool(entry.get("maybe"))
    unseen = bool(entry.get("unseen"))
    return FactoryVerdict(
        entry["fused"][state], entry["why"][state], tuple(standalone), maybe, unseen
    )


def factory_arguments(rule: Rule) -> Iterator[tuple[ast.Call, Mapping[str, str]]]:
    """In a file that calls another module's factory to which NPU101 gives a keyword-only
    parameter for amp's condition in this run: each call, with the keyword, the value to pass
    and the factory (as quoted)."""
    facts: Mapping[str, Any] = rule.project.links(KEY).get(rule.context.path, {})
    wanted = facts.get("factory_arguments", {})
    if not wanted:
        return
    for call in rule.index.nodes(ast.Call):
        entry = wanted.get(_key(call))
        if entry is None or entry["code"] != rule.view.written(call.func):
            continue
        if all(k.arg != entry["keyword"] for k in call.keywords):
            yield call, entry


class OptimizerFactories:
    """What NPU101 and NPU102 declare for factories in other modules: one summary and one link
    shared under :data:`KEY`, so that either rule selected alone still sees the factories."""

    PROJECT_TRIGGER = PROJECT_TRIGGER
    PROJECT_KEY = KEY

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        return (
            wants_summary(source)
            or _ZEROES in source
            or method_callers.wants_summary(source)
            or lightning.mentions_lightning(source)
            or _names_a_class(source)
        )

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        source = index.source.text.encode()
        view = FileView(index)  # one view: the summaries below share its flow and memos
        facts = dict(summarize(index, module) or {}) if wants_summary(source) else {}
        if _ZEROES in source:
            helpers = zero_grad_helpers(index)
            if helpers:
                facts["zero_grad_helpers"] = helpers
        if method_callers.wants_summary(source):
            methods = method_callers.summarize(index)
            if methods:
                facts["methods"] = methods
        if lightning.mentions_lightning(source):
            facts.update(lightning.summarize(view))
        if method_callers.constructs(source):
            facts.update(handed.summarize(index))
        if _names_a_class(source):
            returning = _returning(view)
            if returning:
                facts["returning"] = returning
            if values_returning(view):
                facts["values_returning"] = True  # the link stage finds the amp it may meet
            wrapped = sorted({name for name, _, _ in wrapped_returning(view).values()})
            if wrapped:
                facts["wrapped_returning"] = wrapped  # ... and for these, the amp of callers
        if method_callers.constructs(source):
            stored = attribute_stores(view)
            if stored:  # the link stage finds the amp that may read them
                refs = sorted({entry.ref for entry in stored.values()}, key=str)
                facts["stored"] = [ref.to_json() for ref in refs]
        return facts or None

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        """The factories' facts and the callers of methods that return an optimizer (each
        part of a file's facts comes from one of the two)."""
        views = FileViews(linking.files)
        handed_code = handed.link(linking, linking.project.summaries(KEY))
        views.release()
        found = {path: dict(facts) for path, facts in handed_code.items()}
        for path, facts in (link(linking, views, handed_code) or {}).items():
            found.setdefault(path, {}).update(facts)
        for path, summary in linking.project.summaries(KEY).items():
            if summary.get("lightning_modules"):
                doubt = _lightning_doubt(linking, path)
                found.setdefault(path, {})["lightning"] = {"doubt": doubt}
        views.release()  # as before: the methods' stage starts with the index bound free
        methods = method_callers.link(linking, linking.project.summaries(KEY), found, views)
        views.release()
        for path, facts in methods.items():
            found.setdefault(path, {}).update(facts)
        return found or None
