"""NPU924: `torch.cuda.nvtx` ranges and markers."""

from __future__ import annotations

import ast

from migrator.rules.device._common import ReportUses

NVTX = "torch.cuda.nvtx"
EMIT_NVTX = "torch.autograd.profiler.emit_nvtx"


class Nvtx(ReportUses):
    """
    ## What it does
    Reports uses of `torch.cuda.nvtx` (`range_push`, `range_pop`, `range`, `mark`), also through
    `import torch.cuda.nvtx as nvtx` or `from torch.cuda import nvtx`, and of the autograd
    profiler's `torch.autograd.profiler.emit_nvtx()`, which emits an NVTX range per operator.

    ## Why
    NVTX annotates timelines for NVIDIA's Nsight tools; Ascend has no NVTX. torch_npu's profiler
    has its own lightweight markers (`torch_npu.npu.mstx`, in recent torch_npu releases) or use
    `torch.profiler.record_function(...)` ranges, which torch_npu's profiler records. Under
    `emit_nvtx()` nothing is recorded on Ascend: per-operator timelines come from
    `torch_npu.profiler.profile(...)`.

    ## Example
    ```python
    torch.cuda.nvtx.range_push("forward")
    ```

    ## Use instead
    ```python
    with torch.profiler.record_function("forward"):
        ...
    ```

    ## Fix safety
    No fix: the replacement depends on the profiler you use on Ascend.
    """

    CODE = "NPU924"
    NAME = "nvtx"
    SUMMARY = "`torch.cuda.nvtx` annotation or `emit_nvtx()` (no NVTX on Ascend)"
    TRIGGER = ("nvtx",)
    NAMESPACES = (NVTX, EMIT_NVTX)

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        if name == NVTX:
            return None  # the module itself (`nvtx = torch.cuda.nvtx`); its uses are reported
        if name == EMIT_NVTX:
            return (
                f"`{name}` records NVTX ranges, which do not exist on Ascend: profile with "
                "`torch_npu.profiler.profile(...)` (per-operator timelines) instead"
            )
        return (
            f"`{name}` (NVTX) does not exist on Ascend: use "
            "`torch.profiler.record_function(...)` ranges or torch_npu's mstx markers, or remove it"
        )
