"""NPU203: optimizer (and amp.initialize) created after the model is wrapped in DDP.

The "plan -> edits" half: :mod:`._ddp_order` plans which statements move above which wrap and
which optimizers are reported (pure, on ``ast``); this rule records the plan as fixes and
reports, and builds the libcst edits that reorder the block and unwrap the moved uses.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from migrator.analysis import functions
from migrator.analysis.effects import CallNames, Path, show
from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import Facts, Module
from migrator.edits import Edit, Lines
from migrator.lazy_imports import cst
from migrator.rule import FileContext, FixSafety, Linking, Rule
from migrator.rules.normalization_parallel._ddp_order import (
    DDP_ORDER_KEY,
    AfterHiddenWrap,
    Move,
    Refusal,
    Unwrap,
    plan_ddp_order,
)
from migrator.rules.optimizers._plans import DdpMoves, FusedPlans, RemovedWraps, planned
from migrator.settings import Settings

_TARGET_WORDS = (b"optim", b"add_param_group", b"initialize")


def plural(word: str, numbers: Sequence[int]) -> str:
    listed = ", ".join(map(str, numbers))
    return f"{word}s {listed}" if len(numbers) > 1 else f"{word} {listed}"


class OptimizerBeforeDdp(Rule):
    """
    ## What it does
    Finds optimizers built (or changed with `add_param_group`, or passed to `amp.initialize`)
    after the model was wrapped in DistributedDataParallel in the same block, and moves those
    statements, with the statements they need, to just before the wrap when that is provably
    safe: `model.module.parameters()` becomes `model.parameters()`. Otherwise it reports where
    the wrap is.

    ## Why
    On Ascend, an optimizer created or changed after DDP initialisation only takes effect on
    the main card and the model goes wrong; and `amp.initialize` must see the unwrapped model.

    ## Example
    ```python
    model = DDP(model, device_ids=[rank])
    optimizer = torch.optim.SGD(model.module.parameters(), lr=0.1)
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = DDP(model, device_ids=[rank])
    ```

    ## Fix safety
    Safe: a statement is moved only when every name it reads is bound before the wrap to the
    same object, nothing it skips over changes what it reads or reads what it sets, and it
    calls nothing unknown. A DDP model has the same Parameter objects as the module it wraps,
    and moving a module to a device keeps them; `amp.initialize` is never moved above a device
    move. Accepted in between: device moves and casts (`model.cuda(gpu)`, `model.to(device)`,
    `model = DataParallel(model).cuda()`), and calls of any kind (prints, loaders, the loss)
    that are given nothing the moved statements read, and DeiT's and BEiT's
    `if args.distributed: model = DDP(model, ...); model_without_ddp = model.module` where
    `model_without_ddp = model` ran before it on every path (both names then hold the same
    module after the `if`, wrapped or not). Accepted in the moved statements: pure
    functions of the same module, or of another module of the files
    given (DINO's `utils.get_params_groups(student)` with `utils.py` in the run), also with
    the DDP-wrapped model as an argument when they give the same result for it as for the
    model inside; a name test
    such as `name.endswith(".bias")`, which differs for a parameter of the model's own named
    `bias` only, is accepted with that assumption spelled out in the message; and optimizer
    classes of the repository whose construction does nothing but build the optimizer
    (DINO's `utils.LARS(params_groups)`, see `migrator.analysis.classes`). A pure function
    may grow the containers it creates, print, assert and build optimizers, so the factories of
    BEiT and ConvNeXt (`create_optimizer(args, model_without_ddp, ...)`) move; optimizer classes
    imported from outside the files given (timm's `Nadam`, `Lookahead`), `model.no_weight_decay()`
    and the functions a caller hands it are accepted as assumptions the message states
    (`migrator.analysis.functions`). When nothing
    can move above the first wrap of a block, the statements go above a later one, if they
    read nothing wrapped before it (DINO's teacher, then its student). Everything else is
    reported, with the reason found at the wrap of the model the optimizer takes.
    """

    CODE = "NPU203"
    NAME = "optimizer-before-ddp"
    SUMMARY = "optimizer or `amp.initialize` after the model is wrapped in DDP"
    FIX_SAFETY = FixSafety.SAFE
    # Every wrap the rule acts on is a call that may be one of DDP_CLASSES (an ambiguous
    # `DataParallel` counts as a possible DDP), and each of those names contains this.
    TRIGGER = ("DataParallel",)
    # NPU101's respelling of optimizer classes: a moved statement reads its callee as rewritten;
    # NPU104's removed wraps (replaced by combine_ddp) are no wraps to move above.
    READS = (FusedPlans, RemovedWraps)
    # NPU101 fuses an optimizer built after a wrap only where this rule moves it.
    RUN_PLANS = (DdpMoves,)
    # The files it checks are summarised: the functions and classes of other modules of the run
    # they call (migrator.analysis.functions and .classes), whose verdicts the link computes.
    PROJECT_TRIGGER = TRIGGER
    PROJECT_KEY = DDP_ORDER_KEY

    @classmethod
    def run_plans(cls, settings: Settings) -> tuple[object, ...]:
        return (DdpMoves(),)

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        # A function of another module matters only in a file with something to move: an
        # optimizer (every class it knows lives in a package named `*optim*`), an
        # `add_param_group` or an `amp.initialize`.
        return b"DataParallel" in source and any(word in source for word in _TARGET_WORDS)

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        return functions.summarize(index)

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        return functions.link_once(linking.project.summaries(cls.project_key()), linking.files)

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        respelled = {key: plan.qualified_target for key, plan in planned(self).items()}
        links = self.project.links(self.project_key())
        self.calls = CallNames(self.view, context.path, links, respelled)

    def check(self) -> None:
        removed = self.read_plan(RemovedWraps)
        plan = plan_ddp_order(self.view, self.calls, removed.calls if removed else frozenset())
        for block in plan.blocks:
            for found in block.after_hidden_wraps:
                self.report_after_hidden_wrap(found)
            for refusal in block.refusals:
                self.report_refusal(refusal)
            if block.move is not None:
                self.fix_move(block.move)

    # -- the plan as fixes and reports -----------------------------------------------------------

    def fix_move(self, move: Move) -> None:
        """One fix per moved optimizer; the edits go with the first."""
        if move.suppressed(partial(self.context.suppressions.covers, code=self.CODE)):
            return
        edits = self.move_edits(move)
        extra = f" (with {plural('line', move.needed)}, which it needs)" if move.needed else ""
        assuming = f", assuming {'; and '.join(move.assumptions)}" if move.assumptions else ""
        for statement in move.optimizers:
            if self.fix(
                statement,
                f"moved above the DDP wrap at line {move.wrap_line}{extra}: an optimizer created "
                f"or changed after DDP wraps the model only takes effect on the main "
                f"card{assuming}",
                *edits,
            ):
                edits = []  # the block is rebuilt once, with the first diagnostic

    def report_refusal(self, refusal: Refusal) -> None:
        self.report(
            refusal.call,
            f"build this optimizer before the model is wrapped in DDP (line "
            f"{refusal.wrap_line}): it only takes effect on the main card otherwise. Not moved "
            f"automatically: {refusal.reason}",
        )

    def report_after_hidden_wrap(self, found: AfterHiddenWrap) -> None:
        self.report(
            found.call,
            f"{found.why} at line {found.wrap_line}, before this optimizer is built: build the "
            "optimizer (and call `amp.initialize`) before the wrap, or the optimizer only takes "
            "effect on the main card",
        )

    # -- the plan as edits -----------------------------------------------------------------------

    def move_edits(self, move: Move) -> list[Edit]:
        """The block rebuilt in its new order, and the uses of wrapped models unwrapped."""
        reorder = self.rebuild_block(list(move.lines), _reordered(move.above, list(move.moved)))
        return [reorder, *(self.unwrap_edit(unwrap) for unwrap in move.unwraps)]

    def unwrap_edit(self, unwrap: Unwrap) -> Edit:
        if unwrap.receiver_only:
            return self.replace(unwrap.node, cst.Attribute, _receiver_becomes(unwrap.becomes))
        kind = cst.Name if isinstance(unwrap.node, ast.Name) else cst.Attribute
        return self.replace(unwrap.node, kind, _becomes(unwrap.becomes))


def _reordered(first_wrap: int, moved: list[int]) -> Callable[[Lines], list[cst.BaseStatement]]:
    """The block's lines with ``moved`` taken out and put just before line ``first_wrap``."""

    def rebuild(lines: Lines) -> list[cst.BaseStatement]:
        rest = [i for i in range(first_wrap, len(lines)) if i not in moved]
        order = [*range(first_wrap), *moved, *rest]
        statements = [statement for i in order for statement in lines[i]]
        if first_wrap == 0 and statements:  # a moved line opens the block: no blank line above
            statements[0] = _without_leading_blanks(statements[0])
        return statements

    return rebuild


def _without_leading_blanks(statement: cst.BaseStatement) -> cst.BaseStatement:
    """``statement`` without the blank lines above it (its comments stay)."""
    leading = list(getattr(statement, "leading_lines", ()))
    while leading and leading[0].comment is None:
        leading.pop(0)
    return statement.with_changes(leading_lines=leading)


def _becomes(path: Path) -> Callable[[cst.CSTNode], cst.BaseExpression]:
    return lambda node: cst.parse_expression(show(path))


def _receiver_becomes(path: Path) -> Callable[[cst.Attribute], cst.BaseExpression]:
    return lambda node: node.with_changes(value=cst.parse_expression(show(path)))
