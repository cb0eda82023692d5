"""Rewriting only the slices of a file that change gives the bytes of a whole-file rewrite.

Each source runs through every rule twice: with slicing (the default) and with one libcst parse
of the whole file (``Engine(fast=False)``, which the soundness test also compares on torch's
sources). The shapes are the ones where a slice could disagree with the whole module about who
owns a comment or a blank line, or where an expression cannot be parsed on its own.
"""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from migrator.edits import BlockEdit, NodeEdit
from migrator.engine import Engine
from migrator.registry import all_rules
from migrator.results import Status
from migrator.settings import Settings, Target
from migrator.slices import SliceError, apply_sliced
from migrator.source import Source

CASES = {
    "docstring-and-comments": '''"""Train."""
# the imports
import torch
import apex  # gone once nothing uses it

# a comment above the model
model = torch.nn.Linear(2, 2).cuda()
''',
    "first-statement-removed": """import apex


def wrap(model):
    return apex.parallel.DistributedDataParallel(model)
""",
    "first-statement-replaced": """from apex.normalization import FusedLayerNorm


class LayerNorm:
    pass


norm = FusedLayerNorm(32)
""",
    "block-footer-comment": """import torch

if torch.cuda.is_available():
    x = 1
    # the block's own trailing comment
# a comment of the next statement

y = torch.ones(2).cuda()
""",
    "decorated-and-class": """import torch


@torch.no_grad()
def evaluate(model):
    return model.cuda()


class Trainer:
    device = "cuda"

    def step(self, batch):
        return batch.cuda(non_blocking=True)
""",
    "semicolons": """import torch; import os
a = torch.zeros(1).cuda(); b = a.is_cuda
""",
    "backslash-continuation": """import torch
x = torch.ones(3) \\
    .cuda()
y = (torch.ones(3)
     .cuda())
""",
    "f-string": """import torch
message = f"{torch.cuda.device_count()} devices on {torch.cuda.get_device_name(0)}"
""",
    "crlf": "import torch\r\n\r\nx = torch.ones(1).cuda()\r\nif x.is_cuda:\r\n    pass\r\n",
    "tabs": "import torch\n\ndef f(x):\n\tif x.is_cuda:\n\t\treturn x.cuda()\n",
    "optimizer-before-ddp": """import torch
from apex import amp

model = torch.nn.Linear(2, 2).cuda()
model = torch.nn.parallel.DistributedDataParallel(model)
# the optimizer
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
""",
    "try-fallback": """try:
    from apex.normalization import FusedLayerNorm as LayerNorm
except ImportError:
    from torch.nn import LayerNorm

norm = LayerNorm(8)
""",
    "try-fallback-footer": """import torch

try:
    from apex.normalization import FusedLayerNorm as LayerNorm
except ImportError:
    from torch.nn import LayerNorm
    # the except block's trailing comment

norm = LayerNorm(8)
""",
    "nothing-else": "import apex\napex.parallel.convert_syncbn_model(model)\n",
    "unicode": """import torch
# café — the device
x = torch.ones(1).cuda("cuda:0")
ok = x.is_cuda  # ✓
""",
}


@pytest.mark.parametrize("target", list(Target), ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_slices_give_the_bytes_of_a_whole_file_rewrite(name: str, target: Target) -> None:
    source = CASES[name].encode()
    settings = Settings(target=target, unsafe_fixes=True)
    sliced = Engine(all_rules(), settings).migrate(source, f"{name}.py")
    whole = Engine(all_rules(), settings, fast=False).migrate(source, f"{name}.py")
    assert sliced.status is Status.CHANGED, sliced.diagnostics
    assert sliced.migrated == whole.migrated
    assert sliced.sliced and not whole.sliced


def test_a_lone_carriage_return_at_a_cut_falls_back_to_the_whole_file() -> None:
    source = b"import torch\r\nx = 1\ry = torch.ones(1).cuda()\r\n"
    result = Engine(all_rules()).migrate(source, "cr.py")
    assert result.status is Status.CHANGED and not result.sliced
    assert result.migrated == Engine(all_rules(), fast=False).migrate(source, "cr.py").migrated
    assert b"x = 1\ry = torch.ones(1).npu()" in result.migrated


def test_a_few_edits_in_a_large_file_parse_a_few_lines() -> None:
    filler = "".join(f"value_{i} = {{'key': [{i}, {i + 1}]}}\n" for i in range(3000))
    text = f"import torch\n{filler}x = torch.ones(1).cuda()\n{filler}"
    result = Engine(all_rules()).migrate(text.encode(), "big.py")
    assert result.status is Status.CHANGED and result.sliced
    assert b"x = torch.ones(1).npu()" in result.migrated
    assert 0 < result.parsed < 200, "only the call and the import lines are parsed"


def test_an_expression_slice_keeps_what_surrounds_it() -> None:
    text = "values = [  # comment\n    a.cuda(),\n    b,\n]\n"
    tree = ast.parse(text)
    call = tree.body[0].value.elts[0]  # type: ignore[attr-defined]
    attribute = call.func
    rename = NodeEdit(
        cst.Attribute,
        Source(text).span(attribute),
        lambda node: node.with_changes(attr=cst.Name("npu")),
    )
    edited, parsed = apply_sliced(text, tree, [rename])
    assert edited == text.replace("a.cuda()", "a.npu()")
    assert parsed == len("a.cuda")


def test_a_block_edit_reorders_a_run_and_keeps_the_rest_of_the_block() -> None:
    text = "a = 1\nb = 2\nc = 3\nd = 4\n"
    tree = ast.parse(text)
    source = Source(text)
    run = tuple((cst.SimpleStatementLine, source.start(s)) for s in tree.body[1:3])
    swap = BlockEdit(run, lambda lines: [*lines[1], *lines[0]])
    edited, _ = apply_sliced(text, tree, [swap])
    assert edited == "a = 1\nc = 3\nb = 2\nd = 4\n"


def test_a_module_without_statements_cannot_be_sliced() -> None:
    text = "# only a comment\n"
    edit = NodeEdit(cst.Name, (0, 1), lambda node: node)
    with pytest.raises(SliceError):
        apply_sliced(text, ast.parse(text), [edit])
