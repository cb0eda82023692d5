"""The ast scopes give libcst's qualified names, node for node, on real code.

The rules' decisions were written against libcst's ``QualifiedNameProvider``; the engine now
computes the same facts on ``ast`` (:mod:`migrator.analysis.scopes`). This compares both on every
name, attribute and call of a sample of torch's own sources (installed with the test set-up), which
exercise every scoping construct: nested functions, classes, comprehensions, ``global``,
dotted imports, relative imports, ``try``/``except ImportError`` fallbacks, star imports.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from migrator.analysis.index import ModuleIndex
from migrator.analysis.scopes import NameSource
from migrator.source import Source, decode

SAMPLE = 24  # files, spread over the tree; about ten seconds
MIN_BYTES, MAX_BYTES = 4_000, 60_000
SOURCES = {
    cst.metadata.QualifiedNameSource.IMPORT: NameSource.IMPORT,
    cst.metadata.QualifiedNameSource.BUILTIN: NameSource.BUILTIN,
    cst.metadata.QualifiedNameSource.LOCAL: NameSource.LOCAL,
}
# libcst does not visit the first argument of these (a type's name as a string, usually), so it
# has no scope and no names there.
UNVISITED_FIRST_ARGUMENT = {"TypeVar", "NewType"}


def torch_files() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(p for p in root.rglob("*.py") if MIN_BYTES <= p.stat().st_size <= MAX_BYTES)
    step = max(1, len(files) // SAMPLE)
    return files[::step][:SAMPLE]


Key = tuple[str, int, int, int, int]


def libcst_names(source: bytes) -> dict[Key, list[set[tuple[str, NameSource]]]]:
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    qualified = wrapper.resolve(QualifiedNameProvider)
    found: dict[Key, list[set[tuple[str, NameSource]]]] = {}
    for node, position in positions.items():
        if isinstance(node, cst.Name | cst.Attribute | cst.Call):
            start, end = position.start, position.end
            key = (type(node).__name__, start.line, start.column, end.line, end.column)
            value = qualified.get(node, set())
            value = value() if callable(value) else value  # libcst computes them lazily
            names = {(q.name, SOURCES[q.source]) for q in value}
            found.setdefault(key, []).append(names)
    return found


def in_unvisited_argument(index: ModuleIndex, node: ast.AST) -> bool:
    child = node
    for parent in index.ancestors(node):
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is child:
            func = parent.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in UNVISITED_FIRST_ARGUMENT:
                return True
        child = parent
    return False


@pytest.mark.parametrize("path", torch_files(), ids=lambda p: p.name)
def test_qualified_names_match_libcst(path: Path) -> None:
    raw = path.read_bytes()
    text = decode(raw)
    source = Source(text)
    index = ModuleIndex(ast.parse(text), source)
    expected = libcst_names(raw)
    compared = 0
    for kind in (ast.Name, ast.Attribute, ast.Call):
        for node in index.nodes(kind):
            line, column = source.position(node)
            end_line, end_column = source.end_position(node)
            key = (kind.__name__, line, column - 1, end_line, end_column)
            if key not in expected:
                continue  # a node ast has and libcst has not, or with another extent
            mine = {(q.name, q.source) for q in index.qualified_names(node)}
            if mine not in expected[key] and not in_unvisited_argument(index, node):
                raise AssertionError(f"{path}:{line}:{column}: {mine} != {expected[key]}")
            compared += 1
    assert compared > 0
