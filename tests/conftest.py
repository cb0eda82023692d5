from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite fixtures/*/*.after.py and *.diagnostics.txt from the rules' current output "
        "(review the diff before committing)",
    )


ProgramRunner = Callable[[str, "dict[str, str] | None", str], Any]


@pytest.fixture
def run_json_program(tmp_path: Path) -> ProgramRunner:
    """Run a program's source as a script in a fresh interpreter (``env``: its environment,
    None for this one's) and return the JSON of its last printed line; it must exit 0."""

    def run(source: str, env: dict[str, str] | None, name: str) -> Any:
        script = tmp_path / name
        script.write_text(source)
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run
