"""Reaching definitions (migrator/analysis/flow.py) pass over the expressions in which the name
followed is not spelled; that shortcut never changes an answer.

Every read of a name, and every read of a dotted attribute inside a function, is asked about
twice: with the shortcut (the default) and with every expression walked
(``ReachingDefinitions(index, prune=False)``, what ``Engine(fast=False)`` uses). The programs
are this repository's fixtures (the shapes of real training scripts, in every rule family) and
a few cases written for the constructs where an event hides deep in an expression (a ``:=``
of the name, or of another name, inside a comprehension or a call).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from migrator.analysis.flow import ReachingDefinitions
from migrator.analysis.index import ModuleIndex, dotted_name
from migrator.analysis.origins import function_of
from migrator.analysis.parse import ParseError, parse_index

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"))

EDGE_CASES = {
    "walrus_in_a_comprehension": """
        def f(data):
            x = 0
            total = [y for item in data if (x := item) > 0 for y in (x, x)]
            return x, total
    """,
    "walrus_in_a_call_argument": """
        x = 1
        print(g(h(k, (x := 2)), x), x)
    """,
    "read_deep_in_a_subscript_and_a_slice": """
        def f(a):
            x = a
            if a:
                x = 2
            return a[b[c(d, e=[x][0:x])]]
    """,
    "augmented_assignment_and_deletion": """
        x = 1
        x += x
        del x
        x = 3
        y = x
    """,
    "attribute_through_methods": """
        class T:
            def setup(self):
                self.optimizer = make(self.model)
                if cond:
                    self.optimizer = other(self.optimizer)
                self.optimizer.step()

            def step(self):
                return self.optimizer.zero_grad(), [o for o in [self.optimizer]]
    """,
    "lambda_defaults_and_decorators": """
        x = 1
        @decorate(x)
        def f(y=x, *, z=(lambda x=x: x)):
            return x
        x = 2
        g = lambda: x
    """,
    "try_finally_match_loops": """
        def f(v):
            x = None
            try:
                x = load(v)
                while x:
                    x = x.next if x else (x := None)
                    if x is None:
                        break
                else:
                    x = 0
            except E as x:
                pass
            finally:
                use(x)
            match v:
                case [x, *rest] if x:
                    return x
                case {"k": x}:
                    return x
            return f"{x!r:{x}}"
    """,
}


def reads(index: ModuleIndex) -> list[tuple[str, ast.AST]]:
    """Every read of a name, and of a dotted attribute inside a function."""
    found: list[tuple[str, ast.AST]] = []
    for node in index.walk(index.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.append(("name", node))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and dotted_name(node) is not None
        ):
            found.append(("attribute", node))
    return found


def answers(index: ModuleIndex, prune: bool) -> list[object]:
    reaching = ReachingDefinitions(index, prune=prune)
    found: list[object] = []
    for kind, node in reads(index):
        if kind == "name":
            assert isinstance(node, ast.Name)
            answer = reaching.of_name(node)
        else:
            assert isinstance(node, ast.Attribute)
            answer = reaching.of_attribute(node, function_of(index, node))
        found.append(None if answer is None else [id(d) for d in answer])
    return found


def test_the_fixtures_are_there() -> None:
    assert len(FIXTURES) > 100


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases(name: str) -> None:
    index = parse_index(textwrap.dedent(EDGE_CASES[name]), f"{name}.py")
    quick, full = answers(index, prune=True), answers(index, prune=False)
    assert quick == full
    assert any(answer for answer in full)  # the case asks something that has an answer


def test_every_read_of_every_fixture() -> None:
    asked = 0
    for path in FIXTURES:
        try:
            index = parse_index(path.read_text(encoding="utf-8"), str(path))
        except (ParseError, UnicodeDecodeError):
            continue  # a fixture of a file that does not parse
        quick, full = answers(index, prune=True), answers(index, prune=False)
        assert quick == full, path
        asked += len(full)
    assert asked > 10_000
