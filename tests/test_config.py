"""``[tool.npu-migrate]``: finding the file, validating it, and command-line options winning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from migrator.cli import main
from migrator.config import ConfigError, find_pyproject, load_config
from migrator.settings import AmpPolicy, Target

UNMIGRATED = (
    b"from apex import amp\n"
    b"from apex.optimizers import NpuFusedSGD\n"
    b"optimizer = NpuFusedSGD(model.parameters(), lr=0.1)\n"
    b"model, optimizer = amp.initialize(model, optimizer)\n"
)


def pyproject(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(body)
    return path


def test_nearest_file_with_the_table_wins(tmp_path: Path) -> None:
    outer = pyproject(tmp_path, "[tool.npu-migrate]\nselect = ['NPU1']\n")
    pyproject(tmp_path / "pkg", "[project]\nname = 'pkg'\n")  # no table: does not hide outer
    (tmp_path / "pkg/src").mkdir()
    assert find_pyproject([tmp_path / "pkg/src"]) == outer
    inner = pyproject(tmp_path / "pkg/src", "[tool.npu-migrate]\n")
    assert find_pyproject([tmp_path / "pkg/src"]) == inner


def test_every_key_is_read(tmp_path: Path) -> None:
    path = pyproject(
        tmp_path,
        """
        [tool.npu-migrate]
        select = ["npu1", "NPU3"]
        ignore = "NPU301"
        exclude = ["gen/*"]
        target = "accelerator"
        unsafe-fixes = true
        amp = "always"

        [tool.npu-migrate.rules.npu102]
        opt-level = "O2"
        """.replace("        ", ""),
    )
    config = load_config(path)
    assert config.select == ("NPU1", "NPU3")
    assert config.ignore == ("NPU301",)
    assert config.exclude == ("gen/*",)
    assert config.target is Target.ACCELERATOR
    assert config.unsafe_fixes is True
    assert config.amp is AmpPolicy.ALWAYS
    assert config.rule_options == {"NPU102": {"opt-level": "O2"}}
    assert config.root == tmp_path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("selct = ['NPU1']", "unknown key(s) in [tool.npu-migrate]: selct"),
        ("target = 'gpu'", "`target` must be one of"),
        ("amp = 'on'", "`amp` must be one of 'as-written', 'always'"),
        ("unsafe-fixes = 'yes'", "`unsafe-fixes` must be true or false"),
        ("select = [1]", "`select` must be a list of strings"),
        ("rules = 3", "per-rule options go in tables"),
        ("[tool.npu-migrate.rules.NPU999]\nx = 1", "options for unknown rule(s): NPU999"),
        ("select = [", "cannot read"),
    ],
)
def test_invalid_values_are_errors(tmp_path: Path, body: str, message: str) -> None:
    path = pyproject(tmp_path, "[tool.npu-migrate]\n" + body + "\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src/train.py").write_bytes(UNMIGRATED)
    (folder / "gen").mkdir()
    (folder / "gen/train.py").write_bytes(UNMIGRATED)
    monkeypatch.chdir(folder)
    return folder


def test_config_selects_and_excludes_and_the_command_line_wins(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only NPU102 is selected throughout, so rules added later cannot change these outcomes.
    pyproject(project, "[tool.npu-migrate]\nselect = ['NPU102']\nignore = ['NPU102']\n")
    assert main(["--check", "src"]) == 0  # ignored by the file
    assert main(["--check", "--ignore", "NPU3", "src"]) == 1  # replaced on the command line

    pyproject(project, "[tool.npu-migrate]\nselect = ['NPU102']\nexclude = ['gen/*']\n")
    capsys.readouterr()
    assert main(["--check", "."]) == 1
    out = capsys.readouterr().out
    assert "src/train.py" in out and "gen/train.py" not in out
    # the config of the folder holding the paths is found from a subfolder too
    assert main(["--check", str(project / "gen")]) == 0


def test_bad_config_is_a_usage_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pyproject(project, "[tool.npu-migrate]\ntarget = 'gpu'\n")
    assert main(["--check", "src"]) == 2
    assert "`target` must be one of" in capsys.readouterr().err
    assert (project / "src/train.py").read_bytes() == UNMIGRATED


def test_explicit_config_file(project: Path, tmp_path: Path) -> None:
    other = pyproject(
        tmp_path / "elsewhere", "[tool.npu-migrate]\nselect = ['NPU102']\nignore = ['NPU102']\n"
    )
    assert main(["--check", "--select", "NPU102", "src"]) == 1
    assert main(["--check", "--config", str(other), "src"]) == 0


GATED_AMP = (
    "import torch\n"
    "from apex import amp\n"
    "model = torch.nn.Linear(2, 2).cuda()\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "if args.amp:\n"
    "    model, optimizer = amp.initialize(model, optimizer, opt_level='O1')\n"
)
CHOICE = "(apex.optimizers.NpuFusedSGD if args.amp else torch_npu.optim.NpuFusedSGD)"


@pytest.mark.parametrize(
    ("config", "flags", "home", "combined"),
    [
        ("", [], CHOICE, True),
        ("amp = 'always'\n", [], "apex.optimizers.NpuFusedSGD", True),
        ("amp = 'always'\n", ["--amp", "as-written"], CHOICE, True),
        ("", ["--amp", "always"], "apex.optimizers.NpuFusedSGD", True),
    ],
    ids=["default", "config-always", "flag-wins", "flag-always"],
)
def test_amp_setting_decides_a_gated_amp_initialize(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: str,
    flags: list[str],
    home: str,
    combined: bool,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pyproject(tmp_path, "[tool.npu-migrate]\nselect = ['NPU101', 'NPU102']\n" + config)
    script = tmp_path / "train.py"
    script.write_text(GATED_AMP)
    assert main([*flags, str(script)]) in (0, 1)
    migrated = script.read_text()
    assert "optimizer = " + home + "(model.parameters(), lr=0.1)" in migrated
    assert ("combine_grad=True" in migrated) is combined
