"""One file as the analysis sees it: positions, source text and names, without a rule.

A :class:`FileView` wraps a file's :class:`~migrator.analysis.index.ModuleIndex` with the
questions every analysis asks about code: where a node is (``position``, ``attr_position``),
what it says (``code``, ``written``), what it names (``qualified_name``), and which nodes are
worth resolving at all (``may_name``, ``calls_to``). Rules reach it as ``self.view``; the link
stage builds one for a file of another module. ``memo`` keeps per-file analyses (the optimizer
flow, reaching definitions) so that the rules of one file share them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Collection, Hashable, Iterator
from typing import Any, NamedTuple, TypeVar

from migrator.analysis import names
from migrator.analysis.index import ModuleIndex, resolution_base
from migrator.source import Source

T = TypeVar("T")


class Location(NamedTuple):
    """A 1-based line and column, for a diagnostic at a place that is not an ``ast`` node."""

    line: int
    column: int


class FileView:
    """Questions about one parsed file (see the module docstring).

    ``fast=False`` is the soundness test's switch: the candidate filters (``may_name``,
    ``calls_to``) then let every candidate through, so that their results can be compared
    with the unfiltered ones.
    """

    def __init__(self, index: ModuleIndex, *, fast: bool = True) -> None:
        self.index = index
        self.source: Source = index.source
        self.fast = fast
        self._memo: dict[Hashable, Any] = {}

    def memo(self, key: Hashable, build: Callable[[], T]) -> T:
        """The analysis kept under ``key`` for this file, built by the first caller."""
        try:
            return self._memo[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._memo[key] = build()
            return value

    def release(self) -> None:
        """Forget the kept analyses (they hold nodes of the tree)."""
        self._memo.clear()

    # -- positions -------------------------------------------------------------------------------

    def position(self, at: ast.AST | Location) -> Location:
        """1-based line and column of ``at`` (an ``ast`` node's start)."""
        if isinstance(at, Location):
            return at
        return Location(*self.source.position(at))

    @staticmethod
    def line(node: ast.AST) -> int:
        return node.lineno  # type: ignore[attr-defined,no-any-return]

    def attr_position(self, node: ast.Attribute) -> Location:
        """Where the attribute name of ``x.attr`` starts."""
        line, column = self.source.end_position(node)
        return Location(line, column - len(node.attr) + 1)

    # -- source text -----------------------------------------------------------------------------

    def code(self, node: ast.AST) -> str:
        """The code of ``node`` exactly as its ``ast`` span covers it."""
        return self.source.segment(node)

    def written_span(self, node: ast.AST) -> tuple[int, int]:
        """The character span of ``node`` with the parentheses that belong to it.

        ``ast`` spans leave out the parentheses around an expression; libcst, which the messages
        were first written against, counts them as part of the node (``(a).b`` is ``((a).b)`` as
        written). The parentheses of a call around its only argument belong to the call.
        """
        text = self.source.text
        start, end = self.source.span(node)
        closing = self._closing_paren_of_call(node)
        while True:
            left = start - 1
            while left >= 0 and text[left] in _BLANK:
                left -= 1
            right = end
            while right < len(text) and text[right] in _BLANK:
                right += 1
            if left < 0 or right >= len(text) or text[left] != "(" or text[right] != ")":
                return start, end
            if right == closing:
                return start, end
            start, end = left, right + 1

    def _closing_paren_of_call(self, node: ast.AST) -> int:
        """Where the ``)`` of the call that ``node`` is an argument of sits (-1 if none)."""
        parent = self.index.parent(node)
        if isinstance(parent, ast.keyword):
            parent = self.index.parent(parent)
        if isinstance(parent, ast.Call) and parent.func is not node:
            return self.source.end(parent) - 1
        return -1

    def written(self, node: ast.AST) -> str:
        """The code of ``node`` as written, with its own parentheses (see :meth:`written_span`),
        as messages quote it.

        Code that spans lines is given as libcst prints a node on its own, which the messages
        have always quoted: continuation lines lose the indentation of the block the statement
        is in (they keep what they have beyond it), and line breaks are ``\\n``; the inside of a
        string literal is left as it is.
        """
        start, end = self.written_span(node)
        text = self.source.text[start:end]
        if "\n" not in text and "\r" not in text:
            return text
        return self._without_block_indentation(node, text)

    def _without_block_indentation(self, node: ast.AST, text: str) -> str:
        statement = self.index.statement_of(node)
        indentation = ""
        if statement is not None:
            head = self.source.line_text(statement.lineno)
            indentation = head[: len(head) - len(head.lstrip(" \t\f"))]
        lines = [line for line in _LINES.findall(text) if line]
        in_string = _lines_inside_strings(text)
        pieces: list[str] = []
        continued = False  # the line before ends with a backslash: its break stays as written
        for number, line in enumerate(lines):
            body = line.rstrip("\r\n")
            ending = line[len(body) :]
            if number and number not in in_string and not continued:
                body = body.removeprefix(indentation)
            continued = body.endswith("\\")
            if ending and number + 1 not in in_string and not continued:
                ending = "\n"
            pieces.append(body + ending)
        return "".join(pieces)

    # -- names -----------------------------------------------------------------------------------

    def qualified_name(self, node: ast.AST) -> str | names.Ambiguous | None:
        """The one qualified name of ``node``, ``Ambiguous``, or ``None`` (nothing imported)."""
        try:
            return names.resolve(self.index, node)
        except RecursionError:  # a pathological alias chain is not an optimizer or a device
            return None

    def qualified_name_in(
        self, node: ast.AST, wanted: Collection[str]
    ) -> str | names.Ambiguous | None:
        """Like :meth:`qualified_name`, narrowed to ``wanted``: a name in it, ``Ambiguous`` when
        one of the possible origins is in it, else ``None``."""
        try:
            return names.resolve_any(self.index, node, wanted)
        except RecursionError:
            return None

    def may_name(self, node: ast.AST, roots: Collection[str]) -> bool:
        """A cheap, conservative test: could ``node`` resolve to a name under ``roots``
        (``{"torch", "apex"}``)? False only when it certainly cannot, so that analyses resolve
        just the candidates."""
        if not self.fast:
            return True
        base = resolution_base(node)
        if base is None:  # `"x".format`: libcst names it after the builtin None
            return "builtins" in roots
        return base.id in self.index.names_reaching(frozenset(roots))

    def calls_to(self, roots: Collection[str]) -> Iterator[ast.Call]:
        """The calls whose callee may resolve to a name under ``roots``, in source order."""
        for call in self.index.nodes(ast.Call):
            if self.may_name(call.func, roots):
                yield call


_BLANK = " \t\f\r\n\\"
# A line with its break; only \r\n, \r and \n break lines in Python source (not \f).
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


def _lines_inside_strings(text: str) -> set[int]:
    """0-based numbers of the lines of ``text`` that continue a string literal."""
    inside: set[int] = set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({text})").readline))
    except (tokenize.TokenError, SyntaxError):
        return inside
    for token in tokens:
        if token.type == tokenize.STRING and token.end[0] > token.start[0]:
            inside.update(range(token.start[0], token.end[0]))  # 1-based rows: +1 -1
    return inside
