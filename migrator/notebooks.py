"""Jupyter notebooks (``.ipynb``): the code cells migrated as one module, the file written back
with nothing but the changed cell sources different.

How a notebook goes through the engine (:func:`migrate_notebook`):

1. the file is read with :mod:`json` and checked against the notebook schema with nbformat.
   Text that is not JSON, a document that is not a valid notebook, or one older than format 4
   is a per-file error (exit 2), and the file is left as it is;
2. the code cells are joined into one module in notebook order, so that an import in one cell
   counts in the cells below it, as it does in the kernel. A comment carrying a marker opens
   each cell. IPython syntax (:mod:`migrator.ipython`) is masked line by line: each such line
   becomes a ``pass`` or a comment carrying the marker and the line's index, so the line is
   never parsed as Python while line numbers and indentation stay as they are. A cell run by a
   cell magic without a Python body (``%%bash``, ``%%writefile``, ...) is left out;
3. the engine migrates that module like a ``.py`` file: same rules, triggers, suppression
   comments and verification. Its diagnostics are mapped back to (cell, line in the cell);
4. the migrated module is split at the cell markers, masked lines get their original text back,
   and only the cells whose source changed get a new ``source`` (a list of lines or one string,
   as the cell had it). Outputs, metadata, cell ids and every other cell are the values read;
5. the notebook is written in its own JSON formatting (:class:`JsonStyle`): indentation,
   separators, key order, ``ensure_ascii`` style, line breaks and final newline are read from
   the file, and re-serialising the notebook as read must give back its exact bytes before
   anything is written. A notebook whose formatting cannot be reproduced is reported and left
   as it is, never reformatted.

``--check`` runs the same steps as a write, so that it fails exactly where a write would.
A notebook whose kernel is not Python (``metadata.kernelspec.language``) is left unchanged.
"""

from __future__ import annotations

import ast
import codecs
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from migrator.diagnostics import Diagnostic, Severity
from migrator.engine import Engine
from migrator.ipython import PYTHON_BODY_CELL_MAGICS, cell_magic, ipython_spans
from migrator.results import ERROR_CODE, FileResult, Status
from migrator.source import decode, source_encoding

NOTEBOOK_SUFFIX = ".ipynb"
# The marker of the comments that open cells and mask IPython lines in the joined module; a
# suffix is added in the rare notebook whose code already contains it.
MARKER = "npu-migrate-notebook"
# The line breaks Python's tokenizer counts, so that cell lines are the engine's lines.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_LINE_BREAK = re.compile(r"(?:\r\n|\r|\n)\Z")
_ERROR_TEXT_LIMIT = 200


def is_notebook(path: str) -> bool:
    return path.endswith(NOTEBOOK_SUFFIX)


class NotebookError(Exception):
    """Why a notebook cannot be migrated; the file is left as it is."""


def split_lines(text: str) -> list[str]:
    """``text`` as lines, each with its line break (``\\r\\n``, ``\\r`` or ``\\n``)."""
    return _LINE.findall(text)


def cell_source(cell: dict[str, Any]) -> str:
    """A cell's source as one string (nbformat stores a string or a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


# -- reading ---------------------------------------------------------------------------------------


@dataclass
class Notebook:
    """A notebook file as read: its JSON data, and what is needed to write it back."""

    data: dict[str, Any]
    text: str  # the file's text, without a byte order mark
    bom: bool

    @classmethod
    def parse(cls, source: bytes) -> Notebook:
        """Read and validate; :class:`NotebookError` says what is wrong, for the user."""
        try:
            text = source.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise NotebookError(
                f"not a valid notebook: not UTF-8 text (byte {error.start}: {error.reason})"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise NotebookError(
                f"not a valid notebook: invalid JSON at line {error.lineno}, "
                f"column {error.colno}: {error.msg}"
            ) from None
        except RecursionError:
            raise NotebookError("not a valid notebook: the JSON is nested too deeply") from None
        _validate(data)
        return cls(data, text, source.startswith(codecs.BOM_UTF8))

    @property
    def cells(self) -> list[dict[str, Any]]:
        cells: list[dict[str, Any]] = self.data["cells"]
        return cells

    @property
    def language(self) -> str:
        """The kernel's language, lower case; ``python`` when the notebook does not say."""
        metadata = self.data.get("metadata") or {}
        kernel = metadata.get("kernelspec") or {}
        info = metadata.get("language_info") or {}
        return str(kernel.get("language") or info.get("name") or "python").lower()

    def rewritten(self, sources: dict[int, str]) -> bytes:
        """The file with new sources for some cells (by 1-based position), in its formatting.

        Raises :class:`NotebookError` when the formatting cannot be reproduced."""
        style = JsonStyle.of(self.text)
        style.check(self.data, self.text)
        for number, text in sources.items():
            cell = self.cells[number - 1]
            if isinstance(cell["source"], list):
                # As Jupyter stores it: one string per line, each with its line break.
                cell["source"] = text.splitlines(keepends=True)
            else:
                cell["source"] = text
        prefix = codecs.BOM_UTF8 if self.bom else b""
        return prefix + style.dumps(self.data).encode("utf-8")


