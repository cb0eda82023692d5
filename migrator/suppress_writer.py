"""``--add-suppressions``: write ``# npu-migrate: ignore[CODE]`` where findings remain.

The engine honours a suppression comment on the line a diagnostic points at
(:mod:`migrator.suppressions`), so each comment goes at the end of that physical line:

- ``x = y.cuda()`` becomes ``x = y.cuda()  # npu-migrate: ignore[NPU930]``;
- an existing comment is kept and the suppression follows it
  (``x.cuda()  # move  # npu-migrate: ignore[NPU930]``);
- an existing ``# npu-migrate: ignore[...]`` on the line gets the new codes added to its list,
  nothing else on the line changes;
- several findings on one line make one comment with every code, in code order.

A comment cannot go everywhere. A line whose end lies inside a multi-line string (a docstring,
a triple-quoted literal) would put the comment inside the string, changing the program; a line
continued with a backslash would end the continuation. Such findings are left as they are and
returned as :class:`Refused`, with the reason, for the caller to report (a baseline covers them).
Every file written is checked first: its ``ast`` is the same as before (only comments changed)
and the engine's own scan of suppression comments covers every finding it was written for;
a file that fails the check is left as it is and its findings are refused.

Notebooks get their comments in the code cells, through the same joined module the migration
uses (:mod:`migrator.notebooks`), and are written back in their own JSON layout. Shell scripts
(``--include-shell``) are read without a shell parser: a line inside a here-document, a quoted
string that spans lines, or one continued with a backslash is refused.
"""

from __future__ import annotations

import ast
import io
import os
import re
import stat
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migrator.diagnostics import Diagnostic
from migrator.files import write_atomic
from migrator.notebooks import (
    Notebook,
    NotebookError,
    NotebookModule,
    cell_source,
    is_notebook,
    split_lines,
)
from migrator.shell import is_shell_script
from migrator.source import decode, source_encoding
from migrator.suppressions import Suppressions

# The comment the engine reads (migrator.suppressions), with the span of its code list.
IGNORE = re.compile(r"#\s*npu-migrate:\s*ignore(?P<list>\[(?P<codes>[^\]]*)\])?")
_LINE_BREAK = re.compile(r"(?:\r\n|\r|\n)\Z")

IN_STRING = "the line ends inside a multi-line string, where a comment would change the string"
CONTINUED = "the line is continued with a backslash, where a comment would end the statement"
IN_HEREDOC = "the line is inside a here-document, where a comment would change its text"
IN_QUOTES = "the line ends inside a quoted string, where a comment would change the string"
NOT_PYTHON = "the line is not Python code of the notebook"
UNCHECKED = "the comment could not be verified (the file does not parse the same way with it)"


@dataclass(frozen=True)
class Refused:
    """A finding that could not be suppressed, and why."""

    diagnostic: Diagnostic
    reason: str


@dataclass
class FileSuppressions:
    """What suppressing one file's findings gives: the new bytes (``None``: nothing to
    write), how many findings the comments cover, and the findings refused."""

    data: bytes | None
    suppressed: int
    refused: list[Refused]


def suppress(path: str, source: bytes, findings: Sequence[Diagnostic]) -> FileSuppressions:
    """The bytes of ``path`` with a suppression comment for each of ``findings``."""
    try:
        if is_notebook(path):
            return _notebook(source, findings)
        if is_shell_script(path):
            return _shell(source, findings)
        return _python(source, findings)
    except (UnicodeError, SyntaxError, LookupError, NotebookError, tokenize.TokenError) as error:
        reason = f"the file cannot be edited safely: {error}"
        return FileSuppressions(None, 0, [Refused(d, reason) for d in findings])


def write_suppressions(
    path: str, source: bytes, findings: Sequence[Diagnostic]
) -> FileSuppressions:
    """:func:`suppress`, then replace the file atomically. Raises ``OSError``; a read-only
    file raises ``PermissionError`` without being touched."""
    done = suppress(path, source, findings)
    if done.data is None or done.data == source:
        return done
    mode_bits = stat.S_IMODE(os.stat(path).st_mode)
    if not mode_bits & 0o222 or not os.access(path, os.W_OK):
        raise PermissionError(f"{path} is read-only")
    write_atomic(path, done.data, mode_bits)
    return done


# -- one line ------------------------------------------------------------------------------------


