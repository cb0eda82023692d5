"""NVIDIA apex's ``apex.parallel`` as thin wrappers over torch.

``DistributedDataParallel`` is torch's DDP with NVIDIA's constructor (its bucketing and
stream knobs are accepted and ignored: torch DDP buckets on its own), ``SyncBatchNorm`` is
torch's with NVIDIA's extra arguments, and ``convert_syncbn_model`` is
``torch.nn.SyncBatchNorm.convert_sync_batchnorm``. On Ascend use torch DDP with ``hccl``.
"""

from apex.parallel.distributed import DistributedDataParallel
from apex.parallel.sync_batchnorm import SyncBatchNorm, convert_syncbn_model

__all__ = ["DistributedDataParallel", "SyncBatchNorm", "convert_syncbn_model"]
