"""Conditions read again at an optimizer's constructor: the NPU1xx rules' test of whether the
condition under which ``amp.initialize`` runs (or a wrapper wraps) has, evaluated earlier at the
constructor, the value it has there, so that the constructor can pick its class by it. Not a rule.

A condition qualifies when evaluating it once more does nothing else and what it reads cannot
change in between: names and attributes the function does not assign there, mappings read by a
constant key (``config["amp"]``, ``cfg["train"]["amp"]``) that nothing there stores into, calls
a method of or hands on, and the process environment (``os.getenv("K")``, ``os.environ["K"]``)
that nothing there writes. In a trainer class whose ``train`` calls ``self.build_model()`` and
then runs amp under ``self.amp``, the flag may be read in ``build_model`` instead.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from migrator.analysis.calls import NOT_LITERAL, literal_value
from migrator.analysis.index import ModuleIndex, line_of
from migrator.analysis.view import FileView
from migrator.rules.optimizers._amp import AmpOptions
from migrator.rules.optimizers._flow import OptimizerFlow
from migrator.rules.optimizers._fp16 import Condition, merged_terms

_PLAIN_TEST_NODES = (
    ast.Name, ast.Attribute, ast.Constant, ast.UnaryOp, ast.Not, ast.BoolOp, ast.And, ast.Or,
    ast.Compare, ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn, ast.Lt, ast.LtE,
    ast.Gt, ast.GtE, ast.Load,
    ast.Tuple, ast.List, ast.Set,  # `args.dtype in ("O1", "O2")`: built anew, nothing else done
)  # fmt: skip


# Calls that may assign any name (``exec``; ``vars()``, ``globals()`` and ``locals()`` give a
# namespace's own dict at module level), and calls that may assign any attribute of what they
# are given (``setattr(args, name, value)``, ``vars(args)``: the instance's ``__dict__``).
_REBINDING_CALLS = frozenset({"exec", "vars", "globals", "locals"})
_ATTRIBUTE_CALLS = frozenset({"setattr", "delattr", "vars"})


def amp_runs_when(guards: Sequence[tuple[str, bool]], enabled_code: str | None) -> str | None:
    """The condition under which an ``amp.initialize`` runs and enables amp, as one expression:
    ``guards`` are the `if` tests around it (innermost first, each with whether it is in the
    body), ``enabled_code`` its run-time ``enabled=``; None when it always does."""
    if len(guards) == 1 and guards[0][1] and enabled_code is None:
        return guards[0][0]
    terms = [and_term(test, in_body) for test, in_body in reversed(guards)]
    if enabled_code is not None:
        terms.append(and_term(enabled_code, True))
    return " and ".join(terms) or None


def any_amp_condition(
    flow: OptimizerFlow, enabled: Sequence[AmpOptions], at: ast.AST
) -> str | None:
    """The condition under which any of several ``amp.initialize`` calls (``enabled``) runs
    and enables amp, seen from ``at``: the tests around each that do not also guard ``at``,
    joined with ``and``, the calls' terms with ``or`` (`if args.amp:` around `if use_npu:` /
    `elif use_gpu:` gives `(args.amp and use_npu) or (args.amp and not use_npu and use_gpu)`,
    simplified where a term holds another); None when together they run on every path."""
    terms: set[frozenset[Condition]] = set()
    order: dict[Condition, int] = {}  # outer tests first, as the single-call gate writes them
    for options in enabled:
        conditions = list(reversed(flow.guards_only_for(options.call, at)))
        if options.enabled is NOT_LITERAL and options.enabled_code is not None:
            conditions.append((options.enabled_code, True))
        for condition in conditions:
            order.setdefault(condition, len(order))
        terms.add(frozenset(conditions))
    terms = merged_terms(terms)
    if frozenset() in terms:
        return None
    parts = [
        " and ".join(and_term(*condition) for condition in sorted(term, key=order.__getitem__))
        for term in sorted(terms, key=lambda term: sorted(order[c] for c in term))
    ]
    return " or ".join(f"({part})" if " and " in part else part for part in parts)


def unportable_test(
    flow: OptimizerFlow, at: ast.AST, amp_call: ast.AST, test: str, what: str = "the constructor"
) -> str | None:
    """Why ``test``, the condition under which ``amp_call`` runs (or enables amp), cannot be
    evaluated at ``at`` (``what``, in messages) instead, with the same value; None when it can:
    both are in the same function, ``amp_call`` after ``at``, and ``test`` reads names,
    attributes, mappings by constant keys and the environment, none of which that function
    changes in between (see the module's docstring)."""
    scope = flow.scope_of(at)
    if scope is not flow.scope_of(amp_call):
        through = _unportable_through_method(flow, at, amp_call, test)
        if through is None:
            return None
        detail = f" ({through})" if through else ""
        return f"`amp.initialize` is not after {what} in the same function{detail}"
    if line_of(amp_call) <= line_of(at):
        return f"`amp.initialize` is not after {what} in the same function"
    between = _Between(flow.view, scope, line_of(at), line_of(amp_call), (at, amp_call))
    expression = _expression(test)
    reads = None if expression is None else between.keyed_reads(expression)
    if expression is None or reads is None:
        return (
            f"`{test}` is not made of names, attributes, constants, comparisons and reads by a "
            'constant key (`config["amp"]`, `os.getenv("AMP")`) only (any other call or '
            "subscript, evaluated once more there, may give another value or do something)"
        )
    return _changed_between(between, expression, reads)


def _changed_between(between: _Between, expression: ast.expr, reads: set[_KeyedRead]) -> str | None:
    """Why what ``expression`` reads (``reads`` by constant keys) may change on the lines of
    ``between``; None when nothing there changes it."""
    changed = _reassigned(between.scope, between.first, between.last, expression)
    if changed == "*":
        return "a `setattr`, `exec` or `vars` call between the two lines may change it"
    if changed is not None:
        return f"`{changed}` may change between the two lines"
    for read in sorted(reads):
        line = between.changed_at(read)
        if line is not None:
            return f"{read.described} may change at line {line}, between the two lines"
    return None


_NOT_PLAIN_METHODS = frozenset({"staticmethod", "classmethod"})


def _unportable_through_method(
    flow: OptimizerFlow, at: ast.AST, amp_call: ast.AST, test: str
) -> str | None:
    """Why ``test`` cannot be read at ``at`` in a method of a class whose other method runs
    ``amp_call`` (a trainer's ``build_model`` called by its ``train``, or by ``__init__``);
    None when it can: the constructor's method is called only as ``self.<method>(...)``, by
    the method of ``amp_call``, before it; ``test`` reads only ``self`` (its attributes and
    what they hold by constant keys), which the constructor's method does not change after
    the constructor, and which may be read at each of those calls instead (the same function
    as ``amp_call``: see :func:`unportable_test`). Empty when the two are not methods of one
    class."""
    index = flow.index
    method, runner = flow.scope_of(at), flow.scope_of(amp_call)
    owner = index.parent(method)
    if not (
        isinstance(owner, ast.ClassDef)
        and isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
        and isinstance(runner, ast.FunctionDef | ast.AsyncFunctionDef)
        and index.parent(runner) is owner
    ):
        return ""
    me = _plain_self(method)
    if me is None or me != _plain_self(runner):
        return f"`{method.name}` and `{runner.name}` are not both plain methods"
    expression = _expression(test)
    if expression is None or any(
        isinstance(node, ast.Name) and node.id != me for node in ast.walk(expression)
    ):
        return f"`{test}` reads more than `{me}`"
    calls: list[ast.Call] = []
    for use in index.attributes(method.name):
        if _own_method_elsewhere(index, use, owner, method.name):
            continue  # `self.<name>` in a class with a method of that name: that one
        call = index.parent(use)
        called = (
            isinstance(call, ast.Call)
            and call.func is use
            and isinstance(use, ast.Attribute)
            and isinstance(use.value, ast.Name)
            and use.value.id == me
            and flow.scope_of(call) is runner
            and line_of(call) < line_of(amp_call)
        )
        if not isinstance(call, ast.Call) or not called:
            return (
                f"`{method.name}` is used at line {use.lineno} otherwise than called by "
                f"`{runner.name}` before `amp.initialize`"
            )
        calls.append(call)
    if not calls or index.names(method.name):
        return f"`{method.name}` is not only called as `{me}.{method.name}(...)` by `{runner.name}`"
    for call in calls:
        why = unportable_test(flow, call, amp_call, test, what=f"the call of `{method.name}`")
        if why is not None:
            return why
    end = method.end_lineno or line_of(at)
    between = _Between(flow.view, method, line_of(at), end, (at,))
    reads = between.keyed_reads(expression)
    if reads is None:
        return f"`{test}` is not made of names, attributes, constants and keyed reads"
    changed = _changed_between(between, expression, reads)
    return None if changed is None else f"in `{method.name}`, {changed}"


def _own_method_elsewhere(index: ModuleIndex, use: ast.AST, owner: ast.ClassDef, name: str) -> bool:
    """``use`` is in a class other than ``owner`` that defines a method ``name`` itself."""
    for ancestor in index.ancestors(use):
        if isinstance(ancestor, ast.ClassDef):
            return ancestor is not owner and any(
                isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
                and statement.name == name
                for statement in ancestor.body
            )
    return False


def _plain_self(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name of the instance parameter of a plain method; None for a static or class
    method, or one without parameters."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Name) and decorator.id in _NOT_PLAIN_METHODS:
            return None
    positional = [*function.args.posonlyargs, *function.args.args]
    return positional[0].arg if positional else None


# The process environment, as a mapping read by `os.getenv("K")`, `os.environ["K"]`, `.get`.
ENVIRONMENT = "os.environ"
_ENVIRONMENT_WRITERS = frozenset({"os.putenv", "os.unsetenv"})
# Methods that only read a mapping (`config.get("amp")`), and calls that only read what they
# are given (`print(config)`, `logger.info(config)`).
_READING_METHODS = frozenset({"get", "keys", "values", "items", "copy"})
_READING_BUILTINS = frozenset(
    f"builtins.{name}"
    for name in ("print", "len", "str", "repr", "format", "bool", "isinstance", "id", "type")
)
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "log"})

