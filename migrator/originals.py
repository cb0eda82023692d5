"""The files of a run as they were before it: the text that baselines, suppression comments and
the HTML report point into.

Diagnostics always give positions in the file as it was read. Only the default mode rewrites
files in place; for that mode :meth:`Originals.snapshot` keeps the bytes of every file before
the run starts. In every other mode the files on disk are still the originals and are read
when asked for.

A Python file is one text; a notebook is its code cells, each a text of its own (a notebook
diagnostic's ``line`` is a line of its ``cell``). Lines are split where Python's tokenizer
splits them (``\\r\\n``, ``\\r``, ``\\n``), so that line N here is line N of a diagnostic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from migrator.notebooks import cell_source, is_notebook, split_lines
from migrator.source import decode


class Texts:
    """One file's text (key ``None``) or a notebook's code cells (key: the cell number)."""

    def __init__(self, sections: dict[int | None, str]) -> None:
        self.sections = sections
        self._lines: dict[int | None, list[str]] = {}

    def lines(self, cell: int | None) -> list[str]:
        """The lines of the file or cell, each with its line break; [] when there is none."""
        if cell not in self._lines:
            self._lines[cell] = split_lines(self.sections.get(cell, ""))
        return self._lines[cell]

    def line(self, cell: int | None, number: int) -> str | None:
        """Line ``number`` (1-based) without its line break; ``None`` past the end."""
        lines = self.lines(cell)
        if not 1 <= number <= len(lines):
            return None
        return lines[number - 1].rstrip("\r\n")


def texts_of(path: str, data: bytes) -> Texts | None:
    """The text(s) of a file's bytes; ``None`` when they cannot be decoded (the run reported
    that file as an error)."""
    try:
        if is_notebook(path):
            cells = json.loads(data.decode("utf-8-sig"))["cells"]
            return Texts(
                {
                    number: cell_source(cell)
                    for number, cell in enumerate(cells, start=1)
                    if isinstance(cell, dict) and cell.get("cell_type") == "code"
                }
            )
        return Texts({None: decode(data)})
    except (ValueError, LookupError, SyntaxError, KeyError, TypeError):
        return None


@dataclass
class Originals:
    """The bytes of the run's files before the run, by the path the run shows."""

    kept: dict[str, bytes] | None = None  # None: read from disk, which still has them
    _texts: dict[str, Texts | None] = field(default_factory=dict)

    @classmethod
    def snapshot(cls, paths: Iterable[str]) -> Originals:
        """Read every file now, before a run that rewrites them (unreadable ones are left
        out: the run reports them)."""
        kept = {}
        for path in paths:
            try:
                with open(path, "rb") as stream:
                    kept[path] = stream.read()
            except OSError:
                continue
        return cls(kept)

    def data(self, path: str) -> bytes | None:
        if self.kept is not None:
            return self.kept.get(path)
        try:
            with open(path, "rb") as stream:
                return stream.read()
        except OSError:
            return None

    def texts(self, path: str) -> Texts | None:
        if path not in self._texts:
            data = self.data(path)
            self._texts[path] = texts_of(path, data) if data is not None else None
        return self._texts[path]

    def line(self, path: str, cell: int | None, number: int) -> str | None:
        texts = self.texts(path)
        return texts.line(cell, number) if texts is not None else None

    def forget(self, path: str) -> None:
        """Drop what is kept of ``path`` (a report that reads each file once frees as it goes)."""
        self._texts.pop(path, None)
        if self.kept is not None:
            self.kept.pop(path, None)
