"""A whole run: read each file once, answer from the cache, analyse each content once, act.

:func:`run` takes what :mod:`migrator.discovery` found and returns one :class:`Outcome` per
file, sorted by path whatever order the work finished in:

1. every file is read once here and hashed; the result cache answers unchanged contents;
2. files with identical contents (vendored copies, generated modules) and the same link facts
   form one group that is analysed once; each of its files still gets its own outcome, write,
   diff or copy;
3. groups are processed here, in path order, unless the work pays for worker processes
   (:mod:`migrator.pool`): each costs a fresh interpreter and the engine's imports before its
   first file. Without ``-j``, the run times its first files here and, from what they cost, the
   bytes and the number of files left, starts workers only when each gets several times its
   start-up worth of work (:func:`workers_worth`); a pre-commit hook's few files, or a small
   tree, never start one. ``-j N`` starts N (``-j 1``: none). Workers get the groups largest
   first, so that a big file does not finish last.

Per-file failures are outcomes with status ``error``; the file is then left byte-identical.
The layers below: discovery (:mod:`migrator.discovery`), files (:mod:`migrator.files`), the
cache (:mod:`migrator.cache`), the pool (:mod:`migrator.pool`), one file's bytes
(:mod:`migrator.engine`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from migrator.analysis.project import ProjectFacts
from migrator.cache import ResultCache, cache_key, content_digest, default_cache_dir
from migrator.discovery import Discovery, Excluder, discover
from migrator.engine import Engine
from migrator.files import TEMP_SUFFIX, copy_tree_entries, file_diff, unified_diff, write_atomic
from migrator.jobs import Job, Mode, Outcome, Task, error_outcome, reason_of
from migrator.notebooks import is_notebook, migrate_notebook
from migrator.project_stage import ProjectBuilder, read_native
from migrator.results import FileResult, Status
from migrator.shell import is_shell_script, scan_shell

__all__ = [
    "TEMP_SUFFIX",
    "Discovery",
    "Excluder",
    "Job",
    "Mode",
    "Outcome",
    "ResultCache",
    "RunResult",
    "Task",
    "cache_key",
    "default_cache_dir",
    "discover",
    "run",
    "unified_diff",
    "write_atomic",
]

# A worker that holds more than this after a file (a very large one) is replaced by a fresh one.
WORKER_MEMORY_LIMIT = 300 * 1024 * 1024
# What a worker process costs before its first file, in CPU seconds: a fresh interpreter that
# imports the engine and the rules (a clean file's --check costs about this much, see
# bench/bench_startup.py), and libcst when the run rewrites files. A worker is started only for
# WORK_PER_WORKER times that much work.
WORKER_START_CPU = {Mode.CHECK: 0.25, Mode.DIFF: 0.4, Mode.WRITE: 0.4, Mode.OUTPUT: 0.4}
WORK_PER_WORKER = 4.0
# The run times this much CPU of its own work before it decides (its first files, in path order).
PROBE_CPU = 0.1
# A file costs about this many bytes' worth of work besides its bytes (read, hash, decode,
# trigger search, outcome): the weight of many small files when the remaining work is estimated.
FILE_OVERHEAD_BYTES = 2048
# A project stage that made this process grow by more than this gives the memory back after.
RETURNED_AFTER = 64 * 1024 * 1024
# Sources read for the content groups stay in this process up to this total; past it a group's
# file is read again where it is processed (never are the whole tree's bytes held).
KEPT_SOURCES_BUDGET = 16 * 1024 * 1024


@dataclass
class RunResult:
    outcomes: list[Outcome]
    copied: int = 0  # --output: other files copied
    workers: int = 0  # worker processes the run used (0: everything ran in this process)


@dataclass(frozen=True)
class Member:
    """One file of a content group."""

    task: Task
    mode_bits: int


@dataclass
class Group:
    """Files with the same bytes and the same link facts: analysed once.

    ``source`` is dropped before the group goes to a worker process, which reads the first
    member again: the parent then never holds the whole tree's bytes, and they are not copied
    through the pipes. ``digest`` is the bytes' hash (to tell a file changed since it was
    read); ``key`` the result's, in the cache and among the groups: the bytes' hash and the
    hash of what the link stages found about the files (a vendored copy of a factory whose
    callers differ from the other copy's has a result of its own)."""

    source: bytes | None
    digest: str
    key: str
    size: int
    members: list[Member] = field(default_factory=list)


def run(
    discovery: Discovery,
    job: Job,
    jobs: int | None = None,
    cache: ResultCache | None = None,
    advance: Callable[[int], None] | None = None,
    *,
    max_workers: int | None = None,
) -> RunResult:
    """Process every task; outcomes come back sorted by path whatever the workers' order.

    ``jobs``: that many worker processes (1: none); None: as many as the work pays for, at most
    ``max_workers`` (default: the CPUs this process may use)."""
    outcomes = [*discovery.skipped, *discovery.problems]
    groups: dict[str, Group] = {}
    answered = 0
    kept = 0  # bytes of sources kept (see KEPT_SOURCES_BUDGET)
    summaries = cache.summaries() if cache is not None else None
    builder = ProjectBuilder(job.rules(), remembered=summaries.entries if summaries else {})
    read_files: list[_ReadFile] = []
    for task in discovery.tasks:
        read = _read(task)
        if isinstance(read, Outcome):
            outcomes.append(read)
            answered += 1
            continue
        source, mode_bits = read
        digest = content_digest(source, task.path)
        problem = _summarise(builder, task.path, source, digest)
        if problem is not None:
            outcomes.append(problem)
            answered += 1
            continue
        keep = kept + len(source) <= KEPT_SOURCES_BUDGET
        kept += len(source) if keep else 0
        read_files.append(_ReadFile(task, mode_bits, digest, len(source), source if keep else None))
    peak = _peak_memory()
    facts = _project_facts(builder, discovery.native, job)
    if _peak_memory() - peak > RETURNED_AFTER:
        _return_freed_memory()
    if summaries is not None:
        summaries.added.update(builder.learned)
        summaries.save()
    if facts:
        job = replace(job, settings=replace(job.settings, project=facts))
        cache = cache.narrowed(facts.digest) if cache is not None else None
    untouched = builder.left_untouched(facts)
    for read_file in read_files:
        task, digest = read_file.task, read_file.digest
        if task.path in untouched:
            outcomes.append(error_outcome(task.path, untouched[task.path]))
            answered += 1
            continue
        key = digest + facts.links_digest(task.path) if facts else digest
        hit = (
            cache.get(task.path, key, changed=job.mode is Mode.CHECK) if cache is not None else None
        )
        if hit is not None:
            outcomes.append(_act_on_hit(hit, read_file, job))
            answered += 1
            continue
        group = groups.setdefault(key, Group(read_file.source, digest, key, read_file.size))
        group.members.append(Member(task, read_file.mode_bits))
    del read_files
    if advance is not None and answered:
        advance(answered)
    execution = Execution(job, jobs, max_workers or available_cpus(), advance)
    for outcome in execution.process(list(groups.values())):
        outcomes.append(outcome)
        if cache is not None:
            cache.put(outcome)
    if cache is not None:
        cache.save()
    copied = 0
    if job.mode is Mode.OUTPUT:
        copied, failures = copy_tree_entries(discovery.copies, discovery.links)
        outcomes.extend(error_outcome(path, message) for path, message in failures)
    outcomes.sort(key=lambda outcome: outcome.path)
    return RunResult(outcomes, copied, execution.workers)


def _read(task: Task) -> tuple[bytes, int] | Outcome:
    try:
        with open(task.path, "rb") as stream:
            source = stream.read()
        return source, stat.S_IMODE(os.stat(task.path).st_mode)
    except OSError as error:
        return error_outcome(task.path, f"cannot read file: {error.strerror}")


@dataclass
class _ReadFile:
    """A file read and hashed, before the cache is asked (its key depends on every file)."""

    task: Task
    mode_bits: int
    digest: str
    size: int
    source: bytes | None  # None when workers will read it again


def _summarise(builder: ProjectBuilder, path: str, source: bytes, digest: str) -> Outcome | None:
    """Give one file to the project summaries; an error outcome when a rule fails on it."""
    if not builder.wanted or is_notebook(path) or is_shell_script(path):  # nothing imports them
        return None
    try:
        builder.add_python(path, source, digest)
    except Exception as error:  # a bug in one rule's summary costs one file, not the run
        message = f"internal error in a project summary, file left untouched: {error!r}"
        return error_outcome(path, message)
    return None


def _project_facts(builder: ProjectBuilder, native: Sequence[str], job: Job) -> ProjectFacts:
    """What every rule summarised, native sources included (those are only read here), and
    what the rules linked from it (files read again from disk, only those a link asks for)."""
    if builder.wanted:
        for path, text in read_native(list(native)):
            try:
                builder.add_native(path, text)
            except Exception:  # a bad scan costs that source's facts only
                continue
    return builder.build(job.settings)


def _peak_memory() -> int:
    """The most this process has held so far, in bytes (0 where the OS does not say)."""
    try:
        import resource
    except ImportError:  # not on a Unix
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux counts kilobytes


def _return_freed_memory() -> None:
    """Collect the cycles a project stage left, and hand the freed heap back to the OS (glibc
    keeps it otherwise): the memory a large link stage used is not held for the rest of the
    run, next to the workers'."""
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None).malloc_trim(0)


