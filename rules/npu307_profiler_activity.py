"""NPU307: `torch.profiler.ProfilerActivity.CUDA` profiling."""

from __future__ import annotations

import re

import libcst as cst
from libcst.helpers import get_full_name_for_node

from migrator.names import Ambiguous
from migrator.rule import FixSafety, Rule
from migrator.rules.npu3_device import DeviceRule, add_device_import, expression, is_accelerator

PROFILER = "torch.profiler"
CUDA_ACTIVITY = "torch.profiler.ProfilerActivity.CUDA"
# What torch_npu.profiler provides under the same names and with compatible arguments.
NPU_PROFILER_API = frozenset(
    {"profile", "ProfilerActivity", "schedule", "tensorboard_trace_handler"}
)


class ProfilerActivityCuda(DeviceRule):
    """
    ## What it does
    In a file that profiles CUDA activity (`torch.profiler.ProfilerActivity.CUDA`), moves the
    profiler to torch_npu's: `ProfilerActivity.CUDA` becomes `ProfilerActivity.NPU`, and
    `torch.profiler.profile`, `ProfilerActivity`, `schedule` and `tensorboard_trace_handler`
    become `torch_npu.profiler.*` (imports too: `from torch.profiler import profile,
    ProfilerActivity` becomes `from torch_npu.profiler import profile, ProfilerActivity`). An
    import from `torch.profiler` that also brings other names (`record_function`) is reported so
    that you can split it. Files that profile only the CPU are left alone.

    With `--target accelerator` the CUDA activity is reported: there is no device-agnostic one.

    ## Why
    NPU kernels are traced by torch_npu's profiler (`torch_npu.profiler.profile` with
    `ProfilerActivity.NPU`); torch's profiler does not see them, and its activity enum has no NPU.

    ## Example
    ```python
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        train_step()
    ```

    ## Use instead
    ```python
    activities = torch_npu.profiler.ProfilerActivity
    with torch_npu.profiler.profile(activities=[activities.CPU, activities.NPU]) as prof:
        train_step()
    ```

    ## Fix safety
    Safe: torch_npu's profiler takes the same `activities`, `schedule` and `on_trace_ready`
    arguments; its trace files differ (open them with Ascend's MindStudio Insight).
    """

    CODE = "NPU307"
    NAME = "profiler-activity-cuda"
    SUMMARY = "`torch.profiler.ProfilerActivity.CUDA` profiling"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"ProfilerActivity")

    def visit_Module(self, node: cst.Module) -> None:
        finder = _CudaActivity(self)
        node.visit(finder)
        self.profiles_cuda = finder.found
        self.kept_imports = finder.kept_imports

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        name = self.qualified_name(original_node)
        if isinstance(name, Ambiguous):
            if CUDA_ACTIVITY in name.candidates:
                self.report(
                    original_node,
                    "cannot tell whether this is torch's ProfilerActivity.CUDA: "
                    f"{name.describe()}; "
                    "use `torch_npu.profiler.ProfilerActivity.NPU` by hand if it is",
                )
            return updated_node
        if not self.profiles_cuda:
            return updated_node
        if name == CUDA_ACTIVITY:
            if is_accelerator(self):
                self.report(
                    original_node,
                    "there is no device-agnostic profiler activity: profile with torch_npu's "
                    "profiler on Ascend and torch's on GPU",
                )
                return updated_node
            receiver = original_node.value
            if isinstance(receiver, cst.Name) and receiver.value in self.kept_imports:
                self.report(
                    original_node,
                    "`ProfilerActivity.CUDA` -> `ProfilerActivity.NPU` once `ProfilerActivity` is "
                    "imported from `torch_npu.profiler` (see the import above)",
                )
                return updated_node
            if not self.fix(
                original_node.attr, "`ProfilerActivity.CUDA` -> `ProfilerActivity.NPU`"
            ):
                return updated_node
            add_device_import(self)
            return updated_node.with_changes(attr=cst.Name("NPU"))
        written_out = isinstance(original_node.value, cst.Attribute)
        if (
            written_out
            and not is_accelerator(self)
            and self.qualified_name(original_node.value) == PROFILER
            and original_node.attr.value in NPU_PROFILER_API
        ):
            member = original_node.attr.value
            if not self.fix(
                original_node, f"`torch.profiler.{member}` -> `torch_npu.profiler.{member}`"
            ):
                return updated_node
            add_device_import(self)
            return updated_node.with_changes(value=expression("torch_npu.profiler"))
        return updated_node

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom:
        if not self.profiles_cuda or is_accelerator(self) or original_node.module is None:
            return updated_node
        if original_node.relative or get_full_name_for_node(original_node.module) != PROFILER:
            return updated_node
        if isinstance(original_node.names, cst.ImportStar):
            return updated_node
        names = [alias.evaluated_name for alias in original_node.names]
        others = [n for n in names if n not in NPU_PROFILER_API]
        if others:
            self.report(
                original_node,
                f"split this import: take {', '.join(n for n in names if n not in others)} from "
                f"`torch_npu.profiler`, keep {', '.join(others)} from `torch.profiler`",
            )
            return updated_node
        if not self.fix(
            original_node, "`from torch.profiler import` -> `from torch_npu.profiler import`"
        ):
            return updated_node
        add_device_import(self)
        module = expression("torch_npu.profiler")
        assert isinstance(module, cst.Attribute)
        return updated_node.with_changes(module=module)


class _CudaActivity(cst.CSTVisitor):
    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule = rule
        self.found = False
        # names bound by a `from torch.profiler import` that also imports other names: that
        # import is reported, not rewritten, so what it binds stays torch's
        self.kept_imports: set[str] = set()

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        if get_full_name_for_node(node.module) != PROFILER:
            return
        if any(alias.evaluated_name not in NPU_PROFILER_API for alias in node.names):
            self.kept_imports.update(
                alias.evaluated_alias or alias.evaluated_name for alias in node.names
            )

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "CUDA" and self.rule.qualified_name(node) == CUDA_ACTIVITY:
            self.found = True
