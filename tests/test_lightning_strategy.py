"""A LightningModule's optimizers are fused only when every Trainer of the run rules out a
strategy that re-allocates their parameters (rules/optimizers/_lightning.py), through the real
command line on a two-file project: the module in ``model.py``, the Trainer in ``train.py``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from _cli import run_npu_migrate

MODEL = """\
    import pytorch_lightning as pl
    import torch


    class LitModel(pl.LightningModule):
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
    """

TRAIN = """\
    import pytorch_lightning as pl
    from pytorch_lightning.strategies import DDPStrategy, DeepSpeedStrategy

    from model import LitModel


    def main(args, config):
        trainer = {trainer}
        trainer.fit(LitModel())
    """

PLAIN = [
    "pl.Trainer(max_epochs=3)",
    'pl.Trainer(strategy="ddp", devices=8)',
    'pl.Trainer(strategy="auto", accelerator=args.accelerator)',
    "pl.Trainer(strategy=DDPStrategy(static_graph=True))",
    'pl.Trainer(strategy=None, plugins=["async"])',
]
DOUBTS = {
    'pl.Trainer(strategy="deepspeed_stage_2")': 'has `strategy="deepspeed_stage_2"`',
    'pl.Trainer(strategy="fsdp", devices=8)': 'has `strategy="fsdp"`',
    "pl.Trainer(strategy=DeepSpeedStrategy(stage=3))": "has `strategy=DeepSpeedStrategy(stage=3)`",
    "pl.Trainer(strategy=args.strategy)": "has `strategy=args.strategy`, chosen at run time",
    'pl.Trainer(plugins="ddp_sharded")': 'has `plugins="ddp_sharded"`',
    'pl.Trainer(accelerator="ddp_sharded")': 'has `accelerator="ddp_sharded"`',
    "pl.Trainer(**config)": "gets `**config`, which may choose its strategy",
    "pl.Trainer.from_argparse_args(args)": (
        "takes its strategy from the command line or a configuration file"
    ),
}


def check(tmp_path: Path, trainer: str) -> list[dict]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(textwrap.dedent(MODEL))
    (project / "train.py").write_text(textwrap.dedent(TRAIN).format(trainer=trainer))
    done = run_npu_migrate("--check", "--no-cache", "--format", "json", ".", cwd=project)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    found = [*report.get("edits", []), *report.get("diagnostics", [])]
    return [d for d in found if d["code"] == "NPU101" and d["path"].endswith("model.py")]


@pytest.mark.parametrize("trainer", PLAIN)
def test_a_plain_strategy_everywhere_fuses_the_module_s_optimizer(
    tmp_path: Path, trainer: str
) -> None:
    [finding] = check(tmp_path, trainer)
    assert finding["severity"] == "fixed", finding
    assert "torch_npu.optim.NpuFusedSGD" in finding["message"]


@pytest.mark.parametrize(("trainer", "why"), DOUBTS.items())
def test_a_strategy_that_may_shard_keeps_torch_s_class(
    tmp_path: Path, trainer: str, why: str
) -> None:
    [finding] = check(tmp_path, trainer)
    assert finding["severity"] == "manual", finding
    assert f"train.py:8) {why}, so one that shards" in finding["message"], finding["message"]


@pytest.mark.parametrize("cache", [(), ("--no-cache",)], ids=["cached", "uncached"])
def test_a_sibling_project_s_trainer_does_not_decide(tmp_path: Path, cache: tuple[str]) -> None:
    # A monorepo of two model folders: each has its own project root, and the Trainer of one
    # (which takes its strategy from the command line) cannot train the other's module. The
    # two model.py have the same bytes and different link facts: two analyses, and two results
    # in the cache (the second cached run answers from it).
    run = tmp_path / "zoo"
    for name, trainer in (("plain", "pl.Trainer(devices=8)"), ("cli", CLI_TRAINER)):
        project = run / name
        project.mkdir(parents=True)
        (project / "setup.py").write_text("")
        (project / "model.py").write_text(textwrap.dedent(MODEL))
        (project / "train.py").write_text(textwrap.dedent(TRAIN).format(trainer=trainer))
    for _ in range(2 if cache == () else 1):
        done = run_npu_migrate(
            "--check", *cache, "--format", "json", ".",
            cwd=run, extra_env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
        )  # fmt: skip
        report = json.loads(done.stdout)
        found = [*report.get("edits", []), *report.get("diagnostics", [])]
        severities = {
            Path(d["path"]).parent.name: d["severity"]
            for d in found
            if d["code"] == "NPU101" and d["path"].endswith("model.py")
        }
        assert severities == {"plain": "fixed", "cli": "manual"}, found


CLI_TRAINER = "pl.Trainer.from_argparse_args(args)"
