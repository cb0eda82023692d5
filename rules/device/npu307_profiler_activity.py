"""NPU307: `torch.profiler.ProfilerActivity.CUDA` profiling."""

from __future__ import annotations

import ast

from migrator.analysis.names import Ambiguous
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import TORCH_ROOTS, add_device_import, expression, torch_name
from migrator.rules.device._target import NoCounterpart, device_target

PROFILER = "torch.profiler"
CUDA_ACTIVITY = "torch.profiler.ProfilerActivity.CUDA"
# What torch_npu.profiler provides under the same names and with compatible arguments.
NPU_PROFILER_API = frozenset(
    {"profile", "ProfilerActivity", "schedule", "tensorboard_trace_handler"}
)


class ProfilerActivityCuda(Rule):
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
    TRIGGER = ("ProfilerActivity",)

    def check(self) -> None:
        activities = self.index.attributes("CUDA")
        self.kept_imports = self._kept_imports()
        self.profiles_cuda = any(torch_name(self.view, a) == CUDA_ACTIVITY for a in activities)
        for attribute in activities:
            self._check_activity(attribute)
        profiler = device_target(self).profiler_module
        if self.profiles_cuda and isinstance(profiler, str):
            for member in sorted(NPU_PROFILER_API):
                for attribute in self.index.attributes(member):
                    self._check_profiler_member(attribute, profiler)
            for statement in self.index.nodes(ast.ImportFrom):
                self._check_import(statement, profiler)

    def _kept_imports(self) -> set[str]:
        """Names bound by a `from torch.profiler import` that also imports other names: that
        import is reported, not rewritten, so what it binds stays torch's."""
        kept: set[str] = set()
        for statement in self.index.nodes(ast.ImportFrom):
            if statement.level or statement.module != PROFILER:
                continue
            if any(alias.name == "*" for alias in statement.names):
                continue
            if any(alias.name not in NPU_PROFILER_API for alias in statement.names):
                kept.update(alias.asname or alias.name for alias in statement.names)
        return kept

    def _check_activity(self, node: ast.Attribute) -> None:
        if not self.may_name(node, TORCH_ROOTS):
            return
        name = self.qualified_name(node)
        if isinstance(name, Ambiguous):
            if CUDA_ACTIVITY in name.candidates:
                self.report(
                    node,
                    "cannot tell whether this is torch's ProfilerActivity.CUDA: "
                    f"{name.describe()}; "
                    "use `torch_npu.profiler.ProfilerActivity.NPU` by hand if it is",
                )
            return
        if not self.profiles_cuda or name != CUDA_ACTIVITY:
            return
        target = device_target(self)
        activity, profiler = target.profiler_activity, target.profiler_module
        if isinstance(activity, NoCounterpart) or isinstance(profiler, NoCounterpart):
            reasons = [
                absent.reason for absent in (activity, profiler) if not isinstance(absent, str)
            ]
            self.report(node, ": ".join(reasons))
            return
        receiver = node.value
        if isinstance(receiver, ast.Name) and receiver.id in self.kept_imports:
            self.report(
                node,
                f"`ProfilerActivity.CUDA` -> `ProfilerActivity.{activity}` once "
                f"`ProfilerActivity` is imported from `{profiler}` (see the import above)",
            )
            return
        edit = self.replace(
            node, cst.Attribute, lambda attribute: attribute.with_changes(attr=cst.Name(activity))
        )
        message = f"`ProfilerActivity.CUDA` -> `ProfilerActivity.{activity}`"
        if self.fix(self.attr_position(node), message, edit):
            add_device_import(self)

    def _check_profiler_member(self, node: ast.Attribute, profiler: str) -> None:
        if not isinstance(node.value, ast.Attribute):
            return  # written out: `torch.profiler.profile`, not an imported name
        if torch_name(self.view, node.value) != PROFILER:
            return
        member = node.attr
        edit = self.replace(
            node,
            cst.Attribute,
            lambda attribute: attribute.with_changes(value=expression(profiler)),
        )
        if self.fix(node, f"`torch.profiler.{member}` -> `{profiler}.{member}`", edit):
            add_device_import(self)

    def _check_import(self, statement: ast.ImportFrom, profiler: str) -> None:
        if statement.level or statement.module != PROFILER:
            return
        if any(alias.name == "*" for alias in statement.names):
            return
        names = [alias.name for alias in statement.names]
        others = [n for n in names if n not in NPU_PROFILER_API]
        if others:
            self.report(
                statement,
                f"split this import: take {', '.join(n for n in names if n not in others)} from "
                f"`{profiler}`, keep {', '.join(others)} from `torch.profiler`",
            )
            return

        def rehomed(node: cst.ImportFrom) -> cst.ImportFrom:
            module = expression(profiler)
            assert isinstance(module, cst.Attribute)
            return node.with_changes(module=module)

        if self.fix(
            statement,
            f"`from torch.profiler import` -> `from {profiler} import`",
            self.replace(statement, cst.ImportFrom, rehomed),
        ):
            add_device_import(self)
