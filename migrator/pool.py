"""Worker processes that never outlive the run, and a run that survives its workers.

``concurrent.futures.ProcessPoolExecutor`` fails a whole run with ``BrokenProcessPool`` when one
worker dies (the out-of-memory killer, a signal), cannot tell which task killed it, leaves its
workers running when the parent is killed, and keeps a worker's memory for the whole run. This
pool sends one task at a time to each worker over its own pipe, so the parent always knows what
each worker is doing:

- a worker that dies takes only its current task with it: that task comes back as
  :class:`WorkerDied`, a fresh worker takes its place, and the run goes on;
- a worker whose resident memory has grown past ``memory_limit`` after a task (one huge file)
  retires and is replaced, so a large file does not pin memory for the rest of the run;
- a worker exits within a second when its parent goes away, however it went, and a worker
  still starting as soon as its interpreter is up (a tenth of a second on an idle machine,
  more on a loaded one): on Linux the kernel sends it SIGTERM (``PR_SET_PDEATHSIG``);
  everywhere, a thread waiting on a pipe that only the parent holds open wakes up when the
  parent's end closes and ends the process. Both are armed before the worker imports the code
  it runs (the set-up and work functions travel by name, the payload as bytes), so a parent
  killed during that second of imports is noticed at once. SIGTERM unwinds the worker, so a
  write it was in the middle of removes its temporary file, then ends it without the
  interpreter's finalization (seconds, with a large heap on a loaded machine); a worker stuck
  in a long native call is ended half a second later regardless;
- workers ignore Ctrl-C (the terminal sends it to the whole process group): the parent decides,
  and on any exception (Ctrl-C included) ends its workers before it lets the exception go on
  (SIGTERM first, on which a worker unwinds and removes a half-written temporary file).

Workers are started with the ``spawn`` method: the same behaviour on every OS, no inherited
state.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

TaskT = TypeVar("TaskT")

# Worker set-up and work: ``setup(payload)`` once per worker, then ``work(task)`` per task.
# Both must be importable module-level functions: they travel to the worker by name.
Setup = Callable[[Any], None]
Work = Callable[[Any], Any]

_STOP = None  # sent instead of a task: exit cleanly
_RETIRING = "retiring"  # sent by a worker that leaves after its last result


@dataclass(frozen=True)
class WorkerDied:
    """The worker that processed a task ended without answering."""

    exitcode: int | None

    def describe(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            cause = " (killed; out of memory?)" if name == "SIGKILL" else ""
            return f"the worker process handling it was ended by {name}{cause}"
        return f"the worker process handling it exited with status {code}"


@dataclass(frozen=True)
class TimedOut:
    """The task ran longer than the pool's time limit; its worker was stopped."""

    seconds: float

    def describe(self) -> str:
        return f"it took longer than {self.seconds:g} s, the time limit for one file"


@dataclass
class _Worker:
    process: Any  # multiprocessing.Process (spawn context)
    tasks: Connection  # parent's end: send tasks, receive results
    task: Any = None  # the task being processed, if any
    busy: bool = False
    started: float = 0.0  # time.monotonic() when the task was sent


