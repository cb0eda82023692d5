"""``[tool.npu-migrate]`` in the nearest ``pyproject.toml``.

The nearest file is the first ``pyproject.toml`` with a ``[tool.npu-migrate]`` table found walking
up from the common folder of the paths on the command line (ruff's rule: a ``pyproject.toml``
without the table does not hide the one of an enclosing project). Command-line options win over
the file; see :func:`migrator.cli.main` for how the two are merged.

Every key is checked: a typo is an error, not a silently ignored setting.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrator.rule import Target

SECTION = "npu-migrate"
LIST_KEYS = ("select", "ignore", "exclude")
KNOWN_KEYS = (*LIST_KEYS, "target", "unsafe-fixes", "rules")


class ConfigError(ValueError):
    """The configuration file cannot be read or holds an invalid value."""


@dataclass(frozen=True)
class FileConfig:
    """What ``[tool.npu-migrate]`` says; ``None`` means the key is absent."""

    path: Path | None = None  # the pyproject.toml it came from
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    target: Target | None = None
    unsafe_fixes: bool | None = None
    rule_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """The project folder: exclude patterns with a ``/`` are relative to it."""
        return self.path.parent if self.path is not None else Path.cwd()


def find_pyproject(paths: Iterable[Path]) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.npu-migrate]`` table above ``paths``."""
    start = common_folder(paths)
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and SECTION in _tool_tables(candidate):
            return candidate
    return None


def common_folder(paths: Iterable[Path]) -> Path:
    resolved = [path.resolve() for path in paths] or [Path.cwd()]
    folders = [path if path.is_dir() else path.parent for path in resolved]
    return Path(os.path.commonpath(folders))


def load_config(path: Path | None) -> FileConfig:
    """Read and validate the ``[tool.npu-migrate]`` table of ``path`` (``None``: defaults)."""
    if path is None:
        return FileConfig()
    table = _tool_tables(path).get(SECTION, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{SECTION}] must be a table")
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) in [tool.{SECTION}]: {', '.join(unknown)} "
            f"(known: {', '.join(KNOWN_KEYS)})"
        )
    return FileConfig(
        path=path,
        select=_codes(path, table, "select"),
        ignore=_codes(path, table, "ignore"),
        exclude=_codes(path, table, "exclude", upper=False) or (),
        target=_target(path, table),
        unsafe_fixes=_boolean(path, table, "unsafe-fixes"),
        rule_options=_rule_options(path, table),
    )


def _tool_tables(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as stream:
            document = tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from error
    tool = document.get("tool", {})
    return tool if isinstance(tool, dict) else {}


def _codes(
    path: Path, table: Mapping[str, Any], key: str, *, upper: bool = True
) -> tuple[str, ...] | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, str):  # `select = "NPU1"` is a common shorthand
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: `{key}` must be a list of strings")
    return tuple(item.strip().upper() if upper else item.strip() for item in value)


def _target(path: Path, table: Mapping[str, Any]) -> Target | None:
    if "target" not in table:
        return None
    try:
        return Target(table["target"])
    except ValueError:
        choices = ", ".join(repr(t.value) for t in Target)
        raise ConfigError(f"{path}: `target` must be one of {choices}") from None


def _boolean(path: Path, table: Mapping[str, Any], key: str) -> bool | None:
    if key not in table:
        return None
    if not isinstance(table[key], bool):
        raise ConfigError(f"{path}: `{key}` must be true or false")
    return table[key]


def _rule_options(path: Path, table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    rules = table.get("rules", {})
    if not isinstance(rules, dict) or not all(isinstance(v, dict) for v in rules.values()):
        raise ConfigError(
            f"{path}: per-rule options go in tables like [tool.{SECTION}.rules.NPU101]"
        )
    from migrator.registry import all_rules  # importing the rules is only needed here

    known = {rule.CODE for rule in all_rules()}
    unknown = sorted(code for code in rules if code.upper() not in known)
    if unknown:
        raise ConfigError(f"{path}: options for unknown rule(s): {', '.join(unknown)}")
    return {code.upper(): dict(options) for code, options in rules.items()}