def _validate(data: Any) -> None:
    if not isinstance(data, dict):
        raise NotebookError("not a valid notebook: the JSON document is not an object")
    version = data.get("nbformat")
    if not isinstance(version, int):
        raise NotebookError("not a valid notebook: it has no integer `nbformat` version")
    if version != 4:
        raise NotebookError(
            f"an nbformat {version} notebook: npu-migrate reads format 4 "
            "(`jupyter nbconvert --to notebook --inplace FILE` converts an older one)"
        )
    # Imported here: nbformat and its schemas cost a tenth of a second that runs without
    # notebooks never pay. iter_validate never changes the notebook (validate() may repair it).
    from nbformat.validator import iter_validate

    for error in iter_validate(data):
        message = str(getattr(error, "message", error)).splitlines()[0]
        if len(message) > _ERROR_TEXT_LIMIT:
            message = message[:_ERROR_TEXT_LIMIT] + "..."
        where = _schema_location(list(getattr(error, "absolute_path", ())))
        raise NotebookError(f"not a valid notebook: {where}{message}")


def _schema_location(path: list[Any]) -> str:
    """``cell 3, at outputs/0: `` for the JSON path ``cells/2/outputs/0``; "" for the top."""
    if len(path) >= 2 and path[0] == "cells" and isinstance(path[1], int):
        rest = "/".join(str(part) for part in path[2:])
        return f"cell {path[1] + 1}" + (f", at {rest}" if rest else "") + ": "
    return f"at {'/'.join(str(part) for part in path)}: " if path else ""


# -- the notebook's JSON formatting ----------------------------------------------------------------

# The opening brace, the first key and what separates it from its value.
_FIRST_KEY = re.compile(
    r'\{(?P<newline>[ \t]*\r?\n)?(?P<indent>[ \t]*)"(?:[^"\\]|\\.)*"(?P<colon>[ \t]*:[ \t]*)'
)
# A comma followed by a space at the end of a line: Python 2's json.dumps with an indent.
_SPACED_COMMA = re.compile(r", \r?\n")


@dataclass(frozen=True)
class JsonStyle:
    """How a notebook's JSON is laid out, as :func:`json.dumps` arguments plus line breaks.

    Jupyter writes ``indent=1``, sorted keys, ``ensure_ascii=False`` and a final newline;
    other editors differ (two-space indents, keys in insertion order, escaped non-ASCII).
    Keys keep the order they were read in, so a sorted file stays sorted."""

    indent: int | str | None
    separators: tuple[str, str]
    ensure_ascii: bool
    newline: str
    final_newline: bool

    @classmethod
    def of(cls, text: str) -> JsonStyle:
        newline = "\r\n" if "\r\n" in text else "\n"
        final_newline = text.endswith(newline)
        body = text[: -len(newline)] if final_newline else text
        match = _FIRST_KEY.match(body)
        indent: int | str | None = 1
        colon = ": "
        if match is not None:
            colon = match["colon"]
            spaces = match["indent"]
            if match["newline"] is None:
                indent = None
            else:
                indent = len(spaces) if spaces.strip(" ") == "" else spaces
        if indent is None:
            comma = "," if colon == ":" else ", "
        else:
            # A raw line break is never inside a JSON string: this only sees the layout.
            comma = ", " if _SPACED_COMMA.search(body) else ","
        return cls(indent, (comma, colon), text.isascii(), newline, final_newline)

    def dumps(self, data: Any) -> str:
        text = json.dumps(
            data, indent=self.indent, separators=self.separators, ensure_ascii=self.ensure_ascii
        )
        if self.newline != "\n":
            text = text.replace("\n", self.newline)
        return text + (self.newline if self.final_newline else "")

    def check(self, data: Any, text: str) -> None:
        """Raise :class:`NotebookError` unless writing ``data`` gives back ``text`` exactly."""
        written = self.dumps(data)
        if written == text:
            return
        common = min(len(written), len(text))
        first = next((i for i in range(common) if written[i] != text[i]), common)
        line = 1 + text.count("\n", 0, first)
        raise NotebookError(
            "npu-migrate cannot write this notebook back in its own JSON formatting (it "
            f"differs from what Python's json module writes at line {line}), so it is left "
            "untouched; saving it once in Jupyter normalises it"
        )


