"""The file layer: atomic writes, the result cache, discovery order, diffs; and where a run
processes its files (this process or workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from migrator.cache import code_fingerprint
from migrator.results import Status
from migrator.runner import (
    TEMP_SUFFIX,
    Discovery,
    Excluder,
    Group,
    Job,
    Member,
    Mode,
    Outcome,
    ResultCache,
    Task,
    cache_key,
    discover,
    run,
    unified_diff,
    write_atomic,
)
from migrator.settings import Settings, Target

UNMIGRATED = (
    b"from apex import amp\n"
    b"from apex.optimizers import NpuFusedSGD\n"
    b"optimizer = NpuFusedSGD(model.parameters(), lr=0.1)\n"
    b"model, optimizer = amp.initialize(model, optimizer)\n"
)
MANUAL = (
    b"try:\n"
    b"    from apex import amp\n"
    b"except ImportError:\n"
    b"    from compat import amp\n"
    b"model, optimizer = amp.initialize(model, optimizer)\n"
)
CHECK = Job(Mode.CHECK, ("NPU102",), Settings())


def leftovers(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.endswith(TEMP_SUFFIX)]


def test_write_atomic_replaces_content_and_sets_mode(tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_bytes(b"old\n")
    write_atomic(str(target), b"new\n", 0o640)
    assert target.read_bytes() == b"new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert leftovers(tmp_path) == []


def test_write_atomic_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    blocker = tmp_path / "a.py"
    blocker.mkdir()  # renaming a file over a folder fails after the data is written
    with pytest.raises(OSError):
        write_atomic(str(blocker), b"new\n", 0o644)
    assert blocker.is_dir()
    assert leftovers(tmp_path) == []


def test_write_atomic_replaces_a_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_bytes(b"old\n")
    link = tmp_path / "link.py"
    link.symlink_to(outside)
    write_atomic(str(link), b"new\n", 0o644)
    assert outside.read_bytes() == b"old\n"
    assert not link.is_symlink() and link.read_bytes() == b"new\n"


def test_interrupted_writes_never_leave_a_partial_file(tmp_path: Path) -> None:
    """Ctrl-C at whatever moment: the file holds one whole version, no temporary is left."""
    target = tmp_path / "big.py"
    first, second = b"a" * 8_000_000, b"b" * 8_000_000
    target.write_bytes(first)
    script = textwrap.dedent(
        f"""
        import signal
        import sys
        from migrator.runner import write_atomic
        # Whatever this test inherited (a background job ignores Ctrl-C): Python's own handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("ready", flush=True)
        while True:
            for data in ({first[:1]!r} * 8_000_000, {second[:1]!r} * 8_000_000):
                write_atomic({str(target)!r}, data, 0o644)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    for _ in range(3):  # interrupt a few writes in, whatever they are doing then
        assert child.poll() is None
        data = target.read_bytes()
        assert data in (first, second)
    child.send_signal(signal.SIGINT)
    child.wait(timeout=60)
    assert child.returncode != 0
    assert target.read_bytes() in (first, second)
    assert leftovers(tmp_path) == []


def test_cache_answers_unchanged_files_and_only_on_a_hash_match(tmp_path: Path) -> None:
    source = tmp_path / "manual.py"
    source.write_bytes(MANUAL)
    discovery = discover([str(source)], Excluder((), tmp_path))
    key = cache_key(CHECK)

    first = run(discovery, CHECK, 1, ResultCache(tmp_path / "cache", key)).outcomes
    again = run(discovery, CHECK, 1, ResultCache(tmp_path / "cache", key)).outcomes
    assert [o.cached for o in first] == [False]
    assert [o.cached for o in again] == [True]
    assert again[0].diagnostics == first[0].diagnostics  # manual findings come back too

    source.write_bytes(UNMIGRATED)  # new content: the cache has no say
    changed = run(discovery, CHECK, 1, ResultCache(tmp_path / "cache", key)).outcomes
    assert [(o.status, o.cached) for o in changed] == [(Status.CHANGED, False)]


def test_a_changed_file_is_answered_from_the_cache_only_in_check_mode(tmp_path: Path) -> None:
    """--check needs a changed file's status and diagnostics, not its new bytes; --diff and a
    write need the bytes and compute them, whatever --check stored."""
    source = tmp_path / "train.py"
    source.write_bytes(UNMIGRATED)
    discovery = discover([str(source)], Excluder((), tmp_path))

    def once(mode: Mode) -> Outcome:
        job = Job(mode, CHECK.codes, CHECK.settings)
        [outcome] = run(discovery, job, 1, ResultCache(tmp_path / "cache", cache_key(job))).outcomes
        return outcome

    first, again = once(Mode.CHECK), once(Mode.CHECK)
    assert (first.status, first.cached) == (Status.CHANGED, False)
    assert (again.status, again.cached) == (Status.CHANGED, True)
    assert again.diagnostics == first.diagnostics and again.edits != []
    diffed = once(Mode.DIFF)
    assert (diffed.cached, diffed.diff is not None) == (False, True)
    assert "combine_grad=True" in (diffed.diff or "")
    written = once(Mode.WRITE)
    assert (written.status, written.cached) == (Status.CHANGED, False)
    assert b"combine_grad=True" in source.read_bytes()


