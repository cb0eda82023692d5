"""Which dtype "half" means on each device, O1's casting, and the user cast registry.

* CUDA and NPU: half is ``torch.float16``, O1 runs ``model.forward`` under ``torch.autocast``.
* CPU: half-precision compute is optional. The default is ``torch.bfloat16`` (same exponent range
  as fp32, deterministic CPU kernels); the environment variable ``APEX_AMP_CPU_DTYPE`` picks
  ``bfloat16``, ``float16`` or ``float32`` (``float32`` keeps every level in full precision, the
  loss scaling and master-weight bookkeeping still run).

O1 differs from apex in mechanism, not in intent: apex patches torch functions globally, this
runtime wraps each model's forward in ``torch.autocast`` and returns its floating outputs as fp32,
so losses computed outside ``forward`` run in fp32 the way apex's fp32 function list would run
them. Functions registered with ``register_*_function`` before ``initialize`` are wrapped
globally, as in apex.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from apex._device import device_kind

CPU_DTYPE_ENVIRONMENT_VARIABLE = "APEX_AMP_CPU_DTYPE"
_CPU_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# apex's O1 fp16 list (torch functions that run in half). A float or promote registration of one
# of these is, in apex, applied on top of the half cast unless user_cast_preferred is set.
APEX_FP16_FUNCTIONS = frozenset(
    {
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "conv_tbc", "prelu", "addmm", "addmv", "addr", "matmul", "mm",
        "mv", "linear", "bmm", "baddbmm", "addbmm", "chain_matmul",
    }
)  # fmt: skip

CastKind = str  # "half", "float" or "promote"


def half_dtype_for(device_type: str) -> torch.dtype:
    """The dtype O1/O2/O3 compute in on ``device_type`` (a ``torch.device.type``)."""
    if device_type != "cpu":
        return torch.float16
    name = os.environ.get(CPU_DTYPE_ENVIRONMENT_VARIABLE, "bfloat16").strip().lower()
    if name not in _CPU_DTYPES:
        raise ValueError(
            f"{CPU_DTYPE_ENVIRONMENT_VARIABLE}={name!r} is not one of {sorted(_CPU_DTYPES)}"
        )
    return _CPU_DTYPES[name]


def model_device_type(models: list[torch.nn.Module]) -> str:
    for model in models:
        for tensor in [*model.parameters(), *model.buffers()]:
            return tensor.device.type
    return "cpu"


# ---------------------------------------------------------------------------------------------
# Casting values (model inputs, outputs, function arguments)


def cast_floating(value: Any, dtype: torch.dtype) -> Any:
    """Cast every floating tensor inside ``value`` (nested lists, tuples, dicts) to ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, dict):
        return type(value)((key, cast_floating(item, dtype)) for key, item in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(cast_floating(item, dtype) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(cast_floating(item, dtype) for item in value)
    return value


def _floating_dtypes(value: Any) -> Iterator[torch.dtype]:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield value.dtype
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _floating_dtypes(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _floating_dtypes(item)


def patch_forward(
    model: torch.nn.Module,
    input_dtype: torch.dtype | None,
    output_dtype: torch.dtype | None,
    autocast: tuple[str, torch.dtype] | None = None,
) -> None:
    """Make ``model``'s forward cast inputs and outputs, optionally under autocast.

    The model gets a subclass of its own class (same name) whose ``forward`` wraps the original,
    rather than a closure stored on the instance as apex does: ``copy.deepcopy(model)`` (EMA
    copies) then runs the copy's own weights, not the original model's.
    """

    def run(call: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        if input_dtype is not None:
            args, kwargs = cast_floating(args, input_dtype), cast_floating(kwargs, input_dtype)
        context: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if autocast is not None and not _casts_disabled():
            device_type, dtype = autocast
            context = torch.autocast(device_type, dtype=dtype)
        with context:
            output = call(*args, **kwargs)
        return output if output_dtype is None else cast_floating(output, output_dtype)

    if "forward" in vars(model):
        # The instance already overrides forward; wrap that one where it is.
        instance_forward = model.forward

        @functools.wraps(instance_forward)
        def forward_on_instance(*args: Any, **kwargs: Any) -> Any:
            return run(instance_forward, args, kwargs)

        model.forward = forward_on_instance
        return

    base = type(model)
    base_forward = base.forward

    @functools.wraps(base_forward)
    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return run(functools.partial(base_forward, self), args, kwargs)

    namespace = {
        "forward": forward,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
    }
    model.__class__ = type(base.__name__, (base,), namespace)


# ---------------------------------------------------------------------------------------------
# disable_casts and the user cast registry

_DISABLE_DEPTH = [0]


def _casts_disabled() -> bool:
    return _DISABLE_DEPTH[0] > 0


@contextlib.contextmanager
def disable_casts() -> Iterator[None]:
    """Run the block without any amp cast: no autocast, registered functions pass through."""
    _DISABLE_DEPTH[0] += 1
    try:
        with torch.autocast("cpu", enabled=False), _accelerator_autocast_off():
            yield
    finally:
        _DISABLE_DEPTH[0] -= 1


def _accelerator_autocast_off() -> contextlib.AbstractContextManager[Any]:
    kind = device_kind()
    if kind == "cpu":
        return contextlib.nullcontext()
    return torch.autocast(kind, enabled=False)


_USER_CAST_REGISTRY: list[tuple[Any, str, CastKind]] = []
_PATCHED: list[tuple[Any, str, Any]] = []  # (module, name, original) to undo the wrapping


def register(module: Any, name: str, kind: CastKind) -> None:
    if not hasattr(module, name):
        raise ValueError(f"No function named {name} in module {module}.")
    _USER_CAST_REGISTRY.append((module, name, kind))


def apply_user_casts(half_dtype: torch.dtype, user_cast_preferred: bool) -> None:
    """Wrap every registered function; called by ``initialize`` at O1."""
    for module, name, kind in _USER_CAST_REGISTRY:
        original = getattr(module, name)
        # Without user_cast_preferred apex applies its own half cast of fp16-list functions
        # first, so a float/promote registration sees half-rounded arguments.
        round_to_half_first = not user_cast_preferred and name in APEX_FP16_FUNCTIONS
        wrapper = _cast_wrapper(original, kind, half_dtype, round_to_half_first)
        _PATCHED.append((module, name, original))
        setattr(module, name, wrapper)


def restore_user_casts() -> None:
    """Undo :func:`apply_user_casts` (a second ``initialize`` starts from the originals)."""
    while _PATCHED:
        module, name, original = _PATCHED.pop()
        setattr(module, name, original)


def _cast_wrapper(
    function: Callable[..., Any], kind: CastKind, half_dtype: torch.dtype, round_first: bool
) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _casts_disabled():
            return function(*args, **kwargs)
        if round_first and half_dtype != torch.float32:
            args, kwargs = cast_floating(args, half_dtype), cast_floating(kwargs, half_dtype)
        target = _target_dtype(kind, half_dtype, (args, kwargs))
        if target is not None:
            args, kwargs = cast_floating(args, target), cast_floating(kwargs, target)
        # The registration is the user's decision, so autocast must not recast inside it.
        with disable_casts():
            return function(*args, **kwargs)

    return wrapper


def _target_dtype(kind: CastKind, half_dtype: torch.dtype, arguments: Any) -> torch.dtype | None:
    if kind == "half":
        return half_dtype
    if kind == "float":
        return torch.float32
    dtypes = list(_floating_dtypes(arguments))
    if not dtypes:
        return None
    widest = dtypes[0]
    for dtype in dtypes[1:]:
        widest = torch.promote_types(widest, dtype)
    return widest


def cast_decorator(kind: CastKind, is_active: Callable[[], bool]) -> Callable[..., Any]:
    """apex's ``@amp.half_function`` family: cast the arguments while O1 casting is active."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not is_active() or _casts_disabled():
                return function(*args, **kwargs)
            device_type = _first_tensor_device_type((args, kwargs))
            half_dtype = half_dtype_for(device_type)
            target = _target_dtype(kind, half_dtype, (args, kwargs))
            if target is not None:
                args, kwargs = cast_floating(args, target), cast_floating(kwargs, target)
            with disable_casts():
                return function(*args, **kwargs)

        return wrapper

    return decorate


def _first_tensor_device_type(value: Any) -> str:
    """Device type of the first tensor inside ``value``; "cpu" when there is none."""
    stack = [value]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return item.device.type
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return "cpu"
