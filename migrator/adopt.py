"""What the CLI does to adopt ``--check`` on a repository with findings left: apply a baseline,
write one, add suppression comments until ``--check`` passes, and write the HTML report.

The pieces live in :mod:`migrator.baseline`, :mod:`migrator.suppress_writer` and
:mod:`migrator.formats.html`; this module joins them to a run's result for :mod:`migrator.cli`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrator import baseline as baselines
from migrator.diagnostics import Diagnostic
from migrator.files import write_atomic
from migrator.formats import ProjectPaths, RuleInfo
from migrator.formats import html as html_report
from migrator.jobs import Mode
from migrator.originals import Originals
from migrator.results import Status
from migrator.runner import RunResult
from migrator.suppress_writer import Refused, write_suppressions

# --add-suppressions runs --check again after writing, in case a suppressed finding lets a rule
# report something else; a few rounds settle every case seen, more would hide a loop.
SUPPRESSION_ROUNDS = 3


@dataclass
class BaselineRun:
    """A run's result against its baseline: what the reports show and what was found stale."""

    file: Path
    result: RunResult  # baselined findings removed
    comparison: baselines.Comparison
    written: int | None = None  # --write-baseline: entries written

    def to_json(self) -> dict[str, Any]:
        document = self.comparison.to_json(self.file)
        if self.written is not None:
            document["written"] = self.written
        return document

    def lines(self) -> list[str]:
        stale = self.comparison.stale
        lines = [f"stale baseline entry: {entry.describe()}" for entry in stale]
        if self.written is not None:
            lines.append(f"wrote baseline {self.file} ({self.written} finding(s))")
        else:
            entries = "entry" if len(stale) == 1 else "entries"
            lines.append(
                f"baseline {self.file}: {len(self.comparison.baselined)} known finding(s) not "
                f"shown, {len(self.comparison.new)} new, {len(stale)} stale {entries}"
                + (" (--write-baseline drops them)" if stale else "")
            )
        return lines


def read_baseline(file: Path, writing: bool) -> baselines.Baseline:
    """The baseline in ``file``; an empty one when it is about to be written and does not
    exist yet. Raises :class:`~migrator.baseline.BaselineError`."""
    if writing and not file.exists():
        return baselines.Baseline()
    return baselines.Baseline.load(file)


def apply_baseline(
    result: RunResult,
    baseline: baselines.Baseline,
    file: Path,
    write: bool,
    paths: ProjectPaths,
    originals: Originals,
    arguments: Sequence[str],
    codes: Sequence[str],
) -> BaselineRun:
    """Compare the run with ``baseline``; with ``write``, first replace the entries the run
    covers by its findings and write the file (raises ``OSError``)."""
    found = baselines.fingerprint(result, paths, originals)
    scope = baselines.Scope.of(result, paths, arguments, codes)
    written = None
    if write:
        baseline = baselines.updated(baseline, found, scope)
        baseline.write(file)
        written = len(baseline.entries)
    comparison = baselines.compare(baseline, found, scope)
    return BaselineRun(file, baselines.without_baselined(result, comparison), comparison, written)


# -- --add-suppressions ---------------------------------------------------------------------------


@dataclass
class Suppressed:
    """What ``--add-suppressions`` did over all its rounds."""

    by_file: dict[str, int] = field(default_factory=dict)  # findings suppressed per file
    refused: list[Refused] = field(default_factory=list)  # of the last round
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path, why not written)

    @property
    def total(self) -> int:
        return sum(self.by_file.values())

    def to_json(self, paths: ProjectPaths) -> dict[str, Any]:
        return {
            "added": self.total,
            "files": [
                {"path": paths.shown(path), "suppressed": count}
                for path, count in sorted(self.by_file.items())
            ],
            "refused": [
                {**refused.diagnostic.to_json(), "reason": refused.reason}
                for refused in self.refused
            ],
            "failures": [
                {"path": paths.shown(path), "reason": reason} for path, reason in self.failures
            ],
        }


def suppressible(result: RunResult) -> dict[str, list[Diagnostic]]:
    """The manual and info findings of each file that was analysed, by path."""
    found: dict[str, list[Diagnostic]] = {}
    for outcome in result.outcomes:
        if outcome.status in (Status.CHANGED, Status.UNCHANGED):
            findings = [d for d in outcome.diagnostics if d.severity in baselines.BASELINED]
            if findings:
                found[outcome.path] = findings
    return found


def add_suppressions(run_check: Callable[[], RunResult]) -> tuple[RunResult, Suppressed]:
    """Run ``--check``, suppress what it finds, and again until nothing more can be written;
    returns the last run's result (what ``--check`` now says) and what was written."""
    done = Suppressed()
    for round_number in range(SUPPRESSION_ROUNDS + 1):
        result = run_check()
        wanted = suppressible(result)
        if round_number == SUPPRESSION_ROUNDS or not wanted:
            break
        done.refused = []
        wrote = False
        for path, findings in wanted.items():
            try:
                with open(path, "rb") as stream:
                    source = stream.read()
                written = write_suppressions(path, source, findings)
            except OSError as error:
                done.failures.append((path, f"cannot write suppressions: {error}"))
                continue
            done.refused.extend(written.refused)
            if written.data is not None:
                done.by_file[path] = done.by_file.get(path, 0) + written.suppressed
                wrote = True
        if not wrote:
            break
    return result, done


def suppression_lines(done: Suppressed, verbose: bool) -> list[str]:
    lines = []
    if verbose:
        for path, count in sorted(done.by_file.items()):
            lines.append(f"suppressed {count} finding(s) in {path}")
    lines.extend(
        f"cannot suppress {refused.diagnostic.location}: {refused.diagnostic.code}: "
        f"{refused.reason}"
        for refused in done.refused
    )
    lines.append(
        f"added suppression comments for {done.total} finding(s) in {len(done.by_file)} file(s)"
    )
    return lines


# -- --format html / --html -----------------------------------------------------------------------


def write_html(
    file: Path,
    page: html_report.Page,
    run_mode: Mode,
    originals: Originals,
    destinations: Mapping[str, str],
) -> int:
    """Write the report page to ``file`` (its folder created); returns the files it lists.
    Raises ``OSError``."""
    entries = list(
        html_report.file_entries(page.result, run_mode, originals, page.paths, destinations)
    )
    text = html_report.render(page.data(entries))
    folder = file.parent
    os.makedirs(folder, exist_ok=True)
    write_atomic(str(file), text.encode("utf-8"), 0o644)
    return len(entries)


def html_page(
    result: RunResult,
    mode: Mode,
    rules: Sequence[RuleInfo],
    paths: ProjectPaths,
    arguments: Sequence[str],
    exit_code: int,
    baseline: BaselineRun | None,
) -> html_report.Page:
    return html_report.Page(
        result,
        mode,
        rules,
        paths,
        arguments,
        exit_code,
        baseline.to_json() if baseline is not None else None,
    )
