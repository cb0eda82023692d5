"""Running one side of a verification: its processes, their environment, what they recorded.

Each side (the original, the migrated program) runs as ``python ENTRY ARGS...`` in the folder of
its entry, in its own processes, on CPU, with the probe of ``child/`` first on ``PYTHONPATH``
(and nowhere else: the user's files and the parent's environment are untouched).
``world_size=K`` starts K processes with torchrun's environment variables; the migrated side
also gets the runtime's ``torch_npu`` stand-in.

On Linux the processes are forked from one parent that has imported torch
(``child/_npu_migrate_verify_zygote.py``), so that torch is imported once per run instead of once
per process; ``NPU_MIGRATE_VERIFY_FORK=0`` starts each as a fresh interpreter, as does any
failure to start that parent.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from migrator.verify.compare import Step, step_from_json

PROBE_DIR = Path(__file__).resolve().parent / "child"
ZYGOTE = PROBE_DIR / "_npu_migrate_verify_zygote.py"
SEED = 0
POLL_S = 0.05
# Inherited from a launcher the user may be running under; each side gets its own.
DISTRIBUTED_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)


@dataclass(frozen=True)
class Side:
    label: str  # "original" or "migrated"
    entry: Path
    shim: bool  # run with the runtime's torch_npu stand-in
    extra_args: tuple[str, ...] = ()  # after the shared ARGS: flags only this side has (--amp)

    @property
    def folder(self) -> Path:
        return self.entry.parent


@dataclass(frozen=True)
class Settings:
    steps: int
    world_size: int | None  # None: one plain process, as `python ENTRY`
    synthetic_data: bool
    timeout_s: float
    program_args: tuple[str, ...]
    emulate_accelerator: bool = False  # both sides see an accelerator backed by the CPU


class Running(Protocol):
    """What verify asks of a program process: :class:`subprocess.Popen`'s ``poll``, ``kill``
    and ``wait``."""

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self) -> int: ...


@dataclass
class Process:
    rank: int
    popen: Running
    log: Path
    exit_code: int | None = None


@dataclass
class Record:
    """What one process of a side recorded (``record-<pid>.jsonl``)."""

    rank: int
    steps: list[Step]
    end: dict[str, Any] | None  # absent when the process was killed


@dataclass
class Outcome:
    side: Side
    processes: list[Process]
    records: list[Record]
    timed_out: bool = False
    failed: list[Process] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_env(
    side: Side, settings: Settings, records: Path, port: int, rank: int
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PROBE_DIR) + (os.pathsep + rest if rest else "")
    env.update(
        NPU_MIGRATE_VERIFY_RECORDS=str(records),
        NPU_MIGRATE_VERIFY_STEPS=str(settings.steps),
        NPU_MIGRATE_VERIFY_SEED=str(SEED),
        PYTHONHASHSEED=str(SEED),
        PYTHONUNBUFFERED="1",
        # The apex runtime raises where Ascend's apex would train differently from it (a
        # parameter whose first gradient comes after combine_grad packed the others).
        APEX_AMP_STRICT="1",
        # Its fused optimizers update with torch's single-tensor kernels on the CPU: bit for
        # bit torch.optim's default CPU arithmetic, so only the migration's own differences
        # show. An original that asks for torch's fused kernels (`fused=True`) on the CPU is
        # verified with APEX_REFERENCE_KERNELS=0 in the environment, which is kept.
        APEX_REFERENCE_KERNELS=env.get("APEX_REFERENCE_KERNELS", "1"),
        # One thread: reproducible reductions, and the two sides do not fight over the cores.
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",  # the original takes its CPU path even where there is a GPU
        # For scripts that start their own processes with init_method="env://".
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    for flag, on in (
        ("NPU_MIGRATE_VERIFY_SHIM", side.shim),
        ("NPU_MIGRATE_VERIFY_SYNTHETIC", settings.synthetic_data),
        ("NPU_MIGRATE_VERIFY_ACCELERATOR", settings.emulate_accelerator),
    ):
        if on:
            env[flag] = "1"
        else:
            env.pop(flag, None)
    if settings.world_size is not None:
        size = str(settings.world_size)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=size,
            LOCAL_WORLD_SIZE=size,
            GROUP_RANK="0",
        )
    return env


class Zygote:
    """The parent the program processes of a run are forked from (see
    ``child/_npu_migrate_verify_zygote.py`` for what it does and answers)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.ended: dict[int, int] = {}  # pid -> exit code
        self.pending = b""
        self.lines: list[str] = []

    @classmethod
    def start(cls, env: dict[str, str], workdir: Path, timeout_s: float) -> Zygote | None:
        """The parent, once it has imported torch; None where forking is not used (not Linux,
        ``NPU_MIGRATE_VERIFY_FORK=0``) or the parent could not get ready: the programs then
        start as fresh interpreters, which show their own errors."""
        if sys.platform != "linux" or os.environ.get("NPU_MIGRATE_VERIFY_FORK") == "0":
            return None
        workdir.mkdir(parents=True, exist_ok=True)
        with (workdir / "zygote.log").open("wb") as log:
            popen = subprocess.Popen(
                [sys.executable, str(ZYGOTE)],
                cwd=workdir,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        zygote = cls(popen)
        if zygote._next_line(timeout_s) != "ready":
            zygote.close()
            return None
        return zygote

    def fork(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> Forked:
        request = {"argv": argv, "cwd": str(cwd), "env": env, "log": str(log)}
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(request).encode() + b"\n")
        self.popen.stdin.flush()
        answer = self._next_line(60.0)
        if not answer.startswith("started "):
            raise RuntimeError(f"npu-migrate verify could not start {argv[0]}: {answer!r}")
        return Forked(self, int(answer.split()[1]))

    def exit_code(self, pid: int) -> int | None:
        gone = self.popen.poll() is not None
        while self._read(0.0) and gone:
            pass  # (the parent has ended: take everything it wrote)
        for line in self.lines:
            words = line.split()
            if words[0] == "ended":
                self.ended[int(words[1])] = int(words[2])
        self.lines = [line for line in self.lines if not line.startswith("ended ")]
        if pid not in self.ended and gone:
            # The parent was killed: nobody can report on its children any more.
            _kill(pid)
            self.ended[pid] = -signal.SIGKILL
        return self.ended.get(pid)

    def close(self) -> None:
        """No more requests: the parent leaves once its children have ended."""
        if self.popen.stdin is not None and not self.popen.stdin.closed:
            self.popen.stdin.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        if self.popen.stdout is not None:
            self.popen.stdout.close()

    def _next_line(self, timeout_s: float) -> str:
        """The next answer that is no ``ended`` line ('' when none comes in time)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for index, line in enumerate(self.lines):
                if not line.startswith("ended "):
                    return self.lines.pop(index)
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, POLL_S)):
                return ""

    def _read(self, timeout_s: float) -> bool:
        """Take in what the parent has written: False once it has closed its output, or when
        nothing came within ``timeout_s`` of a parent that has ended."""
        stdout = self.popen.stdout
        assert stdout is not None
        if stdout.closed:
            return False
        readable, _, _ = select.select([stdout], [], [], timeout_s)
        if not readable:
            return self.popen.poll() is None
        chunk = os.read(stdout.fileno(), 1 << 16)
        if not chunk:
            return False
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        self.lines += [line.decode() for line in lines if line]
        return True


class Forked:
    """A program process the :class:`Zygote` forked, as verify polls, kills and waits for it."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid

    def poll(self) -> int | None:
        return self.zygote.exit_code(self.pid)

    def kill(self) -> None:
        if self.poll() is None:
            _kill(self.pid)

    def wait(self) -> int:
        while (code := self.poll()) is None:
            time.sleep(POLL_S)
        return code


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):  # it has ended, and nobody waited for it yet
        os.kill(pid, signal.SIGKILL)


