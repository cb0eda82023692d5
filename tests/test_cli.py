"""The command line through its real entry point, ``migrator.cli.main``, on real files.

Every test runs NPU102 (``combine_grad=True`` for ``apex.amp.initialize``) only, so that rules
other helpers add later do not change what these tests expect.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import NPU_MIGRATE, Cli, in_process, run_command

from migrator.cli import exit_code_of
from migrator.diagnostics import Diagnostic, Severity
from migrator.results import Status
from migrator.runner import Mode, Outcome, RunResult

HEADER = (
    b"from apex import amp\n"
    b"from apex.optimizers import NpuFusedSGD\n"
    b"\n"
    b"optimizer = NpuFusedSGD(model.parameters(), lr=0.1)\n"
)
UNMIGRATED = HEADER + b'model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
MIGRATED = (
    HEADER
    + b'model, optimizer = amp.initialize(model, optimizer, opt_level="O1", combine_grad=True)\n'
)
AMBIGUOUS = (
    b"try:\n"
    b"    from apex import amp\n"
    b"except ImportError:\n"
    b"    from compat import amp\n"
    b"model, optimizer = amp.initialize(model, optimizer)\n"
)
PLAIN = b"import torch\n\nx = torch.zeros(3)\n"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the current directory, with its own result cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return in_process(capsys, "--select", "NPU102")


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- default mode: rewrite in place ---------------------------------------------------------------


def test_rewrites_in_place_and_exits_1_when_it_changed_files(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    code, out, _ = cli(".")
    assert code == 1
    assert (tree / "train.py").read_bytes() == MIGRATED
    assert "migrated ./train.py (NPU102)" in out
    assert "scanned" in out and "NPU102" in out  # the summary table

    code, out, _ = cli(".")
    assert code == 0, out
    assert (tree / "train.py").read_bytes() == MIGRATED


def test_untouched_files_are_never_rewritten(tree: Path, cli: Cli) -> None:
    plain = write(tree / "plain.py", PLAIN)
    # Mentions the trigger word, so it is parsed, yet nothing in it is apex's initialize.
    lookalike = write(tree / "lookalike.py", b"def initialize():\n    pass\n\ninitialize()\n")
    write(tree / "train.py", UNMIGRATED)
    before = {path: path.stat() for path in (plain, lookalike)}
    assert cli(".")[0] == 1
    for path, old in before.items():
        new = path.stat()
        assert (new.st_ino, new.st_mtime_ns) == (old.st_ino, old.st_mtime_ns), path


def test_keeps_permission_bits(tree: Path, cli: Cli) -> None:
    script = write(tree / "train.py", UNMIGRATED)
    script.chmod(0o751)
    assert cli(".")[0] == 1
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.read_bytes() == MIGRATED


def test_read_only_file_is_an_error_and_left_alone(tree: Path, cli: Cli) -> None:
    locked = write(tree / "locked.py", UNMIGRATED)
    locked.chmod(0o444)
    other = write(tree / "other.py", UNMIGRATED)
    code, _, err = cli(".")
    assert code == 2
    assert "locked.py: the file is read-only" in err
    assert locked.read_bytes() == UNMIGRATED
    assert other.read_bytes() == MIGRATED  # the rest of the run went on
    assert cli("--check", "locked.py")[0] == 1  # reading it is fine


def test_quiet_prints_nothing_but_errors(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    code, out, err = cli("-q", ".")
    assert (code, out, err) == (1, "", "")


# -- --diff ---------------------------------------------------------------------------------------


def test_diff_writes_nothing_and_exits_1(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    code, out, err = cli("--diff", ".")
    assert code == 1
    assert (tree / "train.py").read_bytes() == UNMIGRATED
    assert out.startswith("--- ./train.py\n+++ ./train.py\n@@")
    assert '+model, optimizer = amp.initialize(model, optimizer, opt_level="O1", combine_' in out
    assert "\x1b[" not in out  # plain when piped
    assert "would change" in err  # the summary stays out of the patch


def test_diff_is_a_patch_that_applies(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    write(tree / "no_newline.py", UNMIGRATED.rstrip(b"\n"))
    _, patch, _ = cli("--diff", "-q", ".")
    subprocess.run(["patch", "-p0", "--quiet"], input=patch.encode(), check=True, cwd=tree)
    assert (tree / "train.py").read_bytes() == MIGRATED
    assert (tree / "no_newline.py").read_bytes() == MIGRATED.rstrip(b"\n")


def test_diff_is_coloured_on_request(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    _, out, _ = cli("--diff", "--color", ".")
    assert "\x1b[32m+model" in out


def test_diff_exits_0_when_nothing_would_change(tree: Path, cli: Cli) -> None:
    write(tree / "done.py", MIGRATED)
    write(tree / "manual.py", AMBIGUOUS)  # manual review does not count as a change for --diff
    code, out, _ = cli("--diff", ".")
    assert (code, out) == (0, "")


# -- --check --------------------------------------------------------------------------------------


def test_check_lists_what_needs_migration(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    write(tree / "done.py", MIGRATED)
    code, out, _ = cli("--check", ".")
    assert code == 1
    assert "would migrate ./train.py (NPU102)" in out
    assert "done.py" not in out
    assert (tree / "train.py").read_bytes() == UNMIGRATED


def test_check_on_a_migrated_tree_exits_0(tree: Path, cli: Cli) -> None:
    write(tree / "a/train.py", UNMIGRATED)
    write(tree / "b/plain.py", PLAIN)
    assert cli(".")[0] == 1
    code, out, _ = cli("--check", ".")
    assert code == 0, out
    assert "would migrate" not in out


def test_check_fails_on_manual_review_items(tree: Path, cli: Cli) -> None:
    write(tree / "fallback.py", AMBIGUOUS)
    code, out, _ = cli("--check", ".")
    assert code == 1
    assert "./fallback.py:5:20: NPU102 [manual] cannot tell whether this is" in out
    assert (tree / "fallback.py").read_bytes() == AMBIGUOUS


def test_info_diagnostics_never_fail_check() -> None:
    info = Diagnostic("a.py", 1, 1, "NPU102", Severity.INFO, "nothing to do")
    manual = Diagnostic("a.py", 1, 1, "NPU102", Severity.MANUAL, "look at this")
    informed = RunResult([Outcome("a.py", Status.UNCHANGED, [info])])
    assert exit_code_of(informed, Mode.CHECK) == 0
    assert exit_code_of(RunResult([Outcome("a.py", Status.UNCHANGED, [manual])]), Mode.CHECK) == 1
    assert exit_code_of(RunResult([Outcome("a.py", Status.UNCHANGED, [manual])]), Mode.DIFF) == 0


# -- files that cannot be processed ---------------------------------------------------------------


def test_syntax_error_is_reported_and_the_rest_still_runs(tree: Path, cli: Cli) -> None:
    broken = write(tree / "broken.py", b"from apex import amp\namp.initialize(model\n")
    good = write(tree / "good.py", UNMIGRATED)
    code, out, err = cli(".")
    assert code == 2
    assert "error: ./broken.py: syntax error at" in err
    assert broken.read_bytes() == b"from apex import amp\namp.initialize(model\n"
    assert good.read_bytes() == MIGRATED
    assert "errors" in out


def test_undecodable_file_is_reported_and_left_alone(tree: Path, cli: Cli) -> None:
    data = b"# caf\xe9\nfrom apex import amp\namp.initialize(model)\n"  # latin-1, no cookie
    undecodable = write(tree / "latin.py", data)
    code, _, err = cli("--check", ".")
    assert code == 2
    assert "error: ./latin.py: cannot decode file" in err
    assert cli(".")[0] == 2
    assert undecodable.read_bytes() == data


def test_declared_encoding_is_kept(tree: Path, cli: Cli) -> None:
    data = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + UNMIGRATED
    path = write(tree / "latin.py", data)
    assert cli(".")[0] == 1
    assert path.read_bytes() == b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + MIGRATED


def test_crlf_line_endings_are_kept(tree: Path, cli: Cli) -> None:
    path = write(tree / "windows.py", UNMIGRATED.replace(b"\n", b"\r\n"))
    assert cli(".")[0] == 1
    assert path.read_bytes() == MIGRATED.replace(b"\n", b"\r\n")


def test_byte_order_mark_is_kept(tree: Path, cli: Cli) -> None:
    path = write(tree / "bom.py", b"\xef\xbb\xbf" + UNMIGRATED)
    assert cli(".")[0] == 1
    assert path.read_bytes() == b"\xef\xbb\xbf" + MIGRATED


# -- symlinks -------------------------------------------------------------------------------------


def test_symlink_pointing_outside_is_not_followed(tree: Path, tmp_path: Path, cli: Cli) -> None:
    outside = write(tmp_path / "elsewhere/train.py", UNMIGRATED)
    write(tmp_path / "elsewhere/pkg/mod.py", UNMIGRATED)
    (tree / "linked.py").symlink_to(outside)
    (tree / "linked_dir").symlink_to(tmp_path / "elsewhere/pkg", target_is_directory=True)
    code, out, _ = cli("-v", ".")
    assert code == 0
    assert outside.read_bytes() == UNMIGRATED
    assert (tmp_path / "elsewhere/pkg/mod.py").read_bytes() == UNMIGRATED
    assert "skipped ./linked.py: a symlink to" in out
    assert "skipped ./linked_dir: a symlink to" in out
    assert (tree / "linked.py").is_symlink()


def test_symlink_inside_the_tree_is_migrated_once_at_its_target(tree: Path, cli: Cli) -> None:
    target = write(tree / "real.py", UNMIGRATED)
    (tree / "alias.py").symlink_to("real.py")
    code, out, _ = cli(".")
    assert code == 1
    assert out.count("migrated ") == 1
    assert target.read_bytes() == MIGRATED
    assert (tree / "alias.py").is_symlink()


def test_symlink_named_on_the_command_line_is_not_written_through(
    tree: Path, tmp_path: Path, cli: Cli
) -> None:
    outside = write(tmp_path / "outside.py", UNMIGRATED)
    (tree / "link.py").symlink_to(outside)
    code, _, _ = cli("link.py")
    assert code == 0
    assert outside.read_bytes() == UNMIGRATED
    assert (tree / "link.py").is_symlink()


# -- --output -------------------------------------------------------------------------------------


def test_output_writes_a_migrated_copy_of_the_whole_tree(
    tree: Path, tmp_path: Path, cli: Cli
) -> None:
    write(tree / "src/train.py", UNMIGRATED)
    write(tree / "src/plain.py", PLAIN)
    write(tree / "configs/run.yaml", b"lr: 0.1\n")
    write(tree / "broken.py", b"from apex import amp\namp.initialize(\n")
    script = write(tree / "run.sh", b"#!/bin/sh\n")
    script.chmod(0o755)
    fresh = tmp_path / "fresh/copy"
    code, out, err = cli("-o", str(fresh), ".")
    assert code == 2, out + err  # broken.py is an error, and copied as it is
    assert (fresh / "src/train.py").read_bytes() == MIGRATED
    assert (fresh / "src/plain.py").read_bytes() == PLAIN
    assert (fresh / "configs/run.yaml").read_bytes() == b"lr: 0.1\n"
    assert (fresh / "broken.py").read_bytes() == b"from apex import amp\namp.initialize(\n"
    assert stat.S_IMODE((fresh / "run.sh").stat().st_mode) == 0o755
    assert (tree / "src/train.py").read_bytes() == UNMIGRATED  # the input is untouched
    (tree / "broken.py").unlink()
    assert cli("-o", str(tmp_path / "again"), ".")[0] == 0


def test_output_recreates_inner_symlinks_and_skips_outer_ones(
    tree: Path, tmp_path: Path, cli: Cli
) -> None:
    write(tree / "pkg/real.py", UNMIGRATED)
    (tree / "pkg/alias.py").symlink_to("real.py")
    outside = write(tmp_path / "outside.py", UNMIGRATED)
    (tree / "pkg/outer.py").symlink_to(outside)
    copy = tmp_path / "copy"
    assert cli("-o", str(copy), ".")[0] == 0
    assert (copy / "pkg/real.py").read_bytes() == MIGRATED
    assert os.readlink(copy / "pkg/alias.py") == "real.py"
    assert not (copy / "pkg/outer.py").exists()
    assert outside.read_bytes() == UNMIGRATED


def test_output_inside_the_input_tree_is_refused(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    code, _, err = cli("-o", "migrated", ".")
    assert code == 2
    assert "inside the input tree" in err
    assert not (tree / "migrated").exists()
    assert cli("-o", ".", "train.py")[0] == 2  # the input folder itself


# -- rule selection -------------------------------------------------------------------------------


def test_select_and_ignore(tree: Path, cli: Cli) -> None:
    path = write(tree / "train.py", UNMIGRATED)
    assert cli("--ignore", "NPU102", "--check", ".")[0] == 0
    assert cli("--ignore", "NPU1", "--check", ".")[0] == 0
    assert cli("--select", "NPU1", "--check", ".")[0] == 1
    assert cli("--select", "npu102,NPU1", "--check", ".")[0] == 1
    assert path.read_bytes() == UNMIGRATED


def test_unknown_code_is_a_usage_error(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    code, _, err = cli("--select", "NPU999X", ".")
    assert code == 2
    assert "NPU999X" in err
    assert (tree / "train.py").read_bytes() == UNMIGRATED


def test_list_rules_and_explain(cli: Cli) -> None:
    code, out, _ = cli("--list-rules")
    assert code == 0
    assert any(line.startswith("NPU102  amp-combine-grad") for line in out.splitlines())
    code, out, _ = cli("--explain", "npu102")
    assert code == 0
    for section in ("What it does", "Why", "Example", "Use instead", "Fix safety"):
        assert f"## {section}" in out
    assert cli("--explain", "NPU999")[0] == 2


# -- suppression comments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("comment", "suppressed"),
    [
        ("# npu-migrate: ignore", True),
        ("# npu-migrate: ignore[NPU102]", True),
        ("# npu-migrate: ignore[NPU1]", True),
        ("# npu-migrate: ignore[NPU301,NPU102]", True),
        ("# npu-migrate: ignore[NPU3]", False),
    ],
)
def test_ignore_comment(tree: Path, cli: Cli, comment: str, suppressed: bool) -> None:
    source = UNMIGRATED.replace(b'"O1")\n', f'"O1")  {comment}\n'.encode())
    path = write(tree / "train.py", source)
    code, _, _ = cli("--check", ".")
    assert code == (0 if suppressed else 1)
    cli(".")
    assert (path.read_bytes() == source) is suppressed


def test_skip_file_comment(tree: Path, cli: Cli) -> None:
    source = b"#!/usr/bin/env python\n# npu-migrate: skip-file\n" + UNMIGRATED
    path = write(tree / "train.py", source)
    code, out, _ = cli("-v", ".")
    assert code == 0
    assert path.read_bytes() == source
    assert "skipped ./train.py" in out


# -- discovery ------------------------------------------------------------------------------------


def test_default_excluded_folders_are_not_walked(tree: Path, cli: Cli) -> None:
    excluded = ["build", "dist", "node_modules", ".git", "lib/site-packages", ".venv"]
    for folder in excluded:
        write(tree / folder / "train.py", UNMIGRATED)
    write(tree / "myenv/pyvenv.cfg", b"home = /usr/bin\n")
    write(tree / "myenv/lib/train.py", UNMIGRATED)
    assert cli("--check", ".")[0] == 0
    assert cli("--check", "build")[0] == 1  # named on the command line: walked
    assert cli("--check", "build/train.py")[0] == 1


def test_exclude_globs(tree: Path, cli: Cli) -> None:
    write(tree / "gen/model_pb2.py", UNMIGRATED)
    write(tree / "third_party/vendored.py", UNMIGRATED)
    kept = write(tree / "train.py", MIGRATED)
    assert cli("--check", "--exclude", "*_pb2.py", "--exclude", "third_party", ".")[0] == 0
    assert cli("--check", "--exclude", "gen/*", "--exclude", "third_*", ".")[0] == 0
    assert cli("--check", "--exclude", "gen/*", ".")[0] == 1
    assert kept.read_bytes() == MIGRATED


def test_gitignore_is_respected_inside_a_git_repository(tree: Path, cli: Cli) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    write(tree / ".gitignore", b"generated/\nscratch.py\n")
    write(tree / "generated/train.py", UNMIGRATED)
    write(tree / "scratch.py", UNMIGRATED)
    write(tree / "train.py", MIGRATED)
    assert cli("--check", ".")[0] == 0
    assert cli("--check", "scratch.py")[0] == 1  # a file named explicitly is processed


def test_parallel_runs_give_the_same_output_in_path_order(tree: Path, cli: Cli) -> None:
    for index in range(24):
        write(tree / f"pkg{index % 3}/mod{index:02}.py", UNMIGRATED if index % 2 else PLAIN)
    serial = cli("--check", "--no-cache", "-j", "1", ".")
    parallel = cli("--check", "--no-cache", "-j", "2", ".")
    assert serial == parallel
    listed = [line for line in serial[1].splitlines() if line.startswith("would migrate")]
    assert len(listed) == 12
    assert listed == sorted(listed)


# -- JSON -----------------------------------------------------------------------------------------


def test_json_document(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    write(tree / "fallback.py", AMBIGUOUS)
    write(tree / "broken.py", b"from apex import amp\namp.initialize(\n")
    code, out, _ = cli("--check", "--format", "json", "--report", "report.json", ".")
    assert code == 2
    document = json.loads(out)
    assert document == json.loads((tree / "report.json").read_text())
    assert document["mode"] == "check"
    assert document["exit_code"] == 2
    assert document["rules"] == ["NPU102"]
    statuses = {entry["path"]: entry["status"] for entry in document["files"]}
    assert statuses == {
        "./broken.py": "error",
        "./fallback.py": "unchanged",
        "./train.py": "changed",
    }
    [edit] = document["edits"]
    assert edit["message"].startswith("added `combine_grad=True`")
    del edit["message"]
    assert edit == {
        "path": "./train.py",
        "line": 5,
        "column": 20,
        "code": "NPU102",
        "severity": "fixed",
    }
    severities = {(d["path"], d["severity"]) for d in document["diagnostics"]}
    assert severities == {("./broken.py", "error"), ("./fallback.py", "manual")}
    assert document["summary"]["rules"]["NPU102"] == {"fixed": 1, "manual": 1, "info": 0}


def test_json_with_diff_carries_each_file_diff(tree: Path, cli: Cli) -> None:
    write(tree / "train.py", UNMIGRATED)
    code, out, _ = cli("--diff", "--format", "json", ".")
    assert code == 1
    [entry] = json.loads(out)["files"]
    assert entry["diff"].startswith("--- ./train.py\n+++ ./train.py\n")
    assert (tree / "train.py").read_bytes() == UNMIGRATED


def test_unwritable_report_is_an_error(tree: Path, cli: Cli) -> None:
    write(tree / "done.py", MIGRATED)
    code, _, err = cli("--check", "--report", str(tree / "missing/dir/report.json"), ".")
    assert code == 2
    assert "cannot write report" in err


# -- usage errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["missing.py"],
        ["--diff", "--check", "."],
        ["--check", "-o", "../out", "."],
        ["--jobs", "0", "."],
        ["--target", "gpu", "."],
        ["--format", "xml", "."],
    ],
    ids=["no-path", "missing", "diff-and-check", "check-and-output", "jobs-0", "target", "format"],
)
def test_usage_errors_exit_2(tree: Path, cli: Cli, args: list[str]) -> None:
    code, _, err = cli(*args)
    assert code == 2
    assert err


# -- the installed entry points -------------------------------------------------------------------


def run_entry(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_command(args, cwd=cwd, extra_env={"XDG_CACHE_HOME": str(cwd.parent / "cache")})


def test_python_dash_m_and_console_script(tree: Path) -> None:
    write(tree / "train.py", UNMIGRATED)
    module = [*NPU_MIGRATE, "--select", "NPU102"]
    assert run_entry([*module, "--check", "."], tree).returncode == 1
    script = Path(sys.executable).with_name("npu-migrate")
    done = run_entry([str(script), "--select", "NPU102", "-j", "2", "."], tree)
    assert done.returncode == 1, done.stderr
    assert (tree / "train.py").read_bytes() == MIGRATED
    assert run_entry([*module, "--check", "."], tree).returncode == 0
    assert run_entry([*module, "--check", "nowhere"], tree).returncode == 2
    version = run_entry([str(script), "--version"], tree)
    assert version.returncode == 0 and "npu-migrate" in version.stdout


def test_the_format_choices_are_the_formats() -> None:
    """--format's choices are named in the CLI so that a run that asks for no report format
    does not import them; they are migrator.formats' own list."""
    from migrator.cli import REPORT_FORMATS
    from migrator.formats import FORMATS

    assert REPORT_FORMATS == FORMATS