def _act_on_hit(hit: Outcome, read_file: _ReadFile, job: Job) -> Outcome:
    if job.mode is not Mode.OUTPUT:
        return hit
    task = read_file.task
    assert task.destination is not None
    source = read_file.source
    if source is None:
        read = _read(task)
        if isinstance(read, Outcome):
            return read
        source = read[0]
    if content_digest(source, task.path) != read_file.digest:
        return error_outcome(task.path, "the file changed during the run; run again")
    return _write_copy(hit, task.destination, source, read_file.mode_bits)


# -- processing --------------------------------------------------------------------------------


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def workers_worth(work: float, start: float, most: int) -> int:
    """How many worker processes ``work`` CPU seconds pay for, when each costs ``start`` CPU
    seconds before its first file: as many as get ``WORK_PER_WORKER`` times that each, at most
    ``most``; 0 (everything here) rather than one, which would only add its start-up."""
    count = min(most, int(work // (WORK_PER_WORKER * start)) if start > 0 else most)
    return count if count >= 2 else 0


@dataclass
class Execution:
    """Where the groups are processed: here, in worker processes, or here first and then in
    workers (see the module docstring)."""

    job: Job
    jobs: int | None  # -j; None: chosen from the work
    most: int  # the most workers a chosen execution starts
    advance: Callable[[int], None] | None
    workers: int = 0  # how many the run started
    start_cpu: float | None = None  # a worker's start-up (WORKER_START_CPU); tests lower it

    def process(self, groups: Sequence[Group]) -> Iterator[Outcome]:
        if self.jobs is not None:
            count = min(self.jobs, len(groups))
            if count >= 2:
                yield from self._in_workers(groups, count)
            else:
                yield from self._here(groups)
            return
        yield from self._chosen(list(groups))

    def _chosen(self, pending: list[Group]) -> Iterator[Outcome]:
        """Process groups here until PROBE_CPU is spent; then, if what is left pays for
        workers, hand it to them."""
        start = self.start_cpu if self.start_cpu is not None else WORKER_START_CPU[self.job.mode]
        engine = _engine_for(self.job)
        spent, done_weight = 0.0, 0
        while pending:
            if spent >= min(PROBE_CPU, start) and len(pending) >= 2:
                left = spent / done_weight * sum(_weight(group) for group in pending)
                count = workers_worth(left, start, min(self.most, len(pending)))
                if count:
                    yield from self._in_workers(pending, count)
                    return
                break  # what is left does not pay for workers, and only gets smaller
            group = pending.pop(0)
            modules, began = len(sys.modules), time.process_time()
            yield from self._one_here(group, engine)
            # A file that imported something (libcst, for the first rewrite) paid a one-time
            # cost that the files after it do not: it says nothing about their cost.
            if len(sys.modules) == modules:
                spent += time.process_time() - began
                done_weight += _weight(group)
        yield from self._here(pending, engine)

    def _here(self, groups: Sequence[Group], engine: Engine | None = None) -> Iterator[Outcome]:
        engine = engine or _engine_for(self.job)
        for group in groups:
            yield from self._one_here(group, engine)

    def _one_here(self, group: Group, engine: Engine) -> list[Outcome]:
        job = self.job
        with _time_limit(job.timeout) as expired:
            done = process_group(group, job, engine)
        if expired():
            from migrator.pool import TimedOut

            limit = TimedOut(job.timeout or 0).describe()
            message = f"internal error, file left untouched: {limit}"
            done = [error_outcome(m.task.path, message) for m in group.members]
        if self.advance is not None:
            self.advance(len(done))
        return done

    def _in_workers(self, groups: Sequence[Group], count: int) -> Iterator[Outcome]:
        from migrator.pool import TimedOut, WorkerDied, WorkerPool  # multiprocessing: only here

        self.workers = count
        # A worker reads its files again: their bytes do not travel through the pipes.
        largest_first = sorted(
            (replace(group, source=None) for group in groups),
            key=lambda group: group.size,
            reverse=True,
        )
        with WorkerPool[Group](
            count,
            _start_worker,
            self.job,
            _work,
            memory_limit=WORKER_MEMORY_LIMIT,
            timeout=self.job.timeout,
        ) as pool:
            for group, result in pool.run(largest_first):
                if isinstance(result, WorkerDied | TimedOut):
                    message = f"internal error, file left untouched: {result.describe()}"
                    result = [error_outcome(m.task.path, message) for m in group.members]
                yield from result
                if self.advance is not None:
                    self.advance(len(result))


def _weight(group: Group) -> int:
    return group.size + FILE_OVERHEAD_BYTES


class _Expired(BaseException):
    """The file's time is up (raised by the alarm; not an Exception, so no rule catches it)."""


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[Callable[[], bool]]:
    """Stop the work inside after ``seconds`` (in this process: an interval timer on the main
    thread; a long native call is stopped when it returns). Yields "did it expire?"."""
    fired = False
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if seconds is None or not usable:
        yield lambda: False
        return

    def expire(signum: int, frame: object) -> None:
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield lambda: fired
    except _Expired:
        fired = True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _engine_for(job: Job) -> Engine:
    """The engine for the job's rules, in a process about to work on files: what is alive
    now (modules, rules, tables) lives as long as the process, and the cyclic garbage collector
    stops looking at it (it would scan it again in every full collection between files)."""
    engine = Engine(job.rules(), job.settings)
    gc.freeze()
    return engine


def process_group(group: Group, job: Job, engine: Engine) -> list[Outcome]:
    """Migrate one content and act on it for each file that has it. Never raises."""
    first = group.members[0].task.path
    source = group.source if group.source is not None else _reread(group)
    if isinstance(source, str):
        return [error_outcome(m.task.path, source) for m in group.members]
    try:
        result = _migrate(engine, source, first, apply=job.mode is not Mode.CHECK)
    except Exception as error:  # a failure on one file must not stop the run
        message = f"internal error: {type(error).__name__}: {error}"
        return [error_outcome(m.task.path, message) for m in group.members]
    outcomes = []
    for member in group.members:
        try:
            outcomes.append(_act(member, result, group.key, job))
        except Exception as error:
            message = f"internal error: {type(error).__name__}: {error}"
            outcomes.append(error_outcome(member.task.path, message))
    return outcomes


def _migrate(engine: Engine, source: bytes, path: str, apply: bool) -> FileResult:
    """One content through the engine; a notebook's code cells as one module."""
    if is_notebook(path):
        return migrate_notebook(engine, source, path, apply=apply)
    if is_shell_script(path):  # only reported on, never rewritten
        return scan_shell(source, path, engine.shell_rules)
    return engine.migrate(source, path, apply=apply)


def _reread(group: Group) -> bytes | str:
    """The group's content read again (in a worker), or why it cannot be used."""
    path = group.members[0].task.path
    try:
        with open(path, "rb") as stream:
            source = stream.read()
    except OSError as error:
        return f"cannot read file: {error.strerror}"
    if content_digest(source, path) != group.digest:
        return "the file changed while npu-migrate was running: left as it is; run again"
    return source


def _act(member: Member, result: FileResult, digest: str, job: Job) -> Outcome:
    """What ``job.mode`` does with ``result`` for one file: write, diff, copy or report."""
    task = member.task
    diagnostics = [replace(d, path=task.path) for d in result.diagnostics]
    outcome = Outcome(task.path, result.status, diagnostics)
    outcome.reason = reason_of(result.status, diagnostics)
    if result.status is not Status.CHANGED or job.mode is Mode.CHECK:
        # Unchanged, skipped, or an engine error (syntax, decoding, a rule's internal error):
        # all facts about this content under these rules, so they may be cached. So is a
        # changed file's answer in --check, which writes and shows no bytes.
        outcome.digest = digest
    if job.mode is Mode.OUTPUT:
        assert task.destination is not None
        return _write_copy(outcome, task.destination, result.migrated, member.mode_bits)
    if result.status is not Status.CHANGED:
        return outcome
    if job.mode is Mode.DIFF:
        outcome.diff = file_diff(task.path, result.original, result.migrated)
    elif job.mode is Mode.WRITE:
        if not _writable(task.path, member.mode_bits):
            return error_outcome(task.path, "the file is read-only: not rewritten")
        try:
            write_atomic(task.path, result.migrated, member.mode_bits)
        except OSError as error:
            return error_outcome(task.path, f"cannot write file: {error}")
    return outcome


def _write_copy(outcome: Outcome, destination: str, data: bytes, mode_bits: int) -> Outcome:
    try:
        os.makedirs(os.path.dirname(destination) or ".", exist_ok=True)
        write_atomic(destination, data, mode_bits)
    except OSError as error:
        return error_outcome(outcome.path, f"cannot write {destination}: {error}")
    return outcome


def _writable(path: str, mode_bits: int) -> bool:
    # Root may write anything; the mode bits still say the owner wants the file left alone.
    return bool(mode_bits & 0o222) and os.access(path, os.W_OK)


# -- the worker side -----------------------------------------------------------------------------

_worker_job: Job | None = None
_worker_engine: Engine | None = None


def _start_worker(job: Job) -> None:
    global _worker_job, _worker_engine
    _worker_job = job
    _worker_engine = _engine_for(job)


def _work(group: Group) -> list[Outcome]:
    assert _worker_job is not None and _worker_engine is not None, "worker not initialised"
    return process_group(group, _worker_job, _worker_engine)
