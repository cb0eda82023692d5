"""Rewriting only the slices of a file that change: libcst never sees the rest.

A concrete syntax tree costs about half a kilobyte per node, and parsing one is a hundred times
dearer than ``ast.parse``; a 500 KB file of torch takes the better part of a gigabyte. But edits
are anchored at source spans, and most files need a handful of them. So the text is cut into
slices that libcst can parse on their own, each slice with edits is parsed, edited and printed,
and the results are spliced back between the untouched text:

- an **expression slice** is the outermost expression an edit (or a nest of edits) replaces,
  parsed with ``cst.parse_expression`` inside a pair of parentheses that are then dropped;
- a **statement slice** is a run of whole top-level statements, parsed as a module. It holds
  every edit of a statement (replacing, splitting, removing or moving one), every edit of a node
  that is not an expression (an import alias), and every expression edit inside such a slice.

The cut points keep libcst's ownership of comments and blank lines. A statement owns the lines
above it up to the previous statement, but at the start of a module they would be the module's
header, and the indented block of a compound statement before them may own some of them: so a
statement slice starts at the previous top-level statement (unedited, it prints as it was). A
slice that ends with a compound statement runs on to the next top-level statement, so that the
block's trailing comments stay with it. Slices that touch are merged.

Whatever a slice cannot do (a region libcst will not parse on its own, an edit whose node is not
found in it) makes the caller fall back to one parse of the whole file, which gives the same
result at the old cost.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import libcst as cst

from migrator.analysis.index import COMPOUND_STATEMENTS
from migrator.edits import BlockEdit, Edit, NodeEdit
from migrator.rewriter import apply_edits
from migrator.source import Source


class SliceError(Exception):
    """The edits cannot be applied slice by slice; parse the whole file instead."""


class Sliced(NamedTuple):
    text: str
    parsed: int  # characters handed to libcst


@dataclass
class _Unit:
    """One top-level statement line (``a = 1; b = 2`` is one) and where its slices may start
    and end."""

    first_line: int  # decorators included
    last_line: int
    compound: bool


@dataclass
class _Slice:
    start: int  # character offsets into the text
    end: int
    statements: bool  # parsed as a module (else as one expression)
    edits: list[Edit] = field(default_factory=list)


def apply_sliced(
    text: str, tree: ast.Module, edits: Sequence[Edit], *, header_end: int | None = None
) -> Sliced:
    """``text`` (whose ``ast`` is ``tree``) with ``edits`` applied, parsing only the slices
    that change. Raises :class:`SliceError` when that is not possible.

    ``header_end``: where the module's header (the lines above its first statement) ends, when
    ``text`` is the output of an earlier pass over a file whose first statement it may have
    removed (see :func:`_with_header`); by default, at the first statement.
    """
    if not edits:
        return Sliced(text, 0)
    source = Source(text)
    units = _units(tree)
    if not units:
        raise SliceError("no statements to cut at")
    slices = _plan(source, units, edits)
    if header_end is None:
        header_lines = units[0].first_line - 1
    else:
        header_lines = source.line_of_offset(header_end) - 1
    pieces: list[str] = []
    cursor = parsed = 0
    for piece in slices:
        pieces.append(text[cursor : piece.start])
        pieces.append(_edited(source, piece, header_lines))
        parsed += piece.end - piece.start
        cursor = piece.end
    pieces.append(text[cursor:])
    return Sliced("".join(pieces), parsed)


# -- planning ------------------------------------------------------------------------------------


def _units(tree: ast.Module) -> list[_Unit]:
    units: list[_Unit] = []
    for statement in tree.body:
        first = statement.lineno
        for decorator in getattr(statement, "decorator_list", ()):
            first = min(first, decorator.lineno)
        last = statement.end_lineno or statement.lineno
        compound = isinstance(statement, COMPOUND_STATEMENTS)
        if units and first <= units[-1].last_line:  # `a = 1; b = 2`: one statement line
            units[-1].last_line = max(units[-1].last_line, last)
            units[-1].compound = units[-1].compound or compound
        else:
            units.append(_Unit(first, last, compound))
    return units


def _plan(source: Source, units: list[_Unit], edits: Sequence[Edit]) -> list[_Slice]:
    firsts = [unit.first_line for unit in units]
    ranges: list[tuple[int, int]] = []  # unit index ranges of statement slices, inclusive
    expressions: list[NodeEdit] = []
    for edit in edits:
        if isinstance(edit, BlockEdit):
            starts = [start for _, start in edit.lines]
            low = _unit_at(source, firsts, min(starts))
            high = _unit_at(source, firsts, max(starts))
            ranges.append((low, high))
        elif issubclass(edit.kind, cst.BaseExpression):
            expressions.append(edit)
        else:
            at = _unit_at(source, firsts, edit.span[0])
            ranges.append((at, at))
    statement_slices = _statement_slices(source, units, ranges)
    slices = list(statement_slices)
    roots: list[_Slice] = []
    for edit in sorted(expressions, key=lambda e: (e.span[0], -e.span[1])):
        owner = _containing(statement_slices, edit.span)
        if owner is not None:
            owner.edits.append(edit)
        elif roots and roots[-1].start <= edit.span[0] and edit.span[1] <= roots[-1].end:
            roots[-1].edits.append(edit)
        else:
            roots.append(_Slice(edit.span[0], edit.span[1], statements=False, edits=[edit]))
    for edit in edits:
        if not isinstance(edit, NodeEdit) or not issubclass(edit.kind, cst.BaseExpression):
            owner = _containing(statement_slices, _span_of(source, edit))
            assert owner is not None
            owner.edits.append(edit)
    slices += roots
    slices.sort(key=lambda piece: piece.start)
    return slices


def _span_of(source: Source, edit: Edit) -> tuple[int, int]:
    if isinstance(edit, NodeEdit):
        return edit.span[0], edit.span[0]
    starts = [start for _, start in edit.lines]
    return min(starts), max(starts)


def _containing(slices: list[_Slice], span: tuple[int, int]) -> _Slice | None:
    for piece in slices:
        if piece.start <= span[0] and span[1] <= piece.end:
            return piece
    return None


def _unit_at(source: Source, firsts: list[int], offset: int) -> int:
    line = source.line_of_offset(offset)
    return max(0, bisect.bisect_right(firsts, line) - 1)


def _statement_slices(
    source: Source, units: list[_Unit], ranges: list[tuple[int, int]]
) -> list[_Slice]:
    spans = sorted(_widened(source, units, low, high) for low, high in ranges)
    merged: list[_Slice] = []
    for start, end in spans:
        if merged and start <= merged[-1].end:
            merged[-1].end = max(merged[-1].end, end)
        else:
            merged.append(_Slice(start, end, statements=True))
    return merged


def _widened(source: Source, units: list[_Unit], low: int, high: int) -> tuple[int, int]:
    """Character offsets of a module slice holding units ``low..high`` with the lines libcst
    attaches to them (see the module docstring)."""
    # The lines above a statement are its own only when a statement precedes it in the slice
    # (at the start of a module they are the module's header): start at the previous statement.
    start = 0 if low == 0 else _line_start(source, units[low - 1].first_line)
    if units[high].compound and high + 1 < len(units):
        end = _line_start(source, units[high + 1].first_line)
    elif units[high].compound:
        end = len(source.text)
    else:
        end = _line_start(source, units[high].last_line + 1)
    return start, end


def _line_start(source: Source, line: int) -> int:
    starts = source.line_starts
    return starts[line - 1] if line - 1 < len(starts) else len(source.text)


# -- editing -------------------------------------------------------------------------------------


def _edited(source: Source, piece: _Slice, header_lines: int) -> str:
    code = source.text[piece.start : piece.end]
    if code.endswith("\r"):
        # libcst only knows "\n" as a module's trailing newline and would drop a lone "\r"
        raise SliceError("a slice that ends with a lone carriage return")
    try:
        if piece.statements:
            module = cst.parse_module(code)
            if piece.start == 0:
                module = _with_header(module, header_lines)
            module = apply_edits(module, piece.edits, base=piece.start)
            if not (module.body or module.header or module.footer):
                return ""  # every statement removed (an empty module would print a newline)
            return module.code
        expression = cst.parse_expression(f"({code})")
        expression = expression.with_changes(lpar=[], rpar=[])
        edited = apply_edits(expression, piece.edits, base=piece.start)
        return cst.Module([]).code_for_node(edited)
    except cst.ParserSyntaxError as error:
        raise SliceError(f"libcst cannot parse the slice at offset {piece.start}") from error


def _with_header(module: cst.Module, lines: int) -> cst.Module:
    """``module`` with only its first ``lines`` lines as its header.

    libcst gives a module's header every line above its first statement. When an earlier pass
    removed a file's first statement, the lines that were above the next one are still that
    statement's own (they go with it when it is removed, and a new first line goes above
    them), as they are in the tree that pass edited: ``lines`` is the file's own header.
    """
    if len(module.header) <= lines or not module.body:
        return module
    first = module.body[0]
    moved = [*module.header[lines:], *first.leading_lines]
    return module.with_changes(
        header=module.header[:lines],
        body=[first.with_changes(leading_lines=moved), *module.body[1:]],
    )
