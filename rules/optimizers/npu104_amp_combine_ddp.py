"""NPU104: replace DDP by Ascend apex's `combine_ddp=True` (opt-in)."""

from __future__ import annotations

from collections.abc import Callable

from migrator.callargs import append_arg, find_keyword, keyword
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._combine_ddp_planner import WrapKept, WrapRemoval, plan_combine_ddp
from migrator.rules.optimizers._plans import FusedPlans, RemovedWraps, planned


class AmpCombineDdp(Rule):
    """
    ## What it does
    Where a model goes through `amp.initialize` with NPU fused optimizers and is then wrapped
    in torch's or apex's DistributedDataParallel, removes the wrap and adds
    `combine_ddp=True` (and `combine_grad=True`, which it needs) to the `amp.initialize` call:
    Ascend apex then averages the packed gradient buffers across processes itself. What depended
    on the wrapper is rewritten: `model.module` becomes the model, `with model.no_sync():`
    becomes `with contextlib.nullcontext():`, `find_unused_parameters=False` and
    `broadcast_buffers=False` go with the wrap. A wrap inside `if args.distributed:` (the `if`
    holding only it) becomes `combine_ddp=args.distributed`.

    ## Why
    Ascend apex's distributed switch: `combine_ddp=True` with the framework's DDP turned off
    all-reduces a few large flat buffers instead of many per-parameter buckets.

    ## Example
    ```python
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", combine_grad=True)
    model = DDP(model, device_ids=[rank], broadcast_buffers=False)
    torch.save(model.module.state_dict(), path)
    ```

    ## Use instead
    ```python
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O1", combine_grad=True, combine_ddp=True
    )
    torch.save(model.state_dict(), path)
    ```

    ## Fix safety
    Safe, and opt-in: it runs only when selected by its full code. The rewrite is made only
    when the program keeps its numbers: every optimizer reaching `amp.initialize` is (or NPU101
    makes it) an NPU fused one, `opt_level` is O1 or O2 (with master weights under O2), the
    `amp.initialize` call and the wrap are in the same block (or the wrap alone in an `if` of
    that block whose condition nothing in between changes), and every use of the wrapped model
    after the wrap is one the rule understands: calling it, `train()` / `eval()` /
    `parameters()` / device moves, `.module`, `no_sync()`, `x.module if hasattr(x, "module")
    else x`, or passing it to a function of the same module that uses it only in those ways.
    Everything else is reported at the wrap, with the reason: `find_unused_parameters=True`
    (parameters without a gradient at the first step stay out of combine_ddp's buffers for
    good), `broadcast_buffers` left at its default (DDP copies rank 0's buffers, such as
    BatchNorm statistics, to every process at each forward; combine_ddp only at
    `amp.initialize`: pass `broadcast_buffers=False` if that is fine), a process group other
    than the default one, `state_dict()` / `named_parameters()` of the wrapper (its names start
    with `module.`), or the wrapper passed where the rule cannot follow it.
    With `no_sync()` gone the gradients are averaged after every backward instead of once per
    accumulation: the same sum, rounded in another order.
    """

    CODE = "NPU104"
    NAME = "amp-combine-ddp"
    SUMMARY = "DDP around an amp-initialized model with NPU fused optimizers (opt-in)"
    FIX_SAFETY = FixSafety.SAFE
    OPT_IN = True
    # Every wrap it acts on resolves to a DistributedDataParallel class, so the file names it.
    TRIGGER = ("DistributedDataParallel",)
    PROVIDES = (RemovedWraps,)
    READS = (FusedPlans,)

    def check(self) -> None:
        """The planner decides (:mod:`~migrator.rules.optimizers._combine_ddp_planner`); this
        reports the wraps that stay and turns the removals into edits."""
        removed: set[int] = set()
        for decision in plan_combine_ddp(self.view, planned(self)):
            if isinstance(decision, WrapKept):
                self.report(decision.call, decision.message)
                continue
            removed.add(id(decision.call))
            self._remove(decision)
        self.publish(RemovedWraps(frozenset(removed)))

    def _remove(self, removal: WrapRemoval) -> None:
        edits: list[Edit] = [
            self.replace_statement(removal.statement, _replacement(removal)),
            self.replace(removal.amp_call, cst.Call, _combine(removal.condition)),
        ]
        edits += [
            self.replace(node, cst.Attribute, _named(removal.source)) for node in removal.unwrapped
        ]
        edits += [self.replace(node, cst.Call, _null_context) for node in removal.no_sync]
        if self.fix(removal.call, removal.message, *edits):
            if removal.no_sync:
                self.add_import("contextlib")
            for module, obj, asname in removal.imports:
                self.remove_import_if_unused(module, obj, asname)


def _named(name: str) -> Callable[[cst.Attribute], cst.BaseExpression]:
    return lambda node: cst.Name(name)


def _null_context(call: cst.Call) -> cst.Call:
    return cst.Call(
        func=cst.Attribute(value=cst.Name("contextlib"), attr=cst.Name("nullcontext")),
        lpar=call.lpar,
        rpar=call.rpar,
    )


def _replacement(removal: WrapRemoval) -> Callable[[cst.CSTNode], object]:
    """The wrap becomes ``target = source`` when the names differ; otherwise it goes (``pass``
    when it is all its block holds)."""

    def change(node: cst.CSTNode) -> object:
        if removal.target != removal.source:
            alias = cst.parse_statement(f"{removal.target} = {removal.source}\n")
            return alias.with_changes(leading_lines=getattr(node, "leading_lines", ()))
        if removal.alone:
            return cst.parse_statement("pass\n")
        return cst.RemovalSentinel.REMOVE

    return change


def _combine(condition: str | None) -> Callable[[cst.Call], cst.Call]:
    def change(call: cst.Call) -> cst.Call:
        if find_keyword(call, "combine_grad") is None:  # NPU102 may have added it already
            call = append_arg(call, keyword("combine_grad", cst.Name("True")))
        value = cst.parse_expression(condition) if condition else cst.Name("True")
        return append_arg(call, keyword("combine_ddp", value))

    return change
