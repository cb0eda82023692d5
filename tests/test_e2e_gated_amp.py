"""End to end: an `amp.initialize` that runs only under `--amp` (fixtures/e2e/gated_amp, in the
shape of Ascend ModelZoo's scripts), migrated by the real command line and run by
``npu-migrate verify`` on both paths.

As written, NPU101 picks the class by the same condition, `(apex.optimizers.NpuFusedSGD if
args.amp else torch_npu.optim.NpuFusedSGD)`, and NPU102 adds `combine_grad=True`: with and
without `--amp` the migrated program computes what the original computes. With
`--amp always` the optimizer is apex's on every path: the amp path still agrees, and the path
without amp fails loudly at its first step, never silently.

The same holds for a class looked up by name (fixtures/e2e/gated_lookup, NVIDIA GNMT's
`torch.optim.__dict__[name](params, **config)`): each entry of the mapping NPU101 writes next to
the lookup is picked by amp's condition, and since a name the mapping leaves out (SGD) stays
unfused, NPU102 passes `combine_grad=getattr(optimizer, "is_npu_fused_optimizer", False)`: on
for the fused RMSprop, off for SGD, both verified under `--amp`; and for a factory in another
module whose callers use amp on some paths only (fixtures/e2e/factory_amp, timm's
`create_optimizer` called by train.py under `use_amp == "apex"`, and the `create_optimizer_v2`
it returns a call of, called by benchmark.py without amp): both get a keyword-only `apex_amp`
that picks the class, and each call passes amp's condition there; the same for a function of the
script itself called on two paths of its `main()` (fixtures/e2e/own_factory, CSWin-Transformer's
shape). Where the `amp.initialize` calls sit in two branches under `--amp`
(fixtures/e2e/amp_arms, YOLOv4's shape, its options read from a dict as UNet++ does), the class
is picked by `config["amp"]`, and both branches compute what the original computes. A factory
that returns its optimizer with its schedule, unpacked by the caller
(fixtures/e2e/tuple_factory, NVIDIA/semantic-segmentation's `optim, scheduler =
get_optimizer(args, net)` under `--fp16`), gets the same keyword.

A class picked into a name at module level (fixtures/e2e/reid_alias,
layumi/Person_reID_baseline_pytorch's `optim_name = optim.SGD` or apex's FusedSGD, called with
groups that each set `lr`, `vars(opt)` written out before `if fp16: amp.initialize(...)`) is
mapped at the call, torch's SGD to the class picked by `fp16`, with no `lr` added.
Where apex is optional (fixtures/e2e/optional_apex, timm's old train.py: `from apex import amp`
in a `try`, fp32 where apex is missing), the `import apex` that the picked class needs goes into
that `try`, so the migrated script still runs, and trains the same, on a machine without apex.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import run_npu_migrate, start_npu_migrate

from apex.testing import npu_shim_env

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "fixtures" / "e2e" / "gated_amp"
LOOKUP = REPO / "fixtures" / "e2e" / "gated_lookup"
FACTORY = REPO / "fixtures" / "e2e" / "factory_amp"
OWN_FACTORY = REPO / "fixtures" / "e2e" / "own_factory"
ARMS = REPO / "fixtures" / "e2e" / "amp_arms"
TUPLE_FACTORY = REPO / "fixtures" / "e2e" / "tuple_factory"
OPTIONAL_APEX = REPO / "fixtures" / "e2e" / "optional_apex"
REID_ALIAS = REPO / "fixtures" / "e2e" / "reid_alias"
# Runs a script (argv[1], its arguments after it) as on a machine without apex: the backing of
# the CPU torch_npu stand-in (apex.optimizers.standalone) is loaded first, then every import of
# `apex` fails the way a missing package does.
WITHOUT_APEX = """
import runpy, sys
import apex.optimizers.standalone
sys.modules["apex"] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
TIMEOUT_S = 180
VERIFY_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def migrated_copy(tmp_path: Path, name: str, *options: str, program: Path = PROGRAM) -> Path:
    copy = tmp_path / name
    shutil.copytree(program, copy, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_npu_migrate("--no-cache", "-q", *options, copy, timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr  # 1: the file was changed
    return copy / "train.py"


def start_verify(original: Path, migrated: Path, *program_args: str) -> subprocess.Popen[str]:
    command = ["verify", "--steps", "6", "--timeout", str(TIMEOUT_S), str(original)]
    return start_npu_migrate(*command, migrated, "--", *program_args, extra_env=VERIFY_ENV)


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    stdout, stderr = process.communicate(timeout=3 * TIMEOUT_S)
    return process.returncode, stdout + stderr


def assert_agree(runs: dict[str, subprocess.Popen[str]]) -> None:
    """Each verify run (by name) exits 0 with every step in agreement."""
    for name, process in runs.items():
        code, output = finish(process)
        assert code == 0, f"{name}: verify exited {code}\n{output}"
        assert "same: 6 step(s) agree" in output, output


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp_path = tmp_path_factory.mktemp("gated_amp")
    original = tmp_path / "original"
    shutil.copytree(PROGRAM, original, ignore=shutil.ignore_patterns("__pycache__"))
    return {
        "original": original / "train.py",
        "as-written": migrated_copy(tmp_path, "as-written"),
        "always": migrated_copy(tmp_path, "always", "--amp", "always"),
    }


def test_the_class_follows_the_amp_condition(programs: dict[str, Path]) -> None:
    text = programs["as-written"].read_text()
    assert "(apex.optimizers.NpuFusedSGD if args.amp else torch_npu.optim.NpuFusedSGD)(" in text
    assert "combine_grad=True" in text
    always = programs["always"].read_text()
    assert "= apex.optimizers.NpuFusedSGD(" in always and "combine_grad=True" in always


def test_both_paths_compute_the_same_and_always_fails_loudly_without_amp(
    programs: dict[str, Path],
) -> None:
    original = programs["original"]
    runs = {
        "as-written, fp32": start_verify(original, programs["as-written"]),
        "as-written, amp": start_verify(original, programs["as-written"], "--amp"),
        "always, fp32": start_verify(original, programs["always"]),
    }
    results = {name: finish(process) for name, process in runs.items()}
    for name in ("as-written, fp32", "as-written, amp"):
        code, output = results[name]
        assert code == 0, f"{name}: verify exited {code}\n{output}"
        assert "same: 6 step(s) agree" in output, output
    assert "(fp32: no mixed precision)" in results["as-written, fp32"][1]
    assert "(amp: amp O1" in results["as-written, amp"][1]
    code, output = results["always, fp32"]
    assert code == 2, output  # the migrated side cannot run: a loud error, not other numbers
    assert "apex.optimizers.NpuFusedSGD should be used with AMP" in output, output


def test_a_lookup_by_name_maps_each_name_to_the_class_of_its_path(tmp_path: Path) -> None:
    migrated = migrated_copy(tmp_path, "lookup", program=LOOKUP)
    text = migrated.read_text()
    assert (
        '"RMSprop": (apex.optimizers.NpuFusedRMSprop if use_amp else '
        "torch_npu.optim.NpuFusedRMSprop)," in text
    )
    assert "}.get(opt_name, torch.optim.__dict__[opt_name])(" in text
    # RMSprop is fused, SGD (not mapped) is not: amp combines the gradients of the fused one only
    assert 'combine_grad=getattr(self.optimizer, "is_npu_fused_optimizer", False)' in text
    original = LOOKUP / "train.py"
    runs = {
        "fp32": start_verify(original, migrated),
        "amp": start_verify(original, migrated, "--amp"),
        "amp, unmapped": start_verify(original, migrated, "--amp", "--optimizer", "SGD"),
    }
    assert_agree(runs)


def test_a_factory_picks_the_class_by_the_condition_its_callers_pass(tmp_path: Path) -> None:
    migrated = migrated_copy(tmp_path, "factory", program=FACTORY).parent
    factory = (migrated / "optim_factory.py").read_text()
    assert "def create_optimizer(args, parameters, *, apex_amp):" in factory
    assert "**optimizer_kwargs(args), apex_amp=apex_amp)" in factory  # passed on
    assert (
        'def create_optimizer_v2(parameters, opt="sgd", momentum=0.9, *, apex_amp, **kw' in factory
    )
    assert "(apex.optimizers.NpuFusedAdamW if apex_amp else torch_npu.optim.NpuFusedAdamW)(" in (
        factory
    )
    train = (migrated / "train.py").read_text()
    assert 'create_optimizer(args, model.parameters(), apex_amp=use_amp == "apex")' in train
    assert "combine_grad=True" in train
    benchmark = (migrated / "benchmark.py").read_text()
    assert "weight_decay=0.05, apex_amp=False)" in benchmark
    check = run_npu_migrate("--check", "--no-cache", "-q", migrated, timeout=TIMEOUT_S)
    assert check.returncode == 0, check.stdout + check.stderr  # nothing left: idempotent
    runs = {
        "train, fp32": start_verify(FACTORY / "train.py", migrated / "train.py"),
        "train, amp": start_verify(FACTORY / "train.py", migrated / "train.py", "--amp"),
        "train, amp, adamw": start_verify(
            FACTORY / "train.py", migrated / "train.py", "--amp", "--opt", "adamw"
        ),
        "benchmark": start_verify(FACTORY / "benchmark.py", migrated / "benchmark.py"),
    }
    assert_agree(runs)


def test_a_function_of_the_script_gets_the_condition_from_its_own_calls(tmp_path: Path) -> None:
    migrated = migrated_copy(tmp_path, "own", program=OWN_FACTORY)
    text = migrated.read_text()
    assert "def create_optimizer(args, parameters, *, apex_amp):" in text
    assert text.count('parameters(), apex_amp=use_amp == "apex")') == 2  # both branches
    assert "combine_grad=True" in text
    original = OWN_FACTORY / "train.py"
    runs = {
        "fp32": start_verify(original, migrated),
        "amp": start_verify(original, migrated, "--amp"),
        "amp, adamw, fine-tuning": start_verify(
            original, migrated, "--amp", "--opt", "adamw", "--finetune"
        ),
    }
    assert_agree(runs)


def test_amp_in_two_branches_picks_the_class_by_the_condition_over_both(tmp_path: Path) -> None:
    migrated = migrated_copy(tmp_path, "arms", program=ARMS)
    text = migrated.read_text()
    picked = 'apex.optimizers.NpuFusedSGD if config["amp"] else torch_npu.optim.NpuFusedSGD'
    assert f"({picked})(" in text
    assert text.count("combine_grad=True") == 2
    original = ARMS / "train.py"
    runs = {
        "fp32": start_verify(original, migrated),
        "amp, static scale": start_verify(original, migrated, "--amp"),
        "amp, dynamic scale": start_verify(original, migrated, "--amp", "--dynamic-scale"),
    }
    assert_agree(runs)


def test_a_factory_returning_a_tuple_is_followed_through_the_unpacking(tmp_path: Path) -> None:
    migrated = migrated_copy(tmp_path, "tuple", program=TUPLE_FACTORY).parent
    factory = (migrated / "loss" / "optimizer.py").read_text()
    assert "def get_optimizer(args, net, *, apex_amp):" in factory
    assert "(apex.optimizers.NpuFusedSGD if apex_amp else torch_npu.optim.NpuFusedSGD)(" in factory
    assert (
        "(apex.optimizers.NpuFusedAdam if apex_amp else torch_npu.optim.NpuFusedAdam)(" in factory
    )
    train = (migrated / "train.py").read_text()
    assert "optim, scheduler = get_optimizer(args, net, apex_amp=args.fp16)" in train
    assert 'opt_level="O1", loss_scale=128.0, combine_grad=True)' in train
    check = run_npu_migrate("--check", "--no-cache", "-q", migrated, timeout=TIMEOUT_S)
    assert check.returncode == 0, check.stdout + check.stderr  # nothing left: idempotent
    original = TUPLE_FACTORY / "train.py"
    runs = {
        "fp32, sgd": start_verify(original, migrated / "train.py"),
        "amp, sgd": start_verify(original, migrated / "train.py", "--fp16"),
        "amp, adam": start_verify(original, migrated / "train.py", "--fp16", "--optimizer", "adam"),
    }
    assert_agree(runs)


def test_a_script_that_runs_without_apex_still_runs_without_it_once_migrated(
    tmp_path: Path,
) -> None:
    migrated = migrated_copy(tmp_path, "optional", program=OPTIONAL_APEX)
    text = migrated.read_text()
    assert "try:\n    import apex\n    from apex import amp\n" in text
    assert "\nimport apex\n" not in text  # no import of apex outside the `try`
    assert "(apex.optimizers.NpuFusedSGD if use_amp else torch_npu.optim.NpuFusedSGD)(" in text
    check = run_npu_migrate("--check", "--no-cache", "-q", migrated, timeout=TIMEOUT_S)
    assert check.returncode == 0, check.stdout + check.stderr  # nothing left: idempotent
    original = OPTIONAL_APEX / "train.py"
    runs = {
        "fp32": start_verify(original, migrated),
        "amp": start_verify(original, migrated, "--amp"),
    }
    assert_agree(runs)
    for flags in ([], ["--amp"]):
        result = subprocess.run(
            [sys.executable, "-c", WITHOUT_APEX, str(migrated), *flags, "--steps", "2"],
            env=npu_shim_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "step 1 loss" in result.stdout, result.stdout
        assert ("apex is not installed" in result.stdout) == bool(flags), result.stdout


def test_class_picked_into_a_name_is_mapped_and_trains_the_same(tmp_path: Path) -> None:
    migrated = migrated_copy(tmp_path, "reid", program=REID_ALIAS)
    text = migrated.read_text()
    assert (
        "optimizer_ft = {\n    torch.optim.SGD: (apex.optimizers.NpuFusedSGD if fp16 else "
        "torch_npu.optim.NpuFusedSGD),\n}.get(optim_name, optim_name)(["
    ) in text
    assert "nesterov=True)" in text and "lr=0.001" not in text  # every group sets its own
    check = run_npu_migrate("--check", "--no-cache", "--format", "json", migrated)
    report = json.loads(check.stdout)
    assert not report["edits"], check.stdout  # nothing left to change: idempotent
    left = {(d["code"], d["line"]) for d in report["diagnostics"]}
    assert ("NPU101", 56) in left  # apex's FusedSGD (`--FSGD`) still needs a person
    original = REID_ALIAS / "train.py"
    runs = {
        "fp32": start_verify(original, migrated),
        "fp16": start_verify(original, migrated, "--fp16"),
    }
    assert_agree(runs)
