"""NPU923: cuDNN / CUDA backend switches, which do nothing on Ascend."""

from __future__ import annotations

import ast

from migrator.diagnostics import Severity
from migrator.rules.device._common import ReportUses, in_namespace

CUDNN = "torch.backends.cudnn"
CUDA_BACKEND = "torch.backends.cuda"


# What each switch becomes on Ascend (the TF32 switches are NPU309's: torch_npu has HF32 ones).
ON_ASCEND = {
    "cudnn.deterministic": "for reproducible runs use `torch.use_deterministic_algorithms(True)`, "
    "which torch_npu honours",
    "cudnn.benchmark": "NPU operators are not autotuned by it",
    "cudnn.enabled": "Ascend's operators do not come from cuDNN",
}
TF32_SWITCHES = {"cudnn.allow_tf32", "cuda.matmul.allow_tf32"}


class CudnnSettings(ReportUses):
    """
    ## What it does
    Reports, at info level and once per file, the assignments to `torch.backends.cudnn.*`
    (`benchmark`, `deterministic`, `enabled`) and `torch.backends.cuda.*` switches
    (`matmul.allow_fp16_reduced_precision_reduction`, ...): one note at the first, naming every
    switch with its line and what it becomes on Ascend. The TF32 switches are NPU309's
    (torch_npu has HF32 switches instead).

    ## Why
    These switches configure NVIDIA's libraries. On Ascend they are accepted and ignored: the
    script runs, but `deterministic = True` does not make NPU kernels deterministic (use
    `torch.use_deterministic_algorithms(True)`, which torch_npu honours), and `benchmark` does not
    tune anything. Nothing needs to change unless you rely on them.

    ## Example
    ```python
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True
    ```

    ## Use instead
    ```python
    torch.use_deterministic_algorithms(True)
    ```

    ## Fix safety
    No fix: the lines are harmless; keeping them keeps the script runnable on GPUs.
    """

    CODE = "NPU923"
    NAME = "cudnn-settings"
    SUMMARY = "`torch.backends.cudnn.*` setting (no effect on Ascend)"
    TRIGGER = ("cudnn", "backends")
    NAMESPACES = (CUDNN, CUDA_BACKEND)
    SEVERITY = Severity.INFO

    def check(self) -> None:
        self.switches: list[tuple[ast.AST, str]] = []
        super().check()
        if not self.switches:
            return
        first = self.switches[0][0]
        described: dict[str, list[int]] = {}
        for node, setting in self.switches:
            described.setdefault(setting, []).append(self.view.line(node))
        parts = []
        here = self.view.line(first)
        for setting, lines in described.items():
            # The line of the note itself goes without saying (notebooks number it by cell).
            later = [line for line in lines if line != here]
            plural = "s" if len(later) > 1 else ""
            notes = [f"line{plural} {', '.join(map(str, later))}"] if later else []
            if setting in ON_ASCEND:
                notes.append(ON_ASCEND[setting])
            parts.append(
                f"`torch.backends.{setting}`" + (f" ({'; '.join(notes)})" if notes else "")
            )
        self.report(
            first,
            "cuDNN / CUDA backend switches have no effect on Ascend NPUs: " + ", ".join(parts),
            self.SEVERITY,
        )

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        if name in NAMESPACES_THEMSELVES or not self._is_assigned(node):
            return None
        setting = name.removeprefix("torch.backends.")
        if setting in TF32_SWITCHES:
            return None
        return f"`torch.backends.{setting}` has no effect on Ascend NPUs"

    def _check(self, node: ast.Name | ast.Attribute) -> None:
        name = self.qualified_name(node)
        if isinstance(name, str) and in_namespace(name, self.NAMESPACES):
            if self.message(name, node) is not None:
                self.switches.append((node, name.removeprefix("torch.backends.")))
            return
        super()._check(node)  # an ambiguous name: reported where it is

    def _is_assigned(self, node: ast.AST) -> bool:
        parent = self.index.parent(node)
        if isinstance(parent, ast.Assign):
            return any(target is node for target in parent.targets)
        return isinstance(parent, ast.AugAssign) and parent.target is node


NAMESPACES_THEMSELVES = {CUDNN, CUDA_BACKEND}
