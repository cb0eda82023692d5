"""Optimizers that a method returns to other modules of the run, for NPU101. Not a rule itself.

nanoGPT's ``GPT.configure_optimizers`` builds ``torch.optim.AdamW`` and returns it to
``train.py``, which zeroes it with ``optimizer.zero_grad(set_to_none=True)``, a call the NPU fused
optimizers refuse. In the method's own module nothing shows how the optimizer is used; this
module follows it into its callers, through the project facts of
:mod:`migrator.analysis.project`, in three steps:

1. **Summary** (files that name an optimizer, define a class and return something): the methods
   of the module's top-level classes that return an optimizer constructor NPU101 knows.
2. **Link**: every use of such a method's name as an attribute in the files of the run
   (``x.configure_optimizers``) is sorted by what ``x`` is, following the caller's assignments:
   an instance of the method's class (``GPT(conf)``, with the class resolved through the
   caller's imports, ``GPT.from_pretrained(...)`` when that class method returns ``cls(...)``
   or ``GPT(...)``, and the same instance through ``torch.compile(m)``, ``DDP(m)``,
   ``ddp.module``, ``m.to(device)``); an instance of another class, which defines a method of
   that name itself (not a caller); or anything else (a parameter, a subclass that may inherit
   the method, a call in the method's own module, the method used as a value), which leaves the
   method's callers unknown. For each caller the code around the returned optimizer is checked
   as NPU101 checks it in one file (:class:`~migrator.rules.optimizers._hazards.FusionHazards`
   on the returned optimizer, the parameter contract on the receiver's parameters): the only
   hazard accepted is the optimizer's own ``zero_grad(set_to_none=...)``, whose fix (drop the
   argument: the fused optimizers zero in place) the caller's file gets in the same run.
3. **Check**: NPU101 swaps a constructor such a method returns (:func:`method_callers`) only when
   the run holds at least one caller, every use of the name is sorted, and every caller is safe
   as written or after its fixes; in a caller's file it writes those fixes
   (:func:`caller_fixes`). Otherwise the constructor keeps its report, with the reason.

The fixes are decided in the link stage, before either file is checked, on what each file holds:
a caller whose fix would be suppressed (``skip-file``, a suppression of NPU101 on its line)
keeps the constructor unfused, so the constructor's file is never rewritten without its caller's.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.analysis.clipping import class_of
from migrator.analysis.index import ModuleIndex, line_of
from migrator.analysis.project import AmbiguousModule, Facts, FileViews, ProjectFiles
from migrator.analysis.receivers import self_class
from migrator.analysis.view import FileView
from migrator.rule import Linking, Rule
from migrator.rules.optimizers._contract import ParameterContract
from migrator.rules.optimizers._contract import describe as describe_breaks
from migrator.rules.optimizers._flow import OptimizerFlow, escape
from migrator.rules.optimizers._fused_planner import plan_fused
from migrator.rules.optimizers._handed import HandedCode
from migrator.rules.optimizers._hazards import FusionHazards, GradFix, Hazard, describe
from migrator.rules.optimizers._lightning import default_doubt as default_lightning_doubt
from migrator.rules.optimizers._plans import OptLevelSwitch
from migrator.rules.optimizers._tables import KNOWN_OPTIMIZERS, OPTIMIZER_TRIGGER, SOURCES
from migrator.settings import AmpPolicy
from migrator.suppressions import Suppressions

_CODE = "NPU101"
# A file whose text calls none of these builds no optimizer NPU101 knows by name (the summary
# reads a project's files before any is checked: most of them must cost a byte search only).
CONSTRUCTED = ("SGD(", "Adam(", "AdamW(", "Adadelta(", "RMSprop(")
_TRIGGERS = tuple(word.encode() for word in CONSTRUCTED)
# Calls that hand back the module they are given, whose attributes reach the module's own:
# `torch.compile` returns a wrapper that forwards them; DDP's `.module` is the module.
_COMPILERS = frozenset({"torch.compile"})
_WRAPPERS = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
    }
)
# nn.Module methods that return the module itself.
_RETURN_SELF = frozenset(
    {"to", "cuda", "npu", "cpu", "train", "eval", "float", "half", "requires_grad_", "to_empty"}
)
_MAX_DEPTH = 12  # assignments followed back from a receiver
_MAX_REEXPORTS = 4  # `from .model import GPT` in an __init__.py, followed this many times


def _display(path: str) -> str:
    return os.path.normpath(path)


def _key(node: ast.AST) -> str:
    return f"{node.lineno}:{node.col_offset}"  # type: ignore[attr-defined]


# -- 1. summary: methods that return an optimizer -------------------------------------------------


def constructs(source: bytes) -> bool:
    """Does the text call a constructor NPU101 knows by name (a byte search)?"""
    return any(trigger in source for trigger in _TRIGGERS)


def wants_summary(source: bytes) -> bool:
    return b"return" in source and b"class " in source and constructs(source)


def summarize(index: ModuleIndex) -> list[dict[str, Any]]:
    """The methods of the module's top-level classes that return an optimizer NPU101 knows."""
    view = FileView(index)
    classes = [
        statement
        for statement in index.tree.body
        if isinstance(statement, ast.ClassDef)
        and any(_is_constructor(view, node) for node in ast.walk(statement))
    ]
    if not classes:
        return []  # a method returns a constructor of its module; the flow is not needed
    flow = OptimizerFlow.of(view)
    found: list[dict[str, Any]] = []
    for class_def in classes:
        for method in class_def.body:
            if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            constructors = [
                origin
                for origin in _returned(view, flow, method)
                if isinstance(origin, ast.Call) and _is_constructor(view, origin)
            ]
            if constructors:
                entry = {"class": class_def.name, "name": method.name, "line": method.lineno}
                entry["params"] = _fed_by(method, constructors)
                found.append(entry)
    return found


