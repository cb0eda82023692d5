"""NPU102's `opt-level` option: read from pyproject.toml, validated with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import run_npu_migrate

from migrator.config import ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent


def write_config(folder: Path, table: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(f"[tool.npu-migrate]\n\n[tool.npu-migrate.rules.NPU102]\n{table}\n")
    return path


def test_a_valid_level_is_passed_to_the_rule(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, 'opt-level = "O2"'))
    assert config.rule_options == {"NPU102": {"opt-level": "O2"}}


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('opt-level = "o2"', '`opt-level` must be one of "O0", "O1", "O2", "O3"'),
        ('opt-level = "02"', "got '02'"),
        ("opt-level = 2", "got 2"),
        ('opt_level = "O2"', "unknown option(s) for NPU102: opt_level (known: opt-level)"),
    ],
)
def test_a_bad_option_is_a_configuration_error(tmp_path: Path, table: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(write_config(tmp_path, table))
    assert "[tool.npu-migrate.rules.NPU102]" in str(raised.value)
    assert expected in str(raised.value)


def test_the_command_line_exits_2_on_a_bad_level(tmp_path: Path) -> None:
    write_config(tmp_path, 'opt-level = "O4"')
    script = tmp_path / "train.py"
    script.write_text("from apex import amp\n")
    result = run_npu_migrate("--no-cache", script, cwd=REPO, timeout=120)
    assert result.returncode == 2
    assert "got 'O4'" in result.stdout + result.stderr
    assert script.read_text() == "from apex import amp\n"


def test_the_switch_rewrites_a_project(tmp_path: Path) -> None:
    write_config(tmp_path, 'opt-level = "O2"')
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom apex import amp\n\n\ndef setup(model):\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    return amp.initialize(model, optimizer, opt_level="O3")\n'
    )
    result = run_npu_migrate("--no-cache", "--select", "NPU1", script, cwd=REPO, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    text = script.read_text()
    assert "apex.optimizers.NpuFusedSGD(" in text
    assert 'opt_level="O2", combine_grad=True)' in text
