"""Facts across files (migrator.analysis.project): module resolution, and a run over a small
repository with a CUDA extension whose Python call sites NPU932 reports, through the real
command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.analysis.project import AmbiguousModule, Module, ProjectFacts, Resolved, module_name

REPO = Path(__file__).resolve().parent.parent
EXTENSION_PROJECT = REPO / "fixtures" / "npu932" / "alias_module.project"

CALLER = """\
import torch
from mypkg import _C


def postprocess(boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    return _C.nms(boxes, scores, 0.5)
"""
NESTED_CALLER = """\
from .. import _C


def pool(features, rois):
    return _C.roi_align_forward(features, rois, 0.25)
"""


def npu_migrate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "migrator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A repository in the shape of detectron2 / maskrcnn-benchmark: a setup.py that builds
    ``mypkg._C`` from csrc/, and Python code that calls its functions."""
    root = tmp_path / "repo"
    shutil.copytree(EXTENSION_PROJECT, root)
    (root / "tools").mkdir()
    (root / "tools" / "infer.py").write_text(CALLER)
    (root / "mypkg" / "layers").mkdir()
    (root / "mypkg" / "layers" / "__init__.py").write_text("")
    (root / "mypkg" / "layers" / "roi.py").write_text(NESTED_CALLER)
    return root


def reported(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int, str]]:
    return sorted(
        (os.path.normpath(d["path"]), d["line"], d["message"].split("`")[1])
        for d in json.loads(result.stdout)["diagnostics"]
        if d["code"] == "NPU932"
    )


