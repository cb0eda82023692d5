"""``--format html`` / ``--html FILE``: one self-contained page to review a migration.

The page has the run's summary (per rule, per folder, fixed / manual / info, a chart), a table
of files to filter and sort, and for each file its diff side by side with the findings at their
lines; a rule code opens its ``--explain`` text. Everything is in the one file: the styles and
the script are inline, the data is one JSON document in a ``<script type="application/json">``
element, and a Content-Security-Policy forbids every network request, so the page works from
a CI artifact, a mail attachment or a file share, without a server.

What the data holds, so that the page stays usable for thousands of files:

- only the files with something to show (changed, findings, errors, skipped); clean files
  are counted in the summary;
- per file, not the whole text but the aligned lines around each change and finding (three
  lines of context), old and new side by side; unchanged lines are stored once;
- each rule's documentation once, for the rules the run used.

The page renders lazily: the file table draws only the rows in view, and a file's diff is built
when it is opened. File contents reach the page only as JSON strings (``<``, ``>`` and ``&``
escaped, so no text can close the script element) and the script writes them with
``textContent``, never as markup.

Positions are the original file's lines, as everywhere in npu-migrate. How the new text of a
changed file is obtained depends on the mode (the CLI passes it in): the diff of ``--diff``,
the written file in place, the copy of ``-o``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import migrator
from migrator.diagnostics import Diagnostic, Severity
from migrator.formats import ProjectPaths, RuleInfo
from migrator.jobs import Mode, Outcome
from migrator.notebooks import is_notebook, split_lines
from migrator.originals import Originals, Texts, texts_of
from migrator.report import Summary, fixed_label
from migrator.results import Status
from migrator.runner import RunResult

CONTEXT = 3  # unchanged lines shown around each change and finding
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_CELL_HEADER = re.compile(r"--- .*:cell (\d+)\n?\Z")


# -- the new text of a changed file ----------------------------------------------------------------


def patched(old: str, patch: Sequence[str]) -> str:
    """``old`` with the hunks of a unified diff of it applied (``patch``: the diff's lines,
    headers allowed). The diff is one that :func:`migrator.files.unified_diff` wrote, whose
    lines are ``str.splitlines`` lines."""
    old_lines = old.splitlines(keepends=True)
    out: list[str] = []
    position = 0
    index = 0
    while index < len(patch):
        match = _HUNK.match(patch[index])
        index += 1
        if match is None:
            continue
        start, count = int(match[1]), int(match[2] if match[2] is not None else 1)
        first = start - 1 if count else start
        out.extend(old_lines[position:first])
        position = first
        removed, added = count, int(match[4] if match[4] is not None else 1)
        last = ""
        while index < len(patch) and (removed or added or patch[index].startswith("\\")):
            line = patch[index]
            index += 1
            tag, text = line[:1], line[1:]
            if tag == " ":
                out.append(old_lines[position])
                position += 1
                removed -= 1
                added -= 1
            elif tag == "-":
                position += 1
                removed -= 1
            elif tag == "+":
                out.append(text)
                added -= 1
            elif tag == "\\" and last in (" ", "+"):  # "No newline at end of file"
                out[-1] = out[-1].rstrip("\n")
            last = tag
    out.extend(old_lines[position:])
    return "".join(out)


def texts_from_diff(old: Texts, diff: str, notebook: bool) -> Texts:
    """The new text(s) of a file from its ``--diff`` output and its old text(s)."""
    lines = diff.splitlines(keepends=True)
    if not notebook:
        return Texts({None: patched(old.sections.get(None, ""), lines)})
    sections = dict(old.sections)
    cells: dict[int, list[str]] = {}
    current: int | None = None
    for line in lines:
        header = _CELL_HEADER.match(line)
        if header is not None:
            current = int(header[1])
            cells[current] = []
        elif current is not None:
            cells[current].append(line)
    for number, patch in cells.items():
        # notebook_diff gives a cell's last line a line break it may not have.
        text = sections.get(number, "")
        suffix = "" if not text or text.endswith(("\n", "\r")) else "\n"
        sections[number] = patched(text + suffix, patch)
    return Texts(sections)


# -- what the page shows of one file ---------------------------------------------------------------


def chunks(old: str, new: str, lines: Iterable[int]) -> list[list[Any]]:
    """The aligned lines of ``old`` and ``new`` around every change and every old line in
    ``lines``: ``[old_start, new_start, rows]`` per run, each row its text led by `` ``
    (both sides), ``-`` (old only) or ``+`` (new only)."""
    old_lines = [line.rstrip("\r\n") for line in split_lines(old)]
    new_lines = [line.rstrip("\r\n") for line in split_lines(new)]
    rows: list[tuple[str, int, int]] = []  # (tag, old index, new index), 0-based
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for opcode, i1, i2, j1, j2 in matcher.get_opcodes():
        if opcode == "equal":
            rows.extend((" ", i, j1 + i - i1) for i in range(i1, i2))
            continue
        rows.extend(("-", i, j1) for i in range(i1, i2))
        rows.extend(("+", i2, j) for j in range(j1, j2))
    wanted = {line - 1 for line in lines}
    keep = [False] * len(rows)
    for index, (tag, i, _) in enumerate(rows):
        if tag != " " or i in wanted:
            for near in range(max(0, index - CONTEXT), min(len(rows), index + CONTEXT + 1)):
                keep[near] = True
    found: list[list[Any]] = []
    current: list[str] | None = None
    for index, (tag, i, j) in enumerate(rows):
        if not keep[index]:
            current = None
            continue
        if current is None:
            current = []
            found.append([i + 1, j + 1, current])
        current.append(tag + (new_lines[j] if tag == "+" else old_lines[i]))
    return found


def file_view(
    old: Texts | None, new: Texts | None, diagnostics: Sequence[Diagnostic]
) -> list[dict[str, Any]]:
    """The sections of a file's view: one for a Python file, one per code cell of a notebook
    that changed or has a diagnostic."""
    if old is None:
        return []
    lines_by_cell: dict[int | None, set[int]] = {}
    for diagnostic in diagnostics:
        if diagnostic.severity is not Severity.ERROR:
            lines_by_cell.setdefault(diagnostic.cell, set()).add(diagnostic.line)
    sections = []
    for key in sorted(old.sections, key=lambda cell: cell or 0):
        before = old.sections[key]
        after = new.sections.get(key, before) if new is not None else before
        if before == after and key not in lines_by_cell:
            continue
        found = chunks(before, after, lines_by_cell.get(key, ()))
        if found:
            sections.append({"cell": key, "chunks": found})
    return sections


def diagnostic_row(diagnostic: Diagnostic) -> list[Any]:
    return [
        diagnostic.cell,
        diagnostic.line,
        diagnostic.column,
        diagnostic.code,
        str(diagnostic.severity),
        diagnostic.message,
    ]


@dataclass(frozen=True)
class FileEntry:
    outcome: Outcome
    shown: str
    view: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.outcome.diagnostics, key=lambda d: (d.cell or 0, d.line, d.column))
        return {
            "path": self.shown,
            "status": str(self.outcome.status),
            "reason": self.outcome.reason,
            "diagnostics": [diagnostic_row(d) for d in ordered],
            "view": self.view,
        }


def worth_showing(outcome: Outcome) -> bool:
    return outcome.status is not Status.UNCHANGED or bool(outcome.diagnostics)


# -- the page ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    result: RunResult
    mode: Mode
    rules: Sequence[RuleInfo]
    paths: ProjectPaths
    arguments: Sequence[str]
    exit_code: int
    baseline: Mapping[str, Any] | None = None

    def data(self, files: Iterable[FileEntry]) -> dict[str, Any]:
        listed = [entry.to_json() for entry in files]
        used = {row[3] for entry in listed for row in entry["diagnostics"]}
        return {
            "tool": "npu-migrate",
            "version": migrator.__version__,
            "mode": str(self.mode),
            "fixed_label": fixed_label(self.mode),
            "arguments": list(self.arguments),
            "exit_code": self.exit_code,
            "summary": Summary.of(self.result).to_json(),
            "baseline": dict(self.baseline) if self.baseline is not None else None,
            "rules": {
                rule.code: {
                    "name": rule.name,
                    "summary": rule.summary,
                    "fix_safety": rule.fix_safety,
                    "documentation": rule.documentation,
                }
                for rule in self.rules
                if rule.code in used
            },
            "files": listed,
        }


def embedded_json(data: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: nothing in it can end the element or
    start a comment, whatever the strings hold."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _asset(name: str) -> str:
    text = resources.files("migrator.formats").joinpath("html_assets", name).read_text("utf-8")
    if re.search(r"</(script|style)", text, re.IGNORECASE):
        raise RuntimeError(f"{name} may not contain a closing script or style tag")
    return text


# No request leaves the page: no fonts, images, scripts or connections from anywhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
)


def render(data: Mapping[str, Any]) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>npu-migrate report</title>\n"
        f"<style>\n{_asset('report.css')}</style>\n</head>\n<body>\n"
        '<noscript>This report needs JavaScript.</noscript>\n<main id="app"></main>\n'
        f'<script type="application/json" id="report-data">{embedded_json(data)}</script>\n'
        f"<script>\n{_asset('report.js')}</script>\n</body>\n</html>\n"
    )


def file_entries(
    result: RunResult,
    run_mode: Mode,
    originals: Originals,
    paths: ProjectPaths,
    destinations: Mapping[str, str],
) -> Iterator[FileEntry]:
    """The page's entry of every file worth showing, with its view. ``run_mode`` is the mode
    the run was made in, which says where a changed file's new text is: in its diff
    (``diff``), in the file (``write``) or in its copy (``output``, ``destinations``)."""
    for outcome in result.outcomes:
        if not worth_showing(outcome):
            continue
        old = originals.texts(outcome.path)
        new = None
        if outcome.status is Status.CHANGED and old is not None:
            new = _new_texts(outcome, run_mode, old, destinations)
        view = file_view(old, new, outcome.diagnostics)
        yield FileEntry(outcome, paths.shown(outcome.path), view)
        originals.forget(outcome.path)


def _new_texts(
    outcome: Outcome, run_mode: Mode, old: Texts, destinations: Mapping[str, str]
) -> Texts | None:
    if outcome.diff is not None:
        return texts_from_diff(old, outcome.diff, is_notebook(outcome.path))
    where = {Mode.WRITE: outcome.path, Mode.OUTPUT: destinations.get(outcome.path)}.get(run_mode)
    if where is None:
        return None
    try:
        with open(where, "rb") as stream:
            return texts_of(outcome.path, stream.read())
    except OSError:
        return None
