"""Shell launch scripts through the real command line (``migrator.cli.main`` and, once, the
``python -m migrator`` process): opt-in discovery, findings, ``--check``, ``--output``, the
configuration key, selection and suppression comments. Shell scripts are never rewritten."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from _cli import Cli, in_process, run_npu_migrate

LAUNCH = (
    "#!/bin/bash\n"
    "# 8 GPUs on one node (CUDA_VISIBLE_DEVICES below)\n"
    "export CUDA_VISIBLE_DEVICES=0,1,2,3\n"
    "NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=eth0 torchrun --nproc_per_node 4 train.py "
    "--dist-backend nccl --device cuda:0\n"
    "python -c \"import os, torch; torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\"\n"
    'echo "using ${CUDA_VISIBLE_DEVICES}"\n'
)
CLEAN = "#!/bin/sh\nexport ASCEND_RT_VISIBLE_DEVICES=0,1\npython train.py --dist-backend hccl\n"
PYTHON = "import torch\n\nx = torch.zeros(3)\n"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a launch script, a clean script and a Python file, as the current
    folder, with its own result cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "tools").mkdir()
    (project / "scripts" / "train.sh").write_text(LAUNCH)
    (project / "scripts" / "train.sh").chmod(0o755)
    (project / "tools" / "clean.bash").write_text(CLEAN)
    (project / "tools" / "other.sh").write_text("export CUDA_VISIBLE_DEVICES=3\n")
    (project / "train.py").write_text(PYTHON)
    monkeypatch.chdir(project)
    return project


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return in_process(capsys)


def findings(document: str) -> list[tuple[str, int, int, str, str]]:
    """(path, line, column, code, severity) of every diagnostic of a JSON report."""
    return [
        (Path(d["path"]).as_posix(), d["line"], d["column"], d["code"], d["severity"])
        for d in json.loads(document)["diagnostics"]
    ]


def test_include_shell_reports_every_cuda_setting_of_a_launch_script(tree: Path, cli: Cli) -> None:
    code, out, _ = cli("--check", "--include-shell", "--format", "json", ".")
    assert code == 1  # manual findings fail --check, as in Python files
    assert sorted(f for f in findings(out) if f[0].endswith("train.sh")) == [
        ("scripts/train.sh", 3, 8, "NPU926", "manual"),
        ("scripts/train.sh", 4, 1, "NPU926", "info"),  # NCCL_DEBUG: no HCCL counterpart
        ("scripts/train.sh", 4, 17, "NPU926", "manual"),  # NCCL_SOCKET_IFNAME
        ("scripts/train.sh", 4, 93, "NPU305", "manual"),  # --dist-backend nccl
        ("scripts/train.sh", 4, 107, "NPU303", "manual"),  # --device cuda:0
        ("scripts/train.sh", 5, 30, "NPU302", "manual"),  # torch.cuda.set_device
        ("scripts/train.sh", 6, 15, "NPU926", "manual"),  # ${CUDA_VISIBLE_DEVICES}
    ]
    messages = [d["message"] for d in json.loads(out)["diagnostics"]]
    assert any("`ASCEND_RT_VISIBLE_DEVICES`" in message for message in messages)
    assert any("`HCCL_SOCKET_IFNAME`" in message for message in messages)
    assert all("does not rewrite shell scripts" in message for message in messages)
    assert not [f for f in findings(out) if f[0].endswith("clean.bash")]
    assert (tree / "scripts" / "train.sh").read_text() == LAUNCH


def test_shell_scripts_are_not_scanned_unless_asked_for(tree: Path, cli: Cli) -> None:
    code, out, _ = cli("--check", "--format", "json", ".")
    assert code == 0
    assert [Path(f["path"]).name for f in json.loads(out)["files"]] == ["train.py"]


def test_a_script_named_on_the_command_line_is_scanned(tree: Path, cli: Cli) -> None:
    code, out, _ = cli("--check", "--format", "json", "tools/other.sh")
    assert code == 1
    assert findings(out) == [("tools/other.sh", 1, 8, "NPU926", "manual")]


def test_default_mode_never_rewrites_a_script(tree: Path, cli: Cli) -> None:
    code, out, _ = cli("--include-shell", "--format", "json", ".")
    assert code == 0  # nothing changed; the findings are for a person to read
    statuses = {Path(f["path"]).name: f["status"] for f in json.loads(out)["files"]}
    assert statuses["train.sh"] == "unchanged"
    assert (tree / "scripts" / "train.sh").read_text() == LAUNCH


def test_output_copies_scripts_unchanged_with_their_mode(tree: Path, cli: Cli) -> None:
    code, _, _ = cli("--include-shell", "-q", "-o", str(tree.parent / "out"), ".")
    assert code == 0
    copied = tree.parent / "out" / "scripts" / "train.sh"
    assert copied.read_text() == LAUNCH
    assert stat.S_IMODE(copied.stat().st_mode) & 0o111  # still executable
    assert (tree.parent / "out" / "tools" / "clean.bash").read_text() == CLEAN


def test_configured_patterns_choose_the_scripts(tree: Path, cli: Cli) -> None:
    (tree / "pyproject.toml").write_text('[tool.npu-migrate]\ninclude-shell = ["scripts/*.sh"]\n')
    code, out, _ = cli("--check", "--format", "json", ".")
    assert code == 1
    assert {f[0] for f in findings(out)} == {"scripts/train.sh"}  # not tools/other.sh
    code, out, _ = cli("--check", "--no-include-shell", "--format", "json", ".")
    assert code == 0 and not findings(out)


def test_a_bad_configured_value_is_a_usage_error(tree: Path, cli: Cli) -> None:
    (tree / "pyproject.toml").write_text("[tool.npu-migrate]\ninclude-shell = 3\n")
    code, _, err = cli("--check", ".")
    assert code == 2
    assert "`include-shell` must be true, false or a list of patterns" in err


def test_selection_and_suppression_comments_apply(tree: Path, cli: Cli) -> None:
    script = tree / "scripts" / "train.sh"
    script.write_text(
        LAUNCH.replace(
            "export CUDA_VISIBLE_DEVICES=0,1,2,3\n",
            "export CUDA_VISIBLE_DEVICES=0,1,2,3  # npu-migrate: ignore[NPU926]\n",
        )
    )
    code, out, _ = cli("--check", "--include-shell", "--select", "NPU926", "--format", "json", ".")
    assert code == 1
    assert sorted(f[1:4] for f in findings(out) if f[0].endswith("train.sh")) == [
        (4, 1, "NPU926"),
        (4, 17, "NPU926"),
        (6, 15, "NPU926"),
    ]


def test_skip_file_comment_skips_a_script(tree: Path, cli: Cli) -> None:
    (tree / "tools" / "other.sh").write_text(
        "#!/bin/sh\n# npu-migrate: skip-file\nexport CUDA_VISIBLE_DEVICES=3\n"
    )
    code, out, _ = cli("--check", "--format", "json", "tools/other.sh")
    assert code == 0
    assert [f["status"] for f in json.loads(out)["files"]] == ["skipped"]


def test_the_installed_command_scans_scripts(tree: Path) -> None:
    env = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = run_npu_migrate("--check", "--include-shell", "--no-cache", ".", cwd=tree, extra_env=env)
    assert done.returncode == 1, done.stderr
    assert "scripts/train.sh:3:8: NPU926 [manual] `CUDA_VISIBLE_DEVICES` (set here)" in done.stdout
