"""The rule tables of README.md and docs/rules-*.md are the rules' own headers.

``tools/rule_tables.py`` writes them from ``CODE``, ``NAME``, ``FIX_SAFETY``, ``OPT_IN`` and
``SUMMARY``; ``--check`` fails while one is stale, so a rule added, renamed or re-summarised
without running the tool fails here. Every rule is also explained in prose in its family's
document, outside the generated table.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.registry import all_rules

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "rule_tables.py"
TABLE = re.compile(r"<!-- rule-table:begin.*?<!-- rule-table:end -->", re.DOTALL)


def test_the_generated_tables_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_table_fails_the_check_and_is_rewritten(tmp_path: Path) -> None:
    """The check is not vacuous: a copy of the repository's documents with one row changed
    fails it, and the tool without --check puts the row back."""
    copy = tmp_path / "repo"
    (copy / "tools").mkdir(parents=True)
    (copy / "docs").mkdir()
    (copy / "tools" / "rule_tables.py").write_text(TOOL.read_text())
    for document in [ROOT / "README.md", *(ROOT / "docs").glob("rules-*.md")]:
        (copy / document.relative_to(ROOT)).write_text(document.read_text())
    readme = copy / "README.md"
    original = readme.read_text()
    readme.write_text(original.replace("`npu-fused-optimizer`", "`old-name`", 1))
    script = [sys.executable, str(copy / "tools" / "rule_tables.py")]
    stale = subprocess.run([*script, "--check"], capture_output=True, text=True, cwd=copy)
    assert stale.returncode == 1 and "README.md is stale" in stale.stdout
    subprocess.run(script, check=True, capture_output=True, cwd=copy)
    assert readme.read_text() == original


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.CODE)
def test_every_rule_is_explained_in_its_familys_document(rule: type) -> None:
    package = importlib.import_module(rule.__module__.rpartition(".")[0])
    prose = TABLE.sub("", (ROOT / package.DOCS).read_text())
    assert rule.CODE in prose, f"{package.DOCS} says nothing about {rule.CODE} outside its table"