# A place in a mapping: its root's dotted parts (or ENVIRONMENT), then the keys and attributes
# read from it, in order: ("config", "train", "amp") for `config["train"]["amp"]`. Keys and
# attributes are alike (an EasyDict's `cfg.TRAIN` is `cfg["TRAIN"]`).
Path = tuple[str | int, ...]


@dataclass(frozen=True, order=True)
class _KeyedRead:
    """A read by constant keys: ``path``, of which the first ``root`` parts are the mapping."""

    path: Path
    root: int

    @property
    def described(self) -> str:
        if self.path[0] == ENVIRONMENT:
            return "the environment"
        return f"`{'.'.join(str(part) for part in self.path[: self.root])}`"

    def touched_by(self, changed: Path) -> bool:
        """A change at ``changed`` (a store there, a method call on it, a call given it) may
        change what this reads: it is in this mapping and one path holds the other."""
        shorter = min(len(changed), len(self.path))
        return len(changed) >= self.root and changed[:shorter] == self.path[:shorter]


class _Between:
    """What ``scope`` runs on lines ``first`` to ``last`` (from the constructor to
    ``amp.initialize``): what a condition reads there by constant keys, and where something
    there may change it."""

    def __init__(
        self, view: FileView, scope: ast.AST, first: int, last: int, ends: tuple[ast.AST, ...]
    ) -> None:
        self.view, self.scope, self.first, self.last = view, scope, first, last
        self.ends = ends  # the constructor and `amp.initialize`: neither changes what it is given
        self._heads: dict[str, str | None] = {}  # see _head_name

    def keyed_reads(self, expression: ast.expr) -> set[_KeyedRead] | None:
        """The reads by constant keys in ``expression`` (``config["train"]["amp"]``,
        ``cfg.get("amp")``, ``os.getenv("AMP")``); None when a part of it is neither such a
        read nor a name, attribute, constant, `not`, `and`/`or` or comparison."""
        reads: set[_KeyedRead] = set()
        for node in ast.walk(expression):
            if isinstance(node, (*_PLAIN_TEST_NODES, ast.USub)):
                continue
            read = self._keyed_read(node)
            if read is None:
                return None
            reads.add(read)
        return reads

    def _keyed_read(self, node: ast.AST) -> _KeyedRead | None:
        if isinstance(node, ast.Subscript):
            path = self._path(node)
            root = self._root_length(node)
            return (
                None
                if path is None or root is None or len(path) <= root
                else _KeyedRead(path, root)
            )
        if not isinstance(node, ast.Call) or not _constant_arguments(node) or not node.args:
            return None
        key = literal_value(node.args[0])
        if not isinstance(key, str | int):
            return None
        if self._full_name(node.func) == "os.getenv":
            return _KeyedRead((ENVIRONMENT, key), 1)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            path = self._path(node.func.value)
            root = self._root_length(node.func.value)
            return None if path is None or root is None else _KeyedRead((*path, key), root)
        return None

    def _path(self, node: ast.expr) -> Path | None:
        """Where ``node`` is: its root's dotted parts and the constant keys and attributes read
        from it; a key that is not a constant ends the path there (``config[k]["a"]`` is
        somewhere in ``config``). None when it is not names, attributes and subscripts, or
        names the environment otherwise than ``os.environ``."""
        parts: list[str | int] = []
        while isinstance(node, ast.Subscript | ast.Attribute):
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
            else:
                key = literal_value(node.slice)
                if isinstance(key, str | int):
                    parts.append(key)
                else:
                    parts.clear()
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        path: Path = (node.id, *reversed(parts))
        full = self._full_name(node)
        if full == "?":
            return None
        if full is None:
            return path
        dotted = [*full.split("."), *path[1:]]
        if dotted[:2] == ["os", "environ"]:
            return (ENVIRONMENT, *dotted[2:])
        return None if dotted[0] == "os" else path

    def _root_length(self, node: ast.expr) -> int | None:
        """How many parts of ``node``'s path name the mapping it reads: those before its first
        subscript (``self.cfg`` of ``self.cfg["train"]["amp"]``), or all of them (the receiver
        of ``.get``, ``self.cfg`` of ``self.cfg.get("amp")``)."""
        mapping, part = node, node
        while isinstance(part, ast.Subscript | ast.Attribute):
            if isinstance(part, ast.Subscript):
                mapping = part.value
            part = part.value
        path = self._path(mapping)
        return None if path is None else len(path)

    def _full_name(self, node: ast.expr) -> str | None:
        """The qualified name of the dotted name ``node`` where its head is imported, read
        from that head's uses on these lines; None when its head is not imported; "?" when it
        cannot be told."""
        dotted = _dotted(node)
        if "?" in dotted:
            return "?"
        head, _, rest = dotted.partition(".")
        qualified = self._head_name(head)
        if qualified is None or qualified == "?":
            return qualified
        return f"{qualified}.{rest}" if rest else qualified

    def _head_name(self, head: str) -> str | None:
        """What the name ``head`` is bound to on these lines (see :meth:`_full_name`),
        resolved once per name: :meth:`changed_at` asks for every call on the lines."""
        if head not in self._heads:
            found = {
                self.view.qualified_name(name)
                for name in self.view.index.names(head)
                if self.first <= name.lineno <= self.last
            }
            [qualified] = found if len(found) == 1 else ["?"]
            self._heads[head] = None if qualified is None else _str_or_unknown(qualified)
        return self._heads[head]

    def changed_at(self, read: _KeyedRead) -> int | None:
        """The first line where something between the two ends may change what ``read``
        reads: a store into its mapping or what it holds (by key or attribute), a method call
        on them other than a read, a call given them (other than builtins and log calls that
        only read); for the environment also ``os.putenv`` and ``os.unsetenv``."""
        for node in ast.walk(self.scope):
            line = getattr(node, "lineno", None)
            if line is None or not self.first <= line <= self.last:
                continue
            stored = isinstance(node, ast.Subscript | ast.Attribute) and not isinstance(
                node.ctx, ast.Load
            )
            if stored and self._touches(cast(ast.expr, node), read):
                return line
            if isinstance(node, ast.Call) and self._changes(node, read):
                return line
        return None

    def _changes(self, call: ast.Call, read: _KeyedRead) -> bool:
        func = call.func
        if any(call is end for end in self.ends):
            return False
        if self._full_name(func) in _ENVIRONMENT_WRITERS and read.path[0] == ENVIRONMENT:
            key = literal_value(call.args[0]) if call.args else None
            return not isinstance(key, str) or read.touched_by((ENVIRONMENT, key))
        method = func.attr if isinstance(func, ast.Attribute) else None
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if (
            receiver is not None
            and method not in _READING_METHODS
            and self._touches(receiver, read)  # `config.update(...)`
        ):
            return True
        if method in _LOG_METHODS or self._full_name(func) in _READING_BUILTINS:
            return False  # `logger.info(config)`, `print(config)`
        given = [*call.args, *(keyword.value for keyword in call.keywords)]
        return any(
            self._touches(arg.value if isinstance(arg, ast.Starred) else arg, read) for arg in given
        )

    def _touches(self, node: ast.expr, read: _KeyedRead) -> bool:
        path = self._path(node)
        return path is not None and read.touched_by(path)


