"""From one staged file to a monorepo: start-up, small trees, msFmkTransplt, memory.

    .venv/bin/python bench/bench_scale.py [--examples DIR] [--msfmk PATH] [--source DIR]
                                          [--repeat N] [--json FILE]

One command, every figure a ratio to a baseline measured in the same run, on the same machine
(printed first, with the date and the load):

- **one clean file** (a pre-commit hook's case): CPU of ``npu-migrate --check --no-cache -q``
  (the console script next to this Python, else ``python -m migrator``) on a file that needs
  nothing, against ``python -c "import ast"``, the interpreter's own start-up; ``--repeat``
  interleaved pairs (default 10);
- **a small tree** (``--examples``, a pytorch/examples checkout): ``--check`` wall and CPU with
  the default job count against ``-j 1``, interleaved pairs;
- **msFmkTransplt** (``--msfmk``, a checkout of Ascend's mstt with ``msfmktransplt/``): CPU of
  ``npu-migrate -o`` of the ``--examples`` tree against msFmkTransplt's migration of the same
  tree (``ms_fmk_transplt.py -i TREE -o OUT -v 2.1.0``) run with ``--msfmk-python`` (it needs
  libcst, pandas, prettytable and jedi); ``--msfmk-repeat`` rounds (default 1: about two
  CPU-minutes each);
- **a monorepo** (``--source``, e.g. a ModelZoo-PyTorch checkout): ``--check`` of the whole tree
  (default job count, no cache) against the ``ast.parse`` floor (read and parse every ``.py``
  file in one process), CPU, wall and the peak resident memory of the process tree (main process
  and workers, summed, sampled every 20 ms).

Children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed), as an installed
npu-migrate runs; one unmeasured run of each command comes first. Then the targets, each MET or
MISSED: one clean file within 5x the interpreter's start-up; the default job count never slower
than ``-j 1`` (median of the pairs' wall ratios within 1.05, the noise of a shared machine);
``-o`` at least 100x less CPU than msFmkTransplt; the monorepo's ``--check`` within 2x its
``ast.parse`` floor and under 1 GB at its peak.

A benchmark, not a test: figures depend on the machine and its load; read the ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_check import BASELINES, MB, Sample, measured

CLEAN_FILE = "import os\n\n\ndef add(a, b):\n    return a + b\n"
GB = 1024 * MB


@dataclass
class Pair:
    """Interleaved runs of a command (``a``) and its baseline (``b``)."""

    a: list[Sample] = field(default_factory=list)
    b: list[Sample] = field(default_factory=list)

    def ratio(self, figure: Callable[[Sample], float]) -> float:
        """The median of the pairs' ratios (a drifting load hits both sides of a pair)."""
        return statistics.median(figure(a) / figure(b) for a, b in zip(self.a, self.b, strict=True))


def cpu(sample: Sample) -> float:
    return sample.cpu


def wall(sample: Sample) -> float:
    return sample.wall


def spread(samples: list[Sample], figure: Callable[[Sample], float]) -> str:
    values = [figure(sample) for sample in samples]
    return f"{min(values):.3f} / {statistics.median(values):.3f}"


def interleaved(a: list[str], b: list[str], rounds: int, cwd: Path | None = None) -> Pair:
    measured(a, cwd), measured(b, cwd)  # warm-up: bytecode written, files in the page cache
    pair = Pair()
    for _ in range(rounds):
        pair.a.append(measured(a, cwd))
        pair.b.append(measured(b, cwd))
    return pair


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{datetime.date.today():%d %B %Y}; {model}, {cpus} CPUs available, load average "
        f"{load}; Python {platform.python_version()}"
    )


def installed_command() -> list[str]:
    """``npu-migrate`` as installed next to this Python, what a user (and a pre-commit hook)
    runs; ``python -m migrator`` where there is no such script."""
    script = Path(sys.executable).with_name("npu-migrate")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "migrator"]


@dataclass
class Report:
    """What the run prints: markdown tables, the figures for ``--json``, the targets."""

    figures: dict[str, object] = field(default_factory=dict)
    targets: list[tuple[str, float, str, bool]] = field(default_factory=list)

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        print("| " + " | ".join(header) + " |")
        print("|---|" + "---:|" * (len(header) - 1))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        print()

    def target(self, name: str, value: float, unit: str, met: bool) -> None:
        self.targets.append((name, value, unit, met))


