"""NPU202: `apex.parallel` DistributedDataParallel / SyncBatchNorm -> their torch equivalents."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from migrator.callargs import remove_arg_objects
from migrator.names import Ambiguous
from migrator.rule import FixSafety, Rule
from migrator.rules.npu2_support import (
    NewHome,
    constant,
    dotted_expression,
    import_statements,
    imported_name,
    is_constant,
    queue_removal_of_base_import,
    rehome_import_from,
    source_of,
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


@dataclass
class CallPlan:
    """What to do with one call of an apex.parallel name."""

    removed: list[int] = field(default_factory=list)  # argument indexes to drop
    notes: list[str] = field(default_factory=list)  # what each dropped argument meant
    blockers: list[str] = field(default_factory=list)  # why the call cannot be rewritten


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
    TRIGGER = re.compile(r"parallel")

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self.plans: dict[int, CallPlan] = {}  # id(original call) -> plan
        self.blocked_funcs: set[int] = set()  # id(func node) of calls left alone
        self.blocked_names: set[str] = set()  # local names whose import must stay apex
        self.nn = "torch.nn"

    # -- planning, before anything is edited -----------------------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        self.nn = torch_nn_prefix(node)
        for call in m.findall(node, m.Call()):
            assert isinstance(call, cst.Call)
            name = self.qualified_name_in(call.func, APEX_DDP | APEX_SYNC_BN | APEX_CONVERT)
            if isinstance(name, Ambiguous):
                # Reported at the call; its import stays as written, or the fallback would break.
                self.block(call)
            if not isinstance(name, str):
                continue
            plan = self.plan_call(call, name)
            line, _ = self.position(call)
            if not plan.blockers and self.context.suppressions.covers(line, self.CODE):
                plan.blockers.append("suppressed")
            self.plans[id(call)] = plan
            if plan.blockers:
                self.block(call)

    def block(self, call: cst.Call) -> None:
        self.blocked_funcs.add(id(call.func))
        if isinstance(call.func, cst.Name):
            self.blocked_names.add(call.func.value)

    def plan_call(self, call: cst.Call, name: str) -> CallPlan:
        if name in APEX_DDP:
            return self.plan_ddp(call)
        switches = SYNC_BN_SWITCHES if name in APEX_SYNC_BN else CONVERT_SWITCHES
        return self.plan_switches(call, switches)

    def plan_ddp(self, call: cst.Call) -> CallPlan:
        plan = CallPlan()
        for index, arg in enumerate(call.args):
            if arg.star:
                plan.blockers.append(f"cannot see the arguments in `{source_of(arg)}`")
                continue
            if arg.keyword is None:
                if index == 0:
                    continue
                if index - 1 >= len(APEX_DDP_PARAMETERS):
                    plan.blockers.append("too many positional arguments")
                    continue
                parameter = APEX_DDP_PARAMETERS[index - 1]
            else:
                parameter = arg.keyword.value
                if parameter == "module":
                    continue
            written = f"`{parameter}={source_of(arg.value)}`"
            if parameter in DDP_DROPPED:
                plan.removed.append(index)
                plan.notes.append(f"{written} ({DDP_DROPPED[parameter]})")
            elif parameter in DDP_SEMANTIC:
                default, advice = DDP_SEMANTIC[parameter]
                if is_constant(arg.value, default):
                    plan.removed.append(index)
                    plan.notes.append(f"{written} (the default)")
                else:
                    plan.blockers.append(f"{written}: {advice}")
            else:
                plan.blockers.append(f"`{parameter}=` is not an apex DDP argument this rule knows")
        return plan

    def plan_switches(self, call: cst.Call, switches: dict[str, int]) -> CallPlan:
        plan = CallPlan()
        for index, arg in enumerate(call.args):
            if arg.star:
                plan.blockers.append(f"cannot see the arguments in `{source_of(arg)}`")
                continue
            parameter = arg.keyword.value if arg.keyword is not None else None
            if parameter is None:
                parameter = next((n for n, p in switches.items() if p == index), None)
            if parameter is None or parameter not in switches:
                continue
            written = f"`{parameter}={source_of(arg.value)}`"
            if constant(arg.value) is False:
                plan.removed.append(index)
                plan.notes.append(f"{written} (the default)")
            else:
                plan.blockers.append(f"{written}: {SWITCH_ADVICE[parameter]}")
        return plan

    # -- imports ---------------------------------------------------------------------------------

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False  # its names are not uses: leave_Name must not rewrite them

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(original_node.body) != 1 or not isinstance(original_node.body[0], cst.ImportFrom):
            return updated_node
        node = original_node.body[0]
        if isinstance(node.names, cst.ImportStar):
            if node.module is not None and imported_name_of(node).startswith("apex.parallel"):
                self.report(
                    node,
                    "star import from `apex.parallel`: import the names you use from "
                    "`torch.nn.parallel` / `torch.nn` instead",
                )
            return updated_node
        moves = self.import_moves(node)
        if not moves:
            return updated_node
        if not self.fix(
            node,
            "import from torch instead of `apex.parallel`: "
            + ", ".join(f"`{old}` -> `{self.describe(home)}`" for old, home in moves.items()),
        ):
            return updated_node
        if any(home.module is None for home in moves.values()):
            self.ensure_torch_spelling()
        statements = import_statements(updated_node, rehome_import_from(node, moves))
        if not statements:
            return cst.RemovalSentinel.REMOVE  # type: ignore[return-value]
        return cst.FlattenSentinel(statements)

    def import_moves(self, node: cst.ImportFrom) -> dict[str, NewHome]:
        moves: dict[str, NewHome] = {}
        assert not isinstance(node.names, cst.ImportStar)
        for alias in node.names:
            full = f"{imported_name_of(node)}.{imported_name(alias)}"
            local = alias.evaluated_alias or imported_name(alias)
            if local in self.blocked_names:
                continue
            if full in APEX_DDP:
                moves[imported_name(alias)] = NewHome(
                    "torch.nn.parallel", "DistributedDataParallel"
                )
            elif full in APEX_SYNC_BN:
                moves[imported_name(alias)] = NewHome("torch.nn", "SyncBatchNorm")
            elif full in APEX_CONVERT:
                moves[imported_name(alias)] = NewHome(None, "convert_syncbn_model")
        return moves

    def describe(self, home: NewHome) -> str:
        if home.module is None:
            return "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
        return f"{home.module}.{home.name}"

    def ensure_torch_spelling(self) -> None:
        if self.nn == "torch.nn":
            self.add_import("torch")

    # -- uses ------------------------------------------------------------------------------------

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        name = self.qualified_name_in(original_node, APEX_CONVERT | APEX_REDUCER)
        if name in APEX_REDUCER:
            self.report_reducer(original_node)
            return updated_node
        if name not in APEX_CONVERT or original_node.value in self.blocked_names:
            return updated_node
        if self.context.suppressions.covers(self.position(original_node)[0], self.CODE):
            return updated_node
        # The import of this name was dropped (it has no `from torch... import` form).
        return dotted_expression(f"{self.nn}.SyncBatchNorm.convert_sync_batchnorm")

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        name = self.qualified_name_in(original_node, ALL_NAMES)
        if isinstance(name, Ambiguous) or name is None:
            return updated_node
        if name in APEX_REDUCER:
            self.report_reducer(original_node)
            return updated_node
        if id(original_node) in self.blocked_funcs:
            return updated_node
        if name in APEX_DDP:
            replacement = f"{self.nn}.parallel.DistributedDataParallel"
        elif name in APEX_SYNC_BN:
            replacement = f"{self.nn}.SyncBatchNorm"
        else:
            replacement = f"{self.nn}.SyncBatchNorm.convert_sync_batchnorm"
        torch_name = replacement.replace(self.nn, "torch.nn", 1)
        if not self.fix(original_node, f"replaced `{name}` with `{torch_name}`"):
            return updated_node
        self.ensure_torch_spelling()
        queue_removal_of_base_import(self, original_node)
        return dotted_expression(replacement)

    def report_reducer(self, node: cst.CSTNode) -> None:
        self.report(
            node,
            "`apex.parallel.Reducer` is CUDA-only and has no torch counterpart: call "
            "`torch.distributed.all_reduce` on the gradients (or use torch's DDP) instead",
        )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualified_name_in(original_node.func, ALL_NAMES)
        if isinstance(name, Ambiguous):
            self.report(
                original_node,
                f"cannot tell whether `{source_of(original_node.func)}` comes from apex.parallel: "
                f"{name.describe()}; if it does, use the torch class and drop the apex-only "
                "arguments by hand",
            )
            return updated_node
        plan = self.plans.get(id(original_node))
        if plan is None:
            return updated_node
        if plan.blockers:
            if plan.blockers != ["suppressed"]:
                self.report(
                    original_node,
                    f"`{name}` left as it is: " + "; ".join(plan.blockers),
                )
            return updated_node
        if not plan.removed:
            return updated_node
        if not self.fix(
            original_node,
            "removed arguments torch's version does not take: " + "; ".join(plan.notes),
        ):
            return updated_node
        doomed = [updated_node.args[index] for index in plan.removed]
        return remove_arg_objects(updated_node, doomed)


def imported_name_of(node: cst.ImportFrom) -> str:
    """The absolute module an import takes names from; "" for relative imports."""
    if node.relative or node.module is None:
        return ""
    return get_full_name_for_node(node.module) or ""
