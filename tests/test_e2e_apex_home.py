"""End to end: a script that Ascend's ModelZoo wrote for the NPU by hand (fixtures/e2e/apex_home,
DAL's shape): Ascend apex's `NpuFusedSGD`, with apex amp only under `--amp`. As written, the path
without `--amp` fails at its first step ("should be used with AMP"); migrated by the real command
line, the class is picked by the same condition, and ``npu-migrate verify`` shows that both paths
train: with `--amp` as the original does, without it as the script did with `torch.optim.SGD`
before it was ported (fixtures/e2e/apex_home/reference.py), where the original cannot run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from _cli import run_npu_migrate, start_npu_migrate

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "fixtures" / "e2e" / "apex_home"
TIMEOUT_S = 180
VERIFY_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def npu_migrate(*args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate(*args, timeout=TIMEOUT_S)


def start_verify(original: Path, migrated: Path, *program_args: str) -> subprocess.Popen[str]:
    command = ["verify", "--steps", "6", "--timeout", str(TIMEOUT_S), str(original)]
    return start_npu_migrate(*command, migrated, "--", *program_args, extra_env=VERIFY_ENV)


def test_apex_home_is_picked_by_amp_condition_and_both_paths_train(tmp_path: Path) -> None:
    migrated = tmp_path / "train.py"
    shutil.copyfile(PROGRAM / "train.py", migrated)
    result = npu_migrate("--no-cache", "-q", str(migrated))
    assert result.returncode == 1, result.stdout + result.stderr  # 1: the file was changed
    text = migrated.read_text()
    assert "(apex.optimizers.NpuFusedSGD if args.amp else torch_npu.optim.NpuFusedSGD)(" in text
    assert "from apex.optimizers import NpuFusedSGD" not in text  # no longer used
    assert "combine_grad=True" in text
    again = npu_migrate("--check", "--no-cache", "-q", str(migrated))
    assert again.returncode == 0, again.stdout + again.stderr  # nothing left: idempotent

    original = PROGRAM / "train.py"
    runs = {
        "amp": start_verify(original, migrated, "--amp"),
        "fp32, the original": start_verify(original, migrated),
        "fp32, the reference": start_verify(PROGRAM / "reference.py", migrated),
    }
    outputs = {}
    for name, process in runs.items():
        stdout, stderr = process.communicate(timeout=3 * TIMEOUT_S)
        outputs[name] = (process.returncode, stdout + stderr)
    for name in ("amp", "fp32, the reference"):
        code, output = outputs[name]
        assert code == 0, f"{name}: verify exited {code}\n{output}"
        assert "same: 6 step(s) agree" in output, output
    assert "(amp: amp O1" in outputs["amp"][1]
    assert "(fp32: no mixed precision)" in outputs["fp32, the reference"][1]
    code, output = outputs["fp32, the original"]
    assert code == 2, output  # the original side cannot run: what the migration fixed
    assert "apex.optimizers.NpuFusedSGD should be used with AMP" in output, output
