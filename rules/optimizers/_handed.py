"""Code of other modules of the run that an optimizer is handed to, for NPU101. Not a rule itself.

NPU101's hazard checks (:mod:`~migrator.rules.optimizers._hazards`) look at the file that builds
the optimizer. Real projects hand it to code elsewhere: openai/guided-diffusion's training loop
calls ``self.mp_trainer.optimize(self.opt)``, and ``MixedPrecisionTrainer`` (in ``fp16_util.py``)
replaces its parameters' ``.grad`` and sets them to None on its fp16 path, which would leave an
NPU fused optimizer stepping stale gradients. This module follows the optimizer one call into
another module of the run, through the project facts of :mod:`migrator.analysis.project`:

1. **Summary** (every file that builds an optimizer NPU101 knows by name): the qualified names
   its calls may reach in the run (names it imports).
2. **Link**: each is resolved from its caller to a function or a class of a file of the run;
   that file is parsed (once per link stage) and summarised: for each top-level function and
   each method of a top-level class, the gradient resets it holds (a store to or ``del`` of
   ``x.grad``, ``x.zero_grad(...)`` with the receiver it zeroes), the calls it makes to the
   module's other functions and to its class's own methods, and what a class stores in
   ``self.<name>`` from its methods' parameters. The caller's facts name the callees that may
   reset gradients and carry those summaries (so a change there re-checks the caller).
3. **Check** (:class:`HandedCode`, read by the hazards): a call of this file that passes the
   optimizer to such a function, to such a class (its constructor), or to a method of an instance
   of such a class, is followed into the callee and, transitively, the module functions and
   methods of the class it calls; every gradient reset met there is a hazard, except the
   optimizer's own ``zero_grad()`` (zeroes the flat buffer in place): through the parameter it
   was passed to, an argument passed on, or an attribute of the class that only ever holds it.
   When the optimizer lands in an attribute of a class, every method of the class is looked at.

The file's own top-level functions and classes are followed the same way (their facts are made
from the file's index at the check); resets in the functions where the optimizer lives are the
hazards' own. Another module's ``x.zero_grad()`` is taken for nn.Module's (sets the gradients to
None since torch 2.0) unless ``x`` holds the optimizer or the call passes
``set_to_none=False``, as in the optimizer's own file. One module deep: a callee that hands the
optimizer on to a third module, an inherited method, or a class reached through a package's
re-export is not followed (as before).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from migrator.analysis.calls import NOT_LITERAL, argument, literal_value
from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import AmbiguousModule, Facts
from migrator.analysis.scopes import BindingKind
from migrator.analysis.view import FileView
from migrator.rule import Linking
from migrator.rules.optimizers._tables import AMP_INITIALIZE
from migrator.suppressions import Suppressions

_CODE = "NPU101"
RESET_TRIGGERS = (".grad", "zero_grad(", "initialize(")
# Roots of names that are never code of the repository (the summary keeps the others).
_LIBRARIES = frozenset(
    {"torch", "apex", "torch_npu", "builtins", "numpy", "os", "sys", "math", "time", "logging"}
)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_INIT = "__init__"
# A keyword argument that a function takes in its `**kwargs`, as a bound parameter.
_KEYWORD = "**{}"

# What a reset does to an NPU fused optimizer, by kind (see _hazards for the mechanism).
DROPS = (
    "drops a gradient from the NPU fused optimizer's flat gradient buffer (it then keeps "
    "stepping with a stale one)"
)
REPLACES = (
    "replaces a gradient tensor, which detaches it from the NPU fused optimizer's flat gradient "
    "buffer (it then keeps stepping with a stale one)"
)
SETS_NONE = (
    "sets the gradients to None{default}, which detaches them from the NPU fused optimizer's "
    "flat gradient buffer (it then keeps stepping with stale gradients)"
)
MODULE_DEFAULT = " (nn.Module.zero_grad's default since torch 2.0)"
# An optimizer handed to code that passes it to apex's `amp.initialize` (a trainer class of
# another module): which NPU fused class it needs depends on that code's amp.
REACHES_AMP = (
    "takes it, and which NPU fused class works depends on that code's amp: Ascend apex's "
    "(`apex.optimizers`) raise in `step()` without amp, and "
    "torch_npu's step stale gradients under it (apex's amp sets the gradients of any other "
    "optimizer to None before each backward)"
)
REFUSES = (
    'raises ValueError in the NPU fused optimizers when it is true ("set_to_none is not '
    'supported in fused optimizers")'
)


def summarize(index: ModuleIndex) -> Facts:
    """``callees``: the qualified names that the calls of a file that builds an optimizer may
    reach in the run."""
    callees = _callees(FileView(index))
    return {"callees": callees} if callees else {}


def _callees(view: FileView) -> list[str]:
    imported = _imported_names(view.index)
    found: set[str] = set()
    for call in view.index.nodes(ast.Call):
        root = call.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id not in imported:
            continue  # only an imported name can reach another module of the run
        name = view.qualified_name(call.func)
        if isinstance(name, str) and name.lstrip(".").split(".", 1)[0] not in _LIBRARIES:
            found.add(name)
    return sorted(found)


@dataclass
class _Unit:
    """A top-level function or a method of a top-level class, while it is summarised."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: ast.ClassDef | None
    resets: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def facts(self) -> dict[str, Any]:
        arguments = self.node.args
        return {
            "line": self.node.lineno,
            "parameters": _parameters(self.node),
            "positional": len(arguments.posonlyargs) + len(arguments.args),
            "keywords": arguments.kwarg is not None,  # takes `**kwargs`
            "resets": self.resets,
            "calls": self.calls,
        }


