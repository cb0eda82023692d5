"""``self`` as a receiver: the class whose instance it is, and the methods ``self.name(...)`` may
reach in the module. Not a rule.

A trainer builds its optimizer in a method of its own and calls it through ``self``::

    class Trainer:
        def __init__(self, args, model):
            self.optimizer = self.build_optimizer(args)

        def build_optimizer(self, args):
            return torch.optim.SGD(self.model.parameters(), lr=args.lr)

In a plain method of ``C`` (no decorator), its first parameter, never rebound there, is an
instance of ``C`` or of a subclass, so ``self.build_optimizer(...)`` reaches the method of that
name that the instance's class defines or inherits: ``C``'s own, a base's (``C`` inherits it)
or a subclass's (the subclass overrides it: detectron2's ``DefaultTrainer.__init__`` calls
``self.build_optimizer``, which a project's ``Trainer`` overrides), or one that a subclass gets
from another base (``C`` is a mixin). A class of the module that is none of these never holds
the instance: neither its methods nor what they store in ``self.optimizer`` reach ``C``'s.
"""

from __future__ import annotations

import ast

from migrator.analysis.index import ModuleIndex

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def self_class(index: ModuleIndex, expr: ast.expr) -> ast.ClassDef | None:
    """The class whose instance ``expr`` is as ``self``: the first parameter of a plain method
    (no decorator) of a class, read in that method and never rebound there; else None."""
    if not isinstance(expr, ast.Name):
        return None
    function = next(
        (a for a in index.ancestors(expr) if isinstance(a, (*_FUNCTIONS, ast.ClassDef))), None
    )
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.decorator_list:
        return None
    owner = index.parent(function)
    if not isinstance(owner, ast.ClassDef):
        return None
    positional = function.args.posonlyargs + function.args.args
    if not positional or positional[0].arg != expr.id:
        return None
    if expr.id in index.stored_names(function):
        return None  # `self = other`, `for self in ...`, `del self`
    return owner


def related_methods(
    index: ModuleIndex, owner: ast.ClassDef, name: str, related: set[int] | None = None
) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The methods called ``name`` that ``self.name(...)`` in a method of ``owner`` may reach
    among the module's classes: those of ``owner``, of its bases and of its subclasses (by the
    names the ``class`` statements give their bases in the module). ``related``: the
    :func:`related_classes` of ``owner``, where the caller keeps them."""
    classes = index.nodes(ast.ClassDef)
    if related is None:
        related = related_classes(index, owner)
    return [
        statement
        for node in classes
        if id(node) in related
        for statement in node.body
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name == name
    ]


def related_classes(index: ModuleIndex, owner: ast.ClassDef) -> set[int]:
    """The ``id`` of the module's classes whose methods may run on an instance of ``owner``
    (or of a subclass): ``owner``, the classes it derives from, those that derive from it, and
    their other bases (a mixin's ``self.build_optimizer()`` reaches the method that the class
    mixing it in gets from its other base)."""
    classes = index.nodes(ast.ClassDef)
    found: set[int] = set()
    by_id = {id(node): node for node in classes}
    for descendant in _descendants(owner, classes):
        found |= _ancestors(by_id[descendant], classes)
    return found


def named_class(index: ModuleIndex, expr: ast.expr) -> ast.ClassDef | None:
    """The class of the module ``expr`` names directly (a name whose one binding is its
    ``class`` statement), or None."""
    if not isinstance(expr, ast.Name):
        return None
    bindings = index.bindings_of(expr)
    if len(bindings) == 1 and isinstance(bindings[0].node, ast.ClassDef):
        return bindings[0].node
    return None


def class_attribute_reads(
    index: ModuleIndex, owner: ast.ClassDef, name: str
) -> tuple[list[ast.Attribute], bool]:
    """The reads of the attribute ``name`` that the body of the class ``owner`` assigns
    (``OPTIONS = {...}``): ``Owner.OPTIONS``, with the class named directly, and
    ``self.OPTIONS`` in a method of a class related to ``owner``; and whether they are all the
    reads of an attribute so named in the module (another receiver, ``agent.OPTIONS``, may be
    an instance of ``owner`` too)."""
    related: set[int] | None = None
    reads: list[ast.Attribute] = []
    complete = True
    for read in index.attributes(name):
        if not isinstance(read.ctx, ast.Load):
            continue
        receiver = read.value
        if named_class(index, receiver) is owner:
            reads.append(read)
            continue
        reader = self_class(index, receiver)
        if reader is not None:
            if related is None:
                related = related_classes(index, owner)
            if id(reader) in related:
                reads.append(read)
                continue
        complete = False
    return reads, complete


def ancestor_classes(index: ModuleIndex, owner: ast.ClassDef) -> list[ast.ClassDef]:
    """The module's classes ``owner`` derives from (by the names its ``class`` statement and
    theirs give their bases), ``owner`` left out."""
    classes = index.nodes(ast.ClassDef)
    found = _ancestors(owner, classes)
    return [node for node in classes if node is not owner and id(node) in found]


def _bases(node: ast.ClassDef, classes: list[ast.ClassDef]) -> list[ast.ClassDef]:
    names = {base.id for base in node.bases if isinstance(base, ast.Name)}
    return [other for other in classes if other.name in names]


def _ancestors(owner: ast.ClassDef, classes: list[ast.ClassDef]) -> set[int]:
    found: set[int] = set()
    pending = [owner]
    while pending:
        node = pending.pop()
        if id(node) in found:
            continue
        found.add(id(node))
        pending += _bases(node, classes)
    return found


def _descendants(owner: ast.ClassDef, classes: list[ast.ClassDef]) -> set[int]:
    found: set[int] = {id(owner)}
    grew = True
    while grew:
        grew = False
        for node in classes:
            if id(node) not in found and any(id(base) in found for base in _bases(node, classes)):
                found.add(id(node))
                grew = True
    return found
