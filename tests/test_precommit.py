"""The hooks of ``.pre-commit-hooks.yaml``, installed by pre-commit for real.

The hook repository is a throwaway git repository holding this repository's committed files
(``git archive HEAD``), so that work in progress in the checkout can neither break nor fake the
test. The project names it in a ``.pre-commit-config.yaml`` as the README shows, with the check
hook in pre-commit's ``manual`` stage, and ``pre-commit install`` puts it in the git hook.
pre-commit builds one virtual environment for the hook repository and pip-installs the package
there (its dependencies come from the package index): the one slow step, done once for all runs
(``pre-commit try-repo`` would build a new one for every run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import run_npu_migrate

REPOSITORY = Path(__file__).resolve().parent.parent
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
UNMIGRATED = (
    b"from apex import amp\n"
    b"from apex.optimizers import NpuFusedSGD\n"
    b"optimizer = NpuFusedSGD(model.parameters(), lr=0.1)\n"
    b"model, optimizer = amp.initialize(model, optimizer)\n"
)
MIGRATED = UNMIGRATED.replace(b"optimizer)\n", b"optimizer, combine_grad=True)\n")


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def committed_copy(destination: Path) -> Path:
    """This repository's HEAD as a fresh one-commit git repository."""
    destination.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=REPOSITORY, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, check=True)
    if not (destination / ".pre-commit-hooks.yaml").exists():
        pytest.fail(".pre-commit-hooks.yaml is not committed")
    init_repository(destination)
    git("add", ".", cwd=destination)
    assert git("commit", "-q", "-m", "hooks", cwd=destination).returncode == 0
    return destination


def init_repository(folder: Path) -> None:
    git("init", "-q", "-b", "main", cwd=folder)
    git("config", "user.email", "test@example.com", cwd=folder)
    git("config", "user.name", "test", cwd=folder)
    git("config", "commit.gpgsign", "false", cwd=folder)


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPOSITORY / ".git").exists() or not PRE_COMMIT.exists(),
    reason="needs git, this repository's history and pre-commit",
)
def test_hook_fails_the_commit_on_unmigrated_code_and_passes_after(tmp_path: Path) -> None:
    hooks = committed_copy(tmp_path / "hooks")
    revision = git("rev-parse", "HEAD", cwd=hooks).stdout.strip()
    project = tmp_path / "project"
    project.mkdir()
    init_repository(project)
    (project / "pyproject.toml").write_text("[tool.npu-migrate]\nselect = ['NPU102']\n")
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n"
        f"  - repo: {hooks}\n"
        f"    rev: {revision}\n"
        f"    hooks:\n"
        f"      - id: npu-migrate\n"
        f"      - id: npu-migrate-check\n"
        f"        stages: [manual]\n"
    )
    (project / "train.py").write_bytes(UNMIGRATED)
    git("add", ".", cwd=project)
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    installed = subprocess.run(
        [str(PRE_COMMIT), "install"], cwd=project, env=env, capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    def check_hook() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PRE_COMMIT), "run", "--hook-stage", "manual", "npu-migrate-check"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )

    refused = git("commit", "-m", "unmigrated", cwd=project, env=env)
    shown = refused.stdout + refused.stderr  # git passes the hook's output to stderr
    assert refused.returncode != 0, shown
    assert "files were modified by this hook" in shown
    assert "migrated train.py (NPU102)" in shown
    assert (project / "train.py").read_bytes() == MIGRATED
    assert git("rev-parse", "HEAD", cwd=project).returncode != 0  # nothing was committed

    git("add", "train.py", cwd=project)
    accepted = git("commit", "-m", "migrated", cwd=project, env=env)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert git("show", "HEAD:train.py", cwd=project).stdout.encode() == MIGRATED

    # The check-only hook, from the same install: fails and writes nothing.
    (project / "other.py").write_bytes(UNMIGRATED)
    git("add", "other.py", cwd=project)
    checked = check_hook()
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "would migrate other.py (NPU102)" in checked.stdout
    assert (project / "other.py").read_bytes() == UNMIGRATED

    # With the baseline the configuration names, the check hook fails only on new findings.
    (project / "pyproject.toml").write_text(
        "[tool.npu-migrate]\nselect = ['NPU102', 'NPU920']\nbaseline = 'baseline.json'\n"
    )
    wrapped = b"import torch\n" + MIGRATED + b"net = torch.nn.DataParallel(model)\n"
    (project / "other.py").write_bytes(wrapped)
    written = run_npu_migrate("--check", "--write-baseline", ".", cwd=project, extra_env=env)
    assert written.returncode == 0, written.stdout + written.stderr
    git("add", ".", cwd=project)

    known = check_hook()
    assert known.returncode == 0, known.stdout + known.stderr
    (project / "other.py").write_bytes(wrapped + b"again = torch.nn.DataParallel(model)\n")
    git("add", "other.py", cwd=project)
    new = check_hook()
    assert new.returncode == 1, new.stdout + new.stderr
    assert new.stdout.count("NPU920 [manual]") == 1
    assert "other.py:7:9: NPU920 [manual]" in new.stdout
