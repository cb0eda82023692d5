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
5. only the JSON tokens of the changed cells' ``source`` values are replaced in the file's
   text, re-encoded in its own style: a list of lines or one string as the cell had it, the
   same layout between lines, non-ASCII characters escaped (``\\u00e9``) or not as the file
   has them. Every other byte (indentation, key order, separators, CRLF line breaks, the final
   newline, numbers as written) stays as it was, so any JSON formatting can be edited. A file
   that cannot be edited safely (a key given twice in one object) is reported and left as it is.

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
        """The file with new sources for some cells (by 1-based position): only those
        sources' JSON tokens change, re-encoded in the file's own style.

        Raises :class:`NotebookError` when the file cannot be edited safely."""
        text = spliced(self.text, len(self.cells), sources)
        expected = json.loads(self.text)
        for number, source in sources.items():
            cell = expected["cells"][number - 1]
            if isinstance(cell["source"], list):
                cell["source"] = source.splitlines(keepends=True)
            else:
                cell["source"] = source
        if json.loads(text) != expected:
            raise NotebookError("internal error, file left untouched: an edit did not splice")
        prefix = codecs.BOM_UTF8 if self.bom else b""
        return prefix + text.encode("utf-8")


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
        if _missing_cell_id(error):
            continue
        message = str(getattr(error, "message", error)).splitlines()[0]
        if len(message) > _ERROR_TEXT_LIMIT:
            message = message[:_ERROR_TEXT_LIMIT] + "..."
        where = _schema_location(list(getattr(error, "absolute_path", ())))
        raise NotebookError(f"not a valid notebook: {where}{message}")


def _missing_cell_id(error: Any) -> bool:
    """A cell of a format 4.5+ notebook without its ``id``: nbformat's own reader adds one with
    a warning (``MissingIDFieldWarning``) and Jupyter opens the file, and the edits here never
    touch ids, so the notebook is migrated and written back without one, as it was."""
    path = list(getattr(error, "absolute_path", ()))
    return (
        getattr(error, "validator", None) == "required"
        and len(path) == 2
        and path[0] == "cells"
        and str(getattr(error, "message", "")) == "'id' is a required property"
    )


def _schema_location(path: list[Any]) -> str:
    """``cell 3, at outputs/0: `` for the JSON path ``cells/2/outputs/0``; "" for the top."""
    if len(path) >= 2 and path[0] == "cells" and isinstance(path[1], int):
        rest = "/".join(str(part) for part in path[2:])
        return f"cell {path[1] + 1}" + (f", at {rest}" if rest else "") + ": "
    return f"at {'/'.join(str(part) for part in path)}: " if path else ""


# -- writing back: the changed sources spliced into the file's own text ----------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# A \\u escape of a non-ASCII character: the file was written with ensure_ascii.
_NON_ASCII_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u(?!00[0-7])[0-9a-fA-F]{4}")


@dataclass(frozen=True)
class SourceToken:
    """Where a cell's ``source`` value lies in the file's text, and how it is laid out."""

    start: int
    end: int
    is_list: bool
    opening: str = ""  # the whitespace after ``[``
    separator: str = ","  # the comma and whitespace between two lines
    closing: str = ""  # the whitespace before ``]``


def _skip(text: str, index: int) -> int:
    match = _WHITESPACE.match(text, index)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _expect(text: str, index: int, char: str) -> int:
    if text[index : index + 1] != char:
        raise NotebookError(f"cannot locate the cells in the file's JSON (offset {index})")
    return index + 1


def _members(text: str, index: int) -> Iterator[tuple[str, int, int]]:
    """(key, start, end) of each member of the object at ``index`` (after whitespace).

    Raises :class:`NotebookError` on a key given twice: which value counts is then up to the
    reader, so such a file is not edited."""
    index = _expect(text, _skip(text, index), "{")
    seen: set[str] = set()
    index = _skip(text, index)
    if text[index : index + 1] == "}":
        return
    while True:
        _expect(text, index, '"')
        key, index = _DECODER.raw_decode(text, index)
        if key in seen:
            raise NotebookError(
                f"the key {key!r} is given twice in one object (offset {index}), so the file "
                "cannot be edited safely; it is left untouched"
            )
        seen.add(key)
        start = _skip(text, _expect(text, _skip(text, index), ":"))
        _, end = _DECODER.raw_decode(text, start)
        yield key, start, end
        index = _skip(text, end)
        if text[index : index + 1] == "}":
            return
        index = _skip(text, _expect(text, index, ","))


