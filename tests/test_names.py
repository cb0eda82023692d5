"""migrator.analysis.names: one qualified name, Ambiguous, or None, for the shapes real code has."""

from __future__ import annotations

import ast

import pytest

from migrator.analysis import names
from migrator.analysis.index import ModuleIndex
from migrator.analysis.names import Ambiguous
from migrator.source import Source


def index_of(source: str) -> ModuleIndex:
    return ModuleIndex(ast.parse(source), Source(source))


def resolve_calls(source: str) -> list[str | Ambiguous | None]:
    """What each call's callee resolves to, in source order."""
    index = index_of(source)
    return [names.resolve(index, call.func) for call in index.nodes(ast.Call)]


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


def test_a_module_re_exported_by_a_star_import_is_a_candidate() -> None:
    """``from common import *`` where common did ``import torch``: ``torch.cuda.x`` may be
    torch's, and must be reported rather than left silently."""
    [result] = resolve_calls("from common import *\ntorch.cuda.synchronize()\n")
    assert isinstance(result, Ambiguous)
    assert result.candidates == ("common.torch.cuda.synchronize", "torch.cuda.synchronize")


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
    index = index_of(source)
    [call] = index.nodes(ast.Call)
    assert names.resolve_any(index, call.func, {"torch.optim.SGD"}) is None
    assert isinstance(names.resolve_any(index, call.func, {"a.f"}), Ambiguous)


def test_a_name_rebound_from_itself_ends_the_search() -> None:
    """``x = x.T`` once sent the value-alias search into endless recursion (torch/optim)."""
    source = "def f(g):\n    x = g.float()\n    x = x.T\n    return x.div_(2)\n"
    assert resolve_calls(source) == [None, None]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # a read sees the bindings before it in its own scope ...
        ("from torch.optim import SGD\nSGD(p)\nSGD = None\n", "torch.optim.SGD"),
        # ... and every binding of an enclosing scope, whatever the order
        ("def f():\n    return SGD(p)\nfrom torch.optim import SGD\n", "torch.optim.SGD"),
        # a class body is not visible from its methods
        (
            "from torch.optim import SGD\nclass A:\n    SGD = 1\n    def f(self):\n"
            "        return SGD(p)\n",
            "torch.optim.SGD",
        ),
        # `global` sends an assignment to the module scope
        (
            "import torch\ndef f():\n    global torch\n    torch = load()\ntorch.optim.SGD(p)\n",
            Ambiguous(("torch.optim.SGD",), "bound both by an import and locally"),
        ),
        # `import a.b` binds the dotted name: `a.b.c` is read through it
        ("import torch.optim\ntorch.optim.Adam(p)\n", "torch.optim.Adam"),
        ("import torch.nn as nn\nnn.LayerNorm(8)\n", "torch.nn.LayerNorm"),
        ("from . import optim\noptim.SGD(p)\n", ".optim.SGD"),
        ("len(x)\n", "builtins.len"),
    ],
)
def test_scoping_follows_libcst(source: str, expected: object) -> None:
    """The answers of libcst's QualifiedNameProvider, which the rules were written against."""
    assert resolve_calls(source)[-1] == expected


def test_comprehension_targets_are_seen_by_the_element() -> None:
    source = "import torch\n[o(p) for o in (torch.optim.SGD,)]\n"
    index = index_of(source)
    [call] = [c for c in index.nodes(ast.Call) if isinstance(c.func, ast.Name)]
    assert [q.name for q in index.qualified_names(call.func)] == ["<comprehension>.o"]


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nOpt = torch.optim.SGD\nOpt(p)\n",
        "import torch\nOpt: type = torch.optim.SGD\nOpt(p)\n",
        "import torch as t\nA = t.optim\nB = A\nB.SGD(p)\n",
        "from torch.optim import *\nSGD(p)\n",
    ],
    ids=["value-alias", "annotated-alias", "alias-chain", "star-import"],
)
def test_the_candidate_filter_admits_every_name_resolution_can_reach(source: str) -> None:
    """``names_reaching`` is the cheap filter in front of ``resolve``: it must never hide a
    name that resolves to (or may be) something under the roots."""
    index = index_of(source)
    reaching = index.names_reaching(frozenset({"torch"}))
    for call in index.nodes(ast.Call):
        assert names.resolve(index, call.func) is not None
        base = call.func
        while isinstance(base, ast.Attribute):
            base = base.value
        assert isinstance(base, ast.Name) and base.id in reaching


