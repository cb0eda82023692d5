"""Benchmark ``npu-migrate --check`` on a large real tree: the installed torch package's sources.

    .venv/bin/python bench/bench_check.py [--limit N] [--baseline-sample N] [--jobs 2]

What it does, in one run:

1. copies the ``.py`` files of the tree (default: the installed torch package, over 2,000 files;
   ``--limit N`` keeps N of them, evenly spread) into a temporary folder;
2. migrates the copy once (``npu-migrate`` in place, every rule that exists), so that what is
   measured next is the CI case: checking an already-migrated tree;
3. runs ``npu-migrate --check`` with an empty cache (cold) and then again (warm, every file answered
   from the cache), each as its own process, measuring wall time and the peak resident memory of
   the process and its workers together;
4. measures the baselines in this process: a plain libcst parse + metadata resolution (the
   providers every rule uses) on a random sample of ``--baseline-sample`` files (fixed seed),
   because doing all 2,000 files takes many minutes; its bytes per second, applied to the whole
   tree's size, gives the baseline's time and files per second for the tree (file sizes vary
   from a few bytes to 1.3 MB, so a per-file rate from a small sample would mislead); and a bare
   ``ast.parse`` of every file;
5. prints one table and the three targets: cold files/s at least 10x the libcst baseline's, warm
   time at most 2x the ``ast.parse`` time, peak memory under 500 MB.

It is a benchmark, not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import (
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    QualifiedNameProvider,
    ScopeProvider,
)

from migrator.registry import all_rules

MB = 1024 * 1024
PROVIDERS = (QualifiedNameProvider, ScopeProvider, PositionProvider, ParentNodeProvider)


@dataclass
class Measure:
    name: str
    files: int
    size: int  # bytes
    seconds: float
    peak_rss: int | None = None  # bytes, process tree
    note: str = ""

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds if self.seconds else float("inf")

    @property
    def bytes_per_second(self) -> float:
        return self.size / self.seconds if self.seconds else float("inf")


def torch_sources() -> Path:
    spec = importlib.util.find_spec("torch")  # located, not imported: importing torch is slow
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed; pass --source DIR")
    return Path(next(iter(spec.submodule_search_locations)))


def evenly_spread(items: list[Path], count: int | None) -> list[Path]:
    if count is None or count >= len(items):
        return items
    step = len(items) / count
    return [items[int(index * step)] for index in range(count)]


def copy_tree(source: Path, files: list[Path], destination: Path) -> list[Path]:
    copied = []
    for path in files:
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(target)
    return copied


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


def run_measured(command: list[str]) -> tuple[float, int, int]:
    """Wall time, peak tree RSS and exit code of ``command``."""
    peak = 0
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process_tree_rss(child.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, errors = child.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if child.returncode == 2:
        print(errors.decode(errors="replace")[-2000:], file=sys.stderr)
    return seconds, peak, child.returncode


def libcst_baseline(files: list[Path]) -> Measure:
    size = 0
    start = time.perf_counter()
    for path in files:
        source = path.read_bytes()
        size += len(source)
        MetadataWrapper(cst.parse_module(source)).resolve_many(PROVIDERS)
    return Measure("libcst parse + resolve", len(files), size, time.perf_counter() - start)


def ast_baseline(files: list[Path]) -> Measure:
    size = 0
    start = time.perf_counter()
    for path in files:
        source = path.read_bytes()
        size += len(source)
        with contextlib.suppress(SyntaxError):  # measured like the others, counted anyway
            ast.parse(source)
    return Measure("ast.parse (read + parse)", len(files), size, time.perf_counter() - start)


def triggered(files: list[Path]) -> int:
    """How many files the pre-scan sends to the libcst parser (any rule's TRIGGER matches)."""
    rules = all_rules()
    count = 0
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        count += any(rule.TRIGGER.search(text) for rule in rules)
    return count


def table(measures: list[Measure]) -> str:
    header = "| run | files | MB | seconds | files/s | MB/s | peak RSS (MB) | note |"
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---|"]
    for m in measures:
        peak = f"{m.peak_rss / MB:.0f}" if m.peak_rss is not None else "-"
        lines.append(
            f"| {m.name} | {m.files} | {m.size / MB:.1f} | {m.seconds:.2f} | "
            f"{m.files_per_second:.1f} | {m.bytes_per_second / MB:.3f} | {peak} | {m.note} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="tree to copy [default: installed torch]")
    parser.add_argument("--limit", type=int, help="use only N files of the tree, evenly spread")
    parser.add_argument(
        "--baseline-sample",
        type=int,
        default=150,
        help="random files parsed by the libcst baseline [default: 150]",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes [default: 2]")
    args = parser.parse_args()

    source = (args.source or torch_sources()).resolve()
    all_files = sorted(source.rglob("*.py"))
    chosen = evenly_spread(all_files, args.limit)
    cli = [sys.executable, "-m", "migrator"]
    with tempfile.TemporaryDirectory(prefix="npu-migrate-bench-") as temporary:
        tree = Path(temporary) / "tree"
        files = copy_tree(source, chosen, tree)
        size = sum(path.stat().st_size for path in files)
        cache = Path(temporary) / "cache"
        report = Path(temporary) / "report.json"
        jobs = ["-j", str(args.jobs)]

        print(f"tree: {len(files)} files, {size / MB:.1f} MB copied from {source}")
        print(f"rules: {' '.join(rule.CODE for rule in all_rules())}")
        seconds, _, code = run_measured([*cli, "-q", "--no-cache", *jobs, str(tree)])
        print(f"first migration (write mode): {seconds:.1f} s, exit code {code}")

        check = [*cli, "--check", "-q", "--cache-dir", str(cache), *jobs, "--report", str(report)]
        cold_seconds, cold_peak, cold_code = run_measured([*check, str(tree)])
        summary = json.loads(report.read_text())["summary"]
        warm_seconds, warm_peak, warm_code = run_measured([*check, str(tree)])
        warm_summary = json.loads(report.read_text())["summary"]

        parsed = triggered(files)
        sample = random.Random(0).sample(files, min(args.baseline_sample, len(files)))
        measured = libcst_baseline(sample)
        # The tree's baseline, extrapolated from the sample's bytes per second.
        estimate = size / measured.bytes_per_second
        baseline = Measure("libcst parse + resolve", len(files), size, estimate)
        baseline.note = (
            f"1 process; extrapolated from {measured.files} random files, "
            f"{measured.size / MB:.2f} MB in {measured.seconds:.1f} s"
        )
        parse_only = ast_baseline(files)
        parse_only.note = "1 process, in this process"
        cold = Measure(f"--check cold, -j {args.jobs}", len(files), size, cold_seconds, cold_peak)
        cold.note = (
            f"exit {cold_code}; {parsed} files pass the pre-scan; "
            f"{summary['changed']} would change, {summary['errors']} errors"
        )
        warm = Measure(f"--check warm, -j {args.jobs}", len(files), size, warm_seconds, warm_peak)
        warm.note = f"exit {warm_code}; {warm_summary['cached']} answered from the cache"

    print()
    print(table([baseline, cold, warm, parse_only]))
    print()
    speedup = cold.files_per_second / baseline.files_per_second
    warm_ratio = warm.seconds / parse_only.seconds
    peak = max(cold_peak, warm_peak) / MB
    targets = [
        (
            f"cold --check files/s = {speedup:.1f}x the libcst baseline (target >= 10x)",
            speedup >= 10,
        ),
        (f"warm --check time = {warm_ratio:.2f}x ast.parse (target <= 2x)", warm_ratio <= 2),
        (f"peak memory = {peak:.0f} MB (target < 500 MB)", peak < 500),
    ]
    for text, met in targets:
        print(f"{'MET ' if met else 'MISSED'}  {text}")
    return 0 if all(met for _, met in targets) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
