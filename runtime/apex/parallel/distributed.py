"""``apex.parallel.DistributedDataParallel`` over ``torch.nn.parallel.DistributedDataParallel``."""

from __future__ import annotations

from typing import Any

import torch


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """torch DDP with NVIDIA apex's signature.

    ``gradient_average=False`` (sum instead of mean) and ``gradient_predivide_factor`` are
    honoured with a communication hook; the remaining NVIDIA knobs (message size, streams,
    delayed all-reduce, fp32 all-reduce, communicators) only tune NVIDIA's own bucketing and
    are ignored. The process group must be initialised, as for torch DDP.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        message_size: int = 10000000,
        delay_allreduce: bool = False,
        shared_param: Any = None,
        allreduce_trigger_params: Any = None,
        retain_allreduce_buffers: bool = False,
        allreduce_always_fp32: bool = False,
        num_allreduce_streams: int = 1,
        allreduce_communicators: Any = None,
        gradient_average: bool = True,
        gradient_predivide_factor: float = 1.0,
        gradient_average_split_factor: float | None = None,
        prof: bool = False,
    ) -> None:
        if shared_param is not None:
            raise ValueError(
                "shared_param is no longer supported as an option.  It was misleadingly named "
                "from the start.  It turns out overlapping communication with computation "
                "should work fine with shared parameters.  If you still wish to delay "
                "communication to the end of the backward pass, use delay_allreduce=True|False "
                "instead."
            )
        super().__init__(module)
        self.gradient_average = gradient_average
        self.gradient_predivide_factor = gradient_predivide_factor
        if not gradient_average or gradient_predivide_factor != 1.0:
            self.register_comm_hook(None, self._scaled_allreduce_hook)

    # Left unannotated: DDP compares the hook's annotations with the real GradBucket / Future
    # classes, and postponed (string) annotations would fail that check.
    def _scaled_allreduce_hook(self, _state, bucket):  # type: ignore[no-untyped-def]
        world_size = torch.distributed.get_world_size()
        buffer = bucket.buffer()
        buffer.div_(self.gradient_predivide_factor)
        work = torch.distributed.all_reduce(buffer, async_op=True)
        # NVIDIA: mean = predivide, sum, then divide by world/predivide; sum = predivide only.
        post = world_size / self.gradient_predivide_factor if self.gradient_average else 1.0

        def finish(future: torch.futures.Future[Any]) -> torch.Tensor:
            return future.value()[0].div_(post)

        return work.get_future().then(finish)
