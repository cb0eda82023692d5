"""The two baselines of ``bench_check.py``, each run as its own process:

    python bench/baselines.py ast PATH...            # read + ast.parse every file, 1 process
    python bench/baselines.py libcst JOBS PATH...    # libcst parse + QualifiedNameProvider

A PATH written ``@FILE`` stands for the paths listed in FILE, one a line (a monorepo's paths
do not fit on a command line).

The libcst baseline is what a libcst codemod pays before its first rule runs; it uses ``JOBS``
spawned worker processes like the migrator. It lives in a file (not ``python -c``) because
spawned workers import the main module by path to find ``resolve``.
"""

from __future__ import annotations

import ast
import contextlib
import sys
from multiprocessing import get_context


def parse_all(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as stream:
            source = stream.read()
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(source)


def resolve(path: str) -> int:
    import libcst as cst
    from libcst.metadata import MetadataWrapper, QualifiedNameProvider

    with open(path, "rb") as stream:
        source = stream.read()
    try:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
        wrapper.resolve(QualifiedNameProvider)
    except Exception:  # a file libcst cannot parse costs what it cost until then
        pass
    return 0


def resolve_all(jobs: int, paths: list[str]) -> None:
    # Fresh workers now and then, as the migrator recycles its own: a large file's memory is
    # not kept for the rest of the run.
    with get_context("spawn").Pool(jobs, maxtasksperchild=50) as pool:
        for _ in pool.imap_unordered(resolve, paths, chunksize=4):
            pass


def expanded(arguments: list[str]) -> list[str]:
    paths: list[str] = []
    for argument in arguments:
        if argument.startswith("@"):
            with open(argument[1:]) as listing:
                paths.extend(line.rstrip("\n") for line in listing if line.strip())
        else:
            paths.append(argument)
    return paths


def main(argv: list[str]) -> int:
    kind, *rest = argv
    if kind == "ast":
        parse_all(expanded(rest))
    elif kind == "libcst":
        resolve_all(int(rest[0]), expanded(rest[1:]))
    else:
        print(f"unknown baseline {kind!r}: ast or libcst", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
