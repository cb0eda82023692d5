"""``npu-migrate verify``: the comparison and tolerance rules, and the command line end to end.

The comparison tests build recorded steps directly (pure Python, as the parent process sees
them). The command-line tests run the real ``npu-migrate verify`` in a subprocess on
``fixtures/e2e/verify_data/train.py``, a classifier that reads its data set from a folder; the
end-to-end programs (tests/test_e2e.py) cover verify on real migrations, world size 1 and 2.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _cli import run_npu_migrate

from migrator.verify.compare import (
    Autocast,
    OptimizerStep,
    ParamDigest,
    Step,
    Tolerance,
    automatic_tolerance,
    compare,
    with_overrides,
)

REPO = Path(__file__).resolve().parent.parent
DATA_PROGRAM = REPO / "fixtures" / "e2e" / "verify_data"
TIMEOUT_S = 300
FP32 = Tolerance(1e-5, 1e-7, "fp32", "test")


def step(
    loss: float,
    weight: tuple[float, ...],
    optimizer: str = "torch.optim.adam.Adam",
    amp: dict[str, str] | None = None,
    lr: float = 1e-3,
    names: tuple[str | None, str | None] = ("fc.weight", "fc.bias"),
) -> Step:
    params = (
        ParamDigest(names[0], (len(weight),), weight),
        ParamDigest(names[1], (1,), (0.5,)),
    )
    return Step((loss,), (OptimizerStep(optimizer, lr, params),), amp)


# -- tolerance rules -------------------------------------------------------------------------------

AMP_O1 = {"opt_level": "O1", "half_dtype": "bfloat16"}


def test_without_amp_the_fp32_rule_applies() -> None:
    original = [step(1.0, (1.0,), "torch.optim.sgd.SGD")]
    migrated = [step(1.0, (1.0,), "torch_npu.optim.NpuFusedSGD")]
    tolerance = automatic_tolerance(original, migrated)
    assert (tolerance.rule, tolerance.rtol, tolerance.atol) == ("fp32", 1e-5, 1e-7)


def test_amp_in_float32_is_compared_like_fp32() -> None:
    amp = {"opt_level": "O2", "half_dtype": "float32"}
    original = [step(1.0, (1.0,), "torch.optim.sgd.SGD", amp)]
    assert automatic_tolerance(original, original).rule == "fp32"


def test_amp_with_the_same_optimizer_arithmetic_is_tight() -> None:
    original = [step(1.0, (1.0,), "torch.optim.sgd.SGD", AMP_O1)]
    migrated = [step(1.0, (1.0,), "apex.optimizers.NpuFusedSGD", AMP_O1)]
    tolerance = automatic_tolerance(original, migrated)
    assert (tolerance.rule, tolerance.rtol, tolerance.atol) == ("amp", 1e-6, 1e-7)
    assert "SGD -> NpuFusedSGD" in tolerance.reason


def test_amp_with_a_different_rounding_allows_steps_times_lr_times_two_to_the_minus_7() -> None:
    original = [
        step(1.0, (1.0,), "apex.optimizers.FusedAdam", AMP_O1, lr=lr) for lr in (1e-4, 5e-4)
    ]
    migrated = [step(1.0, (1.0,), "x.NpuFusedAdamW", AMP_O1, lr=lr) for lr in (1e-4, 5e-4)]
    tolerance = automatic_tolerance(original, migrated)
    assert tolerance.rule == "amp-rounding"
    assert tolerance.atol == pytest.approx(2 * 5e-4 * 2**-7)
    assert "FusedAdam -> NpuFusedAdamW" in tolerance.reason


def added(
    loss: float, weight: tuple[float, ...], amp: dict[str, str] | None, start: float | None = None
) -> Step:
    """A step of one optimizer with one parameter; ``start``: its value before the first step."""
    params = (ParamDigest("w", (len(weight),), weight),)
    initial: tuple[OptimizerStep | None, ...] = ()
    if start is not None:
        before = (ParamDigest("w", (len(weight),), (start,) * len(weight)),)
        initial = (OptimizerStep("torch.optim.sgd.SGD", 0.1, before),)
    return Step((loss,), (OptimizerStep("torch.optim.sgd.SGD", 0.1, params),), amp, initial=initial)


AMP_O2 = {"opt_level": "O2", "half_dtype": "bfloat16"}


def test_half_precision_on_one_side_only_is_the_amp_added_rule() -> None:
    tolerance = automatic_tolerance([added(1.0, (1.0,), None)], [added(1.0, (1.0,), AMP_O2)])
    assert (tolerance.rule, tolerance.rtol, tolerance.update_rtol) == ("amp-added", 2**-5, 2**-2)
    assert "the migrated run computes in bfloat16 (amp O2)" in tolerance.reason
    # amp in float32 on the migrated side is no precision change: fp32.
    amp32 = {"opt_level": "O2", "half_dtype": "float32"}
    assert automatic_tolerance([added(1.0, (1.0,), None)], [added(1.0, (1.0,), amp32)]).rule == (
        "fp32"
    )


def amp_added_runs(
    migrated_weights: list[tuple[float, ...]], migrated_losses: list[float] | None = None
) -> tuple[dict[int, list[Step]], dict[int, list[Step]]]:
    """An original that moves (0, 0) by (-1, -1) per step from 1.0, and a migrated run."""
    original = [added(2.0, (1.0 - k, 1.0 - k), None, 1.0 if k == 1 else None) for k in (1, 2)]
    losses = migrated_losses or [2.0, 2.0]
    migrated = [
        added(loss, weight, AMP_O2, 1.0 if k == 0 else None)
        for k, (loss, weight) in enumerate(zip(losses, migrated_weights, strict=True))
    ]
    return {0: original}, {0: migrated}


def test_amp_added_allows_a_quarter_of_the_original_update_in_l2_norm() -> None:
    # After two steps the original moved by (-2, -2), L2 norm 2*sqrt(2); 20% away passes.
    original, migrated = amp_added_runs([(0.0, 0.0), (-1.0 - 0.4, -1.0 - 0.4)])
    tolerance = automatic_tolerance(original[0], migrated[0])
    assert compare(original, migrated, tolerance).first_difference is None
    # 30% away, in one entry only: the whole update is compared, and it fails.
    original, migrated = amp_added_runs([(0.0, 0.0), (-1.0 - 0.6 * 2**0.5 * 2**0.5, -1.0)])
    difference = compare(original, migrated, tolerance).first_difference
    assert difference is not None and difference.step == 2
    assert difference.what == "the parameters of optimizer 1 (SGD -> SGD)"
    assert "allowed 0.25), most of it in 'w'" in difference.detail


def test_amp_added_fails_an_update_that_does_not_happen() -> None:
    original, migrated = amp_added_runs([(1.0, 1.0), (1.0, 1.0)])
    tolerance = automatic_tolerance(original[0], migrated[0])
    difference = compare(original, migrated, tolerance).first_difference
    assert difference is not None and difference.step == 1
    assert "is 1 of the original's away from it" in difference.detail


def test_amp_added_compares_losses_within_two_to_the_minus_5() -> None:
    tolerance = automatic_tolerance(*[runs[0] for runs in amp_added_runs([(0.0, 0.0)] * 2)])
    original, migrated = amp_added_runs([(0.0, 0.0), (-1.0, -1.0)], [2.0 * (1 + 2**-6), 2.0])
    assert compare(original, migrated, tolerance).first_difference is None
    original, migrated = amp_added_runs([(0.0, 0.0), (-1.0, -1.0)], [2.0 * (1 + 2**-4), 2.0])
    difference = compare(original, migrated, tolerance).first_difference
    assert difference is not None and difference.what == "the loss"


def test_given_tolerances_replace_the_rule_s_and_are_reported() -> None:
    changed = with_overrides(FP32, None, 0.5)
    assert (changed.rtol, changed.atol) == (1e-5, 0.5)
    assert "atol given" in changed.reason
    assert with_overrides(FP32, None, None) is FP32


# -- comparison ------------------------------------------------------------------------------------


def test_identical_runs_agree_and_every_step_gets_a_row() -> None:
    run = {0: [step(2.0, (1.0, 2.0)), step(1.5, (1.1, 2.1))]}
    comparison = compare(run, run, FP32)
    assert comparison.first_difference is None
    assert [(row.step, row.max_param_difference, row.differs) for row in comparison.rows] == [
        (1, 0.0, False),
        (2, 0.0, False),
    ]


def test_the_first_differing_step_and_tensor_are_named() -> None:
    original = {0: [step(2.0, (1.0, 2.0)), step(1.5, (1.1, 2.1)), step(1.2, (1.2, 2.2))]}
    migrated = {0: [step(2.0, (1.0, 2.0)), step(1.5, (1.1, 2.2)), step(1.3, (1.2, 2.4))]}
    difference = compare(original, migrated, FP32).first_difference
    assert difference is not None
    assert (difference.step, difference.what) == (
        2,
        "parameter 'fc.weight' of optimizer 1 (Adam -> Adam)",
    )
    assert "1 of 2 compared entries differ" in difference.detail


def test_a_loss_outside_the_tolerance_is_a_difference_even_with_equal_parameters() -> None:
    original = {0: [step(2.0, (1.0,))]}
    migrated = {0: [step(2.0001, (1.0,))]}
    difference = compare(original, migrated, FP32).first_difference
    assert difference is not None and difference.what == "the loss"


def test_within_the_tolerance_is_the_same() -> None:
    original = {0: [step(2.0, (1.0,))]}
    migrated = {0: [step(2.0 + 1e-6, (1.0 + 5e-6,))]}
    assert compare(original, migrated, FP32).first_difference is None


def test_parameters_are_paired_by_name_when_a_migration_regroups_them() -> None:
    original = {0: [step(1.0, (1.0,), names=("a", "b"))]}
    params = tuple(reversed(original[0][0].optimizers[0].params))
    regrouped = Step((1.0,), (OptimizerStep("torch.optim.adam.Adam", 1e-3, params),), None)
    assert compare(original, {0: [regrouped]}, FP32).first_difference is None


def test_unnamed_parameters_are_paired_by_position() -> None:
    original = {0: [step(1.0, (1.0, 2.0), names=(None, None))]}
    migrated = {0: [step(1.0, (1.0, 3.0), names=(None, None))]}
    difference = compare(original, migrated, FP32).first_difference
    assert difference is not None and difference.what.startswith("parameter #1 [2] of optimizer 1")


def test_a_nan_where_the_original_has_a_number_differs() -> None:
    original = {0: [step(1.0, (1.0,))]}
    migrated = {0: [step(1.0, (math.nan,))]}
    comparison = compare(original, migrated, FP32)
    assert comparison.first_difference is not None
    assert comparison.rows[0].max_param_difference == math.inf


def test_a_run_that_stops_early_differs_at_its_missing_step() -> None:
    original = {0: [step(2.0, (1.0,)), step(1.0, (1.0,))]}
    migrated = {0: [step(2.0, (1.0,))]}
    difference = compare(original, migrated, FP32).first_difference
    assert difference is not None
    assert (difference.step, difference.what) == (2, "the number of steps")


def test_every_rank_is_compared_and_the_earliest_difference_wins() -> None:
    original = {
        0: [step(2.0, (1.0,)), step(1.0, (1.0,))],
        1: [step(2.0, (1.0,)), step(1.0, (1.0,))],
    }
    migrated = {
        0: [step(2.0, (1.0,)), step(1.0, (9.0,))],
        1: [step(2.0, (7.0,)), step(1.0, (1.0,))],
    }
    comparison = compare(original, migrated, FP32)
    assert comparison.ranks == 2
    assert comparison.first_difference is not None
    assert (comparison.first_difference.step, comparison.first_difference.rank) == (1, 1)


# -- the command line ------------------------------------------------------------------------------


def npu_migrate_verify(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {"COLUMNS": "200", "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
    return run_npu_migrate("verify", *args, cwd=cwd, extra_env=env, timeout=TIMEOUT_S)


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout\n{result.stdout[-5000:]}\n--- stderr\n{result.stderr[-5000:]}"


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """A copy of the data-reading program (its folder is what --migrate copies)."""
    folder = tmp_path / "program"
    shutil.copytree(DATA_PROGRAM, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder / "train.py"


def one_batch_of_data(folder: Path) -> Path:
    """Four (image, label) files: less than one batch of the program's 8."""
    script = (
        "import sys, torch\n"
        "torch.manual_seed(0)\n"
        "for i in range(4):\n"
        "    torch.save((torch.randn(3, 8, 8), i), f'{sys.argv[1]}/{i}.pt')\n"
    )
    (folder / "train").mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-c", script, str(folder / "train")], check=True, timeout=TIMEOUT_S
    )
    return folder


