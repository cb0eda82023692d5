"""``make device-check``: the runtime on this machine's accelerator, or a clear skip.

On a machine with a CUDA GPU (``torch.cuda.is_available()``) or an Ascend NPU (``torch_npu``
imports and ``torch.npu.is_available()``), run from the repository root:

1. **runtime tests**: ``pytest runtime/tests`` with ``APEX_TEST_DEVICE=<device>``; the tests of
   ``test_device_paths.py`` then run there (NpuFused optimizers on the device's kernels, amp in
   fp16 with ``combine_grad``, NVIDIA's names, the parameter contract on a real host round trip,
   and on CUDA migrated code put there by the torch_npu stand-in with ``NPU_SHIM_DEVICE=cuda``);
   the other runtime tests run on the CPU as always.
2. **end-to-end programs on the device**: every program of ``fixtures/e2e/cases.toml`` on one
   process. On CUDA the originals, which choose CUDA when it is available, run against the
   runtime (its CUDA path: amp, NVIDIA's and Ascend's optimizers, apex.parallel over NCCL). On an
   NPU the programs migrated by ``npu-migrate`` run with the real torch_npu, which they choose.
3. **npu-migrate verify**: ``tests/test_verify.py`` and ``tests/test_e2e.py``. verify runs both
   sides on the CPU by design (it hides the GPU from them, and its migrated side uses the CPU
   stand-in), so this step checks that it keeps doing so where a device is present.

Anywhere else it prints why it skipped and exits 0 without running anything. Every step has a
time cap and the whole check a budget (7.5 minutes; 8 are allowed on one GPU); a step that runs
past its cap is stopped with the processes it started. Nothing here changes a device setting:
the check only starts processes, and they only allocate memory and free it when they end.

Exit status: 0 passed or skipped, 1 a step failed or ran out of time, 2 a usage error (such as
``--device cuda`` on a machine without CUDA).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
CASES = REPO / "fixtures" / "e2e" / "cases.toml"
BUDGET_S = 450.0
DEVICES = ("cuda", "npu")

PROBE = """
import torch
from apex._device import device_kind
kind = device_kind()
name = torch.cuda.get_device_name() if kind == "cuda" else ""
print(kind, torch.__version__, torch.version.cuda or "-", name, sep="|")
"""


@dataclass(frozen=True)
class Probe:
    kind: str  # "cuda", "npu" or "cpu"
    torch_version: str
    cuda_build: str  # torch.version.cuda, "-" for a CPU-only build
    device_name: str

    def describe(self) -> str:
        name = f" ({self.device_name})" if self.device_name else ""
        return f"{self.kind}{name}, torch {self.torch_version}"

    def why_skipped(self) -> str:
        if self.cuda_build == "-":
            cuda = "a CPU-only torch build: torch.version.cuda is None"
        else:
            cuda = f"torch.cuda.is_available() is False, torch built for CUDA {self.cuda_build}"
        return f"no CUDA GPU ({cuda}); no Ascend NPU (torch_npu is absent or sees no device)"


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the step's environment
    ok: tuple[int, ...] = (0,)  # exit statuses that count as success
    needs_port: bool = False  # gets MASTER_ADDR / a free MASTER_PORT (torch.distributed)


@dataclass
class Step:
    name: str
    commands: list[Command]  # run one after the other; each must succeed
    env: dict[str, str] = field(default_factory=dict)
    cap_s: float = 180.0
    cwd: Path = REPO


@dataclass
class Outcome:
    step: Step
    status: str  # "passed", "failed", "timed out", "not run"
    seconds: float = 0.0
    detail: str = ""


def probe(python: str) -> Probe:
    """What this machine has, asked in a fresh interpreter with the runtime and no stand-in."""
    env = base_env()
    result = subprocess.run(
        [python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"device check: cannot probe the device:\n{result.stderr[-2000:]}")
    kind, version, cuda, name = result.stdout.strip().splitlines()[-1].split("|")
    return Probe(kind, version, cuda, name)


def base_env() -> dict[str, str]:
    """The caller's environment with the runtime first on the path and no torch_npu stand-in."""
    env = {k: v for k, v in os.environ.items() if k not in ("NPU_SHIM_DEVICE", "APEX_TEST_DEVICE")}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and "npu_shim" not in p]
    env["PYTHONPATH"] = os.pathsep.join([str(RUNTIME), *paths])
    env["OMP_NUM_THREADS"] = "1"
    return env


def workers() -> int:
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def e2e_programs(device: str, python: str, scratch: Path) -> list[Command]:
    """Every end-to-end program on one process: the originals on CUDA, the migrated copies on
    an NPU (``scratch/migrated``, written by the step's first command)."""
    commands = []
    for name, case in tomllib.loads(CASES.read_text()).items():
        folder = scratch / "migrated" / name if device == "npu" else REPO / case["path"]
        argv = [python, str(folder / case["script"])]
        env: dict[str, str] = {}
        if case["launcher"] == "spawn":
            argv += ["--world-size", "1", "--dist-url", "env://"]
        elif case["launcher"] == "env":
            env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
        commands.append(Command(argv, env, needs_port=True))
    return commands


