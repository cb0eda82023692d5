"""The flat-buffer machinery every ``NpuFused*`` optimizer shares.

At the first ``step()`` (or an explicit ``pack()``, which amp calls) the parameters of each
(param group x dtype x device) that have a gradient are packed into one contiguous buffer with
:func:`apex.contrib.combine_tensors.combine_npu`; their gradients into a second one, and every
optimizer state (``exp_avg``, ``momentum_buffer``, ...) into one buffer per state. The Parameter
objects users hold stay the same objects, rebound as views into the buffer, so a step is a
handful of whole-buffer operations instead of a loop over tensors.

Rules that keep the buffers and what users see consistent:

- A parameter without a gradient at packing time stays outside (as in Ascend) and is updated
  tensor by tensor whenever it has one, with torch's per-parameter semantics.
- A packed parameter is always stepped, as Ascend steps the whole buffer: if something replaced
  its ``.grad`` (``model.zero_grad()`` sets grads to None), the new gradient is copied back into
  its slot and ``.grad`` rebound; a ``None`` gradient counts as zero.
- ``zero_grad()`` zeroes the grad buffers in place. ``zero_grad(set_to_none=True)`` after packing
  raises: dropping the grads would detach them from the buffers that amp unscales.
- Ascend's contract: a packed parameter must stay where packing put it. A step after one was
  re-allocated (``model.cpu()`` and back, ``model.half()``, ``p.data = ...``) raises, naming the
  parameter: on an NPU it would silently stop being updated. In-place changes are fine.
- A group added with ``add_param_group`` after packing is packed at the next step.
- ``state_dict()`` is torch's format (per-parameter views, one ``step`` tensor per parameter),
  so torch.optim and these classes load each other's checkpoints.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from apex.contrib.combine_tensors import (
    allocate_combined,
    combine_npu,
    get_aligned_storage_size,
    rebind_into,
)

StateDict = dict[str, Any]
ParamGroup = dict[str, Any]

# Devices with torch's fused (single-kernel) optimizer implementations on a flat buffer.
_FUSED_KERNEL_DEVICES = frozenset({"cpu", "cuda"})
# Set to 1 (`npu-migrate verify` does, on both sides): on the CPU the update runs torch's
# single-tensor kernels over the flat buffers, which give bit for bit what torch.optim's
# default CPU path gives, instead of torch's fused kernels, whose different order of operations
# moves results by an ulp now and then. A comparison with the original then shows the
# migration's own differences only.
REFERENCE_KERNELS_VARIABLE = "APEX_REFERENCE_KERNELS"


def fused_kernels_available(device: torch.device) -> bool:
    """True where ``torch.optim``'s ``fused=True`` kernels exist for this device and are
    wanted (not on the CPU under ``APEX_REFERENCE_KERNELS=1``)."""
    if device.type == "cpu" and os.environ.get(REFERENCE_KERNELS_VARIABLE) == "1":
        return False
    return device.type in _FUSED_KERNEL_DEVICES and hasattr(torch, "_fused_adam_")


@dataclass
class Slab:
    """The tensors one update call works on: a packed bucket, or a single unpacked parameter.

    ``param``, ``grad`` and every ``state`` entry have the same layout: flat buffers for a packed
    bucket (per-parameter slots at ``offsets``), the parameter's own tensors otherwise.
    """

    params: list[torch.nn.Parameter]
    param: torch.Tensor
    grad: torch.Tensor
    state: dict[str, torch.Tensor]
    step: torch.Tensor | None
    packed: bool
    offsets: list[int] = field(default_factory=list)
    # State that exists in the buffers but is not yet visible in optimizer.state: SGD's momentum
    # buffer before its first step, so a state_dict taken then still reads "no momentum yet".
    pending_state: set[str] = field(default_factory=set)
    bound_grads: list[torch.Tensor] = field(default_factory=list)

    @property
    def dtype(self) -> torch.dtype:
        return self.param.dtype

    @property
    def device(self) -> torch.device:
        return self.param.device

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of a tensor laid out like ``param`` (flat views when packed)."""
        if not self.packed:
            return [flat]
        return [
            flat.narrow(0, offset, p.numel())
            for offset, p in zip(self.offsets, self.params, strict=True)
        ]

    def shaped_views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views in each parameter's own shape."""
        if not self.packed:
            return [flat]
        return [view.view(p.shape) for view, p in zip(self.views(flat), self.params, strict=True)]


def _step_value(step: Any) -> float:
    if isinstance(step, torch.Tensor):
        return float(step.item())
    return float(step)


