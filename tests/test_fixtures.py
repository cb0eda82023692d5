"""Every rule fixture: ``fixtures/<code>/<case>.before.py`` and its expectations.

- ``<case>.after.py``: the expected output; absent means the file must stay byte-identical.
- ``<case>.diagnostics.txt``: the expected diagnostics, one ``LINE:COL SEVERITY CODE MESSAGE`` per
  line; absent means diagnostics are not compared.
- ``<case>.options.json``: optional run settings: ``select`` (codes run in the chain, default the
  fixture's own rule), ``target``, ``unsafe_fixes``, ``rule_options``, ``amp``, and for NPU930 /
  NPU931 ``torch_npu_version`` and ``torch_npu_api`` (entries as in the pyproject table).
- ``<case>.project/``: optional, the other files of the repository the case lives in (modules,
  C++ sources, a ``setup.py``): the rules' project facts are built from them and from the case,
  which runs as if it were ``<case>.project/<case>.py``.

The expected output must itself be a fixed point: running the chain on ``.after.py`` changes
nothing. ``pytest --update-fixtures`` rewrites the expectations from the current output.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from migrator.analysis.project import NATIVE_SUFFIXES, ProjectFacts
from migrator.diagnostics import Diagnostic
from migrator.discovery import PYTHON_SUFFIXES
from migrator.engine import migrate_source
from migrator.project_stage import ProjectBuilder
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.rule import Rule
from migrator.settings import AmpPolicy, Settings, Target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RULE_DIR = re.compile(r"npu\d{3}")


def fixture_cases() -> list[Path]:
    return sorted(
        path
        for directory in FIXTURES.iterdir()
        if directory.is_dir() and RULE_DIR.fullmatch(directory.name)
        for path in directory.glob("*.before.py")
    )


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.before.py')}"


def sibling(before: Path, suffix: str) -> Path:
    return before.with_name(before.name.removesuffix(".before.py") + suffix)


def load_settings(before: Path) -> tuple[tuple[type[Rule], ...], Settings]:
    options_path = sibling(before, ".options.json")
    options = json.loads(options_path.read_text()) if options_path.exists() else {}
    select = options.get("select", [before.parent.name.upper()])
    rules = select_rules(all_rules(), select)
    assert rules, f"{case_id(before)}: no rule selected"
    settings = Settings(
        target=Target(options.get("target", "npu")),
        unsafe_fixes=options.get("unsafe_fixes", False),
        rule_options=options.get("rule_options", {}),
        torch_npu_version=options.get("torch_npu_version"),
        torch_npu_api=options.get("torch_npu_api", {}),
        amp=AmpPolicy(options.get("amp", "as-written")),
    )
    return rules, replace(settings, project=project_facts(before, rules, settings))


@pytest.fixture(autouse=True)
def inside_project(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with a project folder runs from inside it, the way `npu-migrate .` is run from
    a repository's top: paths in messages are relative to it."""
    callspec = getattr(request.node, "callspec", None)
    before = callspec.params.get("before") if callspec is not None else None
    if isinstance(before, Path) and sibling(before, ".project").is_dir():
        monkeypatch.chdir(sibling(before, ".project"))


def case_path(before: Path) -> str:
    """The path the case runs under: ``<case>.py`` inside its project folder when it has one
    (the current folder then, see inside_project)."""
    if sibling(before, ".project").is_dir():
        return before.name.removesuffix(".before.py") + ".py"
    return before.name


def project_facts(
    before: Path, rules: tuple[type[Rule], ...], settings: Settings | None = None
) -> ProjectFacts:
    """The facts of the case's repository (the project folder is the current folder, see
    inside_project); a rule's link reads the case itself from ``before``."""
    project = sibling(before, ".project")
    if not project.is_dir():
        return ProjectFacts()
    builder = ProjectBuilder(rules)
    builder.add_python(case_path(before), before.read_bytes())
    for path in sorted(project.rglob("*")):
        shown = str(path.relative_to(project))
        if path.suffix in PYTHON_SUFFIXES:
            builder.add_python(shown, path.read_bytes())
        elif path.name.endswith(NATIVE_SUFFIXES):
            builder.add_native(shown, path.read_bytes())

    def read(path: str) -> bytes | None:
        return before.read_bytes() if path == case_path(before) else (project / path).read_bytes()

    facts = builder.build(settings, read)
    assert not builder.link_failures, builder.link_failures
    return facts


def render(diagnostics: list[Diagnostic]) -> str:
    return "".join(f"{d.line}:{d.column} {d.severity} {d.code} {d.message}\n" for d in diagnostics)


@pytest.mark.parametrize("before", fixture_cases(), ids=case_id)
def test_fixture(before: Path, request: pytest.FixtureRequest) -> None:
    rules, settings = load_settings(before)
    source = before.read_bytes()
    result = migrate_source(source, case_path(before), rules, settings)
    assert result.status is not Status.ERROR, render(result.diagnostics)

    after_path = sibling(before, ".after.py")
    diagnostics_path = sibling(before, ".diagnostics.txt")
    if request.config.getoption("--update-fixtures"):
        if result.migrated != source:
            after_path.write_bytes(result.migrated)
        elif after_path.exists():
            after_path.unlink()
        diagnostics_path.write_text(render(result.diagnostics))
        return

    expected = after_path.read_bytes() if after_path.exists() else source
    assert result.migrated.decode() == expected.decode()
    assert result.migrated == expected  # byte-level: encodings, BOMs, line endings
    if diagnostics_path.exists():
        assert render(result.diagnostics) == diagnostics_path.read_text()

    again = migrate_source(result.migrated, case_path(before), rules, settings)
    assert again.status is not Status.ERROR, render(again.diagnostics)
    assert again.migrated == result.migrated, "the rewrite is not idempotent"


@pytest.mark.parametrize("before", fixture_cases(), ids=case_id)
def test_trigger_admits_every_fixture_a_rule_acts_on(before: Path) -> None:
    """The pre-scan must never hide a file from a rule that would edit or report it."""
    rules, settings = load_settings(before)
    source = before.read_bytes()
    text = source.decode("utf-8", errors="replace")
    for rule in rules:
        if rule.triggered_by(text, settings):
            continue
        forced = type(rule.__name__, (rule,), {"triggers": classmethod(lambda cls, s: ("",))})
        result = migrate_source(source, case_path(before), (forced,), settings)
        assert result.migrated == source and not result.diagnostics, (
            f"{rule.CODE}'s TRIGGER does not match {case_id(before)}, but the rule acts on it"
        )


def test_every_rule_has_the_required_cases() -> None:
    """STYLE.md: an alias case, a look-alike that stays as it is, an ambiguous case that reports."""
    for rule in all_rules():
        directory = FIXTURES / rule.CODE.lower()
        cases = {p.name.removesuffix(".before.py"): p for p in directory.glob("*.before.py")}
        for prefix in ("alias", "lookalike", "ambiguous"):
            assert any(name.startswith(prefix) for name in cases), (
                f"fixtures/{directory.name}/ has no {prefix}*.before.py case"
            )
        for name, before in cases.items():
            if name.startswith(("lookalike", "ambiguous")):
                assert not sibling(before, ".after.py").exists(), f"{name} must stay byte-identical"
            if name.startswith("ambiguous"):
                expected = sibling(before, ".diagnostics.txt")
                assert expected.exists() and " manual " in expected.read_text(), (
                    f"{directory.name}/{name} must expect a manual diagnostic"
                )