def test_two_entries_or_migrate_are_required(program: Path) -> None:
    result = npu_migrate_verify(str(program))
    assert result.returncode == 2, output(result)
    assert "give ORIGINAL_ENTRY and MIGRATED_ENTRY (or --migrate ENTRY)" in result.stderr
    result = npu_migrate_verify("--migrate", str(program), str(program), str(program))
    assert result.returncode == 2, output(result)
    assert "not both" in result.stderr


def test_a_missing_dataset_is_named_with_what_to_pass(program: Path, tmp_path: Path) -> None:
    absent = tmp_path / "imagenet"
    result = npu_migrate_verify("--migrate", str(program), "--", "--data", str(absent))
    assert result.returncode == 2, output(result)
    expected = (
        f"the original program cannot run: needs a dataset at {absent / 'train'}: "
        "pass a small dataset path"
    )
    assert expected in result.stderr, output(result)
    assert "FileNotFoundError" in result.stderr  # the program's own output follows
    assert "the migrated program cannot run either, with the same error" in result.stderr


def test_synthetic_data_says_why_it_cannot_replace_an_absent_dataset(
    program: Path, tmp_path: Path
) -> None:
    absent = tmp_path / "imagenet"
    result = npu_migrate_verify(
        "--synthetic-data", "--migrate", str(program), "--", "--data", str(absent)
    )
    assert result.returncode == 2, output(result)
    assert (
        f"needs a dataset at {absent / 'train'}, and --synthetic-data cannot stand in for it"
        in result.stderr
    )
    assert "before any DataLoader was iterated" in result.stderr, output(result)


