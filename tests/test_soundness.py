"""The engine's shortcuts never change a result, on a large real tree: torch's own sources.

The fast path skips work three ways: the rules' ``TRIGGER`` pre-scan keeps most files away from
``ast.parse``; inside ``check()``, candidate filters (``Rule.may_name``, ``names_reaching``)
keep most names away from name resolution; and a file without a fix is never parsed by libcst.
Here every rule runs over every ``.py`` file of the installed torch package with the shortcuts
on and off (``Engine(fast=False)``):

- every file: both analyses give the same status and the same diagnostics;
- every file with a fix: both rewrites give the same bytes (the fast one parses only the slices
  that change, the other the whole file);
- a sample of the files without a fix also goes through the libcst stage
  (``force_rewrite``) and must come out byte-identical, so the analysis never misses an edit the
  rules would make.

torch's sources are a good adversary: they mention ``cuda``, ``device``, ``optim`` and
``DistributedDataParallel`` everywhere without being training scripts, and they use every
Python construct.

The whole tree (2,285 files) costs about 14 CPU-minutes, more than half of what CI allows the
whole suite, so ``make test`` checks every eighth file, a different eighth on each run (chosen
from the run's id, so that CI's runs over time cover the tree; a failure names its eighth, and
``NPU_MIGRATE_SOUNDNESS_EIGHTH=K`` repeats it). ``make test-all`` (``NPU_MIGRATE_SLOW=1``)
checks every file: run it after a change to a rule's ``TRIGGER``, its candidate filters or the
engine's slicing, where a missed file would show.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _tiers import SLOW, sample_index

from migrator.engine import Engine
from migrator.registry import all_rules
from migrator.results import FileResult, Status
from migrator.settings import Settings, Target

SHARDS = 8  # parallel pieces for pytest-xdist
SAMPLE = 1 if SLOW else 8  # every SAMPLEth file
REWRITE_EVERY = 8  # every Nth file without a fix also goes through libcst
ACCELERATOR_EVERY = 3  # --target accelerator only changes the device rules: a third of the files


def torch_files() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.py"))


FILES = torch_files()


def render(result: FileResult) -> tuple[object, ...]:
    found = [(d.line, d.column, d.code, d.severity, d.message) for d in result.diagnostics]
    return result.status, found


def unparsable_and_untriggered(thorough: FileResult, quick: FileResult) -> bool:
    """A file that does not parse (torch ships Python 3.12-only test files) is an error only
    where it is parsed: the pre-scan rightly never parses a file no rule could act on."""
    return (
        thorough.status is Status.ERROR
        and thorough.diagnostics[0].message.startswith("syntax error")
        and quick.status is Status.UNCHANGED
        and not quick.diagnostics
    )


@pytest.mark.skipif(not FILES, reason="torch is not installed")
@pytest.mark.parametrize("target", [Target.NPU, Target.ACCELERATOR], ids=str)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_shortcuts_change_nothing_on_torch_sources(
    shard: int, target: Target, testrun_uid: str
) -> None:
    eighth = sample_index("NPU_MIGRATE_SOUNDNESS_EIGHTH", testrun_uid, SAMPLE)
    print(f"NPU_MIGRATE_SOUNDNESS_EIGHTH={eighth}: files {eighth}, {eighth + SAMPLE}, ...")
    rules = all_rules()
    settings = Settings(target=target, unsafe_fixes=True)
    fast = Engine(rules, settings)
    slow = Engine(rules, settings, fast=False)
    forced = Engine(rules, settings, fast=False, force_rewrite=True)
    compared = rewritten = 0
    for number, path in enumerate(FILES[eighth::SAMPLE]):
        if number % SHARDS != shard:
            continue
        if target is Target.ACCELERATOR and (number // SHARDS) % ACCELERATOR_EVERY:
            continue
        source = path.read_bytes()
        shown = str(path)
        quick = fast.migrate(source, shown, apply=False)
        thorough = slow.migrate(source, shown, apply=False)
        if unparsable_and_untriggered(thorough, quick):
            continue
        assert render(thorough) == render(quick), f"{shown}: shortcuts differ"
        compared += 1
        if quick.status is Status.CHANGED:
            written = fast.migrate(source, shown)
            assert written.status is Status.CHANGED, f"{shown}: {written.diagnostics[0].message}"
            assert written.sliced, f"{shown}: fell back to a whole-file parse"
            assert slow.migrate(source, shown).migrated == written.migrated, f"{shown}: bytes"
            rewritten += 1
        elif target is Target.NPU and (number // SHARDS) % REWRITE_EVERY == 0:
            untouched = forced.migrate(source, shown)
            assert render(untouched) == render(quick), f"{shown}: the libcst stage disagrees"
            assert untouched.migrated == source
    assert compared > 0
    if target is Target.NPU:
        assert rewritten > 0
