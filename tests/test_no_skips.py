"""The README's test command turns a skipped test into a failure (conftest.py at the root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest

@pytest.mark.skipif(True, reason="torch is not installed")
def test_needs_torch():
    pass

def test_plain():
    pass
"""


def run(tmp_path: Path, no_skips: bool) -> subprocess.CompletedProcess[str]:
    test_file = tmp_path / "test_sample.py"
    test_file.write_text(SKIPPING)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NPU_MIGRATE_NO_SKIPS", None)
    if no_skips:
        env["NPU_MIGRATE_NO_SKIPS"] = "1"
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, str(test_file)], capture_output=True, text=True, cwd=tmp_path, env=env
    )


def test_a_skip_fails_the_readme_test_command(tmp_path: Path) -> None:
    done = run(tmp_path, no_skips=True)
    assert done.returncode == 1, done.stdout
    assert "must run every test: Skipped: torch is not installed" in done.stdout
    assert "1 passed" in done.stdout


def test_plain_pytest_still_allows_skips(tmp_path: Path) -> None:
    done = run(tmp_path, no_skips=False)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 skipped" in done.stdout
