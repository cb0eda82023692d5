"""What an edit is: a change of one concrete node, or of a run of statements, at a source span.

Rules find what to change on Python's ``ast`` (see :mod:`migrator.rule`) and describe each
change as an edit anchored at a source span; :mod:`migrator.rewriter` applies them to the
concrete syntax tree of a file that has edits, in one pass. Import additions and removals are
requests too (:class:`ImportRequest`, :class:`ImportRemoval`), applied by :mod:`migrator.imports`
after the node edits.

Nothing here imports libcst: the rules build their edits in every mode, ``--check`` included,
where no concrete tree is made. The node kinds an edit names are libcst classes, read through
:data:`migrator.lazy_imports.cst` only when an edit is made.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeAlias

from migrator.lazy_imports import cst

Span = tuple[int, int]  # character offsets in the file's text: [start, end)
# A change of one concrete node: it gets the node with everything inside already edited and
# returns its replacement (a node, a FlattenSentinel or a RemovalSentinel).
Change = Callable[[Any], Any]
# The statements a block edit receives for each statement line of the original block, in order:
# the line as edited (one statement, several after a split, none after a removal).
Lines: TypeAlias = "list[list[cst.BaseStatement]]"


class EditError(Exception):
    """An edit could not be applied (its node was not found, or it failed)."""


@dataclass(frozen=True)
class NodeEdit:
    """Replace the concrete node of type ``kind`` at ``span`` by ``change(node)``.

    Statements are found by where they start (``span[1]`` is ignored for them).
    """

    kind: type[cst.CSTNode]
    span: Span
    change: Change


@dataclass(frozen=True)
class BlockEdit:
    """Rebuild a run of consecutive statement lines of one block (an indented body, or the
    module): reorder, insert or drop statements.

    ``lines`` are the starts of the run's statement lines, in order (the first one locates the
    block); ``rebuild`` gets each line as edited by the node edits, and returns the statements
    that take the run's place. The block's other statements stay as they are.
    """

    lines: tuple[tuple[type[cst.CSTNode], int], ...]
    rebuild: Callable[[Lines], list[cst.BaseStatement]]


Edit = NodeEdit | BlockEdit


@dataclass(frozen=True)
class ImportRequest:
    """``import module`` (or, with ``name``, ``from module import name``) to add at module
    level, right after the first import of ``after``.

    ``optional``: only some runs of the module use ``module`` (Ascend's apex, for the runs with
    apex amp), so its absence must not stop the others: the import goes into a module-level
    ``try`` that already imports from ``module`` (just before that import, which would fail the
    same way), or into a ``try: import module / except ImportError: pass`` of its own; where the
    module still imports from ``module`` outside any ``try`` once the removals are done, or
    another request imports from it, it is a plain import."""

    module: str
    after: str | None = None
    name: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class ImportRemoval:
    """An import to drop when nothing uses it any more (libcst's RemoveImportsVisitor semantics)."""

    module: str
    obj: str | None = None
    asname: str | None = None


def is_statement_kind(kind: type[cst.CSTNode]) -> bool:
    return issubclass(kind, (cst.BaseStatement, cst.BaseSmallStatement))


def statement_kind(statement: ast.stmt) -> type[cst.CSTNode]:
    """The libcst node that holds ``statement``: its line, or the compound statement itself."""
    return _compound_kinds().get(type(statement), cst.SimpleStatementLine)


@cache
def _compound_kinds() -> dict[type, type[cst.CSTNode]]:
    return {
        ast.If: cst.If,
        ast.For: cst.For,
        ast.AsyncFor: cst.For,
        ast.While: cst.While,
        ast.With: cst.With,
        ast.AsyncWith: cst.With,
        ast.Try: cst.Try,
        ast.TryStar: cst.TryStar,
        ast.FunctionDef: cst.FunctionDef,
        ast.AsyncFunctionDef: cst.FunctionDef,
        ast.ClassDef: cst.ClassDef,
        ast.Match: cst.Match,
    }