def test_synthetic_data_from_one_real_batch_with_a_given_tolerance(
    program: Path, tmp_path: Path
) -> None:
    """--migrate works on a scratch copy (the user's folder is left as it was), the batches are
    shaped like the first real one, and a given --atol is used and reported."""
    data = one_batch_of_data(tmp_path / "data")
    before = sorted(p.name for p in program.parent.iterdir()), program.read_bytes()
    result = npu_migrate_verify(
        "--synthetic-data", "--steps", "3", "--atol", "0.5", "--migrate", str(program),
        "--", "--data", str(data), "--epochs", "5",
    )  # fmt: skip
    assert result.returncode == 0, output(result)
    assert (
        "synthetic data: random batches shaped like float32[4, 3, 8, 8], int64[4]\n"
        in result.stdout
    )
    assert "tolerance: rtol=1e-05 atol=0.5 (fp32: no mixed precision; atol given" in result.stdout
    assert "same: 3 step(s) agree" in result.stdout, output(result)
    assert (sorted(p.name for p in program.parent.iterdir()), program.read_bytes()) == before


def test_a_program_that_never_steps_has_nothing_to_compare(program: Path, tmp_path: Path) -> None:
    data = one_batch_of_data(tmp_path / "data")
    result = npu_migrate_verify(
        str(program), str(program), "--", "--data", str(data), "--epochs", "0"
    )
    assert result.returncode == 2, output(result)
    assert "the original program ended without an optimizer step" in result.stderr, output(result)


