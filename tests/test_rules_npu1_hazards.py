"""NPU101's refusals are visible without -v and make `--check` fail (real CLI, real files)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from _cli import run_npu_migrate

CONDITIONAL_AMP = textwrap.dedent(
    """
    from apex import amp
    from apex.optimizers import FusedSGD


    def main(args, model):
        optimizer = FusedSGD(model.parameters(), lr=0.1)
        if args.fp16:
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        return model, optimizer
    """
)
GRAD_TO_NONE = textwrap.dedent(
    """
    import torch


    def train(model, loader):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
            for name, p in model.named_parameters():
                if "bias" in name:  # the biases only: the others keep their gradients
                    p.grad = None
    """
)


def check(script: Path) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--no-cache", "--select", "NPU101", "--check", script, timeout=120)


def test_conditional_amp_picks_the_class_by_its_condition(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CONDITIONAL_AMP)
    result = check(script)
    assert result.returncode == 1, result.stderr
    assert "would migrate" in result.stdout and "[manual]" not in result.stdout
    migrate = run_npu_migrate("--no-cache", "--select", "NPU101,NPU102", script, timeout=120)
    assert migrate.returncode == 1, migrate.stderr  # 1: the file was changed
    migrated = script.read_text()
    assert (
        "(apex.optimizers.NpuFusedSGD if args.fp16 else torch_npu.optim.NpuFusedSGD)(" in migrated
    )
    assert 'opt_level="O1", combine_grad=True)' in migrated
    assert check(script).returncode == 0


def test_a_hazard_leaves_the_file_alone_and_fails_the_check(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(GRAD_TO_NONE)
    result = check(script)
    assert result.returncode == 1, result.stderr
    assert "[manual] `torch.optim.Adam` is not rewritten to `NpuFusedAdam`" in result.stdout
    apply = run_npu_migrate("--no-cache", "--select", "NPU101", script, timeout=120)
    assert apply.returncode == 0, apply.stderr  # nothing changed, manual findings only
    assert script.read_text() == GRAD_TO_NONE