def test_files_that_fail_to_parse_are_cached_as_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"from apex import amp\namp.initialize(\n")
    discovery = discover([str(broken)], Excluder((), tmp_path))
    results = [
        run(discovery, CHECK, 1, ResultCache(tmp_path / "cache", cache_key(CHECK))).outcomes[0]
        for _ in range(2)
    ]
    assert [(o.status, o.cached) for o in results] == [(Status.ERROR, False), (Status.ERROR, True)]
    assert results[0].reason == results[1].reason
    assert results[1].reason is not None and results[1].reason.startswith("syntax error at")


def test_cache_key_depends_on_rules_and_settings() -> None:
    keys = {
        cache_key(CHECK),
        cache_key(Job(Mode.CHECK, ("NPU102", "NPU301"), Settings())),
        cache_key(Job(Mode.CHECK, ("NPU102",), Settings(target=Target.ACCELERATOR))),
        cache_key(Job(Mode.CHECK, ("NPU102",), Settings(unsafe_fixes=True))),
        cache_key(Job(Mode.CHECK, ("NPU102",), Settings(rule_options={"NPU102": {"x": 1}}))),
    }
    assert len(keys) == 5
    assert cache_key(Job(Mode.WRITE, ("NPU102",), Settings())) == cache_key(CHECK)


def test_the_code_fingerprint_covers_subpackages_and_data(tmp_path: Path) -> None:
    # Rules live in family subpackages (rules/optimizers/...), the analysis in migrator/analysis:
    # editing any of them must invalidate cached results, as editing a top-level module does.
    rules = tmp_path / "rules"
    (rules / "optimizers").mkdir(parents=True)
    (rules / "__init__.py").write_text("")
    rule = rules / "optimizers" / "npu101.py"
    rule.write_text("CODE = 'NPU101'\n")
    table = rules / "optimizers" / "api.toml"
    table.write_text("x = 1\n")
    seen = {code_fingerprint("1.0", [rules])}
    rule.write_text("CODE = 'NPU101'  # changed\n")
    seen.add(code_fingerprint("1.0", [rules]))
    table.write_text("x = 2\n")
    seen.add(code_fingerprint("1.0", [rules]))
    seen.add(code_fingerprint("1.1", [rules]))
    assert len(seen) == 4
    assert code_fingerprint("1.1", [rules]) == code_fingerprint("1.1", [rules])


def test_damaged_cache_file_is_ignored(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, cache_key(CHECK))
    cache.file.write_text("{not json")
    source = tmp_path / "manual.py"
    source.write_bytes(MANUAL)
    discovery = discover([str(source)], Excluder((), tmp_path))
    [outcome] = run(discovery, CHECK, 1, ResultCache(tmp_path, cache_key(CHECK))).outcomes
    assert outcome.status is Status.UNCHANGED and not outcome.cached