def _str_or_unknown(qualified: object) -> str:
    """A qualified name, or "?" for an ``Ambiguous`` one."""
    return qualified if isinstance(qualified, str) else "?"


def _is_dotted(node: ast.expr) -> bool:
    return "?" not in _dotted(node)


def _constant_arguments(call: ast.Call) -> bool:
    """Only constants passed, positionally or by keyword (`os.getenv("K", "0")`)."""
    given = [*call.args, *(keyword.value for keyword in call.keywords)]
    return all(
        not isinstance(arg, ast.Starred) and literal_value(arg) is not NOT_LITERAL for arg in given
    ) and all(keyword.arg is not None for keyword in call.keywords)


def _reassigned(scope: ast.AST, first: int, last: int, expression: ast.expr) -> str | None:
    """The first name or dotted attribute that ``expression`` reads and ``scope`` may assign on
    lines ``first`` to ``last``; ``"*"`` when a `setattr`, `exec` or `vars` call there may change
    anything; None when nothing it reads changes there."""
    stored = _stored_between(scope, first, last)
    names = {node.id for node in ast.walk(expression) if isinstance(node, ast.Name)}
    attributes = {_dotted(node) for node in ast.walk(expression) if isinstance(node, ast.Attribute)}
    if "*" in stored or ("." in stored and attributes):
        return "*"
    changed = sorted((names | attributes) & stored)
    return changed[0] if changed else None