def median(samples: list[Sample], figure: Callable[[Sample], float]) -> float:
    return statistics.median(figure(sample) for sample in samples)


def bench_clean_file(report: Report, cli: list[str], work: Path, rounds: int) -> None:
    (work / "clean.py").write_text(CLEAN_FILE)
    pair = interleaved(
        [*cli, "--check", "clean.py"], [sys.executable, "-c", "import ast"], rounds, work
    )
    ratio = pair.ratio(cpu)
    report.table(
        ["one clean file, CPU s (min / median)", "npu-migrate --check", "python -c 'import ast'",
         "ratio"],
        [[f"{rounds} interleaved pairs", spread(pair.a, cpu), spread(pair.b, cpu),
          f"{ratio:.2f}x"]],
    )  # fmt: skip
    report.figures["clean_file"] = {
        "cpu_median": median(pair.a, cpu),
        "python_cpu_median": median(pair.b, cpu),
        "ratio": ratio,
    }
    report.target("one clean file --check CPU", ratio, "x python's start-up (<= 5)", ratio <= 5)


def bench_jobs(report: Report, cli: list[str], examples: Path, rounds: int) -> None:
    files = list(examples.rglob("*.py"))
    size = sum(path.stat().st_size for path in files)
    pair = interleaved(
        [*cli, "--check", str(examples)], [*cli, "--check", "-j", "1", str(examples)], rounds
    )
    wall_ratio, cpu_ratio = pair.ratio(wall), pair.ratio(cpu)
    report.table(
        [f"{examples.name} ({len(files)} files, {size / MB:.1f} MB) --check, s (min / median)",
         "default jobs", "-j 1", "ratio"],
        [["wall", spread(pair.a, wall), spread(pair.b, wall), f"{wall_ratio:.2f}x"],
         ["CPU", spread(pair.a, cpu), spread(pair.b, cpu), f"{cpu_ratio:.2f}x"]],
    )  # fmt: skip
    report.figures["examples_check"] = {
        "default_wall_median": median(pair.a, wall),
        "j1_wall_median": median(pair.b, wall),
        "wall_ratio": wall_ratio,
        "cpu_ratio": cpu_ratio,
    }
    report.target("default jobs vs -j 1, wall", wall_ratio, "x (<= 1.05)", wall_ratio <= 1.05)


def bench_output(
    report: Report, cli: list[str], examples: Path, work: Path, rounds: int, args: Any
) -> None:
    ours = []
    for round_number in range(rounds + 1):
        out = work / f"out-{round_number}"
        sample = measured([*cli, "-o", str(out), str(examples)])
        shutil.rmtree(out, ignore_errors=True)
        if round_number:  # the first one is the warm-up
            ours.append(sample)
    rows = [["npu-migrate -o", spread(ours, cpu), spread(ours, wall), ""]]
    report.figures["examples_output"] = {"cpu_median": median(ours, cpu)}
    if args.msfmk is not None:
        program = args.msfmk / "msfmktransplt" / "src" / "ms_fmk_transplt"
        theirs = []
        for round_number in range(args.msfmk_repeat):
            out = work / f"msfmk-{round_number}"
            out.mkdir()
            command = [args.msfmk_python, str(program / "ms_fmk_transplt.py"), "-i",
                       str(examples), "-o", str(out), "-v", "2.1.0"]  # fmt: skip
            theirs.append(measured(command, pythonpath=program))
            shutil.rmtree(out, ignore_errors=True)
        failed = [sample.exit_code for sample in theirs if sample.exit_code != 0]
        times = median(theirs, cpu) / median(ours, cpu)
        rows.append([f"msFmkTransplt -v 2.1.0 ({len(theirs)} run(s))", spread(theirs, cpu),
                     spread(theirs, wall), f"{times:.1f}x"])  # fmt: skip
        report.figures["examples_output"] = {
            "cpu_median": median(ours, cpu),
            "msfmk_cpu_median": median(theirs, cpu),
            "times_less_cpu": times,
        }
        if failed:
            print(f"msFmkTransplt exited with {failed} (its log is in its output folder)")
        report.target(
            "-o CPU vs msFmkTransplt", times, "x less (>= 100)", times >= 100 and not failed
        )
    report.table(
        [f"-o of {examples.name}, s (min / median)", "CPU", "wall", "msFmkTransplt's CPU / ours"],
        rows,
    )


