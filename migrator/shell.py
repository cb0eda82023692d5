"""Shell launch scripts: report what still points at CUDA; never rewrite them.

Opt-in (``--include-shell`` or ``include-shell`` in the configuration): files ending in ``.sh``
or ``.bash`` are scanned line by line, without a shell parser, for

- the environment variables NPU926 knows (``export CUDA_VISIBLE_DEVICES=0,1``,
  ``NCCL_DEBUG=INFO torchrun ...``, ``$CUDA_VISIBLE_DEVICES``, ``unset NCCL_P2P_DISABLE``),
  reported under NPU926 with the same advice as in Python code;
- ``torch.cuda.*`` in inline Python (``python -c "import torch;
  torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"``, here-documents), under NPU302;
- ``--dist-backend nccl`` style options, under NPU305, and ``--device cuda:0`` style options,
  under NPU303.

Each finding is reported under the code of the rule that handles the same thing in Python, so
``--select`` / ``--ignore`` and ``# npu-migrate: ignore[...]`` comments apply to it, and it is a
``manual`` finding (``info`` for NCCL variables without an HCCL counterpart), which makes
``--check`` fail like a manual finding in Python. The file itself is never changed: in
``--output`` mode it is copied as it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from migrator.diagnostics import Diagnostic, Severity
from migrator.results import FileResult, Status
from migrator.suppressions import Suppressions

SHELL_SUFFIXES = (".sh", ".bash")
DEFAULT_PATTERNS = tuple(f"*{suffix}" for suffix in SHELL_SUFFIXES)

ENVIRONMENT_CODE = "NPU926"
TORCH_CUDA_CODE = "NPU302"
BACKEND_CODE = "NPU305"
DEVICE_CODE = "NPU303"

TORCH_CUDA = re.compile(r"\btorch\.cuda\.(\w+)")
BACKEND_OPTION = re.compile(r"(--[\w-]*backend)(?:=|\s+)[\"']?(nccl)\b")
DEVICE_OPTION = re.compile(r"(--[\w-]*device)(?:=|\s+)[\"']?(cuda(?::\d+)?)\b")
NOT_REWRITTEN = "npu-migrate does not rewrite shell scripts"


def is_shell_script(path: str) -> bool:
    return path.endswith(SHELL_SUFFIXES)


@dataclass(frozen=True)
class ShellScripts:
    """Which shell scripts a folder walk picks up: gitignore-style patterns (``*.sh``
    anywhere, ``scripts/*.sh`` relative to the project folder), among ``.sh`` / ``.bash``
    files."""

    patterns: tuple[str, ...]
    project_root: Path

    @property
    def spec(self) -> pathspec.GitIgnoreSpec:
        return pathspec.GitIgnoreSpec.from_lines(list(self.patterns))

    def matches(self, real_path: str) -> bool:
        if not is_shell_script(real_path):
            return False
        try:
            relative = Path(real_path).relative_to(self.project_root).as_posix()
        except ValueError:
            relative = os.path.basename(real_path)  # outside the project: name patterns only
        return self.spec.match_file(relative)


def scan_shell(source: bytes, path: str, codes: Sequence[str]) -> FileResult:
    """The findings of one shell script under the selected ``codes``; never an edit."""
    text = source.decode("utf-8", errors="replace")  # only read, never written back
    suppressions = Suppressions.scan_comments(text)
    if suppressions.skip_file:
        return FileResult(path, Status.SKIPPED, source, source)
    selected = set(codes)
    diagnostics = [
        diagnostic
        for diagnostic in _findings(text, path)
        if diagnostic.code in selected and not suppressions.covers(diagnostic.line, diagnostic.code)
    ]
    diagnostics.sort(key=lambda d: (d.line, d.column, d.code))
    return FileResult(path, Status.UNCHANGED, source, source, diagnostics)


def _findings(text: str, path: str) -> Iterator[Diagnostic]:
    for number, line in enumerate(text.splitlines(), start=1):
        code = _without_comment(line)
        if not code.strip():
            continue
        yield from _environment(code, path, number)
        for match in TORCH_CUDA.finditer(code):
            yield _manual(
                path,
                number,
                match.start(),
                TORCH_CUDA_CODE,
                f"inline Python uses `torch.cuda.{match.group(1)}`: write "
                f"`torch.npu.{match.group(1)}` and `import torch_npu`; {NOT_REWRITTEN}",
            )
        for match in BACKEND_OPTION.finditer(code):
            yield _manual(
                path,
                number,
                match.start(2),
                BACKEND_CODE,
                f"`{match.group(1)}` selects nccl: pass hccl; {NOT_REWRITTEN}",
            )
        for match in DEVICE_OPTION.finditer(code):
            device = match.group(2)
            yield _manual(
                path,
                number,
                match.start(2),
                DEVICE_CODE,
                f"`{match.group(1)}` selects `{device}`: pass `{'npu' + device[4:]}`; "
                f"{NOT_REWRITTEN}",
            )


def _environment(code: str, path: str, number: int) -> Iterator[Diagnostic]:
    from migrator.rules.device.npu926_cuda_environment import ENVIRONMENT_NAME, advice_for

    for match in ENVIRONMENT_NAME.finditer(code):
        name = match.group(1)
        message, severity = advice_for(name)
        use = _use(code, match.start(1), match.end(1))
        yield Diagnostic(
            path, number, match.start(1) + 1, ENVIRONMENT_CODE, severity, f"`{name}` ({use}): "
            f"{message}; {NOT_REWRITTEN}"
        )  # fmt: skip


def _use(code: str, start: int, end: int) -> str:
    before = code[:start].rstrip("{")
    if before.endswith("$"):
        return "read here"
    if code.startswith("=", end):
        return "set here"
    if re.search(r"\bunset\s+(-v\s+)?$", code[:start]):
        return "unset here"
    return "named here"


def _manual(path: str, line: int, offset: int, code: str, message: str) -> Diagnostic:
    return Diagnostic(path, line, offset + 1, code, Severity.MANUAL, message)


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