def _imported_names(index: ModuleIndex) -> set[str]:
    names: set[str] = set()
    statements: list[ast.Import | ast.ImportFrom] = [
        *index.nodes(ast.Import),
        *index.nodes(ast.ImportFrom),
    ]
    for statement in statements:
        for alias in statement.names:
            if alias.name != "*":
                names.add(alias.asname or alias.name.split(".")[0])
    return names


def _code_facts(index: ModuleIndex, keep: bool = False) -> dict[str, Any]:
    """The module's functions and methods with their resets and calls, looked up in the
    module's index (no walk of its own); empty when no function holds a reset, unless ``keep``
    (a module that defines an optimizer wrapper: its class is looked at all the same)."""
    units: dict[int, _Unit] = {}
    names: dict[int, str] = {}
    for statement in index.tree.body:
        if isinstance(statement, _FUNCTIONS):
            units[id(statement)] = _Unit(statement, None)
            names[id(statement)] = statement.name
        elif isinstance(statement, ast.ClassDef):
            for method in statement.body:
                if isinstance(method, _FUNCTIONS):
                    units[id(method)] = _Unit(method, statement)
                    names[id(method)] = f"{statement.name}.{method.name}"
    if not units:
        return {}
    found_reset = keep
    stores: set[int] = set()
    for attribute in index.attributes("grad"):
        if isinstance(attribute.ctx, ast.Load):
            continue
        unit = _unit_of(index, attribute, units)
        store = index.statement_of(attribute)
        if unit is None or store is None or id(store) in stores:
            continue
        if isinstance(store, ast.Assign | ast.AnnAssign | ast.Delete):
            stores.add(id(store))
            unit.resets += _grad_stores(store)
            found_reset = True
    for attribute in index.attributes("zero_grad"):
        call = index.parent(attribute)
        unit = _unit_of(index, attribute, units)
        if unit is None or not isinstance(call, ast.Call) or call.func is not attribute:
            continue
        if (
            _is_self(attribute.value)
            and unit.owner is not None
            and _defines(unit.owner, "zero_grad")
        ):
            continue  # the class's own zero_grad: a call, below
        unit.resets.append(_zero_grad(index, call, _parameters(unit.node)))
        found_reset = True
    if "initialize(" in index.source.text:
        view = FileView(index)
        for attribute in index.attributes("initialize"):
            call = index.parent(attribute)
            unit = _unit_of(index, attribute, units)
            if unit is None or not isinstance(call, ast.Call) or call.func is not attribute:
                continue
            if view.qualified_name(attribute) == AMP_INITIALIZE:
                unit.resets.append(_amp_initialize(call, _parameters(unit.node)))
                found_reset = True
    if not found_reset:
        return {}
    functions = {unit.node.name for unit in units.values() if unit.owner is None}
    for call in index.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Name) and func.id in functions:
            callee = func.id
        elif isinstance(func, ast.Attribute) and _is_self(func.value):
            callee = None  # resolved against the caller's class below
        else:
            continue
        unit = _unit_of(index, call, units)
        if unit is None:
            continue
        if callee is None:
            assert isinstance(func, ast.Attribute)
            if unit.owner is None or not _defines(unit.owner, func.attr):
                continue
            callee = f"{unit.owner.name}.{func.attr}"
        unit.calls.append(_call_facts(call, callee))
    holds: dict[int, dict[str, list[Any]]] = {}  # id(class) -> attribute -> sources
    assignments: list[ast.Assign | ast.AnnAssign | ast.AugAssign] = [
        *index.nodes(ast.Assign),
        *index.nodes(ast.AnnAssign),
        *index.nodes(ast.AugAssign),
    ]
    for assignment in assignments:
        unit = _unit_of(index, assignment, units)
        if unit is not None and unit.owner is not None:
            held = holds.setdefault(id(unit.owner), {})
            for name, parameter in _stored_in_self(assignment, unit.node):
                held.setdefault(name, []).append(parameter and [unit.node.name, parameter])
    classes: dict[str, Any] = {}
    for statement in index.tree.body:
        if isinstance(statement, ast.ClassDef):
            classes[statement.name] = {
                "line": statement.lineno,
                "methods": [m.name for m in statement.body if isinstance(m, _FUNCTIONS)],
                "holds": holds.get(id(statement), {}),
            }
    facts = {names[key]: unit.facts() for key, unit in units.items()}
    return {"functions": facts, "classes": classes}


def _unit_of(index: ModuleIndex, node: ast.AST, units: Mapping[int, _Unit]) -> _Unit | None:
    """The top-level function or method ``node`` is in (nested functions included)."""
    found: _Unit | None = None
    for ancestor in index.ancestors(node):
        unit = units.get(id(ancestor))
        if unit is not None:
            found = unit
    return found