def unreadable_test(
    view: FileView, scope: ast.AST, built: ast.stmt, wrap: ast.stmt, test: str
) -> str | None:
    """Why ``test`` (the wrap's condition) may not have the value at ``built`` that it has at
    ``wrap``: a part other than names, attributes, constants, comparisons, ``len(x)`` and
    ``x[i]``; something it reads assigned in between; an ``x`` that may be changed in place
    (read otherwise than ``x[i]`` and ``len(x)``, or not a new list or tuple of its own)."""
    expression = _expression(test)
    if expression is None:
        return f"npu-migrate cannot read `{test}`"
    bases: set[str] = set()
    for node in ast.walk(expression):
        if isinstance(node, (*_PLAIN_TEST_NODES, ast.USub)):
            continue
        base = _read_base(node)
        if base is None:
            return (
                f"`{test}` is not made of names, attributes, constants, comparisons, `len(x)` "
                "and `x[i]` only"
            )
        bases.add(base)
    for node in view.index.names("len"):
        between = built.lineno <= node.lineno <= wrap.lineno
        if between and view.qualified_name(node) != "builtins.len":
            return f"`len` at line {node.lineno} is not the builtin"
    changed = _reassigned(scope, built.lineno, wrap.lineno, expression)
    if changed == "*":
        return "a `setattr`, `exec` or `vars` call before the wrap may change what it reads"
    if changed is not None:
        return f"`{changed}` may change between the constructor and the wrap"
    for base in sorted(bases):
        problem = _changed_in_place(view.index, scope, built, base)
        if problem is not None:
            return problem
    return None