class NpuFusedOptimizerBase(torch.optim.Optimizer):
    """Base of the fused optimizers: packing, step dispatch and torch-format state dicts.

    Subclasses describe their state and implement :meth:`_update` for a list of slabs of one
    parameter group. Class attributes:

    - ``_ascend_name``: the class name Ascend's messages use.
    - ``_requires_amp``: Ascend's ``apex.optimizers`` classes refuse ``step()`` outside amp.
    """

    # Ascend's two families tell themselves apart to amp: apex's classes are "npu fused
    # optimizers" (amp refuses them outside O1/O2 and packs their gradients with theirs), while
    # torch_npu.optim's are plain "fused optimizers" to amp (accepted at every level).
    is_npu_fused_optimizer: ClassVar[bool] = False
    is_fused_optimizer: ClassVar[bool] = True
    _ascend_name: ClassVar[str] = "NpuFusedOptimizer"
    _requires_amp: ClassVar[bool] = False
    _has_step: ClassVar[bool] = True

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self._slabs_by_group: list[list[Slab]] = []
        self._packed_params: set[int] = set()
        super().__init__(params, defaults)

    # ---- what subclasses describe -------------------------------------------------------

    def _state_names(self, group: ParamGroup) -> list[str]:
        """Names of the elementwise state tensors a parameter of ``group`` carries."""
        raise NotImplementedError

    def _state_fill(self, name: str) -> float:
        """Initial value of a freshly created state tensor."""
        return 0.0

    def _fresh_state_is_pending(self, name: str) -> bool:
        """True for state torch creates lazily at the first step (SGD's momentum buffer)."""
        return False

    def _steps_on_param_device(self, device: torch.device) -> bool:
        """Whether the step counter lives on the parameter's device (torch's fused kernels)."""
        return False

    def _update(self, group: ParamGroup, slabs: list[Slab]) -> None:
        """Apply one optimizer step of ``group`` to every slab."""
        raise NotImplementedError

    # ---- the public interface amp relies on ---------------------------------------------

    @property
    def is_packed(self) -> bool:
        return any(slab for slabs in self._slabs_by_group for slab in slabs)

    def flat_grad_buffers(self) -> list[torch.Tensor]:
        """The packed gradient buffers, one per (param group x dtype x device)."""
        return [slab.grad for slabs in self._slabs_by_group for slab in slabs]

    def flat_param_buffers(self) -> list[torch.Tensor]:
        """The packed parameter buffers, in the same order as :meth:`flat_grad_buffers`."""
        return [slab.param for slabs in self._slabs_by_group for slab in slabs]

    def get_optimizer_combined_grads(self) -> list[torch.Tensor]:
        """Ascend's name for :meth:`flat_grad_buffers`."""
        return self.flat_grad_buffers()

    @torch.no_grad()
    def pack(self) -> None:
        """Pack every group not packed yet, for the parameters that have a gradient now.

        Idempotent: a group is packed once; parameters without a gradient at that moment stay
        outside for good (they are still updated, tensor by tensor).
        """
        while len(self._slabs_by_group) < len(self.param_groups):
            self._slabs_by_group.append([])
        for index, group in enumerate(self.param_groups):
            if self._slabs_by_group[index]:
                continue
            self._slabs_by_group[index] = self._pack_group(group)

    # ---- torch.optim.Optimizer overrides ------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self._requires_amp and not hasattr(self, "_amp_stash"):
            raise RuntimeError(f"apex.optimizers.{self._ascend_name} should be used with AMP.")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._refuse_sparse_gradients()
        self.pack()
        self._check_parameters_in_place()
        for index, group in enumerate(self.param_groups):
            slabs = self._slabs_for_step(index, group)
            if not slabs:
                continue
            self._update(group, slabs)
            for slab in slabs:
                self._publish_pending_state(slab)
        return loss

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's ``add_param_group``, refusing a parameter listed twice in one group.

        torch only warns there and then updates such a parameter twice per step; a flat buffer
        has one slot per parameter, so the duplicate would be updated once, silently unlike
        torch. Parameters shared between groups are refused by torch itself.
        """
        super().add_param_group(param_group)
        params = self.param_groups[-1]["params"]
        first_seen: dict[int, int] = {}
        for position, p in enumerate(params):
            if id(p) in first_seen:
                self.param_groups.pop()
                raise ValueError(
                    f"{type(self).__name__}: parameter group {len(self.param_groups)} lists the "
                    f"same parameter twice (positions {first_seen[id(p)]} and {position}); "
                    "a fused optimizer holds each parameter once"
                )
            first_seen[id(p)] = position

    def _refuse_sparse_gradients(self) -> None:
        """Ascend's fused optimizers have no sparse path: refuse before anything is updated."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    raise RuntimeError(
                        f"{self._ascend_name} does not support sparse gradients, "
                        "please consider SparseAdam instead"
                    )

    def _check_parameters_in_place(self) -> None:
        """Raise, before anything is updated, when a packed parameter left its slot.

        Ascend documents for every NpuFused optimizer that the parameters handed to it must not
        be re-allocated while it is in use: the step updates the flat buffer, so a parameter
        rebound to other memory silently stops training there. Here that is an error instead.
        In-place changes (``p.data.mul_``, ``p.copy_``, ``model.load_state_dict``) keep the slot.

        The one exception is Ascend's own: under ``amp.initialize(...,
        check_combined_tensors=True)`` amp notices destroyed parameter buffers, says so and
        packs again, so the groups holding a moved parameter are packed again here.
        """
        moved = [
            (group_index, p)
            for group_index, slabs in enumerate(self._slabs_by_group)
            for slab in slabs
            for p, offset in zip(slab.params, slab.offsets, strict=True)
            if not _lives_at(p, slab.param, offset)
        ]
        if not moved:
            return
        stash = getattr(self, "_amp_stash", None)
        if stash is not None and stash.repacks_destroyed_params():
            for group_index in sorted({group_index for group_index, _ in moved}):
                self._repack_group(group_index)
            return
        raise self._reallocation_error(moved, through_amp=stash is not None)

    def _reallocation_error(
        self, moved: list[tuple[int, torch.nn.Parameter]], through_amp: bool
    ) -> RuntimeError:
        group_index, first = moved[0]
        position = next(
            i for i, q in enumerate(self.param_groups[group_index]["params"]) if q is first
        )
        name = self._parameter_name(first)
        label = name if name is not None else f"param_groups[{group_index}]['params'][{position}]"
        label += f" (shape {tuple(first.shape)})"
        if len(moved) == 1:
            what, them, they = f"parameter {label} was", "it", "it"
        else:
            what, them, they = f"{len(moved)} parameters, the first {label}, were", "them", "they"
        amp_way_out = ""
        if through_amp:
            amp_way_out = (
                "; or pass check_combined_tensors=True to amp.initialize, with which Ascend packs "
                f"{them} again"
            )
        return RuntimeError(
            f"{type(self).__name__}: {what} re-allocated after the optimizer packed {them} into "
            "its flat buffer (by a model.cpu()/.to()/.half() round trip or p.data = ...). On an "
            "NPU, Ascend's fused optimizer would go on updating the buffer and "
            f"{they} would silently stop training. Move or convert the model before building the "
            "optimizer, save with state_dict() without moving the model, and change values in "
            f"place{amp_way_out}."
        )

    def _parameter_name(self, p: torch.Tensor) -> str | None:
        """The parameter's quoted name in the model amp.initialize was given, if amp knows it."""
        stash = getattr(self, "_amp_stash", None)
        namer = getattr(stash, "parameter_name", None)
        return namer(p) if namer is not None else None

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the gradients; in place in the packed buffers.

        Unlike torch (whose default is ``set_to_none=True``) the default is to zero in place.
        ``set_to_none=True`` is refused once packed: it would silently detach the gradients
        from the flat buffers that amp's combined unscale and this optimizer's step work on.
        """
        if set_to_none and self.is_packed:
            raise RuntimeError(
                f"{type(self).__name__}.zero_grad(set_to_none=True) would detach the gradients "
                "from the packed flat buffers; call zero_grad() (zeroes them in place) instead."
            )
        with torch.no_grad():
            for grad in self.flat_grad_buffers():
                grad.zero_()
            for group in self.param_groups:
                for p in group["params"]:
                    if id(p) in self._packed_params or p.grad is None:
                        continue
                    if set_to_none:
                        p.grad = None
                    else:
                        if p.grad.grad_fn is not None:
                            p.grad.detach_()
                        else:
                            p.grad.requires_grad_(False)
                        p.grad.zero_()

    def state_dict(self) -> StateDict:
        state_dict = super().state_dict()
        exported: dict[Any, dict[str, Any]] = {}
        for key, param_state in state_dict["state"].items():
            entry = dict(param_state)
            if "step" in entry:
                # Packed parameters share one step tensor; torch expects one per parameter.
                entry["step"] = torch.tensor(_step_value(entry["step"]), dtype=torch.float32)
            exported[key] = entry
        state_dict["state"] = exported
        return state_dict

    def load_state_dict(self, state_dict: StateDict) -> None:
        check_state_dict_layout(self, state_dict)
        super().load_state_dict(state_dict)
        with torch.no_grad():
            for index in range(len(self._slabs_by_group)):
                self._slabs_by_group[index] = [
                    slab for slab in self._slabs_by_group[index] if self._reload_slab(slab)
                ]

    # ---- packing ------------------------------------------------------------------------

    def _pack_group(self, group: ParamGroup) -> list[Slab]:
        names = self._state_names(group)
        buckets: dict[tuple[Any, ...], list[torch.nn.Parameter]] = {}
        for p in group["params"]:
            if not self._packable(p):
                continue
            buckets.setdefault(self._bucket_key(p, names), []).append(p)
        slabs = [self._pack_bucket(params, names) for params in buckets.values()]
        for slab in slabs:
            self._packed_params.update(id(p) for p in slab.params)
        return slabs

    def _packable(self, p: torch.Tensor) -> bool:
        grad = p.grad
        return (
            id(p) not in self._packed_params
            and grad is not None
            and not grad.is_sparse
            and grad.dtype == p.dtype
            and grad.device == p.device
        )

    def _bucket_key(self, p: torch.Tensor, names: list[str]) -> tuple[Any, ...]:
        # Parameters with different saved progress (a step count, a missing momentum buffer)
        # cannot share one step counter or one "first step" flag, so they get their own bucket.
        state = self.state.get(p, {})
        present = tuple(name in state for name in names)
        step = _step_value(state["step"]) if "step" in state else 0.0
        return (p.device, p.dtype, present, step)

    def _pack_bucket(self, params: list[torch.nn.Parameter], names: list[str]) -> Slab:
        grads = [p.grad for p in params]
        flat_param = combine_npu(params)
        flat_grad = combine_npu(grads)  # type: ignore[arg-type]
        assert flat_param is not None and flat_grad is not None
        offsets = _slot_offsets(params)
        state: dict[str, torch.Tensor] = {}
        pending: set[str] = set()
        for name in names:
            state[name], is_fresh = self._pack_state(params, name)
            if is_fresh and self._fresh_state_is_pending(name):
                pending.add(name)
        step = self._new_step(params[0]) if self._has_step else None
        slab = Slab(
            params=list(params),
            param=flat_param,
            grad=flat_grad,
            state=state,
            step=step,
            packed=True,
            offsets=offsets,
            pending_state=pending,
            bound_grads=list(grads),  # type: ignore[arg-type]
        )
        self._publish_state(slab)
        return slab

    def _pack_state(self, params: list[torch.nn.Parameter], name: str) -> tuple[torch.Tensor, bool]:
        """One flat buffer for state ``name``, holding the saved values where there are any."""
        first = params[0]
        existing = [self.state.get(p, {}).get(name) for p in params]
        is_fresh = all(value is None for value in existing)
        fill = 0.0 if not is_fresh else self._state_fill(name)
        flat, views = allocate_combined(
            [p.shape for p in params], first.dtype, first.device, fill=fill
        )
        for view, value in zip(views, existing, strict=True):
            if value is not None:
                view.copy_(value)
        return flat, is_fresh

    def _new_step(self, p: torch.Tensor) -> torch.Tensor:
        saved = self.state.get(p, {}).get("step", 0.0)
        device = p.device if self._steps_on_param_device(p.device) else torch.device("cpu")
        return torch.tensor(_step_value(saved), dtype=torch.float32, device=device)

    def _publish_state(self, slab: Slab) -> None:
        per_name_views = {
            name: slab.shaped_views(flat)
            for name, flat in slab.state.items()
            if name not in slab.pending_state
        }
        for index, p in enumerate(slab.params):
            # A fresh dict per parameter: state loaded from elsewhere is never written through.
            param_state: dict[str, Any] = {
                name: views[index] for name, views in per_name_views.items()
            }
            if slab.step is not None:
                param_state["step"] = slab.step
            self.state[p] = param_state

    def _publish_pending_state(self, slab: Slab) -> None:
        if not slab.pending_state:
            return
        slab.pending_state.clear()
        if slab.packed:
            self._publish_state(slab)

    # ---- keeping packed slabs and what users see in sync --------------------------------

    def _slabs_for_step(self, index: int, group: ParamGroup) -> list[Slab]:
        slabs = self._slabs_by_group[index] if index < len(self._slabs_by_group) else []
        for slab in slabs:
            self._rebind_moved_grads(slab)
            self._add_missing_state(slab, group)
        outside = [
            self._single_param_slab(p, group)
            for p in group["params"]
            if id(p) not in self._packed_params and p.grad is not None
        ]
        return [*slabs, *outside]

    def _rebind_moved_grads(self, slab: Slab) -> None:
        for index, (p, offset) in enumerate(zip(slab.params, slab.offsets, strict=True)):
            bound = slab.bound_grads[index]
            if p.grad is bound and _lives_at(bound, slab.grad, offset):
                continue
            slot = slab.grad.narrow(0, offset, p.numel())
            if p.grad is None:
                slot.zero_()
            else:
                slot.copy_(p.grad.reshape(-1))
            p.grad = bound
            rebind_into(bound, slab.grad, offset)

    def _add_missing_state(self, slab: Slab, group: ParamGroup) -> None:
        """State a hyper-parameter change asks for after packing (momentum set from 0)."""
        missing = [name for name in self._state_names(group) if name not in slab.state]
        for name in missing:
            flat = torch.zeros_like(slab.param)
            if self._state_fill(name) != 0.0:
                for view in slab.views(flat):
                    view.fill_(self._state_fill(name))
            slab.state[name] = flat
            if self._fresh_state_is_pending(name):
                slab.pending_state.add(name)
        if missing:
            self._publish_state(slab)

    def _single_param_slab(self, p: torch.nn.Parameter, group: ParamGroup) -> Slab:
        state = self.state[p]
        pending: set[str] = set()
        for name in self._state_names(group):
            if name not in state:
                state[name] = torch.full_like(
                    p, self._state_fill(name), memory_format=torch.preserve_format
                )
                if self._fresh_state_is_pending(name):
                    pending.add(name)
        step = None
        if self._has_step:
            step = self._new_step(p)
            state["step"] = step
        assert p.grad is not None
        return Slab(
            params=[p],
            param=p,
            grad=p.grad,
            state={name: state[name] for name in self._state_names(group)},
            step=step,
            packed=False,
            offsets=[0],
            pending_state=pending,
        )

    def _reload_slab(self, slab: Slab) -> bool:
        """Copy freshly loaded state into a packed slab; False when it had to be dissolved."""
        loaded = [self.state.get(p, {}) for p in slab.params]
        steps = {_step_value(s["step"]) for s in loaded if "step" in s}
        if len(steps) > 1:
            self._dissolve(slab)
            return False
        if slab.step is not None:
            slab.step.fill_(steps.pop() if steps else 0.0)
        for name, flat in slab.state.items():
            values = [s.get(name) for s in loaded]
            if all(value is None for value in values):
                flat.fill_(0.0)
                for view in slab.views(flat):
                    view.fill_(self._state_fill(name))
                if self._fresh_state_is_pending(name):
                    slab.pending_state.add(name)
                continue
            slab.pending_state.discard(name)
            for view, value in zip(slab.views(flat), values, strict=True):
                if value is None:
                    view.fill_(self._state_fill(name))
                else:
                    view.copy_(value.reshape(-1))
        self._publish_state(slab)
        return True

    def _repack_group(self, index: int) -> None:
        """Pack a group again from what its parameters, grads and states hold now."""
        for slab in self._slabs_by_group[index]:
            self._dissolve(slab)
        self._slabs_by_group[index] = self._pack_group(self.param_groups[index])

    def _dissolve(self, slab: Slab) -> None:
        """Give a packed slab's tensors their own memory again (loaded steps disagree)."""
        for p, grad in zip(slab.params, slab.bound_grads, strict=True):
            p.data = p.detach().clone()
            grad.data = grad.clone()
            self._packed_params.discard(id(p))

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # Unpickled optimizers start unpacked: buffers and views do not survive pickling.
        self.__dict__.setdefault("_slabs_by_group", [])
        self.__dict__.setdefault("_packed_params", set())


