"""Everything that touches files: discovery, reading, the result cache, parallel runs, writing.

One run is: :func:`discover` turns the command-line paths into :class:`Task` s (Python files) and
the other files a ``--output`` copy needs; :func:`run` answers what it can from the cache, sends
the rest through :func:`process` (in a spawn-safe process pool when there is enough work) and
returns one :class:`Outcome` per file, sorted by path whatever order the workers finished in.

Per-file failures are outcomes with status ``error``; the file is then left byte-identical.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import fnmatch
import hashlib
import importlib
import json
import math
import multiprocessing
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import migrator
from migrator.diagnostics import Diagnostic, Severity
from migrator.engine import ERROR_CODE, Status, decode, migrate_source
from migrator.registry import all_rules, select_rules
from migrator.rule import Rule, Settings

PYTHON_SUFFIXES = (".py", ".pyi")
# Folders never walked into unless named on the command line (a venv is also recognised by its
# pyvenv.cfg, whatever its name).
DEFAULT_EXCLUDED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".eggs",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "site-packages",
        "build",
        "dist",
        "node_modules",
    }
)
# Below this many files per worker a process pool costs more than it saves.
FILES_PER_WORKER = 8
TEMP_SUFFIX = ".npu-migrate-tmp"
# `git ls-files` arguments listing untracked ignored paths; `--directory` lists a wholly ignored
# folder once instead of every file in it.
IGNORED_LISTING = ("--others", "--ignored", "--exclude-standard", "--directory")


class Mode(enum.StrEnum):
    WRITE = "write"  # rewrite in place
    DIFF = "diff"  # write nothing, produce diffs
    CHECK = "check"  # write nothing, list what is left to do
    OUTPUT = "output"  # write a migrated copy of the tree elsewhere


@dataclass(frozen=True)
class Task:
    """One Python file to process. ``path`` is both what is read and what is shown."""

    path: str
    destination: str | None = None  # --output: where the migrated copy goes


@dataclass
class Outcome:
    """What happened to one file; small and picklable, so workers can send it back."""

    path: str
    status: Status
    diagnostics: list[Diagnostic] = field(default_factory=list)
    reason: str | None = None  # why a file was skipped or failed
    diff: str | None = None  # --diff only
    digest: str | None = None  # content hash, set when the outcome may be cached
    cached: bool = False

    @property
    def edits(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.FIXED]

    @property
    def findings(self) -> list[Diagnostic]:
        """Manual and info diagnostics: what a person should read."""
        return [d for d in self.diagnostics if d.severity in (Severity.MANUAL, Severity.INFO)]


@dataclass(frozen=True)
class Job:
    """What every worker needs to know; sent once per worker."""

    mode: Mode
    codes: tuple[str, ...]
    settings: Settings

    def rules(self) -> tuple[type[Rule], ...]:
        return select_rules(all_rules(), self.codes) if self.codes else ()


@dataclass
class Discovery:
    tasks: list[Task] = field(default_factory=list)
    skipped: list[Outcome] = field(default_factory=list)  # symlinks not followed
    problems: list[Outcome] = field(default_factory=list)  # unreadable folders
    copies: list[tuple[str, str]] = field(default_factory=list)  # --output: other files
    links: list[tuple[str, str]] = field(default_factory=list)  # --output: (link, target)


# -- discovery -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Excluder:
    """``--exclude`` / ``exclude`` globs, the default folders and what ``.gitignore`` ignores.

    A pattern without ``/`` matches a file or folder name anywhere (``*_pb2.py``, ``tests``); a
    pattern with ``/`` matches the path relative to the project folder (``src/generated/*``).
    """

    patterns: tuple[str, ...]
    project_root: Path
    use_gitignore: bool = True

    def by_pattern(self, real_path: str, name: str) -> bool:
        relative: str | None = None
        for pattern in self.patterns:
            if "/" not in pattern.rstrip("/"):
                if fnmatch.fnmatchcase(name, pattern.rstrip("/")):
                    return True
                continue
            if relative is None:
                relative = _relative_posix(real_path, self.project_root)
            if relative is not None and fnmatch.fnmatchcase(relative, pattern.strip("/")):
                return True
        return False


def _relative_posix(path: str, root: Path) -> str | None:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return None


def discover(
    arguments: Sequence[str],
    excluder: Excluder,
    output_dir: Path | None = None,
    output_base: Path | None = None,
) -> Discovery:
    """Expand the command-line paths (files and folders, recursively) into tasks.

    A file named on the command line is always processed unless an exclude pattern matches it;
    default folders and ``.gitignore`` only apply while walking folders. Symlinks are never
    followed while walking (their targets inside the tree are processed at their real paths) and
    a symlink named on the command line is skipped: nothing is ever written through a link.
    """
    found = Discovery()
    roots = [os.path.realpath(a) for a in arguments if os.path.isdir(a)]
    seen: set[str] = set()

    def destination(real_path: str) -> str | None:
        if output_dir is None or output_base is None:
            return None
        return str(output_dir / os.path.relpath(real_path, output_base))

    def add_file(shown: str, real_path: str) -> None:
        if real_path not in seen:  # overlapping arguments name some files twice
            seen.add(real_path)
            found.tasks.append(Task(shown, destination(real_path)))

    for argument in arguments:
        if os.path.islink(argument) and not os.path.isdir(argument):
            found.skipped.append(
                Outcome(argument, Status.SKIPPED, reason="a symlink; pass the file it points to")
            )
            continue
        if not os.path.isdir(argument):
            real_path = os.path.realpath(argument)
            if not excluder.by_pattern(real_path, os.path.basename(real_path)):
                add_file(argument, real_path)
            continue
        ignored = git_ignored(os.path.realpath(argument)) if excluder.use_gitignore else None
        for shown, real_path, kind in _walk(argument, excluder, ignored, roots, found):
            if kind == "link":
                if output_dir is not None:
                    found.links.append((real_path, str(destination(real_path))))
            elif shown.endswith(PYTHON_SUFFIXES):
                add_file(shown, real_path)
            elif output_dir is not None:
                found.copies.append((real_path, str(destination(real_path))))
    found.tasks.sort(key=lambda task: task.path)
    return found


def _walk(
    argument: str,
    excluder: Excluder,
    ignored: frozenset[str] | None,
    roots: Sequence[str],
    found: Discovery,
) -> Iterator[tuple[str, str, str]]:
    """Yield ``(shown path, real path, "file" | "link")`` under one folder, in sorted order.

    ``"link"`` entries are symlinks that point inside the tree; they are yielded so that
    ``--output`` can recreate them, and are otherwise ignored. Links pointing outside are skipped.
    """
    real_root = os.path.realpath(argument)
    pending = [(argument, real_root)]
    while pending:
        shown_dir, real_dir = pending.pop()
        try:
            entries = sorted(os.scandir(real_dir), key=lambda entry: entry.name)
        except OSError as error:
            found.problems.append(_error(shown_dir, f"cannot read folder: {error.strerror}"))
            continue
        subfolders = []
        for entry in entries:
            shown = os.path.join(shown_dir, entry.name)
            real_path = os.path.join(real_dir, entry.name)
            if excluder.by_pattern(real_path, entry.name):
                continue
            if ignored is not None and real_path in ignored:
                continue
            if entry.is_symlink():
                yield from _symlink(shown, real_path, roots, found)
                continue
            if entry.is_dir():
                if entry.name not in DEFAULT_EXCLUDED_DIRS and not _is_venv(real_path):
                    subfolders.append((shown, real_path))
            elif entry.is_file():
                yield shown, real_path, "file"
        pending.extend(reversed(subfolders))  # depth first, alphabetical


def _symlink(
    shown: str, real_path: str, roots: Sequence[str], found: Discovery
) -> Iterator[tuple[str, str, str]]:
    target = os.path.realpath(real_path)
    inside = any(target == root or target.startswith(root + os.sep) for root in roots)
    if inside:
        yield shown, real_path, "link"
    elif shown.endswith(PYTHON_SUFFIXES) or os.path.isdir(real_path):
        found.skipped.append(
            Outcome(
                shown,
                Status.SKIPPED,
                reason=f"a symlink to {target}, outside the tree: not followed",
            )
        )


def _is_venv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))


def git_ignored(folder: str) -> frozenset[str] | None:
    """Real paths that git ignores in the repository holding ``folder`` (None: not in one)."""
    try:
        top = subprocess.run(
            ["git", "-C", folder, "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        listing = subprocess.run(
            [*("git", "-C", top, "ls-files", "-z"), *IGNORED_LISTING],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    top = os.path.realpath(top)
    names = listing.decode("utf-8", "surrogateescape").split("\0")
    return frozenset(os.path.join(top, name.rstrip("/")) for name in names if name)


# -- processing one file -------------------------------------------------------------------------


def content_digest(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()


def process(task: Task, job: Job, rules: Sequence[type[Rule]] | None = None) -> Outcome:
    """Read, migrate and (by mode) write or diff one file. Never raises for a file's problem."""
    try:
        return _process(task, job, job.rules() if rules is None else rules)
    except Exception as error:  # a failure on one file must not stop the run
        return _error(task.path, f"internal error: {type(error).__name__}: {error}")


def _process(task: Task, job: Job, rules: Sequence[type[Rule]]) -> Outcome:
    try:
        with open(task.path, "rb") as stream:
            source = stream.read()
        mode_bits = stat.S_IMODE(os.stat(task.path).st_mode)
    except OSError as error:
        return _error(task.path, f"cannot read file: {error.strerror}")
    result = migrate_source(source, task.path, rules, job.settings)
    outcome = Outcome(task.path, result.status, result.diagnostics)
    outcome.reason = reason_of(result.status, result.diagnostics)
    if result.status is not Status.CHANGED:
        # Unchanged, skipped, or an engine error (syntax, decoding, a rule's internal error):
        # all facts about this content under these rules, so they may be cached.
        outcome.digest = content_digest(source)

    if job.mode is Mode.OUTPUT:
        assert task.destination is not None
        return _write_copy(outcome, task.destination, result.migrated, mode_bits)
    if result.status is not Status.CHANGED:
        return outcome
    if job.mode is Mode.DIFF:
        outcome.diff = unified_diff(task.path, source, result.migrated)
    elif job.mode is Mode.WRITE:
        if not _writable(task.path, mode_bits):
            return _error(task.path, "the file is read-only: not rewritten")
        try:
            write_atomic(task.path, result.migrated, mode_bits)
        except OSError as error:
            return _error(task.path, f"cannot write file: {error}")
    return outcome


def reason_of(status: Status, diagnostics: list[Diagnostic]) -> str | None:
    if status is Status.SKIPPED:
        return "`# npu-migrate: skip-file`"
    if status is Status.ERROR:
        return diagnostics[0].message if diagnostics else "error"
    return None


def _write_copy(outcome: Outcome, destination: str, data: bytes, mode_bits: int) -> Outcome:
    try:
        os.makedirs(os.path.dirname(destination) or ".", exist_ok=True)
        write_atomic(destination, data, mode_bits)
    except OSError as error:
        return _error(outcome.path, f"cannot write {destination}: {error}")
    return outcome


def _writable(path: str, mode_bits: int) -> bool:
    # Root may write anything; the mode bits still say the owner wants the file left alone.
    return bool(mode_bits & 0o222) and os.access(path, os.W_OK)


def _error(path: str, message: str) -> Outcome:
    """A failed file. Its rule diagnostics are dropped: nothing they describe happened."""
    error = Diagnostic(path, 1, 1, ERROR_CODE, Severity.ERROR, message)
    return Outcome(path, Status.ERROR, [error], reason=message)


def write_atomic(path: str, data: bytes, mode_bits: int) -> None:
    """Replace ``path`` by ``data`` through a temporary file in the same folder and a rename.

    A reader, or a run killed at any moment, sees the old file or the new one, never a part of
    one. Replacing the directory entry also means a symlink at ``path`` is replaced, not written
    through.
    """
    folder, name = os.path.split(path)
    descriptor, temporary = tempfile.mkstemp(
        dir=folder or ".", prefix=f".{name}.", suffix=TEMP_SUFFIX
    )
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode_bits)
        os.replace(temporary, path)
    except BaseException:  # KeyboardInterrupt included: never leave the temporary file behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def unified_diff(path: str, before: bytes, after: bytes) -> str:
    """A unified diff that ``patch -p0`` applies; marks a missing final newline as diff does."""
    lines = difflib.unified_diff(
        decode(before).splitlines(keepends=True),
        decode(after).splitlines(keepends=True),
        fromfile=path,
        tofile=path,
    )
    out = []
    for line in lines:
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


# -- the result cache ----------------------------------------------------------------------------


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npu-migrate"


def source_fingerprint() -> str:
    """A hash of the migrator's own code, so that editing a rule invalidates the cache even
    between two releases with the same version number."""
    digest = hashlib.sha256(migrator.__version__.encode())
    rules_package = importlib.import_module("migrator.rules")
    for folder in sorted({Path(migrator.__file__).parent, *map(Path, rules_package.__path__)}):
        for source in sorted(folder.glob("*.py")):
            digest.update(source.name.encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def cache_key(job: Job) -> str:
    settings = {
        "fingerprint": source_fingerprint(),
        "codes": sorted(job.codes),
        "target": str(job.settings.target),
        "unsafe_fixes": job.settings.unsafe_fixes,
        "rule_options": job.settings.rule_options,
    }
    encoded = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:32]


class ResultCache:
    """Results of files that needed no edit, keyed by content hash, one JSON file per key.

    Only ``unchanged``, ``skipped`` and engine ``error`` outcomes are stored, with their
    diagnostics: a hit means "this exact content was already processed under these exact rules
    and settings and nothing is to be written", so a write decision never rests on anything but a
    hash match. Changed files are not stored; once migrated, their new content is. I/O errors
    (unreadable, read-only) are facts about the file system, not the content, and are not stored.
    """

    MAX_ENTRIES = 200_000

    def __init__(self, folder: Path, key: str) -> None:
        self.file = folder / f"results-{key}.json"
        self.entries: dict[str, Any] = self._load()
        self.added: dict[str, Any] = {}

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}  # absent or damaged: start over
        return data if isinstance(data, dict) else {}

    def get(self, path: str, digest: str) -> Outcome | None:
        entry = self.entries.get(digest)
        if entry is None:
            return None
        try:
            status = Status(entry["status"])
            diagnostics = [
                Diagnostic(path, line, column, code, Severity(severity), message)
                for line, column, code, severity, message in entry["diagnostics"]
            ]
        except (KeyError, TypeError, ValueError):
            return None
        reason = reason_of(status, diagnostics)
        return Outcome(path, status, diagnostics, reason=reason, digest=digest, cached=True)

    def put(self, outcome: Outcome) -> None:
        if outcome.digest is None or outcome.cached:
            return
        self.added[outcome.digest] = {
            "status": str(outcome.status),
            "diagnostics": [
                [d.line, d.column, d.code, str(d.severity), d.message] for d in outcome.diagnostics
            ],
        }

    def save(self) -> None:
        """Merge with what another run may have stored meanwhile, then replace atomically."""
        if not self.added:
            return
        merged = {**self._load(), **self.added}
        if len(merged) > self.MAX_ENTRIES:
            merged = dict(self.added)
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(self.file), json.dumps(merged).encode(), 0o644)
        except OSError:
            pass  # a cache that cannot be written only costs time


# -- a whole run ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    outcomes: list[Outcome]
    copied: int = 0  # --output: other files copied


def run(
    discovery: Discovery,
    job: Job,
    jobs: int,
    cache: ResultCache | None = None,
    advance: Callable[[int], None] | None = None,
) -> RunResult:
    """Process every task; outcomes come back sorted by path whatever the workers' order."""
    outcomes = [*discovery.skipped, *discovery.problems]
    todo: list[Task] = []
    for task in discovery.tasks:
        hit = _cached(task, job, cache)
        if hit is None:
            todo.append(task)
        else:
            outcomes.append(hit)
    if advance is not None and len(todo) < len(discovery.tasks):
        advance(len(discovery.tasks) - len(todo))
    for outcome in _process_all(todo, job, jobs, advance):
        outcomes.append(outcome)
        if cache is not None:
            cache.put(outcome)
    if cache is not None:
        cache.save()
    copied = 0
    if job.mode is Mode.OUTPUT:
        copied, failures = copy_other_files(discovery)
        outcomes.extend(failures)
    outcomes.sort(key=lambda outcome: outcome.path)
    return RunResult(outcomes, copied)


def _cached(task: Task, job: Job, cache: ResultCache | None) -> Outcome | None:
    if cache is None:
        return None
    try:
        with open(task.path, "rb") as stream:
            source = stream.read()
    except OSError:
        return None  # the worker reports it
    hit = cache.get(task.path, content_digest(source))
    if hit is not None and job.mode is Mode.OUTPUT:
        assert task.destination is not None
        mode_bits = stat.S_IMODE(os.stat(task.path).st_mode)
        return _write_copy(hit, task.destination, source, mode_bits)
    return hit


def _process_all(
    tasks: Sequence[Task], job: Job, jobs: int, advance: Callable[[int], None] | None
) -> Iterator[Outcome]:
    workers = min(jobs, len(tasks) // FILES_PER_WORKER)
    if workers <= 1:
        rules = job.rules()
        for task in tasks:
            yield process(task, job, rules)
            if advance is not None:
                advance(1)
        return
    # Small chunks balance the load: the few files that need a full parse cluster together.
    size = max(1, min(32, math.ceil(len(tasks) / (workers * 8))))
    chunks = [tasks[start : start + size] for start in range(0, len(tasks), size)]
    context = multiprocessing.get_context("spawn")  # no inherited state: the same on every OS
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(job,)
    ) as pool:
        futures = [pool.submit(_process_chunk, chunk) for chunk in chunks]
        try:
            for future in as_completed(futures):
                done = future.result()
                yield from done
                if advance is not None:
                    advance(len(done))
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


_worker_job: Job | None = None
_worker_rules: tuple[type[Rule], ...] = ()


def _start_worker(job: Job) -> None:
    global _worker_job, _worker_rules
    _worker_job = job
    _worker_rules = job.rules()


def _process_chunk(tasks: Sequence[Task]) -> list[Outcome]:
    assert _worker_job is not None, "worker not initialised"
    return [process(task, _worker_job, _worker_rules) for task in tasks]


def copy_other_files(discovery: Discovery) -> tuple[int, list[Outcome]]:
    """``--output``: copy the non-Python files and recreate the symlinks that stay inside."""
    failures = []
    copied = 0
    for source, destination in discovery.copies:
        try:
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            shutil.copy2(source, destination)
            copied += 1
        except OSError as error:
            failures.append(_error(source, f"cannot copy to {destination}: {error}"))
    for link, destination in discovery.links:
        try:
            # Point at the same file, relative to the link, so the copy does not lead back here.
            target = os.path.relpath(os.path.realpath(link), os.path.dirname(link))
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            if os.path.lexists(destination):
                os.unlink(destination)
            os.symlink(target, destination)
            copied += 1
        except OSError as error:
            failures.append(_error(link, f"cannot recreate symlink {destination}: {error}"))
    return copied, failures
