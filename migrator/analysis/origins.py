"""Where a value comes from: the one value-origin analysis of every rule that asks.

``Origins(view, policy).of(expr)`` answers "which expressions may produce the value of
``expr``?" for one file. Names are followed through the definitions that reach the read in
program order (:mod:`migrator.analysis.flow`), so ``device = "cuda"; device = "cpu";
model.to(device)`` reaches only ``"cpu"``; what cannot be followed is itself an origin.

What else the analysis looks through is a :class:`LookThrough` policy, chosen by the asker and
never implied: the optimizer rules follow containers (``amp.initialize(model, [opt_a, opt_b])``),
``self.optimizer`` through the module's assignments and calls of the module's own functions
through their ``return`` values; the device rules follow ``a or b`` and string templates
(``"cuda:{}".format(i)``) but stop at a dictionary, an attribute or a call, whose literals they
report instead of rewriting. The two policies the rules use are :data:`OPTIMIZER_VALUES` and
:data:`DEVICE_VALUES`.

An origin is an ``ast`` node:

- an expression the policy does not look through (a literal, a call, an attribute...);
- a read (``ast.Name`` or ``ast.Attribute``) that stands for a value from where the analysis
  cannot see: a parameter (unless the policy makes parameters origins of their own), a builtin,
  an import, a ``for`` / ``with`` target, an augmented assignment, the value an attribute had
  before the function started;
- an ``ast.arg``: a parameter of the function, when ``LookThrough.parameters`` is set. Another
  analysis can then follow it into the calls of the function (the device rules do, across the
  modules of a run).

The analysis keeps its state per file and policy: build it once through :func:`origins_of`
(``view.memo``), or keep the instance, as :class:`~migrator.rules.optimizers._flow.OptimizerFlow`
does for its pass-through hook.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import cast

from migrator.analysis.calls import string_literal
from migrator.analysis.flow import ENTRY, ReachingDefinitions
from migrator.analysis.index import ModuleIndex, full_name
from migrator.analysis.receivers import (
    ancestor_classes,
    named_class,
    related_classes,
    related_methods,
    self_class,
)
from migrator.analysis.view import FileView

Origin = ast.expr | ast.arg

# `amp.initialize(model, optimizer)`: a call that hands (part of) an argument back. Called with
# the call and, for a tuple unpacking of its result, the position unpacked (None: the whole
# result). Returns the expressions that come back out, or None when the call is no such call.
PassThrough = Callable[[ast.Call, int | None], list[ast.expr] | None]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class LookThrough:
    """What :class:`Origins` looks through to find a value's origins (the policy).

    Names are always followed through the definitions that reach them (every binding of the
    name in its scope where program order cannot be used: a closure, ``global``).
    """

    containers: bool = False
    """``[a, b]``, ``(a, *b)``, ``{a, b}`` give their elements, ``{k: v}`` its values (not a
    ``**other`` entry), ``dict(other, k=v)`` what ``other`` gives and ``v``: "which objects
    may end up in here"."""
    conditionals: bool = True
    """``a if c else b`` gives ``a`` and ``b``."""
    boolean: bool = False
    """``a or b`` / ``a and b`` give ``a`` and ``b`` (either may be the value)."""
    subscripts: bool = False
    """``x[i]`` gives ``x`` (an element of ``x``: used together with ``containers``), and so
    does ``x.get(i)``; ``x.get(i, d)`` gives ``d`` too."""
    walrus: bool = True
    """``(x := v)`` gives ``v``."""
    templates: bool = False
    """``"cuda:{}".format(i)`` and ``"cuda:%d" % i`` give the template literal (written as one
    plain string token); another ``%`` stays an origin."""
    unpacking: bool = True
    """``a, b = x, y`` gives ``b`` the value ``y`` (through names, and through the
    ``pass_through`` hook: ``model, optimizer = amp.initialize(model, optimizer)``)."""
    attributes: bool = False
    """``self.optimizer`` gives the assignments of its own function that reach the read and,
    when its value may come from before the function started, every assignment of an
    attribute spelled so elsewhere in the module (another method). Off: an attribute is an
    origin."""
    local_calls: bool = False
    """``build(cfg)`` / ``self.build(cfg)`` with a callee that resolves to no import gives the
    ``return`` values of every function of the module so named. Off: a call is an origin."""
    parameters: bool = False
    """A name whose reaching definition is a parameter gives that parameter (``ast.arg``) as
    an origin. Off: the read itself stands for the parameter's value, like any value that
    cannot be followed."""
    call_elements: bool = False
    """``optimizer, scheduler = build(cfg)`` with a callee that is not followed (another
    module's function) gives ``optimizer`` the target itself as its origin, which
    :func:`unpacked_element` reads as (the call, position 0): a consumer that knows what the
    callee returns at that position can tell it apart from the others. Off: such a target is
    no origin, and its reads stand for themselves."""


