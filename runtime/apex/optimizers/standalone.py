"""The fused optimizers without Ascend apex's amp check, as ``torch_npu.optim.NpuFused*`` are.

Code migrated to ``torch_npu.optim.NpuFused*`` (optimizers that never reach ``amp.initialize``)
runs on these; ``apex.optimizers.NpuFused*`` are subclasses that add the amp check.
"""

from apex.optimizers._ascend_family import (
    Lamb,
    NpuFusedAdamP,
    NpuFusedBertAdam,
    NpuFusedLamb,
    NpuFusedRMSpropTF,
)
from apex.optimizers._torch_family import (
    NpuFusedAdadelta,
    NpuFusedAdam,
    NpuFusedAdamW,
    NpuFusedRMSprop,
    NpuFusedSGD,
)

__all__ = [
    "Lamb",
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
]
