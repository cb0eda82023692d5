"""The keys an optimizer constructor receives through ``**mapping``, as far as the module shows
them. Not a rule.

NPU101 rewrites ``torch.optim.AdamW(groups, lr=lr, **extra_args)`` when every key that can
arrive there either means the same to the NPU fused class or makes it raise at construction.
:func:`forwarded_keys` reads what the flow shows of the mapping: the dict displays and
``dict(...)`` calls assigned to the name on every path that reaches the call (through
``a if c else b``), and the keys added to it in the same scope (``kw["foreach"] = True``,
``kw.update(fused=True)``, ``kw.setdefault("fused", True)``). Each key comes with how to drop
it where it is written, for the performance-only switches the NPU classes do not take. What
the flow cannot show (a parameter, ``self.optimizer_config``, ``dict(**other)``, a computed
key) makes the reading incomplete: the rule then relies on the NPU classes' signatures alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from migrator.analysis.calls import arguments
from migrator.analysis.clipping import class_of
from migrator.analysis.index import line_of
from migrator.analysis.origins import reaching_definitions
from migrator.analysis.scopes import Scope, ScopeKind
from migrator.analysis.view import FileView
from migrator.rules.optimizers._tables import KNOWN_OPTIMIZERS

_MUTATORS = frozenset({"update", "setdefault"})
# Calls that only turn their arguments into text: `print` to stdout (no `file=`), and the
# logging module's functions.
_SHOWING = frozenset(
    {
        "builtins.print",
        "builtins.len",
        "builtins.repr",
        "builtins.str",
        "logging.debug",
        "logging.info",
        "logging.warning",
    }
)


@dataclass(frozen=True)
class KeyDrop:
    """How to remove one key where it is written.

    ``kind``: ``"item"`` (entry ``index`` of the dict display ``node``), ``"keyword"`` (keyword
    ``index`` among the arguments of the call ``node``: ``dict(...)`` or ``kw.update(...)``),
    ``"statement"`` (the statement ``node``: ``kw["fused"] = True``, ``kw.setdefault(...)``, or a
    ``kw.update(...)`` left with nothing to add).
    """

    kind: str
    node: ast.AST
    index: int = 0


@dataclass(frozen=True)
class ForwardedKey:
    key: str
    value: ast.expr
    drop: KeyDrop | None  # None: it cannot be dropped where it is written

    @property
    def line(self) -> int:
        return line_of(self.value)


@dataclass(frozen=True)
class ForwardedKeys:
    """What the flow shows of one ``**mapping`` argument."""

    code: str  # the mapping as written (`extra_args`)
    keys: tuple[ForwardedKey, ...]
    complete: bool  # every key that can arrive is among ``keys``
    in_every_arm: frozenset[str]  # keys every path puts there (empty when incomplete)
    other_use: ast.AST | None  # a use of the mapping that its keys cannot be dropped for


def forwarded_keys(view: FileView, mapping: ast.expr, call: ast.Call) -> ForwardedKeys:
    """The keys ``**mapping`` can pass to ``call``."""
    reader = _Reader(view, call)
    arms = reader.arms(mapping)
    keys = tuple(reader.keys)
    complete = reader.complete and arms is not None
    every = frozenset.intersection(*arms) if complete and arms else frozenset()
    every = frozenset() if "*" in reader.popped else every - reader.popped
    return ForwardedKeys(view.written(mapping), keys, complete, every, reader.other_use)


class _Reader:
    def __init__(self, view: FileView, call: ast.Call) -> None:
        self.view = view
        self.index = view.index
        self.call = call
        self.keys: list[ForwardedKey] = []
        self.complete = True
        self.other_use: ast.AST | None = None
        self.popped: set[str] = set()  # keys a `pop` may take out ("*": any)
        self._seen_names: set[str] = set()

    def arms(self, value: ast.expr) -> list[frozenset[str]] | None:
        """The key sets of the paths that build ``value`` (None when one cannot be read)."""
        if isinstance(value, ast.IfExp):
            body, orelse = self.arms(value.body), self.arms(value.orelse)
            if body is None or orelse is None:
                return None
            return body + orelse
        if isinstance(value, ast.Dict):
            return [self._display(value)]
        if isinstance(value, ast.Call) and self._is_dict_call(value):
            return [self._dict_call(value)]
        if isinstance(value, ast.Name):
            return self._name(value)
        self.complete = False
        return None

    def _display(self, node: ast.Dict) -> frozenset[str]:
        found: set[str] = set()
        for position, (key, item) in enumerate(zip(node.keys, node.values, strict=True)):
            text = _string(key) if key is not None else None
            if text is None:
                self.complete = False  # `**other` or a computed key
                continue
            found.add(text)
            self.keys.append(ForwardedKey(text, item, KeyDrop("item", node, position)))
        return frozenset(found)

    def _is_dict_call(self, call: ast.Call) -> bool:
        return self.view.qualified_name(call.func) == "builtins.dict"

    def _dict_call(self, call: ast.Call) -> frozenset[str]:
        found: set[str] = set()
        if call.args:
            self.complete = False  # dict(other, ...) copies keys the module may not show
        for argument in arguments(call):
            if argument.keyword is None:
                if argument.star:
                    self.complete = False
                continue
            found.add(argument.keyword)
            drop = KeyDrop("keyword", call, argument.index)
            self.keys.append(ForwardedKey(argument.keyword, argument.value, drop))
        return frozenset(found)

    def _name(self, read: ast.Name) -> list[frozenset[str]] | None:
        definitions = reaching_definitions(self.view).of_name(read)
        if not definitions:
            self.complete = False
            return None
        arms: list[frozenset[str]] = []
        for definition in definitions:
            statement = self.index.parent(definition)
            if not (
                isinstance(definition, ast.Name)
                and isinstance(statement, ast.Assign)
                and statement.targets == [definition]
            ):
                self.complete = False  # a parameter, a `for` target, an unpacking...
                return None
            built = self.arms(statement.value)
            if built is None:
                return None
            arms.extend(built)
        if read.id not in self._seen_names:
            self._seen_names.add(read.id)
            self._uses(read, {id(d) for d in definitions})
        return arms

    def _uses(self, read: ast.Name, definitions: set[int]) -> None:
        """Keys added to the dict in its scope, and the uses that forbid dropping its keys."""
        scope = self.index.scope_of(read)
        for use in self.index.names(read.id):
            if use is read or id(use) in definitions:
                continue
            if self.index.scope_of(use) is not scope:
                if _sees(self.index.scope_of(use), scope, read.id):
                    self._other_use(use)  # a closure over the dict
                continue
            if isinstance(use.ctx, ast.Store):
                continue  # another assignment: reaching definitions decide whether it arrives
            parent = self.index.parent(use)
            if isinstance(parent, ast.Subscript) and parent.value is use:
                self._subscript(use, parent)
            elif isinstance(parent, ast.Attribute) and parent.value is use:
                self._method(use, parent)
            elif isinstance(parent, ast.FormattedValue) or (
                isinstance(parent, ast.Call) and use in parent.args and self._only_shows(parent)
            ):
                continue  # `print("Optimizer config:", opt_args)`, `f"{opt_args}"` read it
            elif isinstance(parent, ast.keyword) and parent.arg is None:
                if not self._forwarded_to_optimizer(parent):
                    # `Nadam(params, **opt_args)` gets a copy: it adds no key to the dict, but
                    # a key dropped here would be missing there.
                    self._other_use(use, adds_keys=False)
            else:
                self._other_use(use)

    def _other_use(self, use: ast.AST, adds_keys: bool = True) -> None:
        if self.other_use is None:
            self.other_use = use
        if adds_keys:
            self.complete = False  # it may also add keys

    def _only_shows(self, call: ast.Call) -> bool:
        """A call that only reads the dict to show it (its repr never changes a dict)."""
        if self.view.qualified_name(call.func) not in _SHOWING:
            return False
        return all(keyword.arg in ("sep", "end", "flush") for keyword in call.keywords)

    def _subscript(self, use: ast.Name, subscript: ast.Subscript) -> None:
        statement = self.index.parent(subscript)
        if isinstance(subscript.ctx, ast.Load):
            return  # `kw["lr"]` reads a key
        key = _string(subscript.slice)
        if key is None or not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            self._other_use(use)  # `kw[name] = v`, `del kw["x"]`, `kw["a"] = kw["b"] = v`
            return
        self.keys.append(ForwardedKey(key, statement.value, self._statement_drop(statement)))

    def _method(self, use: ast.Name, attribute: ast.Attribute) -> None:
        call = self.index.parent(attribute)
        if attribute.attr in ("get", "items", "keys", "values", "copy"):
            return  # reads
        if attribute.attr == "pop" and isinstance(call, ast.Call) and call.func is attribute:
            # BEiT's `opt_args.pop('eps', None)`: it adds no key, but the key may be gone at the
            # call, and a key dropped from the dict must not be taken out twice.
            key = _string(call.args[0]) if call.args else None
            self.popped.add(key if key is not None else "*")
            self._other_use(use, adds_keys=False)
            return
        if attribute.attr not in _MUTATORS or not (
            isinstance(call, ast.Call) and call.func is attribute
        ):
            self._other_use(use)
            return
        statement = self.index.parent(call)
        alone = isinstance(statement, ast.Expr) and statement.value is call
        if attribute.attr == "setdefault":
            key = _string(call.args[0]) if len(call.args) == 2 and not call.keywords else None
            if key is None:
                self._other_use(use)
                return
            drop = self._statement_drop(statement) if alone else None
            self.keys.append(ForwardedKey(key, call.args[1], drop))
            return
        if call.args or any(k.arg is None for k in call.keywords):
            self._other_use(use)  # kw.update(other), kw.update(**other)
            return
        for position, keyword in enumerate(call.keywords):
            if not alone:
                drop = None
            elif len(call.keywords) == 1:
                drop = self._statement_drop(statement)
            else:
                drop = KeyDrop("keyword", call, position)
            assert keyword.arg is not None
            self.keys.append(ForwardedKey(keyword.arg, keyword.value, drop))

    def _statement_drop(self, statement: ast.AST | None) -> KeyDrop | None:
        """A statement that can go: alone on its line (``if c: kw["x"] = 1`` cannot)."""
        if not isinstance(statement, ast.stmt):
            return None
        if self.index.line_head(statement) is not statement:
            return None  # `a = 1; kw["x"] = 2`
        parent = self.index.parent(statement)
        if isinstance(parent, ast.stmt) and parent.lineno == statement.lineno:
            return None  # `if c: kw["x"] = 1`
        if any(
            line_of(other) == statement.lineno
            for other in _block_of(parent, statement)
            if other is not statement
        ):
            return None  # `kw["x"] = 1; other()`
        return KeyDrop("statement", statement)

    def _forwarded_to_optimizer(self, keyword: ast.keyword) -> bool:
        """``**kw`` passed to this call or to another optimizer constructor (whose update does
        not depend on the performance switches dropped from it)."""
        call = self.index.parent(keyword)
        if call is self.call:
            return True
        return isinstance(call, ast.Call) and isinstance(
            self.view.qualified_name_in(class_of(self.view, call), KNOWN_OPTIMIZERS), str
        )


def _sees(inner: Scope, outer: Scope, name: str) -> bool:
    """Whether ``name`` read in ``inner`` is the one bound in ``outer`` (a nested function's
    free variable; class bodies do not pass their names on)."""
    scope: Scope | None = inner
    while scope is not None and scope is not outer:
        if name in scope.bindings:
            return False
        scope = scope.parent
        while scope is not None and scope is not outer and scope.kind is ScopeKind.CLASS:
            scope = scope.parent
    return scope is outer


def _string(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _block_of(parent: ast.AST | None, statement: ast.stmt) -> list[ast.stmt]:
    """The statements of the block ``statement`` is in."""
    for body in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, body, None)
        if isinstance(block, list) and any(item is statement for item in block):
            return block
    return [statement]


def alone_in_block(parent: ast.AST | None, statement: ast.stmt) -> bool:
    """Whether ``statement`` is the only statement of its block (removing it needs `pass`)."""
    return len(_block_of(parent, statement)) == 1
