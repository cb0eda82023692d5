"""Shell launch scripts: report what still points at CUDA; never rewrite them.

Opt-in (``--include-shell`` or ``include-shell`` in the configuration): files ending in ``.sh``
or ``.bash`` are read line by line, without a shell parser; each selected rule that knows
something about shell scripts (:meth:`~migrator.rule.Rule.scan_shell_line`) is given every line
without its comment: the environment variables NPU926 knows, ``torch.cuda.*`` in inline Python
(NPU302), ``--dist-backend nccl`` (NPU305) and ``--device cuda:0`` (NPU303) style options.

Each finding is reported under the code of the rule that handles the same thing in Python, so
``--select`` / ``--ignore`` and ``# npu-migrate: ignore[...]`` comments apply to it, and it is a
``manual`` finding (``info`` for NCCL variables without an HCCL counterpart), which makes
``--check`` fail like a manual finding in Python. The file itself is never changed: in
``--output`` mode it is copied as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from migrator.diagnostics import Diagnostic
from migrator.results import FileResult, Status
from migrator.rule import Rule
from migrator.suppressions import Suppressions

if TYPE_CHECKING:
    import pathspec

SHELL_SUFFIXES = (".sh", ".bash")
DEFAULT_PATTERNS = tuple(f"*{suffix}" for suffix in SHELL_SUFFIXES)


def is_shell_script(path: str) -> bool:
    return path.endswith(SHELL_SUFFIXES)


@dataclass(frozen=True)
class ShellScripts:
    """Which shell scripts a folder walk picks up: gitignore-style patterns (``*.sh``
    anywhere, ``scripts/*.sh`` relative to the project folder), among ``.sh`` / ``.bash``
    files."""

    patterns: tuple[str, ...]
    project_root: Path

    @cached_property
    def spec(self) -> pathspec.GitIgnoreSpec:
        import pathspec  # only a run that scans shell scripts pays for it

        return pathspec.GitIgnoreSpec.from_lines(list(self.patterns))

    def matches(self, real_path: str) -> bool:
        if not is_shell_script(real_path):
            return False
        try:
            relative = Path(real_path).relative_to(self.project_root).as_posix()
        except ValueError:
            relative = os.path.basename(real_path)  # outside the project: name patterns only
        return self.spec.match_file(relative)


def scan_shell(source: bytes, path: str, rules: Sequence[type[Rule]]) -> FileResult:
    """The findings of the selected ``rules`` in one shell script; never an edit."""
    text = source.decode("utf-8", errors="replace")  # only read, never written back
    suppressions = Suppressions.scan_comments(text)
    if suppressions.skip_file:
        return FileResult(path, Status.SKIPPED, source, source)
    diagnostics = [
        diagnostic
        for diagnostic in _findings(text, path, rules)
        if not suppressions.covers(diagnostic.line, diagnostic.code)
    ]
    diagnostics.sort(key=lambda d: (d.line, d.column, d.code))
    return FileResult(path, Status.UNCHANGED, source, source, diagnostics)


def _findings(text: str, path: str, rules: Sequence[type[Rule]]) -> Iterator[Diagnostic]:
    for number, line in enumerate(text.splitlines(), start=1):
        code = _without_comment(line)
        if not code.strip():
            continue
        for rule in rules:
            yield from rule.scan_shell_line(code, path, number)


def _without_comment(line: str) -> str:
    """``line`` up to an unquoted ``#`` that starts a word (``$#`` and ``a#b`` are not
    comments); quotes are tracked on this line only."""
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\" and quote != "'":
            index += 2  # an escaped character, quote or not
            continue
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
        index += 1
    return line


def shell_scripts(patterns: Iterable[str], project_root: Path) -> ShellScripts | None:
    """The selection for ``patterns``; None when there are none (shell scanning is off)."""
    chosen = tuple(patterns)
    return ShellScripts(chosen, project_root) if chosen else None
