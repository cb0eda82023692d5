"""``combine_ddp=True``: data parallelism on the flat grad buffers instead of torch DDP.

At ``initialize`` every rank receives rank 0's parameters and buffers. After each backward (and
before unscaling) the scaled grads are averaged across ranks: each flat buffer is cut into about
``ddp_replica_count`` contiguous chunks (between 1M and 24M elements for fp32, twice that for
half, Ascend's bounds), every chunk is divided by the world size and all-reduced with SUM, and
all chunks are in flight at once. Cutting a buffer anywhere is safe because the reduction is
elementwise. Works with gloo (CPU), nccl (CUDA) and hccl (NPU) process groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

_MIN_CHUNK_ELEMENTS = 1 * 1024 * 1024
_MAX_CHUNK_ELEMENTS_FP32 = 24 * 1024 * 1024

_NO_PROCESS_GROUP = (
    "combine_ddp=True needs an initialised torch.distributed process group: call "
    "torch.distributed.init_process_group(...) (gloo on CPU, nccl on CUDA, hccl on NPU) before "
    "amp.initialize."
)
_INCONSISTENT_LAYOUT = (
    "When using combine_ddp, combine_grad does not support inconsistent parameters in each "
    "rank. Please consider using the consistent parameters of each rank instead."
)


def require_process_group() -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(_NO_PROCESS_GROUP)


class CombineDDP:
    """Averages grads across the default process group; one instance per optimizer."""

    def __init__(self, replica_count: int) -> None:
        require_process_group()
        self.replica_count = replica_count
        self.world_size = dist.get_world_size()

    @staticmethod
    @torch.no_grad()
    def broadcast_from_rank_zero(models: Sequence[torch.nn.Module]) -> None:
        require_process_group()
        for model in models:
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=0)

    def check_layout(self, tensors: Sequence[torch.Tensor]) -> None:
        """Fail clearly (instead of hanging or mixing up grads) when ranks packed differently."""
        if not tensors:
            return
        sizes = [tensor.numel() for tensor in tensors]
        summary = torch.tensor(
            [len(sizes), sum(sizes), sum(i * s for i, s in enumerate(sizes, 1))],
            dtype=torch.int64,
            device=tensors[0].device,
        )
        gathered = [torch.zeros_like(summary) for _ in range(self.world_size)]
        dist.all_gather(gathered, summary)
        if any(not torch.equal(gathered[0], other) for other in gathered[1:]):
            raise RuntimeError(_INCONSISTENT_LAYOUT)

    @torch.no_grad()
    def all_reduce(self, tensors: Sequence[torch.Tensor]) -> None:
        if self.world_size == 1:
            return
        pending = []
        for tensor in tensors:
            for chunk in self._chunks(tensor.view(-1)):
                chunk.div_(self.world_size)
                pending.append(dist.all_reduce(chunk, op=dist.ReduceOp.SUM, async_op=True))
        for work in pending:
            work.wait()

    def _chunks(self, flat: torch.Tensor) -> list[torch.Tensor]:
        upper = _MAX_CHUNK_ELEMENTS_FP32 * (1 if flat.element_size() >= 4 else 2)
        chunk = min(max(flat.numel() // self.replica_count, _MIN_CHUNK_ELEMENTS), upper)
        return list(flat.split(chunk))