def test_a_crashing_side_is_shown_with_its_error(program: Path, tmp_path: Path) -> None:
    data = one_batch_of_data(tmp_path / "data")
    broken = program.parent / "broken.py"
    broken.write_text(
        program.read_text().replace("for epoch in", "raise ValueError('no GPU here')\nfor epoch in")
    )
    result = npu_migrate_verify(str(program), str(broken), "--", "--data", str(data))
    assert result.returncode == 2, output(result)
    assert "the migrated program cannot run: ValueError: no GPU here" in result.stderr, output(
        result
    )


def test_migrated_args_reach_the_migrated_side_only(program: Path, tmp_path: Path) -> None:
    """A flag the migration added (NPU105's --amp) goes to the migrated program only: here the
    migrated copy needs --epochs-extra, which the original does not know."""
    data = one_batch_of_data(tmp_path / "data")
    extended = program.parent / "extended.py"
    extended.write_text(
        program.read_text().replace(
            "args = parser.parse_args()",
            "parser.add_argument('--epochs-extra', type=int, required=True)\n"
            "args = parser.parse_args()",
        )
    )
    assert extended.read_text() != program.read_text(), "the program changed: adapt this test"
    common = ("--steps", "2", str(program), str(extended), "--", "--data", str(data))
    result = npu_migrate_verify("--migrated-arg=--epochs-extra=0", *common)
    assert result.returncode == 0, output(result)
    result = npu_migrate_verify(*common)
    assert result.returncode == 2, output(result)
    assert "the migrated program cannot run" in result.stderr, output(result)