def _fed_by(
    method: ast.FunctionDef | ast.AsyncFunctionDef, constructors: list[ast.Call]
) -> list[Any] | None:
    """``[position, name]`` of the method's parameter that every optimizer it returns is built
    from as it is (few-shot-vid2vid's ``get_optimizer(self, params, ...)`` returning
    ``torch.optim.Adam(params, ...)``), the position counted after ``self`` (None for a
    keyword-only one); None when they are built from anything else (``self.parameters()``)."""
    if method.decorator_list:
        return None  # a static or class method: no `self` to count past
    positional = [a.arg for a in [*method.args.posonlyargs, *method.args.args]][1:]
    keywords = [a.arg for a in method.args.kwonlyargs]
    fed: set[str] = set()
    for constructor in constructors:
        given = constructor.args[0] if constructor.args else None
        if given is None or isinstance(given, ast.Starred):
            given = next((k.value for k in constructor.keywords if k.arg == "params"), None)
        if not isinstance(given, ast.Name) or given.id not in positional + keywords:
            return None
        fed.add(given.id)
    if len(fed) != 1:
        return None
    [name] = fed
    stored = any(
        isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
        for node in ast.walk(method)
    )
    if stored:
        return None  # rebound in the method: not the caller's argument as it is
    return [positional.index(name) if name in positional else None, name]


