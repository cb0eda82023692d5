"""Real ``npu-migrate`` runs that are interrupted: the parent by SIGTERM or Ctrl-C, a worker
by SIGKILL. No worker may outlive its parent, no file may be left half-written, and a run
survives one of its workers dying."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _cli import NPU_MIGRATE, run_command
from _tiers import SLOW, sample_index

from migrator.files import TEMP_SUFFIX

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def module_text(functions: int) -> str:
    return "import torch\n\n" + "".join(
        f"def step_{i}(x):\n    return x.cuda().sum() + torch.ones({i}).cuda()\n\n"
        for i in range(functions)
    )


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as stream:
            return [int(child) for child in stream.read().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as stream:
            return int(stream.read().split()[1])
    except OSError:
        return 0


def make_tree(
    root: Path, files: int, big_lines: int = 0, functions: int = 400
) -> dict[Path, bytes]:
    originals = {}
    for index in range(files):
        path = root / f"pkg{index % 5}" / f"mod{index:03}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = module_text(functions)
        path.write_text(f"# module {index}\n{text}")  # distinct: equal contents run once
        originals[path] = path.read_bytes()
    if big_lines:
        big = root / "big.py"
        lines = [f"y{i} = model_{i % 7}.cuda(device={i % 3})" for i in range(big_lines)]
        big.write_text("import torch\n" + "\n".join(lines) + "\n")
        originals[big] = big.read_bytes()
    return originals


# `python -m migrator` with Python's own Ctrl-C handler, as a terminal's foreground command has
# it: a test suite started as a shell's background job inherits Ctrl-C ignored, and Python then
# leaves it ignored in the run.
WITH_CTRL_C = (
    sys.executable,
    "-c",
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('migrator', run_name='__main__', alter_sys=True)",
)


def start(root: Path, *options: str) -> subprocess.Popen[bytes]:
    command = [*WITH_CTRL_C, "--select", "NPU301", "--no-cache", *options]
    return subprocess.Popen(
        [*command, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )


def is_worker(pid: int) -> bool:
    """A pool worker, not multiprocessing's resource tracker: a child of the run too, which
    exits once the workers that share its pipe are gone (the kill test checks that it does)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return b"spawn_main" in stream.read()
    except OSError:
        return False


