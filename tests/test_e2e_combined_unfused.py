"""End to end: `combine_grad=True` for an optimizer NPU101 leaves unfused (fixtures/e2e/
combined_unfused, in the shape of Ascend ModelZoo's BMN and S3FD scripts: torch's Adam with
AMSGrad, which no NPU fused optimizer implements, `model.zero_grad()`, amp under `--amp`).

Ascend apex packs the gradients of any optimizer it is given when `combine_grad=True` (its
guide's example passes `torch.optim.SGD`), and makes `nn.Module.zero_grad` zero in place while it
does; nothing in the script sets a gradient to None or replaces it, so NPU102 adds the keyword
and `npu-migrate verify` finds the same training with and without amp, at O1 and O2.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _cli import run_npu_migrate, start_npu_migrate

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "fixtures" / "e2e" / "combined_unfused"
TIMEOUT_S = 180
VERIFY_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("combined_unfused") / "program"
    shutil.copytree(PROGRAM, copy, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_npu_migrate("--no-cache", "-q", copy, timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr  # 1: the file was changed
    return copy / "train.py"


def test_the_unfused_optimizer_gets_combined_gradients(migrated: Path) -> None:
    text = migrated.read_text()
    assert "torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4, amsgrad=True)" in (
        text
    )
    assert "loss_scale=128, combine_grad=True)" in text
    check = run_npu_migrate("--check", "--no-cache", "--select", "NPU1", migrated.parent)
    assert "NPU102" not in check.stdout, check.stdout  # nothing left for a person on the amp call
    assert "do not implement AMSGrad" in check.stdout, check.stdout


@pytest.mark.parametrize(
    "arguments", [(), ("--amp",), ("--amp", "--opt-level", "O2")], ids=["fp32", "O1", "O2"]
)
def test_verify_finds_the_same_training(migrated: Path, arguments: tuple[str, ...]) -> None:
    process: subprocess.Popen[str] = start_npu_migrate(
        "verify",
        "--steps",
        "6",
        "--timeout",
        str(TIMEOUT_S),
        str(PROGRAM / "train.py"),
        migrated,
        "--",
        *arguments,
        extra_env=VERIFY_ENV,
    )
    stdout, stderr = process.communicate(timeout=3 * TIMEOUT_S)
    assert process.returncode == 0, stdout + stderr
    assert "same: 6 step(s) agree" in stdout, stdout