def check_state_dict_layout(optimizer: torch.optim.Optimizer, state_dict: StateDict) -> None:
    """Refuse a state dict saved with other parameter groups, saying what differs.

    torch checks only the number of groups and of parameters per group; a state saved for
    parameters in another order passes that check and then loads ``exp_avg`` of one parameter
    into another, which for a flat buffer can even broadcast silently. Shapes of per-parameter
    state tensors are therefore checked too.
    """
    saved_groups = state_dict.get("param_groups")
    if not isinstance(saved_groups, list) or not isinstance(state_dict.get("state"), dict):
        raise ValueError(
            "Not an optimizer state dict: expected the keys 'state' and 'param_groups' "
            "(as returned by optimizer.state_dict())"
        )
    name = type(optimizer).__name__
    groups = optimizer.param_groups
    if len(saved_groups) != len(groups):
        raise ValueError(
            f"Cannot load this state into {name}: it was saved with {len(saved_groups)} "
            f"parameter group(s), this optimizer has {len(groups)}"
        )
    saved_state = state_dict["state"]
    for index, (saved, group) in enumerate(zip(saved_groups, groups, strict=True)):
        saved_ids = list(saved.get("params", []))
        if len(saved_ids) != len(group["params"]):
            sizes = [len(g.get("params", [])) for g in saved_groups]
            here = [len(g["params"]) for g in groups]
            raise ValueError(
                f"Cannot load this state into {name}: parameter group {index} has "
                f"{len(group['params'])} parameter(s) here and {len(saved_ids)} in the state dict "
                f"(parameters per group: saved {sizes}, here {here})"
            )
        for position, (saved_id, p) in enumerate(zip(saved_ids, group["params"], strict=True)):
            for key, value in saved_state.get(saved_id, {}).items():
                if not _is_elementwise_state(key, value) or value.shape == p.shape:
                    continue
                raise ValueError(
                    f"Cannot load this state into {name}: parameter {position} of group {index} "
                    f"has shape {tuple(p.shape)}, but its saved '{key}' has shape "
                    f"{tuple(value.shape)} (was the state saved with the parameters in another "
                    "order or grouped differently?)"
                )


