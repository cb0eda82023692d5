"""NPU922: `torch.cuda.get_device_capability()`, which has no meaning on Ascend."""

from __future__ import annotations

import ast

from migrator.rules.device._common import ReportUses


class DeviceCapability(ReportUses):
    """
    ## What it does
    Reports `torch.cuda.get_device_capability(...)` (also through an alias of `torch.cuda`).

    ## Why
    A CUDA compute capability (`(8, 0)` for an A100) says which kernels and number formats a GPU
    has. Ascend NPUs have no compute capability: torch_npu's `get_device_capability` returns None,
    so code such as `major, _ = torch.cuda.get_device_capability()` or `>= (8, 0)` checks that
    choose bf16 or TF32 break or silently pick the wrong path.

    ## Example
    ```python
    use_bf16 = torch.cuda.get_device_capability()[0] >= 8
    ```

    ## Use instead
    ```python
    use_bf16 = torch.npu.is_bf16_supported()
    ```

    ## Fix safety
    No fix: what the capability was used to decide has to be asked directly.
    """

    CODE = "NPU922"
    NAME = "device-capability"
    SUMMARY = "`torch.cuda.get_device_capability()` (None on Ascend)"
    TRIGGER = ("get_device_capability",)
    NAMESPACES = ("torch.cuda.get_device_capability",)

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        return (
            "`get_device_capability()` returns None on Ascend: ask for the feature itself "
            "(e.g. `torch.npu.is_bf16_supported()`) instead of comparing capabilities"
        )