def _defines(owner: ast.ClassDef, name: str) -> bool:
    return any(isinstance(m, _FUNCTIONS) and m.name == name for m in owner.body)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    return [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]


def _grad_stores(statement: ast.Assign | ast.AnnAssign | ast.Delete) -> list[dict[str, Any]]:
    """``x.grad = ...`` and ``del x.grad`` (``x.grad /= n`` works in place: not one)."""
    if isinstance(statement, ast.AnnAssign) and statement.value is None:
        return []  # `x.grad: Tensor` declares, stores nothing
    targets = (
        statement.targets if isinstance(statement, ast.Assign | ast.Delete) else [statement.target]
    )
    value = None if isinstance(statement, ast.Delete) else statement.value
    found: list[dict[str, Any]] = []
    for target in targets:
        for element in _flat(target):
            if not (isinstance(element, ast.Attribute) and element.attr == "grad"):
                continue
            written = ast.unparse(element)
            if value is None:
                found.append({"line": element.lineno, "code": f"del {written}", "kind": "drops"})
            elif isinstance(value, ast.Constant) and value.value is None:
                code = f"{written} = None"
                found.append({"line": element.lineno, "code": code, "kind": "drops"})
            else:
                code = f"{written} = ..."
                found.append({"line": element.lineno, "code": code, "kind": "replaces"})
    return found


def _zero_grad(index: ModuleIndex, call: ast.Call, parameters: list[str]) -> dict[str, Any]:
    assert isinstance(call.func, ast.Attribute)
    flag = argument(call, "set_to_none", 0)
    value = literal_value(flag.value) if flag is not None else None
    if flag is None:
        written_flag = "absent"
    elif value is NOT_LITERAL:
        written_flag = "unknown"
    else:
        written_flag = "true" if value else "false"
    return {
        "line": call.lineno,
        "code": ast.unparse(call),
        "kind": "zero_grad",
        "receiver": _receiver(index, call.func.value, parameters),
        "flag": written_flag,
    }


def _amp_initialize(call: ast.Call, parameters: list[str]) -> dict[str, Any]:
    """An apex ``amp.initialize`` call, with what its optimizers argument names (``p`` or
    ``self.a``, each element of a list or tuple; None for anything else)."""
    given = argument(call, "optimizers", 1)
    value = given.value if given is not None else None
    elements = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    return {
        "line": call.lineno,
        "code": f"{ast.unparse(call.func)}(...)",
        "kind": "amp",
        "receivers": [_spelled(e, parameters) if e is not None else None for e in elements],
    }


def _receiver(index: ModuleIndex, receiver: ast.expr, parameters: list[str]) -> str | None:
    """What a ``zero_grad`` call's receiver is, as :func:`_spelled` writes it; the loop
    variable of ``for op in self.optimizers: op.zero_grad()`` is each of ``self.optimizers``
    (an optimizer held among others zeroes its own gradients there); a name bound once, by
    unpacking a parameter or taking an element of it, is that element: ``optims[1]`` for
    VITS's ``optim_g, optim_d = optims`` (see :func:`_element_of`)."""
    if isinstance(receiver, ast.Name) and receiver.id not in parameters:
        for ancestor in index.ancestors(receiver):
            if isinstance(ancestor, _FUNCTIONS):
                break
            if (
                isinstance(ancestor, ast.For)
                and isinstance(ancestor.target, ast.Name)
                and ancestor.target.id == receiver.id
            ):
                return _spelled(ancestor.iter, parameters)
        element = _element_of(index, receiver, parameters)
        if element is not None:
            return element
    return _spelled(receiver, parameters)


def _element_of(index: ModuleIndex, name: ast.Name, parameters: list[str]) -> str | None:
    """``p[i]`` where ``name``'s one binding is ``..., name, ... = p`` (a flat tuple or list
    target) or ``name = p[i]`` with ``p`` a parameter and ``i`` a literal index; else None.
    The caller side (:func:`elements_held`) says which element of a list it passes holds an
    optimizer."""
    bindings = index.bindings_of(name)
    if len(bindings) != 1 or bindings[0].kind is not BindingKind.ASSIGN:
        return None
    binding = bindings[0]
    if binding.statement is not None:
        value = binding.statement.value
        if (
            isinstance(value, ast.Subscript)
            and isinstance(value.value, ast.Name)
            and _is_parameter(index, value.value, parameters)
            and isinstance(value.slice, ast.Constant)
            and type(value.slice.value) is int
            and value.slice.value >= 0
        ):
            return f"{value.value.id}[{value.slice.value}]"
        return None
    node = binding.node
    if not isinstance(node, ast.Name):
        return None
    target = index.parent(node)
    statement = index.parent(target) if target is not None else None
    if (
        isinstance(target, ast.Tuple | ast.List)
        and isinstance(statement, ast.Assign)
        and statement.targets == [target]
        and isinstance(statement.value, ast.Name)
        and _is_parameter(index, statement.value, parameters)
        and not any(isinstance(e, ast.Starred) for e in target.elts)
    ):
        return f"{statement.value.id}[{target.elts.index(node)}]"
    return None