def with_codes(line: str, codes: Iterable[str], comment_start: int | None) -> str:
    """``line`` (with its line break) carrying a suppression of ``codes``.

    ``comment_start`` is where the line's comment starts, or ``None`` when it has none."""
    match = _LINE_BREAK.search(line)
    line_break = match.group() if match else ""
    body = line[: len(line) - len(line_break)]
    wanted = sorted(set(codes))
    if comment_start is not None:
        existing = IGNORE.search(body, comment_start)
        if existing is not None:
            return _merged(body, existing, wanted) + line_break
    code = body.rstrip(" \t")
    return f"{code}  # npu-migrate: ignore[{','.join(wanted)}]{line_break}"


def _merged(body: str, existing: re.Match[str], wanted: list[str]) -> str:
    if existing.group("list") is None:  # a bare `ignore` already covers every code
        return body
    raw = existing.group("codes")
    present = [part.strip() for part in raw.split(",") if part.strip()]
    upper = {part.upper() for part in present}
    added = [code for code in wanted if code not in upper]
    if not added:
        return body
    separator = ", " if ", " in raw else ","
    codes = separator.join([*present, *added])
    return body[: existing.start("codes")] + codes + body[existing.end("codes") :]


def _codes_by_line(findings: Iterable[Diagnostic]) -> dict[int, list[Diagnostic]]:
    by_line: dict[int, list[Diagnostic]] = {}
    for diagnostic in findings:
        by_line.setdefault(diagnostic.line, []).append(diagnostic)
    return by_line


# -- Python --------------------------------------------------------------------------------------


# Python 3.12 tokenizes an f-string's literal parts as FSTRING_MIDDLE tokens.
_STRING_TOKENS = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


@dataclass(frozen=True)
class _PythonLines:
    """Where a trailing comment may go in a Python text, and where comments already are."""

    refused: Mapping[int, str]  # line -> why no comment can end it
    comments: Mapping[int, int]  # line -> column where its comment starts

    @classmethod
    def scan(cls, text: str) -> _PythonLines:
        ends: set[int] = set()
        in_string: set[int] = set()
        comments: dict[int, int] = {}
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL):
                ends.add(token.start[0])
            elif token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.start[1]
            elif token.type in _STRING_TOKENS and token.end[0] > token.start[0]:
                in_string.update(range(token.start[0], token.end[0]))
        lines = len(split_lines(text))
        refused = {
            number: IN_STRING if number in in_string else CONTINUED
            for number in range(1, lines + 1)
            if number not in ends
        }
        return cls(refused, comments)


def _edit_lines(
    lines: list[str], scanned: _PythonLines, by_line: Mapping[int, list[Diagnostic]]
) -> tuple[list[str], list[Refused]]:
    refused: list[Refused] = []
    edited = list(lines)
    for number, found in sorted(by_line.items()):
        reason = scanned.refused.get(number) if number <= len(lines) else NOT_PYTHON
        if reason is not None:
            refused.extend(Refused(d, reason) for d in found)
            continue
        comment = scanned.comments.get(number)
        edited[number - 1] = with_codes(lines[number - 1], (d.code for d in found), comment)
    return edited, refused


def _same_program(before: str, after: str) -> bool:
    return ast.dump(ast.parse(before)) == ast.dump(ast.parse(after))


def _python(source: bytes, findings: Sequence[Diagnostic]) -> FileSuppressions:
    text = decode(source)
    by_line = _codes_by_line(findings)
    lines = split_lines(text)
    edited, refused = _edit_lines(lines, _PythonLines.scan(text), by_line)
    new_text = "".join(edited)
    skipped = {r.diagnostic for r in refused}
    written = [d for d in findings if d not in skipped]
    scan = Suppressions.scan(new_text)
    if not _same_program(text, new_text) or not all(scan.covers(d.line, d.code) for d in written):
        return FileSuppressions(None, 0, [*refused, *(Refused(d, UNCHECKED) for d in written)])
    data = new_text.encode(source_encoding(source))
    return FileSuppressions(data if data != source else None, len(written), refused)


# -- notebooks -----------------------------------------------------------------------------------


