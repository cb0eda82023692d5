"""Diagnostics are plain data: rules produce them, only the CLI renders them."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


class Severity(enum.StrEnum):
    """How a diagnostic should be read.

    ``fixed``: the rule rewrote the code (or, in ``--diff``/``--check`` mode, would rewrite it).
    ``manual``: the code needs migration that cannot be done safely by a tool; the message says how.
    ``info``: worth knowing, nothing to do (for example a setting that has no effect on NPU).
    ``error``: the file could not be processed at all (syntax error, undecodable bytes, internal
    error); it is left byte-identical.
    """

    FIXED = "fixed"
    MANUAL = "manual"
    INFO = "info"
    ERROR = "error"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding at one place. ``line`` and ``column`` are 1-based.

    In a notebook, ``cell`` is the cell's position (1-based, every cell counted) and ``line``
    the line in that cell; ``cell`` is None in a Python file."""

    path: str
    line: int
    column: int
    code: str
    severity: Severity
    message: str
    cell: int | None = None

    @property
    def location(self) -> str:
        """``path:line:column``, or ``path:cell N:line:column`` in a notebook."""
        cell = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{cell}{self.line}:{self.column}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        if self.cell is None:
            del data["cell"]  # only notebook diagnostics have one
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Diagnostic:
        return cls(
            path=data["path"],
            line=data["line"],
            column=data["column"],
            code=data["code"],
            severity=Severity(data["severity"]),
            message=data["message"],
            cell=data.get("cell"),
        )

    def render(self) -> str:
        return f"{self.location}: {self.code} [{self.severity}] {self.message}"


def first_few(items: Iterable[str], most: int) -> tuple[list[str], int]:
    """``items`` once each, cut to the first ``most`` when more follow, and how many were cut
    (never just one: naming it is no longer than counting it). A message about a call made forty
    times names a few and counts the rest."""
    shown = list(dict.fromkeys(items))
    if len(shown) <= most + 1:
        return shown, 0
    return shown[:most], len(shown) - most


_MOST_LINES = 8  # line numbers named in one message; the others are counted


def lines_named(numbers: Iterable[int]) -> str:
    """``"line 4"``, ``"lines 4, 9"``, or the first eight and how many more."""
    shown, more = first_few((str(number) for number in numbers), _MOST_LINES)
    if len(shown) == 1:
        return f"line {shown[0]}"
    return f"lines {', '.join(shown)}" + (f" and {more} more" if more else "")
