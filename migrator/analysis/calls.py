"""Reading call arguments and literals on ``ast``, the way the rules' edits see them in libcst.

``ast`` keeps positional and keyword arguments in two lists; libcst keeps one list in source
order. Rules plan edits by argument index, so :func:`arguments` gives that one list.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache

from migrator.source import Source


@dataclass(frozen=True)
class Argument:
    """One argument of a call, as written."""

    index: int  # position among all the call's arguments, in source order
    node: ast.AST  # the ast.keyword, or the positional expression (ast.Starred for *args)
    value: ast.expr  # what is passed (for *args / **kwargs: the iterable / mapping)
    keyword: str | None  # `name` of `name=value`
    star: str  # "", "*" or "**"


def arguments(call: ast.Call) -> list[Argument]:
    """Every argument of ``call`` in source order."""
    items: list[ast.AST] = [*call.args, *call.keywords]
    if call.keywords and call.args:
        items.sort(key=lambda node: (node.lineno, node.col_offset))  # type: ignore[attr-defined]
    found = []
    for index, node in enumerate(items):
        if isinstance(node, ast.keyword):
            star = "**" if node.arg is None else ""
            found.append(Argument(index, node, node.value, node.arg, star))
        elif isinstance(node, ast.Starred):
            found.append(Argument(index, node, node.value, None, "*"))
        else:
            assert isinstance(node, ast.expr)
            found.append(Argument(index, node, node, None, ""))
    return found


def keyword(call: ast.Call, name: str) -> Argument | None:
    for argument in arguments(call):
        if argument.keyword == name:
            return argument
    return None


def positional(call: ast.Call) -> list[Argument]:
    """The plain positional arguments, in order (stops at the first ``*args`` or keyword)."""
    found = []
    for argument in arguments(call):
        if argument.keyword is not None or argument.star:
            break
        found.append(argument)
    return found


def argument(call: ast.Call, name: str, position: int | None) -> Argument | None:
    """The argument bound to parameter ``name``: by keyword, or at ``position`` if given."""
    by_keyword = keyword(call, name)
    if by_keyword is not None:
        return by_keyword
    if position is None:
        return None
    plain = positional(call)
    return plain[position] if position < len(plain) else None


def has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    )


# -- literals ------------------------------------------------------------------------------------


class NotLiteral:
    """The value of an expression that is not a plain literal."""

    def __repr__(self) -> str:
        return "NOT_LITERAL"


NOT_LITERAL = NotLiteral()


def literal_value(node: ast.AST) -> object:
    """The Python value of a literal (`True`, `0.0`, `"O2"`, `(0.9, 0.999)`), else NOT_LITERAL."""
    try:
        return ast.literal_eval(node)  # type: ignore[arg-type]
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return NOT_LITERAL


_STRING = re.compile(
    r"(?P<prefix>[rRbBuUfF]{0,2})(?P<quote>'''|\"\"\"|'|\")(?P<body>.*)(?P=quote)\Z", re.DOTALL
)


@dataclass(frozen=True)
class StringLiteral:
    """One string literal token as written: ``r"cuda:0"`` is ("r", '"', "cuda:0")."""

    prefix: str
    quote: str
    body: str  # the text between the quotes, escapes as written

    @property
    def is_bytes(self) -> bool:
        return "b" in self.prefix.lower()

    @property
    def is_format(self) -> bool:
        return "f" in self.prefix.lower()


def string_literal(source: Source, node: ast.AST) -> StringLiteral | None:
    """The literal of ``node`` when it is one string token (not an implicit concatenation)."""
    if not isinstance(node, (ast.Constant, ast.JoinedStr)):
        return None
    if isinstance(node, ast.Constant) and not isinstance(node.value, (str, bytes)):
        return None
    return _parse_literal(source.segment(node))


@cache
def _parse_literal(text: str) -> StringLiteral | None:
    match = _STRING.match(text)
    if match is None:
        return None
    body, quote = match.group("body"), match.group("quote")
    if _closes_early(body, quote):
        return None  # two literals side by side: "a" "b"
    return StringLiteral(match.group("prefix"), quote, body)


def _closes_early(body: str, quote: str) -> bool:
    """Whether ``quote`` ends the string inside ``body`` (then the text was two tokens)."""
    index = 0
    while index < len(body):
        if body[index] == "\\":
            index += 2
            continue
        if body.startswith(quote, index):
            return True
        index += 1
    return False
