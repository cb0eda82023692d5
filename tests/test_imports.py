"""migrator.imports: imports are added once, in the user's block, and removed only when unused."""

from __future__ import annotations

import libcst as cst
import pytest

from migrator.imports import (
    ImportRemoval,
    ImportRequest,
    apply_import_edits,
    apply_import_edits_to_text,
    ensure_import,
)


def added(source: str, name: str, after: str | None = None) -> str:
    return ensure_import(cst.parse_module(source), name, after=after).code


def test_goes_right_after_the_first_import_of_after() -> None:
    source = "import os\nimport torch\nimport numpy as np\n\nx = 1\n"
    assert added(source, "torch_npu", after="torch") == (
        "import os\nimport torch\nimport torch_npu\nimport numpy as np\n\nx = 1\n"
    )


def test_from_import_and_submodule_imports_count_as_importing_after() -> None:
    source = "from torch import nn\nimport os\n"
    assert (
        added(source, "torch_npu", after="torch")
        == "from torch import nn\nimport torch_npu\nimport os\n"
    )
    source = "import torch.nn as nn\n"
    assert added(source, "torch_npu", after="torch") == "import torch.nn as nn\nimport torch_npu\n"


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nimport torch_npu\n",
        "import torch_npu.optim\n",
        "import torch_npu as torch_npu\n",
    ],
)
def test_never_duplicated(source: str) -> None:
    assert added(source, "torch_npu", after="torch") == source


def test_an_alias_does_not_bind_the_module_name() -> None:
    source = "import torch_npu as tn\n"
    assert added(source, "torch_npu") == "import torch_npu as tn\nimport torch_npu\n"


def test_without_after_it_joins_the_last_import_before_code() -> None:
    source = (
        '"""Doc."""\nfrom __future__ import annotations\n\nimport os\nfrom apex import amp\n'
        "\n\ndef f():\n    import sys\n"
    )
    assert added(source, "apex") == (
        '"""Doc."""\nfrom __future__ import annotations\n\nimport os\nfrom apex import amp\n'
        "import apex\n\n\ndef f():\n    import sys\n"
    )


def test_a_file_without_imports_gets_it_after_docstring_and_future_imports() -> None:
    source = '"""Doc."""\nfrom __future__ import annotations\nx = 1\n'
    assert added(source, "apex") == (
        '"""Doc."""\nfrom __future__ import annotations\nimport apex\nx = 1\n'
    )


def test_removal_only_when_unused() -> None:
    source = "from apex.optimizers import FusedAdam, FusedSGD\nFusedSGD(p)\n"
    module = apply_import_edits(
        cst.parse_module(source),
        [],
        [
            ImportRemoval("apex.optimizers", "FusedAdam"),
            ImportRemoval("apex.optimizers", "FusedSGD"),
        ],
    )
    assert module.code == "from apex.optimizers import FusedSGD\nFusedSGD(p)\n"


def test_requests_apply_after_removals() -> None:
    source = "import torch\nfrom apex.optimizers import FusedAdam\nx = 1\n"
    module = apply_import_edits(
        cst.parse_module(source),
        [ImportRequest("apex")],
        [ImportRemoval("apex.optimizers", "FusedAdam")],
    )
    assert module.code == "import torch\nimport apex\nx = 1\n"


def test_two_removals_from_one_module_are_both_applied() -> None:
    source = "import apex.normalization as N\nimport apex.normalization\nx = 1\n"
    module = apply_import_edits(
        cst.parse_module(source),
        [],
        [ImportRemoval("apex.normalization", None, "N"), ImportRemoval("apex.normalization")],
    )
    assert module.code == "x = 1\n"


def removed(source: str, *removals: ImportRemoval) -> str:
    return apply_import_edits(cst.parse_module(source), [], removals).code


@pytest.mark.parametrize(
    "source",
    [
        "import torch.optim as optim\ndef f():\n    return optim.SGD\n",  # a use in a function
        "import torch.optim as optim\n__all__ = ['optim']\n",  # re-exported
        "import torch.optim as optim\ndef f(o: 'optim.SGD') -> None: ...\n",  # string annotation
    ],
    ids=["nested-use", "exported", "string-annotation"],
)
def test_an_import_still_used_is_kept(source: str) -> None:
    assert removed(source, ImportRemoval("torch.optim", None, "optim")) == source


def test_import_a_dotted_module_is_used_by_any_use_of_its_top_name() -> None:
    source = "import torch.optim\nx = torch.nn\n"
    assert removed(source, ImportRemoval("torch.optim")) == source
    assert removed("import torch.optim\nx = 1\n", ImportRemoval("torch.optim")) == "x = 1\n"


