"""An optimizer handed to code of another module of the run (rules/optimizers/_handed.py), through
the real command line: the callee's gradient resets keep NPU101 from fusing it, and the callee's
file is part of the caller's cache key."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from _cli import run_npu_migrate

TRAIN = """\
import torch

from helpers.loop import run_epoch


def main(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run_epoch(model, loader, optimizer)
"""
LOOP = """\
def run_epoch(model, loader, optimizer):
    for batch in loader:
        optimizer.zero_grad()
        model(batch).sum().backward()
        optimizer.step()
"""
# The same loop, now dropping the gradients of parameters it did not train.
LOOP_WITH_RESET = (
    LOOP
    + """\
    for parameter in model.parameters():
        if not parameter.requires_grad:
            parameter.grad = None
"""
)


def npu_migrate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--select", "NPU101", *args, cwd=cwd)


def npu101(result: subprocess.CompletedProcess[str]) -> list[tuple[int, str, str]]:
    document = json.loads(result.stdout)
    return sorted(
        (d["line"], d["severity"], d["message"])
        for d in document["edits"] + document["diagnostics"]
        if d["path"].removeprefix("./") == "train.py" and d["code"] == "NPU101"
    )


def test_a_reset_added_to_the_callee_rechecks_the_unchanged_caller(tmp_path: Path) -> None:
    (tmp_path / "helpers").mkdir()
    (tmp_path / "train.py").write_text(TRAIN)
    loop = tmp_path / "helpers" / "loop.py"
    loop.write_text(LOOP)
    cache = str(tmp_path / "cache")
    check = ("--cache-dir", cache, "--check", "--format", "json", ".")
    before = npu_migrate(tmp_path, *check)
    assert [(line, severity) for line, severity, _ in npu101(before)] == [(7, "fixed")]

    loop.write_text(LOOP_WITH_RESET)
    after = npu_migrate(tmp_path, *check)
    [(line, severity, message)] = npu101(after)
    assert (line, severity) == (7, "manual")
    assert "`run_epoch(model, loader, optimizer)` (line 8) hands it to `run_epoch`" in message
    assert "`parameter.grad = None` (helpers/loop.py:8) drops a gradient" in message

    # The caller did not change; the migration writes nothing for it either.
    written = npu_migrate(tmp_path, "--cache-dir", cache, ".")
    assert written.returncode == 0, written.stdout + written.stderr
    assert (tmp_path / "train.py").read_text() == TRAIN