# -- the code cells as one module ------------------------------------------------------------------


@dataclass
class CodeCell:
    """A code cell in the joined module."""

    number: int  # 1-based position among all the notebook's cells
    source: str  # its source as read
    lines: list[str]  # its source lines, each with a line break (one added to a last line)
    final_newline: bool  # whether the source itself ended with a line break
    masked: list[int] = field(default_factory=list)  # indices of the IPython lines


@dataclass
class NotebookModule:
    """The code cells joined into one Python module, and how to take it apart again."""

    text: str
    marker: str
    cells: list[CodeCell]
    origins: list[tuple[int, int]]  # per module line: (cell number, line in cell; 0: marker)

    @classmethod
    def build(cls, notebook: Notebook) -> NotebookModule:
        code = [
            (number, cell_source(cell))
            for number, cell in enumerate(notebook.cells, start=1)
            if cell.get("cell_type") == "code"
        ]
        marker = _free_marker(text for _, text in code)
        pieces: list[str] = []
        origins: list[tuple[int, int]] = []
        cells: list[CodeCell] = []
        for number, text in code:
            lines = split_lines(text)
            magic = cell_magic(lines)
            if magic is not None and magic not in PYTHON_BODY_CELL_MAGICS:
                continue  # the whole cell is the input of a shell, a file, HTML...
            final_newline = not lines or _LINE_BREAK.search(lines[-1]) is not None
            if not final_newline:
                lines[-1] += "\n"
            cell = CodeCell(number, text, lines, final_newline)
            cells.append(cell)
            pieces.append(f"#{marker} cell {number}\n")
            origins.append((number, 0))
            module_lines = list(lines)
            for span in ipython_spans(lines):
                for index in span:
                    statement = "pass  " if index == span.start else ""
                    module_lines[index] = _masked(lines[index], statement, marker, index)
                    cell.masked.append(index)
            pieces.extend(module_lines)
            origins.extend((number, line) for line in range(1, len(lines) + 1))
        return cls("".join(pieces), marker, cells, origins)

    def encoded(self) -> bytes:
        """The module's bytes as the engine reads them: in the encoding that a coding
        declaration on the first cell's first lines names (UTF-8 without one)."""
        try:
            encoding = source_encoding(self.text.encode("utf-8"))
            return self.text.encode(encoding)
        except (SyntaxError, LookupError, UnicodeEncodeError) as error:
            first = self.cells[0].number
            raise NotebookError(f"cell {first}: unusable coding declaration: {error}") from None

    def locate(self, line: int) -> tuple[int, int]:
        """(cell number, line in the cell) of a 1-based module line."""
        cell, in_cell = self.origins[min(max(line, 1), len(self.origins)) - 1]
        return cell, max(in_cell, 1)

    def located(self, diagnostic: Diagnostic) -> Diagnostic:
        cell, line = self.locate(diagnostic.line)
        return replace(diagnostic, line=line, cell=cell)

    def split(self, migrated: str) -> dict[int, str]:
        """The new source of each code cell that the migration changed, by cell number.

        Raises :class:`NotebookError` when the markers did not come through the edits intact
        (an internal error: then nothing is written)."""
        found = re.compile(rf"#{re.escape(self.marker)} (cell|line) (\d+)[ \t]*(?:\r\n|\r|\n)?\Z")
        buckets: dict[int, list[str]] = {}
        restored: dict[int, list[int]] = {}
        cells = iter(self.cells)
        current: CodeCell | None = None
        before_first: list[str] = []  # lines put above the first marker join the first cell
        for line in split_lines(migrated):
            match = found.search(line)
            if match is not None and match[1] == "cell":
                current = next(cells, None)
                if current is None or current.number != int(match[2]):
                    raise NotebookError("internal error: the cell boundaries moved")
                buckets[current.number] = before_first if not buckets else []
                restored[current.number] = []
            elif current is None:
                before_first.append(line)
            elif match is not None:
                index = int(match[2])
                if index >= len(current.lines):
                    raise NotebookError("internal error: a masked IPython line moved")
                buckets[current.number].append(current.lines[index])
                restored[current.number].append(index)
            else:
                buckets[current.number].append(line)
        if len(buckets) != len(self.cells) or any(
            restored[cell.number] != cell.masked for cell in self.cells
        ):
            raise NotebookError("internal error: an edit moved a cell boundary or an IPython line")
        changed = {}
        for cell in self.cells:
            text = "".join(buckets[cell.number])
            if not cell.final_newline:
                text = _LINE_BREAK.sub("", text)
            if text != cell.source:
                changed[cell.number] = text
        return changed

    def explain(self, failure: FileResult, path: str) -> Diagnostic:
        """The engine's error, at the cell and line of a syntax error where there is one."""
        try:
            ast.parse(self.text)
        except SyntaxError as error:
            if error.lineno:
                cell, line = self.locate(error.lineno)
                message = f"cell {cell}, line {line}: syntax error: {error.msg}"
                column = max(error.offset or 1, 1)
                return Diagnostic(path, line, column, ERROR_CODE, Severity.ERROR, message, cell)
        except Exception:  # not a parse problem after all; the engine's message says what is
            pass
        message = failure.diagnostics[0].message if failure.diagnostics else "error"
        return Diagnostic(path, 1, 1, ERROR_CODE, Severity.ERROR, message)


