"""migrator.names: one qualified name, Ambiguous, or None, for the shapes real code has."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper

from migrator import names
from migrator.names import Ambiguous
from migrator.rule import FileContext, Rule, Settings
from migrator.suppressions import Suppressions


def resolve_calls(source: str) -> list[str | Ambiguous | None]:
    """What each call's callee resolves to, in source order."""
    found: list[str | Ambiguous | None] = []

    class Probe(Rule):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(self.qualified_name(node.func))

    module = cst.parse_module(source)
    context = FileContext("t.py", Settings(), Suppressions(), names.star_imports(module))
    MetadataWrapper(module).visit(Probe(context))
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\ntorch.optim.SGD(p)\n", "torch.optim.SGD"),
        ("from torch import optim\noptim.SGD(p)\n", "torch.optim.SGD"),
        ("import torch.optim as O\nO.Adam(p)\n", "torch.optim.Adam"),
        ("from apex.optimizers import FusedAdam as Adam\nAdam(p)\n", "apex.optimizers.FusedAdam"),
        ("from apex import amp as A\nA.initialize(m)\n", "apex.amp.initialize"),
        (
            "import apex as amp\namp.normalization.FusedLayerNorm(8)\n",
            "apex.normalization.FusedLayerNorm",
        ),
        ("def f():\n    from torch import optim\n    return optim.SGD(p)\n", "torch.optim.SGD"),
    ],
)
def test_imports_resolve_to_one_name(source: str, expected: str) -> None:
    assert resolve_calls(source) == [expected]


def test_try_except_fallback_is_ambiguous() -> None:
    source = (
        "try:\n    from apex.optimizers import FusedAdam as Adam\n"
        "except ImportError:\n    from torch.optim import AdamW as Adam\nAdam(p)\n"
    )
    [result] = resolve_calls(source)
    assert isinstance(result, Ambiguous)
    assert result.candidates == ("apex.optimizers.FusedAdam", "torch.optim.AdamW")


def test_import_with_local_fallback_class_is_ambiguous() -> None:
    source = (
        "try:\n    from apex.normalization import FusedLayerNorm as LN\n"
        "except ImportError:\n    class LN:\n        pass\nLN(8)\n"
    )
    [result] = resolve_calls(source)
    assert isinstance(result, Ambiguous)
    assert "apex.normalization.FusedLayerNorm" in result.candidates


def test_value_alias_is_ambiguous() -> None:
    [_, result] = resolve_calls("import torch\nOpt = torch.optim.SGD\nprint(0)\nOpt(p)\n")[-2:]
    assert isinstance(result, Ambiguous)
    assert result.candidates == ("torch.optim.SGD",)
    assert "value alias" in result.reason


def test_star_import_is_ambiguous() -> None:
    [result] = resolve_calls("from torch.optim import *\nSGD(p)\n")
    assert isinstance(result, Ambiguous)
    assert result.candidates == ("torch.optim.SGD",)


@pytest.mark.parametrize(
    "source",
    [
        "class AdamW:\n    pass\nAdamW(p)\n",  # the project's own class
        "def make(SGD):\n    return SGD(p)\n",  # a parameter
    ],
)
def test_local_names_resolve_to_none(source: str) -> None:
    assert resolve_calls(source)[-1] is None


def test_resolve_any_ignores_ambiguity_that_does_not_involve_the_wanted_names() -> None:
    source = "try:\n    from a import f\nexcept ImportError:\n    from b import f\nf()\n"
    found: list[object] = []

    class Probe(Rule):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(self.qualified_name_in(node.func, {"torch.optim.SGD"}))
            found.append(self.qualified_name_in(node.func, {"a.f"}))

    module = cst.parse_module(source)
    MetadataWrapper(module).visit(Probe(FileContext("t.py", Settings(), Suppressions())))
    assert found[0] is None
    assert isinstance(found[1], Ambiguous)


def test_a_name_rebound_from_itself_ends_the_search() -> None:
    """``x = x.T`` once sent the value-alias search into endless recursion (torch/optim)."""
    source = "def f(g):\n    x = g.float()\n    x = x.T\n    return x.div_(2)\n"
    assert resolve_calls(source) == [None, None]
