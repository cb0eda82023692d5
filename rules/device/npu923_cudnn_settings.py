"""NPU923: cuDNN / CUDA backend switches, which do nothing on Ascend."""

from __future__ import annotations

import ast

from migrator.diagnostics import Severity
from migrator.rules.device._common import ReportUses

CUDNN = "torch.backends.cudnn"
CUDA_BACKEND = "torch.backends.cuda"


class CudnnSettings(ReportUses):
    """
    ## What it does
    Reports, at info level, assignments to `torch.backends.cudnn.*` (`benchmark`,
    `deterministic`, `enabled`, `allow_tf32`) and `torch.backends.cuda.*` switches
    (`matmul.allow_tf32`, ...).

    ## Why
    These switches configure NVIDIA's libraries. On Ascend they are accepted and ignored: the
    script runs, but `deterministic = True` does not make NPU kernels deterministic (use
    `torch.use_deterministic_algorithms(True)`, which torch_npu honours), and `benchmark` does not
    tune anything. Nothing needs to change unless you rely on them.

    ## Example
    ```python
    torch.backends.cudnn.deterministic = True
    ```

    ## Use instead
    ```python
    torch.use_deterministic_algorithms(True)
    ```

    ## Fix safety
    No fix: the line is harmless; keeping it keeps the script runnable on GPUs.
    """

    CODE = "NPU923"
    NAME = "cudnn-settings"
    SUMMARY = "`torch.backends.cudnn.*` setting (no effect on Ascend)"
    TRIGGER = ("cudnn", "backends")
    NAMESPACES = (CUDNN, CUDA_BACKEND)
    SEVERITY = Severity.INFO

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        if name in NAMESPACES_THEMSELVES or not self._is_assigned(node):
            return None
        setting = name.removeprefix("torch.backends.")
        hint = (
            "; for reproducible runs use `torch.use_deterministic_algorithms(True)`"
            if setting == "cudnn.deterministic"
            else ""
        )
        return f"`torch.backends.{setting}` has no effect on Ascend NPUs{hint}"

    def _is_assigned(self, node: ast.AST) -> bool:
        parent = self.index.parent(node)
        if isinstance(parent, ast.Assign):
            return any(target is node for target in parent.targets)
        return isinstance(parent, ast.AugAssign) and parent.target is node


NAMESPACES_THEMSELVES = {CUDNN, CUDA_BACKEND}
