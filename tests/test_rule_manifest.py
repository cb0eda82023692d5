"""The rules' manifest (migrator/data/rules_manifest.json) is the rules' own headers, and a run
that reads it instead of importing the rules gives the same results.

``tools/rule_manifest.py`` writes it from the rule classes; ``--check`` fails while it is stale,
so a rule added or edited without running the tool fails here. A run whose ``rules/`` sources
are not those the manifest was made from does not trust it: the registry describes the rules by
importing them, as it did before there was a manifest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from migrator import registry
from migrator.engine import Engine
from migrator.project_stage import ProjectBuilder
from migrator.registry import RuleEntry, all_rules, lazy_rules, rule_entries
from migrator.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "rule_manifest.py"
FIXTURES = ROOT / "fixtures"


def test_the_manifest_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_manifest_fails_the_check_and_is_rewritten(tmp_path: Path) -> None:
    copy = tmp_path / "rules_manifest.json"
    original = registry.MANIFEST.read_text(encoding="utf-8")
    copy.write_text(original.replace('"nvtx"', '"nvtx_renamed"', 1), encoding="utf-8")
    script = [sys.executable, str(TOOL), "--manifest", str(copy)]
    stale = subprocess.run([*script, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert stale.returncode == 1 and "is stale" in stale.stdout
    subprocess.run(script, check=True, capture_output=True, cwd=ROOT)
    assert copy.read_text(encoding="utf-8") == original


def test_the_entries_describe_the_classes() -> None:
    """What the run reads from the manifest is what the classes say."""
    assert rule_entries() == tuple(RuleEntry.of(rule) for rule in all_rules())
    for entry in rule_entries():
        assert entry.rule is None  # read from the file, not made from a class
        assert entry.load() is next(r for r in all_rules() if entry.code == r.CODE)


def test_a_manifest_made_from_other_sources_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule file edited after the manifest was written (its size differs): the registry
    imports the rules rather than run with triggers that may be old."""
    document = json.loads(registry.MANIFEST.read_text(encoding="utf-8"))
    assert registry._read_manifest() is not None
    first = next(iter(document["sources"]))
    document["sources"][first] += 1
    stale = tmp_path / "rules_manifest.json"
    stale.write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.setattr(registry, "MANIFEST", stale)
    assert registry._read_manifest() is None
    monkeypatch.setattr(registry, "MANIFEST", tmp_path / "absent.json")
    assert registry._read_manifest() is None


def every_code() -> list[str]:
    return [entry.code for entry in rule_entries()]


def test_the_lazy_engine_gives_the_eager_results_on_every_fixture() -> None:
    """Every rule, opt-in ones included, over every fixture and its expected output: an engine
    that imports a rule when a file triggers it, reads the chain order and the plans from the
    manifest, and builds only the run plans the triggered rules read, rewrites and reports
    exactly as one given every rule class."""
    lazy = Engine(lazy_rules(every_code()), Settings())
    eager = Engine(all_rules(), Settings())
    compared = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        source = path.read_bytes()
        got, expected = lazy.migrate(source, str(path)), eager.migrate(source, str(path))
        assert (got.status, got.migrated, got.diagnostics) == (
            expected.status,
            expected.migrated,
            expected.diagnostics,
        ), path
        compared += got.status.value != "unchanged"
    assert compared > 100


def test_the_lazy_project_stage_gives_the_eager_facts() -> None:
    """The project stage over the fixtures' projects (Python and native sources) builds the
    same facts whether it imports a rule only for a file holding its project triggers."""
    python = sorted(FIXTURES.rglob("*.py"))
    native = sorted(
        path for path in FIXTURES.rglob("*") if path.suffix in {".cpp", ".cu", ".cc", ".h"}
    )
    facts = []
    for rules in (lazy_rules(every_code()), all_rules()):
        builder = ProjectBuilder(rules)
        for path in python:
            builder.add_python(str(path), path.read_bytes())
        for path in native:
            builder.add_native(str(path), path.read_bytes())
        facts.append(builder.build(Settings()))
    assert facts[0] == facts[1]
    assert facts[0].python and facts[0].native
