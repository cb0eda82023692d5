"""What one file's analysis may know about the other files of the run.

Most findings need only the file itself. A few depend on another file: the operators that a C++
extension defines (NPU932 reports their Python call sites), the optimizer that a helper in
``utils/optim.py`` builds for ``amp.initialize`` in ``train.py``. Before the per-file work, the
runner builds one :class:`ProjectFacts` for the whole run, at the cost of the cheap stage only:

- every Python file is already read and hashed by the runner; a file whose text contains one of
  a rule's ``PROJECT_TRIGGER`` strings is parsed (``ast`` only) and that rule's
  :meth:`~migrator.rule.Rule.summarize` returns small JSON facts about it (a handful of files
  in a real repository: those defining extensions or optimizer factories);
- C, C++ and CUDA sources found while walking the folders of the run are read as text and given
  to :meth:`~migrator.rule.Rule.summarize_native` when they contain a ``NATIVE_TRIGGER``.

Then, once every file is summarised, a rule may **link** its summaries
(:meth:`~migrator.rule.Rule.link`): follow what one file names into the file that defines it. It
gets :class:`ProjectFiles`, which resolves a dotted name to any Python file of the run and reads
and parses a file again on demand (the runner keeps no sources), so linking costs the few files it
opens: an optimizer factory's module and the files whose text names the factory. What it returns
is kept per path (:meth:`ProjectFacts.links`). Rules that share one analysis share one key
(:meth:`~migrator.rule.Rule.project_key`): their files are summarised and linked once.

The facts travel inside :class:`~migrator.rule.Settings` (once per worker), and their digest is
part of the result cache's key: a changed factory re-checks the files that call it.

Facts come from the files of the run: ``npu-migrate train.py`` alone does not know what
``utils/optim.py`` builds, and rules then report what they cannot see instead of editing it.

Module names. A Python file's import name is found the way Python would find it from the
repository: up through the folders that hold an ``__init__.py``. An absolute import resolves from
the importing file's own roots (:class:`ImportRoots`), the folders that can be on ``sys.path``
when it runs: its own folder (``sys.path[0]`` when it is the script), the folder its top package
hangs from, and the nearest project root (a ``setup.py``, ``setup.cfg`` or ``pyproject.toml``, or
else a folder holding a top-level package; with its ``src/``). A monorepo whose model folders
each vendor their own ``utils/`` resolves each script's import to its own folder's copy; two
candidates are ambiguous only when they hang from different roots, so that which one Python
takes depends on how the program is run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migrator.analysis.index import ModuleIndex
from migrator.analysis.parse import index_of_bytes
from migrator.analysis.view import FileView

# JSON-serialisable facts about one file, produced by a rule's summarize / summarize_native.
Facts = Mapping[str, Any]

NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx")
# Files that mark the root of a project: `pip install -e .` puts that folder (or its `src/`) on
# sys.path, and it is where its scripts are run from.
PROJECT_MARKERS = ("setup.py", "setup.cfg", "pyproject.toml")
# Where repositories without a package of their own keep their modules, added to sys.path by a
# script (`_init_paths.py`): tried after the roots, like the folders above a script.
LIBRARY_FOLDER = "lib"


@dataclass(frozen=True)
class Module:
    """A summarised Python file: its path as shown and the dotted name Python imports it by."""

    path: str
    name: str


@dataclass(frozen=True)
class Resolved:
    """Where a dotted name leads: the module that defines it and the rest of the name in it
    (``("build_optimizer",)`` for ``utils.optim.build_optimizer``; ``()`` for the module)."""

    module: Module
    rest: tuple[str, ...]


class AmbiguousModule(str):
    """A dotted name that two summarised files could both be (the message names them,
    ``paths`` lists them)."""

    paths: tuple[str, ...]

    def __new__(cls, message: str, paths: tuple[str, ...] = ()) -> AmbiguousModule:
        made = super().__new__(cls, message)
        made.paths = paths
        return made


@dataclass(frozen=True)
class ProjectFacts:
    """Every rule's facts about the files of a run, keyed by rule code (or shared key, see
    :meth:`~migrator.rule.Rule.project_key`), then by path."""

    modules: tuple[Module, ...] = ()
    python: Mapping[str, Mapping[str, Facts]] = field(default_factory=dict)  # code -> path -> facts
    native: Mapping[str, Mapping[str, Facts]] = field(default_factory=dict)  # code -> path -> facts
    linked: Mapping[str, Mapping[str, Facts]] = field(default_factory=dict)  # code -> path -> facts

    def __bool__(self) -> bool:
        return bool(self.python or self.native or self.linked)

    @functools.cached_property
    def digest(self) -> str:
        """A hash of every fact: part of the cache key (the paths are in it: moving a helper
        changes what its callers import)."""
        encoded = json.dumps(
            {
                "modules": [(m.path, m.name) for m in self.modules],
                "python": self.python,
                "native": self.native,
                "linked": self.linked,
            },
            sort_keys=True,
        ).encode()
        return hashlib.sha256(encoded).hexdigest()[:32]

    def links_digest(self, path: str) -> str:
        """A hash of what the link stages found about the file ``path`` ("" when nothing): two
        files with the same contents are analysed once only when this is the same for both (a
        vendored copy of a factory whose callers differ from the other copy's gets its own
        analysis)."""
        about = {code: facts[path] for code, facts in self.linked.items() if path in facts}
        if not about:
            return ""
        encoded = json.dumps(about, sort_keys=True).encode()
        return hashlib.sha256(encoded).hexdigest()[:32]

    def summaries(self, code: str) -> Mapping[str, Facts]:
        """The facts ``code``'s ``summarize`` returned, by path of the Python file."""
        return self.python.get(code, {})

    def native_summaries(self, code: str) -> Mapping[str, Facts]:
        """The facts ``code``'s ``summarize_native`` returned, by path of the native source."""
        return self.native.get(code, {})

    def links(self, code: str) -> Mapping[str, Facts]:
        """The facts ``code``'s ``link`` returned, by path of the Python file they are about."""
        return self.linked.get(code, {})

    def module_at(self, path: str) -> Module | None:
        return self._by_path.get(path)

    @functools.cached_property
    def _by_path(self) -> dict[str, Module]:
        return {module.path: module for module in self.modules}

    @functools.cached_property
    def _by_location(self) -> dict[str, Module]:
        """Modules by absolute path: a candidate of an import is looked up, not searched for."""
        return {os.path.abspath(module.path): module for module in self.modules}

    @functools.cached_property
    def roots(self) -> ImportRoots:
        """The import roots of the importers asked about, each folder looked up once."""
        return ImportRoots()

    def absolute(self, dotted: str, importer: str) -> str | None:
        """``dotted`` with a leading relative part (``..models.x``) made absolute from the
        importing file's package; None when it climbs above the top package."""
        level = len(dotted) - len(dotted.lstrip("."))
        if not level:
            return dotted
        module = self.module_at(importer)
        name = module.name if module is not None else module_name(importer)
        package = name.split(".")[:-1] if not importer.endswith("__init__.py") else name.split(".")
        if level - 1 > len(package):
            return None
        base = package[: len(package) - (level - 1)]
        rest = dotted[level:]
        return ".".join([*base, rest] if rest else base) or None

    def resolve(self, dotted: str, importer: str) -> Resolved | AmbiguousModule | None:
        """The summarised module that ``dotted`` (a qualified name as the resolver gives it,
        relative or absolute) names from the file ``importer``, and the rest of the name."""
        absolute = self.absolute(dotted, importer)
        if absolute is None:
            return None
        parts = absolute.split(".")
        for cut in range(len(parts), 0, -1):
            found = self._module_named(parts[:cut], importer)
            if isinstance(found, AmbiguousModule):
                return found
            if found is not None:
                return Resolved(found, tuple(parts[cut:]))
        return None

    def _module_named(self, parts: list[str], importer: str) -> Module | AmbiguousModule | None:
        """The module ``parts`` names from ``importer`` (see :class:`ImportRoots`): the file
        Python finds however the importer is run, an AmbiguousModule when that depends on how
        it is run, else the file a script's own ``sys.path`` change finds, else None."""
        roots = self.roots.of(importer)
        picks: dict[str, Module] = {}
        for search in (roots.as_script, roots.as_module):
            module = self._first_under(search, parts)
            if module is not None:
                picks.setdefault(module.path, module)
        if len(picks) > 1:
            paths = tuple(sorted(picks))
            return AmbiguousModule(
                f"`{'.'.join(parts)}` could be any of {', '.join(paths)}, depending on how the "
                "program is run",
                paths,
            )
        if picks:
            return next(iter(picks.values()))
        return self._first_under(roots.fallback, parts)

    def _first_under(self, search: Sequence[str], parts: list[str]) -> Module | None:
        """The module ``parts`` is under the first folder of ``search`` that has it."""
        for folder in search:
            base = os.path.join(folder, *parts)
            # A package takes precedence over a module of the same name, as in Python.
            for path in (os.path.join(base, "__init__.py"), base + ".py"):
                module = self._by_location.get(path)
                if module is not None:
                    return module
        return None


