"""What NPU101 reads of a `**mapping` handed to an optimizer (rules/optimizers/_kwargs.py): the
keys that may arrive, whether those are all, and those that arrive on every path. A key that may
arrive unseen could mean something else to the NPU class (or to the class kept in its place), so
`complete` must never hold where a key can be added unseen."""

from __future__ import annotations

import ast
import textwrap

from migrator.analysis.parse import index_of_bytes
from migrator.analysis.view import FileView
from migrator.rules.optimizers._kwargs import ForwardedKeys, forwarded_keys


def keys_at(source: str, line: int) -> ForwardedKeys:
    """The keys of the `**` argument of the call on ``line`` of ``source``."""
    index = index_of_bytes(textwrap.dedent(source).encode(), "factory.py")
    assert index is not None
    view = FileView(index)
    [call] = [c for c in index.nodes(ast.Call) if c.lineno == line and c.keywords]
    [spread] = [k.value for k in call.keywords if k.arg is None]
    return forwarded_keys(view, spread, call)


BEIT = """
import torch
from timm.optim.nadam import Nadam

def create(args, params):
    opt_args = dict(lr=args.lr, weight_decay=args.weight_decay)
    if args.opt_eps is not None:
        opt_args["eps"] = args.opt_eps
    if args.opt == "sgd":
        opt_args.pop("eps", None)
        return torch.optim.SGD(params, momentum=0.9, **opt_args)
    return Nadam(params, **opt_args)
"""


def test_a_pop_or_a_copy_handed_elsewhere_adds_no_key() -> None:
    found = keys_at(BEIT, 11)
    assert found.complete
    assert {key.key for key in found.keys} == {"lr", "weight_decay", "eps"}
    assert found.in_every_arm == {"lr", "weight_decay"}
    assert found.other_use is not None  # no key may be dropped from it: Nadam gets it too


def test_a_popped_key_is_not_there_on_every_path() -> None:
    popped = BEIT.replace('opt_args.pop("eps", None)', 'opt_args.pop("lr")')
    assert keys_at(popped, 11).in_every_arm == {"weight_decay"}
    anything = BEIT.replace('opt_args.pop("eps", None)', "opt_args.pop(args.unused)")
    assert keys_at(anything, 11).in_every_arm == frozenset()


def test_keys_added_unseen_leave_the_mapping_incomplete() -> None:
    for change in (
        "opt_args.update(args.extra)",
        "opt_args[args.key] = 1",
        "configure(opt_args)",
    ):
        source = BEIT.replace('opt_args.pop("eps", None)', change)
        assert not keys_at(source, 11).complete, change


def test_showing_the_mapping_adds_no_key() -> None:
    # BEiT prints its `opt_args`; a dict's text never changes it.
    for shown in (
        'print("Optimizer config:", opt_args)',
        'print(f"config {opt_args}", flush=True)',
        "logging.info('%s', opt_args)",
        "n = len(opt_args)",
    ):
        source = "import logging\n" + BEIT.replace('opt_args.pop("eps", None)', shown)
        found = keys_at(source, 12)
        assert found.complete, shown
        assert found.in_every_arm == {"lr", "weight_decay"}, shown


def test_a_call_that_may_keep_the_mapping_is_not_showing_it() -> None:
    for kept in (
        'print("config", opt_args, file=args.log)',  # a stream of the program's own
        "logger.info(opt_args)",  # a logger whose handlers the module does not show
        "print = args.hook\n        print(opt_args)",  # not the built-in
    ):
        source = "import logging\n" + BEIT.replace('opt_args.pop("eps", None)', kept)
        assert not keys_at(source, 12 + kept.count("\n")).complete, kept
