"""How much of the optimizer and amp migration npu-migrate does by itself, per repository.

    python tools/migration_rates.py REPO [REPO ...] [--markdown] [-- NPU-MIGRATE-OPTIONS]

Runs ``npu-migrate --check --format json`` (all default rules, no cache) over each repository
and counts, from the JSON report:

- optimizer constructions (NPU101): rewritten to an NPU fused optimizer (``fixed``), reported
  for a person (``manual``, or ``info`` advice such as a class used as a value), and among the
  reported ones those that have no NPU counterpart at
  all (apex's FusedLAMB / FusedNovoGrad / FusedAdagrad / FusedMixedPrecisionLamb, FusedAdam's
  ``bias_correction=False``, torch's ``maximize`` / ``differentiable``, Hugging Face's
  ``AdamW``, whose arithmetic no NPU fused optimizer has), which no edit can migrate;
- ``amp.initialize`` calls with optimizers (NPU102): given ``combine_grad=True`` (``fixed``) or
  reported (``manual``), and among the reported ones those whose optimizers (the lines NPU102
  names) all have no NPU counterpart.

The rate is rewritten / (rewritten + reported - no counterpart). Every finding is counted once
per line (a construction reported for two reasons is one construction). The numbers of the
issue "Migrate, don't report" (docs/rules-optimizers.md, "How much is migrated") come from it.

A second column counts the reported constructions that are right as written: torch's own
optimizers that run on NPU unfused, kept because fusing them would break the fused optimizers'
contract (parameters sharded, moved, cast to a dtype the NPU classes refuse, replaced, kept on
the CPU, shared by hogwild workers, gradients replaced by hand, handed to Accelerate or Lightning
Fabric, whose launch configuration may shard them), or because the program's `amp.initialize`
uses an opt level at which Ascend apex refuses NPU fused optimizers (O0, O3, O2 without master
weights). They need nobody; the second rate leaves them aside too: rewritten / (rewritten +
reported - no counterpart - kept).
"""

from __future__ import annotations

import argparse
import json
import re
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
    # NO_FUSED_VERSION (rules/optimizers/_tables.py): Hugging Face's AdamW.
    "is not rewritten: it has no NPU fused version",
)

# Phrases of NPU101's messages for torch optimizers it keeps because of the fused optimizers'
# contract (rules/optimizers/_contract.py and the gradient stores of _hazards.py).
CONTRACT = (
    "shards this optimizer's parameters",
    "into DTensor shards",
    "moves this optimizer's parameters",
    "cast this optimizer's parameters",  # "may cast ..."
    "casts this optimizer's parameters",
    "replaces a parameter of the model",
    "its parameters stay on the CPU",
    "runs in hogwild worker processes",
    "in shared memory for hogwild workers",  # the model's `share_memory()`
    "replaces a gradient tensor",
    "drops a gradient from",
    "wrap this optimizer's parameters as its launch configuration",  # Accelerate, Fabric
    "is a LightningModule: the Trainer hands this optimizer to its strategy",
    "Hugging Face's Trainer, whose loop zeroes the gradients",
    # Ascend apex's own constraints on the `amp.initialize` the optimizer goes through: it
    # refuses NPU fused optimizers at opt levels O0 and O3, and at O2 without master weights.
    "unless opt_level is O1 or O2",
    "needs master weights for NPU fused optimizers",
)
# ... unless the class itself does not run on Ascend (NVIDIA apex's): then a person must act.
NOT_ON_ASCEND = "does not run on Ascend"
# NPU101's edits in the callers of a method whose optimizer it fuses, and of a factory that it
# makes pick its class by amp's condition: not constructions.
CALLER_EDITS = (
    "dropped `set_to_none` from `",
    "passed amp's condition to `",
    "added `zero_grad` to `",  # an optimizer wrapper class (timm's Lookahead)
)


@dataclass
class Counts:
    rewritten: int = 0
    reported: int = 0
    no_counterpart: int = 0
    kept: int = 0
    amp_combined: int = 0
    amp_reported: int = 0
    amp_no_counterpart: int = 0

    @property
    def rate(self) -> float | None:
        denominator = self.rewritten + self.reported - self.no_counterpart
        return self.rewritten / denominator if denominator else None

    @property
    def rate_without_kept(self) -> float | None:
        denominator = self.rewritten + self.reported - self.no_counterpart - self.kept
        return self.rewritten / denominator if denominator else None

    @property
    def amp_rate(self) -> float | None:
        denominator = self.amp_combined + self.amp_reported
        return self.amp_combined / denominator if denominator else None

    @property
    def amp_rate_with_counterpart(self) -> float | None:
        denominator = self.amp_combined + self.amp_reported - self.amp_no_counterpart
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
    missing: set[tuple[str, int]] = set()  # (path, line) of constructions with no counterpart
    for (code, path, line), found in lines.items():
        fixed = any(d["severity"] == "fixed" for d in found)
        if code == "NPU101" and all(d["message"].startswith(CALLER_EDITS) for d in found):
            continue  # a caller's edit for a constructor counted in its own file
        if code == "NPU101":
            if fixed:
                counts.rewritten += 1
                continue
            counts.reported += 1
            messages = [d["message"] for d in found]
            if any(p in m for m in messages for p in NO_COUNTERPART):
                counts.no_counterpart += 1
                missing.add((path, line))
            elif all(any(p in m for p in CONTRACT) and NOT_ON_ASCEND not in m for m in messages):
                counts.kept += 1
    for (code, path, _), found in lines.items():
        if code != "NPU102":
            continue
        if any(d["severity"] == "fixed" for d in found):
            counts.amp_combined += 1
            continue
        counts.amp_reported += 1
        named = {int(n) for d in found for n in re.findall(r"\(line (\d+)\)", d["message"])}
        if named and all((path, n) in missing for n in named):
            counts.amp_no_counterpart += 1
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
        "kept (contract)",
        "rate without kept",
        "amp combine_grad",
        "amp reported",
        "amp no counterpart",
        "amp rate",
        "amp rate with counterpart",
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
            str(counts.kept),
            percent(counts.rate_without_kept),
            str(counts.amp_combined),
            str(counts.amp_reported),
            str(counts.amp_no_counterpart),
            percent(counts.amp_rate),
            percent(counts.amp_rate_with_counterpart),
        )
        print("| " + " | ".join(cells) + " |" if parsed.markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
