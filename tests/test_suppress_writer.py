"""``--add-suppressions``' writer: where a comment goes, what it keeps, where none can go, and that
the engine honours every comment it writes (the findings are gone when the rules run again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migrator.diagnostics import Diagnostic, Severity
from migrator.engine import migrate_source
from migrator.notebooks import migrate_notebook
from migrator.registry import all_rules, select_rules
from migrator.settings import Settings
from migrator.shell import scan_shell
from migrator.suppress_writer import (
    CONTINUED,
    IN_HEREDOC,
    IN_QUOTES,
    IN_STRING,
    suppress,
    with_codes,
    write_suppressions,
)

RULES = select_rules(all_rules(), ["NPU920", "NPU930", "NPU302"])
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def findings_of(path: str, source: bytes) -> list[Diagnostic]:
    """What --add-suppressions suppresses: the manual and info findings the rules report."""
    if path.endswith(".ipynb"):
        from migrator.engine import Engine

        result = migrate_notebook(Engine(RULES, Settings()), source, path, apply=False)
    elif path.endswith(".sh"):
        result = scan_shell(source, path, RULES)
    else:
        result = migrate_source(source, path, RULES, Settings(), apply=False)
    return [d for d in result.diagnostics if d.severity in (Severity.MANUAL, Severity.INFO)]


def suppressed_source(path: str, source: bytes) -> tuple[bytes, list[str]]:
    """Suppress every finding, in rounds as the CLI does (a rule may report a use that
    another rule reported until then: NPU930 reports `DataParallel` once NPU920's finding is
    suppressed); the new bytes and the reasons of the refused ones."""
    for _ in range(3):
        done = suppress(path, source, findings_of(path, source))
        if done.data is None:
            break
        source = done.data
    return source, [r.reason for r in done.refused]


@pytest.mark.parametrize(
    ("line", "codes", "expected"),
    [
        ("net = DP(net)\n", ["NPU920"], "net = DP(net)  # npu-migrate: ignore[NPU920]\n"),
        ("net = DP(net)", ["NPU920"], "net = DP(net)  # npu-migrate: ignore[NPU920]"),
        ("x = 1   \r\n", ["B", "A"], "x = 1  # npu-migrate: ignore[A,B]\r\n"),
        ("x.cuda()  # move\n", ["NPU930"], "x.cuda()  # move  # npu-migrate: ignore[NPU930]\n"),
        (
            "x  # npu-migrate: ignore[NPU301]  # why\n",
            ["NPU930"],
            "x  # npu-migrate: ignore[NPU301,NPU930]  # why\n",
        ),
        (
            "x  #npu-migrate:ignore[NPU1, NPU2]\n",
            ["NPU930"],
            "x  #npu-migrate:ignore[NPU1, NPU2, NPU930]\n",
        ),
        ("x  # npu-migrate: ignore[npu930]\n", ["NPU930"], "x  # npu-migrate: ignore[npu930]\n"),
    ],
)
def test_one_line(line: str, codes: list[str], expected: str) -> None:
    comment = line.find("#")
    assert with_codes(line, codes, comment if comment >= 0 else None) == expected


def test_comments_are_written_and_the_engine_honours_them() -> None:
    source = (
        b"import torch\n"
        b"net = torch.nn.DataParallel(net)  # wrap\n"
        b"net = torch.nn.DataParallel(net)  # npu-migrate: ignore[NPU930]\n"
        b"if True: rnn = torch.nn.GRU(4, 4); net = torch.nn.DataParallel(net)\n"
        b"net = torch.nn.DataParallel(\n"
        b"    torch.nn.DataParallel(net))\n"
    )
    # NPU930 reports `GRU` here, and `DataParallel` only once NPU920 no longer reports it.
    assert [(d.line, d.code) for d in findings_of("train.py", source)] == [
        (2, "NPU920"),
        (3, "NPU920"),
        (4, "NPU930"),
        (4, "NPU920"),
        (5, "NPU920"),
        (6, "NPU920"),
    ]
    data, refused = suppressed_source("train.py", source)
    assert refused == []
    assert data == (
        b"import torch\n"
        b"net = torch.nn.DataParallel(net)  # wrap  # npu-migrate: ignore[NPU920,NPU930]\n"
        b"net = torch.nn.DataParallel(net)  # npu-migrate: ignore[NPU930,NPU920]\n"
        b"if True: rnn = torch.nn.GRU(4, 4); net = torch.nn.DataParallel(net)"
        b"  # npu-migrate: ignore[NPU920,NPU930]\n"
        b"net = torch.nn.DataParallel(  # npu-migrate: ignore[NPU920,NPU930]\n"
        b"    torch.nn.DataParallel(net))  # npu-migrate: ignore[NPU920,NPU930]\n"
    )
    assert findings_of("train.py", data) == []
    assert suppress("train.py", data, []).data is None  # nothing left to write


def test_where_no_comment_can_go_nothing_is_written() -> None:
    source = (
        b"import os\n"
        b'SCRIPT = """\n'
        b'os.environ["CUDA_VISIBLE_DEVICES"] = "0"\n'
        b'"""\n'
        b"import torch\n"
        b"net = torch.nn.DataParallel(net) if net \\\n"
        b"    else None\n"
    )
    at_lines = [
        Diagnostic("t.py", 3, 1, "NPU926", Severity.MANUAL, "in the string"),
        Diagnostic("t.py", 6, 7, "NPU920", Severity.MANUAL, "continued"),
        Diagnostic("t.py", 7, 5, "NPU920", Severity.MANUAL, "after the backslash"),
    ]
    done = suppress("t.py", source, at_lines)
    assert [(r.diagnostic.line, r.reason) for r in done.refused] == [
        (3, IN_STRING),
        (6, CONTINUED),
    ]
    assert done.data == source.replace(
        b"    else None\n", b"    else None  # npu-migrate: ignore[NPU920]\n"
    )


