"""The npu-migrate command line as the tests run it.

:func:`run_npu_migrate` is the real command in a fresh interpreter (``python -m migrator`` with
this one's Python, so the migrator of this checkout), run to its end: exit code, stdout and
stderr as text. :func:`start_npu_migrate` starts the same command for runs that go side by side
(``verify`` of several programs) and leaves the waiting to the caller. Both give it no stdin
(the command never reads one) and its environment is this process's, with ``extra_env`` set on
top; :func:`run_command` runs another entry point (the console script, ``python -c``) the
same way. :func:`in_process` calls :func:`migrator.cli.main` in this interpreter, for tests of
options and output where a fresh process adds nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from migrator.cli import main

NPU_MIGRATE = (sys.executable, "-m", "migrator")
# A run takes seconds; the limit is there so that a hung run fails its test instead of the
# whole suite, and is generous because CI machines are shared.
TIMEOUT_S = 300

Argument = str | os.PathLike[str]
Cli = Callable[..., tuple[int, str, str]]


def environment(extra_env: Mapping[str, str] | None) -> dict[str, str] | None:
    """This process's environment with ``extra_env`` on top (None: inherit it as it is)."""
    return None if extra_env is None else {**os.environ, **extra_env}


def run_command(
    command: Sequence[Argument],
    *,
    cwd: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (an entry point of npu-migrate) to its end, its output captured."""
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=environment(extra_env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_npu_migrate(
    *args: Argument,
    cwd: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``npu-migrate ARGS`` in a fresh interpreter, run to its end, its output captured."""
    return run_command([*NPU_MIGRATE, *args], cwd=cwd, extra_env=extra_env, timeout=timeout)


def start_npu_migrate(
    *args: Argument, cwd: Path | None = None, extra_env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """``npu-migrate ARGS`` started in a fresh interpreter, stdout and stderr piped as text."""
    return subprocess.Popen(
        [*NPU_MIGRATE, *map(str, args)],
        cwd=cwd,
        env=environment(extra_env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def in_process(capsys: pytest.CaptureFixture[str], *leading: str) -> Cli:
    """``main([*leading, *args])`` in this interpreter, as (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        code = main([*leading, *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke
