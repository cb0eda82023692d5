"""NPU202: `apex.parallel` DistributedDataParallel / SyncBatchNorm -> their torch equivalents."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from migrator.analysis.calls import Argument, arguments
from migrator.analysis.names import Ambiguous
from migrator.callargs import remove_arg_objects
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FileContext, FixSafety, Rule
from migrator.rules.normalization_parallel._common import (
    APEX_ROOTS,
    NewHome,
    absolute_module,
    alone_on_its_line,
    argument_code,
    binding_imports,
    bound_name,
    candidate_attributes,
    candidate_names,
    constant,
    dotted_expression,
    is_constant,
    is_star,
    queue_removal_of_base_import,
    rehome_statement,
    start_then_end,
    torch_nn_prefix,
)

APEX_DDP = frozenset(
    {"apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"}
)
APEX_SYNC_BN = frozenset(
    {
        "apex.parallel.SyncBatchNorm",
        "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm",
        "apex.parallel.sync_batchnorm.SyncBatchNorm",
    }
)
APEX_CONVERT = frozenset({"apex.parallel.convert_syncbn_model"})
APEX_REDUCER = frozenset({"apex.parallel.Reducer", "apex.parallel.distributed.Reducer"})
ALL_NAMES = APEX_DDP | APEX_SYNC_BN | APEX_CONVERT | APEX_REDUCER

# apex DDP's parameters after `module`, in order (positional arguments are matched to them).
APEX_DDP_PARAMETERS = (
    "message_size",
    "delay_allreduce",
    "shared_param",
    "allreduce_trigger_params",
    "retain_allreduce_buffers",
    "allreduce_always_fp32",
    "num_allreduce_streams",
    "allreduce_communicators",
    "gradient_average",
    "gradient_predivide_factor",
    "gradient_average_split_factor",
    "prof",
)
# What each dropped apex DDP argument did, and what torch's DDP offers instead.
DDP_DROPPED = {
    "message_size": "torch's counterpart is `bucket_cap_mb=`, in megabytes, where "
    "`message_size` counted elements",
    "delay_allreduce": "torch's DDP always overlaps the all-reduce with backward",
    "shared_param": "deprecated in apex, torch's DDP needs nothing",
    "allreduce_trigger_params": "torch's DDP buckets gradients itself",
    "retain_allreduce_buffers": "torch's DDP manages its buckets, see `gradient_as_bucket_view=`",
    "allreduce_always_fp32": "torch's DDP reduces in the gradient dtype, register a comm hook "
    "to change that",
    "num_allreduce_streams": "torch's DDP picks its own streams",
    "allreduce_communicators": "torch's DDP takes `process_group=`",
    "prof": "use `torch.profiler` instead",
}
# Arguments whose removal changes the gradients unless they hold their default value.
DDP_SEMANTIC: dict[str, tuple[object, str]] = {
    "gradient_average": (
        True,
        "torch's DDP always averages gradients over ranks; to sum them, multiply the loss by "
        "the world size or register a comm hook",
    ),
    "gradient_predivide_factor": (
        1.0,
        "torch's DDP has no pre-division; register a comm hook that divides before and after "
        "the all-reduce",
    ),
    "gradient_average_split_factor": (
        None,
        "deprecated alias of `gradient_predivide_factor`; register a comm hook that divides "
        "before and after the all-reduce",
    ),
}
# SyncBatchNorm / convert_syncbn_model switches that torch's versions lack: (position, default).
SYNC_BN_SWITCHES = {"channel_last": 6, "fuse_relu": 7}
CONVERT_SWITCHES = {"channel_last": 2}
SWITCH_ADVICE = {
    "channel_last": "torch.nn.SyncBatchNorm has no channels-last kernel; drop the argument and "
    "keep the input NCHW, or convert the layout around the layer",
    "fuse_relu": "torch.nn.SyncBatchNorm does not fuse ReLU; drop the argument and apply "
    "`torch.nn.functional.relu` after the layer",
}


# Short names of everything this rule resolves: only attributes spelled so can be apex's.
ATTRIBUTE_NAMES = frozenset(name.rpartition(".")[2] for name in ALL_NAMES)
CONVERT_NAME = "convert_syncbn_model"
APEX_PARALLEL = "apex.parallel"


@dataclass
class CallPlan:
    """What to do with one call of an apex.parallel name."""

    name: str  # the qualified name called
    removed: list[int] = field(default_factory=list)  # argument indexes to drop
    notes: list[str] = field(default_factory=list)  # what each dropped argument meant
    blockers: list[str] = field(default_factory=list)  # why the call cannot be rewritten


@dataclass
class ImportPlan:
    """One `from apex.parallel import ...` statement that is rewritten to torch."""

    statement: ast.ImportFrom
    moves: dict[str, NewHome]  # imported name -> its new home
    uses: list[Edit] = field(default_factory=list)  # uses spelled out in full (no import form)


class ApexParallelToTorch(Rule):
    """
    ## What it does
    Replaces `apex.parallel.DistributedDataParallel`, `apex.parallel.SyncBatchNorm` and
    `apex.parallel.convert_syncbn_model` with `torch.nn.parallel.DistributedDataParallel`,
    `torch.nn.SyncBatchNorm` and `torch.nn.SyncBatchNorm.convert_sync_batchnorm`, keeping the
    user's aliases, and removes the arguments torch's versions do not take.

    ## Why
    apex's DDP and SyncBatchNorm are CUDA-only and were not adapted for Ascend; torch's versions
    run on NPU with the `hccl` backend.

    ## Example
    ```python
    from apex.parallel import DistributedDataParallel as DDP
    model = DDP(model, delay_allreduce=True)
    ```

    ## Use instead
    ```python
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model)
    ```

    ## Fix safety
    Safe: the arguments removed only tune how apex schedules the all-reduce. Calls whose
    arguments change the gradients (`gradient_average=False`, `gradient_predivide_factor`),
    `channel_last=True`, `fuse_relu=True` or arguments hidden in `*args`/`**kwargs` are reported
    and left alone, together with the import they use.
    """

    CODE = "NPU202"
    NAME = "apex-parallel-to-torch"
    SUMMARY = "`apex.parallel` DistributedDataParallel / SyncBatchNorm / convert_syncbn_model"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("parallel",)

    def __init__(self, context: FileContext) -> None:
        super().__init__(context)
        self.nn = "torch.nn"
        self.plans: dict[int, CallPlan] = {}  # id(call) -> plan
        self.blocked_funcs: set[int] = set()  # id(func node) of calls left alone
        self.blocked_names: set[str] = set()  # local names whose import must stay apex
        self.imports: dict[int, ImportPlan] = {}  # id(ImportFrom) -> how it is rewritten

    def check(self) -> None:
        self.nn = torch_nn_prefix(self.view)
        # inner calls first, as a bottom-up visit leaves them
        calls = sorted(self.calls_to(APEX_ROOTS), key=start_then_end)
        for call in calls:
            self.plan_call(call)
        self.plan_imports()
        self.check_names()  # before the import fixes: the rewritten uses go with them
        self.fix_imports()
        self.check_attributes()  # before the calls: same order as a bottom-up visit
        for call in calls:
            self.check_call(call)

    # -- planning the calls ----------------------------------------------------------------------

    def plan_call(self, call: ast.Call) -> None:
        name = self.qualified_name_in(call.func, APEX_DDP | APEX_SYNC_BN | APEX_CONVERT)
        if isinstance(name, Ambiguous):
            # Reported at the call; its import stays as written, or the fallback would break.
            self.block(call)
        if not isinstance(name, str):
            return
        if name in APEX_DDP:
            plan = self.plan_ddp(call, name)
        else:
            switches = SYNC_BN_SWITCHES if name in APEX_SYNC_BN else CONVERT_SWITCHES
            plan = self.plan_switches(call, name, switches)
        if not plan.blockers and self.suppressed(call):
            plan.blockers.append("suppressed")
        self.plans[id(call)] = plan
        if plan.blockers:
            self.block(call)

    def block(self, call: ast.Call) -> None:
        self.blocked_funcs.add(id(call.func))
        if isinstance(call.func, ast.Name):
            self.blocked_names.add(call.func.id)

    def plan_ddp(self, call: ast.Call, name: str) -> CallPlan:
        plan = CallPlan(name)
        for argument in arguments(call):
            if argument.star:
                plan.blockers.append(self.unseen(argument))
                continue
            if argument.keyword is None:
                if argument.index == 0:
                    continue
                if argument.index - 1 >= len(APEX_DDP_PARAMETERS):
                    plan.blockers.append("too many positional arguments")
                    continue
                parameter = APEX_DDP_PARAMETERS[argument.index - 1]
            else:
                parameter = argument.keyword
                if parameter == "module":
                    continue
            given = f"`{parameter}={self.view.written(argument.value)}`"
            if parameter in DDP_DROPPED:
                plan.removed.append(argument.index)
                plan.notes.append(f"{given} ({DDP_DROPPED[parameter]})")
            elif parameter in DDP_SEMANTIC:
                default, advice = DDP_SEMANTIC[parameter]
                if is_constant(argument.value, default):
                    plan.removed.append(argument.index)
                    plan.notes.append(f"{given} (the default)")
                else:
                    plan.blockers.append(f"{given}: {advice}")
            else:
                plan.blockers.append(f"`{parameter}=` is not an apex DDP argument this rule knows")
        return plan

    def plan_switches(self, call: ast.Call, name: str, switches: dict[str, int]) -> CallPlan:
        plan = CallPlan(name)
        for argument in arguments(call):
            if argument.star:
                plan.blockers.append(self.unseen(argument))
                continue
            parameter = argument.keyword
            if parameter is None:
                parameter = next((n for n, p in switches.items() if p == argument.index), None)
            if parameter is None or parameter not in switches:
                continue
            given = f"`{parameter}={self.view.written(argument.value)}`"
            if constant(argument.value) is False:
                plan.removed.append(argument.index)
                plan.notes.append(f"{given} (the default)")
            else:
                plan.blockers.append(f"{given}: {SWITCH_ADVICE[parameter]}")
        return plan

    def unseen(self, argument: Argument) -> str:
        """Why a call with ``*args`` / ``**kwargs`` is left alone."""
        return f"cannot see the arguments in `{argument_code(self.view, argument)}`"

    # -- imports ---------------------------------------------------------------------------------

    def plan_imports(self) -> None:
        for statement in self.index.nodes(ast.ImportFrom):
            module = absolute_module(statement)
            if module is None or not module.startswith(APEX_PARALLEL):
                continue  # every name this rule moves is under apex.parallel
            if not alone_on_its_line(self.view, statement):
                continue  # no room for the lines it may become
            if is_star(statement):
                self.report(
                    statement,
                    "star import from `apex.parallel`: import the names you use from "
                    "`torch.nn.parallel` / `torch.nn` instead",
                )
                continue
            moves = self.import_moves(statement, module)
            if moves:
                self.imports[id(statement)] = ImportPlan(statement, moves)

    def import_moves(self, statement: ast.ImportFrom, module: str) -> dict[str, NewHome]:
        moves: dict[str, NewHome] = {}
        for alias in statement.names:
            full = f"{module}.{alias.name}"
            if bound_name(alias) in self.blocked_names:
                continue
            if full in APEX_DDP:
                moves[alias.name] = NewHome("torch.nn.parallel", "DistributedDataParallel")
            elif full in APEX_SYNC_BN:
                moves[alias.name] = NewHome("torch.nn", "SyncBatchNorm")
            elif full in APEX_CONVERT:
                moves[alias.name] = NewHome(None, CONVERT_NAME)
        return moves

    def fix_imports(self) -> None:
        for plan in self.imports.values():
            statement = plan.statement
            message = "import from torch instead of `apex.parallel`: " + ", ".join(
                f"`{old}` -> `{self.describe(home)}`" for old, home in plan.moves.items()
            )
            edit = rehome_statement(self, statement, plan.moves)
            if not self.fix(statement, message, edit, *plan.uses):
                continue
            if any(home.module is None for home in plan.moves.values()):
                self.ensure_torch_spelling()

    def describe(self, home: NewHome) -> str:
        if home.module is None:
            return "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
        return f"{home.module}.{home.name}"

    def ensure_torch_spelling(self) -> None:
        if self.nn == "torch.nn":
            self.add_import("torch")

    # -- uses ------------------------------------------------------------------------------------

    def check_names(self) -> None:
        for name in candidate_names(self.view):
            found = self.qualified_name_in(name, APEX_CONVERT | APEX_REDUCER)
            if not isinstance(found, str):
                continue
            if found in APEX_REDUCER:
                self.report_reducer(name)
            elif name.id not in self.blocked_names and not self.suppressed(name):
                self.spell_out_convert(name)

    def spell_out_convert(self, name: ast.Name) -> None:
        """``convert_syncbn_model`` has no ``from torch... import`` form: its import goes, and
        this use becomes the full torch name, with the fix of that import."""
        replacement = f"{self.nn}.SyncBatchNorm.convert_sync_batchnorm"
        for statement in binding_imports(self.view, name):
            plan = self.imports.get(id(statement))
            if plan is not None and CONVERT_NAME in plan.moves:
                edit = self.replace(name, cst.Name, lambda _: dotted_expression(replacement))
                plan.uses.append(edit)
                return

    def check_attributes(self) -> None:
        for attribute in candidate_attributes(self.view, ATTRIBUTE_NAMES):
            self.check_attribute(attribute)

    def check_attribute(self, node: ast.Attribute) -> None:
        name = self.qualified_name_in(node, ALL_NAMES)
        if not isinstance(name, str):
            return
        if name in APEX_REDUCER:
            self.report_reducer(node)
            return
        if id(node) in self.blocked_funcs:
            return
        if name in APEX_DDP:
            member = "parallel.DistributedDataParallel"
        elif name in APEX_SYNC_BN:
            member = "SyncBatchNorm"
        else:
            member = "SyncBatchNorm.convert_sync_batchnorm"
        replacement = f"{self.nn}.{member}"
        edit = self.replace(node, cst.Attribute, lambda _: dotted_expression(replacement))
        if self.fix(node, f"replaced `{name}` with `torch.nn.{member}`", edit):
            self.ensure_torch_spelling()
            queue_removal_of_base_import(self, node)

    def report_reducer(self, node: ast.AST) -> None:
        self.report(
            node,
            "`apex.parallel.Reducer` is CUDA-only and has no torch counterpart: call "
            "`torch.distributed.all_reduce` on the gradients (or use torch's DDP) instead",
        )

    def check_call(self, call: ast.Call) -> None:
        name = self.qualified_name_in(call.func, ALL_NAMES)
        if isinstance(name, Ambiguous):
            self.report(
                call,
                f"cannot tell whether `{self.view.written(call.func)}` comes from apex.parallel: "
                f"{name.describe()}; if it does, use the torch class and drop the apex-only "
                "arguments by hand",
            )
            return
        plan = self.plans.get(id(call))
        if plan is None:
            return
        if plan.blockers:
            if plan.blockers != ["suppressed"]:
                self.report(call, f"`{plan.name}` left as it is: " + "; ".join(plan.blockers))
            return
        if plan.removed:
            self.fix(
                call,
                "removed arguments torch's version does not take: " + "; ".join(plan.notes),
                self.replace(call, cst.Call, drop_arguments(plan.removed)),
            )


def drop_arguments(doomed: list[int]) -> Callable[[cst.Call], cst.Call]:
    """An edit of a call that removes the arguments at the ``doomed`` indexes."""

    def edit(call: cst.Call) -> cst.Call:
        return remove_arg_objects(call, [call.args[index] for index in doomed])

    return edit
