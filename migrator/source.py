"""A file's bytes, its decoded text, and the positions of ``ast`` nodes in it.

``ast`` reports a node's column as a UTF-8 byte offset into its line; diagnostics and edits
need character positions. :class:`Source` converts one into the other, lazily and per line, so
that a pure-ASCII file (nearly every file) pays nothing for it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cached_property

# The line breaks Python's tokenizer (and libcst) count; form feeds and other Unicode line
# separators are not line breaks in Python source.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def decode(source: bytes) -> str:
    """Decode as Python would: PEP 263 cookie, UTF-8 BOM, UTF-8 by default."""
    return source.decode(source_encoding(source))


def source_encoding(source: bytes) -> str:
    """The codec that decodes ``source`` and encodes its text back to the same bytes
    (``utf-8-sig`` for a file with a byte order mark)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    return encoding


class Source:
    """The text of one file with line/offset conversions. ``text`` has no BOM."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def line_starts(self) -> list[int]:
        """Character offset at which each line starts; ``line_starts[0]`` is line 1."""
        starts = [0]
        starts.extend(match.end() for match in _LINE_BREAK.finditer(self.text))
        return starts

    @cached_property
    def newline(self) -> str:
        """The file's first line break, ``"\\n"`` when it has none (what libcst writes)."""
        match = _LINE_BREAK.search(self.text)
        return match.group() if match else "\n"

    def line_text(self, line: int) -> str:
        starts = self.line_starts
        end = starts[line] if line < len(starts) else len(self.text)
        return self.text[starts[line - 1] : end]

    def column(self, line: int, byte_column: int) -> int:
        """The 0-based character column of ``byte_column`` (UTF-8 bytes) on ``line``."""
        text = self.line_text(line)
        if text.isascii():
            return byte_column
        return len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))

    def offset(self, line: int, byte_column: int) -> int:
        """The character offset in ``text`` of an ``ast`` position."""
        return self.line_starts[line - 1] + self.column(line, byte_column)

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.start(node), self.end(node)

    def position(self, node: ast.AST) -> tuple[int, int]:
        """1-based line and column of the start of ``node``."""
        line = node.lineno  # type: ignore[attr-defined]
        return line, self.column(line, node.col_offset) + 1  # type: ignore[attr-defined]

    def end_position(self, node: ast.AST) -> tuple[int, int]:
        """1-based line and 0-based column just after ``node`` (a half-open end)."""
        line = node.end_lineno  # type: ignore[attr-defined]
        return line, self.column(line, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        """The code of ``node`` as written (without the parentheses around it)."""
        start, end = self.span(node)
        return self.text[start:end]

    def line_of_offset(self, offset: int) -> int:
        """The 1-based line holding character ``offset``."""
        starts = self.line_starts
        low, high = 0, len(starts)
        while low + 1 < high:
            middle = (low + high) // 2
            if starts[middle] <= offset:
                low = middle
            else:
                high = middle
        return low + 1