def test_the_candidate_filter_leaves_out_unrelated_names() -> None:
    index = index_of("import torch\nimport numpy as np\nx = np.zeros(3)\ny = x\n")
    assert index.names_reaching(frozenset({"torch"})) == {"torch"}


OPTIONAL_AMP = "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n"
OPTIONAL_ADAM = (
    "try:\n    from apex.optimizers import FusedAdam\nexcept ImportError:\n    FusedAdam = None\n"
)
BOTH = "bound both by an import and locally"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # None has no attribute and cannot be called: where the code does something, the name is
        # the import
        (OPTIONAL_AMP + "amp.initialize(m, o)\n", "apex.amp.initialize"),
        (OPTIONAL_ADAM + "FusedAdam(p)\n", "apex.optimizers.FusedAdam"),
        ("FusedAdam = None\nif fused:\n    from apex.optimizers import FusedAdam\nFusedAdam(p)\n",
         "apex.optimizers.FusedAdam"),
        # any other fallback value keeps the ambiguity
        (
            "try:\n    from apex import amp\nexcept ImportError:\n    amp = load()\n"
            "amp.initialize(m, o)\n",
            Ambiguous(("amp.initialize", "apex.amp.initialize"), BOTH),
        ),
        (
            OPTIONAL_ADAM + "def FusedAdam(p):\n    return p\nFusedAdam(p)\n",
            Ambiguous(("FusedAdam", "apex.optimizers.FusedAdam"), BOTH),
        ),
    ],
)  # fmt: skip
def test_a_none_fallback_is_not_what_a_call_or_an_attribute_uses(
    source: str, expected: object
) -> None:
    assert resolve_calls(source)[-1] == expected


def test_a_bare_use_of_an_optional_import_stays_ambiguous() -> None:
    index = index_of(OPTIONAL_ADAM + "make(FusedAdam)\n")
    argument = index.nodes(ast.Call)[-1].args[0]
    assert isinstance(names.resolve(index, argument), Ambiguous)
    assert not names.compared_with_none(index, argument)


@pytest.mark.parametrize(
    ("test", "expected"),
    [("x is None", True), ("None is not x", True), ("x == None", False), ("x is y", False)],
)
def test_compared_with_none(test: str, expected: bool) -> None:
    index = index_of(test + "\n")
    x = next(name for name in index.nodes(ast.Name) if name.id == "x")
    assert names.compared_with_none(index, x) is expected


HELPER = "ultralytics.utils.torch_utils.autocast"


def resolve_global(source: str, name: str) -> str | Ambiguous | None:
    return names.resolve_global(index_of(source), name)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ultralytics.utils.torch_utils import autocast as amp\n", HELPER),
        ("from .torch_utils import amp\n", ".torch_utils.amp"),
        # Calling None raises: a caller of the name gets the import.
        (
            "try:\n    from ultralytics.utils.torch_utils import autocast as amp\n"
            "except ImportError:\n    amp = None\n",
            HELPER,
        ),
        ("def amp(enabled):\n    pass\n", None),
        ("def f():\n    from ultralytics.utils.torch_utils import autocast as amp\n", None),
    ],
)
def test_a_module_level_name_resolves_as_its_importers_see_it(
    source: str, expected: str | None
) -> None:
    assert resolve_global(source, "amp") == expected


@pytest.mark.parametrize(
    ("source", "candidates", "reason"),
    [
        (
            "try:\n    from ultralytics.utils.torch_utils import autocast as amp\n"
            "except ImportError:\n    from torch.cuda.amp import autocast as amp\n",
            ("torch.cuda.amp.autocast", HELPER),
            "bound by more than one import",
        ),
        (
            "from ultralytics.utils.torch_utils import autocast as amp\n"
            "def amp(enabled):\n    pass\n",
            ("amp", HELPER),
            "bound both by an import and locally",
        ),
        (
            "from ultralytics.utils import torch_utils\namp = torch_utils.autocast\n",
            (HELPER,),
            "`amp` is a value alias",
        ),
        (
            "from ultralytics.utils.torch_utils import *\n",
            ("ultralytics.utils.torch_utils.amp",),
            "`amp` may come from a star import",
        ),
    ],
)
def test_a_module_level_name_with_several_origins_is_ambiguous(
    source: str, candidates: tuple[str, ...], reason: str
) -> None:
    assert resolve_global(source, "amp") == Ambiguous(candidates, reason)
