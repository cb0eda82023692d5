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

from migrator import api_tables
from migrator.settings import AmpPolicy, Target
from migrator.shell import DEFAULT_PATTERNS as DEFAULT_SHELL_PATTERNS

SECTION = "npu-migrate"
LIST_KEYS = ("select", "ignore", "exclude")
KNOWN_KEYS = (
    *LIST_KEYS,
    "target",
    "unsafe-fixes",
    "rules",
    "torch-npu-version",
    "torch-npu-api",
    "include-shell",
    "baseline",
    "amp",
)


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
    torch_npu_version: str | None = None
    torch_npu_api: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Shell scripts a folder walk scans (`include-shell`): patterns; () off; None: key absent.
    include_shell: tuple[str, ...] | None = None
    # The baseline file of --check (`baseline`), relative to the pyproject.toml's folder.
    baseline: Path | None = None
    amp: AmpPolicy | None = None  # `amp`: how an amp.initialize on some paths only counts

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
        torch_npu_version=_torch_npu_version(path, table),
        torch_npu_api=_torch_npu_api(path, table),
        include_shell=_include_shell(path, table),
        baseline=_baseline(path, table),
        amp=_amp(path, table),
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


def _amp(path: Path, table: Mapping[str, Any]) -> AmpPolicy | None:
    if "amp" not in table:
        return None
    try:
        return AmpPolicy(table["amp"])
    except ValueError:
        choices = ", ".join(repr(policy.value) for policy in AmpPolicy)
        raise ConfigError(f"{path}: `amp` must be one of {choices}") from None


def _include_shell(path: Path, table: Mapping[str, Any]) -> tuple[str, ...] | None:
    """``include-shell = true`` (every ``*.sh`` / ``*.bash``), ``false``, or a list of
    gitignore-style patterns (``["scripts/*.sh"]``)."""
    if "include-shell" not in table:
        return None
    value = table["include-shell"]
    if isinstance(value, bool):
        return DEFAULT_SHELL_PATTERNS if value else ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: `include-shell` must be true, false or a list of patterns")
    return tuple(item.strip() for item in value if item.strip())


def _baseline(path: Path, table: Mapping[str, Any]) -> Path | None:
    if "baseline" not in table:
        return None
    value = table["baseline"]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f'{path}: `baseline` must be a file name such as "npu-migrate-baseline.json"'
        )
    return path.parent / value.strip()


def _boolean(path: Path, table: Mapping[str, Any], key: str) -> bool | None:
    if key not in table:
        return None
    if not isinstance(table[key], bool):
        raise ConfigError(f"{path}: `{key}` must be true or false")
    return table[key]


def _torch_npu_version(path: Path, table: Mapping[str, Any]) -> str | None:
    if "torch-npu-version" not in table:
        return None
    version = table["torch-npu-version"]
    if not isinstance(version, str):
        raise ConfigError(f'{path}: `torch-npu-version` must be a string such as "2.7.1"')
    try:
        api_tables.release_line(version)
    except api_tables.TableError as error:
        raise ConfigError(f"{path}: `torch-npu-version`: {error}") from None
    return version


def _torch_npu_api(path: Path, table: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``[tool.npu-migrate.torch-npu-api."torch.nn.GRU"]`` entries, validated here so that a
    mistake stops the run before any file is read."""
    raw = table.get("torch-npu-api", {})
    try:
        api_tables.parse_overrides(raw, f"{path}: [tool.{SECTION}.torch-npu-api]")
    except api_tables.TableError as error:
        raise ConfigError(str(error)) from None
    return {name: dict(entry) for name, entry in raw.items()}


def _rule_options(path: Path, table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    rules = table.get("rules", {})
    if not isinstance(rules, dict) or not all(isinstance(v, dict) for v in rules.values()):
        raise ConfigError(
            f"{path}: per-rule options go in tables like [tool.{SECTION}.rules.NPU101]"
        )
    from migrator.registry import all_rules  # importing the rules is only needed here

    known = {rule.CODE: rule for rule in all_rules()}
    unknown = sorted(code for code in rules if code.upper() not in known)
    if unknown:
        raise ConfigError(f"{path}: options for unknown rule(s): {', '.join(unknown)}")
    for code, options in rules.items():
        try:
            known[code.upper()].validate_options(options)
        except ValueError as error:
            raise ConfigError(f"{path}: [tool.{SECTION}.rules.{code}]: {error}") from None
    return {code.upper(): dict(options) for code, options in rules.items()}
