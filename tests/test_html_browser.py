"""The HTML report in a real browser: Debian's Chromium, headless, driven by Playwright.

Playwright's own browser builds are never used (nor downloaded): the page is opened in
``/usr/bin/chromium``, which ``make test`` installs when it is missing. Where Chromium or
Playwright is absent the tests skip; ``make test`` (so CI) turns a skip into a failure
(``NPU_MIGRATE_NO_SKIPS``, conftest.py): a skipped browser test there would be a broken set-up
passing as green.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from migrator.cli import main
from migrator.formats.html import render

REPOSITORY = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# Root in CI needs --no-sandbox; the rest keeps Chromium from reaching for the network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
HOSTILE = '</script><img src=x onerror="window.__injected = 1">'


def unavailable(reason: str) -> None:
    pytest.skip(f"the browser test cannot run: {reason}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="npu-migrate-chromium-")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        # Nothing may leave the page: every request but the report file itself fails the test.
        requests: list[str] = []
        context.on("request", lambda request: requests.append(request.url))
        context.requests = requests  # type: ignore[attr-defined]
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


class Page:
    """A report opened in a fresh tab, with every console error and page error recorded."""

    def __init__(self, context: Any, path: Path) -> None:
        self.page = context.new_page()
        self.page.set_default_timeout(10_000)
        self.problems: list[str] = []
        self.page.on(
            "console",
            lambda message: (
                self.problems.append(f"console {message.type}: {message.text}")
                if message.type in ("error", "warning")
                else None
            ),
        )
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        context.requests.clear()
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("#file-list .vrow")
        assert [url for url in context.requests if url != path.as_uri()] == []

    def rows(self) -> list[str]:
        paths: list[str] = self.page.eval_on_selector_all(
            "#file-list .vrow", "rows => rows.map(row => row.dataset.path)"
        )
        return paths

    def count(self) -> str:
        text: str = self.page.text_content("#file-count")
        return text


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the bundled examples plus a file whose text is markup, by --check."""
    folder = tmp_path_factory.mktemp("report")
    project = folder / "project"
    shutil.copytree(REPOSITORY / "examples", project / "examples")
    (project / "pyproject.toml").write_text("[tool.npu-migrate]\n")
    (project / "tools").mkdir()
    (project / "tools" / "hostile.py").write_text(
        f"import torch\nBANNER = {HOSTILE!r}\nnet = torch.nn.DataParallel(net)\n"
    )
    cwd = Path.cwd()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
        patch.chdir(project)
        code = main(["-j", "1", "--check", "--format", "html", "--report-dir", "report", "."])
    assert Path.cwd() == cwd
    assert code == 1
    return project / "report" / "index.html"


def test_the_report_loads_filters_and_opens_a_diff(browser: Any, report: Path) -> None:
    view = Page(browser, report)
    page = view.page
    assert view.rows() == ["examples/imagenet/main.py", "tools/hostile.py"]
    assert view.count() == "2 of 2 files"
    assert "NPU302" in page.text_content("#rules")
    assert page.locator("svg.chart rect").count() >= 3

    page.fill("#filter-text", "hostile")
    assert view.rows() == ["tools/hostile.py"]
    page.fill("#filter-text", "")
    page.select_option("#filter-code", "NPU101")
    assert view.rows() == ["examples/imagenet/main.py"]
    page.select_option("#filter-code", "")
    page.select_option("#filter-kind", "manual")
    assert view.rows() == ["tools/hostile.py"]
    page.select_option("#filter-kind", "")
    page.click("#folders tbody tr:has-text('examples/imagenet')")
    assert view.rows() == ["examples/imagenet/main.py"]

    page.click(".vrow[data-path='examples/imagenet/main.py']")
    page.wait_for_selector("#detail table.diff")
    assert page.locator("#detail td.add", has_text="import torch_npu").count() == 1
    assert page.locator("#detail td.del", has_text="torch.cuda.synchronize()").count() == 1
    finding = page.locator("#detail tr.finding", has_text="`torch.cuda.synchronize` ->")
    assert finding.count() == 1
    finding.locator("button.code-link").click()
    page.wait_for_selector("dialog#explain[open]")
    assert "## What it does" in page.text_content("dialog#explain pre")
    page.click("dialog#explain button")
    assert view.problems == []


def test_file_contents_are_shown_as_text_never_as_markup(browser: Any, report: Path) -> None:
    view = Page(browser, report)
    page = view.page
    page.click(".vrow[data-path='tools/hostile.py']")
    page.wait_for_selector("#detail table.diff")
    assert HOSTILE in page.text_content("#detail table.diff")
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__injected") is None
    assert view.problems == []


def test_five_thousand_files_load_and_the_table_scrolls(browser: Any, tmp_path: Path) -> None:
    files = [
        {
            "path": f"models/family_{n // 100:02d}/model_{n:04d}.py",
            "status": "changed" if n % 3 else "unchanged",
            "reason": None,
            "diagnostics": [[None, 2, 5, "NPU920", "manual", "`DataParallel` is not supported"]],
            "view": [
                {
                    "cell": None,
                    "chunks": [
                        [1, 1, [" import torch", "-x = y.cuda()", "+x = y.npu()", " net = 1"]]
                    ],
                }
            ],
        }
        for n in range(5000)
    ]
    data = {
        "tool": "npu-migrate",
        "version": "test",
        "mode": "check",
        "fixed_label": "fixable",
        "arguments": ["."],
        "exit_code": 1,
        "summary": {
            "scanned": 5000,
            "changed": 3333,
            "unchanged": 1667,
            "skipped": 0,
            "errors": 0,
            "copied": 0,
            "cached": 0,
            "rules": {"NPU920": {"fixed": 0, "manual": 5000, "info": 0}},
        },
        "baseline": None,
        "rules": {
            "NPU920": {
                "name": "data-parallel",
                "summary": "s",
                "fix_safety": "none",
                "documentation": "## What it does\n...",
            }
        },
        "files": files,
    }
    path = tmp_path / "big.html"
    path.write_text(render(data))
    view = Page(browser, path)
    page = view.page
    assert view.count() == "5000 of 5000 files"
    assert 10 < len(view.rows()) < 100  # only the rows in view are drawn
    page.eval_on_selector("#file-list", "list => { list.scrollTop = list.scrollHeight; }")
    page.wait_for_selector(".vrow[data-path='models/family_49/model_4999.py']")
    page.click(".vrow[data-path='models/family_49/model_4999.py']")
    page.wait_for_selector("#detail tr.finding")
    page.click(".vhead [data-sort='path']")  # descending by path: the last file first
    assert view.rows()[0] == "models/family_49/model_4999.py"
    assert view.problems == []
