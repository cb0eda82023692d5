"""IPython syntax in notebook cells: what must never reach a Python parser.

A notebook's code cells are Python plus IPython's own syntax, which IPython rewrites before
running a cell:

- line magics and shell escapes: ``%time train()``, ``!pip install torch_npu``, their
  assigned forms ``files = !ls`` / ``t = %timeit -o f()``, help lines (``torch.cuda?``,
  ``??model``) and the autocall escapes ``/f x``, ``,f a b``, ``;f a``. Each is one logical
  line, continued with a trailing backslash as in Python;
- cell magics: a ``%%name`` first line (leading blank lines aside) makes the whole cell the
  input of that magic. Only a few cell magics run their body as Python in the notebook's own
  namespace (:data:`PYTHON_BODY_CELL_MAGICS`); for those only the ``%%`` line is IPython
  syntax.

IPython recognises all of these only where a statement starts: ``%`` at the start of a
continuation line inside brackets is Python's modulo (``(a\\n % b)``), ``!=`` on such a line a
comparison. :func:`ipython_spans` therefore follows brackets, strings and backslash
continuations line by line, the way the tokenizer would, and never looks at a line that
continues a statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Cell magics whose body is Python run in the notebook's namespace: the body is migrated with
# the rest of the notebook. Every other cell magic (%%bash, %%writefile, %%html, %%script, ...)
# keeps its whole cell out of the migration.
PYTHON_BODY_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

# A statement starting with one of these characters is never Python: IPython's escapes.
_ESCAPE = re.compile(r"[ \t]*[%!?/,;]")
# `files = !ls`, `a, b = %magic ...`: an assignment whose value is a shell line or a line magic.
_ASSIGNED = re.compile(r"[ \t]*[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[%!]")
# `torch.cuda?`, `model.forward??`, `np.*load*?`: object help (Python has no `?` operator).
_HELP = re.compile(r"[ \t]*[\w.*\[\]]+\?{1,2}[ \t]*(?:\r\n|\r|\n)?\Z")
_CELL_MAGIC = re.compile(r"%%([\w.-]*)")
_BRACKETS = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


def cell_magic(lines: Sequence[str]) -> str | None:
    """The name of the cell magic that opens a cell (``"bash"`` for ``%%bash``), else None."""
    for line in lines:
        if not line.strip():
            continue  # IPython drops leading blank lines before looking for %%
        match = _CELL_MAGIC.match(line)
        return match.group(1) if match else None
    return None


def ipython_spans(lines: Sequence[str]) -> list[range]:
    """The physical lines (0-based indices into ``lines``, each with its line break) that
    hold IPython syntax: one range per escaped statement, its backslash continuations
    included. Everything outside the ranges is Python as far as IPython is concerned."""
    spans = []
    scanner = _Scanner()
    index = 0
    while index < len(lines):
        line = lines[index]
        if scanner.at_statement_start and _is_ipython(line):
            end = index + 1
            while end < len(lines) and _ends_with_backslash(lines[end - 1]):
                end += 1
            spans.append(range(index, end))
            index = end
            continue
        scanner.feed(line)
        index += 1
    return spans


def _is_ipython(line: str) -> bool:
    return bool(_ESCAPE.match(line) or _ASSIGNED.match(line) or _HELP.match(line))


def _ends_with_backslash(line: str) -> bool:
    return line.rstrip("\r\n").endswith("\\")


@dataclass
class _Scanner:
    """Just enough of Python's tokenizer to know whether the next line starts a statement:
    open brackets, a string left open at the end of a line, a backslash continuation."""

    depth: int = 0
    open_string: str | None = None  # the quote that closes a string continued on the next line
    continued: bool = False

    @property
    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.open_string is None and not self.continued

    def feed(self, line: str) -> None:
        self.continued = False
        position = 0
        if self.open_string is not None:
            position = self._close_string(line, 0, self.open_string)
            if position < 0:
                return
        while position < len(line):
            char = line[position]
            if char == "#":
                return
            if char in "'\"":
                quote = char * 3 if line.startswith(char * 3, position) else char
                position = self._close_string(line, position + len(quote), quote)
                if position < 0:
                    return
                continue
            if char == "\\" and not line[position + 1 :].strip("\r\n"):
                self.continued = True
                return
            self.depth = max(0, self.depth + _BRACKETS.get(char, 0))
            position += 1

    def _close_string(self, line: str, start: int, quote: str) -> int:
        """The index after the closing ``quote``, or -1 when the string goes on past the line
        (then ``open_string`` says so)."""
        position = start
        while position < len(line):
            if line[position] == "\\":
                position += 2
            elif line.startswith(quote, position):
                self.open_string = None
                return position + len(quote)
            else:
                position += 1
        # A triple-quoted string continues; a one-quote string only after a backslash (else it
        # is a syntax error that the parser reports, and the line ends it here).
        continues = len(quote) == 3 or _ends_with_backslash(line)
        self.open_string = quote if continues else None
        return -1
