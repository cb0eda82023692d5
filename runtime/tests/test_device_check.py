"""``make device-check`` (runtime/tools/device_check.py) where there is no device: its skip, its
refusals, the plan it would run on CUDA or an NPU, and how it runs and stops its steps.

The device paths themselves run only on a GPU or an NPU; here the command line runs for real in
subprocesses with CUDA hidden, and the step runner is driven with small real commands.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

from apex._device import device_kind

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "runtime" / "tools" / "device_check.py"

pytestmark = pytest.mark.skipif(
    device_kind() == "npu", reason="an NPU cannot be hidden from torch_npu here"
)


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("device_check", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine with one
    return subprocess.run(
        [sys.executable, str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def test_without_a_device_it_says_why_and_runs_nothing() -> None:
    result = run_tool()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout  # no step was started
    assert lines[0].startswith("device check skipped: no CUDA GPU (")
    assert "no Ascend NPU (torch_npu is absent or sees no device); nothing was run." in lines[0]


def test_asking_for_a_device_the_machine_lacks_is_a_usage_error() -> None:
    result = run_tool("--device", "cuda")
    assert result.returncode == 2
    assert "device check: --device cuda asked for, but this machine has cpu" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_the_plan_runs_the_runtime_tests_every_program_and_verify(device: str) -> None:
    result = run_tool("--device", device, "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"runtime tests (cap 180 s) [APEX_TEST_DEVICE={device}]" in out
    assert "-m pytest -q -p no:cacheprovider" in out and " runtime/tests\n" in out
    cases = tomllib.loads((REPO / "fixtures" / "e2e" / "cases.toml").read_text())
    for name, case in cases.items():
        if device == "cuda":
            script = REPO / case["path"] / case["script"]
            assert script.exists()
        else:  # the migrated copies, written by npu-migrate first
            script = Path("migrated") / name / case["script"]
        assert str(script) in out, name
    if device == "npu":
        assert "-m migrator --no-cache -q -o " in out
    assert out.rstrip().endswith("tests/test_verify.py tests/test_e2e.py")
    assert (REPO / "tests" / "test_verify.py").exists() and (
        REPO / "tests" / "test_e2e.py"
    ).exists()


def test_a_failing_command_ends_its_step_with_its_output() -> None:
    tool = load_tool()
    say = [sys.executable, "-c"]
    step = tool.Step(
        "three commands",
        [
            tool.Command([*say, "print('first')"]),
            tool.Command([*say, "import sys; print('boom'); sys.exit(3)"]),
            tool.Command([*say, "open('never-run', 'w')"]),
        ],
        dict(os.environ),
        cap_s=60,
    )
    outcome = tool.run_step(step, deadline=time.monotonic() + 60)
    assert outcome.status == "failed"
    assert "sys.exit(3)" in outcome.detail and "boom" in outcome.detail
    assert not (REPO / "never-run").exists()
    step.commands[1] = tool.Command(step.commands[1].argv, ok=(0, 3))
    step.commands.pop()
    assert tool.run_step(step, deadline=time.monotonic() + 60).status == "passed"


def test_a_step_past_its_cap_is_stopped_with_the_processes_it_started() -> None:
    tool = load_tool()
    spawner = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    step = tool.Step("sleeps", [tool.Command([sys.executable, "-c", spawner])], dict(os.environ))
    step.cap_s = 3
    outcome = tool.run_step(step, deadline=time.monotonic() + 60)
    assert outcome.status == "timed out"
    grandchild = int(outcome.detail.splitlines()[-1])
    for _ in range(50):  # the killed grandchild is reaped by init shortly after
        if not Path(f"/proc/{grandchild}").exists() or "Z" in proc_state(grandchild):
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in proc_state(grandchild)


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_steps_after_the_budget_are_not_run() -> None:
    tool = load_tool()
    step = tool.Step("late", [tool.Command([sys.executable, "-c", "pass"])], dict(os.environ))
    outcome = tool.run_step(step, deadline=time.monotonic() - 1)
    assert (outcome.status, outcome.detail) == ("not run", "no time left in the budget")
