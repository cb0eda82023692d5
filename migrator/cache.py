"""The result cache: what a content hash under a rule set and settings already gave."""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import migrator
from migrator.diagnostics import Diagnostic, Severity
from migrator.files import write_atomic
from migrator.jobs import Job, Outcome, reason_of
from migrator.notebooks import is_notebook
from migrator.results import Status
from migrator.shell import is_shell_script


def content_digest(source: bytes, path: str = "") -> str:
    """The hash of a file's bytes as the kind of file ``path`` names: a notebook's result is
    not a Python file's, whatever the bytes (an empty file is both)."""
    digest = hashlib.sha256(source)
    if is_notebook(path):
        digest.update(b"\0notebook")
    elif is_shell_script(path):
        digest.update(b"\0shell")
    return digest.hexdigest()


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npu-migrate"


@functools.cache
def source_fingerprint() -> str:
    """A hash of the migrator's own code, so that editing a rule invalidates the cache even
    between two releases with the same version number."""
    rules_package = importlib.import_module("migrator.rules")
    roots = {Path(migrator.__file__).parent, *map(Path, rules_package.__path__)}
    return code_fingerprint(migrator.__version__, sorted(roots))


def code_fingerprint(version: str, roots: Sequence[Path]) -> str:
    """A hash of ``version`` and of every Python source under ``roots``, subpackages included
    (the rule families, the analysis layer), and of the rules' data (the torch_npu API
    tables, which decide findings as much as their code)."""
    digest = hashlib.sha256(version.encode())
    for root in roots:
        for pattern in ("*.py", "*.toml"):
            for source in sorted(root.rglob(pattern)):
                digest.update(str(source.relative_to(root)).encode())
                digest.update(source.read_bytes())
    return digest.hexdigest()


def cache_key(job: Job) -> str:
    settings = {
        "fingerprint": source_fingerprint(),
        "codes": sorted(job.codes),
        "target": str(job.settings.target),
        "unsafe_fixes": job.settings.unsafe_fixes,
        "rule_options": job.settings.rule_options,
        "torch_npu_version": job.settings.torch_npu_version,
        "torch_npu_api": job.settings.torch_npu_api,
        "amp": str(job.settings.amp),
    }
    encoded = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:32]


class _JsonStore:
    """One JSON object of entries in the cache folder, written whole and atomically, merged
    with what another run may have stored meanwhile."""

    MAX_ENTRIES = 200_000

    def __init__(self, file: Path) -> None:
        self.file = file
        self.entries: dict[str, Any] = self._load()
        self.added: dict[str, Any] = {}

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}  # absent or damaged: start over
        return data if isinstance(data, dict) else {}

    def save(self) -> None:
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


class SummaryCache(_JsonStore):
    """What the rules summarised of a file for the project facts (:mod:`migrator.analysis.project`),
    keyed by content hash, module name and path, under the same rules and settings as the
    results: a warm run does not parse the files that only feed the project stage."""


class ResultCache(_JsonStore):
    """Results of files that needed no edit, keyed by content hash, one JSON file per key.

    ``unchanged``, ``skipped`` and engine ``error`` outcomes are stored, with their
    diagnostics: a hit means "this exact content was already processed under these exact rules
    and settings and nothing is to be written", so a write decision never rests on anything but a
    hash match. A ``changed`` outcome is stored only by ``--check`` (status and diagnostics, no
    bytes) and answers only ``--check``: every other mode needs the new bytes and computes
    them; once migrated, the new content is stored. I/O errors (unreadable, read-only) are facts
    about the file system, not the content, and are not stored.
    """

    def __init__(self, folder: Path, key: str) -> None:
        super().__init__(folder / f"results-{key}.json")
        self.key = key

    def summaries(self) -> SummaryCache:
        """The project summaries stored under the same key (before project facts narrow it)."""
        return SummaryCache(self.file.parent / f"summaries-{self.key}.json")

    def narrowed(self, facts: str) -> ResultCache:
        """The cache for the same settings and these project facts
        (:mod:`migrator.analysis.project`): a file's findings may depend on what other files
        define."""
        narrowed = hashlib.sha256(f"{self.key}:{facts}".encode()).hexdigest()[:32]
        return ResultCache(self.file.parent, narrowed)

    def get(self, path: str, digest: str, *, changed: bool = False) -> Outcome | None:
        """The stored outcome of this content; a ``changed`` one only when ``changed`` says
        the caller needs no bytes (``--check``)."""
        entry = self.entries.get(digest)
        if entry is None:
            return None
        try:
            status = Status(entry["status"])
            if status is Status.CHANGED and not changed:
                return None
            diagnostics = [
                Diagnostic(path, line, column, code, Severity(severity), message, *cell)
                for line, column, code, severity, message, *cell in entry["diagnostics"]
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
                # A notebook diagnostic carries its cell as a sixth value.
                [d.line, d.column, d.code, str(d.severity), d.message]
                + ([d.cell] if d.cell is not None else [])
                for d in outcome.diagnostics
            ],
        }