class WorkerPool(Generic[TaskT]):
    """At most ``size`` workers; use as a context manager around :meth:`run`."""

    def __init__(
        self,
        size: int,
        setup: Setup,
        payload: Any,
        work: Work,
        *,
        memory_limit: int | None = None,
        timeout: float | None = None,
    ) -> None:
        self.size = size
        self.timeout = timeout
        self.setup = _name_of(setup)
        self.payload = pickle.dumps(payload)
        self.work = _name_of(work)
        self.memory_limit = memory_limit
        self.context = multiprocessing.get_context("spawn")
        # The parent keeps the writing end of this pipe and never writes: its closing (the
        # parent exiting, however) is what tells every worker to stop.
        self.lifeline_reader, self.lifeline_writer = self.context.Pipe(duplex=False)
        self.workers: list[_Worker] = []

    def __enter__(self) -> WorkerPool[TaskT]:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if kind is None:
            self.close()
        else:
            self.kill()

    # -- running ---------------------------------------------------------------------------------

    def run(self, tasks: Iterable[TaskT]) -> Iterator[tuple[TaskT, Any]]:
        """Yield ``(task, result)`` as results arrive; ``result`` is a :class:`WorkerDied` for a
        task whose worker died on it, a :class:`TimedOut` for one that ran past the time limit
        (its worker is killed and replaced)."""
        pending = iter(tasks)
        exhausted = False
        while True:
            while not exhausted and self._idle() is not None:
                task = next(pending, _STOP)
                if task is _STOP:
                    exhausted = True
                    break
                self._send(self._idle(), task)  # type: ignore[arg-type]
            busy = [w for w in self.workers if w.busy]
            if not busy:
                return
            ready = wait(
                [w.tasks for w in busy] + [w.process.sentinel for w in busy],
                timeout=self._until_first_deadline(busy),
            )
            for worker in busy:
                if worker.tasks in ready or worker.process.sentinel in ready:
                    outcome = self._collect(worker)
                    if outcome is not None:
                        yield outcome
                elif self._overdue(worker):
                    yield self._stop_overdue(worker)

    def _until_first_deadline(self, busy: list[_Worker]) -> float | None:
        if self.timeout is None:
            return None
        first = min(worker.started for worker in busy) + self.timeout
        return max(0.0, first - time.monotonic())

    def _overdue(self, worker: _Worker) -> bool:
        return self.timeout is not None and time.monotonic() - worker.started >= self.timeout

    def _stop_overdue(self, worker: _Worker) -> tuple[TaskT, Any]:
        task = worker.task
        with contextlib.suppress(OSError):
            worker.process.kill()
        worker.process.join(1)
        self._discard(worker)
        assert self.timeout is not None
        return task, TimedOut(self.timeout)

    def _idle(self) -> _Worker | None:
        for worker in self.workers:
            if not worker.busy:
                return worker
        if len(self.workers) < self.size:
            return self._start()
        return None

    def _send(self, worker: _Worker, task: TaskT) -> None:
        worker.task, worker.busy, worker.started = task, True, time.monotonic()
        with contextlib.suppress(OSError):  # it died meanwhile: _collect reports it
            worker.tasks.send(task)

    def _collect(self, worker: _Worker) -> tuple[TaskT, Any] | None:
        """The worker's answer, or its death; replaces a worker that is gone."""
        task = worker.task
        try:
            message = worker.tasks.recv() if worker.tasks.poll() else None
        except (EOFError, OSError):
            message = None
        if message is None:
            worker.process.join(1)
            self._discard(worker)
            return task, WorkerDied(worker.process.exitcode)
        retiring, result = message
        worker.task, worker.busy = None, False
        if retiring == _RETIRING:
            worker.process.join(5)
            self._discard(worker)
        return task, result

    def _start(self) -> _Worker:
        parent_end, child_end = self.context.Pipe()
        process = self.context.Process(
            target=_worker_main,
            args=(
                child_end,
                self.lifeline_reader,
                os.getpid(),
                self.setup,
                self.payload,
                self.work,
                self.memory_limit,
            ),
            daemon=True,
        )
        with _interrupts_held():
            process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        self.workers.append(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        with contextlib.suppress(OSError):
            worker.tasks.close()
        self.workers.remove(worker)

    # -- ending ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Ask every worker to stop and wait for it (the normal end of a run)."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.tasks.send(_STOP)
        for worker in self.workers:
            worker.process.join(5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(1)
        self._release()

    def kill(self) -> None:
        """End every worker now (an interrupted or failed run): SIGTERM, which lets a worker
        remove the temporary file of a write it is in the middle of, then SIGKILL."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.process.terminate()
        deadline = time.monotonic() + 0.5
        for worker in self.workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.process.is_alive():
                with contextlib.suppress(OSError):
                    worker.process.kill()
                worker.process.join(1)
        self._release()

    def _release(self) -> None:
        for worker in list(self.workers):
            self._discard(worker)
        for end in (self.lifeline_reader, self.lifeline_writer):
            with contextlib.suppress(OSError):
                end.close()


# -- the worker side -------------------------------------------------------------------------------


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Start a worker with Ctrl-C blocked from its first instruction: the signal mask is
    inherited across fork and exec, and the worker unblocks it only once it ignores Ctrl-C (a
    worker still importing would otherwise print a ``KeyboardInterrupt`` traceback). Blocked,
    not ignored, in this process: a Ctrl-C that comes while a worker starts is delivered here
    as soon as the start is over, instead of being lost."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_main(
    tasks: Connection,
    lifeline: Connection,
    parent: int,
    setup: str,
    payload: bytes,
    work: str,
    memory_limit: int | None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held since the start
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    try:
        _die_with_parent(parent, lifeline)
        # Only now the imports of the code that runs (a second or more on a loaded machine).
        _resolve(setup)(pickle.loads(payload))
        _serve(tasks, _resolve(work), memory_limit)
    except BaseException as error:
        stop = _termination_in(error)
        if stop is None:
            raise
        # Unwound (a write in progress removed its temporary file); the interpreter's
        # finalization would only free the heap, which the OS does at once.
        os._exit(stop.code)
    finally:
        # Done serving: a SIGTERM from here on (while multiprocessing finishes the process)
        # ends it at once, with nothing raised where no handler of ours catches it.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _termination_in(error: BaseException) -> _Terminated | None:
    """The SIGTERM behind ``error``: itself, or the exception Python wrapped it in (in Python
    3.11 one raised in ``__set_name__`` while a class is created, say during an import, comes
    out as a RuntimeError whose cause it is)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, _Terminated):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _serve(tasks: Connection, work: Work, memory_limit: int | None) -> None:
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):
            return
        if task is _STOP:
            return
        result = work(task)
        retiring = memory_limit is not None and resident_memory() > memory_limit
        tasks.send((_RETIRING if retiring else "", result))
        if retiring:
            return


