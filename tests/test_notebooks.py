"""Jupyter notebooks through the real command line (``python -m migrator`` in a subprocess).

Fixtures: ``fixtures/notebooks/<case>.before.ipynb`` and its expectations

- ``<case>.after.ipynb``: the migrated notebook; absent means it must stay byte-identical;
- ``<case>.diagnostics.txt``: every diagnostic, one ``cell N:LINE:COL SEVERITY CODE MESSAGE``
  per line (``--check --format json``);
- ``<case>.diff``: what ``npu-migrate --diff <case>.ipynb`` prints;
- ``<case>.error.txt``: the message of a notebook that cannot be processed: exit 2 in every
  mode, and the file is left byte-identical.

``pytest --update-fixtures`` rewrites the expectations from the current output (review the
diff). Every run selects the same few rules, so that rules added later do not change what the
fixtures expect.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _cli import run_npu_migrate

from migrator.ipython import ipython_spans
from migrator.notebooks import Notebook, NotebookModule, split_lines
from migrator.registry import all_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks"
SELECT = "NPU301,NPU302,NPU303,NPU923"
CASES = sorted(p.name.removesuffix(".before.ipynb") for p in FIXTURES.glob("*.before.ipynb"))


def expectation(case: str, suffix: str) -> Path:
    return FIXTURES / f"{case}{suffix}"


def expected_after(case: str) -> bytes:
    after = expectation(case, ".after.ipynb")
    return (after if after.exists() else expectation(case, ".before.ipynb")).read_bytes()


def expected_error(case: str) -> str | None:
    path = expectation(case, ".error.txt")
    return path.read_text().strip() if path.exists() else None


def changing(case: str) -> bool:
    return expectation(case, ".after.ipynb").exists()


def npu_migrate(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a fresh process, with a result cache of its own next to ``cwd``."""
    env = {"XDG_CACHE_HOME": str(cwd.parent / "cache")}
    return run_npu_migrate("--select", SELECT, *args, cwd=cwd, extra_env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Every fixture notebook as ``<case>.ipynb`` in a fresh folder."""
    folder = tmp_path / "project"
    folder.mkdir()
    for case in CASES:
        shutil.copyfile(expectation(case, ".before.ipynb"), folder / f"{case}.ipynb")
    return folder


def notebooks(folder: Path) -> list[str]:
    return [f"{case}.ipynb" for case in CASES if (folder / f"{case}.ipynb").exists()]


def assert_errors_reported(stderr: str) -> None:
    for case in CASES:
        error = expected_error(case)
        if error is not None:
            assert f"error: {case}.ipynb: {error}\n" in stderr, stderr


def assert_untouched(folder: Path) -> None:
    for case in CASES:
        before = expectation(case, ".before.ipynb").read_bytes()
        assert (folder / f"{case}.ipynb").read_bytes() == before, f"{case} was written"


def test_the_fixtures_cover_what_notebooks_need() -> None:
    """Magics, an already migrated notebook, invalid JSON: each with its expectation."""
    assert {"magics", "already_migrated", "invalid_json"} <= set(CASES)
    assert changing("magics") and not changing("already_migrated")
    assert expected_error("invalid_json") is not None
    for case in CASES:
        assert (expected_error(case) is None) or not changing(case), case


# -- the four modes --------------------------------------------------------------------------------


def test_write_mode_migrates_in_place_and_a_second_run_changes_nothing(
    project: Path, request: pytest.FixtureRequest
) -> None:
    result = npu_migrate(*notebooks(project), cwd=project)
    if request.config.getoption("--update-fixtures"):
        for case in CASES:
            after, migrated = expectation(case, ".after.ipynb"), project / f"{case}.ipynb"
            if migrated.read_bytes() != expectation(case, ".before.ipynb").read_bytes():
                shutil.copyfile(migrated, after)
            elif after.exists():
                after.unlink()
        return
    assert result.returncode == 2  # the invalid notebooks; every other one is still migrated
    assert_errors_reported(result.stderr)
    for case in CASES:
        assert (project / f"{case}.ipynb").read_bytes() == expected_after(case), case
        if changing(case):
            assert f"migrated {case}.ipynb (" in result.stdout

    valid = [f"{case}.ipynb" for case in CASES if expected_error(case) is None]
    again = npu_migrate("--no-cache", *valid, cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    for case in CASES:
        assert (project / f"{case}.ipynb").read_bytes() == expected_after(case), case


def test_check_mode_writes_nothing_and_lists_what_would_change(project: Path) -> None:
    result = npu_migrate("--check", *notebooks(project), cwd=project)
    assert result.returncode == 2
    assert_errors_reported(result.stderr)
    assert_untouched(project)
    for case in CASES:
        assert (f"would migrate {case}.ipynb (" in result.stdout) == changing(case), case

    clean = npu_migrate("--check", "already_migrated.ipynb", cwd=project)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    stale = npu_migrate("--check", "magics.ipynb", cwd=project)
    assert stale.returncode == 1


def test_diff_mode_prints_one_diff_per_changed_cell(
    project: Path, request: pytest.FixtureRequest
) -> None:
    result = npu_migrate("--diff", *notebooks(project), cwd=project)
    assert result.returncode == 2
    assert_untouched(project)
    # The diffs come in path order, one file after the other, each headed PATH:cell N.
    chunks: dict[str, str] = {}
    for line in result.stdout.splitlines(keepends=True):
        if line.startswith("--- "):
            current = line.removeprefix("--- ").split(":cell ")[0].removesuffix(".ipynb")
        chunks[current] = chunks.get(current, "") + line
    for case in CASES:
        diff_file = expectation(case, ".diff")
        if request.config.getoption("--update-fixtures"):
            if case in chunks:
                diff_file.write_text(chunks[case])
            elif diff_file.exists():
                diff_file.unlink()
            continue
        assert chunks.get(case, "") == (diff_file.read_text() if diff_file.exists() else ""), case
        assert (case in chunks) == changing(case)


def test_output_mode_writes_a_migrated_copy_and_leaves_the_input(project: Path) -> None:
    out = project.parent / "migrated"
    result = npu_migrate("-o", out, ".", cwd=project)
    assert result.returncode == 2
    assert_untouched(project)
    for case in CASES:
        # Notebooks that could not be processed are copied as they are, like Python files.
        assert (out / f"{case}.ipynb").read_bytes() == expected_after(case), case


# -- what the user reads ---------------------------------------------------------------------------


def render(diagnostic: dict[str, Any]) -> str:
    return (
        f"cell {diagnostic['cell']}:{diagnostic['line']}:{diagnostic['column']} "
        f"{diagnostic['severity']} {diagnostic['code']} {diagnostic['message']}\n"
    )


def test_diagnostics_name_the_cell_and_the_line_in_it(
    project: Path, request: pytest.FixtureRequest
) -> None:
    result = npu_migrate("--check", "--format", "json", *notebooks(project), cwd=project)
    document = json.loads(result.stdout)
    by_path: dict[str, list[str]] = {}
    for diagnostic in document["edits"] + document["diagnostics"]:
        if diagnostic["severity"] != "error":
            by_path.setdefault(diagnostic["path"], []).append(render(diagnostic))
    for case in CASES:
        rendered = "".join(sorted(by_path.get(f"{case}.ipynb", []), key=_position))
        expected = expectation(case, ".diagnostics.txt")
        if request.config.getoption("--update-fixtures"):
            if rendered:
                expected.write_text(rendered)
            elif expected.exists():
                expected.unlink()
            continue
        assert rendered == (expected.read_text() if expected.exists() else ""), case


def _position(line: str) -> tuple[int, ...]:
    cell, row, column = line.split(" ", 2)[1].split(":")
    return int(cell), int(row), int(column)


def test_text_output_locates_edits_in_their_cell(project: Path) -> None:
    result = npu_migrate("-v", "magics.ipynb", cwd=project)
    assert result.returncode == 1
    assert "    magics.ipynb:cell 7:7:11: NPU302 [fixed] " in result.stdout


def test_errors_name_the_file_and_leave_it_byte_identical(
    project: Path, request: pytest.FixtureRequest
) -> None:
    broken = [case for case in CASES if expectation(case, ".error.txt").exists()]
    if request.config.getoption("--update-fixtures"):
        broken = [case for case in CASES if case.startswith(("invalid", "syntax_error"))]
    for case in broken:
        result = npu_migrate(f"{case}.ipynb", cwd=project)
        assert result.returncode == 2, case
        prefix = f"error: {case}.ipynb: "
        [line] = [line for line in result.stderr.splitlines() if line.startswith(prefix)]
        if request.config.getoption("--update-fixtures"):
            expectation(case, ".error.txt").write_text(line.removeprefix(prefix) + "\n")
            continue
        assert line == prefix + expected_error(case)  # type: ignore[operator]
    assert_untouched(project)


# -- the machinery around files: cache, worker processes, discovery --------------------------------


def test_the_result_cache_answers_unchanged_and_invalid_notebooks(project: Path) -> None:
    first = npu_migrate("--check", "--format", "json", *notebooks(project), cwd=project)
    second = npu_migrate("--check", "--format", "json", *notebooks(project), cwd=project)
    assert first.returncode == second.returncode == 2
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["summary"]["cached"] == 0
    assert two["summary"]["cached"] == len(CASES)  # --check needs no bytes: changed ones too
    assert one["diagnostics"] == two["diagnostics"]  # cells included
    assert one["edits"] == two["edits"]
    assert any("cell" in diagnostic for diagnostic in two["diagnostics"])
    assert second.stderr == first.stderr


def test_worker_processes_migrate_notebooks(tmp_path: Path) -> None:
    """More than 16 files with distinct contents and -j 2: the work goes to worker processes,
    which read each notebook again and must recognise its digest."""
    tree = tmp_path / "tree"
    tree.mkdir()
    expected = {}
    title = "# Fine-tune ResNet-18 on CIFAR-10"
    before = expectation("magics", ".before.ipynb").read_text(encoding="utf-8")
    after = expectation("magics", ".after.ipynb").read_text(encoding="utf-8")
    assert before.count(title) == after.count(title) == 1
    for number in range(20):
        name = f"run_{number:02}.ipynb"
        (tree / name).write_text(before.replace(title, f"{title}, run {number}"), "utf-8")
        expected[name] = after.replace(title, f"{title}, run {number}").encode()
    shutil.copyfile(expectation("invalid_json", ".before.ipynb"), tree / "broken.ipynb")
    result = npu_migrate("-j", "2", "--no-cache", ".", cwd=tree)
    assert result.returncode == 2
    assert result.stderr.count("error: ") == 1 and "broken.ipynb: not a valid" in result.stderr
    for name, data in expected.items():
        assert (tree / name).read_bytes() == data, name


def test_a_notebook_and_a_python_file_with_the_same_bytes_are_told_apart(tmp_path: Path) -> None:
    """Files with equal contents are analysed once; an empty .py is fine, an empty .ipynb not."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_bytes(b"")
    (tree / "b.ipynb").write_bytes(b"")
    for _ in range(2):  # the second run is answered by the cache
        result = npu_migrate("--check", ".", cwd=tree)
        assert result.returncode == 2
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors == [
            "error: ./b.ipynb: not a valid notebook: invalid JSON at line 1, "
            "column 1: Expecting value"
        ]


def test_notebooks_are_found_like_python_files(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    magics = expectation("magics", ".before.ipynb")
    for place in ("nb/a.ipynb", "nb/.ipynb_checkpoints/a-checkpoint.ipynb", "drafts/b.ipynb"):
        (tree / place).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(magics, tree / place)
    result = npu_migrate("--exclude", "drafts/", ".", cwd=tree)
    assert result.returncode == 1
    assert (tree / "nb/a.ipynb").read_bytes() == expected_after("magics")
    assert (tree / "nb/.ipynb_checkpoints/a-checkpoint.ipynb").read_bytes() == magics.read_bytes()
    assert (tree / "drafts/b.ipynb").read_bytes() == magics.read_bytes()
    named = npu_migrate("drafts/b.ipynb", cwd=tree)  # a file named on the command line
    assert named.returncode == 1
    assert (tree / "drafts/b.ipynb").read_bytes() == expected_after("magics")


def notebook(cells: list[str], **metadata: Any) -> dict[str, Any]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": split_lines(source),
            }
            for source in cells
        ],
        "metadata": metadata,
        "nbformat": 4,
        "nbformat_minor": 4,
    }


