"""The device target (``--target npu`` / ``--target accelerator``) as one mapping. Not a rule.

Every device rule asks the same question of the target: what is the spelling, on this target,
of the CUDA thing I found? :class:`DeviceTarget` holds the answers, one instance per target
(:data:`NPU`, :data:`ACCELERATOR`); a rule reads ``target = device_target(self)`` and its
fields. Where a target has no one-to-one counterpart (torch's device-agnostic API has no tensor
method instead of ``.cuda()``, no profiler activity, no tensor-type names), the field holds a
:class:`NoCounterpart` with the reason, and the rule does what the absence calls for: build the
spelling another way, or report with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from migrator.rule import Rule
from migrator.settings import Target


@dataclass(frozen=True)
class NoCounterpart:
    """The target has no one-to-one spelling for this; ``reason`` says why (for messages)."""

    reason: str


@dataclass(frozen=True)
class DeviceTarget:
    """The spellings of one device target (see the module docstring)."""

    target: Target
    is_npu: bool
    # `import torch_npu` after torch's import (NPU), or only torch (device-agnostic code).
    import_module: str
    import_after: str | None
    # The device type: a string literal's body ("npu"), or only an expression.
    device_type_name: str | NoCounterpart
    device_type: str  # code: '"npu"' or the expression that gives the type
    current_device: str  # code of the current device (`.cuda()` without an index)
    # `.cuda(...)` -> `.npu(...)`; `torch.Tensor.cuda` -> `torch.Tensor.npu`.
    cuda_method: str | NoCounterpart
    # `x.is_cuda` -> `x.is_npu`; without one, the device type is compared.
    is_cuda_property: str | NoCounterpart
    # `torch.cuda` -> `torch.npu` by renaming the attribute (the user's spelling of torch kept);
    # without one, each member is spelled by `cuda_api` (or `device_module` + the member).
    cuda_module_attribute: str | NoCounterpart
    device_module: str  # code of the module that holds the device runtime's functions
    cuda_api: Mapping[
        str, str
    ]  # torch.cuda member -> its code on the target (when renamed one by one)
    # `torch.cuda.amp.autocast(...)` / `GradScaler(...)` spelled with the device type first.
    amp_calls: Mapping[str, str]
    # `from torch.cuda.amp import X` -> `from torch_npu.npu.amp import X`.
    imported_modules: Mapping[str, str] | NoCounterpart
    # `mock.patch("torch.cuda.X")` -> `mock.patch("torch.npu.X")`.
    patch_prefix: str | NoCounterpart
    # `.to(i)` with an int index: an f-string on the device type's name, or this call template.
    int_device_call: str | None  # "torch.device(<type>, {index})", None: f"npu:{index}"
    # the distributed backend
    backend_name: str | NoCounterpart  # "hccl"
    backend: str  # code of the backend
    per_device_backend: str | NoCounterpart  # "cpu:gloo,cuda:nccl" -> the `cuda:nccl` part
    backend_available: str | NoCounterpart  # is_nccl_available -> is_hccl_available
    # "torch.cuda.FloatTensor" -> "torch.npu.FloatTensor"
    tensor_type_prefix: str | NoCounterpart
    # torch.profiler -> torch_npu.profiler, ProfilerActivity.CUDA -> .NPU
    profiler_module: str | NoCounterpart
    profiler_activity: str | NoCounterpart
    # what a message calls the target
    described: str = field(default="")


# --target accelerator: torch.cuda.X -> torch.accelerator.Y (torch >= 2.6; memory: >= 2.8).
ACCELERATOR_API = {
    "is_available": "is_available",
    "device_count": "device_count",
    "current_device": "current_device_index",
    "set_device": "set_device_index",
    "synchronize": "synchronize",
    "current_stream": "current_stream",
    "set_stream": "set_stream",
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
}
# --target accelerator: torch.cuda.X -> torch.X (generic stream and event classes, torch >= 2.5).
ACCELERATOR_TORCH_API = {"Stream": "Stream", "Event": "Event"}
# Everything else of NPU_CUDA_API under --target accelerator: torch.get_device_module().X
# (torch >= 2.3), which is torch.cuda on a GPU and torch.npu on an NPU.

ACCELERATOR_DEVICE = "torch.accelerator.current_accelerator()"
ACCELERATOR_TYPE = "torch.accelerator.current_accelerator().type"
ACCELERATOR_BACKEND = f"torch.distributed.get_default_backend_for_device({ACCELERATOR_DEVICE})"

# import-time module names: torch.npu only exists once torch_npu is imported, so imports name
# torch_npu's own module, which works wherever the line sits.
NPU_IMPORTED_MODULES = {"torch.cuda": "torch_npu.npu", "torch.cuda.amp": "torch_npu.npu.amp"}


NPU = DeviceTarget(
    target=Target.NPU,
    is_npu=True,
    import_module="torch_npu",
    import_after="torch",
    device_type_name="npu",
    device_type='"npu"',
    current_device='"npu"',
    cuda_method="npu",
    is_cuda_property="is_npu",
    cuda_module_attribute="npu",
    device_module="torch.npu",
    cuda_api=MappingProxyType({}),
    amp_calls=MappingProxyType({}),
    imported_modules=MappingProxyType(NPU_IMPORTED_MODULES),
    patch_prefix="torch.npu.",
    int_device_call=None,
    backend_name="hccl",
    backend='"hccl"',
    per_device_backend="npu:hccl",
    backend_available="is_hccl_available",
    tensor_type_prefix="torch.npu.",
    profiler_module="torch_npu.profiler",
    profiler_activity="NPU",
    described="torch_npu",
)

_AGNOSTIC = "device-agnostic target"
ACCELERATOR = DeviceTarget(
    target=Target.ACCELERATOR,
    is_npu=False,
    import_module="torch",
    import_after=None,
    device_type_name=NoCounterpart("the device type is known only at run time"),
    device_type=ACCELERATOR_TYPE,
    current_device=ACCELERATOR_DEVICE,
    cuda_method=NoCounterpart(f"tensors have no per-device method on the {_AGNOSTIC}"),
    is_cuda_property=NoCounterpart("tensors have no `is_<accelerator>` property"),
    cuda_module_attribute=NoCounterpart("each member has its own device-agnostic spelling"),
    device_module="torch.get_device_module()",
    cuda_api=MappingProxyType(
        {
            **{member: f"torch.accelerator.{name}" for member, name in ACCELERATOR_API.items()},
            **{member: f"torch.{name}" for member, name in ACCELERATOR_TORCH_API.items()},
        }
    ),
    amp_calls=MappingProxyType(
        {
            "torch.cuda.amp.autocast": "torch.autocast",
            "torch.cuda.amp.GradScaler": "torch.amp.GradScaler",
        }
    ),
    imported_modules=NoCounterpart(
        "import torch and use `torch.accelerator`, `torch.get_device_module()` or `torch.amp` "
        "at the call sites"
    ),
    patch_prefix=NoCounterpart(
        "patch the `torch.accelerator` / `torch.get_device_module()` name it calls instead"
    ),
    int_device_call=f"torch.device({ACCELERATOR_TYPE}, {{index}})",
    backend_name=NoCounterpart("the backend is known only at run time"),
    backend=ACCELERATOR_BACKEND,
    per_device_backend=NoCounterpart("add the accelerator's by hand"),
    backend_available=NoCounterpart(
        "check `torch.distributed.is_backend_available(...)` of the accelerator's backend by hand"
    ),
    tensor_type_prefix=NoCounterpart(
        "use `.to(torch.accelerator.current_accelerator(), <dtype>)`, or compare `t.dtype` and "
        "`t.device.type`"
    ),
    profiler_module=NoCounterpart("profile with torch_npu's profiler on Ascend and torch's on GPU"),
    profiler_activity=NoCounterpart("there is no device-agnostic profiler activity"),
    described=_AGNOSTIC,
)

TARGETS = {target.target: target for target in (NPU, ACCELERATOR)}


def device_target(rule: Rule) -> DeviceTarget:
    """The spellings of the run's ``--target``."""
    return TARGETS[rule.settings.target]
