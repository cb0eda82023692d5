"""``--format github``: GitHub Actions workflow commands, one annotation per diagnostic.

``::error file=src/train.py,line=12,col=5,title=NPU920 data-parallel (manual)::message``

The runner turns each line into an annotation on the file and line of the pull request. Levels:
``error`` for manual diagnostics and for files that could not be processed, ``warning`` for
what ``--check`` / ``--diff`` would rewrite, ``notice`` for edits already written and info
diagnostics. A notebook diagnostic names the file only, its cell position leads the message.
Escaping follows GitHub's workflow-command rules: in the message ``%``, CR and LF
are percent-encoded; in property values (``file``, ``title``) ``:`` and ``,`` are as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from migrator.diagnostics import Severity
from migrator.formats import Finding, ProjectPaths, RuleInfo, findings, severity_label
from migrator.jobs import Mode
from migrator.runner import RunResult

COMMANDS = {
    "manual": "error",
    "error": "error",
    "fixable": "warning",
    "fixed": "notice",
    "info": "notice",
}


def annotation_lines(
    result: RunResult, mode: Mode, rules: Sequence[RuleInfo], paths: ProjectPaths
) -> Iterator[str]:
    """One workflow command per diagnostic, in path, line and column order."""
    names = {rule.code: rule.name for rule in rules}
    for finding in findings(result, paths):
        yield annotation(finding, mode, names)


def annotation(finding: Finding, mode: Mode, names: dict[str, str]) -> str:
    diagnostic = finding.diagnostic
    label = severity_label(diagnostic.severity, mode)
    if diagnostic.severity is Severity.ERROR:
        title = "npu-migrate could not process this file"
    else:
        title = " ".join(filter(None, (diagnostic.code, names.get(diagnostic.code))))
        title += f" ({label})"
    properties = {"file": finding.path}
    if not finding.in_cell:  # a notebook cell's line is no line of the .ipynb file
        properties |= {"line": str(diagnostic.line), "col": str(diagnostic.column)}
    properties["title"] = title
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{COMMANDS[label]} {rendered}::{escape_data(finding.message)}"


def escape_data(text: str) -> str:
    """A command's message: ``%`` first, so that the encodings added after stay intact."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value: ``:`` would end the properties and ``,`` separate them."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")