def source_tokens(text: str) -> list[SourceToken | None]:
    """The ``source`` token of each cell in the file, in order (None where a cell has none)."""
    tokens: list[SourceToken | None] = []
    for key, start, _ in _members(text, 0):
        if key != "cells":
            continue
        index = _skip(text, _expect(text, start, "["))
        while text[index : index + 1] != "]":
            _, end = _DECODER.raw_decode(text, index)
            found = None
            for cell_key, value, value_end in _members(text, index):
                if cell_key == "source":
                    found = _token(text, value, value_end)
            tokens.append(found)
            index = _skip(text, end)
            if text[index : index + 1] == ",":
                index = _skip(text, index + 1)
    return tokens


def _token(text: str, start: int, end: int) -> SourceToken:
    if text[start] != "[":
        return SourceToken(start, end, is_list=False)
    opening_end = _skip(text, start + 1)
    closing_start = end - 1
    while closing_start > opening_end and text[closing_start - 1] in " \t\r\n":
        closing_start -= 1
    separator = ","
    if opening_end < closing_start:
        _, first_end = _DECODER.raw_decode(text, opening_end)
        after = _skip(text, first_end)
        if text[after : after + 1] == ",":
            separator = text[after : _skip(text, after + 1)]
        else:
            separator = "," + text[start + 1 : opening_end]
    return SourceToken(
        start, end, True, text[start + 1 : opening_end], separator, text[closing_start : end - 1]
    )


def _ascii_escaped(text: str, token: SourceToken) -> bool:
    """Whether the file writes non-ASCII characters as ``\\u`` escapes: as its cell does where
    that shows, else as the rest of the file does (Jupyter writes them as they are)."""
    for part in (text[token.start : token.end], text):
        if not part.isascii():
            return False
        if _NON_ASCII_ESCAPE.search(part):
            return True
    return False


def _encoded(text: str, token: SourceToken, source: str) -> str:
    ensure_ascii = _ascii_escaped(text, token)
    if not token.is_list:
        return json.dumps(source, ensure_ascii=ensure_ascii)
    lines = [json.dumps(line, ensure_ascii=ensure_ascii) for line in source.splitlines(True)]
    if not lines:
        return "[]"
    opening, separator, closing = token.opening, token.separator, token.closing
    if text[token.start : token.end] == "[]":  # no layout to copy: that of the line above
        line_start = text.rfind("\n", 0, token.start) + 1
        indent = text[line_start : _skip(text, line_start)].strip("\r\n")
        if line_start == 0 or not indent:
            opening, separator, closing = "", ",", ""
        else:
            newline = "\r\n" if text[line_start - 2 : line_start] == "\r\n" else "\n"
            unit = indent[:1]
            opening = newline + indent + unit
            separator, closing = "," + opening, newline + indent
    return "[" + opening + separator.join(lines) + closing + "]"


def spliced(text: str, cells: int, sources: dict[int, str]) -> str:
    """``text`` with the ``source`` of some cells (by 1-based position) replaced, in the
    file's own layout and escaping; every other character stays as it was."""
    tokens = source_tokens(text)
    if len(tokens) != cells:
        raise NotebookError("cannot locate the cells in the file's JSON")
    pieces: list[str] = []
    last = 0
    for number in sorted(sources):
        token = tokens[number - 1]
        if token is None:
            raise NotebookError(f"cell {number} has no `source` in the file")
        pieces += [text[last : token.start], _encoded(text, token, sources[number])]
        last = token.end
    pieces.append(text[last:])
    return "".join(pieces)


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
