"""Run-wide test settings: in the README's test command nothing may be skipped.

``make test`` sets ``NPU_MIGRATE_NO_SKIPS=1``: its set-up installs everything every test needs
(torch, the runtime, the browser), so a test that skips there (torch's sources missing for the
soundness and fuzz tests, the runtime not importable) would hide a broken set-up behind a green
run. Such a skip is reported as a failure with its reason. Run pytest directly to allow skips.

With pytest-xdist (``-n 2``), the modules of :data:`ONE_WORKER_MODULES` each run on one worker.

Tests marked ``slow`` are deselected unless ``NPU_MIGRATE_SLOW=1`` (``make test-all``): each
repeats what a test of the default run already shows (the same program at a second world size,
another set of random moments, more of torch's sources), so the README's test command stays
within CI's time while the whole set remains one switch away.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

SLOW = os.environ.get("NPU_MIGRATE_SLOW") == "1"  # the switch tests/_tiers.py reads for the tests

# Modules whose module- or session-scoped fixture is expensive (the runtime contract's runs every
# fixture's migrated side in one interpreter, about a minute; the end-to-end modules migrate and
# run programs once for all their tests). xdist's default distribution hands their tests to both
# workers, which then both build the fixture; as one unit of work each, it is built once while the
# other worker runs other tests. (xdist's own `--dist loadgroup` would do this from marks, but it
# renames the tests through an attribute pytest 9 no longer reads, so its groups are ignored.)
ONE_WORKER_MODULES = frozenset(
    {
        "tests/test_runtime_contract.py",
        "tests/test_e2e_gated_amp.py",
        "tests/test_e2e_lookahead_kept.py",
        "tests/test_e2e_multitask_late_heads.py",
        "tests/test_e2e_combined_unfused.py",
        "tests/test_e2e_zero_grad.py",
        "tests/test_ddp_order_runs.py",
        "tests/test_pathological.py",
        "tests/test_formats.py",
        "tests/test_html_browser.py",
    }
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load distribution (each test to the first idle worker), except that each module
    of :data:`ONE_WORKER_MODULES` is one unit of work; None (xdist's choice) under another
    ``--dist``."""
    if config.getvalue("dist") != "load":
        return None
    missing = sorted(m for m in ONE_WORKER_MODULES if not (config.rootpath / m).is_file())
    if missing:
        raise pytest.UsageError(f"ONE_WORKER_MODULES names modules that do not exist: {missing}")
    from xdist.scheduler import LoadScopeScheduling

    class ModulesOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return ModulesOnOneWorker(config, log)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow: repeats what a default test shows; runs with NPU_MIGRATE_SLOW=1 (make test-all)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SLOW:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if (
        os.environ.get("NPU_MIGRATE_NO_SKIPS") == "1"
        and report.skipped
        and not hasattr(report, "wasxfail")
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"skipped in the README's test command, which must run every test: {reason}"
        )