REMOVAL_SHAPES = [
    "from apex.optimizers import (\n    FusedAdam,  # the fast one\n    FusedSGD,\n)\n"
    "FusedSGD(p)\n",
    "from apex.optimizers import (\n    FusedSGD,\n    # about adam\n    FusedAdam,  # fast\n)\n"
    "FusedSGD()\n",
    "from apex.optimizers import FusedSGD, FusedAdam as A\nFusedSGD()\n",
    "import os, apex.optimizers as O, sys\nos.sep\n",
    "import apex.optimizers as O; import os\nos.sep\n",
    "def f():\n    from apex.optimizers import FusedAdam\n    return 1\n"
    "from apex.optimizers import FusedAdam\nFusedAdam()\n",
    "if x:\n    from apex.optimizers import FusedAdam\nelse:\n    FusedAdam = None\n",
]
REMOVALS = [
    ImportRemoval("apex.optimizers", "FusedAdam"),
    ImportRemoval("apex.optimizers", "FusedAdam", "A"),
    ImportRemoval("apex.optimizers", None, "O"),
]


@pytest.mark.parametrize("source", REMOVAL_SHAPES)
def test_removal_matches_libcsts_remove_imports_visitor(source: str) -> None:
    """The same result as libcst's RemoveImportsVisitor, which decides on libcst's scopes."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    expected = cst.parse_module(source)
    for removal in REMOVALS:
        request = [(removal.module, removal.obj, removal.asname)]
        expected = RemoveImportsVisitor(CodemodContext(), request).transform_module(expected)
    assert removed(source, *REMOVALS) == expected.code


def test_an_import_left_alone_in_a_block_becomes_pass() -> None:
    source = "try:\n    import apex.normalization\nexcept ImportError:\n    pass\n"
    assert removed(source, ImportRemoval("apex.normalization")) == (
        "try:\n    pass\nexcept ImportError:\n    pass\n"
    )


FROM_IMPORT_CASES = [
    # (source, expected): `from apex import amp` joins the last import before the code
    (
        "import torch\nimport torch.nn as nn\n\nx = 1\n",
        "import torch\nimport torch.nn as nn\nfrom apex import amp\n\nx = 1\n",
    ),
    # already bound that way: nothing added
    ("import torch\nfrom apex import amp\nx = 1\n", "import torch\nfrom apex import amp\nx = 1\n"),
    ("from apex import amp, optimizers\nx = 1\n", "from apex import amp, optimizers\nx = 1\n"),
    # an alias does not bind `amp`, and `import apex` does not bind it either
    (
        "from apex import amp as A\nimport apex\nx = 1\n",
        "from apex import amp as A\nimport apex\nfrom apex import amp\nx = 1\n",
    ),
]


@pytest.mark.parametrize(("source", "expected"), FROM_IMPORT_CASES)
def test_from_import_requests_on_a_module_and_on_text(source: str, expected: str) -> None:
    request = ImportRequest("apex", None, "amp")
    assert apply_import_edits(cst.parse_module(source), [request], []).code == expected
    assert apply_import_edits_to_text(source, [request], []).text == expected


def test_a_from_import_and_a_plain_import_of_one_module_are_both_added() -> None:
    source = "import torch\nx = 1\n"
    requests = [ImportRequest("apex", None, "amp"), ImportRequest("apex", "apex")]
    expected = "import torch\nfrom apex import amp\nimport apex\nx = 1\n"
    assert apply_import_edits(cst.parse_module(source), requests, []).code == expected
    assert apply_import_edits_to_text(source, requests, []).text == expected


def test_an_import_placed_after_a_module_added_with_it_goes_next_to_that_addition() -> None:
    # NPU101's kept class: `import torch` for `(torch.optim.AdamW if ... else ...)`, then
    # `import torch_npu` after torch: not after `from torch import optim`, above the new line.
    source = "import os\nfrom torch import optim as optim\nimport timm\n\nx = 1\n"
    requests = [ImportRequest("torch"), ImportRequest("torch_npu", "torch")]
    expected = (
        "import os\nfrom torch import optim as optim\nimport timm\nimport torch\nimport torch_npu"
        "\n\nx = 1\n"
    )
    assert apply_import_edits(cst.parse_module(source), requests, []).code == expected
    assert apply_import_edits_to_text(source, requests, []).text == expected
    # Where the file imports torch already, nothing is added for it and `after` holds as before.
    source = "from torch import optim as optim\nimport torch\nimport timm\n"
    expected = "from torch import optim as optim\nimport torch_npu\nimport torch\nimport timm\n"
    assert apply_import_edits(cst.parse_module(source), requests, []).code == expected
    assert apply_import_edits_to_text(source, requests, []).text == expected


OPTIONAL_CASES = [
    # (source, expected): an optional `import apex` (only the runs with apex amp use it)
    # a `try` that imports from apex: just before that import, which would fail the same way
    (
        "import torch\ntry:\n    import timm\n    from apex import amp\n    has_apex = True\n"
        "except ImportError:\n    has_apex = False\nx = 1\n",
        "import torch\ntry:\n    import timm\n    import apex\n    from apex import amp\n"
        "    has_apex = True\nexcept ImportError:\n    has_apex = False\nx = 1\n",
    ),
    # a `try` that imports apex itself already binds it
    (
        "try:\n    import apex.amp\nexcept ImportError:\n    pass\nx = 1\n",
        "try:\n    import apex.amp\nexcept ImportError:\n    pass\nx = 1\n",
    ),
    # apex imported outside any `try`: every run needs it anyway, a plain import
    (
        "import torch\nfrom apex import amp\nx = 1\n",
        "import torch\nfrom apex import amp\nimport apex\nx = 1\n",
    ),
    # a `try` on one line has no line to put the import on: a guarded import of its own
    (
        "try: from apex import amp\nexcept ImportError: amp = None\nx = 1\n",
        "try:\n    import apex\nexcept ImportError:  # only the runs that use it need it\n"
        "    pass\ntry: from apex import amp\nexcept ImportError: amp = None\nx = 1\n",
    ),
    # apex imported only inside a function: a guarded import of its own
    (
        "import torch\n\n\ndef main(args):\n    from apex import amp\n",
        "import torch\ntry:\n    import apex\n"
        "except ImportError:  # only the runs that use it need it\n    pass\n\n\n"
        "def main(args):\n    from apex import amp\n",
    ),
]


@pytest.mark.parametrize(("source", "expected"), OPTIONAL_CASES)
def test_an_optional_import_never_stops_a_run_that_does_not_use_it(
    source: str, expected: str
) -> None:
    request = ImportRequest("apex", "apex", optional=True)
    assert apply_import_edits(cst.parse_module(source), [request], []).code == expected
    assert apply_import_edits_to_text(source, [request], []).text == expected


@pytest.mark.parametrize(
    "other", [ImportRequest("apex", "apex"), ImportRequest("apex", None, "amp")]
)
def test_an_optional_import_is_plain_where_another_rule_imports_the_module(
    other: ImportRequest,
) -> None:
    """Another rule of the run imports from apex outside any `try` (NPU105's `from apex import
    amp`): every run needs apex then, and one plain `import apex` is added."""
    source = "import torch\ntry:\n    from apex import amp\nexcept ImportError:\n    pass\nx = 1\n"
    requests = [ImportRequest("apex", "apex", optional=True), other]
    result = apply_import_edits_to_text(source, requests, []).text
    assert result == apply_import_edits(cst.parse_module(source), requests, []).code
    assert "\nimport apex\n" in result  # at module level, once
    assert result.count("import apex\n") == 1
    assert "try:\n    from apex import amp\n" in result  # the `try` as it was


REMOVED_FUSED_ADAM = ImportRemoval("apex.optimizers", "FusedAdam")
OPTIONAL_AFTER_REMOVAL_CASES = [
    # (source, expected): the placement is decided on the imports the removals leave
    # the first apex import of the `try` goes: before the next one
    (
        "try:\n    from apex.optimizers import FusedAdam\n    from apex import amp\n"
        "except ImportError:\n    amp = None\nx = amp\n",
        "try:\n    import apex\n    from apex import amp\nexcept ImportError:\n    amp = None\n"
        "x = amp\n",
    ),
    # it loses an alias only: before it
    (
        "try:\n    from apex.optimizers import FusedAdam, FusedSGD\nexcept ImportError:\n"
        "    pass\nx = FusedSGD\n",
        "try:\n    import apex\n    from apex.optimizers import FusedSGD\nexcept ImportError:\n"
        "    pass\nx = FusedSGD\n",
    ),
    # the module's only apex import, outside any `try`, goes: nothing requires apex any more
    (
        "import torch\nfrom apex.optimizers import FusedAdam\nx = 1\n",
        "import torch\ntry:\n    import apex\n"
        "except ImportError:  # only the runs that use it need it\n    pass\nx = 1\n",
    ),
]


@pytest.mark.parametrize(("source", "expected"), OPTIONAL_AFTER_REMOVAL_CASES)
def test_an_optional_import_is_placed_among_the_imports_the_removals_leave(
    source: str, expected: str
) -> None:
    requests = [ImportRequest("apex", "apex", optional=True)]
    removals = [REMOVED_FUSED_ADAM]
    assert apply_import_edits(cst.parse_module(source), requests, removals).code == expected
    assert apply_import_edits_to_text(source, requests, removals).text == expected