def _is_elementwise_state(key: str, value: Any) -> bool:
    # 'step' is a scalar counter; a 0-d value (NovoGrad's per-tensor norm) has no layout.
    return isinstance(value, torch.Tensor) and key != "step" and value.dim() > 0


def _lives_at(tensor: torch.Tensor, flat: torch.Tensor, offset: int) -> bool:
    """True while ``tensor`` is still the view of ``flat`` that packing made at ``offset``."""
    # Compared by storage and offset, not data_ptr: an empty tensor's data_ptr is always 0.
    return (
        tensor.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
        and tensor.storage_offset() == flat.storage_offset() + offset
    )


def _slot_offsets(tensors: list[torch.nn.Parameter]) -> list[int]:
    offsets = []
    offset = 0
    for tensor in tensors:
        offsets.append(offset)
        offset += get_aligned_storage_size(tensor)
    return offsets


def group_grad_norm(slabs: list[Slab]) -> torch.Tensor:
    """L2 norm of all gradients in ``slabs`` (padding is zero, so flat buffers are exact)."""
    squares = [slab.grad.detach().float().pow(2).sum() for slab in slabs]
    return torch.stack([s.to(squares[0].device) for s in squares]).sum().sqrt()


_REDUCED_PRECISION = (torch.float16, torch.bfloat16)