# The optimizer rules: where the optimizers passed to `amp.initialize` are built.
OPTIMIZER_VALUES = LookThrough(containers=True, subscripts=True, attributes=True, local_calls=True)
# The device rules: the literals that reach a device (or backend, or tensor type) position.
DEVICE_VALUES = LookThrough(boolean=True, templates=True, parameters=True)


class Origins:
    """The value-origin analysis of one file under one :class:`LookThrough` policy."""

    def __init__(
        self, view: FileView, policy: LookThrough, pass_through: PassThrough | None = None
    ) -> None:
        self.view = view
        self.index: ModuleIndex = view.index
        self.policy = policy
        self.pass_through = pass_through
        self.reaching = reaching_definitions(view)
        # Keyed by the node itself, not its id: a node made for one question stays alive
        # while its answer is kept, so no later node can take its id.
        self._known: dict[ast.expr, tuple[Origin, ...]] = {}
        self._related_memo: dict[int, set[int]] = {}  # id(class) -> related_classes
        self._stored_memo: dict[ast.Name, list[ast.expr]] = {}  # a container's binding -> fills
        # The unpacking targets that stand for an element of a call's result (call_elements).
        self._elements: set[ast.expr] = set()
        # (id(value), path) being unpacked now: a function that returns a call of itself, or
        # of one that calls it back, cannot be read (and must not recurse without end).
        self._unpacking: set[tuple[int, tuple[int, ...]]] = set()

    def of(self, expr: ast.expr) -> list[Origin]:
        """The origins of ``expr``'s value, each once, in the order they are found (``a if c
        else b``: ``a``'s first). Found once per node: the module does not change."""
        known = self._known.get(expr)
        if known is None:
            found: list[Origin] = []
            self._follow(expr, found, set())
            known = self._known[expr] = tuple(found)
        return list(known)

    def _follow(self, expr: Origin, found: list[Origin], seen: set[int]) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        for part in self._sources_of(expr):
            if part is expr:
                found.append(expr)
            else:
                self._follow(part, found, seen)

    def _sources_of(self, expr: Origin) -> Iterator[Origin]:
        """The expressions one step upstream of ``expr``; ``expr`` itself when it is an origin."""
        policy = self.policy
        if isinstance(expr, ast.arg) or expr in self._elements:
            yield expr
        elif isinstance(expr, ast.Subscript) and isinstance(expr.ctx, ast.Store):
            yield expr  # `X[k] += v`: what a container gets that cannot be read
        elif policy.containers and isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            for element in expr.elts:
                yield element.value if isinstance(element, ast.Starred) else element
        elif policy.containers and isinstance(expr, ast.Dict):
            entries = zip(expr.keys, expr.values, strict=True)
            yield from (value for key, value in entries if key is not None)
        elif policy.containers and self._is_dict_call(expr):
            assert isinstance(expr, ast.Call)
            yield from expr.args  # `dict(other, k=v)`: what `other` holds, and `v`
            yield from (keyword.value for keyword in expr.keywords)
        elif policy.containers and (kept := values_kept(expr)) is not None:
            yield kept  # `{k.lower(): v for k, v in d.items()}`: what `d` holds
        elif policy.subscripts and (got := _dict_get(expr)) is not None:
            yield from got
        elif policy.conditionals and isinstance(expr, ast.IfExp):
            yield expr.body
            yield expr.orelse
        elif policy.boolean and isinstance(expr, ast.BoolOp):
            yield from expr.values
        elif self._passes_whole(expr):
            assert isinstance(expr, (ast.Subscript, ast.NamedExpr))
            yield expr.value
        elif policy.templates and (template := self._template(expr)) is not None:
            yield template
        elif isinstance(expr, ast.Name):
            yield from self._name_sources(expr)
        elif policy.attributes and isinstance(expr, ast.Attribute):
            yield from self._attribute_sources(expr)
        elif isinstance(expr, ast.Call):
            yield from self._call_sources(expr)
        else:
            yield expr

    def _is_dict_call(self, expr: Origin) -> bool:
        """``dict(sgd=torch.optim.SGD, ...)``, the builtin called."""
        return isinstance(expr, ast.Call) and self.view.qualified_name(expr.func) == "builtins.dict"

    def _passes_whole(self, expr: Origin) -> bool:
        """``x[i]`` (an element of ``x``) and ``(x := v)``, when the policy looks through them."""
        if isinstance(expr, ast.Subscript):
            return self.policy.subscripts
        return isinstance(expr, ast.NamedExpr) and self.policy.walrus

    # -- templates -------------------------------------------------------------------------------

    def _template(self, expr: ast.expr) -> ast.Constant | None:
        """The literal of ``"cuda:{}".format(i)`` / ``"cuda:%d" % i``, else None."""
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr == "format"
        ):
            return self._plain_string(expr.func.value)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return self._plain_string(expr.left)
        return None

    def _plain_string(self, node: ast.expr) -> ast.Constant | None:
        """``node`` when it is one plain (not formatted) string literal token."""
        if not isinstance(node, ast.Constant):
            return None
        literal = string_literal(self.view.source, node)
        return node if literal is not None and not literal.is_format else None

    # -- names -----------------------------------------------------------------------------------

    def _name_sources(self, name: ast.Name) -> Iterator[Origin]:
        """The values assigned to ``name`` that reach this read; every binding of the name in
        its scope where program order cannot be used (a closure, ``global``)."""
        definitions = self.reaching.of_name(name)
        if definitions is None:
            definitions = [binding.node or ENTRY for binding in self.index.bindings_of(name)]
        yield from self._definition_sources(name, definitions)

    def _definition_sources(self, read: ast.expr, definitions: list[ast.AST]) -> Iterator[Origin]:
        values: list[Origin] = []
        opaque = not definitions
        for definition in definitions:
            if self.policy.parameters and isinstance(definition, ast.arg):
                values.append(definition)
                continue
            assigned = (
                self._assigned_values(definition)
                if isinstance(definition, (ast.Name, ast.Attribute))
                else None
            )
            if assigned is None:
                opaque = True  # a parameter, an import, a def, a `for` target, a builtin...
                continue
            values.extend(assigned)
            if self.policy.containers and any(map(_container, assigned)):
                assert isinstance(definition, ast.Name | ast.Attribute)
                values.extend(self._stored_into(definition))
        if opaque:
            yield read
        yield from values

    def _stored_into(self, definition: ast.Name | ast.Attribute) -> list[ast.expr]:
        """What the statements of the module put into the container a name is assigned
        (``OPTIMIZERS["sgd"] = torch.optim.SGD``, ``OPTIMIZERS.update(adam=...)``,
        ``optimizers.append(opt)``), wherever they are: the container is one object, so its
        elements are what every such statement stores, in any order. What cannot be read
        (``OPTIMIZERS[k], x = ...``) is itself an origin. ESPnet's ``optim_classes`` gains
        classes with ``.update(...)`` in ``try`` blocks."""
        if not isinstance(definition, ast.Name):
            return []
        known = self._stored_memo.get(definition)
        if known is None:
            known = self._stored_memo[definition] = self._stored_into_once(definition)
        return known

    def _stored_into_once(self, definition: ast.Name) -> list[ast.expr]:
        bindings = self.index.bindings_of(definition)
        if not any(binding.node is definition for binding in bindings):
            return []
        stored: list[ast.expr] = []
        for read in self.index.names(definition.id):
            if not isinstance(read.ctx, ast.Load) or self.index.bindings_of(read) != bindings:
                continue
            parent = self.index.parent(read)
            if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
                statement = self.index.parent(parent)
                if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value:
                    stored.append(statement.value)
                else:
                    stored.append(parent)  # `X[k] += v`, `for X[k] in ...`, an unpacking
                continue
            call = self.index.parent(parent) if isinstance(parent, ast.Attribute) else None
            if not (isinstance(call, ast.Call) and call.func is parent):
                continue
            assert isinstance(parent, ast.Attribute)
            method = parent.attr
            keywords = [keyword.value for keyword in call.keywords]
            if method == "update":  # mappings, and `k=v`
                stored += [arg.value if isinstance(arg, ast.Starred) else arg for arg in call.args]
                stored += keywords
            elif method in ("append", "add", "extend") and call.args:
                stored.append(call.args[0])  # (an iterable's elements, for `extend`)
            elif method in ("setdefault", "insert") and len(call.args) == 2:
                stored.append(call.args[1])
        return stored

    def _assigned_values(self, target: ast.Name | ast.Attribute) -> list[ast.expr] | None:
        """What an assignment to ``target`` stores there; ``None`` when it cannot be told
        (a ``for`` / ``with`` target, an augmented assignment, a starred unpacking)."""
        parent = self.index.parent(target)
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            return [parent.value] if parent.value is not None else None
        if not self.policy.unpacking:
            return None
        path: list[int] = []
        node: ast.AST = target
        while isinstance(parent, (ast.Tuple, ast.List)):
            path.append(next(i for i, e in enumerate(parent.elts) if e is node))
            node, parent = parent, self.index.parent(parent)
        if not isinstance(parent, ast.Assign) or not path:
            return None
        if any(isinstance(e, ast.Starred) for e in ast.walk(node)):
            return None
        path.reverse()
        unpacked = self._unpacked(parent.value, path)
        if (
            unpacked is None
            and self.policy.call_elements
            and unpacked_element(self.index, target) is not None
        ):
            call = parent.value
            assert isinstance(call, ast.Call)
            if not self._local_callees(call):
                self._elements.add(target)
                return [target]
        return unpacked

    def _unpacked(self, value: ast.expr, path: list[int]) -> list[ast.expr] | None:
        """The element at ``path`` of what ``value`` gives when unpacked, or None."""
        key = (id(value), tuple(path))
        if key in self._unpacking:
            return None  # it is its own source: recursion
        self._unpacking.add(key)
        try:
            return self._unpacked_once(value, path)
        finally:
            self._unpacking.discard(key)

    def _unpacked_once(self, value: ast.expr, path: list[int]) -> list[ast.expr] | None:
        position, rest = path[0], path[1:]
        if isinstance(value, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            if position >= len(value.elts):
                return None
            element = value.elts[position]
            return self._unpacked(element, rest) if rest else [element]
        if isinstance(value, ast.Call) and self.pass_through is not None:
            passed = self.pass_through(value, position)
            if passed is not None:
                return passed
        if isinstance(value, ast.Call) and self.policy.local_calls:
            return self._unpacked_returns(value, path)
        if isinstance(value, ast.Name):
            definitions = self.reaching.of_name(value)
            if not definitions or not all(isinstance(d, ast.Name) for d in definitions):
                return None
            assigned: list[ast.expr] = []
            for definition in definitions:
                assert isinstance(definition, ast.Name)
                values = self._assigned_values(definition)
                if values is None:
                    return None
                assigned += values
            return self._unpacked_each(assigned, path)
        return None

    def _unpacked_each(self, values: list[ast.expr], path: list[int]) -> list[ast.expr] | None:
        """The elements at ``path`` of all ``values`` (None when one cannot be read)."""
        found: list[ast.expr] = []
        for value in values:
            unpacked = self._unpacked(value, path)
            if unpacked is None:
                return None
            found.extend(unpacked)
        return found

    # -- calls -----------------------------------------------------------------------------------

    def _call_sources(self, call: ast.Call) -> Iterator[ast.expr]:
        if self.pass_through is not None:
            passed = self.pass_through(call, None)
            if passed is not None:
                yield from passed
                return
        functions = self._local_callees(call) if self.policy.local_calls else None
        if not functions:
            yield call
            return
        for function in functions:
            for value in self._returns_of(function):
                given = self._given_back(call, function, value)
                yield value if given is None else given

    def _given_back(
        self, call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, value: ast.expr
    ) -> ast.expr | None:
        """The argument of ``call`` that ``function`` hands back unchanged: ``value`` (one of its
        ``return`` values) reads a parameter that no path rebinds before it (old detectron2's
        ``maybe_add_gradient_clipping(cfg, optimizer)``, which returns the optimizer it is
        given). None otherwise: another value, a method, or an argument that cannot be matched
        to the parameter (``*args``, ``**kwargs``, a default)."""
        if not isinstance(value, ast.Name) or isinstance(self.index.parent(function), ast.ClassDef):
            return None
        definitions = self.reaching.of_name(value)
        if definitions is None or len(definitions) != 1:
            return None
        [parameter] = definitions
        if not isinstance(parameter, ast.arg):
            return None
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        ):
            return None
        positional = [*function.args.posonlyargs, *function.args.args]
        position = next((i for i, arg in enumerate(positional) if arg is parameter), None)
        if position is not None and position < len(call.args):
            return call.args[position]
        if position is None and all(arg is not parameter for arg in function.args.kwonlyargs):
            return None  # `*args` or `**kwargs` itself
        if position is not None and position < len(function.args.posonlyargs):
            return None  # positional-only, and not passed by position
        return next((k.value for k in call.keywords if k.arg == parameter.arg), None)

    def _unpacked_returns(self, call: ast.Call, path: list[int]) -> list[ast.expr] | None:
        """``a, b = build(cfg)`` with ``build`` a function of the module (or a method reached
        through ``self``) whose every ``return`` gives a tuple or list of known length: the
        element at ``path`` of each; None where one cannot be read."""
        functions = self._local_callees(call)
        if not functions:
            return None
        returned = [self._returns_of(function) for function in functions]
        if not all(returned):
            return None
        return self._unpacked_each([value for values in returned for value in values], path)

    def _local_callees(self, call: ast.Call) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The functions of the module ``call`` may run: those named as its callee
        (``build(cfg)``; ``x.build(cfg)`` by the attribute's name, any function so named),
        through ``self`` the related classes' methods only; only for a callee that resolves to
        no import, and none when none is known (a method inherited from another module)."""
        callee = call.func
        if self.view.qualified_name(callee) is not None:
            return []
        if isinstance(callee, ast.Name):
            name = callee.id
        elif isinstance(callee, ast.Attribute):
            name = callee.attr
            owner = self_class(self.index, callee.value)
            if owner is not None:
                return related_methods(self.index, owner, name, self._related(owner))
        else:
            return []
        return self._functions_named.get(name, [])

    @cached_property
    def _function_returns(self) -> dict[ast.AST, list[ast.expr]]:
        """Each function or method of the module that returns a value -> the values its
        ``return`` statements (not its nested functions') give, in source order."""
        found: dict[ast.AST, list[ast.expr]] = {}
        for statement in self.index.nodes(ast.Return):
            function = function_of(self.index, statement)
            if statement.value is not None and function is not self.index.tree:
                found.setdefault(function, []).append(statement.value)
        return found

    @cached_property
    def _functions_named(self) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
        """Name -> the module's functions and methods of that name that return a value."""
        found: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for function in self._function_returns:
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                found.setdefault(function.name, []).append(function)
        return found

    def _returns_of(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
        return self._function_returns.get(function, [])

    # -- attributes ------------------------------------------------------------------------------

    def _attribute_sources(self, read: ast.Attribute) -> Iterator[Origin]:
        """``self.optimizer``: the assignments of its own function that reach the read, in
        program order; when the value may come from before the function started, also every
        assignment to an attribute spelled so in the rest of the module (another method)."""
        dotted = full_name(read)
        function = function_of(self.index, read)
        local = self.reaching.of_attribute(read, function) if dotted else None
        if local is None:
            local = [ENTRY]
        definitions = [d for d in local if d is not ENTRY]
        if ENTRY in local:
            definitions += [
                target
                for target in self._attribute_targets.get(dotted or "", [])
                if function_of(self.index, target) is not function and self._may_share(read, target)
            ]
        if not definitions and ENTRY in local:
            body, exact = self._class_body_targets(read)
            if body:
                if not exact:
                    yield read  # a subclass of another module may set it otherwise
                yield from self._definition_sources(read, list(body))
                return
        if not definitions:
            yield read
            return
        yield from self._definition_sources(read, definitions)

    def _class_body_targets(self, read: ast.Attribute) -> tuple[list[ast.Name], bool]:
        """``K.OPTIONS`` / ``self.OPTIONS`` that nothing in the module assigns as an attribute
        (``x.OPTIONS = ...``), where a class statement assigns ``OPTIONS = <value>`` in its
        body: the targets of those assignments, and whether they are all it can be. ``K``
        named directly (a class of the module): its own body's, else its bases' in the module.
        ``self`` of a method: the bodies of its class and of the classes related to it, not
        exact (a subclass in another module may assign it too)."""
        if read.attr in self._assigned_attributes:
            return [], False
        owner = self_class(self.index, read.value)
        if owner is not None:
            related = self._related(owner)
            classes = [c for c in self.index.nodes(ast.ClassDef) if id(c) in related]
            return [t for c in classes for t in _body_targets(c, read.attr)], False
        named = named_class(self.index, read.value)
        if named is None:
            return [], False
        own = _body_targets(named, read.attr)
        if own:
            return own, True
        ancestors = ancestor_classes(self.index, named)
        return [t for c in ancestors for t in _body_targets(c, read.attr)], False

    @cached_property
    def _assigned_attributes(self) -> frozenset[str]:
        """The last part of every attribute assigned to in the module."""
        return frozenset(attribute.attr for attribute in _stored_attributes(self.index))

    def _may_share(self, read: ast.Attribute, target: ast.Attribute) -> bool:
        """``self.optimizer`` read in a method of one class and set in a method of another:
        the same attribute only when the two classes are related (see
        :mod:`~migrator.analysis.receivers`); any other spelling may be."""
        reader = self_class(self.index, read.value)
        writer = self_class(self.index, target.value)
        return reader is None or writer is None or id(writer) in self._related(reader)

    def _related(self, owner: ast.ClassDef) -> set[int]:
        found = self._related_memo.get(id(owner))
        if found is None:
            found = self._related_memo[id(owner)] = related_classes(self.index, owner)
        return found

    @cached_property
    def _attribute_targets(self) -> dict[str, list[ast.Attribute]]:
        """``self.optimizer`` -> every attribute spelled so that is assigned to (unpacking
        included), in source order."""
        targets: dict[str, list[ast.Attribute]] = {}
        for attribute in _stored_attributes(self.index):
            dotted = full_name(attribute)
            if dotted is not None:
                targets.setdefault(dotted, []).append(attribute)
        return targets


def reaching_definitions(view: FileView) -> ReachingDefinitions:
    """The file's reaching definitions, shared by every analysis of the file."""
    return view.memo(ReachingDefinitions, lambda: ReachingDefinitions(view.index, prune=view.fast))


def origins_of(view: FileView, policy: LookThrough) -> Origins:
    """The file's analysis under ``policy`` (without a pass-through hook), built once."""
    return view.memo((Origins, policy), lambda: Origins(view, policy))


def function_of(index: ModuleIndex, node: ast.AST) -> ast.AST:
    """The innermost function around ``node``, or the module."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, _FUNCTIONS):
            return ancestor
    return index.tree


def returned_values(
    index: ModuleIndex, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> list[ast.expr]:
    """The values the ``return`` statements of ``function`` itself give (not those of the
    functions nested in it), in source order."""
    return [
        statement.value
        for statement in index.walk(function)
        if isinstance(statement, ast.Return)
        and statement.value is not None
        and function_of(index, statement) is function
    ]


def _stored_attributes(index: ModuleIndex) -> Iterator[ast.Attribute]:
    assignments: list[ast.Assign | ast.AnnAssign] = [*index.nodes(ast.Assign)]
    assignments += index.nodes(ast.AnnAssign)
    assignments.sort(key=lambda node: (node.lineno, node.col_offset))
    for statement in assignments:
        if statement.value is None:
            continue
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        stack = list(reversed(targets))
        while stack:
            target = stack.pop()
            if isinstance(target, ast.Attribute):
                yield target
            elif isinstance(target, (ast.Tuple, ast.List)):
                stack.extend(reversed(target.elts))


def _container(value: ast.expr) -> bool:
    """``value`` builds a container that later statements may fill: a display, a
    comprehension, ``dict(...)`` / ``list(...)`` / ``set(...)`` spelled so."""
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("dict", "list", "set", "OrderedDict", "defaultdict")
    )


def values_kept(expr: Origin) -> ast.expr | None:
    """``d`` for ``{key(k): v for k, v in d.items()}``, a dict of the values of ``d`` under
    new keys (``if`` filters keep some of them); None for any other expression."""
    if not isinstance(expr, ast.DictComp) or len(expr.generators) != 1:
        return None
    [loop] = expr.generators
    target, source = loop.target, loop.iter
    if (
        loop.is_async
        or not isinstance(target, ast.Tuple)
        or len(target.elts) != 2
        or not all(isinstance(element, ast.Name) for element in target.elts)
        or not isinstance(expr.value, ast.Name)
        or expr.value.id != cast(ast.Name, target.elts[1]).id
        or cast(ast.Name, target.elts[0]).id == expr.value.id
    ):
        return None
    if (
        isinstance(source, ast.Call)
        and not source.args
        and not source.keywords
        and isinstance(source.func, ast.Attribute)
        and source.func.attr == "items"
    ):
        return source.func.value
    return None


def _dict_get(expr: Origin) -> list[ast.expr] | None:
    """``x.get(key)`` / ``x.get(key, default)`` read as an element of ``x`` (and the default):
    ``x`` and ``default``; None for any other expression."""
    if not (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "get"
        and 1 <= len(expr.args) <= 2
        and not expr.keywords
        and not any(isinstance(arg, ast.Starred) for arg in expr.args)
    ):
        return None
    return [expr.func.value, *expr.args[1:]]


def _body_targets(owner: ast.ClassDef, name: str) -> list[ast.Name]:
    """The targets ``name`` of the plain assignments in the body of the class ``owner``
    (``OPTIONS = {...}``, ``OPTIONS: dict = {...}``), in source order."""
    found: list[ast.Name] = []
    for statement in owner.body:
        targets: list[ast.expr] = []
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = [statement.target]
        found += [t for t in targets if isinstance(t, ast.Name) and t.id == name]
    return found


def unpacked_element(index: ModuleIndex, target: ast.AST) -> tuple[ast.Call, int] | None:
    """(the call, the position) for ``target`` in ``a, b = call(...)``: one level of
    unpacking, no starred element, one target list."""
    parent = index.parent(target)
    statement = index.parent(parent) if parent is not None else None
    if not (
        isinstance(parent, ast.Tuple | ast.List)
        and isinstance(statement, ast.Assign)
        and statement.targets == [parent]
        and isinstance(statement.value, ast.Call)
        and not any(isinstance(element, ast.Starred) for element in parent.elts)
    ):
        return None
    position = next(i for i, element in enumerate(parent.elts) if element is target)
    return statement.value, position