def _name_of(function: Callable[..., Any]) -> str:
    name = f"{function.__module__}:{function.__qualname__}"
    if "<" in name or _resolve(name) is not function:
        raise ValueError(f"{name} is not reachable by its name: pass a module-level function")
    return name


def _resolve(name: str) -> Any:
    module, _, path = name.partition(":")
    value: Any = importlib.import_module(module)
    for attribute in path.split("."):
        value = getattr(value, attribute)
    return value


class _Terminated(BaseException):
    """SIGTERM in a worker: unwind like ``SystemExit``, then exit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _exit_on_terminate(signum: int, frame: object) -> None:
    # One unwinding, whoever sends the next SIGTERM (the parent's kill, its death signal, the
    # lifeline thread when the parent's end closes): a second _Terminated raised while the
    # first is handled would escape the worker as a traceback on the stderr it shares with the
    # parent (the Ctrl-C interrupt test saw its first line, cut short by the parent's SIGKILL).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated(128 + signum)  # unwinds: an atomic write removes its temporary file


def _die_with_parent(parent: int, lifeline: Connection) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM, which unwinds
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            lifeline.recv()  # nothing is ever sent: this returns when the parent's end closes
        os.kill(os.getpid(), signal.SIGTERM)  # unwind (a write in progress removes its file)
        time.sleep(0.5)
        os._exit(1)  # still here: stuck in a long native call

    threading.Thread(target=watch, name="npu-migrate-lifeline", daemon=True).start()


def resident_memory() -> int:
    """This process's resident set size in bytes (0 where the OS does not say)."""
    try:
        with open("/proc/self/statm") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
