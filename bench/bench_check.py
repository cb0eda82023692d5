"""Benchmark the migrator on a real tree against two baselines measured in the same run.

    .venv/bin/python bench/bench_check.py [--source DIR] [--repeat N] [--jobs 2]

Default tree: the Python sources of the installed torch package (over 2,000 files, about 46 MB);
``--source`` takes another, such as a checkout of pytorch/examples. Every file of the tree is
used: nothing is sampled or extrapolated.

Each round, in this order (so that machine load drifts over all variants alike):

- ``ast.parse`` of every file (read + parse), in a fresh process;
- libcst ``parse_module`` + ``QualifiedNameProvider`` of every file, in ``--jobs`` processes:
  what a libcst codemod pays before its first rule runs;
- ``npu-migrate --check`` of the tree as given, empty cache;
- ``npu-migrate -o OUT`` (a migrated copy) of the tree as given, no cache;
- ``npu-migrate --check`` of that migrated copy, empty cache (the CI case), then again with the
  cache it filled (warm).

Every run is measured as CPU seconds of its whole process tree (``RUSAGE_CHILDREN``, workers
included), wall seconds, and peak resident memory of the process tree (main process plus all
workers, summed, sampled every 20 ms from /proc). The table gives the minimum and the median of
``--repeat`` rounds and each run's CPU time as a ratio of the baselines', then the targets:
cold ``--check`` within 4x ``ast.parse``; cold migration within 1x the libcst baseline; warm
``--check`` within 2x ``ast.parse``; peak memory under 500 MB.

Children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed), as an installed
npu-migrate runs: a checkout whose bytecode is never written compiles npu-migrate's own sources
in each of its processes, which is not the tool's cost.

It is a benchmark, not a test: figures depend on the machine and its load; the ratios are what
to read.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MB = 1024 * 1024
HERE = Path(__file__).resolve().parent

BASELINES = str(HERE / "baselines.py")


@dataclass
class Sample:
    cpu: float
    wall: float
    peak: int  # bytes
    exit_code: int


@dataclass
class Row:
    name: str
    samples: list[Sample] = field(default_factory=list)
    note: str = ""

    def cpu(self, pick: str = "min") -> float:
        values = [s.cpu for s in self.samples]
        return min(values) if pick == "min" else statistics.median(values)

    def wall(self, pick: str = "min") -> float:
        values = [s.wall for s in self.samples]
        return min(values) if pick == "min" else statistics.median(values)

    @property
    def peak(self) -> int:
        return max(s.peak for s in self.samples)


def torch_sources() -> Path:
    spec = importlib.util.find_spec("torch")  # located, not imported: importing torch is slow
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed; pass --source DIR")
    return Path(next(iter(spec.submodule_search_locations)))


def process_tree_rss(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, from /proc (Linux)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{current}/task/{current}/children") as children:
                pending.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):
            continue  # the process ended meanwhile
    return total


def measured(command: list[str], cwd: Path | None = None, pythonpath: Path | None = None) -> Sample:
    """CPU seconds (the process and every descendant it waited for), wall seconds, peak tree
    RSS and exit code of ``command``, run in ``cwd`` with ``pythonpath`` first on the path."""
    environment = None
    if pythonpath is not None:
        paths = [str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = 0
    start = time.perf_counter()
    child = subprocess.Popen(
        command, cwd=cwd, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process_tree_rss(child.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, errors = child.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if child.returncode not in (0, 1):
        print(errors.decode(errors="replace")[-2000:], file=sys.stderr)
    return Sample(cpu, wall, peak, child.returncode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="tree to measure [default: installed torch]")
    parser.add_argument("--repeat", type=int, default=1, help="rounds [default: 1]")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes [default: 2]")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed npu-migrate runs

    source = (args.source or torch_sources()).resolve()
    files = sorted(str(p) for p in source.rglob("*.py"))
    size = sum(os.path.getsize(p) for p in files)
    python = sys.executable
    cli = [python, "-m", "migrator", "-q", "-j", str(args.jobs)]
    rows = {
        name: Row(name)
        for name in (
            "ast.parse (1 process)",
            f"libcst parse + qualified names (-j {args.jobs})",
            "--check, cold, unmigrated tree",
            "-o (migrate a copy), cold",
            "--check, cold, migrated tree",
            "--check, warm, migrated tree",
        )
    }
    ast_row, libcst_row, check_row, migrate_row, ci_row, warm_row = rows.values()
    print(f"tree: {source} ({len(files)} files, {size / MB:.1f} MB); {args.repeat} round(s)")
    with tempfile.TemporaryDirectory(prefix="npu-migrate-bench-") as temporary:
        work = Path(temporary)
        tree = work / "tree"
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
        copies = [str(p) for p in sorted(tree.rglob("*.py"))]
        for round_number in range(args.repeat):
            ast_row.samples.append(measured([python, BASELINES, "ast", *copies]))
            libcst_row.samples.append(
                measured([python, BASELINES, "libcst", str(args.jobs), *copies])
            )
            cache = work / f"cache-{round_number}"
            check_row.samples.append(
                measured([*cli, "--check", "--cache-dir", str(cache), str(tree)])
            )
            out = work / f"out-{round_number}"
            migrate_row.samples.append(measured([*cli, "--no-cache", "-o", str(out), str(tree)]))
            ci_cache = work / f"ci-cache-{round_number}"
            ci = [*cli, "--check", "--cache-dir", str(ci_cache), str(out)]
            ci_row.samples.append(measured(ci))
            warm_row.samples.append(measured(ci))
            print(f"round {round_number + 1} done", file=sys.stderr)
        report = work / "report.json"
        subprocess.run(
            [*cli, "--check", "--no-cache", "--report", str(report), str(tree)],
            stdout=subprocess.DEVNULL,
            check=False,
        )
        summary = json.loads(report.read_text())["summary"]
    check_row.note = f"{summary['changed']} of {summary['scanned']} files would change"

    print()
    print(table(list(rows.values()), ast_row, libcst_row, len(files), size))
    print()
    peak = max(row.peak for row in (check_row, migrate_row, ci_row, warm_row)) / MB
    targets = [
        ("cold --check CPU", check_row.cpu() / ast_row.cpu(), "x ast.parse", 4),
        ("cold --check (CI case) CPU", ci_row.cpu() / ast_row.cpu(), "x ast.parse", 4),
        ("cold migration CPU", migrate_row.cpu() / libcst_row.cpu(), "x the libcst baseline", 1),
        ("warm --check CPU", warm_row.cpu() / ast_row.cpu(), "x ast.parse", 2),
        ("peak RSS of the process tree", peak, "MB", 500),
    ]
    for name, value, unit, limit in targets:
        met = value <= limit
        print(f"{'MET   ' if met else 'MISSED'}  {name} = {value:.2f} {unit} (target <= {limit})")
    if args.json is not None:
        figures = {
            row.name: {"cpu_min": row.cpu(), "cpu_median": row.cpu("median"),
                       "wall_min": row.wall(), "peak_mb": row.peak / MB}
            for row in rows.values()
        }  # fmt: skip
        args.json.write_text(json.dumps({"files": len(files), "bytes": size, **figures}, indent=2))
    return 0 if all(value <= limit for _, value, _, limit in targets) else 1


def table(rows: list[Row], ast_row: Row, libcst_row: Row, files: int, size: int) -> str:
    lines = [
        f"| run ({files} files, {size / MB:.1f} MB) | CPU s min | CPU s median | wall s min "
        "| CPU vs ast.parse | CPU vs libcst | peak RSS MB | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.cpu():.2f} | {row.cpu('median'):.2f} | {row.wall():.2f} | "
            f"{row.cpu() / ast_row.cpu():.2f}x | {row.cpu() / libcst_row.cpu():.3f}x | "
            f"{row.peak / MB:.0f} | {row.note} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