@dataclass(frozen=True)
class Roots:
    """Where Python looks for a file's absolute imports, for each way the file is run."""

    as_script: tuple[str, ...]  # `python path/to/file.py`: its folder, then the installed project
    as_module: tuple[str, ...]  # imported, or run with `-m`: its top package's folder, the project
    # tried last: what a script's own sys.path change adds (the folders above it, `lib/`)
    fallback: tuple[str, ...]


class ImportRoots:
    """The folders Python may search for the absolute imports of a file, by how it is run.

    Run as a script (``python tools/train.py``), a file has its own folder first on
    ``sys.path``, then its project's roots. Imported as a module, or run with ``python -m
    tools.train`` from the project's root, its folder is not there: the folder its top package
    hangs from is, then the project's roots. Those are the nearest folder above the file (or
    its own) that holds a ``setup.py``, ``setup.cfg`` or ``pyproject.toml``, or that is no
    package and holds one (a top-level package), and every folder above that holds one of those
    files (``pip install -e .``: detectron2's ``projects/CenterNet2`` imports the repository's
    ``detectron2``), each with its ``src/`` (a src layout). A folder of another project of a
    monorepo is never a root: a script of one model folder does not see the ``utils/`` of its
    sibling. Tried last, when none of those has the module: what a script's own ``sys.path``
    change adds (:func:`_path_changes`). Each folder is looked up on disk once.
    """

    def __init__(self) -> None:
        self._roots: dict[str, Roots] = {}
        self._packages: dict[str, tuple[str, ...]] = {}
        self._projects: dict[str, str | None] = {}
        self._installed: dict[str, tuple[str, ...]] = {}

    def of(self, importer: str) -> Roots:
        folder = os.path.dirname(os.path.abspath(importer))
        known = self._roots.get(folder)
        if known is None:
            known = self._roots[folder] = self._roots_of(folder)
        return known

    def _roots_of(self, folder: str) -> Roots:
        project = self.project_root(folder)
        installed: list[str] = []
        for root in [project, *self.installed_projects(folder)]:
            if root is not None:
                installed.append(root)
                source = os.path.join(root, "src")
                if os.path.isdir(source):
                    installed.append(source)
        package = _package_of(folder, self._packages)
        as_module = [_up(folder, len(package))] if package else []
        return Roots(
            as_script=_unique([folder, *installed]),
            as_module=_unique([*as_module, *installed]),
            fallback=_unique(_path_changes(folder, project)),
        )

    def sees(self, importer: str, path: str, top: str) -> bool:
        """Whether ``path`` lies under one of the folders ``importer``'s absolute imports search
        as a script or as a module, leaving aside the folders above ``top`` (the folder of the
        whole run: a root above it, such as the folder a monorepo was unpacked in, cannot tell
        its projects apart) and the guesses at a script's own ``sys.path`` changes. In a
        monorepo a file of one project does not see a file of its sibling."""
        roots = self.of(importer)
        target = os.path.abspath(path)
        run = os.path.abspath(top)
        for root in (*roots.as_script, *roots.as_module):
            folder = os.path.join(os.path.abspath(root), "")
            if run.startswith(folder) and run != os.path.abspath(root):
                continue
            if target.startswith(folder):
                return True
        return False

    def project_root(self, folder: str) -> str | None:
        """The nearest of ``folder`` and the folders above it that is a project's root: it holds
        a ``setup.py``, ``setup.cfg`` or ``pyproject.toml``, or it is no package and holds one
        (a top-level package)."""
        if folder not in self._projects:
            parent = os.path.dirname(folder)
            if _has_marker(folder) or _holds_top_level_package(folder, self._packages):
                self._projects[folder] = folder
            elif parent == folder:
                self._projects[folder] = None
            else:
                self._projects[folder] = self.project_root(parent)
        return self._projects[folder]

    def installed_projects(self, folder: str) -> tuple[str, ...]:
        """``folder`` and the folders above it that hold a ``setup.py``, ``setup.cfg`` or
        ``pyproject.toml``, nearest first: the projects a `pip install -e` may have put on
        ``sys.path`` (a project inside another one's repository, like detectron2's
        ``projects/``, imports the outer one's packages)."""
        known = self._installed.get(folder)
        if known is None:
            parent = os.path.dirname(folder)
            above = self.installed_projects(parent) if parent != folder else ()
            known = self._installed[folder] = (folder, *above) if _has_marker(folder) else above
        return known


