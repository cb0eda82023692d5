"""``amp.initialize`` with Ascend's signature, and amp's checkpoint and registry functions."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import torch

from . import _casting
from ._amp_state import _amp_state, maybe_print, warn_or_err
from ._combine_ddp import CombineDDP, require_process_group
from ._optimizer import LOADED_FP32_OF, MASTER_OF, install
from ._properties import Properties, is_half_cast, properties_for
from .scaler import LossScaler

ModelsArg = torch.nn.Module | list[torch.nn.Module]
OptimizersArg = torch.optim.Optimizer | list[torch.optim.Optimizer] | None

_PARALLEL_WRAPPERS = (
    (torch.nn.parallel.DistributedDataParallel, "torch.nn.parallel.DistributedDataParallel"),
    (torch.nn.DataParallel, "torch.nn.parallel.DataParallel"),
)


def initialize(
    models: ModelsArg,
    optimizers: OptimizersArg = None,
    enabled: bool = True,
    opt_level: str = "O1",
    cast_model_type: torch.dtype | None = None,
    patch_torch_functions: bool | None = None,
    keep_batchnorm_fp32: bool | str | None = None,
    master_weights: bool | None = None,
    loss_scale: float | str | None = None,
    cast_model_outputs: torch.dtype | None = None,
    num_losses: int = 1,
    verbosity: int = 1,
    dynamic_init_scale: float = 2.0**16,
    scale_growth_factor: float = 2.0,
    scale_backoff_factor: float = 0.5,
    scale_window: int = 2000,
    min_loss_scale: float | None = None,
    max_loss_scale: float = 2.0**24,
    combine_grad: bool | None = None,
    combine_ddp: bool | None = None,
    ddp_replica_count: int = 4,
    user_cast_preferred: bool | None = None,
    check_combined_tensors: bool | None = None,
) -> Any:
    """Prepare models and optimizers for mixed precision, as Ascend apex's ``amp.initialize``.

    Returns what was passed, in the same shape: a model, a list of models, ``(model, optimizer)``,
    ``(models, optimizers)``..., or only the model(s) when no optimizer is given.
    """
    _casting.restore_user_casts()
    _restore_module_zero_grad()
    _amp_state.opt_properties = Properties()
    _amp_state.verbosity = verbosity
    _amp_state.initialized = True
    if not enabled:
        return models if optimizers is None else (models, optimizers)
    properties = properties_for(
        opt_level,
        {
            "cast_model_type": cast_model_type,
            "patch_torch_functions": patch_torch_functions,
            "keep_batchnorm_fp32": keep_batchnorm_fp32,
            "master_weights": master_weights,
            "loss_scale": loss_scale,
            "combine_grad": combine_grad,
            "combine_ddp": combine_ddp,
            "ddp_replica_count": ddp_replica_count,
            "user_cast_preferred": user_cast_preferred,
            "check_combined_tensors": check_combined_tensors,
        },
    )
    _amp_state.opt_properties = properties
    _print_options(opt_level, properties)
    model_list, models_was_list = _models_as_list(models)
    optimizer_list, optimizers_was_list = _optimizers_as_list(optimizers)
    _check_models(model_list)
    _check_params_fp32(model_list)
    _check_optimizers_against_options(optimizer_list, properties)
    if properties.combine_ddp:
        require_process_group()  # before anything is changed, so a retry can succeed

    device_type = _casting.model_device_type(model_list)
    half_dtype = _casting.half_dtype_for(device_type)
    _cast_models(
        model_list, optimizer_list, properties, device_type, half_dtype, cast_model_outputs
    )
    if properties.patch_torch_functions:
        output_dtype = cast_model_outputs or torch.float32
        autocast = (device_type, half_dtype) if half_dtype != torch.float32 else None
        for model in model_list:
            _casting.patch_forward(model, None, output_dtype, autocast)
        _casting.apply_user_casts(half_dtype, bool(properties.user_cast_preferred))

    stashes = [install(optimizer, properties, model_list) for optimizer in optimizer_list]
    _amp_state.min_loss_scale = min_loss_scale
    _amp_state.max_loss_scale = max_loss_scale
    _amp_state.loss_scalers = [
        LossScaler(
            properties.loss_scale,
            init_scale=dynamic_init_scale,
            scale_growth_factor=scale_growth_factor,
            scale_backoff_factor=scale_backoff_factor,
            scale_window=scale_window,
            min_loss_scale=min_loss_scale,
            max_loss_scale=max_loss_scale,
        )
        for _ in range(num_losses)
    ]
    if any(stash.combine for stash in stashes):
        _zero_module_grads_in_place()
    if properties.combine_ddp:
        CombineDDP.broadcast_from_rank_zero(model_list)
        for stash in stashes:
            stash.combine_ddp = CombineDDP(properties.ddp_replica_count)
    return _same_shape(model_list, models_was_list, optimizer_list, optimizers_was_list)


def _print_options(opt_level: str, properties: Properties) -> None:
    maybe_print(f"Selected optimization level {opt_level}", True)
    for name, value in properties.options.items():
        maybe_print(f"{name:22} : {value}", True)


def _models_as_list(models: Any) -> tuple[list[torch.nn.Module], bool]:
    if isinstance(models, torch.nn.Module):
        return [models], False
    if isinstance(models, list):
        return models, True
    raise TypeError("models must be either a single model or a list of models.")


def _optimizers_as_list(optimizers: Any) -> tuple[list[torch.optim.Optimizer], bool]:
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers], False
    if optimizers is None:
        return [], False
    if isinstance(optimizers, list):
        return optimizers, True
    raise TypeError("optimizers must be either a single optimizer or a list of optimizers.")


def _same_shape(
    models: list[torch.nn.Module],
    models_was_list: bool,
    optimizers: list[torch.optim.Optimizer],
    optimizers_was_list: bool,
) -> Any:
    model_part: Any = models if models_was_list else models[0]
    if optimizers_was_list:
        return model_part, optimizers
    if not optimizers:
        return model_part
    return model_part, optimizers[0]


def _check_models(models: list[torch.nn.Module]) -> None:
    for model in models:
        for wrapper, name in _PARALLEL_WRAPPERS:
            if isinstance(model, wrapper):
                raise RuntimeError(
                    f"Incoming model is an instance of {name}. Parallel wrappers should only be "
                    "applied to the model(s) AFTER \nthe model(s) have been returned from "
                    "amp.initialize."
                )


def _check_params_fp32(models: list[torch.nn.Module]) -> None:
    for model in models:
        named = [*model.named_parameters(), *model.named_buffers()]
        for name, tensor in named:
            if tensor.is_floating_point() and tensor.dtype in (torch.float16, torch.bfloat16):
                warn_or_err(
                    f"Found param {name} with type {tensor.type()}, expected float32.\n"
                    "When using amp.initialize, you do not need to call .half() on your model\n"
                    "before passing it, no matter what optimization level you choose."
                )


def _check_optimizers_against_options(
    optimizers: list[torch.optim.Optimizer], properties: Properties
) -> None:
    for optimizer in optimizers:
        fused = bool(getattr(optimizer, "is_npu_fused_optimizer", False))
        if not fused and getattr(optimizer, "is_fused_optimizer", False):
            # Stricter than Ascend, which accepts it and trains wrongly: before every backward
            # Ascend's amp sets the gradients of any optimizer but apex's own fused ones to None
            # (prepare_backward_*), and torch_npu's classes step the gradient buffers they packed
            # at their first step, so from the second step on they step stale gradients.
            name = type(optimizer).__name__
            raise RuntimeError(
                f"{name} (torch_npu.optim) cannot be used with amp: Ascend apex's amp sets the "
                "gradients of an optimizer that is not its own fused one to None before every "
                "backward, which detaches them from the buffers this optimizer packed at its "
                f"first step (on an NPU it would silently step stale gradients); use "
                f"apex.optimizers.{name} with amp, and torch_npu.optim.{name} without"
            )
        if fused and properties.opt_level not in ("O1", "O2"):
            raise RuntimeError(
                "Currently, npu fused optimizer can only be used when opt_level='O1' or "
                "opt_level='O2'"
            )
        if (
            (properties.combine_grad or fused)
            and properties.opt_level == "O2"
            and properties.master_weights is not True
        ):
            raise RuntimeError(
                "With opt_level O2, master_weights should be True when combine_grad is True or "
                "npu fused optimizer is used"
            )


# ---- model casting (O2, O3, explicit cast_model_type) -----------------------------------------


def _cast_models(
    models: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer],
    properties: Properties,
    device_type: str,
    half_dtype: torch.dtype,
    cast_model_outputs: torch.dtype | None,
) -> None:
    cast_type = properties.cast_model_type
    if is_half_cast(cast_type):
        # On CUDA/NPU an explicit dtype is honoured; "half" and CPU use the device's half dtype.
        explicit = isinstance(cast_type, torch.dtype) and device_type != "cpu"
        target = cast_type if explicit else half_dtype
    elif isinstance(cast_type, torch.dtype):
        target = cast_type
    else:
        target = None
    if target is None:
        if cast_model_outputs is not None and not properties.patch_torch_functions:
            for model in models:
                _casting.patch_forward(model, None, cast_model_outputs)
        return
    for model in models:
        _cast_module_tensors(
            model, target, keep_batchnorm_fp32=bool(properties.keep_batchnorm_fp32)
        )
        _casting.patch_forward(model, target, cast_model_outputs or torch.float32)
        if target != torch.float32:
            for module in model.modules():
                module._register_state_dict_hook(_float32_state_dict_hook)
                module._register_load_state_dict_pre_hook(_keep_fp32_values_hook, with_module=True)
    for optimizer in optimizers:
        # apex's trick: a state_dict round trip recasts existing per-param state.
        optimizer.load_state_dict(optimizer.state_dict())


@torch.no_grad()
def _cast_module_tensors(
    model: torch.nn.Module, dtype: torch.dtype, keep_batchnorm_fp32: bool
) -> None:
    """Cast floating params and buffers in place (same Parameter objects, so optimizers follow)."""
    batchnorm = torch.nn.modules.batchnorm._BatchNorm
    for module in model.modules():
        if keep_batchnorm_fp32 and isinstance(module, batchnorm):
            continue
        for param in module.parameters(recurse=False):
            if param.is_floating_point():
                param.data = param.data.to(dtype)
        for name, buffer in module.named_buffers(recurse=False):
            if buffer.is_floating_point():
                setattr(module, name, buffer.to(dtype))


def _float32_state_dict_hook(
    module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any
) -> None:
    """Half entries are saved as fp32; a half param with a master saves the master's values.

    Saving the masters (apex saves the half values) makes an O2 checkpoint resume exactly.
    """
    for name, param in module.named_parameters(recurse=False):
        master = MASTER_OF.get(param)
        if master is not None and prefix + name in state_dict:
            state_dict[prefix + name] = master.detach().clone()
    for key, value in state_dict.items():
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
            state_dict[key] = value.to(torch.float32)


def _keep_fp32_values_hook(
    module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Loading an fp32 checkpoint into a half param also restores its fp32 master."""
    for name, param in module.named_parameters(recurse=False):
        value = state_dict.get(prefix + name)
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
            continue
        master = MASTER_OF.get(param)
        if master is not None and master.shape == value.shape:
            with torch.no_grad():
                master.copy_(value)
        else:
            LOADED_FP32_OF[param] = value.detach().clone()