def plan(device: str, python: str, scratch: Path) -> list[Step]:
    env = base_env()
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers())]
    programs = []
    if device == "npu":
        # Migrated copies choose the NPU themselves (torch.npu.is_available()); exit 1 means
        # "files changed", npu-migrate's normal outcome here.
        migrate = [python, "-m", "migrator", "--no-cache", "-q", "-o", str(scratch / "migrated")]
        programs.append(Command([*migrate, str(scratch / "originals")], ok=(0, 1)))
    programs += e2e_programs(device, python, scratch)
    return [
        Step("runtime tests", [Command([*pytest, "runtime/tests"])],
             {**env, "APEX_TEST_DEVICE": device}, cap_s=180),
        Step(f"end-to-end programs on {device}", programs, env, cap_s=150, cwd=scratch),
        Step("npu-migrate verify (both sides on the CPU, by design) and its end-to-end suite",
             [Command([*pytest, "tests/test_verify.py", "tests/test_e2e.py"])], env, cap_s=240),
    ]  # fmt: skip


def prepare_scratch(scratch: Path) -> None:
    """Copies of the end-to-end programs' folders, for npu-migrate to migrate on an NPU."""
    for name, case in tomllib.loads(CASES.read_text()).items():
        shutil.copytree(
            REPO / case["path"],
            scratch / "originals" / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pt"),
        )


def run_step(step: Step, deadline: float) -> Outcome:
    start = time.monotonic()
    cap = min(step.cap_s, deadline - start)
    if cap <= 0:
        return Outcome(step, "not run", 0.0, "no time left in the budget")
    for command in step.commands:
        left = cap - (time.monotonic() - start)
        if left <= 0:
            return Outcome(step, "timed out", time.monotonic() - start, f"cap {cap:.0f} s")
        env = {**step.env, **command.env}
        if command.needs_port:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        status, output = run_command(command, env, step.cwd, left)
        if status != "passed":
            detail = f"$ {' '.join(command.argv)}\n{output[-3000:]}"
            return Outcome(step, status, time.monotonic() - start, detail)
    return Outcome(step, "passed", time.monotonic() - start)


def run_command(
    command: Command, env: dict[str, str], cwd: Path, timeout: float
) -> tuple[str, str]:
    """Run one command in its own process group; on timeout, stop that group (and only it)."""
    process = subprocess.Popen(
        command.argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return "timed out", output or ""
    return ("passed" if process.returncode in command.ok else "failed"), output or ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", *DEVICES), default="auto")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all steps")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the steps for --device and run nothing"
    )
    args = parser.parse_args(argv)
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="device-check-") as folder:
        scratch = Path(folder)
        if args.dry_run:
            if args.device == "auto":
                parser.error("--dry-run needs --device cuda or --device npu")
            print_plan(plan(args.device, python, scratch))
            return 0
        found = probe(python)
        if args.device == "auto" and found.kind not in DEVICES:
            print(f"device check skipped: {found.why_skipped()}; nothing was run.")
            return 0
        if args.device != "auto" and found.kind != args.device:
            print(
                f"device check: --device {args.device} asked for, but this machine has "
                f"{found.describe()}: {found.why_skipped()}",
                file=sys.stderr,
            )
            return 2
        print(f"device check on {found.describe()}; budget {args.budget:.0f} s")
        if found.kind == "npu":
            prepare_scratch(scratch)
        deadline = time.monotonic() + args.budget
        outcomes = []
        for step in plan(found.kind, python, scratch):
            outcome = run_step(step, deadline)
            outcomes.append(outcome)
            print(f"  {outcome.step.name}: {outcome.status} ({outcome.seconds:.0f} s)", flush=True)
            if outcome.detail:
                print("    " + outcome.detail.replace("\n", "\n    "))
        failed = [o for o in outcomes if o.status != "passed"]
        verdict = "passed" if not failed else f"{len(failed)} step(s) did not pass"
        print(f"device check on {found.kind}: {verdict}")
        return 0 if not failed else 1


def print_plan(steps: list[Step]) -> None:
    for step in steps:
        device = step.env.get("APEX_TEST_DEVICE")
        where = f" [APEX_TEST_DEVICE={device}]" if device else ""
        print(f"{step.name} (cap {step.cap_s:.0f} s){where}")
        for command in step.commands:
            variables = " ".join(f"{k}={v}" for k, v in command.env.items())
            print("  $ " + " ".join(filter(None, [variables, *command.argv])))


if __name__ == "__main__":
    raise SystemExit(main())
