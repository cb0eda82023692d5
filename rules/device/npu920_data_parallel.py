"""NPU920: `torch.nn.DataParallel`, which Ascend does not support."""

from __future__ import annotations

import ast

from migrator.rules.device._common import ReportUses


class DataParallel(ReportUses):
    """
    ## What it does
    Reports every use of `torch.nn.DataParallel` (also spelled `torch.nn.parallel.DataParallel`
    or imported under another name) and `torch.nn.parallel.data_parallel`.

    ## Why
    torch_npu does not support single-process multi-device `DataParallel`; on Ascend each device
    is driven by its own process with `DistributedDataParallel` and the `hccl` backend.

    ## Example
    ```python
    model = torch.nn.DataParallel(model).cuda()
    ```

    ## Use instead
    ```python
    torch.distributed.init_process_group("hccl")
    model = torch.nn.parallel.DistributedDataParallel(model.npu(), device_ids=[local_rank])
    ```
    launched with one process per device (`torchrun --nproc_per_node=8 train.py`).

    ## Fix safety
    No fix: moving to one process per device changes how the script is launched, how batches are
    split and how checkpoints are saved.
    """

    CODE = "NPU920"
    NAME = "data-parallel"
    SUMMARY = "`torch.nn.DataParallel` (not supported on Ascend)"
    TRIGGER = ("DataParallel", "data_parallel")
    NAMESPACES = (
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel",
    )

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        return (
            "`DataParallel` is not supported on Ascend: use `DistributedDataParallel` with one "
            'process per device and the "hccl" backend (launch with torchrun)'
        )