def test_a_side_that_lost_its_port_runs_again_with_a_new_one(program: Path, tmp_path: Path) -> None:
    """A port found free may be taken by another program before rank 0 listens on it (torch
    then fails with EADDRINUSE): that failure, and only that one, is tried again."""
    data = one_batch_of_data(tmp_path / "data")
    marker = tmp_path / "port-taken-once"
    unlucky = program.parent / "unlucky.py"
    unlucky.write_text(
        "import pathlib, sys\n"
        f"if not pathlib.Path({str(marker)!r}).exists():\n"
        f"    pathlib.Path({str(marker)!r}).write_text('')\n"
        "    sys.exit('RuntimeError: The server socket has failed to listen on any local network "
        "address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address "
        "already in use')\n" + program.read_text()
    )
    result = npu_migrate_verify(str(program), str(unlucky), "--", "--data", str(data))
    assert result.returncode == 0, output(result)
    assert marker.exists()  # it did fail once
    assert "same:" in result.stdout, output(result)


def test_a_side_that_runs_past_the_timeout_is_stopped_and_reported(program: Path) -> None:
    slow = program.parent / "slow.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    result = npu_migrate_verify("--timeout", "1", str(slow), str(slow))
    assert result.returncode == 2, output(result)
    assert "the original program did not finish within 1 s (--timeout)" in result.stderr


HALF_CHECKPOINT_PROGRAM = """\
import os, sys
import torch
import torch.nn.functional as F
{imports}
torch.manual_seed(0)
device = torch.device({device})
layers = [torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)]
model = torch.nn.Sequential(*layers).to(device)
optimizer = {optimizer}(model.parameters(), lr=0.1, momentum=0.9)
batches = [(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(2)]
for epoch in range(3):
    for inputs, labels in batches:
        loss = F.cross_entropy(model(inputs.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # An fp16 checkpoint at every epoch's end: the round trip gives every parameter new memory,
    # as `model.cpu(); torch.save(...); model.cuda()` does on a device.
    model.half()
    torch.save(model.state_dict(), os.path.join(sys.argv[1], "last.pt"))
    model.float()
"""


