"""End to end: BEiT's and ConvNeXt's optimizer factory (timm 0.4's,
fixtures/e2e/lookahead_installed) with the installed timm's Lookahead, which npu-migrate cannot
edit.

`--opt lookahead_sgd` wraps the optimizer in that Lookahead, whose `zero_grad` is torch's and
sets the gradients to None: a fused optimizer there would step stale gradients on an NPU. NPU101
keeps torch's class on the paths where the factory wraps it and builds the NPU fused one on the
others, `(optim.SGD if len(opt_split) > 1 and opt_split[0] == "lookahead" else
torch_npu.optim.NpuFusedSGD)(...)`, and the torch class of the same arithmetic where NVIDIA's
FusedSGD or FusedAdam (which run nowhere on Ascend) is wrapped: on every path the migrated
program builds the class this says and computes what the original computes (`npu-migrate
verify`). The installed timm is a package of this test's own, on PYTHONPATH, outside the
migrated folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import run_npu_migrate, start_npu_migrate

testing = pytest.importorskip("apex.testing", reason="needs the runtime: pip install -e runtime")

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "fixtures" / "e2e" / "lookahead_installed"
# timm's Lookahead in miniature (it inherits torch's zero_grad), installed here as timm's.
LOOKAHEAD = REPO / "fixtures" / "e2e" / "lookahead" / "lookahead.py"
TIMEOUT_S = 180
VERIFY_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
# --opt: the class the migrated program builds, and the one its Lookahead wraps.
BUILT = {
    "sgd": "NpuFusedSGD -",
    "adamw": "NpuFusedAdamW -",
    "lookahead_sgd": "Lookahead SGD",
    "lookahead_adamw": "Lookahead AdamW",
    "fusedsgd": "NpuFusedSGD -",
    "lookahead_fusedsgd": "Lookahead SGD",  # NVIDIA's FusedSGD runs nowhere on Ascend
    "fusedadam": "NpuFusedAdam -",
    "lookahead_fusedadam": "Lookahead Adam",  # nor does its FusedAdam: torch's of its arithmetic
    "fusedadamw": "NpuFusedAdamW -",
    "lookahead_fusedadamw": "Lookahead AdamW",
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lookahead_installed")
    site = root / "site"
    (site / "timm" / "optim").mkdir(parents=True)
    (site / "timm" / "__init__.py").write_text("")
    (site / "timm" / "optim" / "__init__.py").write_text("")
    shutil.copy(LOOKAHEAD, site / "timm" / "optim" / "lookahead.py")
    original, migrated = root / "original", root / "migrated"
    for copy in (original, migrated):
        shutil.copytree(PROGRAM, copy, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_npu_migrate("--no-cache", "-q", migrated, timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr  # 1: the file was changed
    return {"site": site, "original": original / "train.py", "migrated": migrated / "train.py"}


def test_the_written_class_stays_where_the_factory_wraps_it(programs: dict[str, Path]) -> None:
    text = programs["migrated"].read_text()
    kept = 'len(opt_split) > 1 and opt_split[0] == "lookahead"'
    assert f"(optim.SGD if {kept} else torch_npu.optim.NpuFusedSGD)(model" in text
    assert f"(optim.AdamW if {kept} else torch_npu.optim.NpuFusedAdamW)(model" in text
    assert f"(torch.optim.SGD if {kept} else torch_npu.optim.NpuFusedSGD)(model" in text
    assert f"(torch.optim.Adam if {kept} else torch_npu.optim.NpuFusedAdam)(model" in text
    assert f"(torch.optim.AdamW if {kept} else torch_npu.optim.NpuFusedAdamW)(model" in text
    assert "from apex.optimizers import" not in text
    assert "Lookahead(optimizer, alpha=0.5, k=2)" in text
    assert "set_to_none" not in text  # nothing else changes to make the wrapper fit


def test_the_migrated_program_passes_the_check(programs: dict[str, Path]) -> None:
    """The class kept in `(optim.SGD if ... else torch_npu.optim.NpuFusedSGD)` is NPU101's own
    choice: a second run neither edits nor reports it (nor anything else)."""
    result = run_npu_migrate(
        "--no-cache", "--check", "-v", programs["migrated"].parent, timeout=TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NPU101" not in result.stdout, result.stdout


# Every --opt of the migrated program in one interpreter (one torch import, not one per path):
# each run's output follows a marker line that names its --opt.
EACH_PATH = """\
import runpy, sys
program, steps, *opts = sys.argv[1:]
for opt in opts:
    print("--- opt", opt, flush=True)
    sys.argv = [program, "--opt", opt, "--steps", steps]
    runpy.run_path(program, run_name="__main__")
"""


@pytest.fixture(scope="module")
def built_classes(programs: dict[str, Path]) -> dict[str, str]:
    """--opt -> what the migrated program printed for it, run for one step with the stand-in
    torch_npu."""
    env = testing.npu_shim_env()
    env["PYTHONPATH"] += os.pathsep + str(programs["site"])
    done = subprocess.run(
        [sys.executable, "-c", EACH_PATH, str(programs["migrated"]), "1", *sorted(BUILT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    outputs = done.stdout.split("--- opt ")[1:]
    return dict(output.split("\n", 1) for output in outputs)


@pytest.mark.parametrize("opt", sorted(BUILT))
def test_each_path_builds_its_class(built_classes: dict[str, str], opt: str) -> None:
    assert f"optimizer {BUILT[opt]}\n" in built_classes[opt], built_classes[opt]


# One path of each kind: torch's class fused, Lookahead kept over torch's class, NVIDIA's
# FusedSGD fused, Lookahead over NVIDIA's FusedAdam (Adam's mode) as torch's Adam, NVIDIA's
# FusedAdam in AdamW's mode fused with its weight decay pinned; `make test-all` verifies the rest.
EACH_KIND = ("adamw", "lookahead_sgd", "fusedsgd", "lookahead_fusedadam", "fusedadamw")


@pytest.mark.parametrize(
    "opts",
    [
        pytest.param(EACH_KIND, id="each-kind"),
        pytest.param(
            tuple(sorted(set(BUILT) - set(EACH_KIND))), id="the-rest", marks=pytest.mark.slow
        ),
    ],
)
def test_every_path_computes_what_the_original_computes(
    programs: dict[str, Path], opts: tuple[str, ...]
) -> None:
    assert set(opts) <= set(BUILT)
    runs = {
        opt: start_npu_migrate(
            "verify",
            "--steps",
            "5",
            "--timeout",
            str(TIMEOUT_S),
            programs["original"],
            programs["migrated"],
            "--",
            "--opt",
            opt,
            extra_env={**VERIFY_ENV, "PYTHONPATH": str(programs["site"])},
        )
        for opt in opts
    }
    for opt, run in runs.items():
        stdout, stderr = run.communicate(timeout=3 * TIMEOUT_S)
        assert run.returncode == 0, f"--opt {opt}:\n{stdout}{stderr}"
        assert "same: 5 step(s) agree" in stdout, f"--opt {opt}:\n{stdout}"
