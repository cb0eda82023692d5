"""End to end: a parameter whose first gradient comes after `combine_grad=True` packed the others
(fixtures/e2e/multitask_late_heads: tasks taking turns, one head per task, as MT-DNN-style
scripts train).

NPU102 cannot see that the second head first gets a gradient at the second step, and adds
`combine_grad=True` (documented under Known limits). Ascend apex packs only the gradients that
exist after the first `scale_loss` and never unscales the others, so that program would train
the head on loss-scaled gradients on Ascend; the apex runtime raises there under
`npu-migrate verify` (`APEX_AMP_STRICT=1`), so verify fails loudly (exit 2) instead of passing
a migration Ascend would run differently. Without amp the two sides agree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _cli import run_npu_migrate

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "fixtures" / "e2e" / "multitask_late_heads"
TIMEOUT_S = 180
VERIFY_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("multitask_late_heads") / "program"
    shutil.copytree(PROGRAM, copy, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_npu_migrate("--no-cache", "-q", copy, timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr  # 1: the file was changed
    migrated = copy / "train.py"
    assert "opt_level=args.opt_level, combine_grad=True)" in migrated.read_text()
    return migrated


def verify(migrated: Path, *arguments: str) -> tuple[int, str]:
    original = PROGRAM / "train.py"
    command = ["verify", "--steps", "6", "--timeout", str(TIMEOUT_S), original, migrated]
    done = run_npu_migrate(*command, "--", *arguments, extra_env=VERIFY_ENV, timeout=3 * TIMEOUT_S)
    return done.returncode, done.stdout + done.stderr


# The runtime's own tests raise at both levels (runtime/tests/test_amp_combine.py); the whole
# program at O2 repeats O1's run through verify, so it runs in `make test-all`.
@pytest.mark.parametrize("level", ["O1", pytest.param("O2", marks=pytest.mark.slow)])
def test_verify_fails_where_ascend_would_not_unscale_a_late_gradient(
    migrated: Path, level: str
) -> None:
    code, output = verify(migrated, "--amp", "--opt-level", level)
    assert code == 2, output
    assert "the migrated program cannot run" in output, output
    assert (
        "parameters 'heads.1.weight', 'heads.1.bias' got their first gradient after the first "
        "amp.scale_loss had packed the gradients"
    ) in output, output


def test_verify_without_amp_finds_the_same_training(migrated: Path) -> None:
    code, output = verify(migrated)
    assert code == 0, output
    assert "same: 6 step(s) agree" in output, output
