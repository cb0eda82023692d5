"""``--statistics``: one line per rule code with its counts, most frequent first (ruff's
``--statistics``), instead of one line per finding.

```
  630  NPU920  data-parallel              630 manual
   12  NPU301  cuda-method                12 fixable
    5  NPU302  torch-cuda-api             3 fixable, 2 manual
```

Errors (files that could not be processed) are not a rule's findings: they are listed on
stderr as always.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migrator.diagnostics import Severity
from migrator.jobs import Mode
from migrator.report import fixed_label
from migrator.runner import RunResult

COUNTED = (Severity.FIXED, Severity.MANUAL, Severity.INFO)


@dataclass(frozen=True)
class Statistic:
    code: str
    name: str
    counts: Mapping[Severity, int]

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "count": self.count,
            **{str(severity): self.counts.get(severity, 0) for severity in COUNTED},
        }


def statistics(result: RunResult, names: Mapping[str, str]) -> list[Statistic]:
    """Per rule code, how many edits and findings the run has; most first, then by code."""
    by_code: dict[str, Counter[Severity]] = {}
    for outcome in result.outcomes:
        for diagnostic in outcome.diagnostics:
            if diagnostic.severity in COUNTED:
                by_code.setdefault(diagnostic.code, Counter())[diagnostic.severity] += 1
    found = [Statistic(code, names.get(code, ""), dict(c)) for code, c in by_code.items()]
    return sorted(found, key=lambda statistic: (-statistic.count, statistic.code))


def statistic_lines(found: Sequence[Statistic], mode: Mode) -> Iterator[str]:
    if not found:
        return
    width = len(str(found[0].count))
    name_width = max(len(statistic.name) for statistic in found)
    for statistic in found:
        parts = [
            f"{statistic.counts[severity]} "
            + (fixed_label(mode) if severity is Severity.FIXED else str(severity))
            for severity in COUNTED
            if statistic.counts.get(severity)
        ]
        yield (
            f"{statistic.count:>{width}}  {statistic.code:<7} "
            f"{statistic.name:<{name_width}}  {', '.join(parts)}"
        ).rstrip()
