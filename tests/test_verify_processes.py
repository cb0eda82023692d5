"""How verify starts a side's processes (migrator/verify/launch.py): forked from one parent that
has imported torch (``child/_npu_migrate_verify_zygote.py``), or as fresh interpreters
(``NPU_MIGRATE_VERIFY_FORK=0``). A program must not be able to tell the two apart, except by
who its parent is; the real launcher runs real processes here.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path
from unittest.mock import ANY

import pytest

from migrator.verify.launch import Outcome, Settings, Side, run_group

# Writes what a program can see of how it was started, then leaves as it is told.
FACTS = textwrap.dedent(
    """\
    import atexit, json, os, sys

    def last_words():
        with open(sys.argv[1], "a") as out:
            out.write("atexit\\n")

    atexit.register(last_words)
    facts = {
        "argv": sys.argv,
        "path0": sys.path[0],
        "name": __name__,
        "file": __file__,
        "cwd": os.getcwd(),
        "rank": os.environ.get("RANK"),
        "records": bool(os.environ.get("NPU_MIGRATE_VERIFY_RECORDS")),
        "stray": os.environ.get("ONLY_IN_THE_TEST"),
        "stdin": sys.stdin.read(),
        "ppid": os.getppid(),
        "torch_threads": __import__("torch").get_num_threads(),
    }
    with open(sys.argv[1], "w") as out:
        out.write(json.dumps(facts) + "\\n")
    print("to the log")
    if sys.argv[2] == "raise":
        raise RuntimeError("the program fails here")
    if sys.argv[2] == "hang":
        import time
        time.sleep(600)
    sys.exit(int(sys.argv[2]))
    """
)


def run(tmp_path: Path, how: str, forked: bool, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    folder = tmp_path / "program"
    folder.mkdir(exist_ok=True)
    (folder / "facts.py").write_text(FACTS)
    out = tmp_path / f"facts-{how}-{forked}.txt"
    monkeypatch.setenv("NPU_MIGRATE_VERIFY_FORK", "1" if forked else "0")
    settings = Settings(
        steps=1,
        world_size=None,
        synthetic_data=False,
        timeout_s=3 if how == "hang" else 120,
        program_args=(str(out), how),
    )
    side = Side("original", folder / "facts.py", shim=False)
    [outcome] = run_group([side], settings, tmp_path / f"work-{how}-{forked}")
    return outcome


def facts_of(tmp_path: Path, how: str, forked: bool) -> tuple[dict, list[str]]:
    first, *rest = (tmp_path / f"facts-{how}-{forked}.txt").read_text().splitlines()
    return json.loads(first), rest


def test_a_forked_program_sees_what_a_fresh_one_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONLY_IN_THE_TEST", "the parent's")
    seen: dict[bool, dict] = {}
    for forked in (True, False):
        outcome = run(tmp_path, "3", forked, monkeypatch)
        [process] = outcome.processes
        assert process.exit_code == 3  # sys.exit's code, after the atexit handlers
        facts, after = facts_of(tmp_path, "3", forked)
        assert after == ["atexit"]
        assert "to the log" in process.log.read_text()
        seen[forked] = facts
    # forked from verify's torch-importing parent, not started by verify itself
    assert seen[True].pop("ppid") != os.getpid()
    assert seen[False].pop("ppid") == os.getpid()
    for facts in seen.values():  # (each writes its own file)
        assert facts.pop("argv") == [str(tmp_path / "program" / "facts.py"), ANY, "3"]
    assert seen[True] == seen[False]
    assert seen[True]["name"] == "__main__"
    assert seen[True]["path0"] == str(tmp_path / "program")
    assert seen[True]["cwd"] == str(tmp_path / "program")
    assert seen[True]["stray"] == "the parent's"  # the environment verify gives, whole
    assert seen[True]["torch_threads"] == 1
    assert seen[True]["stdin"] == ""


def test_an_uncaught_error_ends_a_forked_program_as_it_ends_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for forked in (True, False):
        outcome = run(tmp_path, "raise", forked, monkeypatch)
        [process] = outcome.processes
        assert process.exit_code == 1
        assert outcome.failed == [process]
        log = process.log.read_text()
        assert log.rstrip().endswith("RuntimeError: the program fails here"), log
        assert facts_of(tmp_path, "raise", forked)[1] == ["atexit"]


def test_a_forked_program_past_its_time_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = run(tmp_path, "hang", True, monkeypatch)
    [process] = outcome.processes
    assert outcome.timed_out
    assert process.exit_code == -signal.SIGKILL
    assert facts_of(tmp_path, "hang", True)[1] == []  # killed: no atexit


def test_a_parent_that_cannot_import_torch_leaves_the_programs_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the forking parent cannot get ready (here a `torch` that fails to import comes
    first on the path), each program starts as a fresh interpreter and shows its own errors."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "torch.py").write_text("raise ImportError('no torch on this path')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken))
    monkeypatch.setenv("NPU_MIGRATE_VERIFY_FORK", "1")
    folder = tmp_path / "program"
    folder.mkdir()
    out = tmp_path / "ppid.txt"
    (folder / "plain.py").write_text(
        "import os, sys\nopen(sys.argv[1], 'w').write(str(os.getppid()))\nimport torch\n"
    )
    settings = Settings(1, None, False, 120, (str(out),))
    [outcome] = run_group([Side("original", folder / "plain.py", False)], settings, tmp_path / "w")
    [process] = outcome.processes
    assert int(out.read_text()) == os.getpid()  # started by verify itself
    assert process.exit_code == 1
    assert "ImportError: no torch on this path" in process.log.read_text()
    assert "ImportError: no torch on this path" in (tmp_path / "w" / "zygote.log").read_text()


def test_a_program_whose_forking_parent_dies_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody can report how a child ends once its parent is gone: verify stops it then, and
    does not wait for the timeout."""
    monkeypatch.setenv("NPU_MIGRATE_VERIFY_FORK", "1")
    folder = tmp_path / "program"
    folder.mkdir()
    (folder / "orphan.py").write_text(
        "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(600)\n"
    )
    settings = Settings(1, None, False, 300, ())
    [outcome] = run_group([Side("original", folder / "orphan.py", False)], settings, tmp_path / "w")
    [process] = outcome.processes
    assert not outcome.timed_out
    assert process.exit_code == -signal.SIGKILL
    pid = process.popen.pid  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10  # (SIGKILL takes effect when the process is next scheduled)
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid)


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: gone, or a zombie its new parent has not reaped yet, is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(") ", 1)[1][0] != "Z"
