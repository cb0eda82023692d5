"""``apex.parallel.SyncBatchNorm`` and ``convert_syncbn_model`` over torch's SyncBatchNorm."""

from __future__ import annotations

from typing import Any

import torch


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """torch's SyncBatchNorm with NVIDIA's ``channel_last`` and ``fuse_relu`` arguments.

    ``channel_last`` is accepted and ignored (torch handles memory formats itself);
    ``fuse_relu=True`` applies a ReLU to the output, which NVIDIA fuses into the kernel.
    Without an initialised process group (or with one process) it is plain batch norm.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        channel_last: bool = False,
        fuse_relu: bool = False,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, process_group)
        self.channel_last = channel_last
        self.fuse_relu = fuse_relu

    def forward(self, input: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        output = super().forward(input)
        if z is not None:
            output = output + z
        if self.fuse_relu:
            output = torch.relu(output)
        return output


def convert_syncbn_model(
    module: torch.nn.Module, process_group: Any = None, channel_last: bool = False
) -> torch.nn.Module:
    """Replace every BatchNorm*d in ``module`` with torch's SyncBatchNorm (NVIDIA's helper)."""
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
