"""Diagnostics are plain data: rules produce them, only the CLI renders them."""

from __future__ import annotations

import enum
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
    """One finding at one place. ``line`` and ``column`` are 1-based."""

    path: str
    line: int
    column: int
    code: str
    severity: Severity
    message: str

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
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
        )

    def render(self) -> str:
        return (
            f"{self.path}:{self.line}:{self.column}: {self.code} [{self.severity}] {self.message}"
        )