class SideRun:
    """The processes of one side, started at once."""

    def __init__(
        self, side: Side, settings: Settings, workdir: Path, zygote: Zygote | None = None
    ) -> None:
        self.side = side
        self.records = workdir / f"records-{side.label}"
        self.records.mkdir(parents=True)
        port = free_port()
        arguments = [str(side.entry), *settings.program_args, *side.extra_args]
        self.processes: list[Process] = []
        with ExitStack() as logs:
            for rank in range(settings.world_size or 1):
                log = workdir / f"{side.label}-rank{rank}.log"
                env = child_env(side, settings, self.records, port, rank)
                popen: Running
                if zygote is not None:
                    popen = zygote.fork(arguments, side.folder, env, log)
                else:
                    popen = subprocess.Popen(
                        [sys.executable, *arguments],
                        cwd=side.folder,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=logs.enter_context(log.open("wb")),
                        stderr=subprocess.STDOUT,
                    )
                self.processes.append(Process(rank, popen, log))
        self.timed_out = False

    def poll(self) -> bool:
        """True once every process has ended; one failing process ends its siblings (they would
        wait for it in a collective)."""
        for process in self.processes:
            if process.exit_code is None:
                process.exit_code = process.popen.poll()
        if any(p.exit_code not in (None, 0) for p in self.processes):
            self.kill()
        return all(p.exit_code is not None for p in self.processes)

    def kill(self) -> None:
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.kill()
                process.exit_code = process.popen.wait()

    def outcome(self) -> Outcome:
        failed = [p for p in self.processes if p.exit_code != 0]
        return Outcome(
            self.side, self.processes, read_records(self.records), self.timed_out, failed
        )