def test_discovery_is_sorted_and_names_each_file_once(tmp_path: Path) -> None:
    for name in ("b/z.py", "b/a.py", "a.py", "c/d/e.py", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    root = str(tmp_path)
    found = discover([root, os.path.join(root, "b", "a.py")], Excluder((), tmp_path))
    shown = [os.path.relpath(task.path, root) for task in found.tasks]
    assert shown == ["a.py", "b/a.py", "b/z.py", "c/d/e.py"]


def test_unreadable_file_is_an_error_outcome(tmp_path: Path) -> None:
    discovery = Discovery(tasks=[Task(str(tmp_path / "vanished.py"))])
    [outcome] = run(discovery, CHECK, 1).outcomes
    assert outcome.status is Status.ERROR
    assert outcome.reason is not None and outcome.reason.startswith("cannot read file")


def test_unified_diff_marks_a_missing_final_newline() -> None:
    diff = unified_diff("a.py", b"x = 1", b"x = 2")
    assert diff == (
        "--- a.py\n+++ a.py\n@@ -1 +1 @@\n-x = 1\n\\ No newline at end of file\n"
        "+x = 2\n\\ No newline at end of file\n"
    )


def test_a_worker_reads_the_file_again_and_refuses_one_that_changed(tmp_path: Path) -> None:
    from migrator.cache import content_digest
    from migrator.engine import Engine
    from migrator.runner import Group, Member, process_group

    path = tmp_path / "train.py"
    path.write_bytes(UNMIGRATED)
    job = Job(Mode.WRITE, ("NPU102",), Settings())
    engine = Engine(job.rules(), job.settings)
    digest = content_digest(UNMIGRATED)
    group = Group(None, digest, digest, len(UNMIGRATED), [Member(Task(str(path)), 0o644)])
    [outcome] = process_group(group, job, engine)
    assert outcome.status is Status.CHANGED and b"combine_grad=True" in path.read_bytes()

    path.write_bytes(UNMIGRATED)
    group.digest = content_digest(b"what the parent read before someone edited the file\n")
    [outcome] = process_group(group, job, engine)
    assert outcome.status is Status.ERROR and "changed while npu-migrate was running" in (
        outcome.diagnostics[0].message
    )
    assert path.read_bytes() == UNMIGRATED


# -- where the files are processed ----------------------------------------------------------------


def small_tree(folder: Path, count: int) -> Discovery:
    for index in range(count):
        (folder / f"mod{index:02}.py").write_bytes(UNMIGRATED if index % 2 else MANUAL)
    return discover([str(folder)], Excluder((), folder))


def test_workers_worth_needs_several_start_ups_of_work_for_each_worker() -> None:
    from migrator.runner import WORK_PER_WORKER, workers_worth

    start = 0.25
    assert workers_worth(2 * WORK_PER_WORKER * start - 0.01, start, most=8) == 0
    assert workers_worth(2 * WORK_PER_WORKER * start, start, most=8) == 2
    assert workers_worth(100.0, start, most=8) == 8
    assert workers_worth(100.0, start, most=1) == 0  # one worker only adds its start-up


def test_a_small_tree_is_processed_in_this_process(tmp_path: Path) -> None:
    result = run(small_tree(tmp_path, 24), CHECK)
    assert result.workers == 0 and len(result.outcomes) == 24


def test_jobs_force_a_worker_count_with_the_same_outcomes(tmp_path: Path) -> None:
    discovery = small_tree(tmp_path, 5)
    here, forced = run(discovery, CHECK, 1), run(discovery, CHECK, 2)
    assert (here.workers, forced.workers) == (0, 2)
    assert forced.outcomes == here.outcomes
    assert [o.status for o in forced.outcomes].count(Status.CHANGED) == 2


def groups_of(discovery: Discovery) -> list[Group]:
    from migrator.cache import content_digest

    groups = []
    for task in discovery.tasks:
        data = Path(task.path).read_bytes()
        digest = content_digest(data)
        groups.append(Group(None, digest, digest, len(data), [Member(task, 0o644)]))
    return groups


@pytest.mark.parametrize(("start_cpu", "workers"), [(1e-6, 2), (1e6, 0)])
def test_the_first_files_decide_whether_the_rest_pays_for_workers(
    tmp_path: Path, start_cpu: float, workers: int
) -> None:
    """Without -j the run processes files here until it knows what they cost, then hands the
    rest to workers when it is worth more than their start-up (here made negligible, or
    prohibitive), with the same outcomes either way."""
    from migrator.runner import Execution

    groups = groups_of(small_tree(tmp_path, 8))
    chosen = Execution(CHECK, None, 2, None, start_cpu=start_cpu)
    outcomes = sorted(chosen.process(groups), key=lambda outcome: outcome.path)
    here = sorted(Execution(CHECK, 1, 2, None).process(groups), key=lambda o: o.path)
    assert chosen.workers == workers
    assert outcomes == here and len(outcomes) == 8


def test_a_gitignore_answers_as_pathspec_with_one_search_for_most_paths() -> None:
    """The union of a .gitignore's patterns only spares the per-pattern searches: verdicts are
    pathspec's, negations and folder patterns included."""
    import pathspec

    from migrator.discovery import _IgnoreFile

    lines = [
        "# comment",
        "*.pyc",
        "build/",
        "/docs/_build",
        "**/logs/*.txt",
        "data",
        "!data/keep.py",
        "checkpoints/**",
        "!checkpoints/README.md",
        "a?c.py",
        "[Tt]emp*",
    ]
    ignore_file = _IgnoreFile.of(lines)
    assert ignore_file.any_pattern is not None
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    paths = [
        "x.pyc", "src/x.pyc", "build/", "src/build/", "build", "docs/_build", "src/docs/_build",
        "logs/a.txt", "src/logs/a.txt", "logs/a.py", "data", "data/", "data/keep.py",
        "data/other.py", "checkpoints/model.pt", "checkpoints/README.md", "abc.py", "abbc.py",
        "Temp.py", "temp/x.py", "train.py", "src/model.py",
    ]  # fmt: skip
    for path in paths:
        assert ignore_file.verdict(path) == spec.check_file(path).include, path