def _notebook(source: bytes, findings: Sequence[Diagnostic]) -> FileSuppressions:
    notebook = Notebook.parse(source)
    module = NotebookModule.build(notebook)
    scanned = _PythonLines.scan(module.text)
    module_line = {origin: index + 1 for index, origin in enumerate(module.origins)}
    refused: list[Refused] = []
    by_cell: dict[int, list[Diagnostic]] = {}
    for diagnostic in findings:
        if diagnostic.cell is None or (diagnostic.cell, diagnostic.line) not in module_line:
            refused.append(Refused(diagnostic, NOT_PYTHON))
        else:
            by_cell.setdefault(diagnostic.cell, []).append(diagnostic)
    sources: dict[int, str] = {}
    written: list[Diagnostic] = []
    for number, found in by_cell.items():
        lines = split_lines(cell_source(notebook.cells[number - 1]))
        # The cell's own lines, judged by where they sit in the joined module.
        cell_scan = _PythonLines(
            {
                line: reason
                for line in range(1, len(lines) + 1)
                if (reason := scanned.refused.get(module_line[(number, line)])) is not None
            },
            {
                line: column
                for line in range(1, len(lines) + 1)
                if (column := scanned.comments.get(module_line[(number, line)])) is not None
            },
        )
        edited, cell_refused = _edit_lines(lines, cell_scan, _codes_by_line(found))
        refused.extend(cell_refused)
        skipped = {r.diagnostic for r in cell_refused}
        written.extend(d for d in found if d not in skipped)
        if edited != lines:
            sources[number] = "".join(edited)
    if not sources:
        return FileSuppressions(None, 0, refused)
    data = notebook.rewritten(sources)
    after = NotebookModule.build(Notebook.parse(data))
    scan = Suppressions.scan(after.text)
    lines_after = {origin: index + 1 for index, origin in enumerate(after.origins)}
    if not _same_program(module.text, after.text) or not all(
        scan.covers(lines_after[(d.cell, d.line)], d.code) for d in written if d.cell is not None
    ):
        return FileSuppressions(None, 0, [*refused, *(Refused(d, UNCHECKED) for d in written)])
    return FileSuppressions(data, len(written), refused)


# -- shell scripts -------------------------------------------------------------------------------

_HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)([A-Za-z_][\w.-]*)\2")


def _shell_refusals(lines: Sequence[str]) -> dict[int, str]:
    """Lines of a shell script whose end cannot take a comment, conservatively: inside a
    here-document, inside quotes that span lines, or continued with a backslash."""
    refused: dict[int, str] = {}
    quote: str | None = None
    heredocs: list[tuple[str, bool]] = []  # terminators still to come, and whether tabs strip
    body: tuple[str, bool] | None = None
    for number, raw in enumerate(lines, start=1):
        line = _LINE_BREAK.sub("", raw)
        if body is not None:
            refused[number] = IN_HEREDOC
            terminator, strip_tabs = body
            if (line.lstrip("\t") if strip_tabs else line) == terminator:
                body = heredocs.pop(0) if heredocs else None
            continue
        index = 0
        continued = False
        while index < len(line):
            char = line[index]
            if quote == "'":
                if char == "'":
                    quote = None
            elif char == "\\":
                if index == len(line) - 1:
                    continued = True
                index += 1
            elif quote == '"':
                if char == '"':
                    quote = None
            elif char in "'\"":
                quote = char
            elif char == "#" and (index == 0 or line[index - 1] in " \t;&|("):
                break  # the rest of the line is a comment
            elif char == "<" and (match := _HEREDOC.match(line, index)) and line[index + 2] != "<":
                heredocs.append((match.group(3), match.group(1) == "-"))
                index = match.end()
                continue
            index += 1
        if quote is not None:
            refused[number] = IN_QUOTES
        elif continued:
            refused[number] = CONTINUED
        if heredocs and quote is None and not continued:
            body = heredocs.pop(0)
    return refused


def _shell(source: bytes, findings: Sequence[Diagnostic]) -> FileSuppressions:
    text = source.decode("utf-8")  # strict: a script that is not UTF-8 is not rewritten
    lines = split_lines(text)
    refusals = _shell_refusals(lines)
    refused: list[Refused] = []
    edited = list(lines)
    written: list[Diagnostic] = []
    for number, found in sorted(_codes_by_line(findings).items()):
        reason = refusals.get(number) if number <= len(lines) else NOT_PYTHON
        if reason is not None:
            refused.extend(Refused(d, reason) for d in found)
            continue
        existing = IGNORE.search(lines[number - 1])
        start = existing.start() if existing is not None else None
        edited[number - 1] = with_codes(lines[number - 1], (d.code for d in found), start)
        written.extend(found)
    new_text = "".join(edited)
    scan = Suppressions.scan_comments(new_text)
    if not all(scan.covers(d.line, d.code) for d in written):
        return FileSuppressions(None, 0, [*refused, *(Refused(d, UNCHECKED) for d in written)])
    data = new_text.encode("utf-8")
    return FileSuppressions(data if data != source else None, len(written), refused)