def check(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return npu_migrate(root, "--check", "--select", "NPU932", "--format", "json", *extra, ".")


def test_call_sites_of_the_extension_are_reported_with_its_definition(repository: Path) -> None:
    result = check(repository, "--no-cache")
    assert result.returncode == 1, result.stderr  # manual findings fail --check
    assert reported(result) == [
        ("mypkg/layers/roi.py", 5, "roi_align_forward"),
        ("tools/infer.py", 6, "nms"),
    ]
    messages = [d["message"] for d in json.loads(result.stdout)["diagnostics"]]
    assert any("defined in csrc/vision.cpp:8, built in setup.py:9" in m for m in messages)


def test_the_cache_follows_the_native_sources(repository: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    first = check(repository, "--cache-dir", cache)
    again = check(repository, "--cache-dir", cache)
    assert reported(again) == reported(first)
    summary = json.loads(again.stdout)["summary"]
    assert summary["cached"] == summary["scanned"] > 0
    # The extension stops exporting nms: the unchanged caller must be checked again.
    vision = repository / "csrc" / "vision.cpp"
    vision.write_text(vision.read_text().replace('m.def("nms", &nms, ', "// "))
    after = check(repository, "--cache-dir", cache)
    assert reported(after) == [("mypkg/layers/roi.py", 5, "roi_align_forward")]


def test_summaries_are_remembered_by_content(repository: Path, tmp_path: Path) -> None:
    """A warm run takes a file's project summary from the cache instead of parsing the file
    again: what the cache says is what the run uses (shown by editing the cached summary),
    until the file's content changes."""
    cache = tmp_path / "cache"
    first = check(repository, "--cache-dir", str(cache))
    [stored] = cache.glob("summaries-*.json")
    summaries = json.loads(stored.read_text())
    [key] = [key for key in summaries if key.endswith("/setup.py")]
    assert summaries[key]["NPU932"]["builds"][0]["name"] == "mypkg._C"
    assert reported(check(repository, "--cache-dir", str(cache))) == reported(first)

    summaries[key]["NPU932"]["builds"][0]["name"] = "otherpkg._C"
    stored.write_text(json.dumps(summaries))
    assert reported(check(repository, "--cache-dir", str(cache))) == []  # the cached summary

    setup = repository / "setup.py"
    setup.write_text(setup.read_text() + "# touched\n")  # new content: summarised again
    assert reported(check(repository, "--cache-dir", str(cache))) == reported(first)


def test_worker_processes_get_the_facts(repository: Path) -> None:
    for number in range(40):  # enough files for the worker pool
        (repository / "tools" / f"script_{number:02}.py").write_text(CALLER)
    result = check(repository, "--no-cache", "--jobs", "2")
    assert len(reported(result)) == 42


def test_a_single_file_run_knows_only_its_own_files(repository: Path) -> None:
    """Facts come from the files of the run: alone, the caller cannot see the extension."""
    result = npu_migrate(
        repository, "--check", "--select", "NPU932", "--no-cache", "tools/infer.py"
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- module resolution ---------------------------------------------------------------------------


def facts_of(root: Path, *paths: str) -> ProjectFacts:
    modules = []
    for relative in paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    for relative in paths:
        path = root / relative
        modules.append(Module(str(path), module_name(str(path))))
    return ProjectFacts(tuple(modules))


def test_module_names_follow_the_packages(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/optim.py")
    assert [m.name for m in facts.modules] == ["pkg", "pkg.sub", "pkg.sub.optim"]
    found = facts.resolve("pkg.sub.optim.build_optimizer", str(tmp_path / "train.py"))
    assert isinstance(found, Resolved)
    assert found.module.name == "pkg.sub.optim" and found.rest == ("build_optimizer",)


def test_relative_imports_resolve_from_the_importer(tmp_path: Path) -> None:
    facts = facts_of(tmp_path, "pkg/__init__.py", "pkg/utils/__init__.py", "pkg/utils/optim.py")
    importer = tmp_path / "pkg" / "engine" / "trainer.py"
    importer.parent.mkdir()
    (importer.parent / "__init__.py").touch()
    found = facts.resolve("..utils.optim.build", str(importer))
    assert isinstance(found, Resolved) and found.module.name == "pkg.utils.optim"
    assert facts.resolve("....too.high", str(importer)) is None


def test_folders_without_init_resolve_from_the_script_folder(tmp_path: Path) -> None:
    """`from utils.optim import x` in a script next to a utils/ folder that is no package."""
    facts = facts_of(tmp_path, "utils/optim.py", "other/utils/optim.py")
    found = facts.resolve("utils.optim.create", str(tmp_path / "train.py"))
    assert isinstance(found, Resolved) and found.module.path == str(tmp_path / "utils/optim.py")
    nested = facts.resolve("utils.optim.create", str(tmp_path / "other" / "main.py"))
    assert isinstance(nested, Resolved)
    assert nested.module.path == str(tmp_path / "other/utils/optim.py")
    # A folder that is neither the importer's nor an ancestor's is not on its path.
    far = facts.resolve("utils.optim.create", str(tmp_path / "elsewhere" / "x" / "a.py"))
    assert isinstance(far, Resolved) and far.module.path == str(tmp_path / "utils/optim.py")


def test_packages_of_the_same_name_resolve_to_the_nearest_or_are_ambiguous(
    tmp_path: Path,
) -> None:
    facts = facts_of(
        tmp_path, "src1/a/__init__.py", "src1/a/optim.py", "src2/a/__init__.py", "src2/a/optim.py"
    )
    near = facts.resolve("a.optim.build", str(tmp_path / "src1" / "train.py"))
    assert isinstance(near, Resolved) and near.module.path == str(tmp_path / "src1/a/optim.py")
    found = facts.resolve("a.optim.build", str(tmp_path / "tools" / "train.py"))
    assert isinstance(found, AmbiguousModule)
    assert "src1/a/optim.py" in found and "src2/a/optim.py" in found


def test_a_link_stage_keeps_indexes_for_a_bounded_amount_of_source(tmp_path: Path) -> None:
    """ProjectFiles keeps the indexes it parsed for the rules of one link stage, the least
    recently asked for going once they stand for more than its byte bound: parsed again if
    asked for again, released unless a rule still holds one."""
    from migrator.analysis.project import ProjectFiles

    paths = []
    for name in ("a", "b", "c"):
        path = tmp_path / f"{name}.py"
        path.write_text(f"def {name}():\n    return {name!r}\n" + "# padding\n" * 10)
        paths.append(str(path))
    reads: list[str] = []

    def read(path: str) -> bytes:
        reads.append(os.path.basename(path))
        return Path(path).read_bytes()

    size = (tmp_path / "a.py").stat().st_size
    files = ProjectFiles(paths, read, kept_bytes=2 * size)
    held = files.index(paths[0])  # a rule that keeps an index it asked for
    dropped = files.index(paths[1])
    del dropped
    assert files.index(paths[0]) is held  # kept, and now the most recent
    files.index(paths[2])  # more than the bound: b, the least recent, goes
    assert reads == ["a.py", "b.py", "c.py"]
    again = files.index(paths[1])  # parsed again; a (held by this test) goes, unreleased
    assert reads == ["a.py", "b.py", "c.py", "b.py"]
    assert again is not None and "b" in again.module_scope.bindings
    assert held is not None and "a" in held.module_scope.bindings
    files.release()