def test_a_migrated_program_that_breaks_the_fused_optimizers_contract_cannot_run(
    tmp_path: Path,
) -> None:
    """The migrated program re-allocates the parameters of its NpuFused optimizer at the end of
    each epoch. On an NPU they would silently stop training; the runtime raises instead, so
    verify shows the migrated side failing with the runtime's reason."""
    original = tmp_path / "train.py"
    original.write_text(
        HALF_CHECKPOINT_PROGRAM.format(
            imports="",
            device='"cuda" if torch.cuda.is_available() else "cpu"',
            optimizer="torch.optim.SGD",
        )
    )
    migrated = tmp_path / "train_npu.py"
    migrated.write_text(
        HALF_CHECKPOINT_PROGRAM.format(
            imports="import torch_npu",
            device='"npu" if torch.npu.is_available() else "cpu"',
            optimizer="torch_npu.optim.NpuFusedSGD",
        )
    )
    result = npu_migrate_verify("--steps", "4", str(original), str(migrated), "--", str(tmp_path))
    assert result.returncode == 2, output(result)
    expected = (
        "the migrated program cannot run: RuntimeError: NpuFusedSGD: 4 parameters, the first "
        "param_groups[0]['params'][0] (shape (8, 6)), were re-allocated after the optimizer "
        "packed them into its flat buffer"
    )
    assert expected in result.stderr, output(result)
    assert "they would silently stop training. Move or convert the model" in result.stderr
    assert "the original program" not in result.stderr, output(result)


# -- autocast, and an emulated accelerator ---------------------------------------------------------

BF16_ON_THE_ACCELERATOR = (Autocast("accelerator", "bfloat16", True),)


def test_the_fused_optimizers_step_bit_for_bit_like_torch_s() -> None:
    # Torch's fused CPU kernels round an Adam update differently now and then; through a probe
    # trained by RMSprop on the encoder's features that drift grew past the fp32 rule by step
    # 7. Both sides run with APEX_REFERENCE_KERNELS=1: the migrated Adam and RMSprop (fused,
    # flat buffers) step exactly as torch's do, so a correct migration differs by nothing.
    entry = REPO / "fixtures" / "e2e" / "registry_dict" / "train.py"
    result = npu_migrate_verify(
        "--migrate", str(entry), "--steps", "8", "--", "--optimizer", "adam"
    )
    assert result.returncode == 0, output(result)
    assert "same: 8 step(s) agree" in result.stdout, output(result)
    differences = re.findall(r"^│\s+\d+ │.*│\s*(\S+) │$", result.stdout, re.MULTILINE)
    assert differences == ["0"] * 8, output(result)


def test_a_step_without_the_original_s_autocast_differs_even_with_equal_numbers() -> None:
    """On a machine without the accelerator autocast is off on both sides, so the numbers agree;
    what the migrated program asks for is still different."""
    original = [replace(step(1.0, (1.0,)), autocast=BF16_ON_THE_ACCELERATOR)]
    migrated = [step(1.0, (1.0,))]
    first = compare({0: original}, {0: migrated}, FP32).first_difference
    assert first is not None
    assert (first.step, first.what) == (1, "the autocast regions")
    assert first.detail == "no autocast, the original autocast(accelerator, bfloat16)"
    assert compare({0: original}, {0: original}, FP32).first_difference is None


def test_the_regions_apex_amp_enters_itself_are_not_compared() -> None:
    """The runtime's amp enters autocast around the model's forward (turned off around
    registered functions): those regions are amp's, not the program's."""
    amp_region = (Autocast("cpu", "bfloat16", False),)
    original = [step(1.0, (1.0,))]
    migrated = [replace(step(1.0, (1.0,)), amp=AMP_O2, autocast=amp_region)]
    assert compare({0: original}, {0: migrated}, FP32).first_difference is None
    # Without amp on either side the same regions are the program's own, and a difference.
    amp_regions = (Autocast("cpu", "bfloat16", True), *amp_region)
    migrated = [replace(step(1.0, (1.0,)), autocast=amp_regions)]
    first = compare({0: original}, {0: migrated}, FP32).first_difference
    assert first is not None and first.what == "the autocast regions"