def test_encoding_byte_order_mark_and_line_endings_are_kept() -> None:
    latin = (
        b"# -*- coding: latin-1 -*-\r\n"
        b"import torch\r\n"
        b"net = torch.nn.DataParallel(net)  # r\xe9seau\r\n"
    )
    data, refused = suppressed_source("latin.py", latin)
    assert refused == []
    assert data == latin.replace(
        b"# r\xe9seau\r\n", b"# r\xe9seau  # npu-migrate: ignore[NPU920,NPU930]\r\n"
    )
    bom = b"\xef\xbb\xbfimport torch\nnet = torch.nn.DataParallel(net)"
    data, _ = suppressed_source("bom.py", bom)
    assert data == bom + b"  # npu-migrate: ignore[NPU920,NPU930]"
    assert findings_of("bom.py", data) == []


def test_notebook_cells_get_their_comments_in_the_notebook_layout() -> None:
    source = (FIXTURES / "notebooks" / "magics.before.ipynb").read_bytes()
    notebook = json.loads(source)
    cell = notebook["cells"][2]
    cell["source"] = [
        *cell["source"][:-1],
        cell["source"][-1] + "\n",
        "net = torch.nn.DataParallel(net)",
    ]
    source = (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode()
    found = findings_of("nb.ipynb", source)
    assert {(d.cell, d.code) for d in found} >= {(3, "NPU920")}
    data, refused = suppressed_source("nb.ipynb", source)
    assert refused == []
    assert findings_of("nb.ipynb", data) == []
    after = json.loads(data)
    assert after["cells"][2]["source"][-1] == (
        "net = torch.nn.DataParallel(net)  # npu-migrate: ignore[NPU920,NPU930]"
    )
    # Only the source lines with findings differ; the rest of the file is as it was.
    changed = [
        (a, b) for a, b in zip(source.splitlines(), data.splitlines(), strict=True) if a != b
    ]
    assert len(changed) == len({(d.cell, d.line) for d in found})


def test_shell_scripts_outside_here_documents_and_quotes() -> None:
    script = (
        b"#!/bin/bash\n"
        b"export CUDA_VISIBLE_DEVICES=0,1  # two cards\n"
        b"python - <<'EOF'\n"
        b"import os; os.environ['NCCL_DEBUG'] = 'INFO'\n"
        b"EOF\n"
        b'echo "start\n'
        b'NCCL_DEBUG=INFO"\n'
        b"NCCL_DEBUG=INFO torchrun train.py \\\n"
        b"  --device cuda\n"
    )
    rules = select_rules(all_rules(), ["NPU926", "NPU303"])
    found = scan_shell(script, "run.sh", rules).diagnostics
    done = suppress("run.sh", script, found)
    assert [(r.diagnostic.line, r.reason) for r in done.refused] == [
        (4, IN_HEREDOC),
        (8, CONTINUED),
    ]
    opening = Diagnostic("run.sh", 6, 1, "NPU926", Severity.MANUAL, "a line whose quote goes on")
    assert [r.reason for r in suppress("run.sh", script, [opening]).refused] == [IN_QUOTES]
    assert done.data is not None
    left = scan_shell(done.data, "run.sh", rules).diagnostics
    assert sorted(d.line for d in left) == sorted(r.diagnostic.line for r in done.refused)
    assert b"export CUDA_VISIBLE_DEVICES=0,1  # two cards  # npu-migrate: ignore[NPU926]\n" in (
        done.data
    )


def test_a_read_only_file_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "locked.py"
    source = b"import torch\nnet = torch.nn.DataParallel(net)\n"
    path.write_bytes(source)
    path.chmod(0o444)
    with pytest.raises(PermissionError):
        write_suppressions(str(path), source, findings_of(str(path), source))
    assert path.read_bytes() == source
