"""``torch.npu`` of the shim: torch.cuda's API as it behaves on a machine without the device.

With the CPU standing in (the default) nothing is available: counts are 0, switches and seeds
are no-ops, memory statistics are 0, streams and events are inert. With ``NPU_SHIM_DEVICE=cuda``
the same calls act on CUDA (except ``is_available()``, which stays False: there is no NPU).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from .. import _device
from . import amp

__all__ = [
    "Event", "Stream", "StreamContext", "amp", "conv", "current_device", "current_stream",
    "default_stream", "device", "device_count", "device_of", "empty_cache", "get_device_name",
    "get_device_properties", "get_rng_state", "get_rng_state_all", "init", "initial_seed",
    "ipc_collect", "is_available", "is_bf16_supported", "is_initialized", "manual_seed",
    "manual_seed_all", "matmul", "max_memory_allocated", "max_memory_cached",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_cached",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "reset_peak_memory_stats", "seed",
    "seed_all", "set_device", "set_per_process_memory_fraction", "set_rng_state",
    "set_rng_state_all", "set_stream", "stream", "synchronize", "utilization",
]  # fmt: skip


def _cuda_or(name: str, cpu_result: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``torch.cuda.<name>`` when CUDA stands in; else return what the CPU path gives."""
    if _device.on_cuda():
        return getattr(torch.cuda, name)(*args, **kwargs)
    return cpu_result


# -- HF32 switches -------------------------------------------------------------------------------


class _Hf32Switch:
    """``torch.npu.matmul`` / ``torch.npu.conv``: torch_npu's HF32 switches (``allow_hf32``),
    matmul off and convolutions on unless set, as in torch_npu. Without an NPU nothing computes
    in HF32; the switch only holds its value."""

    def __init__(self, allow_hf32: bool) -> None:
        self.allow_hf32 = allow_hf32


matmul = _Hf32Switch(allow_hf32=False)
conv = _Hf32Switch(allow_hf32=True)


# -- device management ---------------------------------------------------------------------------


def is_available() -> bool:
    return False  # there is no NPU: scripts take the path they take without an accelerator


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


def device_count() -> int:
    return _cuda_or("device_count", 0)


def current_device() -> int:
    return _cuda_or("current_device", 0)


def set_device(device: Any) -> None:
    _cuda_or("set_device", None, _device.stand_in(device) if _device.on_cuda() else None)


def synchronize(device: Any = None) -> None:
    _cuda_or("synchronize", None)


def get_device_name(device: Any = None) -> str:
    return _cuda_or("get_device_name", "npu-migrate shim (cpu)")


def get_device_properties(device: Any = None) -> Any:
    if _device.on_cuda():
        return torch.cuda.get_device_properties(_device.stand_in(device))
    return SimpleNamespace(name=get_device_name(), total_memory=0, multi_processor_count=0)


def get_device_capability(device: Any = None) -> None:
    return None  # as on torch_npu: an NPU has no CUDA compute capability


def is_bf16_supported() -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Needed by ``torch.autocast("npu")`` for a renamed privateuse1 backend."""
    return [torch.float16, torch.bfloat16]


def utilization(device: Any = None) -> int:
    return 0


def ipc_collect() -> None:
    return None


class device:  # lower case: torch.cuda.device's name
    """``with torch.npu.device(i):`` selects nothing on the CPU."""

    def __init__(self, device: Any) -> None:
        self._inner = torch.cuda.device(_device.stand_in(device)) if _device.on_cuda() else None

    def __enter__(self) -> None:
        if self._inner is not None:
            self._inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._inner is not None:
            self._inner.__exit__(*exc)


def device_of(obj: Any) -> device:
    return device(obj.device if isinstance(obj, torch.Tensor) else None)


# -- memory --------------------------------------------------------------------------------------


def empty_cache() -> None:
    _cuda_or("empty_cache", None)


def memory_allocated(device: Any = None) -> int:
    return _cuda_or("memory_allocated", 0)


def max_memory_allocated(device: Any = None) -> int:
    return _cuda_or("max_memory_allocated", 0)


def memory_reserved(device: Any = None) -> int:
    return _cuda_or("memory_reserved", 0)


def max_memory_reserved(device: Any = None) -> int:
    return _cuda_or("max_memory_reserved", 0)


memory_cached = memory_reserved
max_memory_cached = max_memory_reserved


def memory_stats(device: Any = None) -> dict[str, Any]:
    return _cuda_or("memory_stats", {})


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return _cuda_or("memory_summary", "npu-migrate shim: no device memory in use\n")


def memory_snapshot() -> list[Any]:
    return _cuda_or("memory_snapshot", [])


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return _cuda_or("mem_get_info", (0, 0))


def reset_peak_memory_stats(device: Any = None) -> None:
    _cuda_or("reset_peak_memory_stats", None)


def reset_max_memory_allocated(device: Any = None) -> None:
    _cuda_or("reset_peak_memory_stats", None)


reset_max_memory_cached = reset_max_memory_allocated


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _cuda_or("reset_accumulated_memory_stats", None)


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    _cuda_or("set_per_process_memory_fraction", None, fraction)


# -- random state: torch.cuda's seeding is lazy and does nothing without the device --------------


def manual_seed(seed: int) -> None:
    _cuda_or("manual_seed", None, seed)


def manual_seed_all(seed: int) -> None:
    _cuda_or("manual_seed_all", None, seed)


def seed() -> None:
    _cuda_or("seed", None)


def seed_all() -> None:
    _cuda_or("seed_all", None)


def initial_seed() -> int:
    return _cuda_or("initial_seed", torch.initial_seed())


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    return _cuda_or("get_rng_state", torch.empty(0, dtype=torch.uint8))


def get_rng_state_all() -> list[torch.Tensor]:
    return _cuda_or("get_rng_state_all", [])


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    _cuda_or("set_rng_state", None, new_state)


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    _cuda_or("set_rng_state_all", None, new_states)


def _is_in_bad_fork() -> bool:
    """Asked by ``torch.manual_seed`` of the renamed privateuse1 device module."""
    return False


# -- streams and events --------------------------------------------------------------------------


class Event:
    """An event that completes at once; with ``enable_timing`` it measures wall time."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if _device.on_cuda():
            return torch.cuda.Event(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._recorded_at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between two recorded events, like torch.cuda.Event.elapsed_time."""
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("both events must be recorded before elapsed_time()")
        return (end_event._recorded_at - self._recorded_at) * 1000.0


class Stream:
    """A stream on which everything has already happened."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if _device.on_cuda():
            return torch.cuda.Stream(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.priority = priority

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


_DEFAULT_STREAM: Stream | None = None


def default_stream(device: Any = None) -> Any:
    global _DEFAULT_STREAM
    if _device.on_cuda():
        return torch.cuda.default_stream()
    if _DEFAULT_STREAM is None:
        _DEFAULT_STREAM = Stream()
    return _DEFAULT_STREAM


def current_stream(device: Any = None) -> Any:
    return torch.cuda.current_stream() if _device.on_cuda() else default_stream()


def set_stream(stream: Any) -> None:
    _cuda_or("set_stream", None, stream)


class StreamContext(contextlib.AbstractContextManager):
    def __init__(self, stream: Any) -> None:
        self._inner = torch.cuda.StreamContext(stream) if _device.on_cuda() else None

    def __enter__(self) -> Any:
        return self._inner.__enter__() if self._inner is not None else None

    def __exit__(self, *exc: object) -> None:
        if self._inner is not None:
            self._inner.__exit__(*exc)


@contextlib.contextmanager
def stream(stream: Any) -> Iterator[None]:
    with StreamContext(stream):
        yield