def bench_source(report: Report, cli: list[str], source: Path, work: Path) -> None:
    files = sorted(str(path) for path in source.rglob("*.py"))
    size = sum(os.path.getsize(path) for path in files)
    listing = work / "files.txt"
    listing.write_text("".join(f"{path}\n" for path in files))
    floor = measured([sys.executable, BASELINES, "ast", f"@{listing}"])
    check = measured([*cli, "--check", str(source)])
    ratio = check.cpu / floor.cpu
    report.table(
        [f"{source.name} ({len(files)} .py files, {size / MB:.0f} MB), 1 run", "CPU s", "wall s",
         "CPU vs ast.parse", "peak RSS, process tree"],
        [["ast.parse of every file (1 process)", f"{floor.cpu:.1f}", f"{floor.wall:.1f}",
          "1.00x", f"{floor.peak / MB:.0f} MB"],
         ["npu-migrate --check (default jobs)", f"{check.cpu:.1f}", f"{check.wall:.1f}",
          f"{ratio:.2f}x", f"{check.peak / MB:.0f} MB"]],
    )  # fmt: skip
    report.figures["source_check"] = {
        "files": len(files),
        "bytes": size,
        "ast_cpu": floor.cpu,
        "cpu": check.cpu,
        "wall": check.wall,
        "ratio": ratio,
        "peak_mb": check.peak / MB,
        "exit_code": check.exit_code,
    }
    report.target("monorepo --check CPU", ratio, "x ast.parse (<= 2)", ratio <= 2)
    report.target("monorepo --check peak RSS", check.peak / MB, " MB (< 1024)", check.peak < GB)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, help="a pytorch/examples checkout")
    parser.add_argument("--msfmk", type=Path, help="a checkout of Ascend's mstt (msFmkTransplt)")
    parser.add_argument("--msfmk-python", default=sys.executable, help="Python for msFmkTransplt")
    parser.add_argument("--msfmk-repeat", type=int, default=1, help="msFmkTransplt rounds [1]")
    parser.add_argument("--source", type=Path, help="a large tree, e.g. ModelZoo-PyTorch")
    parser.add_argument("--repeat", type=int, default=10, help="interleaved pairs [10]")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.msfmk is not None:
        program = args.msfmk / "msfmktransplt" / "src" / "ms_fmk_transplt" / "ms_fmk_transplt.py"
        if not program.is_file():
            parser.error(f"--msfmk {args.msfmk}: no {program.relative_to(args.msfmk)} in it")
        if args.examples is None:
            parser.error("--msfmk needs --examples: the tree both tools migrate")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed npu-migrate runs

    report = Report({"machine": machine()})
    print(f"machine: {report.figures['machine']}\n")
    cli = [*installed_command(), "-q", "--no-cache"]
    with tempfile.TemporaryDirectory(prefix="npu-migrate-bench-") as temporary:
        work = Path(temporary)
        bench_clean_file(report, cli, work, args.repeat)
        if args.examples is not None:
            examples = args.examples.resolve()
            bench_jobs(report, cli, examples, args.repeat)
            bench_output(report, cli, examples, work, args.repeat, args)
        if args.source is not None:
            bench_source(report, cli, args.source.resolve(), work)
    print(f"load average at the end: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    for name, value, unit, met in report.targets:
        print(f"{'MET   ' if met else 'MISSED'}  {name} = {value:.2f}{unit}")
    if args.json is not None:
        targets = [
            {"target": name, "value": value, "met": met} for name, value, _, met in report.targets
        ]
        args.json.write_text(json.dumps({**report.figures, "targets": targets}, indent=2) + "\n")
    return 0 if all(met for *_, met in report.targets) else 1


if __name__ == "__main__":
    sys.exit(main())
