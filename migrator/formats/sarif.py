"""``--format sarif``: one SARIF 2.1.0 log, for GitHub code scanning and other SARIF viewers.

The log has one run. Its ``tool.driver.rules`` holds one reporting descriptor per rule that ran
(id, name, summary, the "What it does" section, the whole ``--explain`` text as help, the fix
safety as a property); each diagnostic is a result that points at its rule by id and index.
Files the run could not process are not results of any rule: they are the invocation's
``toolExecutionNotifications``, and ``executionSuccessful`` is false when the run exits 2.

Locations are relative to the project folder (:class:`~migrator.formats.ProjectPaths`) under
the base id ``%SRCROOT%``, which ``run.originalUriBaseIds`` maps to the folder's ``file:`` URI;
a file outside the project gets an absolute ``file:`` URI and no base id. Columns are counted
in Unicode code points (``run.columnKind``), as everywhere else in npu-migrate. A notebook
diagnostic has no region (its cell, line and column lead the message and its ``cell`` is a
property).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import migrator
from migrator.diagnostics import Severity
from migrator.formats import Finding, ProjectPaths, RuleInfo, findings, severity_label
from migrator.jobs import Mode
from migrator.runner import RunResult
from migrator.settings import Settings

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SOURCE_ROOT = "%SRCROOT%"
EXIT_ERROR = 2

# A person must change the code: an error, as it fails `--check`. What npu-migrate rewrites
# (or would) and what is only worth knowing are lighter.
LEVELS = {"manual": "error", "fixable": "warning", "fixed": "note", "info": "note"}


def sarif_log(
    result: RunResult,
    mode: Mode,
    rules: Sequence[RuleInfo],
    settings: Settings,
    paths: ProjectPaths,
    exit_code: int,
) -> dict[str, Any]:
    """The whole SARIF document of a run."""
    index = {rule.code: position for position, rule in enumerate(rules)}
    everything = findings(result, paths)
    results = [
        _result(finding, mode, paths, index)
        for finding in everything
        if finding.diagnostic.severity is not Severity.ERROR
    ]
    notifications = [
        _notification(finding, paths)
        for finding in everything
        if finding.diagnostic.severity is Severity.ERROR
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": _driver(rules)},
                "invocations": [
                    {
                        "executionSuccessful": exit_code != EXIT_ERROR,
                        "exitCode": exit_code,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "originalUriBaseIds": {SOURCE_ROOT: {"uri": paths.root_uri}},
                "columnKind": "unicodeCodePoints",
                "results": results,
                "properties": {
                    "mode": str(mode),
                    "target": str(settings.target),
                    "unsafeFixes": settings.unsafe_fixes,
                },
            }
        ],
    }


def _driver(rules: Sequence[RuleInfo]) -> dict[str, Any]:
    return {
        "name": "npu-migrate",
        "version": migrator.__version__,
        "semanticVersion": migrator.__version__,
        "rules": [_descriptor(rule) for rule in rules],
    }


def _descriptor(rule: RuleInfo) -> dict[str, Any]:
    """One rule: its help is the ``--explain`` text, which is Markdown."""
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.what_it_does},
        "help": {"text": rule.documentation, "markdown": rule.documentation},
        "properties": {
            "fixSafety": rule.fix_safety,
            "tags": ["npu-migrate", "ascend", f"fix-safety:{rule.fix_safety}"],
        },
    }


def _result(
    finding: Finding, mode: Mode, paths: ProjectPaths, index: dict[str, int]
) -> dict[str, Any]:
    diagnostic = finding.diagnostic
    label = severity_label(diagnostic.severity, mode)
    result: dict[str, Any] = {
        "ruleId": diagnostic.code,
        "level": LEVELS[label],
        "message": {"text": finding.message},
        "locations": [_location(finding, paths)],
        "properties": {"severity": label},
    }
    if finding.in_cell:
        result["properties"]["cell"] = diagnostic.cell
    if diagnostic.code in index:
        result["ruleIndex"] = index[diagnostic.code]
    return result


def _notification(finding: Finding, paths: ProjectPaths) -> dict[str, Any]:
    """A file that could not be processed (syntax error, unreadable, internal error)."""
    return {
        "level": "error",
        "message": {"text": finding.message},
        "locations": [_location(finding, paths)],
        "descriptor": {"id": finding.diagnostic.code},
    }


def _location(finding: Finding, paths: ProjectPaths) -> dict[str, Any]:
    """The file and, except in a notebook (whose cell lines are no lines of the file), the
    region's start."""
    diagnostic = finding.diagnostic
    physical: dict[str, Any] = {"artifactLocation": artifact_location(diagnostic.path, paths)}
    if not finding.in_cell:
        physical["region"] = {"startLine": diagnostic.line, "startColumn": diagnostic.column}
    return {"physicalLocation": physical}


def artifact_location(path: str, paths: ProjectPaths) -> dict[str, str]:
    """A relative URI under ``%SRCROOT%``, or an absolute ``file:`` URI outside the project
    (SARIF allows a base id only with a relative reference)."""
    relative = paths.relative(path)
    if relative is None:
        return {"uri": Path(paths.shown(path)).as_uri()}
    return {"uri": quote(relative), "uriBaseId": SOURCE_ROOT}
