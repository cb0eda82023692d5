"""migrator.pool with real processes: dead workers, recycled workers, orphaned workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from migrator.pool import TimedOut, WorkerDied, WorkerPool

HOLD: list[bytes] = []


def setup(payload: object) -> None:
    pass


def work(task: str) -> tuple[str, int]:
    """``die``: the worker kills itself; ``big``: it keeps 64 MB; anything else: its pid."""
    if task == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if task == "big":
        HOLD.append(b"x" * (64 * 1024 * 1024))
    if task == "sleep":
        time.sleep(60)
    return task, os.getpid()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent has not reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def test_every_task_comes_back_once() -> None:
    tasks = [f"t{i}" for i in range(20)]
    with WorkerPool[str](2, setup, None, work) as pool:
        results = dict(pool.run(tasks))
    assert sorted(results) == sorted(tasks)
    assert all(isinstance(result, tuple) and result[0] == task for task, result in results.items())


def test_a_dead_worker_costs_only_its_task_and_is_replaced() -> None:
    tasks = ["a", "b", "die", "c", "d", "e"]
    with WorkerPool[str](2, setup, None, work) as pool:
        results = dict(pool.run(tasks))
    assert sorted(results) == sorted(tasks)
    died = results["die"]
    assert isinstance(died, WorkerDied) and died.exitcode == -signal.SIGKILL
    assert "SIGKILL" in died.describe()
    assert all(not isinstance(results[t], WorkerDied) for t in tasks if t != "die")


def test_a_worker_over_its_memory_limit_is_replaced_after_its_task() -> None:
    with WorkerPool[str](1, setup, None, work, memory_limit=48 * 1024 * 1024) as pool:
        results = list(pool.run(["before", "big", "after"]))
    pids = {task: result[1] for task, result in results}
    assert pids["before"] == pids["big"] != pids["after"]


def test_an_exception_in_the_parent_kills_the_workers() -> None:
    pids: list[int] = []
    with pytest.raises(KeyboardInterrupt), WorkerPool[str](2, setup, None, work) as pool:
        for _, result in pool.run(["a", "b", "sleep", "c"]):
            pids.append(result[1])
            if len(pids) == 2:
                raise KeyboardInterrupt
    assert pids and wait_gone(pids, 1.0) == []


def test_workers_die_with_a_parent_killed_without_warning(tmp_path: Path) -> None:
    """SIGKILL leaves the parent no chance to clean up: the workers go by themselves."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from migrator.pool import WorkerPool
        import test_pool
        pool = WorkerPool(2, test_pool.setup, None, test_pool.work)
        for task, (_, pid) in pool.run(["a", "b"]):
            print(pid, flush=True)
        for _ in pool.run(["sleep", "sleep"]):
            pass
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(parent.stdout.readline()), int(parent.stdout.readline())]
    time.sleep(0.5)  # both workers are now asleep in their tasks
    assert all(alive(pid) for pid in set(pids))
    parent.kill()
    parent.wait()
    assert wait_gone(pids, 1.0) == []


def spawned_children(pid: int) -> list[int]:
    """The pool workers among ``pid``'s children (not multiprocessing's resource tracker)."""
    found = []
    with open(f"/proc/{pid}/task/{pid}/children") as stream:
        for child in stream.read().split():
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"spawn_main" in cmdline.read():
                    found.append(int(child))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_parent_killed_while_they_import_their_code(tmp_path: Path) -> None:
    """A worker imports the code it runs after it has armed its death watch: importing the
    migrator takes a second or more on a loaded machine, and a parent killed meanwhile must
    not leave its workers behind for that long. Here the import takes 30 seconds."""
    (tmp_path / "slow_import.py").write_text(
        "import os, time\n"
        "if os.environ.get('SLOW_IMPORT'):\n"
        "    time.sleep(30)\n"
        "def setup(payload):\n"
        "    pass\n"
        "def work(task):\n"
        "    return task\n"
    )
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from migrator.pool import WorkerPool
        import slow_import
        os.environ["SLOW_IMPORT"] = "1"  # in the workers only
        pool = WorkerPool(2, slow_import.setup, None, slow_import.work)
        for _ in pool.run(["a", "b"]):
            pass
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    workers: list[int] = []
    while len(workers) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
        workers = spawned_children(parent.pid)
    try:
        assert len(workers) == 2
        time.sleep(1.0)  # both are well into the slow import
        assert all(alive(pid) for pid in workers)
        parent.kill()
        parent.wait()
        assert wait_gone(workers, 1.0) == []
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_name_that_does_not_lead_back_to_the_function_is_refused() -> None:
    def local(payload: object) -> None:
        pass

    with pytest.raises(ValueError, match="module-level function"):
        WorkerPool[str](1, local, None, work)


def test_a_task_past_the_time_limit_is_stopped_and_reported() -> None:
    # 5 s, not less: on a loaded 2-core machine a worker's start and a quick task have taken
    # over a second (the sleeping task needs 60 s).
    with WorkerPool[str](2, setup, None, work, timeout=5.0) as pool:
        started = time.monotonic()
        results = dict(pool.run(["a", "sleep", "b", "c"]))
    assert time.monotonic() - started < 30
    assert isinstance(results["sleep"], TimedOut) and "5 s" in results["sleep"].describe()
    assert all(isinstance(results[t], tuple) for t in "abc")


def test_a_ctrl_c_while_a_worker_starts_is_delivered_once_it_has_started() -> None:
    """Ctrl-C is held (blocked), not ignored, while a worker starts: it must not be lost. Run
    in a fresh single-threaded interpreter: with other threads in the process (pytest-xdist's),
    the kernel may hand the signal to one of them, and Python then raises at once."""
    script = textwrap.dedent(
        """
        import os, signal, time
        from migrator.pool import _interrupts_held
        signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever this test inherited
        reached = False
        try:
            with _interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # held: nothing is raised inside
                reached = True
        except KeyboardInterrupt:
            print("delivered after the start" if reached else "delivered during the start")
        else:
            print("lost")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "delivered after the start", result.stderr


def test_a_sigterm_raised_while_a_class_is_created_still_ends_the_worker_quietly() -> None:
    # A worker terminated during its imports: the handler's exception raised inside a
    # descriptor's __set_name__ comes out of class creation wrapped in a RuntimeError (Python
    # 3.11), which the worker must still read as its SIGTERM (CI saw a 39-line traceback).
    from migrator.pool import _Terminated, _termination_in

    class Hook:
        def __set_name__(self, owner: type, name: str) -> None:
            raise _Terminated(143)

    with pytest.raises(BaseException) as caught:
        type("Created", (), {"hook": Hook()})
    stop = _termination_in(caught.value)
    assert stop is not None and stop.code == 143
    assert _termination_in(ValueError("unrelated")) is None


def test_a_second_sigterm_while_the_first_unwinds_raises_nothing() -> None:
    """The parent's kill, the parent-death signal and the lifeline thread may each send SIGTERM:
    only the first unwinds the worker. A second one raised inside the worker's handler of the
    first would escape it as a traceback on the shared stderr (seen cut short in the Ctrl-C
    interrupt test). Run in a fresh interpreter: the handler changes process-wide state."""
    script = textwrap.dedent(
        """
        import os, signal, time
        from migrator.pool import _Terminated, _exit_on_terminate
        signal.signal(signal.SIGTERM, _exit_on_terminate)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
            print("not delivered")
        except _Terminated as stop:
            os.kill(os.getpid(), signal.SIGTERM)  # while the first is being handled
            time.sleep(0.05)
            print("one unwinding", stop.code)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "one unwinding 143", result.stderr
    assert result.stderr == ""
