"""``torch_npu.profiler`` of the shim, over torch's profiler.

``ProfilerActivity.NPU`` records CUDA activity when CUDA stands in and nothing on the CPU; the
CPU activity is torch's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

import torch.profiler

from .. import _device

__all__ = ["ProfilerActivity", "profile", "schedule", "tensorboard_trace_handler"]

schedule = torch.profiler.schedule


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


def _torch_activities(
    activities: Iterable[ProfilerActivity] | None,
) -> list[torch.profiler.ProfilerActivity]:
    wanted = list(activities) if activities is not None else list(ProfilerActivity)
    found = []
    if ProfilerActivity.CPU in wanted:
        found.append(torch.profiler.ProfilerActivity.CPU)
    if ProfilerActivity.NPU in wanted and _device.on_cuda():
        found.append(torch.profiler.ProfilerActivity.CUDA)
    return found or [torch.profiler.ProfilerActivity.CPU]


def profile(
    *,
    activities: Iterable[ProfilerActivity] | None = None,
    schedule: Callable[[int], Any] | None = None,
    on_trace_ready: Callable[..., Any] | None = None,
    record_shapes: bool = False,
    profile_memory: bool = False,
    with_stack: bool = False,
    with_flops: bool = False,
    with_modules: bool = False,
    **npu_options: Any,  # experimental_config and other torch_npu-only options: ignored here
) -> torch.profiler.profile:
    return torch.profiler.profile(
        activities=_torch_activities(activities),
        schedule=schedule,
        on_trace_ready=on_trace_ready,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
        with_flops=with_flops,
        with_modules=with_modules,
    )


def tensorboard_trace_handler(
    dir_name: str, worker_name: str | None = None, analyse_flag: bool = True, **options: Any
) -> Callable[..., Any]:
    return torch.profiler.tensorboard_trace_handler(dir_name, worker_name)
