"""Optimizer classes of the repository that NPU203 may build earlier than written. Not a rule.

DINO picks its optimizer from torch's and from one of its own, ``utils.LARS``::

    class LARS(torch.optim.Optimizer):
        def __init__(self, params, lr=0, weight_decay=0, momentum=0.9, ...):
            defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, ...)
            super().__init__(params, defaults)

Building such an object is building a torch optimizer: it reads its arguments (the parameters)
and changes nothing else. A class is an **optimizer class** when its one base is a torch
optimizer (``torch.optim.Optimizer``, ``torch.optim.SGD``; any class NPU203 knows as an
optimizer, resolved by qualified name in the class's module) or another optimizer class of the
same module. Building one after the DDP wrap is an optimizer built too late (NPU203 reports it);
it is **movable** when nothing else runs when it is built:

- the class has no decorator, no keyword (``metaclass=``), and binds none of the methods the
  object's creation may call: ``__new__``, ``__setattr__``, ``__getattr__``,
  ``__getattribute__``, and ``add_param_group`` (``Optimizer.__init__`` calls it per group);
- its ``__init__`` (its own, else its base's) has no decorator and holds only: a docstring;
  ``name = value``; ``self.<attribute> = value``; ``if <test>: raise ValueError(<message>)``
  (torch's own argument checks, also with ``elif``); and the base's ``__init__`` through
  ``super().__init__(...)``, ``super(Cls, self).__init__(...)`` or ``Base.__init__(self, ...)``.
  A value is a literal, a parameter or a local name, a list/tuple/set/dict display or a
  ``dict(...)`` of values, or ``-``/``not`` of one; a test compares such values; a message is a
  string, an f-string or ``"...".format(...)`` of values.

Anything else (a call of any other function, a logger or a ``print`` included: its output would
come earlier; a hook registered on a model; an attribute set on anything but ``self``; a
module-level name read, which the call site cannot see changed) leaves the class not movable,
with what the first such part does as the reason, and its construction an unknown call to
NPU203. Only a class bound once in its module, by its ``class`` statement at the top, and a
module without a star import, is judged; NPU203 checks at the call that the name means it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from migrator.analysis.index import ModuleIndex
from migrator.analysis.names import Ambiguous
from migrator.analysis.project import Facts

OPTIMIZER_PACKAGES = ("torch.optim", "apex.optimizers", "torch_npu.optim")
# The base class of torch's optimizers: not an optimizer to build, but one to subclass.
OPTIMIZER_BASES = frozenset({"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"})
# Methods that run when the object is created (``Optimizer.__init__`` calls add_param_group).
_CREATION_METHODS = frozenset(
    {"__new__", "__setattr__", "__getattr__", "__getattribute__", "add_param_group"}
)

# The qualified name of a node in the module, as Rule.qualified_name gives it (never raising).
Resolve = Callable[[ast.AST], "str | Ambiguous | None"]


def is_optimizer_class(name: str) -> bool:
    """A class of torch's (apex's, torch_npu's) optimizer packages, by qualified name."""
    package, _, short = name.rpartition(".")
    return package in OPTIMIZER_PACKAGES and short[:1].isupper() and short != "Optimizer"


@dataclass(frozen=True)
class OptimizerClass:
    """An optimizer class of the repository, as a call names it."""

    name: str  # as the call writes it (`LARS`, `utils.LARS`)
    problem: str | None  # why building it may do more than a torch optimizer; None: movable


