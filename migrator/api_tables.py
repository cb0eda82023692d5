"""The torch_npu API tables: which torch APIs a torch_npu release does not support, or supports
with different behaviour (rules NPU930 and NPU931).

One TOML file per torch_npu release line in ``migrator/data/torch_npu/`` (built by
``tools/build_torch_npu_tables.py`` from Ascend's published API support lists; each file's
``[source]`` table names the repository, commit and folder it comes from)::

    [source]
    release = "2.7.1"
    ...
    [api."torch.nn.GRU"]
    status = "unsupported"              # or "supported-with-note"
    note = "..."
    npu-name = "torch.npu.NPUGraph"     # optional: the name the API has under torch_npu

A project adds or overrides entries in ``[tool.npu-migrate.torch-npu-api."<qualified name>"]``
with the same keys; ``status = "supported"`` removes an entry. Every name must be a dotted
qualified name under a ``torch*`` package: the rules' pre-scan looks for "torch".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

STATUSES = ("unsupported", "supported-with-note")
OVERRIDE_STATUSES = (*STATUSES, "supported")
ENTRY_KEYS = {"status", "note", "npu-name"}
SOURCE_KEYS = ("release", "repository", "branch", "commit", "path", "url")
QUALIFIED_NAME = re.compile(r"torch\w*(\.[A-Za-z_]\w*)+")
RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class TableError(ValueError):
    """A table or an override is malformed, or no table exists for a release."""


@dataclass(frozen=True)
class ApiEntry:
    name: str
    status: str
    note: str
    npu_name: str | None = None
    origin: str = "table"  # "table", or the pyproject that added or changed it

    @property
    def unsupported(self) -> bool:
        return self.status == "unsupported"


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: tables are cached
class ApiTable:
    release: str
    source: Mapping[str, str]
    entries: Mapping[str, ApiEntry]
    by_npu_name: Mapping[str, ApiEntry]

    @classmethod
    def build(
        cls, release: str, source: Mapping[str, str], entries: Mapping[str, ApiEntry]
    ) -> ApiTable:
        by_npu_name: dict[str, ApiEntry] = {}
        for entry in entries.values():
            for spelling in npu_spellings(entry.npu_name) if entry.npu_name else ():
                by_npu_name.setdefault(spelling, entry)
        return cls(release, source, entries, by_npu_name)

    def lookup(self, name: str) -> ApiEntry | None:
        """The entry for a qualified name, also under its torch_npu spelling
        (``torch.npu.NPUGraph`` or ``torch_npu.npu.NPUGraph``)."""
        return self.entries.get(name) or self.by_npu_name.get(name)


def npu_spellings(name: str) -> tuple[str, ...]:
    """``torch.npu.X`` and ``torch_npu.npu.X`` are the same object once torch_npu is imported."""
    for one, other in (("torch.npu.", "torch_npu.npu."), ("torch_npu.npu.", "torch.npu.")):
        if name.startswith(one):
            return (name, other + name.removeprefix(one))
    return (name,)


# -- the packaged tables -------------------------------------------------------------------------


def _data_folder() -> Path:
    # A folder of the installed package (never a zip): read without importlib.resources, which
    # costs a run that reads no table more than the rest of this module.
    return Path(__file__).resolve().parent / "data" / "torch_npu"


@cache
def releases() -> tuple[str, ...]:
    """The release lines that have a table, oldest first."""
    found = [
        item.name.removesuffix(".toml")
        for item in _data_folder().iterdir()
        if item.name.endswith(".toml") and RELEASE.fullmatch(item.name.removesuffix(".toml"))
    ]
    return tuple(sorted(found, key=_release_key))


def _release_key(release: str) -> tuple[int, ...]:
    match = RELEASE.fullmatch(release)
    assert match is not None
    return tuple(int(part) for part in match.groups())


def newest_release() -> str:
    return releases()[-1]


def release_line(version: str | None) -> str:
    """The table to use for ``version``: ``2.7.1``, ``2.7.1.post2`` and ``2.7.1rc1`` all mean
    the 2.7.1 line; None means the newest. Raises TableError when there is no such table."""
    if version is None:
        return newest_release()
    match = RELEASE.match(version.strip())
    line = ".".join(match.groups()) if match else version.strip()
    if line not in releases():
        raise TableError(
            f"no torch_npu API table for {version!r} (available: {', '.join(releases())})"
        )
    return line


@cache
def packaged_table(release: str) -> ApiTable:
    """The table shipped for one release line, validated."""
    item = _data_folder() / f"{release}.toml"
    where = f"migrator/data/torch_npu/{release}.toml"
    import tomllib  # only a run whose files reach NPU930 or NPU931 reads a table

    try:
        document = tomllib.loads(item.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise TableError(f"cannot read {where}: {error}") from error
    return parse_table(document, where)


def parse_table(document: Mapping[str, Any], where: str) -> ApiTable:
    """Validate a table document (see the module docstring)."""
    unknown = sorted(set(document) - {"source", "api"})
    if unknown:
        raise TableError(f"{where}: unknown top-level key(s): {', '.join(unknown)}")
    source = document.get("source")
    if not isinstance(source, dict):
        raise TableError(f"{where}: a [source] table is required")
    for key in SOURCE_KEYS:
        if not isinstance(source.get(key), str) or not source[key]:
            raise TableError(f"{where}: [source] needs a non-empty string `{key}`")
    release = source["release"]
    api = document.get("api", {})
    if not isinstance(api, dict):
        raise TableError(f"{where}: `api` must be a table of entries")
    entries = {name: parse_entry(name, raw, where, STATUSES) for name, raw in api.items()}
    return ApiTable.build(release, dict(source), {n: e for n, e in entries.items() if e})


def parse_entry(
    name: str, raw: Any, where: str, statuses: tuple[str, ...], origin: str = "table"
) -> ApiEntry | None:
    """One entry; None for ``status = "supported"`` (an override that removes an entry)."""
    label = f'{where}: [api."{name}"]' if origin == "table" else f'{where}: "{name}"'
    if not QUALIFIED_NAME.fullmatch(name):
        raise TableError(f"{label}: not a qualified name under a torch package (e.g. torch.nn.GRU)")
    if not isinstance(raw, dict):
        raise TableError(f"{label} must be a table with `status` and `note`")
    unknown = sorted(set(raw) - ENTRY_KEYS)
    if unknown:
        raise TableError(
            f"{label}: unknown key(s) {', '.join(unknown)} (known: status, note, npu-name)"
        )
    status = raw.get("status")
    if status not in statuses:
        raise TableError(f"{label}: `status` must be one of {', '.join(map(repr, statuses))}")
    if status == "supported":
        return None
    note = raw.get("note")
    if not isinstance(note, str) or not note.strip():
        raise TableError(f"{label}: `note` must be a non-empty string")
    npu_name = raw.get("npu-name")
    if npu_name is not None and (
        not isinstance(npu_name, str) or not QUALIFIED_NAME.fullmatch(npu_name)
    ):
        raise TableError(f"{label}: `npu-name` must be a qualified name under a torch package")
    return ApiEntry(name, status, note.strip(), npu_name, origin)


# -- a project's overrides -----------------------------------------------------------------------


def parse_overrides(raw: Any, where: str) -> dict[str, ApiEntry | None]:
    """``[tool.npu-migrate.torch-npu-api]`` validated: name -> entry, or None to remove one."""
    if not isinstance(raw, dict):
        raise TableError(
            f'{where}: entries go in tables like [tool.npu-migrate.torch-npu-api."torch.nn.GRU"]'
        )
    return {
        name: parse_entry(name, value, where, OVERRIDE_STATUSES, origin=where)
        for name, value in raw.items()
    }


OVERRIDES_LABEL = "[tool.npu-migrate.torch-npu-api]"


def table_for(version: str | None, overrides: Mapping[str, Any]) -> ApiTable:
    """The table of ``version``'s release line with a project's overrides (the raw
    ``[tool.npu-migrate.torch-npu-api]`` tables) applied. Cached: every file asks."""
    key = json.dumps(overrides, sort_keys=True)
    return _merged(release_line(version), key)


@cache
def _merged(release: str, overrides_json: str) -> ApiTable:
    table = packaged_table(release)
    overrides = parse_overrides(json.loads(overrides_json), OVERRIDES_LABEL)
    if not overrides:
        return table
    entries = dict(table.entries)
    for name, entry in overrides.items():
        if entry is None:
            entries.pop(name, None)
        else:
            entries[name] = entry
    return ApiTable.build(table.release, table.source, entries)