def _masked(line: str, statement: str, marker: str, index: int) -> str:
    """A line of IPython syntax as the parser sees it: its indentation, ``pass`` where a
    statement starts (an empty block would not parse), and the marker comment."""
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    match = _LINE_BREAK.search(line)
    line_break = match.group() if match else "\n"
    return f"{indent}{statement}#{marker} line {index}{line_break}"


def _free_marker(texts: Iterator[str]) -> str:
    """:data:`MARKER`, or a variant of it that no cell's code contains."""
    sources = list(texts)
    marker, suffix = MARKER, 0
    while any(marker in text for text in sources):
        suffix += 1
        marker = f"{MARKER}-{suffix}"
    return marker


# -- migrating -------------------------------------------------------------------------------------


def migrate_notebook(engine: Engine, source: bytes, path: str, *, apply: bool) -> FileResult:
    """:meth:`Engine.migrate` for a notebook's bytes; ``apply=False`` writes nothing but
    runs every step a write would (the result's ``migrated`` is then ``source``)."""

    def failed(diagnostic: Diagnostic) -> FileResult:
        return FileResult(path, Status.ERROR, source, source, [diagnostic])

    def error(message: str) -> FileResult:
        return failed(Diagnostic(path, 1, 1, ERROR_CODE, Severity.ERROR, message))

    try:
        notebook = Notebook.parse(source)
    except NotebookError as problem:
        return error(str(problem))
    if notebook.language != "python":
        return FileResult(path, Status.UNCHANGED, source, source)
    module = NotebookModule.build(notebook)
    if not module.cells:
        return FileResult(path, Status.UNCHANGED, source, source)
    try:
        encoded = module.encoded()
    except NotebookError as problem:
        return error(str(problem))
    result = engine.migrate(encoded, path)
    if result.status is Status.ERROR:
        return failed(module.explain(result, path))
    diagnostics = [module.located(d) for d in result.diagnostics]
    if result.status is not Status.CHANGED:
        return replace(result, original=source, migrated=source, diagnostics=diagnostics)
    try:
        sources = module.split(decode(result.migrated))
        migrated = notebook.rewritten(sources)
    except NotebookError as problem:
        return error(str(problem))
    if migrated == source:
        return error("internal error, file left untouched: the fixes changed no cell")
    return replace(
        result, original=source, migrated=migrated if apply else source, diagnostics=diagnostics
    )


# -- showing a change ------------------------------------------------------------------------------


def notebook_diff(path: str, before: bytes, after: bytes) -> str:
    """A unified diff per changed cell, headed ``PATH:cell N``: the cell sources as a person
    reads them (a diff of the JSON would show escaped strings). For reading, not for
    ``patch``."""
    old_cells = json.loads(before.decode("utf-8-sig"))["cells"]
    new_cells = json.loads(after.decode("utf-8-sig"))["cells"]
    out: list[str] = []
    import difflib  # only --diff (and the HTML page) show diffs

    for number, (old, new) in enumerate(zip(old_cells, new_cells, strict=True), start=1):
        old_text, new_text = cell_source(old), cell_source(new)
        if old_text == new_text:
            continue
        name = f"{path}:cell {number}"
        out.extend(
            difflib.unified_diff(
                _diff_lines(old_text), _diff_lines(new_text), fromfile=name, tofile=name
            )
        )
    return "".join(out)


def _diff_lines(text: str) -> Sequence[str]:
    # A cell's last line has no line break in Jupyter's files; the diff shows it as a line.
    return [line if _LINE_BREAK.search(line) else line + "\n" for line in split_lines(text)]
