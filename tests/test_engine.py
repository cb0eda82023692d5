"""``migrate_source`` at the byte level: encodings, line endings, BOMs, failures, suppression."""

from __future__ import annotations

import pytest

from migrator.diagnostics import Severity
from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import ERROR_CODE, Status
from migrator.settings import Settings

NPU102 = select_rules(all_rules(), ["NPU102"])
HEADER = (
    "from apex import amp\n"
    "from apex.optimizers import NpuFusedSGD\n"
    "optimizer = NpuFusedSGD(model.parameters(), lr=0.1)\n"
)
CALL = "model, optimizer = amp.initialize(model, optimizer)"
FIXED_CALL = "model, optimizer = amp.initialize(model, optimizer, combine_grad=True)"


def migrate(source: bytes) -> tuple[Status, bytes, list[str]]:
    result = migrate_source(source, "t.py", NPU102, Settings())
    codes = [f"{d.severity}:{d.code}" for d in result.diagnostics]
    return result.status, result.migrated, codes


@pytest.mark.parametrize(
    ("prefix", "newline", "encoding"),
    [
        (b"", "\n", "utf-8"),
        (b"", "\r\n", "utf-8"),
        (b"\xef\xbb\xbf", "\n", "utf-8"),
        (b"\xef\xbb\xbf", "\r\n", "utf-8"),
        (b"# -*- coding: latin-1 -*-\n", "\n", "latin-1"),
        (b"# vim: set fileencoding=cp1252 :\n", "\r\n", "cp1252"),
    ],
    ids=["lf", "crlf", "bom", "bom-crlf", "latin-1", "cp1252-crlf"],
)
def test_bytes_outside_the_edit_are_kept(prefix: bytes, newline: str, encoding: str) -> None:
    comment = "# caf\u00e9 \u2014 ok\n" if encoding != "latin-1" else "# caf\u00e9\n"
    text = comment + HEADER + CALL + "\n"
    source = prefix + text.replace("\n", newline).encode(encoding)
    status, migrated, codes = migrate(source)
    assert status is Status.CHANGED
    expected = comment + HEADER + FIXED_CALL + "\n"
    assert migrated == prefix + expected.replace("\n", newline).encode(encoding)
    assert codes == ["fixed:NPU102"]
    assert migrate(migrated)[:2] == (Status.UNCHANGED, migrated)  # idempotent


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (HEADER.encode() + b"amp.initialize(model,\n", "syntax error at"),
        (b"# caf\xe9\n" + HEADER.encode() + CALL.encode(), "cannot decode file"),
        (b"# -*- coding: klingon -*-\n" + HEADER.encode(), "cannot decode file"),
        (b"\xef\xbb\xbf# -*- coding: latin-1 -*-\n" + HEADER.encode(), "cannot decode file"),
    ],
    ids=["syntax", "invalid-utf-8", "unknown-codec", "bom-and-other-cookie"],
)
def test_unprocessable_files_are_errors_and_untouched(source: bytes, reason: str) -> None:
    result = migrate_source(source, "t.py", NPU102, Settings())
    assert result.status is Status.ERROR
    assert result.migrated == source
    [diagnostic] = result.diagnostics
    assert (diagnostic.code, diagnostic.severity) == (ERROR_CODE, Severity.ERROR)
    assert diagnostic.message.startswith(reason)


def test_no_trigger_means_no_parse_and_no_change() -> None:
    # Not even valid Python: the pre-scan finds no trigger, so the parser never sees it.
    source = b"def (:\n"
    status, migrated, codes = migrate(source)
    assert (status, migrated, codes) == (Status.UNCHANGED, source, [])


@pytest.mark.parametrize(
    ("comment", "suppressed"),
    [
        ("  # npu-migrate: ignore", True),
        ("  # npu-migrate: ignore[npu102]", True),
        ("  # npu-migrate: ignore[NPU101, NPU1]", True),
        ("  # npu-migrate: ignore[NPU2]", False),
        ("  # npu-migrate: ignore[]", True),  # empty list: every code
        ("  # npu-migrate:ignore", True),
    ],
)
def test_ignore_comment_on_the_diagnostic_line(comment: str, suppressed: bool) -> None:
    source = (HEADER + CALL + comment + "\n").encode()
    status, migrated, codes = migrate(source)
    if suppressed:
        assert (status, migrated, codes) == (Status.UNCHANGED, source, [])
    else:
        assert (status, codes) == (Status.CHANGED, ["fixed:NPU102"])


def test_ignore_comment_on_another_line_does_not_suppress() -> None:
    source = ("# npu-migrate: ignore\n" + HEADER + CALL + "\n").encode()
    assert migrate(source)[0] is Status.CHANGED


@pytest.mark.parametrize(
    ("leading", "skipped"),
    [
        ("# npu-migrate: skip-file\n", True),
        ("#!/usr/bin/env python\n\n# npu-migrate: skip-file\n", True),
        ("import os  # npu-migrate: skip-file\n", False),  # not a leading comment
        ("import os\n# npu-migrate: skip-file\n", False),
    ],
)
def test_skip_file_only_in_leading_comments(leading: str, skipped: bool) -> None:
    source = (leading + HEADER + CALL + "\n").encode()
    status, migrated, _ = migrate(source)
    assert (status is Status.SKIPPED) is skipped
    if skipped:
        assert migrated == source


def test_output_the_compiler_refuses_is_an_internal_error() -> None:
    """The parser accepts a parameter written twice; the compiler does not (SimMIM's
    `build_optimizer`, which forwards to two factories, once got `apex_amp` twice): such an
    output is refused, unless the file as given does not compile either."""
    from migrator.engine import Engine

    engine = Engine(tuple(NPU102), Settings())
    good = "def build(a, *, apex_amp):\n    return a\n"
    twice = "def build(a, *, apex_amp, apex_amp):\n    return a\n"
    assert engine.verify(good.encode(), "t.py", original=good) is None
    problem = engine.verify(twice.encode(), "t.py", original=good)
    assert problem is not None
    assert problem.startswith("the migrated code does not compile (duplicate argument 'apex_amp'")
    assert engine.verify(twice.encode(), "t.py", original=twice) is None