def _read_base(node: ast.AST) -> str | None:
    """``x`` of ``x[i]`` (a constant index) or of ``len(x)``; None for any other node."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return node.value.id if isinstance(literal_value(node.slice), int) else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Name)
    ):
        return node.args[0].id
    return None


# What builds a new list or tuple that nothing else holds: `opt_lower.split("_")`, `list(...)`.
_NEW_SEQUENCES = frozenset({"split", "rsplit", "splitlines", "list", "tuple", "sorted"})


def _changed_in_place(index: ModuleIndex, scope: ast.AST, built: ast.stmt, base: str) -> str | None:
    """Why the sequence ``base`` of ``scope`` may change in place before the wrap reads it;
    None when each of its assignments (all before ``built``) makes a new sequence and it is
    only read as ``base[i]`` and ``len(base)``."""
    for node in ast.walk(scope):
        if not isinstance(node, ast.Name) or node.id != base:
            continue
        parent = index.parent(node)
        line = node.lineno
        if isinstance(node.ctx, ast.Load):
            if parent is not None and _read_base(parent) == base:
                continue
            return f"`{base}` is used at line {line} otherwise than `{base}[i]` or `len({base})`"
        if line >= built.lineno:
            return f"`{base}` is assigned at line {line}, after the constructor"
        if not (
            isinstance(parent, ast.Assign)
            and parent.targets == [node]
            and _new_sequence(parent.value)
        ):
            return f"`{base}` (line {line}) may be a sequence that other code holds too"
    return None


def _new_sequence(value: ast.expr) -> bool:
    """A list or tuple display, a string, or a call of :data:`_NEW_SEQUENCES`."""
    if isinstance(value, ast.List | ast.Tuple | ast.ListComp | ast.Constant):
        return True
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute):
        return func.attr in _NEW_SEQUENCES
    return isinstance(func, ast.Name) and func.id in _NEW_SEQUENCES


def and_operand(test: str, holds: bool) -> str:
    """``test`` (or its negation) as one operand of ``and``, parenthesized only where it must
    be, or where ``not`` would read as applying to part of it."""
    expression = _expression(test)
    if holds:
        loose = isinstance(expression, ast.BoolOp | ast.IfExp | ast.Lambda | ast.NamedExpr)
        return f"({test})" if loose and not _and_of(expression) else test
    tight = isinstance(expression, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
    return f"not {test}" if tight else f"not ({test})"


def _and_of(expression: ast.expr | None) -> bool:
    return isinstance(expression, ast.BoolOp) and isinstance(expression.op, ast.And)


def and_term(test: str, holds: bool) -> str:
    """``test`` (or its negation) as one operand of ``and``."""
    expression = _expression(test)
    simple = isinstance(
        expression, ast.Name | ast.Attribute | ast.Constant | ast.Call | ast.Subscript
    )
    operand = test if simple else f"({test})"
    return operand if holds else f"not {operand}"


def _expression(code: str) -> ast.expr | None:
    try:
        return ast.parse(code, mode="eval").body
    except SyntaxError:
        return None


def _plain_test(test: ast.expr) -> bool:
    """Names, attributes, constants, `not`, `and`/`or` and comparisons: no call, no subscript,
    so evaluating it once more, earlier, reads the same values and does nothing else."""
    return all(isinstance(node, _PLAIN_TEST_NODES) for node in ast.walk(test))


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def calls_function(store: ast.stmt, call: ast.Call) -> bool:
    """``store`` assigns the result of a call of the function ``call`` calls (by name)."""
    value = store.value if isinstance(store, ast.Assign | ast.AnnAssign) else None
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and isinstance(call.func, ast.Name)
        and value.func.id == call.func.id
    )


def stores_of(scope: ast.AST, name: str, first: int, last: int) -> list[ast.stmt]:
    """The statements of ``scope`` on lines ``first`` to ``last`` that assign ``name``."""
    found: list[ast.stmt] = []
    for node in ast.walk(scope):
        if not isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            continue
        if not first <= node.lineno <= last:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        if name in names:
            found.append(node)
    return found


def _stored_between(scope: ast.AST, first: int, last: int) -> set[str]:
    """Names and dotted attributes that ``scope`` assigns or deletes on lines ``first`` to
    ``last``; ``"*"`` when something there may rebind any name (``exec``, ``vars()``), ``"."``
    when something may set any attribute (``setattr(x, ...)``, ``vars(x)``)."""
    stored: set[str] = set()
    for node in ast.walk(scope):
        line = getattr(node, "lineno", None)
        if line is None or not first <= line <= last:
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stored.add(node.id)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            stored.add(_dotted(node))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            stored.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.ExceptHandler):
            stored.add(node.name or "")
        elif isinstance(node, ast.Call) and _dotted(node.func) in _ATTRIBUTE_CALLS and node.args:
            stored.add(".")  # some object's attributes (the object may go by another name)
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func) in _REBINDING_CALLS | {"setattr", "delattr"}
            and not _namespace_read(scope, node)
        ):
            stored.add("*")
    return stored


_NAMESPACE_READS = frozenset({"get", "keys", "values", "items", "copy"})


def _namespace_read(scope: ast.AST, call: ast.Call) -> bool:
    """``"ckpt" in locals()``, ``globals().get(name)``, ``vars()[name]``: a namespace's dict
    read where it is made, which changes nothing."""
    if call.args or call.keywords or _dotted(call.func) not in {"vars", "globals", "locals"}:
        return False
    parent = next(
        (
            node
            for node in ast.walk(scope)
            if any(child is call for child in ast.iter_child_nodes(node))
        ),
        None,
    )
    if isinstance(parent, ast.Compare):
        return any(comparator is call for comparator in parent.comparators) and all(
            isinstance(op, ast.In | ast.NotIn) for op in parent.ops
        )
    if isinstance(parent, ast.Subscript):
        return isinstance(parent.ctx, ast.Load)
    return isinstance(parent, ast.Attribute) and parent.attr in _NAMESPACE_READS
