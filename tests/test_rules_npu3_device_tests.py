"""Tests of device strings move with the values they test, or say why not (issue 24).

The property: in a file where the migration rewrites device values, no comparison, membership
test, prefix test, ``match`` case or dictionary lookup against a CUDA device string remains
without a diagnostic at its line. The tests are found here by a plain ``ast`` walk of its own,
independent of the rules' analysis, over the device fixtures and a sample of torch's sources.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from migrator.engine import Engine
from migrator.registry import all_rules
from migrator.results import Status
from migrator.rules.device._tests import TEST_SHAPE, shapes_of
from migrator.settings import Settings

REPO = Path(__file__).resolve().parent.parent
CUDA = re.compile(r"cuda(:\d+)?")
DEVICE_FIXES = re.compile(r"NPU30\d")
TORCH_SAMPLE = 12  # every Nth torch file that tests a "cuda" string: the test stays cheap


def is_cuda(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and CUDA.fullmatch(node.value) is not None
    )


def cuda_in(node: ast.AST) -> list[ast.Constant]:
    """The CUDA strings of an operand: itself, or the elements of a literal collection."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e for e in node.elts if is_cuda(e)]  # type: ignore[misc]
    return [node] if is_cuda(node) else []  # type: ignore[list-item]


def device_tests_in(tree: ast.Module) -> list[tuple[int, int]]:
    """(line of the test, line of its CUDA string) for every test against a CUDA string."""
    found: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        literals: list[ast.Constant] = []
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                literals += cuda_in(operand)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and node.args
        ):
            literals = cuda_in(node.args[0])
        elif isinstance(node, ast.MatchValue):
            literals = cuda_in(node.value)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            literals = [k for k in node.value.keys if k is not None and is_cuda(k)]  # type: ignore[misc]
        found += [(node.lineno, literal.lineno) for literal in literals]  # type: ignore[attr-defined]
    return found


def unreported_tests(source: bytes, path: str) -> list[int]:
    """The lines of the tests that the migration leaves without a diagnostic, in a file where
    it rewrites device values (none elsewhere)."""
    engine = Engine(all_rules(), Settings())
    result = engine.migrate(source, path, apply=False)
    if result.status is Status.ERROR:
        return []
    fixed_devices = any(
        DEVICE_FIXES.fullmatch(d.code) and d.severity.value == "fixed" for d in result.diagnostics
    )
    if not fixed_devices:
        return []
    reported = {d.line for d in result.diagnostics}
    tree = ast.parse(source)
    return sorted(
        test_line
        for test_line, literal_line in device_tests_in(tree)
        if test_line not in reported and literal_line not in reported
    )


FIXTURES = sorted(
    path
    for family in ("npu3*", "npu92*")
    for path in (REPO / "fixtures").glob(f"{family}/*.before.py")
    if not path.with_name(path.name.replace(".before.py", ".project")).exists()
)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_test_of_a_cuda_string_is_left_unreported_in_the_fixtures(path: Path) -> None:
    assert unreported_tests(path.read_bytes(), str(path)) == []


def torch_sample() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    testing = [p for p in sorted(root.rglob("*.py")) if b'"cuda"' in p.read_bytes()]
    return testing[::TORCH_SAMPLE]


def test_no_test_of_a_cuda_string_is_left_unreported_in_torch_sources() -> None:
    sample = torch_sample()
    assert sample, "torch is not installed"
    left = {}
    for path in sample:
        try:
            source = path.read_bytes()
            ast.parse(source)
        except SyntaxError:
            continue  # torch ships Python 3.12-only test files
        lines = unreported_tests(source, str(path))
        if lines:
            left[str(path)] = lines
    assert left == {}


def test_the_walk_finds_every_form() -> None:
    """The property's own detector sees the forms of the issue (else it could not fail)."""
    source = (
        'a = d == "cuda"\n'
        'b = "cuda" in d\n'
        'c = d in ("cuda", "mps")\n'
        'e = str(d).startswith("cuda:0")\n'
        'f = {"cuda": 1}[d]\n'
        "match d:\n"
        '    case "cuda":\n'
        "        pass\n"
        'print("running on cuda")\n'
    )
    assert [line for line, _ in device_tests_in(ast.parse(source))] == [1, 2, 3, 4, 5, 7]


SHAPES = [
    b"if device.type == \"cuda\":\n    x = y.is 'cuda'\n",  # `\bis` after a dot: backtracking
    b'a = d.type != ("cuda:0") or "cuda" in devices or str(d).startswith(["cuda"])\n',
    b"match d:\n    case 'cuda':\n        pass\nx = m not in {'cuda', 'cpu'}\n",
    b'"cuda" is not dev; e = "cuda" "cuda" == "cuda"\n',
    b"x = f(a, 'cuda') + torch.device('cuda:1')\n" * 3,
    b'print("on cuda")\n',
    b"",
]


def matches(found: object) -> list[tuple[tuple[int, int], tuple[bytes | None, ...]]]:
    return [(match.span(), match.groups()) for match in found]  # type: ignore[attr-defined]


@pytest.mark.parametrize("source", SHAPES)
def test_the_shape_search_finds_what_finditer_finds(source: bytes) -> None:
    assert matches(shapes_of(source)) == matches(TEST_SHAPE.finditer(source))


def test_the_shape_search_finds_what_finditer_finds_in_torch_sources() -> None:
    sample = torch_sample()
    assert sample, "torch is not installed"
    found = 0
    for path in sample:
        source = path.read_bytes()
        expected = matches(TEST_SHAPE.finditer(source))
        assert matches(shapes_of(source)) == expected, path
        found += len(expected)
    assert found  # the sample has device tests to find