def workers_of(parent: subprocess.Popen[bytes], count: int, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [pid for pid in children(parent.pid) if is_worker(pid)]
        if len(found) >= count:
            return found
        assert parent.poll() is None, "the run ended before its workers started"
        time.sleep(0.02)
    raise AssertionError("workers did not start")


def assert_whole(originals: dict[Path, bytes]) -> None:
    """Every file is its old bytes or a complete, parsable new version; no temporary is left."""
    for path, original in originals.items():
        data = path.read_bytes()
        assert data == original or (b".npu(" in data and ast.parse(data) is not None), path
    leftovers = [p for p in next(iter(originals)).parents[1].rglob(f"*{TEMP_SUFFIX}")]
    assert leftovers == []


def threads(pid: int) -> int:
    """How many threads ``pid`` runs: a pool worker starts its lifeline thread once it has
    armed its death watch, so more than one means it is armed."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(0.02)
    return not any(alive(pid) for pid in pids)


@pytest.mark.parametrize(
    ("how", "code", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
    ids=["sigterm", "ctrl-c"],
)
def test_a_stopped_run_stops_its_workers_and_leaves_whole_files(
    tmp_path: Path, how: signal.Signals, code: int, word: str
) -> None:
    originals = make_tree(tmp_path, 300)
    run = start(tmp_path, "-j", "2")
    workers = workers_of(run, 2)
    time.sleep(0.3)  # well into the run
    if how is signal.SIGINT:
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C reaches the whole group
    else:
        run.send_signal(how)
    _, errors = run.communicate(timeout=30)
    assert run.returncode == code
    lines = errors.decode().strip().splitlines()
    assert len(lines) == 1 and word in lines[0]
    assert gone_within(workers, 1.0)
    assert_whole(originals)


@pytest.mark.parametrize("delay", [0.0, 0.3], ids=["while-starting", "while-working"])
def test_workers_exit_within_a_second_of_their_parent_being_killed(
    tmp_path: Path, delay: float
) -> None:
    # Killed at once, the workers are still importing the migrator (a second or more on a
    # loaded machine): they must notice before that, not after.
    originals = make_tree(tmp_path, 300)
    run = start(tmp_path, "-j", "2")
    workers = workers_of(run, 2)
    time.sleep(delay)
    everything = children(run.pid)
    run.kill()
    run.wait()
    assert gone_within(workers, 1.0)
    # multiprocessing's resource tracker follows once the workers are gone: nothing lingers.
    assert gone_within(everything, 10.0)
    for path, original in originals.items():  # SIGKILL: no cleanup, but no partial file either
        data = path.read_bytes()
        assert data == original or ast.parse(data) is not None


def test_a_worker_killed_on_a_file_reports_that_file_and_the_run_goes_on(tmp_path: Path) -> None:
    originals = make_tree(tmp_path, 30, big_lines=60_000)
    run = start(tmp_path, "-j", "2")
    workers = workers_of(run, 2)
    # The big file goes first (largest first); the worker that holds it grows largest.
    time.sleep(1.0)
    victim = max(workers, key=rss)
    os.kill(victim, signal.SIGKILL)
    _, errors = run.communicate(timeout=120)
    assert run.returncode == 2, errors.decode()
    reported = [line for line in errors.decode().splitlines() if "SIGKILL" in line]
    assert len(reported) == 1, errors.decode()
    failed = Path(reported[0].removeprefix("error: ").split(": ")[0])
    assert failed in originals and failed.read_bytes() == originals[failed]  # left as it was
    others = [path for path in originals if path != failed]
    assert all(path.read_bytes() != originals[path] for path in others)  # the rest migrated


def expected_outputs(tmp_path: Path, originals: dict[Path, bytes]) -> dict[Path, bytes]:
    """What each file becomes, from a run over a copy of the tree."""
    copy = tmp_path / "expected"
    for path, data in originals.items():
        target = copy / path.relative_to(tmp_path / "tree")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    done = start(copy, "-j", "2")
    done.communicate(timeout=300)
    assert done.returncode == 1
    return {path: (copy / path.relative_to(tmp_path / "tree")).read_bytes() for path in originals}


def test_sigkill_at_random_moments_leaves_every_file_old_or_new(
    tmp_path: Path, testrun_uid: str
) -> None:
    """Two kills in the default run, six with ``make test-all``; the moments differ from run to
    run (``NPU_MIGRATE_KILL_SEED`` repeats a run's, which a failure prints)."""
    import random

    # A run of this tree takes about 5 s on two idle cores: every kill lands mid-run.
    originals = make_tree(tmp_path / "tree", 60, functions=150)
    migrated = expected_outputs(tmp_path, originals)
    seed = sample_index("NPU_MIGRATE_KILL_SEED", testrun_uid, 2**32)
    print(f"NPU_MIGRATE_KILL_SEED={seed}")
    chooser = random.Random(seed)
    for _ in range(6 if SLOW else 2):
        run = start(tmp_path / "tree", "-j", "2")
        time.sleep(chooser.uniform(0.2, 1.5))
        everything = children(run.pid)
        workers = [pid for pid in everything if is_worker(pid)]
        armed = [pid for pid in workers if threads(pid) > 1]
        run.kill()
        run.wait()
        assert gone_within(armed, 1.0)
        # A worker still starting notices once its interpreter is up and it arms the watch: a
        # tenth of a second on an idle machine, past a second on a loaded one (CI saw it).
        assert gone_within(workers, 10.0)
        assert gone_within(everything, 10.0)  # the resource tracker, once the workers are gone
        for path in originals:
            assert path.read_bytes() in (originals[path], migrated[path]), path
    finished = start(tmp_path / "tree", "-j", "2")  # what the kills left is finished normally
    finished.communicate(timeout=300)
    assert all(path.read_bytes() == migrated[path] for path in originals)
    # Orphaned workers unwind on SIGTERM, so even a kill mid-write leaves no temporary file.
    assert list((tmp_path / "tree").rglob(f"*{TEMP_SUFFIX}")) == []


def test_two_concurrent_runs_on_one_tree_agree(tmp_path: Path) -> None:
    originals = make_tree(tmp_path / "tree", 60, functions=60)
    migrated = expected_outputs(tmp_path, originals)
    cache = tmp_path / "cache"
    command = [*NPU_MIGRATE, "--select", "NPU301", "--cache-dir", str(cache)]
    runs = [
        subprocess.Popen([*command, "-j", "1", str(tmp_path / "tree")], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for run in runs:
        _, errors = run.communicate(timeout=300)
        assert run.returncode in (0, 1), errors.decode()
    assert all(path.read_bytes() == migrated[path] for path in originals)
    assert list((tmp_path / "tree").rglob(f"*{TEMP_SUFFIX}")) == []
    check = run_command([*command, "--check", "-v", tmp_path / "tree"])
    assert check.returncode == 0, check.stdout + check.stderr
