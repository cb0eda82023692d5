"""From text to a :class:`~migrator.analysis.index.ModuleIndex`: the one way every layer parses."""

from __future__ import annotations

import ast

from migrator.analysis.index import ModuleIndex
from migrator.source import Source, decode


class ParseError(Exception):
    """The text is not Python that ``ast`` can parse (the message says where and why)."""


def parse_index(text: str, path: str) -> ModuleIndex:
    """``ast.parse`` and the index of the result; :class:`ParseError` when it does not parse."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        where = f"{error.lineno}:{(error.offset or 0)}" if error.lineno else "?"
        raise ParseError(f"syntax error at {where}: {error.msg}") from error
    except (ValueError, MemoryError, RecursionError) as error:
        raise ParseError(f"cannot parse file: {type(error).__name__}: {error}") from error
    try:
        return ModuleIndex(tree, Source(text))
    except RecursionError as error:
        raise ParseError("cannot parse file: it is nested too deeply") from error


def index_of_bytes(source: bytes, path: str) -> ModuleIndex | None:
    """The index of a file's bytes, or None when they do not decode or parse (for the project
    stage and the link stage: the file's own stage reports why)."""
    try:
        return parse_index(decode(source), path)
    except (ParseError, SyntaxError, UnicodeDecodeError, LookupError):
        return None
