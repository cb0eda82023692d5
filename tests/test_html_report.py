"""The HTML report's data: escaping, the new text of a changed file in every mode, the lines kept
around changes and findings. What the page does with it is tested in a real browser
(tests/test_html_browser.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from migrator.cli import main
from migrator.files import unified_diff
from migrator.formats.html import chunks, embedded_json, patched, texts_from_diff
from migrator.notebooks import notebook_diff
from migrator.originals import texts_of

REPOSITORY = Path(__file__).resolve().parent.parent


def page_data(html: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S
    )
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def test_embedded_json_cannot_end_its_script_element() -> None:
    hostile = "</script><script>alert(1)</script><!-- <img src=x onerror=alert(2)> & \u2028"
    text = embedded_json({"text": hostile})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"text": hostile}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("a\nb\nc\n", "a\nB\nc\n"),
        ("a\nb\nc", "a\nb\nc\nd"),  # no final newline on either side
        ("a\nb\nc\n", "a\nb\nc"),
        ("", "x = 1\n"),
        ("x = 1\n", ""),
        ("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\nX\n12\n"),
        ("a\r\nb\r\n", "a\r\nB\r\n"),
    ],
)
def test_a_diff_applied_to_the_old_text_gives_the_new(before: str, after: str) -> None:
    diff = unified_diff("f.py", before.encode(), after.encode())
    assert patched(before, diff.splitlines(keepends=True)) == after


def test_a_notebook_diff_gives_the_new_cells() -> None:
    def notebook(*cells: str) -> bytes:
        return json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "metadata": {},
                        "source": text,
                        "outputs": [],
                        "execution_count": None,
                    }
                    for text in cells
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ).encode()

    before = notebook("import torch\nx.cuda()", "y = 1", "z.cuda()\n")
    after = notebook("import torch\nimport torch_npu\nx.npu()", "y = 1", "z.npu()\n")
    old = texts_of("n.ipynb", before)
    assert old is not None
    new = texts_from_diff(old, notebook_diff("n.ipynb", before, after), notebook=True)
    assert new.sections[1].rstrip("\n") == "import torch\nimport torch_npu\nx.npu()"
    assert new.sections[2] == "y = 1"
    assert new.sections[3] == "z.npu()\n"


def test_chunks_keep_three_lines_around_changes_and_findings() -> None:
    old = "".join(f"line {n}\n" for n in range(1, 31))
    new = old.replace("line 5\n", "line five\n")
    found = chunks(old, new, [20])
    assert [(start, new_start) for start, new_start, _ in found] == [(2, 2), (17, 17)]
    first, second = found[0][2], found[1][2]
    assert first == [
        " line 2",
        " line 3",
        " line 4",
        "-line 5",
        "+line five",
        " line 6",
        " line 7",
        " line 8",
    ]
    assert second == [f" line {n}" for n in range(17, 24)]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "project"
    shutil.copytree(REPOSITORY / "examples", folder / "examples")
    (folder / "pyproject.toml").write_text("[tool.npu-migrate]\n")
    (folder / "nb.ipynb").write_bytes(
        (REPOSITORY / "fixtures" / "notebooks" / "magics.before.ipynb").read_bytes()
    )
    (folder / "hostile.py").write_text(
        'import torch\nBANNER = "</script><img src=x onerror=alert(1)>"\n'
        "net = torch.nn.DataParallel(net)\n"
    )
    monkeypatch.chdir(folder)
    return folder


def test_every_mode_shows_the_same_changes(project: Path, tmp_path: Path) -> None:
    """--check (run as --diff for the page), --diff, -o and the default mode: the same files,
    diagnostics and aligned lines, though each finds the new text elsewhere."""
    runs = {
        "check": ["--check", "--format", "html", "--report-dir", str(tmp_path / "check")],
        "diff": ["--diff", "--html", str(tmp_path / "diff" / "index.html")],
        "output": ["-o", str(tmp_path / "copy"), "--html", str(tmp_path / "output" / "index.html")],
        "write": ["--html", str(tmp_path / "write" / "index.html")],
    }
    pages = {}
    for name, args in runs.items():
        code = main(["-j", "1", *args, "."])
        assert code == (0 if name == "output" else 1), name
        pages[name] = page_data((tmp_path / name / "index.html").read_text())
    files = {name: data["files"] for name, data in pages.items()}
    assert files["check"] == files["diff"] == files["output"] == files["write"]
    listed = {entry["path"]: entry for entry in files["check"]}
    assert set(listed) == {"examples/imagenet/main.py", "hostile.py", "nb.ipynb"}
    main_py = listed["examples/imagenet/main.py"]
    rows = [row for section in main_py["view"] for chunk in section["chunks"] for row in chunk[2]]
    assert "+import torch_npu" in rows
    assert {row[3] for row in main_py["diagnostics"]} >= {"NPU101", "NPU302"}
    notebook_cells = [section["cell"] for section in listed["nb.ipynb"]["view"]]
    assert notebook_cells and all(isinstance(cell, int) for cell in notebook_cells)
    assert pages["check"]["mode"] == "check" and pages["write"]["fixed_label"] == "fixed"
    assert set(pages["check"]["rules"]) == {
        row[3] for entry in files["check"] for row in entry["diagnostics"]
    }


def test_check_with_a_page_prints_and_exits_as_check(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-j", "1", "--no-cache", "--check", "--format", "json", "."]) == 1
    plain = json.loads(capsys.readouterr().out)
    page = tmp_path / "page.html"
    run = ["-j", "1", "--no-cache", "--check", "--format", "json", "--html", str(page), "."]
    assert main(run) == 1
    captured = capsys.readouterr()
    with_page = json.loads(captured.out)
    assert with_page == plain  # no diff leaks into the document
    assert f"wrote {page} (3 file(s) listed)" in captured.err
    assert (REPOSITORY / "examples" / "imagenet" / "main.py").read_bytes() == (
        project / "examples" / "imagenet" / "main.py"
    ).read_bytes()


def test_an_unwritable_page_is_an_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "taken").write_text("a file, not a folder")
    assert main(["-j", "1", "--check", "--html", "taken/index.html", "."]) == 2
    assert "cannot write the HTML report taken/index.html" in capsys.readouterr().err