def _has_marker(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, marker)) for marker in PROJECT_MARKERS)


def _holds_top_level_package(folder: str, packages: dict[str, tuple[str, ...]]) -> bool:
    """``folder`` is no package and holds one."""
    if _package_of(folder, packages):
        return False
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    return any(
        entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py"))
        for entry in entries
    )


def _up(folder: str, levels: int) -> str:
    for _ in range(levels):
        folder = os.path.dirname(folder)
    return folder


def _between(folder: str, project: str | None) -> list[str]:
    """The folders above ``folder``, nearest first, up to ``project`` (left out: it is a root
    already), or up to the file system's root when there is no project."""
    found: list[str] = []
    if folder == project:
        return found
    parent = os.path.dirname(folder)
    while parent != folder and parent != project:
        found.append(parent)
        folder, parent = parent, os.path.dirname(parent)
    return found


def _path_changes(folder: str, project: str | None) -> list[str]:
    """What a script in ``folder`` usually adds to ``sys.path`` itself, nearest first: the
    folders above it up to its project's root (``sys.path.insert(0, "..")``), and their and its
    own ``lib/`` (``_init_paths.py`` of HRNet, CenterNet or Faster R-CNN:
    ``add_path(osp.join(this_dir, "..", "lib"))``)."""
    found = [os.path.join(folder, LIBRARY_FOLDER)]
    for above in _between(folder, project):
        found += [above, os.path.join(above, LIBRARY_FOLDER)]
    if project is not None and project != folder:
        found.append(os.path.join(project, LIBRARY_FOLDER))
    return found