def _is_parameter(index: ModuleIndex, name: ast.Name, parameters: list[str]) -> bool:
    """``name`` reads a parameter of its function that the function never binds again, nor
    changes through a subscript (``optims[1] = model``) or a method (``optims.insert(...)``),
    nor hands to a call but ``len``: its elements are what the caller wrote."""
    bindings = index.bindings_of(name)
    if name.id not in parameters or len(bindings) != 1:
        return False
    binding = bindings[0]
    if binding.kind is not BindingKind.PARAM:
        return False
    for read in index.names(name.id):
        if index.bindings_of(read) != [binding]:
            continue  # the same name in another function
        parent = index.parent(read)
        if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
            return False
        if isinstance(parent, ast.Attribute) and isinstance(index.parent(parent), ast.Call):
            return False
        if isinstance(parent, ast.keyword) or (
            isinstance(parent, ast.Call)
            and parent.func is not read
            and not (isinstance(parent.func, ast.Name) and parent.func.id == "len")
        ):
            return False  # handed to code that may change it (`random.shuffle(optims)`)
    return True


def elements_held(bound: list[tuple[str, ast.expr]], holds: Callable[[ast.expr], bool]) -> set[str]:
    """``p[i]`` for each element ``i`` of a list or tuple written in the call and bound to the
    parameter ``p`` that ``holds`` (``[optim_g, optim_d]`` passed to VITS's ``optims``)."""
    found: set[str] = set()
    for parameter, value in bound:
        if isinstance(value, ast.List | ast.Tuple):
            for position, element in enumerate(value.elts):
                if isinstance(element, ast.Starred):
                    break
                if holds(element):
                    found.add(f"{parameter}[{position}]")
    return found


def _call_facts(call: ast.Call, callee: str) -> dict[str, Any]:
    """What a call passes: by position (until a ``*args``) and by keyword, each argument as a
    name (``p`` or ``self.a``) or None."""
    positional: list[str | None] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            break
        positional.append(_spelled(arg, None))
    keywords = {k.arg: _spelled(k.value, None) for k in call.keywords if k.arg is not None}
    return {"callee": callee, "args": positional, "keywords": keywords}


def _spelled(node: ast.expr, parameters: list[str] | None) -> str | None:
    """``p`` (a name: a parameter when ``parameters`` are given), ``self.a``, or None."""
    if isinstance(node, ast.Name) and (parameters is None or node.id in parameters):
        return node.id
    if isinstance(node, ast.Attribute) and _is_self(node.value):
        return f"self.{node.attr}"
    return None


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _stored_in_self(
    statement: ast.Assign | ast.AnnAssign | ast.AugAssign,
    method: ast.FunctionDef | ast.AsyncFunctionDef,
) -> Iterator[tuple[str, str | None]]:
    """``self.a = p`` in ``method`` (also ``self.a, self.b = p, q``): (``a``, ``p`` when it is
    a parameter of the method, ``**k`` for ``kwargs["k"]`` or ``kwargs.get("k")`` of its
    ``**kwargs`` (SimCLR's ``self.optimizer = kwargs['optimizer']``), else None), for each
    attribute of ``self`` that ``statement`` stores."""
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    parameters = _parameters(method)
    keywords = method.args.kwarg.arg if method.args.kwarg is not None else None
    for target in targets:
        for element, value in _paired(target, statement.value):
            if not isinstance(element, ast.Attribute) or not _is_self(element.value):
                continue
            source = None
            if isinstance(statement, ast.AugAssign) or value is None:
                pass
            elif isinstance(value, ast.Name) and value.id in parameters:
                source = value.id
            elif keywords is not None and (key := _keyword_read(value, keywords)) is not None:
                source = _KEYWORD.format(key)
            yield element.attr, source


def _keyword_read(value: ast.expr, keywords: str) -> str | None:
    """``k`` for ``kwargs["k"]`` or ``kwargs.get("k")``, ``kwargs`` being ``keywords``."""
    if isinstance(value, ast.Subscript):
        mapping, key = value.value, value.slice
    elif (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "get"
        and len(value.args) == 1
        and not value.keywords
    ):
        mapping, key = value.func.value, value.args[0]
    else:
        return None
    if (
        isinstance(mapping, ast.Name)
        and mapping.id == keywords
        and isinstance(key, ast.Constant)
        and isinstance(key.value, str)
    ):
        return key.value
    return None


def _paired(target: ast.expr, value: ast.expr | None) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """Each name or attribute ``target`` stores, with the part of ``value`` it gets when the
    two are tuples (or lists) of the same length, else None for the parts of a tuple."""
    if isinstance(target, ast.Tuple | ast.List):
        values: list[ast.expr | None] = [None] * len(target.elts)
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
            values = list(value.elts)
        for element, part in zip(target.elts, values, strict=True):
            yield from _paired(element, part)
    else:
        yield target, value


