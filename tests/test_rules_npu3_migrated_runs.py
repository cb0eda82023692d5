"""The device rules' whole-script fixture still trains after migration, on CPU, under the shim.

``fixtures/npu301/whole_imagenet_main`` is an imagenet-style GPU script; its expected output is
what the NPU3xx/NPU92x rules make of it. Both run here, the original with stock torch and the
migrated one with the runtime's torch_npu shim, and must print the same losses.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

testing = pytest.importorskip("apex.testing", reason="needs the runtime: pip install -e runtime")

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "npu301" / "whole_imagenet_main"
LOSS = re.compile(r"epoch \d+ step \d+ loss [\d.]+")


def losses(script: Path, env: dict[str, str] | None) -> list[str]:
    result = subprocess.run(
        [sys.executable, str(script), "--epochs", "1", "--seed", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return LOSS.findall(result.stdout)


def test_migrated_imagenet_script_trains_like_the_original_on_cpu() -> None:
    original = losses(FIXTURE.with_name(FIXTURE.name + ".before.py"), None)
    migrated = losses(FIXTURE.with_name(FIXTURE.name + ".after.py"), testing.npu_shim_env())
    assert len(original) == 3
    assert migrated == original