def _returned(
    view: FileView, flow: OptimizerFlow, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> Iterator[ast.expr]:
    """Where the values ``function`` returns (not its nested functions) come from."""
    for node in view.index.walk(function):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        owner = next((a for a in view.index.ancestors(node) if isinstance(a, _FUNCTIONS)), None)
        if owner is function:
            yield from flow.origins(node.value)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _is_constructor(view: FileView, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = view.qualified_name_in(class_of(view, node), KNOWN_OPTIMIZERS)
    return isinstance(name, str) and name in SOURCES


# -- 2. link: the callers of each method, sorted and judged ---------------------------------------


@dataclass(frozen=True)
class Method:
    """A method of a top-level class that returns an optimizer."""

    path: str
    class_name: str
    name: str
    line: int
    params: tuple[int | None, str] | None = None  # see _fed_by

    @property
    def key(self) -> str:
        return f"{self.class_name}.{self.name}"

    @property
    def shown(self) -> str:
        return f"`{self.key}` ({_display(self.path)}:{self.line})"


def _feeding(entry: Mapping[str, Any]) -> tuple[int | None, str] | None:
    fed = entry.get("params")
    return None if fed is None else (fed[0], fed[1])


_OURS = "ours"
_OTHER = "other"
_NOTHING = "nothing"  # a path that only raises (`gpt.module` on the class itself)


def link(
    linking: Linking,
    summaries: Mapping[str, Facts],
    known: Mapping[str, Facts],
    readers: FileViews,
) -> dict[str, dict[str, Any]]:
    """path -> facts: ``methods`` (key -> callers, verdict) in each method's module,
    ``method_calls`` (position -> the call and the method) in each caller's whose fixes the
    run writes. ``known``: the facts the factories' link found (the planner reads them);
    ``readers``: the files' views the link stage shares."""
    methods = [
        Method(path, entry["class"], entry["name"], entry["line"], _feeding(entry))
        for path, summary in summaries.items()
        for entry in summary.get("methods", [])
    ]
    if not methods:
        return {}
    containing = linking.files.containing(sorted({method.name for method in methods}))
    facts: dict[str, dict[str, Any]] = {}
    safe: dict[Method, _Judged] = {}
    for method in methods:
        judged = _Judge(linking.files, readers, method, known).judge(containing[method.name])
        entry: dict[str, Any] = {
            "callers": judged.callers,
            "why": judged.why,
            "uses": judged.uses,
        }
        entry["fixes"] = [fix for calls in judged.fixes.values() for fix in calls.values()]
        facts.setdefault(method.path, {}).setdefault("methods", {})[method.key] = entry
        if judged.why is None:
            safe[method] = judged
    for path in sorted({method.path for method in safe}):
        swapped = _swapped(linking, readers(path), facts[path]["methods"], known.get(path, {}))
        for method, judged in safe.items():
            if method.path != path or method.key not in swapped:
                continue  # the constructor stays unfused for a reason of its own module
            for caller, codes in judged.codes.items():
                found = facts.setdefault(caller, {}).setdefault("method_calls", {})
                for key, code in codes.items():
                    found[key] = {"code": code, "method": method.shown, "params": method.params}
    return facts


def _swapped(
    linking: Linking,
    view: FileView | None,
    methods: Mapping[str, Any],
    known: Mapping[str, Any],
) -> set[str]:
    """The methods (``Class.name``) of the module of ``view`` that return a constructor NPU101
    swaps in this run, as its planner decides with the link stage's facts: only their callers
    get fixes (a caller fixed for an optimizer that stays unfused would be a change for
    nothing)."""
    if view is None:
        return set()
    suppressions = Suppressions.scan(view.index.source.text)
    if suppressions.skip_file:
        return set()
    switch = linking.plans.get(OptLevelSwitch)
    decisions = plan_fused(
        view,
        level=switch.level if isinstance(switch, OptLevelSwitch) else None,
        factories=known.get("factories", {}),
        shared=known.get("shared", {}),
        suppressions=suppressions,
        amp_always=linking.settings.amp is AmpPolicy.ALWAYS,
        unsafe_fixes=linking.settings.unsafe_fixes,
        methods=methods,
        lightning=known.get("lightning", {}).get("doubt", default_lightning_doubt()),
        elsewhere=known,
    )
    rewritten = {id(rewrite.call) for rewrite in decisions.rewrites}
    flow = OptimizerFlow.of(view)
    swapped: set[str] = set()
    for class_def in view.index.tree.body:
        if not isinstance(class_def, ast.ClassDef):
            continue
        for method in class_def.body:
            if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if any(id(origin) in rewritten for origin in _returned(view, flow, method)):
                swapped.add(f"{class_def.name}.{method.name}")
    return swapped


@dataclass
class _Judged:
    callers: list[str] = field(default_factory=list)  # "train.py:199"
    why: str | None = "no file of this run calls it"  # None: every caller is safe
    # Uses of the name in the run that may be calls of the method (sorted as its calls, or not
    # sorted at all): with none, nothing in the run shows how the optimizer is used.
    uses: int = 0
    # path -> position of a call -> its fixes ("train.py:314"); codes: the calls as written
    fixes: dict[str, dict[str, str]] = field(default_factory=dict)
    codes: dict[str, dict[str, str]] = field(default_factory=dict)


class _Judge:
    def __init__(
        self,
        files: ProjectFiles,
        readers: FileViews,
        method: Method,
        known: Mapping[str, Facts] | None = None,
    ) -> None:
        self.known = known or {}  # the facts found so far (the code other modules' calls reach)
        self.files = files
        self.readers = readers
        self.method = method

    def judge(self, paths: list[str]) -> _Judged:
        judged = _Judged()
        problems: list[str] = []
        for path in sorted(paths):
            if not self.files.sees(path, self.method.path):
                continue  # another project of a monorepo: its objects are not this class's
            view = self.readers(path)
            if view is None:
                problems.append(f"{_display(path)} cannot be parsed")
                continue
            calls: list[ast.Call] = []
            problems += [
                f"`{view.written(node)}` at {_display(path)}:{node.lineno} may name it in a "
                "lookup npu-migrate does not follow"
                for node in view.index.nodes(ast.Constant)
                if node.value == self.method.name
            ]
            for attribute in view.index.attributes(self.method.name):
                sorted_as = self._use(view, path, attribute)
                if sorted_as == _OURS:
                    assert isinstance(view.index.parent(attribute), ast.Call)
                    calls.append(view.index.parent(attribute))  # type: ignore[arg-type]
                elif sorted_as not in (_OTHER, _NOTHING):
                    problems.append(sorted_as)
                judged.uses += sorted_as not in (_OTHER, _NOTHING)
            if calls:
                problems += self._callers(view, path, calls, judged)
        if problems:
            judged.why = "; ".join(problems)
        elif judged.callers:
            judged.why = None
        return judged

    # -- sorting the uses of the name -----------------------------------------------------------

    def _use(self, view: FileView, path: str, attribute: ast.Attribute) -> str:
        """_OURS, _OTHER, or why the use cannot be sorted."""
        where = f"{_display(path)}:{attribute.lineno}"
        code = f"`{view.written(attribute)}`"
        receiver = self._receiver(view, path, attribute.value, set(), 0)
        if receiver in (_OTHER, _NOTHING):
            return _OTHER
        call = view.index.parent(attribute)
        if not isinstance(call, ast.Call) or call.func is not attribute:
            return f"{code} at {where} is used as a value, which npu-migrate does not follow"
        if receiver != _OURS:
            return f"cannot tell whether {code} at {where} calls it: {receiver}"
        if path == self.method.path and self_class(view.index, attribute.value) is None:
            return f"it is called in its own module ({where}), which npu-migrate does not follow"
        return _OURS

    def _receiver(
        self, view: FileView, path: str, expr: ast.expr, seen: set[int], depth: int
    ) -> str:
        """What ``expr`` holds: _OURS, _OTHER, _NOTHING, or why that is not known."""
        receiver = f"`{view.written(expr)}`"
        if depth > _MAX_DEPTH:
            return f"{receiver} comes through more assignments than npu-migrate follows"
        owner = self_class(view.index, expr)
        if owner is not None:
            return self._self_kind(path, owner, receiver)
        flow = OptimizerFlow.of(view)
        if isinstance(expr, ast.Call | ast.Attribute):
            origins: list[ast.expr] = [expr]
        else:
            origins = flow.origins(expr)
        if not origins:
            return f"npu-migrate cannot tell where {receiver} comes from"
        kinds: list[str] = []
        for origin in origins:
            if origin is expr and _unbound_at_top(view, expr):
                continue  # a path where the name is never assigned raises NameError
            if id(origin) in seen:
                continue
            kind = self._origin(view, path, origin, seen | {id(origin)}, depth + 1)
            if kind not in (_OURS, _OTHER, _NOTHING):
                return kind
            kinds.append(kind)
        live = {kind for kind in kinds if kind != _NOTHING}
        if not live:
            return _NOTHING
        if len(live) > 1:
            return f"{receiver} may be a `{self.method.class_name}` or an instance of another class"
        return live.pop()

    def _origin(
        self, view: FileView, path: str, origin: ast.expr, seen: set[int], depth: int
    ) -> str:
        code = f"`{view.written(origin)}`"
        if isinstance(origin, ast.Attribute) and origin.attr == "module":
            return self._unwrapped(view, path, origin.value, seen, depth)
        if not isinstance(origin, ast.Call):
            return f"{code} is not a `{self.method.class_name}` npu-migrate can see built"
        func = origin.func
        if isinstance(func, ast.Attribute) and func.attr in _RETURN_SELF:
            return self._receiver(view, path, func.value, seen, depth)
        name = view.qualified_name(func)
        if isinstance(name, str) and name in _COMPILERS | _WRAPPERS:
            if not origin.args:
                return f"{code} wraps nothing npu-migrate can see"
            return self._receiver(view, path, origin.args[0], seen, depth)
        if isinstance(name, str):
            return self._class_named(name, path, code)
        if isinstance(func, ast.Name) and name is None:
            local = _top_level(view.index.tree.body, func.id)
            if isinstance(local, ast.ClassDef):
                return self._class_kind(path, local, code)
        return f"{code} is not a `{self.method.class_name}` npu-migrate can see built"

    def _unwrapped(
        self, view: FileView, path: str, wrapper: ast.expr, seen: set[int], depth: int
    ) -> str:
        """``wrapper.module``: the module a DDP wrapper holds; on the class itself an
        AttributeError (_NOTHING) when the class never names ``module``."""
        flow = OptimizerFlow.of(view)
        kinds: list[str] = []
        for origin in flow.origins(wrapper) or [wrapper]:
            name = view.qualified_name(origin.func) if isinstance(origin, ast.Call) else None
            if isinstance(origin, ast.Call) and name in _WRAPPERS and origin.args:
                kinds.append(self._receiver(view, path, origin.args[0], seen, depth))
                continue
            kind = self._origin(view, path, origin, seen, depth)
            if kind == _OURS and not self._names_module():
                kind = _NOTHING
            elif kind == _OURS:
                kind = f"`{view.written(wrapper)}.module` may be an attribute of the class"
            kinds.append(kind)
        for kind in kinds:
            if kind not in (_OURS, _OTHER, _NOTHING):
                return kind
        live = {kind for kind in kinds if kind != _NOTHING}
        if len(live) > 1:
            return f"`{view.written(wrapper)}.module` may be a `{self.method.class_name}` or not"
        return live.pop() if live else _NOTHING

    def _names_module(self) -> bool:
        view = self.readers(self.method.path)
        assert view is not None
        class_def = _top_level(view.index.tree.body, self.method.class_name)
        return class_def is None or any(
            isinstance(node, ast.Attribute | ast.Name)
            and (getattr(node, "attr", None) == "module" or getattr(node, "id", None) == "module")
            for node in ast.walk(class_def)
        )

    def _class_named(
        self, dotted: str, importer: str, code: str, hops: int = 0, depth: int = 0
    ) -> str:
        """The class a call of ``dotted`` builds an instance of, sorted (a re-export in a
        package's ``__init__``, ``from .model import GPT``, is followed)."""
        target = self.files.resolve(dotted, importer)
        if isinstance(target, AmbiguousModule):
            return f"cannot tell which file defines `{dotted}` in {code}: {target}"
        if target is None or not target.rest:
            return self._outside(dotted, code)
        view = self.readers(target.module.path)
        if view is None:
            return f"{_display(target.module.path)} cannot be parsed"
        node = _top_level(view.index.tree.body, target.rest[0])
        reexported = _reexport(view.index.tree.body, target.rest[0])
        if node is None and reexported is not None and hops < _MAX_REEXPORTS:
            dotted = ".".join([reexported, *target.rest[1:]])
            return self._class_named(dotted, target.module.path, code, hops + 1, depth)
        if not isinstance(node, ast.ClassDef):
            return f"{code} is not a `{self.method.class_name}` npu-migrate can see built"
        if len(target.rest) == 1:
            return self._class_kind(target.module.path, node, code, depth)
        if (
            len(target.rest) == 2
            and self._is_ours(target.module.path, node)
            and self._builds_instance(view, node, target.rest[1])
        ):
            return _OURS
        return f"{code} is not a `{self.method.class_name}` npu-migrate can see built"

    def _outside(self, dotted: str, code: str) -> str:
        """A callee no file of the run defines: a library's class, which cannot inherit a
        method of the run's, unless it is a builtin (``super()``, ``getattr(...)()``) or bears
        the class's own name (a path npu-migrate does not know may lead to it)."""
        root, name = dotted.partition(".")[0], dotted.rpartition(".")[2]
        if root == "builtins" or name == self.method.class_name:
            return f"{code} is not a `{self.method.class_name}` npu-migrate can see built"
        return _OTHER

    def _self_kind(self, path: str, owner: ast.ClassDef, receiver: str) -> str:
        """``self`` in a method of ``owner``: an instance of ``owner`` or of any subclass, so
        ``self.<name>(...)`` reaches the most derived method of that name. A caller of ours when
        ``owner`` is our class, a base of it (a template method: detectron2's
        ``DefaultTrainer.__init__`` calls ``self.build_optimizer``, which a project's
        ``Trainer`` overrides), a subclass that inherits ours, or a class that a class of the
        run mixes in with ours (``class Trainer(LoggingMixin, Base)``); not one otherwise (no
        instance of it is one of ours)."""
        ours = self._our_class()
        if ours is None:
            return f"{receiver} is not a `{self.method.class_name}` npu-migrate can see built"
        if owner is ours:
            return _OURS
        lineage = self._lineage(path, owner)
        if lineage is None:
            return f"{receiver} is a `{owner.name}`, one of whose bases npu-migrate cannot follow"
        if any(node is ours for node in lineage):
            kind = self._class_kind(path, owner, receiver)
            return _OURS if kind != _OTHER else _OTHER  # inherited, or its own override
        ancestors = self._lineage(self.method.path, ours)
        if ancestors is None:
            return (
                f"{receiver} is a `{owner.name}`, and npu-migrate cannot follow every base of "
                f"`{self.method.class_name}`, which may derive from it"
            )
        if any(node is owner for node in ancestors):
            return _OURS
        # An unrelated class: a subclass of the run may still derive from both (a mixin).
        for sub_path, subclass in self._subclasses(path, owner):
            lineage = self._lineage(sub_path, subclass)
            if lineage is None:
                return (
                    f"{receiver} is a `{owner.name}`, and npu-migrate cannot follow every base "
                    f"of `{subclass.name}` ({_display(sub_path)}:{subclass.lineno}), which may "
                    f"derive from it and from `{self.method.class_name}`"
                )
            if any(node is owner for node in lineage) and any(node is ours for node in lineage):
                return _OURS  # `class Trainer(Mixin, Base)`: the mixin's call reaches ours
        return _OTHER

    def _subclasses(self, path: str, owner: ast.ClassDef) -> Iterator[tuple[str, ast.ClassDef]]:
        """The classes of the run that may derive from ``owner``: those of the files whose
        text names it and whose imports can see its module, ``owner`` left aside."""
        for other in self.files.containing([owner.name])[owner.name]:
            if not self.files.sees(other, path):
                continue
            view = self.readers(other)
            if view is None:
                continue
            for node in view.index.nodes(ast.ClassDef):
                if node is not owner and node.bases:
                    yield other, node

    def _our_class(self) -> ast.ClassDef | None:
        view = self.readers(self.method.path)
        if view is None:
            return None
        found = _top_level(view.index.tree.body, self.method.class_name)
        return found if isinstance(found, ast.ClassDef) else None

    def _lineage(
        self, path: str, class_def: ast.ClassDef, depth: int = 0
    ) -> list[ast.ClassDef] | None:
        """``class_def`` and every class of the run it derives from; None when a base may be a
        class of the run npu-migrate cannot find (a library's classes derive from none)."""
        view = self.readers(path)
        if view is None or depth > _MAX_DEPTH:
            return None
        found = [class_def]
        for base in class_def.bases:
            located = self._located_class(view, path, base)
            if isinstance(located, str):
                continue  # `object`, or a library's class
            if located is None:
                return None
            base_path, base_def = located
            above = self._lineage(base_path, base_def, depth + 1)
            if above is None:
                return None
            found += above
        return found

    def _located_class(
        self, view: FileView, path: str, base: ast.expr
    ) -> tuple[str, ast.ClassDef] | str | None:
        """Where the class ``base`` names is defined in the run; _OTHER for one outside it."""
        if isinstance(base, ast.Subscript):
            base = base.value  # `Generic[T]`, `Base[Config]`
        name = view.qualified_name(base)
        if name == "builtins.object":
            return _OTHER
        if isinstance(base, ast.Name) and name is None:
            local = _top_level(view.index.tree.body, base.id)
            return (path, local) if isinstance(local, ast.ClassDef) else None
        if not isinstance(name, str):
            return None
        target = self.files.resolve(name, path)
        if isinstance(target, AmbiguousModule):
            return None
        if target is None:
            return _OTHER  # a library's class or a builtin (`Exception`, `dict`)
        if not target.rest:
            return None  # a module of the run named as a base
        base_view = self.readers(target.module.path)
        if base_view is None or len(target.rest) != 1:
            return None
        node = _top_level(base_view.index.tree.body, target.rest[0])
        return (target.module.path, node) if isinstance(node, ast.ClassDef) else None

    def _is_ours(self, path: str, class_def: ast.ClassDef) -> bool:
        return (
            os.path.normpath(path) == os.path.normpath(self.method.path)
            and class_def.name == self.method.class_name
        )

    def _class_kind(self, path: str, class_def: ast.ClassDef, code: str, depth: int = 0) -> str:
        """What an instance of ``class_def`` (defined in ``path``) calls by the method's name:
        the method (_OURS: the class itself), another method (_OTHER: one the class or its
        bases define, none of them ours, or none at all), or why that is not known (a subclass
        of the method's class, whose own code the callers' checks do not cover; a base not
        followed)."""
        if self._is_ours(path, class_def):
            return _OURS
        if any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == self.method.name
            for node in class_def.body
        ):
            return _OTHER  # its own method of that name
        may_inherit = (
            f"{code} builds a `{class_def.name}` ({_display(path)}:{class_def.lineno}), which may "
            f"inherit `{self.method.name}`"
        )
        view = self.readers(path)
        if view is None or depth > _MAX_DEPTH:
            return may_inherit
        kinds = [self._base_kind(view, path, base, code, depth + 1) for base in class_def.bases]
        if all(kind == _OTHER for kind in kinds):
            return _OTHER  # no base can give it the method
        return may_inherit

    def _base_kind(self, view: FileView, path: str, base: ast.expr, code: str, depth: int) -> str:
        """What a base class gives its subclasses by the method's name (see _class_kind)."""
        name = view.qualified_name(base)
        if name == "builtins.object":
            return _OTHER
        if isinstance(name, str):
            return self._class_named(name, path, code, depth=depth)
        if isinstance(base, ast.Name) and name is None:
            local = _top_level(view.index.tree.body, base.id)
            if isinstance(local, ast.ClassDef):
                return self._class_kind(path, local, code, depth)
        return f"`{view.written(base)}`, a base of {code}'s class, is not followed"

    def _builds_instance(self, view: FileView, class_def: ast.ClassDef, name: str) -> bool:
        """``Class.name(...)`` is a class method (or static method) of ``class_def`` that
        returns only ``cls(...)`` or ``Class(...)``: nanoGPT's ``GPT.from_pretrained``."""
        function = next(
            (
                node
                for node in class_def.body
                if isinstance(node, ast.FunctionDef) and node.name == name
            ),
            None,
        )
        if function is None:
            return False
        decorators = {dec.id for dec in function.decorator_list if isinstance(dec, ast.Name)}
        if not decorators & {"classmethod", "staticmethod"} or len(function.decorator_list) != 1:
            return False
        first = function.args.args[0].arg if function.args.args else None
        builders = {class_def.name} | ({first} if "classmethod" in decorators and first else set())
        origins = list(_returned(view, OptimizerFlow.of(view), function))
        return bool(origins) and all(
            isinstance(origin, ast.Call)
            and isinstance(origin.func, ast.Name)
            and origin.func.id in builders
            and _top_level(view.index.tree.body, origin.func.id) in (class_def, None)
            for origin in origins
        )

    # -- judging the callers --------------------------------------------------------------------

    def _callers(
        self, view: FileView, path: str, calls: list[ast.Call], judged: _Judged
    ) -> list[str]:
        """Records the calls of the method in ``path`` and their fixes; why they are unsafe."""
        problems: list[str] = []
        suppressions = Suppressions.scan(view.index.source.text)
        fed = {id(call): self.method.params for call in calls}
        found = caller_hazards(view, calls, self.known.get(path, {}), fed)
        for call in calls:
            where = f"{_display(path)}:{call.lineno}"
            judged.callers.append(where)
            if suppressions.skip_file:
                problems.append(f"{_display(path)}, which calls it, is left alone by `skip-file`")
                continue
            hazards, breaks = found[id(call)]
            blocking = [h for h in hazards if not _fixable(h) and not h.loud]  # see Hazard.loud
            if blocking:
                problems.append(f"its caller at {where} uses it where {describe(blocking)}")
                continue
            if breaks:
                problems.append(
                    f"its caller at {where} breaks the fused optimizers' contract (parameters "
                    f"never re-allocated while in use): {breaks}"
                )
                continue
            escaped = escape(view, call)
            if escaped is not None:
                problems.append(
                    f"its caller at {where} hands it on (`{view.written(escaped)}`, line "
                    f"{line_of(escaped)}), where npu-migrate does not see how it is zeroed and "
                    "stepped"
                )
                continue
            if _reaches_amp(view, call):
                problems.append(
                    f"its caller at {where} passes it to `amp.initialize`, whose home for it "
                    "npu-migrate does not choose across a method"
                )
                continue
            fixes = [hazard.fix for hazard in hazards if hazard.fix is not None]
            if fixes and not any(word in view.index.source.text for word in OPTIMIZER_TRIGGER):
                # NPU101 (whose TRIGGER this is) would never run on the file to write them.
                problems.append(
                    f"its caller at {where} needs a fix that npu-migrate does not look for in "
                    f"{_display(path)} (its text names no optimizer)"
                )
                continue
            suppressed = [fix for fix in fixes if suppressions.covers(fix.line, _CODE)]
            if suppressed:
                lines = ", ".join(str(fix.line) for fix in suppressed)
                problems.append(
                    f"its caller at {where} needs a fix at line {lines} of {_display(path)}, "
                    "where NPU101 is suppressed"
                )
                continue
            judged.fixes.setdefault(path, {}).update(
                {_key(fix.call): f"{_display(path)}:{fix.line}" for fix in fixes}
            )
            judged.codes.setdefault(path, {})[_key(call)] = view.written(call.func)
        return problems


def _fixable(hazard: Hazard) -> bool:
    """The optimizer's own ``zero_grad(set_to_none=...)``, fixed by dropping the argument."""
    return hazard.fix is not None and hazard.fix.receiver is None


def _reaches_amp(view: FileView, call: ast.Call) -> bool:
    flow = OptimizerFlow.of(view)
    for sink in flow.amp_sinks:
        if sink.optimizers is not None and any(o is call for o in flow.origins(sink.optimizers)):
            return True
    return False


def caller_hazards(
    view: FileView,
    calls: list[ast.Call],
    elsewhere: Mapping[str, Any],
    fed: Mapping[int, tuple[int | None, str] | None],
) -> dict[int, tuple[list[Hazard], str]]:
    """id(call) -> the hazards around the optimizer each call of a method returns in ``view``,
    and the parameter-contract breaks of its parameters (described, "" without): the argument
    the call gives the method's parameter that the optimizer is built from (``fed``, by
    id(call), see :func:`_fed_by`), else the receiver's parameters. ``elsewhere``: the link
    stage's facts about the code of other modules ``view`` calls."""
    flow = OptimizerFlow.of(view)
    hazards = FusionHazards(
        view,
        flow,
        returned=frozenset(id(call) for call in calls),
        elsewhere=HandedCode(view, elsewhere),
    )
    contract = ParameterContract(view, flow)
    found: dict[int, tuple[list[Hazard], str]] = {}
    for call in calls:
        assert isinstance(call.func, ast.Attribute)
        given = _argument_for(call, fed.get(id(call)))
        if given is not None:
            params: ast.expr = given
        else:  # the method builds its optimizer from the receiver's parameters
            params = ast.Call(
                func=ast.Attribute(value=call.func.value, attr="parameters", ctx=ast.Load()),
                args=[],
                keywords=[],
            )
            ast.copy_location(params, call)
            ast.copy_location(params.func, call)
        breaks = contract.sharding(call, params) or contract.reallocations(call, params)
        found[id(call)] = (hazards.of(call, params), describe_breaks(breaks) if breaks else "")
    return found


def _argument_for(call: ast.Call, fed: tuple[int | None, str] | None) -> ast.expr | None:
    """What ``call`` passes for the parameter ``fed`` (``[position, name]``); None when that is
    not known (no such parameter, a ``*args`` or ``**kwargs`` that may hold it, its default)."""
    if fed is None:
        return None
    position, name = fed
    if any(k.arg is None for k in call.keywords):
        return None
    keyword = next((k.value for k in call.keywords if k.arg == name), None)
    if keyword is not None:
        return keyword
    if position is None or position >= len(call.args):
        return None
    if any(isinstance(arg, ast.Starred) for arg in call.args[: position + 1]):
        return None
    return call.args[position]


def _unbound_at_top(view: FileView, expr: ast.expr) -> bool:
    """``expr`` is a name read at the top of the module where no assignment reaches on some
    path (the if/elif chain of nanoGPT's `init_from` without an else): there it raises
    NameError. Only when every binding of the name in the module is a plain assignment that the
    flow follows (no loop, `with` or `except` target, no unpacking, import, `del` or star import,
    which the flow also answers with the name itself); `exec` and `globals()` are not read."""
    if not isinstance(expr, ast.Name):
        return False
    index = view.index
    if any(isinstance(a, (*_FUNCTIONS, ast.ClassDef)) for a in index.ancestors(expr)):
        return False
    name = expr.id
    for node in index.nodes(ast.ImportFrom) + index.nodes(ast.Import):
        if any(alias.name == "*" or (alias.asname or alias.name) == name for alias in node.names):
            return False
    for kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        if any(node.name == name for node in index.nodes(kind)):  # type: ignore[attr-defined]
            return False
    if any(node.name == name for node in index.nodes(ast.ExceptHandler)):
        return False
    for declaration in index.nodes(ast.Global) + index.nodes(ast.Nonlocal):
        if name in declaration.names:
            return False
    for read in index.names(name):
        if isinstance(read.ctx, ast.Load):
            continue
        parent = index.parent(read)
        plain = (isinstance(parent, ast.Assign) and any(t is read for t in parent.targets)) or (
            isinstance(parent, ast.AnnAssign | ast.NamedExpr)
            and parent.target is read
            and parent.value is not None
        )
        if not plain:
            return False
    return True


def _reexport(body: list[ast.stmt], name: str) -> str | None:
    """``.model.GPT`` for the one ``from .model import GPT`` that binds ``name`` at the top of
    a module (and nothing else does there)."""
    found: list[str] = []
    for statement in body:
        if isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if (alias.asname or alias.name) == name and alias.name != "*":
                    module = "." * statement.level + (statement.module or "")
                    separator = "." if statement.module else ""
                    found.append(f"{module}{separator}{alias.name}")
        elif isinstance(statement, ast.Import):
            if any((alias.asname or alias.name).split(".")[0] == name for alias in statement.names):
                return None
        elif any(
            isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
            for node in ast.walk(statement)
        ):
            return None
    return found[0] if len(found) == 1 else None


def _top_level(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The one statement at the top of a module that binds ``name`` as a class or function."""
    found = [
        statement
        for statement in body
        if isinstance(statement, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and statement.name == name
    ]
    return found[0] if len(found) == 1 else None


# -- 3. check: what NPU101 reads ----------------------------------------------------------------


def methods_facts(rule: Rule, key: str) -> Mapping[str, Any]:
    facts: Mapping[str, Any] = rule.project.links(key).get(rule.context.path, {})
    return facts.get("methods", {})


def caller_fixes(rule: Rule, key: str) -> Iterator[tuple[GradFix, str]]:
    """In a file that calls a method of another module whose optimizer NPU101 swaps in this
    run: the fixes of the calls the link stage found, with the method (as quoted)."""
    facts: Mapping[str, Any] = rule.project.links(key).get(rule.context.path, {})
    wanted = facts.get("method_calls", {})
    if not wanted:
        return
    calls = [
        call
        for call in rule.index.nodes(ast.Call)
        if _key(call) in wanted
        and isinstance(call.func, ast.Attribute)
        and wanted[_key(call)]["code"] == rule.view.written(call.func)
    ]
    fed = {id(call): _feeding(wanted[_key(call)]) for call in calls}
    found = caller_hazards(rule.view, calls, facts, fed)
    for call in calls:
        hazards, _ = found[id(call)]
        for hazard in hazards:
            if hazard.fix is not None and _fixable(hazard):
                yield hazard.fix, wanted[_key(call)]["method"]
