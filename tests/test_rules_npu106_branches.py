"""NPU106 where the wrapper's name also holds a plain optimizer on another path.

BERT fine-tuning scripts build a plain optimizer, and wrap it only under `if args.fp16:`, with
one wrapper per loss-scaling mode in `if args.loss_scale == 0:` / `else:`; the training loop
then calls `optimizer.backward(loss)` under `if args.fp16:` again. The flow analysis sees the
plain optimizer reach that call too (conditions are not correlated); the rewrite is right only
because every path through the `if args.fp16:` branch rebinds the name to a wrapper. These shapes
are not fixtures: the runtime contract runs fixtures with all flags true or all false, which
never reaches the `else:` of the inner `if`.
"""

from __future__ import annotations

import textwrap

from migrator.analysis.parse import parse_index
from migrator.analysis.view import FileView
from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.rules.optimizers._fp16 import fp16_sites, uncovered_condition
from migrator.settings import Settings

HEAD = textwrap.dedent(
    """
    import torch
    from apex.fp16_utils import FP16_Optimizer


    def train(args, model, batches):
        if args.fp16:
            model.half()
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    """
)
WRAPPERS = textwrap.indent(
    textwrap.dedent(
        """
        if args.fp16:
            if args.loss_scale == 0:
                optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
            else:
                optimizer = FP16_Optimizer(optimizer, static_loss_scale=args.loss_scale)
        """
    ),
    "    ",
)
LOOP = textwrap.indent(
    textwrap.dedent(
        """
        for batch in batches:
            loss = model(batch)
            if args.fp16:
                optimizer.backward(loss)
            else:
                loss.backward()
            optimizer.step()
        """
    ),
    "    ",
)


def migrate(source: str) -> tuple[str, list[str]]:
    rules = select_rules(all_rules(), ["NPU106"])
    result = migrate_source(source.encode(), "train.py", rules, Settings())
    assert result.status is not Status.ERROR, result.diagnostics
    messages = [f"{d.line} {d.severity} {d.message}" for d in result.diagnostics]
    return result.migrated.decode(), messages


def test_wrappers_on_every_path_of_the_branch_are_rewritten() -> None:
    migrated, messages = migrate(HEAD + WRAPPERS + LOOP)
    assert migrated.count("amp.initialize(") == 2
    assert "with apex.amp.scale_loss(loss, optimizer) as scaled_loss:" in migrated
    assert "model.half()" not in migrated and "if args.fp16:\n        model" not in migrated
    assert all(" fixed " in message for message in messages), messages


def test_a_branch_without_a_wrapper_blocks_the_rewrite() -> None:
    # With `elif` instead of `else`, the fp16 path may keep the plain optimizer.
    partial = WRAPPERS.replace("        else:\n", "        elif args.loss_scale > 0:\n")
    migrated, messages = migrate(HEAD + partial + LOOP)
    assert migrated == HEAD + partial + LOOP
    assert messages and all("may also see `optimizer` as assigned at line 9" in m for m in messages)


def test_a_rebinding_after_the_branch_blocks_the_rewrite() -> None:
    rebound = WRAPPERS + "    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)\n"
    migrated, messages = migrate(HEAD + rebound + LOOP)
    assert migrated == HEAD + rebound + LOOP
    # The wrappers are dead code: the backward call sees the optimizer rebound at line 16.
    assert len(messages) == 2
    assert all("of this function is called on the wrapper" in m for m in messages), messages


def wrapper_coverage(source: str) -> tuple[str, bool] | None:
    """``uncovered_condition`` for the wrappers of ``source`` and the optimizer they wrap."""
    view = FileView(parse_index(textwrap.dedent(source), "train.py"))
    sites = fp16_sites(view)
    inner = sites[0].inner_call
    assert inner is not None
    return uncovered_condition(view, [site.call for site in sites], inner)


def test_wrappers_in_both_branches_cover_every_path() -> None:
    assert wrapper_coverage(HEAD + WRAPPERS.replace("if args.fp16:", "if True:") + LOOP) == (
        "True",
        True,
    )
    assert wrapper_coverage(HEAD + WRAPPERS + LOOP) == ("args.fp16", True)
    both = (
        HEAD
        + "    if args.loss_scale == 0:\n"
        + "        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)\n"
        + "    else:\n"
        + "        optimizer = FP16_Optimizer(optimizer, static_loss_scale=args.loss_scale)\n"
        + LOOP
    )
    assert wrapper_coverage(both) is None
    one = HEAD + "    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)\n" + LOOP
    assert wrapper_coverage(one) is None