def test_skip_file_comment_and_other_kernels_leave_a_notebook_alone(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    skipped = notebook(["# npu-migrate: skip-file\nimport torch", "torch.ones(1).cuda()"])
    julia = notebook(
        ["x = CUDA.ones(3)\nx.cuda()"],
        kernelspec={"name": "julia-1.10", "display_name": "Julia", "language": "julia"},
    )
    for name, data in (("skipped.ipynb", skipped), ("julia.ipynb", julia)):
        (tree / name).write_text(json.dumps(data, indent=1) + "\n")
    before = {path.name: path.read_bytes() for path in tree.iterdir()}
    result = npu_migrate("-v", ".", cwd=tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped ./skipped.ipynb: `# npu-migrate: skip-file`" in result.stdout
    assert {path.name: path.read_bytes() for path in tree.iterdir()} == before


# -- the notebook's own JSON formatting ------------------------------------------------------------

CELLS = ["import torch\nx = torch.ones(2).cuda()  # é ☃", "print(x)"]
MIGRATED_CELLS = ["import torch\nimport torch_npu\nx = torch.ones(2).npu()  # é ☃", "print(x)"]
LAYOUTS: dict[str, dict[str, Any]] = {
    "jupyter": {"indent": 1, "sort_keys": True, "ensure_ascii": False, "end": "\n"},
    "colab": {"indent": 2, "ensure_ascii": True, "end": ""},
    "vscode-crlf": {"indent": 1, "sort_keys": True, "ensure_ascii": False, "end": "\r\n"},
    "tabs": {"indent": "\t", "end": "\n"},
    "one-line": {"indent": None, "end": ""},
    "compact": {"indent": None, "separators": (",", ":"), "end": "\n"},
    "python2": {"indent": 1, "separators": (", ", ": "), "end": "\n"},
}


def layout(data: dict[str, Any], style: dict[str, Any]) -> bytes:
    options = {key: value for key, value in style.items() if key != "end"}
    text = json.dumps(data, **options)
    if style["end"] == "\r\n":
        text = text.replace("\n", "\r\n")
    return (text + style["end"]).encode("utf-8")


def test_each_layout_is_written_back_with_only_the_sources_changed(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    metadata = {"kernelspec": kernelspec, "zeta": [], "alpha": 1}
    for name, style in LAYOUTS.items():
        (tree / f"{name}.ipynb").write_bytes(layout(notebook(CELLS, **metadata), style))
        (tree / f"{name}-done.ipynb").write_bytes(
            layout(notebook(MIGRATED_CELLS, **metadata), style)
        )
    (tree / "bom.ipynb").write_bytes(b"\xef\xbb\xbf" + (tree / "jupyter.ipynb").read_bytes())
    result = npu_migrate(".", cwd=tree)
    assert result.returncode == 1, result.stderr
    for name, style in LAYOUTS.items():
        done = layout(notebook(MIGRATED_CELLS, **metadata), style)
        assert (tree / f"{name}.ipynb").read_bytes() == done, name
        assert (tree / f"{name}-done.ipynb").read_bytes() == done, f"{name}-done was rewritten"
    bom = b"\xef\xbb\xbf" + layout(notebook(MIGRATED_CELLS, **metadata), LAYOUTS["jupyter"])
    assert (tree / "bom.ipynb").read_bytes() == bom


def one_string_sources(data: dict[str, Any]) -> dict[str, Any]:
    for cell in data["cells"]:
        cell["source"] = "".join(cell["source"])
    return data


def hand_edited(text: str) -> str:
    """What json.dumps never writes: a number as 1.50, keys out of order, odd spacing."""
    return text.replace("1.5", "1.50").replace('"alpha": 1', '"alpha" :  1')


def test_any_formatting_gets_findings_and_a_splice_of_only_the_changed_lines(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    metadata = {"zeta": [], "alpha": 1, "widget": {"scale": 1.5}}
    shapes = {
        "hand-edited": lambda data: hand_edited(json.dumps(data, indent=2)),
        "one-string-sources": lambda data: json.dumps(one_string_sources(data), indent=1),
        "one-string-crlf-ascii": lambda data: hand_edited(
            json.dumps(one_string_sources(data), indent=3, ensure_ascii=True)
        ),
    }
    for name, shape in shapes.items():
        before = shape(notebook(CELLS, **metadata))
        if "crlf" in name:
            before = before.replace("\n", "\r\n")
        (tree / f"{name}.ipynb").write_bytes(before.encode())
    expected = {}
    for name, shape in shapes.items():
        after = shape(notebook(MIGRATED_CELLS, **metadata))
        if "crlf" in name:
            after = after.replace("\n", "\r\n")
        expected[name] = after.encode()
    originals = {name: (tree / f"{name}.ipynb").read_bytes() for name in shapes}
    check = npu_migrate("--check", "--format", "json", ".", cwd=tree)
    assert check.returncode == 1, check.stderr
    for name in shapes:
        assert f"{name}.ipynb" in check.stdout, name
        assert (tree / f"{name}.ipynb").read_bytes() == originals[name]
    diff = npu_migrate("--diff", ".", cwd=tree)
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout.count("+x = torch.ones(2).npu()  # é ☃") == len(shapes)
    result = npu_migrate(".", cwd=tree)
    assert result.returncode == 1, result.stderr
    for name in shapes:
        assert (tree / f"{name}.ipynb").read_bytes() == expected[name], name
    again = npu_migrate(".", cwd=tree)
    assert again.returncode == 0, again.stdout + again.stderr
    for name in shapes:
        assert (tree / f"{name}.ipynb").read_bytes() == expected[name], name


def test_a_notebook_no_rule_touches_stays_byte_identical_in_any_formatting(
    tmp_path: Path,
) -> None:
    text = hand_edited(json.dumps(notebook(["print(1)  # é"], alpha=1, w=1.5), indent=2))
    (tmp_path / "plain.ipynb").write_bytes(text.encode())
    result = npu_migrate(".", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "plain.ipynb").read_bytes() == text.encode()


def test_a_key_given_twice_is_reported_and_the_file_left_untouched(tmp_path: Path) -> None:
    text = json.dumps(notebook(CELLS), indent=1)
    duplicated = text.replace(
        '"execution_count": null,', '"source": [],\n "execution_count": null,', 1
    )
    (tmp_path / "twice.ipynb").write_text(duplicated)
    for mode in ("--check", "--diff", "--no-cache"):
        result = npu_migrate(mode, "twice.ipynb", cwd=tmp_path)
        assert result.returncode == 2, (mode, result.stdout, result.stderr)
        assert "given twice" in result.stderr
        assert (tmp_path / "twice.ipynb").read_text() == duplicated


def test_no_rule_is_triggered_by_the_lines_that_join_and_mask_cells() -> None:
    """The module built from a notebook adds marker comments; a rule whose TRIGGER matched them
    would make every notebook pass the cheap pre-scan."""
    data = notebook(["!pip install x", "import os"])
    module = NotebookModule.build(Notebook.parse(json.dumps(data).encode()))
    added = "".join(line for line in split_lines(module.text) if module.marker in line)
    assert added.count(module.marker) == 3
    for rule in all_rules():
        assert not rule.triggered_by(added), rule.CODE


# -- IPython syntax --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "spans"),
    [
        ("!pip install torch_npu\nimport torch\n", [(0, 1)]),
        ("%matplotlib inline\n%%time\n", [(0, 1), (1, 2)]),
        ("files = !ls\na, b = %sx echo 1 2\n", [(0, 1), (1, 2)]),
        ("torch.cuda?\n??model.forward\nnp.*load*?\n", [(0, 1), (1, 2), (2, 3)]),
        ("/print 1\n,f a b\n;f a\n", [(0, 1), (1, 2), (2, 3)]),
        ("!pip install \\\n    torch \\\n    apex\nx = 1\n", [(0, 3)]),
        ("for i in range(2):\n    !echo {i}\n    %time f()\n", [(1, 2), (2, 3)]),
        # Python, not IPython: continuation lines of a bracket or a backslash, string contents.
        ("x = (a\n     % b)\n", []),
        ("ok = (a\n      != b)\n", []),
        ("y = 1 + \\\n    !flag if False else 2\n", []),
        ('doc = """\n!not a shell line\n%not a magic\n"""\n!ls\n', [(4, 5)]),
        ("s = '%d items' % n  # what?\nt = '''a\n'''  # ?\n", []),
        ("x = 1  # a comment with ( and [\n!ls\n", [(1, 2)]),
        ("d = {'a': '('}\n!ls\n", [(1, 2)]),
    ],
)
def test_ipython_lines_are_found_only_where_a_statement_starts(
    source: str, spans: list[tuple[int, int]]
) -> None:
    assert [(span.start, span.stop) for span in ipython_spans(split_lines(source))] == spans