@contextmanager
def float_math(slab: Slab) -> Iterator[Slab]:
    """The slab itself, or for fp16/bf16 an fp32 copy whose results are rounded back after.

    torch's fused kernels compute reduced-precision updates in fp32 and round only what they
    store; doing the same here keeps these optimizers from dividing by an ``eps`` that fp16
    cannot hold (``1e-8`` is 0 in fp16, and a ``sqrt(v) + eps`` of 0 blows the step up).
    """
    if slab.dtype not in _REDUCED_PRECISION:
        yield slab
        return
    wide = dataclasses.replace(
        slab,
        param=slab.param.float(),
        grad=slab.grad.float(),
        state={name: value.float() for name, value in slab.state.items()},
    )
    yield wide
    slab.param.copy_(wide.param)
    for name, value in slab.state.items():
        value.copy_(wide.state[name])


def check_hyperparameter(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def check_adam_hyperparameters(lr: float, betas: tuple[float, float], eps: float) -> None:
    """Ascend's (and old torch's) checks and messages for Adam-like hyper-parameters."""
    check_hyperparameter(lr >= 0.0, f"Invalid learning rate: {lr}")
    check_hyperparameter(eps >= 0.0, f"Invalid epsilon value: {eps}")
    for index, beta in enumerate(betas):
        check_hyperparameter(0.0 <= beta < 1.0, f"Invalid beta parameter at index {index}: {beta}")


def bias_correction(beta: float, step: float) -> float:
    return 1.0 - math.pow(beta, step)
