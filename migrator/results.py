"""What processing one file gives: its status, its bytes before and after, its diagnostics.

Shared by the engine, the runner, the cache and the reports; imports nothing of theirs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from migrator.diagnostics import Diagnostic

ERROR_CODE = "NPU000"  # a file that could not be processed; not a rule, never selectable


class Status(enum.StrEnum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"  # rewritten, or (with apply=False) would be
    SKIPPED = "skipped"  # `# npu-migrate: skip-file`
    ERROR = "error"


@dataclass
class FileResult:
    path: str
    status: Status
    original: bytes
    migrated: bytes
    diagnostics: list[Diagnostic] = field(default_factory=list)
    parsed: int = 0  # characters of the file libcst parsed (the expensive stage); 0: none
    sliced: bool = False  # libcst parsed only the slices that change (not the whole file)

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED
