"""How much of the optimizer and amp migration npu-migrate does by itself, per repository.

    python tools/migration_rates.py REPO [REPO ...] [--markdown] [-- NPU-MIGRATE-OPTIONS]

Runs ``npu-migrate --check --format json`` (all default rules, no cache) over each repository
and counts, from the JSON report:

- optimizer constructions (NPU101): rewritten to an NPU fused optimizer (``fixed``), reported
  for a person (``manual``, or ``info`` advice such as a class used as a value), and among the
  reported ones those that have no NPU counterpart at
  all (apex's FusedLAMB / FusedNovoGrad / FusedAdagrad / FusedMixedPrecisionLamb, FusedAdam's
  ``bias_correction=False``, torch's ``maximize`` / ``differentiable``), which no edit can migrate;
- ``amp.initialize`` calls with optimizers (NPU102): given ``combine_grad=True`` (``fixed``) or
  reported (``manual``).

The rate is rewritten / (rewritten + reported - no counterpart). Every finding is counted once
per line (a construction reported for two reasons is one construction). The numbers of the
issue "Migrate, don't report" (docs/rules-optimizers.md, "How much is migrated") come from it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Phrases of NPU101's messages for constructions that have no NPU counterpart.
NO_COUNTERPART = (
    # The UNSUPPORTED table (rules/optimizers/_tables.py), also for those classes used as values.
    "has no bias correction, clamps the weight norm",  # FusedLAMB, FusedMixedPrecisionLamb
    "it is a CUDA extension with no NPU version",  # FusedNovoGrad, FusedAdagrad
    "`bias_correction=False` has no NPU equivalent",
    "`maximize",
    "`differentiable",
)


@dataclass
class Counts:
    rewritten: int = 0
    reported: int = 0
    no_counterpart: int = 0
    amp_combined: int = 0
    amp_reported: int = 0

    @property
    def rate(self) -> float | None:
        denominator = self.rewritten + self.reported - self.no_counterpart
        return self.rewritten / denominator if denominator else None

    @property
    def amp_rate(self) -> float | None:
        denominator = self.amp_combined + self.amp_reported
        return self.amp_combined / denominator if denominator else None

    def add(self, other: Counts) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def run(repository: Path, options: Sequence[str]) -> dict:
    command = [
        sys.executable,
        "-m",
        "migrator",
        "--check",
        "--no-cache",
        "--format",
        "json",
        *options,
        str(repository),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1, 2) or not done.stdout.strip():
        raise SystemExit(f"{repository}: npu-migrate failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout)


def diagnostics(report: dict) -> Iterable[dict]:
    yield from report.get("edits", [])
    yield from report.get("diagnostics", [])


def count(report: dict) -> Counts:
    counts = Counts()
    lines: dict[tuple[str, str, int], list[dict]] = {}
    for diagnostic in diagnostics(report):
        if diagnostic["code"] in ("NPU101", "NPU102"):
            key = (diagnostic["code"], diagnostic["path"], diagnostic["line"])
            lines.setdefault(key, []).append(diagnostic)
    for (code, _, _), found in lines.items():
        fixed = any(d["severity"] == "fixed" for d in found)
        if code == "NPU101":
            if fixed:
                counts.rewritten += 1
            else:
                counts.reported += 1
                if any(p in d["message"] for d in found for p in NO_COUNTERPART):
                    counts.no_counterpart += 1
        elif fixed:
            counts.amp_combined += 1
        else:
            counts.amp_reported += 1
    return counts


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    options: list[str] = []
    if "--" in arguments:
        cut = arguments.index("--")
        arguments, options = arguments[:cut], arguments[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repositories", nargs="+", type=Path)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parsed = parser.parse_args(arguments)
    header = (
        "repository",
        "optimizers rewritten",
        "reported",
        "no counterpart",
        "rate",
        "amp combine_grad",
        "amp reported",
        "amp rate",
    )
    rows = []
    total = Counts()
    for repository in parsed.repositories:
        counts = count(run(repository, options))
        total.add(counts)
        rows.append((repository.name, counts))
    rows.append(("all", total))
    if parsed.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    for name, counts in rows:
        cells = (
            name,
            str(counts.rewritten),
            str(counts.reported),
            str(counts.no_counterpart),
            percent(counts.rate),
            str(counts.amp_combined),
            str(counts.amp_reported),
            percent(counts.amp_rate),
        )
        print("| " + " | ".join(cells) + " |" if parsed.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