_ORIGINAL_MODULE_ZERO_GRAD = torch.nn.Module.zero_grad


def _module_zero_grad_in_place(self: torch.nn.Module, set_to_none: bool = False) -> None:
    """``torch.nn.Module.zero_grad`` with Ascend's default under combine_grad: zero in place.

    torch >= 2.0 defaults to ``set_to_none=True``, which would detach every grad from its flat
    buffer (amp would notice and re-pack, but every step). An explicit ``set_to_none=True`` is
    still honoured.
    """
    if set_to_none:
        _ORIGINAL_MODULE_ZERO_GRAD(self, set_to_none=True)
        return
    for param in self.parameters():
        if param.grad is not None:
            if param.grad.grad_fn is not None:
                param.grad.detach_()
            else:
                param.grad.requires_grad_(False)
            param.grad.zero_()


def _zero_module_grads_in_place() -> None:
    # Global, as in Ascend: the model is often zeroed through a DDP wrapper amp never sees.
    torch.nn.Module.zero_grad = _module_zero_grad_in_place  # type: ignore[method-assign]
    maybe_print(
        "Warning: Default value of `set_to_none` in torch.nn.Module.zero_grad() is set as False "
        "for combine grad, which is True since torch 2.0."
    )


def _restore_module_zero_grad() -> None:
    torch.nn.Module.zero_grad = _ORIGINAL_MODULE_ZERO_GRAD  # type: ignore[method-assign]