def _flat(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _flat(element)
    else:
        yield target


# -- optimizer wrappers ----------------------------------------------------------------------------

# torch's optimizer base class: a subclass that does not define `zero_grad` inherits its, which
# sets the gradients to None by default (torch >= 2.0).
_OPTIMIZER_BASES = frozenset({"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"})
# The per-parameter state the NPU fused optimizers keep in their flat buffers: storing a new
# tensor under one of these keys leaves the buffer's copy stepping on its own.
_FUSED_STATE = frozenset(
    {
        "momentum_buffer",
        "exp_avg",
        "exp_avg_sq",
        "max_exp_avg_sq",
        "square_avg",
        "acc_delta",
        "step",
    }
)


def optimizer_wrappers(view: FileView) -> dict[str, dict[str, Any]]:
    """The module's top-level subclasses of torch's ``Optimizer``, which may be built around
    another optimizer (timm's ``Lookahead(base_optimizer)``), by name:

    - ``line``: where the class is defined;
    - ``parameter`` / ``attribute``: ``__init__``'s first argument and the one attribute of
      ``self`` that keeps it and nothing else (``self.base_optimizer = base_optimizer``), or None;
    - ``shares_groups``: every ``self.param_groups = ...`` of the class is that optimizer's
      ``param_groups`` (``__init__`` sets it), so what the class zeroes is the wrapped
      optimizer's parameters;
    - ``breaks``: lines that would break an NPU fused optimizer it wraps by replacing what it
      keeps in its flat buffers: a store to or ``del`` of a ``.data``, a store of optimizer
      state, ``state[p]["momentum_buffer"] = ...`` (its gradient resets are the code facts');
    - ``zero_grad``: the class defines its own;
    - ``delegated``: none of that stands in the way of a ``zero_grad`` that runs the wrapped
      optimizer's (:func:`with_delegated_zero_grad`), and NPU101 is not suppressed there: NPU101
      adds it when a file of the run that builds an optimizer calls the class.
    """
    found: dict[str, dict[str, Any]] = {}
    suppressions: Suppressions | None = None
    for statement in view.index.tree.body:
        if not isinstance(statement, ast.ClassDef) or not any(
            view.qualified_name(base) in _OPTIMIZER_BASES for base in statement.bases
        ):
            continue
        init = _method(statement, _INIT)
        parameter = _first_argument(init) if init is not None else None
        attribute = _keeping(statement, parameter) if parameter is not None else None
        shares = attribute is not None and _shares_groups(statement, attribute, parameter)
        breaks = _breaks(statement)
        defines = _defines(statement, "zero_grad")
        if suppressions is None:
            suppressions = Suppressions.scan(view.index.source.text)
        suppressed = suppressions.skip_file or suppressions.covers(statement.lineno, _CODE)
        if statement.name in found:  # defined twice: which one a call builds depends on the run
            found[statement.name]["delegated"] = False
            continue
        found[statement.name] = {
            "line": statement.lineno,
            "parameter": parameter,
            "attribute": attribute,
            "shares_groups": shares,
            "breaks": breaks,
            "zero_grad": defines,
            "delegated": shares and not breaks and not defines and not suppressed,
        }
    return found


def _method(owner: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = [m for m in owner.body if isinstance(m, _FUNCTIONS) and m.name == name]
    return found[0] if len(found) == 1 else None


def _first_argument(init: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The parameter after ``self`` that a call's first positional argument goes to."""
    positional = [*init.args.posonlyargs, *init.args.args]
    return positional[1].arg if len(positional) > 1 else None


def _methods_of(owner: ast.ClassDef) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    return (m for m in owner.body if isinstance(m, _FUNCTIONS))


def _assignments(
    method: ast.FunctionDef | ast.AsyncFunctionDef,
) -> Iterator[ast.Assign | ast.AnnAssign | ast.AugAssign]:
    for node in ast.walk(method):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            yield node


def _keeping(owner: ast.ClassDef, parameter: str) -> str | None:
    """The one attribute of ``self`` that only ever gets ``__init__``'s ``parameter``."""
    sources: dict[str, set[tuple[str, str | None]]] = {}
    for method in _methods_of(owner):
        for assignment in _assignments(method):
            for name, value in _stored_in_self(assignment, method):
                sources.setdefault(name, set()).add((method.name, value))
    keeping = [name for name, got in sources.items() if got == {(_INIT, parameter)}]
    return keeping[0] if len(keeping) == 1 else None


def _shares_groups(owner: ast.ClassDef, attribute: str, parameter: str | None) -> bool:
    """Every store to ``self.param_groups`` in the class is the wrapped optimizer's
    ``param_groups``, and ``__init__`` makes one."""
    in_init = False
    for method in _methods_of(owner):
        for assignment in _assignments(method):
            targets = (
                assignment.targets if isinstance(assignment, ast.Assign) else [assignment.target]
            )
            for target in targets:
                stored = [
                    element
                    for element in _flat(target)
                    if isinstance(element, ast.Attribute)
                    and element.attr == "param_groups"
                    and _is_self(element.value)
                ]
                if not stored:
                    continue
                if isinstance(assignment, ast.AugAssign) or len(targets) != 1 or len(stored) != 1:
                    return False
                if not _groups_of(assignment.value, attribute, parameter, method.name == _INIT):
                    return False
                in_init = in_init or method.name == _INIT
    return in_init


def _groups_of(value: ast.expr | None, attribute: str, parameter: str | None, init: bool) -> bool:
    """``value`` is ``self.<attribute>.param_groups`` (or, in ``__init__``,
    ``<parameter>.param_groups``)."""
    if not isinstance(value, ast.Attribute) or value.attr != "param_groups":
        return False
    held = value.value
    if isinstance(held, ast.Attribute) and held.attr == attribute and _is_self(held.value):
        return True
    return init and isinstance(held, ast.Name) and held.id == parameter


def _breaks(owner: ast.ClassDef) -> list[int]:
    """The lines of the class that store or delete a ``.data``, or store optimizer state the
    NPU fused optimizers keep in their buffers."""
    lines: set[int] = set()
    for method in _methods_of(owner):
        for node in ast.walk(method):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.Delete):
                targets = (
                    node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                )
                for target in targets:
                    lines.update(e.lineno for e in _flat(target) if _breaking(e))
    return sorted(lines)


def _breaking(target: ast.expr) -> bool:
    if isinstance(target, ast.Attribute):
        return target.attr == "data"
    if isinstance(target, ast.Subscript):
        key = target.slice
        return isinstance(key, ast.Constant) and key.value in _FUSED_STATE
    return False


# -- 2. link ---------------------------------------------------------------------------------------


def link(linking: Linking, summaries: Mapping[str, Facts]) -> dict[str, dict[str, Any]]:
    """For each file that builds an optimizer: the callees of its calls that are functions or
    classes of files of the run that may reset gradients or wrap an optimizer (``handed``:
    qualified name -> path and name there), with those files' code facts (``handed_code``:
    path -> facts). A callee's file is parsed here, once, and only when a file that builds an
    optimizer calls into it. For the file of an optimizer wrapper that such a file calls and
    that NPU101 gives a ``zero_grad`` (``delegated``): ``delegates``, class -> the attribute
    that keeps the wrapped optimizer."""
    found: dict[str, dict[str, Any]] = {}
    codes: dict[str, dict[str, Any]] = {}
    for path, summary in summaries.items():
        handed: dict[str, Any] = {}
        code: dict[str, Any] = {}
        for callee in summary.get("callees", []):
            target = linking.files.resolve(callee, path)
            if target is None or isinstance(target, AmbiguousModule) or len(target.rest) != 1:
                continue
            there = codes.get(target.module.path)
            if there is None:
                there = codes[target.module.path] = _code_of(linking, target.module.path)
            name = target.rest[0]
            if not there or (name not in there["functions"] and name not in there["classes"]):
                continue
            handed[callee] = {"path": target.module.path, "name": name}
            code[target.module.path] = there
            wrapper = there.get("wrappers", {}).get(name)
            if wrapper is not None and wrapper["delegated"]:
                delegates = found.setdefault(target.module.path, {}).setdefault("delegates", {})
                delegates[name] = wrapper["attribute"]
        if handed:
            found.setdefault(path, {}).update({"handed": handed, "handed_code": code})
    return found


def _code_of(linking: Linking, path: str) -> dict[str, Any]:
    source = linking.files.index(path)
    if source is None:
        return {}
    text = source.source.text
    wrappers = optimizer_wrappers(FileView(source)) if "Optimizer" in text else {}
    if not wrappers and not any(t in text for t in RESET_TRIGGERS):
        return {}
    facts = _code_facts(source, keep=bool(wrappers)) or {"functions": {}, "classes": {}}
    if wrappers:
        facts["wrappers"] = wrappers
    return facts


# -- 3. check --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reset:
    """A gradient reset met in another module, with the callee it was followed from."""

    path: str | None  # None: the file being checked
    line: int
    code: str
    effect: str
    function: int  # the line of the function or method it is in

    def shown(self) -> str:
        return f"`{self.code}` ({_where(self.path, self.line)}) {self.effect}"


def _where(path: str | None, line: int | None) -> str:
    return f"line {line}" if path is None else f"{os.path.normpath(path)}:{line}"


@dataclass(frozen=True)
class Callee:
    """A function, a class (its constructor) or a method of another module of the run."""

    path: str | None  # None: the file being checked
    name: str  # `f`, `Cls` or `Cls.method`
    facts: Mapping[str, Any]  # that module's code facts

    @property
    def is_class(self) -> bool:
        return self.name in self.facts["classes"]

    @property
    def wrapper(self) -> Mapping[str, Any] | None:
        """What :func:`optimizer_wrappers` found of the class (None: not a subclass of torch's
        Optimizer, a function, or a class of the file being checked)."""
        wrappers: Mapping[str, Any] = self.facts.get("wrappers", {})
        return wrappers.get(self.name) if self.is_class else None

    @property
    def entry(self) -> str:
        """The function the call runs: ``f``, ``Cls.__init__`` or ``Cls.method``."""
        return f"{self.name}.{_INIT}" if self.is_class else self.name

    @property
    def owner(self) -> str | None:
        return (
            self.name if self.is_class else (self.name.split(".")[0] if "." in self.name else None)
        )

    def bind(self, call: ast.Call) -> list[tuple[str, ast.expr]]:
        """The parameters of the function the call runs that its arguments go to (``self``
        skipped for a class or a method; positions up to a ``*args``)."""
        facts = self.facts["functions"].get(self.entry)
        if facts is None:
            return []
        parameters: list[str] = facts["parameters"]
        offset = 1 if self.owner is not None else 0
        bound: list[tuple[str, ast.expr]] = []
        for position, value in enumerate(call.args):
            if isinstance(value, ast.Starred):
                break
            if position + offset < facts["positional"]:
                bound.append((parameters[position + offset], value))
        for keyword in call.keywords:
            if keyword.arg in parameters:
                bound.append((keyword.arg, keyword.value))
            elif keyword.arg is not None and facts.get("keywords"):
                bound.append((_KEYWORD.format(keyword.arg), keyword.value))
        return bound

    def shown(self) -> str:
        line = self.facts["classes"][self.name]["line"] if self.is_class else None
        entry = self.facts["functions"].get(self.entry)
        if line is None and entry is not None:
            line = entry["line"]
        return f"`{self.name}` ({_where(self.path, line)})"


class HandedCode:
    """The code of other functions and classes that the file of ``view`` calls: of other modules
    of the run (the link stage's ``facts``) and of the file itself."""

    def __init__(self, view: FileView, facts: Mapping[str, Any]) -> None:
        self.view = view
        self.handed: Mapping[str, Any] = facts.get("handed", {})
        self.code: Mapping[str, Any] = facts.get("handed_code", {})

    @cached_property
    def local(self) -> Mapping[str, Any]:
        """The file's own functions and classes (empty when none of them resets gradients)."""
        return _code_facts(self.view.index)

    def __bool__(self) -> bool:
        return bool(self.handed or self.local)

    @cached_property
    def method_names(self) -> frozenset[str]:
        """The methods of every class known here, to leave other calls alone at once."""
        facts = [*self.code.values(), self.local] if self.local else list(self.code.values())
        return frozenset(
            name
            for code in facts
            for entry in code["classes"].values()
            for name in entry["methods"]
        )

    def callee(self, func: ast.expr) -> Callee | None:
        """The function or class, of another module or of this file, that ``func`` names."""
        name = self.view.qualified_name(func)
        entry = self.handed.get(name) if isinstance(name, str) else None
        if entry is not None:
            return Callee(entry["path"], entry["name"], self.code[entry["path"]])
        if name is not None or not isinstance(func, ast.Name) or not self.local:
            return None
        bindings = self.view.index.bindings_of(func)
        if len(bindings) != 1 or bindings[0].kind not in (BindingKind.FUNCTION, BindingKind.CLASS):
            return None
        defined = bindings[0].node
        if defined is None or self.view.index.parent(defined) is not self.view.index.tree:
            return None  # a nested function or class: not summarised
        if func.id in self.local["functions"] or func.id in self.local["classes"]:
            return Callee(None, func.id, self.local)
        return None

    def method(self, classes: list[ast.expr], name: str) -> Callee | None:
        """The method ``name`` of the class of another module that every one of ``classes``
        (the calls that built the receiver) instantiates, where that class defines it."""
        found: Callee | None = None
        for origin in classes:
            if not isinstance(origin, ast.Call):
                return None
            callee = self.callee(origin.func)
            if callee is None or not callee.is_class or (found and found.name != callee.name):
                return None
            found = callee
        if found is None or name not in found.facts["classes"][found.name]["methods"]:
            return None
        return Callee(found.path, f"{found.name}.{name}", found.facts)

    def resets(
        self,
        callee: Callee,
        holding: set[str],
        built_with: set[str] | None = None,
        traced_only: bool = False,
    ) -> list[Reset]:
        """The gradient resets that running ``callee`` with the optimizer in its parameters
        ``holding`` may meet (see the module docstring), in the order found; ``built_with``:
        for a method, the parameters of its class's ``__init__`` that the instance was given
        an optimizer in (what they keep in attributes holds it too); ``traced_only``: see
        :func:`_closure` (code that is not given the optimizer)."""
        owner = callee.owner
        attributes = _held_attributes(callee, holding) if owner else set()
        if owner is not None and built_with:
            constructor = Callee(callee.path, owner, callee.facts)
            attributes |= _held_attributes(constructor, built_with)
        entries = [(callee.entry, frozenset(holding))]
        if attributes and owner is not None:
            # The optimizer is kept in the instance: every method may meet it.
            methods = callee.facts["classes"][owner]["methods"]
            entries += [(f"{owner}.{m}", frozenset()) for m in methods]
        return _closure(callee, entries, attributes, traced_only)

    def zeroes_wrapped(self, wrapper: Callee, holding: set[str]) -> bool:
        """The optimizer wrapper class ``wrapper`` (a constructor whose parameters ``holding``
        were given the optimizer) keeps it in an attribute, breaks nothing of an NPU fused
        optimizer, and its ``zero_grad`` is the optimizer's own: one NPU101 adds in this run
        (``delegated``), or its own, which resets nothing but through that optimizer."""
        facts = wrapper.wrapper
        if facts is None or facts["parameter"] not in holding or facts["breaks"]:
            return False
        if facts["delegated"]:
            return True
        return facts["zero_grad"] and self.method_resets(wrapper, holding, "zero_grad") == []

    def method_resets(self, wrapper: Callee, holding: set[str], method: str) -> list[Reset] | None:
        """The resets of ``method`` of the class ``wrapper`` (a constructor whose parameters
        ``holding`` were given the optimizer), where the class defines it (else None): the
        ``zero_grad`` of a project's object built around the optimizer."""
        assert wrapper.owner is not None
        if method not in wrapper.facts["classes"][wrapper.owner]["methods"]:
            return None
        attributes = _held_attributes(wrapper, holding)
        return _closure(wrapper, [(f"{wrapper.owner}.{method}", frozenset())], attributes)


def _closure(
    callee: Callee,
    entries: list[tuple[str, frozenset[str]]],
    attributes: set[str],
    traced_only: bool = False,
) -> list[Reset]:
    """The resets met running ``entries`` (function, parameters holding the optimizer) and what
    they call, ``attributes`` of the callee's class holding it too. ``traced_only`` (code run
    where the optimizer is stepped, but not given it): a ``zero_grad()`` counts only on what
    was passed in or kept in the instance (a module it is given), not on a local value that
    may be an optimizer npu-migrate does not trace."""
    functions: Mapping[str, Any] = callee.facts["functions"]
    owner = callee.owner
    found: list[Reset] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    while entries:
        name, held = entries.pop(0)
        facts = functions.get(name)
        if facts is None or (name, held) in seen:
            continue
        seen.add((name, held))
        in_class = name.split(".")[0] == owner if "." in name else False
        holders = held | {f"self.{a}" for a in attributes} if in_class else held
        for reset in facts["resets"]:
            if traced_only and reset["kind"] == "zero_grad" and reset["receiver"] is None:
                continue
            effect = _effect(reset, holders)
            if effect is not None:
                reset_at = Reset(callee.path, reset["line"], reset["code"], effect, facts["line"])
                found.append(reset_at)
        for call in facts["calls"]:
            target = functions.get(call["callee"])
            if target is None:
                continue
            method = "." in call["callee"]
            entries.append((call["callee"], _passed(call, target, holders, method)))
    return found


def _held_attributes(callee: Callee, holding: set[str]) -> set[str]:
    """The attributes of the callee's class that only ever hold what the entry method's
    parameters ``holding`` were given."""
    owner = callee.owner
    assert owner is not None
    entry = callee.entry.split(".", 1)[1]
    holds: Mapping[str, list[Any]] = callee.facts["classes"][owner]["holds"]
    return {
        attribute
        for attribute, sources in holds.items()
        if sources
        and all(
            source is not None and source[0] == entry and source[1] in holding for source in sources
        )
    }


def _passed(
    call: Mapping[str, Any],
    target: Mapping[str, Any],
    holders: frozenset[str] | set[str],
    method: bool,
) -> frozenset[str]:
    """The parameters of ``target`` that ``call`` passes something held to."""
    parameters: list[str] = target["parameters"]
    offset = 1 if method else 0  # `self.m(x)` passes x to the parameter after `self`
    held: set[str] = set()
    for position, spelled in enumerate(call["args"]):
        slot = position + offset
        if spelled in holders and slot < target["positional"]:
            held.add(parameters[slot])
    for keyword, spelled in call["keywords"].items():
        if spelled in holders and keyword in parameters:
            held.add(keyword)
    return frozenset(held)


def _effect(reset: Mapping[str, Any], holders: frozenset[str] | set[str]) -> str | None:
    """What ``reset`` does to the NPU fused optimizer (None: nothing)."""
    if reset["kind"] == "amp":
        return REACHES_AMP if any(r in holders for r in reset["receivers"]) else None
    if reset["kind"] == "drops":
        return DROPS
    if reset["kind"] == "replaces":
        return REPLACES
    flag = reset["flag"]
    if reset["receiver"] in holders:
        return None if flag in ("absent", "false") else REFUSES
    if flag == "false":
        return None
    if flag == "unknown":
        return SETS_NONE.format(default=" when its `set_to_none` is true")
    return SETS_NONE.format(default=MODULE_DEFAULT if flag == "absent" else "")


# -- the edit in a wrapper's module ----------------------------------------------------------------


def delegated_wrappers(
    view: FileView, facts: Mapping[str, Any]
) -> Iterator[tuple[ast.ClassDef, str]]:
    """The optimizer wrapper classes of the module of ``view`` that the link stage (``facts``,
    the module's) found called by a file of the run that builds an optimizer, and that get a
    ``zero_grad`` running the wrapped optimizer's, with the attribute that keeps it; checked
    again on the module as it is now."""
    wanted: Mapping[str, str] = facts.get("delegates", {})
    if not wanted:
        return
    wrappers = optimizer_wrappers(view)
    for statement in view.index.tree.body:
        if not isinstance(statement, ast.ClassDef) or statement.name not in wanted:
            continue
        entry = wrappers.get(statement.name)
        if (
            entry is not None
            and entry["delegated"]
            and entry["attribute"] == wanted[statement.name]
        ):
            yield statement, entry["attribute"]