class ModuleClasses:
    """The optimizer classes of one module, judged once each and only when asked for."""

    def __init__(self, index: ModuleIndex, resolve: Resolve) -> None:
        self.resolve = resolve
        self.verdicts: dict[str, Facts | None] = {}
        self.in_progress: set[str] = set()  # a base of itself: only in code that cannot run
        # Only a class bound once in the module, by its `class` statement at the top: another
        # binding (an import, an assignment, a `global` in a function, a second class) could
        # make the name something else, and so could a star import.
        star = any(a.name == "*" for s in index.nodes(ast.ImportFrom) for a in s.names)
        top = {id(statement) for statement in index.tree.body}
        self.definitions: dict[str, ast.ClassDef] = {}
        for name, bindings in ({} if star else index.module_scope.bindings).items():
            node = bindings[0].node if len(bindings) == 1 else None
            if isinstance(node, ast.ClassDef) and id(node) in top:
                self.definitions[name] = node

    def verdict(self, name: str) -> Facts | None:
        """``{"line", "problem"}`` for an optimizer class of the module (``problem``: None when
        building it is movable); None for a name that is no optimizer class."""
        if name in self.verdicts:
            return self.verdicts[name]
        definition = self.definitions.get(name)
        if definition is None or name in self.in_progress:
            return None
        self.in_progress.add(name)
        try:
            found = self._judge(definition)
        finally:
            self.in_progress.discard(name)
        self.verdicts[name] = found
        return found

    def _judge(self, definition: ast.ClassDef) -> Facts | None:
        if len(definition.bases) != 1:
            return None
        base = definition.bases[0]
        is_optimizer, base_problem = self._base(base)
        if not is_optimizer:
            return None
        problem = _class_problem(definition) or self._init_problem(definition, base, base_problem)
        return {"line": definition.lineno, "problem": problem}

    def _base(self, base: ast.expr) -> tuple[bool, str | None]:
        """Whether ``base`` is an optimizer class, and why building it is not movable."""
        name = self.resolve(base)
        if isinstance(name, str) and (is_optimizer_class(name) or name in OPTIMIZER_BASES):
            return True, None
        if isinstance(base, ast.Name) and base.id in self.definitions:
            found = self.verdict(base.id)
            if found is None:
                return False, None
            problem = found["problem"]
            return True, None if problem is None else f"is built on `{base.id}`, which {problem}"
        return False, None

    def _init_problem(
        self, definition: ast.ClassDef, base: ast.expr, base_problem: str | None
    ) -> str | None:
        initializer = next(
            (s for s in definition.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"),
            None,
        )
        if initializer is None:
            return base_problem  # the base's `__init__` builds it
        if initializer.decorator_list:
            return "has a decorated `__init__`"
        problem = _InitChecker(self.resolve, definition, base, initializer).problem()
        if problem is not None:
            return f"has an `__init__` that {problem}"
        return base_problem if _calls_base(initializer) else None


def _bound_names(statement: ast.stmt) -> list[str]:
    """The names a statement of a class body binds (enough to find the methods it defines)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in statement.names]
    return [
        node.id
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)
    ]


def _class_problem(definition: ast.ClassDef) -> str | None:
    if definition.decorator_list:
        return "is decorated"
    if definition.keywords:
        return "has a metaclass or class keywords"
    bound: list[str] = []
    for statement in definition.body:
        bound.extend(_bound_names(statement))
    creation = next((name for name in bound if name in _CREATION_METHODS), None)
    if creation is not None:
        return f"defines `{creation}`, which runs when it is built"
    if bound.count("__init__") > 1 or (
        "__init__" in bound
        and not any(
            isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in definition.body
        )
    ):
        return "binds `__init__` other than by one `def`"
    return None


def _calls_base(initializer: ast.FunctionDef) -> bool:
    return any(
        isinstance(node, ast.Attribute) and node.attr == "__init__"
        for node in ast.walk(initializer)
    )


class _InitChecker:
    """Whether an ``__init__`` does nothing but what the module docstring allows."""

    def __init__(
        self,
        resolve: Resolve,
        definition: ast.ClassDef,
        base: ast.expr,
        initializer: ast.FunctionDef,
    ) -> None:
        self.resolve = resolve
        self.definition = definition
        self.base = base
        self.initializer = initializer
        arguments = initializer.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        self.known = {a.arg for a in every}  # parameters, then the locals bound so far
        self.self_name = every[0].arg if arguments.posonlyargs or arguments.args else None

    def problem(self) -> str | None:
        for statement in self.initializer.body:
            problem = self.statement_problem(statement)
            if problem is not None:
                return problem
        return None

    def statement_problem(self, statement: ast.stmt) -> str | None:
        if isinstance(statement, ast.Expr):
            if isinstance(statement.value, ast.Constant):
                return None  # the docstring
            if isinstance(statement.value, ast.Call) and self.is_base_init(statement.value):
                return self.values_problem(_argument_values(statement.value))
            return self.value_problem(statement.value)
        if isinstance(statement, ast.Assign):
            return self.assignment_problem(statement)
        if isinstance(statement, ast.If):
            return self.check_problem(statement)
        if isinstance(statement, ast.Pass):
            return None
        return f"has a `{type(statement).__name__.lower()}` statement"

    def assignment_problem(self, statement: ast.Assign) -> str | None:
        if len(statement.targets) != 1:
            return "assigns several targets at once"
        target = statement.targets[0]
        problem = self.value_problem(statement.value)
        if problem is not None:
            return problem
        if isinstance(target, ast.Name) and target.id != self.self_name:
            self.known.add(target.id)
            return None
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == self.self_name
        ):
            return None
        return f"sets `{ast.unparse(target)}`"

    def check_problem(self, statement: ast.If) -> str | None:
        """``if <test>: raise ValueError(...)`` and its ``elif`` chain."""
        problem = self.test_problem(statement.test)
        if problem is not None:
            return problem
        if len(statement.body) != 1 or not self.is_value_error(statement.body[0]):
            return _NOT_A_CHECK
        if not statement.orelse:
            return None
        if len(statement.orelse) == 1 and isinstance(statement.orelse[0], ast.If):
            return self.check_problem(statement.orelse[0])
        return _NOT_A_CHECK

    def is_value_error(self, statement: ast.stmt) -> bool:
        if not isinstance(statement, ast.Raise) or statement.cause is not None:
            return False
        error = statement.exc
        if not isinstance(error, ast.Call) or error.keywords or len(error.args) > 1:
            return False
        if self.resolve(error.func) != "builtins.ValueError":
            return False
        return all(self.message_problem(a) is None for a in error.args)

    def is_base_init(self, call: ast.Call) -> bool:
        """``super().__init__(...)``, ``super(Cls, self).__init__(...)``, ``Base.__init__(...)``."""
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr != "__init__":
            return False
        owner = func.value
        if isinstance(owner, ast.Call) and self.resolve(owner.func) == "builtins.super":
            return super_arguments(owner, self.definition.name, self.self_name)
        return ast.dump(owner) == ast.dump(self.base) and bool(call.args)

    # -- values: each ``*_problem`` says what the first part that is no plain value does ---------

    def values_problem(self, nodes: list[ast.expr]) -> str | None:
        return next((p for node in nodes if (p := self.value_problem(node)) is not None), None)

    def value_problem(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant):
            return None
        if isinstance(node, ast.Name):
            return None if node.id in self.known else f"reads `{node.id}`"
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return self.values_problem(node.elts)
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]  # None: `**x`, its value is x
            return self.values_problem([*keys, *node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not):
            return self.value_problem(node.operand)
        if isinstance(node, ast.Call):
            if self.resolve(node.func) == "builtins.dict":
                return self.values_problem(_argument_values(node))
            return f"calls `{ast.unparse(node.func)}(...)`"
        return f"computes `{ast.unparse(node)}`"

    def test_problem(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Compare):
            return self.values_problem([node.left, *node.comparators])
        if isinstance(node, ast.BoolOp):
            return next((p for v in node.values if (p := self.test_problem(v)) is not None), None)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.test_problem(node.operand)
        return self.value_problem(node)

    def message_problem(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.JoinedStr):
            parts = [p.value for p in node.values if isinstance(p, ast.FormattedValue)]
            specs = [p.format_spec for p in node.values if isinstance(p, ast.FormattedValue)]
            problems = [self.message_problem(s) for s in specs if s is not None]
            return self.values_problem(parts) or next((p for p in problems if p), None)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)
        ):
            return self.values_problem(_argument_values(node))
        return self.value_problem(node)


_NOT_A_CHECK = "has an `if` that does more than raise `ValueError`"


def super_arguments(call: ast.Call, class_name: str, self_name: str | None) -> bool:
    """The arguments of a ``super`` call in a method of the class ``class_name``: none, or
    the class and the method's first parameter (``super(Cls, self)``)."""
    if call.keywords:
        return False
    if not call.args:
        return True
    return (
        len(call.args) == 2
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == class_name
        and isinstance(call.args[1], ast.Name)
        and call.args[1].id == self_name
    )


def _argument_values(call: ast.Call) -> list[ast.expr]:
    """What a call is given; ``*x``/``**x`` as ``x``."""
    given = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
    return [*given, *(k.value for k in call.keywords)]


def summary_from_facts(name: str, facts: Facts) -> OptimizerClass:
    """The :class:`OptimizerClass` of a :meth:`ModuleClasses.verdict`, named ``name``."""
    return OptimizerClass(name, facts["problem"])


def is_super_of(owner: ast.ClassDef, node: ast.expr, self_name: str) -> bool:
    """``node`` is ``super()`` or ``super(Owner, self)`` in a method of ``owner``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return False
    return node.func.id == "super" and super_arguments(node, owner.name, self_name)


def is_docstring(statement: ast.stmt) -> bool:
    """A statement that is a string literal alone."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