# ---- checkpoints -------------------------------------------------------------------------------


def state_dict(destination: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{'loss_scaler0': {'loss_scale': ..., 'unskipped': ...}, ...}``"""
    if destination is None:
        destination = OrderedDict()
    for index, scaler in enumerate(_amp_state.loss_scalers):
        destination[f"loss_scaler{index}"] = {
            "loss_scale": scaler.loss_scale(),
            "unskipped": scaler._unskipped,
        }
    return destination


def load_state_dict(state_dict: dict[str, Any]) -> None:
    scalers = _amp_state.loss_scalers
    if len(state_dict) != len(scalers):
        print(
            f"Warning:  state_dict contains {len(state_dict)} entries, while {len(scalers)} "
            "loss_scalers are used"
        )
    unexpected = [key for key in state_dict if "loss_scaler" not in key]
    index = 0
    for key, value in state_dict.items():
        if "loss_scaler" not in key:
            continue
        if index >= len(scalers):
            print(f"Skipping loss_scaler[{index}], since num_losses was set to {len(scalers)}")
            break
        scalers[index]._loss_scale = value["loss_scale"]
        scalers[index]._unskipped = value["unskipped"]
        index += 1
    if unexpected:
        keys = ", ".join(f'"{key}"' for key in unexpected)
        raise RuntimeError(
            f"Error(s) in loading state_dict. Unexpected key(s) in state_dict: {keys}. "
        )


def master_params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """The params the optimizer updates: the fp32 masters under O2, the model's params otherwise."""
    stash = getattr(optimizer, "_amp_stash", None)
    if stash is not None:
        stash.lazy_init()
    for group in optimizer.param_groups:
        yield from group["params"]


# ---- user cast registry ------------------------------------------------------------------------


def register_half_function(module: Any, name: str) -> None:
    """Run ``module.name`` in half precision under O1 (call before ``initialize``)."""
    _casting.register(module, name, "half")


def register_float_function(module: Any, name: str) -> None:
    """Run ``module.name`` in fp32 under O1 (call before ``initialize``)."""
    _casting.register(module, name, "float")


def register_promote_function(module: Any, name: str) -> None:
    """Run ``module.name`` in the widest floating dtype of its arguments under O1."""
    _casting.register(module, name, "promote")


def _reset() -> None:
    """Forget every ``initialize`` and registration (test isolation; not part of apex's API)."""
    _casting.restore_user_casts()
    _restore_module_zero_grad()
    _casting._USER_CAST_REGISTRY.clear()
    fresh = type(_amp_state)()
    _amp_state.__dict__.update(fresh.__dict__)


def _o1_casting_active() -> bool:
    properties = _amp_state.opt_properties
    return bool(
        _amp_state.initialized
        and properties is not None
        and properties.enabled
        and properties.patch_torch_functions
    )


half_function = _casting.cast_decorator("half", _o1_casting_active)
half_function.__doc__ = "Decorator: run the function in half precision under O1 (apex's)."
float_function = _casting.cast_decorator("float", _o1_casting_active)
float_function.__doc__ = "Decorator: run the function in fp32 under O1 (apex's)."
promote_function = _casting.cast_decorator("promote", _o1_casting_active)
promote_function.__doc__ = "Decorator: run the function in its widest argument dtype under O1."