def run_sides(sides: Sequence[Side], settings: Settings, workdir: Path) -> list[Outcome]:
    """Run the sides at the same time, unless they share a folder (then one after the other, so
    that files one writes cannot be read by the other mid-run)."""
    parallel = len({side.folder.resolve() for side in sides}) == len(sides)
    groups = [list(sides)] if parallel else [[side] for side in sides]
    outcomes = []
    for number, group in enumerate(groups):
        outcomes.extend(run_group_keeping_ports(group, settings, workdir / f"group-{number}"))
    return outcomes


# A port found free can be taken by another program before rank 0 listens on it; only that
# failure is tried again, with new ports.
PORT_ATTEMPTS = 3
PORT_TAKEN = ("eaddrinuse", "address already in use")  # as torch words it, lowercased


def run_group_keeping_ports(
    sides: Sequence[Side], settings: Settings, workdir: Path
) -> list[Outcome]:
    for attempt in range(PORT_ATTEMPTS):
        outcomes = run_group(sides, settings, workdir / f"attempt-{attempt}")
        if not any(lost_its_port(outcome) for outcome in outcomes):
            break
    return outcomes


def lost_its_port(outcome: Outcome) -> bool:
    """Whether a process of this side failed because its rendezvous port was taken."""
    tails = (log_tail(process.log, 200).lower() for process in outcome.failed)
    return any(sign in tail for tail in tails for sign in PORT_TAKEN)


def zygote_env(sides: Sequence[Side], settings: Settings, workdir: Path) -> dict[str, str]:
    """The environment the programs' processes share at start-up (``PYTHONPATH``, the hash
    seed, one thread...), without what tells one process from another or installs the probe."""
    env = child_env(sides[0], settings, workdir, 0, 0)
    return {
        key: value
        for key, value in env.items()
        if key not in DISTRIBUTED_ENV and not key.startswith("NPU_MIGRATE_VERIFY_")
    }


def run_group(sides: Sequence[Side], settings: Settings, workdir: Path) -> list[Outcome]:
    runs: list[SideRun] = []
    zygote = Zygote.start(zygote_env(sides, settings, workdir), workdir, settings.timeout_s)
    try:
        for side in sides:
            runs.append(SideRun(side, settings, workdir, zygote))
        deadline = time.monotonic() + settings.timeout_s
        while not all([run.poll() for run in runs]):
            if time.monotonic() > deadline:
                for run in runs:
                    if not run.poll():
                        run.timed_out = True
                        run.kill()
                break
            time.sleep(POLL_S)
    finally:
        for run in runs:
            run.kill()  # Ctrl-C, or an error starting the other side: leave nothing behind
        if zygote is not None:
            zygote.close()
    return [run.outcome() for run in runs]


def read_records(folder: Path) -> list[Record]:
    records = []
    for path in sorted(folder.glob("record-*.jsonl")):
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        steps = [step_from_json(line) for line in lines if line["kind"] == "step"]
        ends = [line for line in lines if line["kind"] == "end"]
        end = ends[-1] if ends else None
        rank = end["rank"] if end is not None else (lines[-1]["rank"] if lines else 0)
        records.append(Record(int(rank), steps, end))
    return records


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
