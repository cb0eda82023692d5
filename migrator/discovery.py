"""Turning the command-line paths into the files to process.

A folder walk collects Python files (``.py``, ``.pyi``) and Jupyter notebooks (``.ipynb``).
Folders are walked recursively in sorted order. Skipped while walking (but processed when named
on the command line): the default folders below, virtual environments (any folder with a
``pyvenv.cfg``), and what ``.gitignore`` files ignore, read with git's matching rules (pathspec),
in a git checkout or not. ``--exclude`` / ``exclude`` patterns use the same gitignore syntax and
apply everywhere, relative to the project folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from migrator.analysis.project import NATIVE_SUFFIXES
from migrator.files import TEMP_SUFFIX
from migrator.jobs import Outcome, Task, error_outcome
from migrator.notebooks import NOTEBOOK_SUFFIX
from migrator.results import Status
from migrator.shell import ShellScripts

if TYPE_CHECKING:
    import pathspec

PYTHON_SUFFIXES = (".py", ".pyi")
# What a folder walk migrates: Python files and Jupyter notebooks (migrator.notebooks).
MIGRATED_SUFFIXES = (*PYTHON_SUFFIXES, NOTEBOOK_SUFFIX)
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
        ".ipynb_checkpoints",  # Jupyter's autosaved copies of the notebooks next to it
    }
)


@dataclass
class Discovery:
    tasks: list[Task] = field(default_factory=list)
    skipped: list[Outcome] = field(default_factory=list)  # symlinks not followed
    problems: list[Outcome] = field(default_factory=list)  # unreadable folders
    copies: list[tuple[str, str]] = field(default_factory=list)  # --output: other files
    links: list[tuple[str, str]] = field(default_factory=list)  # --output: (link, target)
    native: list[str] = field(default_factory=list)  # C/C++/CUDA sources, for project facts


@dataclass(frozen=True)
class Excluder:
    """``--exclude`` / ``exclude`` patterns, the default folders and what ``.gitignore`` ignores.

    Patterns follow gitignore syntax: one without ``/`` matches a file or folder name anywhere
    (``*_pb2.py``, ``tests``); one with ``/`` matches the path relative to the project folder
    (``src/generated/*``, ``third_party/**``).
    """

    patterns: tuple[str, ...]
    project_root: Path
    use_gitignore: bool = True

    @cached_property
    def spec(self) -> pathspec.GitIgnoreSpec:
        return _spec(self.patterns)

    def by_pattern(self, real_path: str, name: str, is_dir: bool = False) -> bool:
        if not self.patterns:
            return False
        relative = _relative_posix(real_path, self.project_root)
        if relative is None:
            relative = name  # outside the project: only name patterns can apply
        return self.spec.match_file(relative + ("/" if is_dir else ""))


def _spec(patterns: Iterable[str]) -> pathspec.GitIgnoreSpec:
    import pathspec  # only a run with patterns or a .gitignore pays for it

    return pathspec.GitIgnoreSpec.from_lines(list(patterns))


@dataclass(frozen=True)
class _IgnoreFile:
    """The patterns of one ``.gitignore`` (or ``info/exclude``), with one regular expression
    that matches where any of them does: most paths match none, and are then answered by one
    search instead of one per pattern (a Python project's ``.gitignore`` has a hundred)."""

    spec: pathspec.GitIgnoreSpec
    any_pattern: re.Pattern[str] | None  # None: no such expression, ask every pattern

    @classmethod
    def of(cls, lines: list[str]) -> _IgnoreFile:
        spec = _spec(lines)
        return cls(spec, _union([p for p in spec.patterns if p.include is not None]))

    def verdict(self, relative: str) -> bool | None:
        """Whether the last pattern that matches ``relative`` ignores it (None: none does)."""
        if self.any_pattern is not None and not self.any_pattern.match(relative):
            return None
        include: bool | None = self.spec.check_file(relative).include
        return include


def _union(patterns: Iterable[object]) -> re.Pattern[str] | None:
    """One expression that matches where any of ``patterns`` (pathspec's, each a ``regex``)
    does; None where they have no such regular expressions to join."""
    expressions = [getattr(pattern, "regex", None) for pattern in patterns]
    if not all(isinstance(expression, re.Pattern) for expression in expressions):
        return None
    joined = [e for e in expressions if isinstance(e, re.Pattern)]
    if len({expression.flags for expression in joined}) > 1:
        return None
    # The same group name may appear in several patterns: in the union, groups only group.
    alternatives = "|".join(f"(?:{_NAMED_GROUP.sub('(?:', e.pattern)})" for e in joined)
    try:
        return re.compile(alternatives or "(?!)", joined[0].flags if joined else 0)
    except re.error:
        return None


_NAMED_GROUP = re.compile(r"\(\?P<[^>]*>")


def _relative_posix(path: str, root: Path) -> str | None:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return None


class GitIgnores:
    """The ``.gitignore`` files that apply under one folder, read as the walk meets them.

    A ``.gitignore`` applies to its folder's subtree, with patterns relative to that folder; a
    deeper file's match (or ``!`` negation) wins over a shallower one's, as in git. The files of
    the folders above the walked one count too, up to the repository's top (the folder holding
    ``.git``, whose ``info/exclude`` is read as well) or, outside a repository, up to the project
    folder.
    """

    def __init__(self, folder: str, project_root: Path) -> None:
        # folder -> its specs, shallowest rule first (info/exclude before the top .gitignore)
        self.specs: dict[str, list[_IgnoreFile]] = {}
        self._read: set[str] = set()  # folders whose .gitignore was looked for
        top = _repository_top(folder)
        limit = top or (str(project_root) if _is_within(folder, str(project_root)) else folder)
        chain = [folder]
        while chain[-1] != limit and os.path.dirname(chain[-1]) != chain[-1]:
            chain.append(os.path.dirname(chain[-1]))
        if top is not None:
            exclude = _read_lines(os.path.join(top, ".git", "info", "exclude"))
            if exclude:
                self.specs[top] = [_IgnoreFile.of(exclude)]
        for directory in reversed(chain):
            self.enter(directory)

    def enter(self, directory: str) -> None:
        """Read ``directory``'s ``.gitignore`` (once) before its entries are matched."""
        specs = self.specs.setdefault(directory, [])
        if directory in self._read:
            return
        self._read.add(directory)
        lines = _read_lines(os.path.join(directory, ".gitignore"))
        if lines:
            specs.append(_IgnoreFile.of(lines))

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether git would ignore ``path`` (a real path below the walked folder)."""
        applicable = []
        directory = os.path.dirname(path)
        while True:
            if self.specs.get(directory):
                applicable.append(directory)
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
        verdict = False
        for folder in reversed(applicable):
            relative = os.path.relpath(path, folder).replace(os.sep, "/") + ("/" if is_dir else "")
            for ignore_file in self.specs[folder]:
                found = ignore_file.verdict(relative)
                if found is not None:
                    verdict = found
        return verdict


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            return stream.read().splitlines()
    except OSError:
        return []


def _repository_top(folder: str) -> str | None:
    current = folder
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def discover(
    arguments: Sequence[str],
    excluder: Excluder,
    output_dir: Path | None = None,
    output_base: Path | None = None,
    shell: ShellScripts | None = None,
) -> Discovery:
    """Expand the command-line paths (files and folders, recursively) into tasks.

    ``shell`` (``--include-shell``): the shell scripts a folder walk also picks up
    (:mod:`migrator.shell`); a shell script named on the command line is always scanned.

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
        real_folder = os.path.realpath(argument)
        ignored = GitIgnores(real_folder, excluder.project_root) if excluder.use_gitignore else None
        for shown, real_path, kind in _walk(argument, excluder, ignored, roots, found):
            if kind == "link":
                if output_dir is not None:
                    found.links.append((real_path, str(destination(real_path))))
            elif shown.endswith(MIGRATED_SUFFIXES):
                add_file(shown, real_path)
            elif shell is not None and shell.matches(real_path):
                add_file(shown, real_path)  # reported on, and copied as it is with --output
            else:
                if shown.endswith(NATIVE_SUFFIXES):
                    found.native.append(shown)
                if output_dir is not None:
                    found.copies.append((real_path, str(destination(real_path))))
    found.tasks.sort(key=lambda task: task.path)
    return found


def _walk(
    argument: str,
    excluder: Excluder,
    ignored: GitIgnores | None,
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
            found.problems.append(error_outcome(shown_dir, f"cannot read folder: {error.strerror}"))
            continue
        if ignored is not None:
            ignored.enter(real_dir)
        subfolders = []
        for entry in entries:
            shown = os.path.join(shown_dir, entry.name)
            real_path = os.path.join(real_dir, entry.name)
            if entry.name.endswith(TEMP_SUFFIX):
                continue  # another run's write in progress, or one killed mid-write
            is_dir = entry.is_dir(follow_symlinks=False)
            if excluder.by_pattern(real_path, entry.name, is_dir):
                continue
            if ignored is not None and ignored.ignored(real_path, is_dir):
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
    elif shown.endswith(MIGRATED_SUFFIXES) or os.path.isdir(real_path):
        found.skipped.append(
            Outcome(
                shown,
                Status.SKIPPED,
                reason=f"a symlink to {target}, outside the tree: not followed",
            )
        )


def _is_venv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))
