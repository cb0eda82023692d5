"""Run-wide test settings: in the README's test command nothing may be skipped.

``make test`` sets ``NPU_MIGRATE_NO_SKIPS=1``: its set-up installs everything every test needs
(torch, the runtime, the browser), so a test that skips there (torch's sources missing for the
soundness and fuzz tests, the runtime not importable) would hide a broken set-up behind a green
run. Such a skip is reported as a failure with its reason. Run pytest directly to allow skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


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
