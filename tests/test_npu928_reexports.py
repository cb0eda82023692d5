"""NPU928 through the real command line, on a repository in yolov5's shape: ultralytics'
``autocast`` re-exported by ``utils/torch_utils.py`` (and again by a package's ``__init__.py``)
and called by another name in the training scripts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from _cli import run_npu_migrate

REEXPORT = """\
from ultralytics.utils.torch_utils import (  # noqa: F401
    autocast as smart_amp_autocast,
)
"""
FALLBACK = """\
try:
    from ultralytics.utils.torch_utils import autocast as smart_amp_autocast
except ImportError:
    from torch.cuda.amp import autocast as smart_amp_autocast  # noqa: F401
"""
TORCH_ONLY = "from torch.cuda.amp import autocast as smart_amp_autocast  # noqa: F401\n"
TRAIN = """\
from utils.torch_utils import smart_amp_autocast


def train(model, images, amp):
    with smart_amp_autocast(amp):
        return model(images)
"""
SEGMENT_TRAIN = """\
import utils


def train(model, images, amp):
    with utils.amp_context(amp):
        return model(images)
"""
CERTAIN = "`ultralytics.utils.torch_utils.autocast` defaults to"
DOUBT = "cannot tell whether this is `ultralytics.utils.torch_utils.autocast`"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "yolov5"
    (root / "utils").mkdir(parents=True)
    (root / "segment").mkdir()
    (root / "utils" / "__init__.py").write_text(
        "from .torch_utils import smart_amp_autocast as amp_context  # noqa: F401\n"
    )
    (root / "utils" / "torch_utils.py").write_text(REEXPORT)
    (root / "train.py").write_text(TRAIN)
    (root / "segment" / "train.py").write_text(SEGMENT_TRAIN)
    return root


def check(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_npu_migrate(
        "--check", "--select", "NPU928", "--format", "json", *extra, ".", cwd=root, timeout=120
    )


def findings(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int, str]]:
    """(path, line, how sure) of each NPU928 finding."""
    found = []
    for diagnostic in json.loads(result.stdout)["diagnostics"]:
        message = diagnostic["message"]
        sure = "doubt" if message.startswith(DOUBT) else "certain" if CERTAIN in message else "?"
        found.append((os.path.normpath(diagnostic["path"]), diagnostic["line"], sure))
    return sorted(found)


def test_calls_of_a_reexported_helper_are_reported(repository: Path) -> None:
    result = check(repository, "--no-cache")
    assert result.returncode == 1, result.stderr  # manual findings fail --check
    assert findings(result) == [("segment/train.py", 5, "certain"), ("train.py", 5, "certain")]


def test_a_change_of_the_reexporting_module_rechecks_its_callers(
    repository: Path, tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    first = check(repository, "--cache-dir", cache)
    assert json.loads(check(repository, "--cache-dir", cache).stdout)["summary"]["cached"] > 0
    torch_utils = repository / "utils" / "torch_utils.py"
    torch_utils.write_text(FALLBACK)
    fallback = check(repository, "--cache-dir", cache)
    torch_utils.write_text(TORCH_ONLY)
    torch_only = check(repository, "--cache-dir", cache)
    assert findings(first) == [("segment/train.py", 5, "certain"), ("train.py", 5, "certain")]
    assert findings(fallback) == [("segment/train.py", 5, "doubt"), ("train.py", 5, "doubt")]
    assert findings(torch_only) == []


def test_the_caller_alone_is_not_reported(repository: Path) -> None:
    """Facts come from the files of the run: given only train.py, npu-migrate cannot see what
    utils/torch_utils.py binds, and says nothing it cannot back."""
    result = run_npu_migrate(
        "--check", "--select", "NPU928", "--no-cache", "train.py", cwd=repository, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_import_that_could_name_two_files_is_reported_with_the_doubt(
    repository: Path,
) -> None:
    """`python tools/train.py` finds tools/utils/torch_utils.py, `python -m tools.train` or the
    installed project finds utils/torch_utils.py, which re-exports the helper."""
    (repository / "setup.py").write_text("from setuptools import setup\n\nsetup()\n")
    (repository / "tools" / "utils").mkdir(parents=True)
    (repository / "tools" / "utils" / "torch_utils.py").write_text(
        "def smart_amp_autocast(enabled):\n    return None\n"
    )
    (repository / "tools" / "train.py").write_text(TRAIN)
    result = check(repository, "--no-cache")
    assert ("tools/train.py", 5, "doubt") in findings(result)
    [message] = [
        d["message"]
        for d in json.loads(result.stdout)["diagnostics"]
        if os.path.normpath(d["path"]) == "tools/train.py"
    ]
    assert (
        "`utils.torch_utils` could be any of tools/utils/torch_utils.py, utils/torch_utils.py"
        in (message)
    )
