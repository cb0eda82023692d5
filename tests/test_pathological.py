"""Files from the dark corners of a monorepo, through the real command line.

Each one gives a clear per-file error or a correct result; the run itself never crashes and
never hangs, and the other files of the run are still processed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _cli import run_npu_migrate

CUDA = "x = y.cuda()\n"  # every file below passes the device rules' pre-scan
GOOD = b"import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"


def huge_literal() -> bytes:
    items = ",\n".join(f"    'key{i}': ({i}, {i * 0.5}, 'value {i}')" for i in range(30_000))
    return f"TABLE = {{\n{items}\n}}\n{CUDA}".encode()


def long_function() -> bytes:
    body = "".join(f"    v{i} = x.cuda() + {i}\n" for i in range(5_000))
    return f"def f(x):\n{body}    return v0\n".encode()


CASES = {
    "huge_literal.py": (huge_literal(), "ok"),
    "long_function.py": (long_function(), "ok"),
    "deep_nesting.py": (
        b"x = " + b"(" * 1_000 + b"1" + b")" * 1_000 + b"\n" + CUDA.encode(),
        "error",
    ),
    "deep_calls.py": (b"x = " + b"f(" * 150 + b"y.cuda()" + b")" * 150 + b"\n", "ok"),
    "nul_byte.py": (b"x = 1\x00\n" + CUDA.encode(), "error"),
    "tabs_and_spaces.py": (b"if x:\n\ty = 1\n        z = y.cuda()\n", "error"),
    "latin1.py": (
        "# -*- coding: latin-1 -*-\ns = 'caf\xe9'\n".encode("latin-1") + CUDA.encode(),
        "ok",
    ),
    "python2.py": (b"print 'hello'\nx = y.cuda()\nexec 'z = 1'\n", "error"),
    "empty.py": (b"", "ok"),
    "only_bom.py": (b"\xef\xbb\xbf", "ok"),
    "form_feed.py": (b"import torch\n\x0c\nx = torch.ones(1).cuda()\n", "ok"),
    "crlf_lone_cr.py": (b"import torch\r\nx = 1\ry = torch.ones(1).cuda()\r\n", "ok"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str, float]:
    tree = tmp_path_factory.mktemp("monorepo")
    for name, (data, _) in CASES.items():
        (tree / name).write_bytes(data)
    (tree / "good.py").write_bytes(GOOD)
    start = time.monotonic()
    completed = run_npu_migrate("--no-cache", "--select", "NPU3", "-j", "2", tree, timeout=600)
    return tree, completed.returncode, completed.stderr, time.monotonic() - start


def test_the_run_ends_with_exit_2_and_processes_the_good_file(
    run: tuple[Path, int, str, float],
) -> None:
    tree, code, errors, seconds = run
    assert code == 2, errors
    assert "Traceback" not in errors
    assert b".npu()" in (tree / "good.py").read_bytes()
    assert seconds < 300


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_file_is_an_error_or_correct(name: str, run: tuple[Path, int, str, float]) -> None:
    tree, _, errors, _ = run
    original, expected = CASES[name]
    reported = [line for line in errors.splitlines() if line.startswith(f"error: {tree / name}:")]
    data = (tree / name).read_bytes()
    if expected == "error":
        assert len(reported) == 1, errors
        assert data == original  # left untouched
    else:
        assert reported == []
        if b".cuda()" in original:
            assert b".cuda()" not in data and data.count(b".npu()") == original.count(b".cuda()")
            compile(data, name, "exec")
        else:
            assert data == original
