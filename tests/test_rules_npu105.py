"""NPU105 beyond its fixtures: its options, its selection, the plan it leaves for NPU101, and the
two-run flow on a real project folder.

The fixtures (fixtures/npu105/) show each shape; the end-to-end programs (tests/test_e2e_amp.py)
show that the results train as they should.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from _cli import run_npu_migrate

from migrator.analysis.parse import parse_index
from migrator.config import ConfigError, load_config
from migrator.engine import Engine
from migrator.registry import all_rules, select_rules
from migrator.rules.optimizers._plans import AddedAmp
from migrator.settings import Settings
from migrator.suppressions import Suppressions

REPO = Path(__file__).resolve().parent.parent
TRAIN = """\
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)


def main():
    args = parser.parse_args()
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for x in [torch.randn(2, 4)]:
        loss = model(x).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def npu_migrate(*args: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate("--no-cache", *args, cwd=REPO, timeout=120)


def project(folder: Path, table: str = "") -> Path:
    (folder / "pyproject.toml").write_text(
        f"[tool.npu-migrate]\n\n[tool.npu-migrate.rules.NPU105]\n{table}\n"
    )
    script = folder / "train.py"
    script.write_text(TRAIN)
    return script


# -- options ---------------------------------------------------------------------------------------


def test_valid_options_reach_the_rule(tmp_path: Path) -> None:
    table = 'switch = "always"\nopt-level = "O1"\nloss-scale = 128\nfrom-native = true'
    config = load_config(project(tmp_path, table).parent / "pyproject.toml")
    assert config.rule_options["NPU105"] == {
        "switch": "always",
        "opt-level": "O1",
        "loss-scale": 128,
        "from-native": True,
    }


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('opt-level = "O3"', 'option `opt-level` must be "O1" or "O2"'),
        ('opt-level = "O0"', "got 'O0'"),
        ('switch = "sometimes"', 'option `switch` must be "flag" or "always", got \'sometimes\''),
        ("loss-scale = 0", 'option `loss-scale` must be "dynamic" or a positive number, got 0'),
        ('loss-scale = "auto"', "got 'auto'"),
        ("loss-scale = true", "got True"),
        ('from-native = "yes"', "option `from-native` must be true or false"),
        ('opt_level = "O2"', "unknown option(s) for NPU105: opt_level (known: opt-level, "),
    ],
)
def test_a_bad_option_is_a_configuration_error(tmp_path: Path, table: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(project(tmp_path, table).parent / "pyproject.toml")
    assert "[tool.npu-migrate.rules.NPU105]" in str(raised.value)
    assert expected in str(raised.value)


def test_the_command_line_exits_2_on_a_bad_option_and_writes_nothing(tmp_path: Path) -> None:
    script = project(tmp_path, 'opt-level = "O3"')
    result = npu_migrate("--select", "NPU105", str(script))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "got 'O3'" in result.stdout + result.stderr
    assert script.read_text() == TRAIN


# -- selection and documentation -------------------------------------------------------------------


def test_it_runs_only_when_selected_by_its_full_code(tmp_path: Path) -> None:
    script = project(tmp_path)
    assert npu_migrate("--select", "NPU1", "--check", str(script)).returncode in (0, 1)
    assert "amp" not in script.read_text()
    prefixed = npu_migrate("--select", "NPU1", "--diff", str(script))
    assert "amp.initialize" not in prefixed.stdout
    result = npu_migrate("--select", "NPU105", str(script))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "amp.initialize(" in script.read_text()


def test_explain_says_it_is_opt_in_and_documents_the_options() -> None:
    result = npu_migrate("--explain", "NPU105")
    assert result.returncode == 0
    text = result.stdout
    assert "Opt-in: runs only when selected by its full code (`--select NPU105`" in text
    for section in ("What it does", "Why", "Example", "Use instead", "Fix safety"):
        assert section in text
    for option in ("`opt-level`", "`loss-scale`", "`switch`", "from-native"):
        assert option in text


# -- the plan for NPU101 ---------------------------------------------------------------------------


def test_the_plan_names_the_optimizers_it_puts_under_amp_and_the_switch() -> None:
    rules = select_rules(all_rules(), ["NPU105"])
    index = parse_index(TRAIN, "train.py")
    engine = Engine(rules, Settings())
    context = engine.analyse(index, "train.py", Suppressions.scan(TRAIN))
    plan = context.plans[AddedAmp]
    assert isinstance(plan, AddedAmp)
    constructor = next(
        call
        for call in index.nodes(ast.Call)
        if index.source.segment(call).startswith("torch.optim.SGD(")
    )
    assert plan.constructors == frozenset({id(constructor)})
    assert (plan.level, plan.switch) == (None, "args.amp")  # the flag chooses the level
    assert index.source.segment(plan.anchor).startswith("optimizer = torch.optim.SGD(")


# -- two runs on a project ------------------------------------------------------------------------


def test_two_runs_give_apex_s_fused_optimizer_and_a_third_changes_nothing(tmp_path: Path) -> None:
    script = project(tmp_path, 'switch = "always"')
    first = npu_migrate("--select", "NPU105,NPU203", str(script))
    assert first.returncode == 1, first.stdout + first.stderr
    second = npu_migrate(str(script))
    assert second.returncode == 1, second.stdout + second.stderr
    text = script.read_text()
    assert "optimizer = apex.optimizers.NpuFusedSGD(model.parameters(), lr=args.lr)" in text
    assert 'opt_level="O2", loss_scale="dynamic", combine_grad=True' in text
    assert "with amp.scale_loss(loss, optimizer) as scaled_loss:" in text
    again = npu_migrate("--select", "NPU,NPU105", "--check", str(script))
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.parametrize("switch", ["always", "flag"])
def test_one_run_with_npu101_gives_what_two_runs_give(tmp_path: Path, switch: str) -> None:
    """NPU101 reads NPU105's plan: `--select NPU,NPU105` writes the file the two runs write."""
    scripts = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        script = project(tmp_path / name, f'switch = "{switch}"')
        # On a device: NPU101 leaves an optimizer of a model that stays on the CPU unfused.
        script.write_text(TRAIN.replace("torch.nn.Linear(4, 2)", "torch.nn.Linear(4, 2).cuda()"))
        scripts.append(script)
    one, two = scripts
    assert npu_migrate("--select", "NPU,NPU105", str(one)).returncode == 1
    assert npu_migrate("--select", "NPU105,NPU203", str(two)).returncode == 1
    assert npu_migrate(str(two)).returncode == 1
    assert one.read_bytes() == two.read_bytes()
    text = one.read_text()
    assert "combine_grad=True" in text and "with amp.scale_loss(loss, optimizer)" in text
    if switch == "always":
        assert "optimizer = apex.optimizers.NpuFusedSGD(model.parameters(), lr=args.lr)" in text
    else:  # the amp path needs apex's class, the fp32 path torch_npu's: picked by the flag
        picked = "(apex.optimizers.NpuFusedSGD if args.amp else torch_npu.optim.NpuFusedSGD)"
        assert f"optimizer = {picked}(model.parameters(), lr=args.lr)" in text
    again = npu_migrate("--select", "NPU,NPU105", "--check", str(one))
    assert again.returncode == 0, again.stdout + again.stderr