def test_a_region_turning_off_an_autocast_nothing_turned_on_is_no_region() -> None:
    """`autocast(enabled=args.amp)` without --amp, against a migration (NPU105's from-native)
    that enters no region: both compute without autocast. Once a region of the device has been
    turned on, at that step or before, a region turning it off counts."""
    off = Autocast("accelerator", "float16", False)
    on = Autocast("accelerator", "float16", True)
    plain = [step(1.0, (1.0,)), step(0.5, (0.9,))]
    turned_off = [replace(s, autocast=(off,)) for s in plain]
    assert compare({0: turned_off}, {0: plain}, FP32).first_difference is None
    assert compare({0: plain}, {0: turned_off}, FP32).first_difference is None
    # Another device's region does not make it count.
    cpu_on = [replace(s, autocast=(Autocast("cpu", "bfloat16", True), off)) for s in plain]
    only_cpu = [replace(s, autocast=(Autocast("cpu", "bfloat16", True),)) for s in plain]
    assert compare({0: cpu_on}, {0: only_cpu}, FP32).first_difference is None
    # On at the first step (a region around the whole loop), off inside at the second: the
    # region turning it off matters there.
    nested = [replace(plain[0], autocast=(on, off)), replace(plain[1], autocast=(off,))]
    without = [replace(plain[0], autocast=(on,)), plain[1]]
    first = compare({0: nested}, {0: without}, FP32).first_difference
    assert first is not None and (first.step, first.what) == (1, "the autocast regions")
    later = [replace(plain[0], autocast=(on,)), replace(plain[1], autocast=(off,))]
    first = compare({0: later}, {0: without}, FP32).first_difference
    assert first is not None and (first.step, first.what) == (2, "the autocast regions")
    assert first.detail == ("no autocast, the original autocast(accelerator, float16) turned off")


def test_the_tolerance_names_the_autocast_regions_both_ask_for() -> None:
    steps = [replace(step(1.0, (1.0,)), autocast=BF16_ON_THE_ACCELERATOR)]
    tolerance = automatic_tolerance(steps, steps)
    assert tolerance.rule == "fp32"
    assert "autocast(accelerator, bfloat16) asked for" in tolerance.reason


NANOGPT_SHAPED = REPO / "fixtures" / "e2e" / "device_tests"


def test_emulated_accelerator_sees_a_migration_that_turns_autocast_off(tmp_path: Path) -> None:
    """nanoGPT's shape: `device_type = "cuda" if "cuda" in device else "cpu"`. Migrated with the
    test, the NPU side autocasts like the original; with the test left as `"cuda"` (what the
    migration did before it moved tests with their values) it silently trains in fp32, and
    verify says so. Both sides take their accelerator paths on the CPU."""
    program = tmp_path / "program"
    shutil.copytree(NANOGPT_SHAPED, program, ignore=shutil.ignore_patterns("__pycache__"))
    entry = str(program / "train.py")
    result = npu_migrate_verify("--emulate-accelerator", "--steps", "2", "--migrate", entry)
    assert result.returncode == 0, output(result)
    assert "autocast(accelerator, bfloat16) asked for" in result.stdout, output(result)
    migrated = tmp_path / "migrated"
    run_npu_migrate("-q", "-o", migrated, program, timeout=TIMEOUT_S)
    script = migrated / "train.py"
    fixed = script.read_text()
    assert 'device_type = "npu" if "npu" in device else "cpu"' in fixed
    script.write_text(fixed.replace('if "npu" in device', 'if "cuda" in device'))
    result = npu_migrate_verify("--emulate-accelerator", "--steps", "2", entry, str(script))
    assert result.returncode == 1, output(result)
    assert (
        "different from step 1: the autocast regions: no autocast, the original "
        "autocast(accelerator, bfloat16)" in result.stdout
    ), output(result)