def _unique(folders: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(folders))


def module_name(path: str, packages: dict[str, tuple[str, ...]] | None = None) -> str:
    """The dotted name Python imports ``path`` by: the file's stem, preceded by every enclosing
    folder that is a package (holds an ``__init__.py``). ``packages`` caches each folder's
    package name across calls (one file-system check per folder for a whole run)."""
    folder, filename = os.path.split(os.path.abspath(path))
    stem = os.path.splitext(filename)[0]
    parts = [] if stem == "__init__" else [stem]
    return ".".join([*_package_of(folder, {} if packages is None else packages), *parts])


def _package_of(folder: str, packages: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The dotted parts of the package that ``folder`` is (empty when it has no ``__init__``)."""
    known = packages.get(folder)
    if known is not None:
        return known
    found: tuple[str, ...] = ()
    if os.path.isfile(os.path.join(folder, "__init__.py")):
        parent, package = os.path.split(folder)
        found = (*_package_of(parent, packages), package) if package else ()
    packages[folder] = found
    return found


def run_folder(paths: Sequence[str]) -> str:
    """The folder of a whole run: the deepest one that holds every file of ``paths``."""
    top = os.path.commonpath([os.path.abspath(path) for path in paths])
    return os.path.dirname(top) if os.path.isfile(top) else top


def read_python(path: str) -> bytes | None:
    """A file's bytes, or None when it cannot be read (it then has no facts)."""
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError:
        return None


# The source bytes whose indexes ProjectFiles keeps for a link stage (see ProjectFiles).
KEPT_INDEX_BYTES = 4 * 1024 * 1024


class ProjectFiles:
    """The Python files of a run, as a rule's :meth:`~migrator.rule.Rule.link` sees them.

    Nothing is kept from the first reading: a file is read again (``read``) and parsed when a
    rule asks for it, and its index is kept for the other rules of the same link stage, until
    :meth:`release`, or until the indexes kept stand for more than ``kept_bytes`` of source (an
    index costs some fifty times its source, and a monorepo's link stage opens thousands of
    files): then the least recently asked for go, and are parsed again if asked for again.
    Resolution covers every Python file of the run, summarised or not; the package of each
    folder is looked up once.
    """

    def __init__(
        self,
        paths: Sequence[str],
        read: Callable[[str], bytes | None] = read_python,
        kept_bytes: int = KEPT_INDEX_BYTES,
    ) -> None:
        self.paths = tuple(paths)
        self._read = read
        self._indexes: dict[str, ModuleIndex | None] = {}  # least recently asked for first
        self._sizes: dict[str, int] = {}
        self._kept = 0  # the sum of _sizes
        self._kept_bytes = kept_bytes
        self._containing: dict[str, list[str]] = {}

    @functools.cached_property
    def resolver(self) -> ProjectFacts:
        """Facts that know every file's module name (and nothing else), for :meth:`resolve`."""
        packages: dict[str, tuple[str, ...]] = {}
        return ProjectFacts(tuple(Module(path, module_name(path, packages)) for path in self.paths))

    def resolve(self, dotted: str, importer: str) -> Resolved | AmbiguousModule | None:
        """Like :meth:`ProjectFacts.resolve`, over every Python file of the run."""
        return self.resolver.resolve(dotted, importer)

    @functools.cached_property
    def top(self) -> str:
        """The folder of the whole run (:func:`run_folder`)."""
        return run_folder(self.paths)

    def sees(self, importer: str, path: str) -> bool:
        """Whether ``importer``'s absolute imports may find ``path``, within the run
        (:meth:`ImportRoots.sees`): in a monorepo, not a file of a sibling project."""
        return importer == path or self.resolver.roots.sees(importer, path, self.top)

    def absolute(self, dotted: str, importer: str) -> str | None:
        return self.resolver.absolute(dotted, importer)

    def index(self, path: str) -> ModuleIndex | None:
        """The ``ast`` index of a file of the run (None: unreadable, or it does not parse)."""
        if path in self._indexes:
            found = self._indexes[path] = self._indexes.pop(path)  # now the most recent
            return found
        source = self._read(path)
        found = self._indexes[path] = None if source is None else index_of_bytes(source, path)
        self._sizes[path] = len(source or b"")
        self._kept += self._sizes[path]
        while self._kept > self._kept_bytes and len(self._indexes) > 1:
            self._forget(next(iter(self._indexes)))
        return found

    def _forget(self, path: str) -> None:
        index = self._indexes.pop(path)
        self._kept -= self._sizes.pop(path)
        # Released (its cycles broken at once) unless a rule still holds it, an index it asked
        # for before: the two references counted here are this function's and the argument.
        if index is not None and sys.getrefcount(index) <= 2:
            index.release()

    def read(self, path: str) -> bytes | None:
        """The bytes of a file of the run, read again (None: unreadable)."""
        return self._read(path)

    def containing(self, words: Collection[str]) -> dict[str, list[str]]:
        """For each word, the files whose text contains it; the files are read once for all
        the words not asked about before."""
        new = [word for word in dict.fromkeys(words) if word not in self._containing]
        if new:
            found: dict[str, list[str]] = {word: [] for word in new}
            encoded = [(word, word.encode()) for word in new]
            for path in self.paths:
                data = self._read(path)
                if data is None:
                    continue
                for word, pattern in encoded:
                    if pattern in data:
                        found[word].append(path)
            self._containing.update(found)
        return {word: self._containing[word] for word in words}

    def release(self) -> None:
        """Let go of every index read (see :meth:`ModuleIndex.release`)."""
        for index in self._indexes.values():
            if index is not None:
                index.release()
        self._indexes.clear()
        self._sizes.clear()
        self._kept = 0


class FileViews:
    """One :class:`~migrator.analysis.view.FileView` per file of the run for a link stage,
    made on first use and shared by every analysis of that stage (None: the file cannot be read
    or parsed); :meth:`release` forgets them and what their analyses keep, so that the run's
    bound on the indexes it keeps holds again."""

    def __init__(self, files: ProjectFiles) -> None:
        self.files = files
        self._views: dict[str, FileView | None] = {}

    def __call__(self, path: str) -> FileView | None:
        if path not in self._views:
            index = self.files.index(path)
            self._views[path] = None if index is None else FileView(index)
        return self._views[path]

    def release(self) -> None:
        for view in self._views.values():
            if view is not None:
                view.release()
        self._views.clear()
