"""What ``amp.initialize`` adds to an optimizer: master weights, unscaling, step skipping, and
``combine_grad``'s flat gradient buffers.

Parameter roles (names used throughout):

* *half* params (O2 only): the model's fp16/bf16 params. Their grads come out of ``backward``
  multiplied by the loss scale; amp moves them into the fp32 *master* params' grads as
  ``master.grad += half.grad.float() / scale``. The optimizer updates the masters, and amp copies
  the masters back into the half params after each step.
* *direct* params: those the optimizer updates itself (every param without master weights; the
  fp32 params, e.g. batchnorm, with them). Their scaled grads are unscaled in place.

With ``combine_grad`` (or an ``apex.optimizers.NpuFused*`` optimizer) the grads are packed into
flat buffers at the end of the first ``scale_loss`` that produced them; from then on unscale, the
overflow check, stashing for gradient accumulation and ``zero_grad`` run once per buffer. Packing
changes where gradients live, never their values: every operation is elementwise and the buffers
are zero-padded, so the numbers are bit-identical to the per-tensor path. Params without a grad at
packing time stay outside the buffers and keep the per-tensor path here; Ascend apex forgets them
(it never unscales, zeroes or, with master weights, copies their later gradients), so when one
of them gets a gradient this runtime warns, or raises where ``APEX_AMP_STRICT=1`` asks it to
(``npu-migrate verify`` does): on Ascend that program would train differently.
"""

from __future__ import annotations

import os
import types
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from apex.contrib.combine_tensors import combine_npu, is_combined_tensor_valid

from ._amp_state import maybe_print
from ._casting import disable_casts
from .scaler import LossScaler

_DESTROYED_MESSAGE = (
    "Combined grad has been destroyed and will be recombined afterwards, please check if there "
    "is any operation that may change the data_ptr/size/format of the grads."
)
_PARAMS_DESTROYED_MESSAGE = (
    "Combined param has been destroyed and will be recombined afterwards, please check if there "
    "is any operation that may change the data_ptr/size/format of the params."
)
_HALF_DTYPES = (torch.float16, torch.bfloat16)
# "1": raise where Ascend apex would silently train differently from this runtime (warn otherwise).
STRICT_ENVIRONMENT_VARIABLE = "APEX_AMP_STRICT"
_LATE_GRADIENT_MESSAGE = (
    "{params} got {their} first gradient after the first amp.scale_loss had packed the gradients "
    "(combine_grad=True, or an NPU fused optimizer). Ascend apex packs only the gradients that "
    "exist then and from then on unscales, zeroes and copies to master weights only those, so "
    "on Ascend {these} would be stepped with the loss-scaled gradient (O1) or not at all (O2); "
    "this runtime unscales {them} per tensor. Give every parameter a gradient in the first "
    "step, or drop combine_grad=True (an NPU fused optimizer always combines: use torch's class)"
)


@dataclass
class PackedGrads:
    """One flat buffer and the (param, grad view) pairs it holds."""

    buffer: torch.Tensor
    members: list[tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def of(cls, buffer: torch.Tensor, params: Sequence[torch.Tensor]) -> PackedGrads:
        return cls(buffer, [(param, param.grad) for param in params])  # type: ignore[misc]

    def intact(self, full_check: bool) -> bool:
        """True while every packed param still owns the very grad tensor that was packed."""
        if any(param.grad is not grad for param, grad in self.members):
            return False
        return not full_check or is_combined_tensor_valid(self.buffer, self.grads())

    def params(self) -> list[torch.Tensor]:
        return [param for param, _ in self.members]

    def grads(self) -> list[torch.Tensor]:
        return [grad for _, grad in self.members]

    def views_like_members(self, same_layout: torch.Tensor) -> list[torch.Tensor]:
        """Views of ``same_layout`` (a buffer laid out like this one) shaped like each grad."""
        base = self.buffer.storage_offset()
        return [
            same_layout.narrow(0, grad.storage_offset() - base, grad.numel()).view(grad.shape)
            for grad in self.grads()
        ]


@dataclass
class HalfBuffer:
    """O2: a buffer of half model grads and the master params they feed."""

    half: PackedGrads
    masters: list[torch.Tensor]
    master: PackedGrads | None  # amp-packed masters laid out exactly like ``half``, if any


@dataclass
class MastersInOptimizer:
    """O2 with an NpuFused optimizer: the grads the optimizer reads all live in its flat buffers.

    The masters' grads and the fp32 (direct) params' grads are views of the optimizer's
    buffers; the half model grads are amp's. After a backward that started from zeroed grads,
    one cast per half grad into its master's slot and one check-and-unscale per optimizer
    buffer give the same numbers as unscaling each tensor and adding it to a zero master grad.
    """

    half_grads: list[torch.Tensor]  # the packed half params' grads (views of amp's buffers)
    master_grads: list[torch.Tensor]  # their masters' grads, in the same order
    # Direct params whose grads are in the optimizer's buffers, with the grad packed for each.
    directs: list[tuple[torch.Tensor, torch.Tensor]]
    storages: set[int]  # data pointers of the optimizer buffers' storages

    def intact(self, masters: Sequence[torch.Tensor]) -> bool:
        """True while every grad is still the tensor, and in the storage, it was at packing."""
        owners = [(param, grad) for param, grad in self.directs]
        owners += [(master, grad) for master, grad in zip(masters, self.master_grads, strict=True)]
        return all(
            param.grad is grad and grad.untyped_storage().data_ptr() in self.storages
            for param, grad in owners
        )


@dataclass
class CombinedGrads:
    half: list[HalfBuffer] = field(default_factory=list)
    direct: list[PackedGrads] = field(default_factory=list)
    direct_stash: list[torch.Tensor | None] = field(default_factory=list)
    optimizer_buffers: list[torch.Tensor] = field(default_factory=list)  # what step() reads
    masters_in_optimizer: MastersInOptimizer | None = None

    def packed(self) -> list[PackedGrads]:
        masters = [hb.master for hb in self.half if hb.master is not None]
        return [*(hb.half for hb in self.half), *self.direct, *masters]

    def packed_param_ids(self) -> set[int]:
        return {id(param) for packed in self.packed() for param in packed.params()}

    def scaled_buffers(self) -> list[torch.Tensor]:
        return [*(hb.half.buffer for hb in self.half), *(p.buffer for p in self.direct)]


class AmpOptimizerState:
    """Stored as ``optimizer._amp_stash`` (the attribute NpuFused optimizers check for)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        properties: Any,
        models: Sequence[torch.nn.Module] = (),
    ) -> None:
        self.optimizer = optimizer
        # Weakly: only to name parameters in messages, never to keep a model alive.
        self.models = [weakref.ref(model) for model in models]
        self.master_weights = bool(properties.master_weights)
        self.is_npu_fused = bool(getattr(optimizer, "is_npu_fused_optimizer", False))
        self.combine = bool(properties.combine_grad) or self.is_npu_fused
        self.check_combined_tensors = bool(properties.check_combined_tensors)
        self.combine_ddp: Any = None  # a CombineDDP, set by initialize
        self.lazy_init_called = False
        self.params_have_scaled_gradients = False  # between delay_unscale blocks
        self.grads_known_zero = True
        self.masters_known_zero = True  # no master grad holds anything yet
        self.skip_next_step: tuple[int, LossScaler] | None = None
        self.half_params: list[torch.Tensor] = []
        self.master_params: list[torch.Tensor] = []  # master_params[i] copies half_params[i]
        self.direct_params: list[torch.Tensor] = []
        self.stash: dict[int, torch.Tensor] = {}  # accumulated grads of unpacked direct params
        self.combined: CombinedGrads | None = None
        # Params without a grad when the buffers were packed: Ascend apex forgets them.
        self.left_out: list[torch.Tensor] = []

    def parameter_name(self, param: torch.Tensor) -> str | None:
        """``param``'s name in the models given to initialize, quoted, for messages (an O2
        master is named after its half param; with several models, ``of models[i]`` follows)."""
        for half, master in zip(self.half_params, self.master_params, strict=True):
            if master is param:
                param = half
                break
        models = [model for model in (ref() for ref in self.models) if model is not None]
        for index, model in enumerate(models):
            for name, candidate in model.named_parameters():
                if candidate is param:
                    return f"'{name}'" if len(models) == 1 else f"'{name}' of models[{index}]"
        return None

    def repacks_destroyed_params(self) -> bool:
        """Whether an NpuFused optimizer whose packed params were re-allocated packs again.

        Only with ``check_combined_tensors=True``, as in Ascend apex, which then prints its
        message and recombines everything; amp's grad buffers are then taken again at the end of
        the next ``scale_loss``. Without it Ascend goes on stepping the old buffer.
        """
        if not self.check_combined_tensors:
            return False
        maybe_print(_PARAMS_DESTROYED_MESSAGE)
        self.combined = None
        return True

    # ---- lazy initialisation -----------------------------------------------------------------

    def lazy_init(self) -> None:
        """Build master weights on first use, so a model loaded after initialize is honoured."""
        if self.lazy_init_called:
            return
        self.lazy_init_called = True
        optimizer = self.optimizer
        for group in optimizer.param_groups:
            for index, param in enumerate(group["params"]):
                if not param.requires_grad:
                    continue
                if self.master_weights and param.dtype in _HALF_DTYPES:
                    master = _master_copy_of(param)
                    group["params"][index] = master
                    if param in optimizer.state:
                        optimizer.state[master] = optimizer.state.pop(param)
                    self.half_params.append(param)
                    self.master_params.append(master)
                else:
                    self.direct_params.append(param)
        if self.master_params:
            # apex's trick: a state_dict round trip recasts existing per-param state to fp32.
            optimizer.load_state_dict(optimizer.state_dict())

    def _outside(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[torch.Tensor]]:
        """(half, master) pairs and direct params that no buffer holds."""
        packed = self.combined.packed_param_ids() if self.combined is not None else set()
        halves = [
            (half, master)
            for half, master in zip(self.half_params, self.master_params, strict=True)
            if id(half) not in packed
        ]
        directs = [param for param in self.direct_params if id(param) not in packed]
        return halves, directs

    # ---- before backward ---------------------------------------------------------------------

    def prepare_backward(self) -> None:
        self.lazy_init()
        if self.params_have_scaled_gradients:
            return  # a delay_unscale block left scaled grads that must keep accumulating
        self._drop_combined_if_broken()
        combined = self.combined
        if combined is not None and self.grads_known_zero:
            combined.direct_stash = [None] * len(combined.direct)
        elif combined is not None:
            for half_buffer in combined.half:
                half_buffer.half.buffer.zero_()  # their values already went to the masters
            for index, packed in enumerate(combined.direct):
                stash = combined.direct_stash[index]
                if stash is None:
                    stash = combined.direct_stash[index] = torch.empty_like(packed.buffer)
                stash.copy_(packed.buffer)
                packed.buffer.zero_()
        outside_halves, outside_directs = self._outside()
        for half, _ in outside_halves:
            half.grad = None
        if self.grads_known_zero:
            return
        for param in outside_directs:
            if param.grad is None:
                continue
            if self.combine:
                # The grad may live in an optimizer-owned buffer: keep it in place.
                self.stash[id(param)] = param.grad.clone()
                param.grad.zero_()
            else:
                self.stash[id(param)] = param.grad
                param.grad = None  # backward then writes a fresh grad (no accumulate pass)

    # ---- after backward ----------------------------------------------------------------------

    def post_backward(self, scaler: LossScaler) -> None:
        self.lazy_init()
        self._drop_combined_if_broken()
        if self.combine and self.combined is None:
            self._pack()
        elif self.left_out:
            self._check_late_gradients()
        if self.combine_ddp is not None:
            self.combine_ddp.all_reduce(self.scaled_grads_to_reduce())
        done: set[int] | None = None
        if self.combined is not None:
            done = self._unscale_into_optimizer_buffers(self.combined, scaler)
            if done is None:
                self._unscale_combined(self.combined, scaler)
        outside_halves, outside_directs = self._outside()
        self._unscale_halves_into_masters(outside_halves, scaler)
        if done:
            outside_directs = [param for param in outside_directs if id(param) not in done]
        self._unscale_directs(outside_directs, scaler)
        self.stash.clear()
        self.grads_known_zero = False
        self.masters_known_zero = False

    def scaled_grads_to_reduce(self) -> list[torch.Tensor]:
        """Every tensor holding grads straight out of backward: buffers first, then the rest."""
        tensors = self.combined.scaled_buffers() if self.combined is not None else []
        outside_halves, outside_directs = self._outside()
        for param in [*(half for half, _ in outside_halves), *outside_directs]:
            if param.grad is not None:
                tensors.append(param.grad)
        return tensors

    def _unscale_into_optimizer_buffers(
        self, combined: CombinedGrads, scaler: LossScaler
    ) -> set[int] | None:
        """The fast path of :class:`MastersInOptimizer`: the ids of the direct params it
        unscaled too, or None where it does not apply (grads accumulating over backwards)."""
        inside = combined.masters_in_optimizer
        if inside is None or not self.masters_known_zero or not self.grads_known_zero:
            return None
        masters = [master for half_buffer in combined.half for master in half_buffer.masters]
        if not inside.intact(masters):
            combined.masters_in_optimizer = None  # a grad was replaced or moved: per tensor
            return None
        if inside.master_grads:
            torch._foreach_copy_(inside.master_grads, inside.half_grads)
        scaler.unscale_(combined.optimizer_buffers)
        return {id(param) for param, _ in inside.directs}

    def _unscale_combined(self, combined: CombinedGrads, scaler: LossScaler) -> None:
        for half_buffer in combined.half:
            if half_buffer.master is not None and self.masters_known_zero:
                # Nothing to accumulate into: cast straight into the masters, no temporary.
                half_buffer.master.buffer.copy_(half_buffer.half.buffer)
                scaler.unscale_([half_buffer.master.buffer])
                continue
            fresh = half_buffer.half.buffer.float()
            scaler.unscale_([fresh])
            if half_buffer.master is not None:
                half_buffer.master.buffer.add_(fresh)
            else:
                master_grads = [master.grad for master in half_buffer.masters]
                torch._foreach_add_(master_grads, half_buffer.half.views_like_members(fresh))  # type: ignore[arg-type]
        scaler.unscale_([packed.buffer for packed in combined.direct])
        stashed = [
            (packed.buffer, stash)
            for packed, stash in zip(combined.direct, combined.direct_stash, strict=True)
            if stash is not None
        ]
        if stashed:
            torch._foreach_add_([b for b, _ in stashed], [s for _, s in stashed])
        combined.direct_stash = [None] * len(combined.direct)

    def _unscale_halves_into_masters(
        self, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], scaler: LossScaler
    ) -> None:
        pairs = [(half, master) for half, master in pairs if half.grad is not None]
        if not pairs:
            return
        fresh = [half.grad.float() for half, _ in pairs]  # type: ignore[union-attr]
        scaler.unscale_(fresh)
        to_add, added = [], []
        for (_, master), value in zip(pairs, fresh, strict=True):
            if master.grad is None:
                master.grad = value
            else:
                to_add.append(master.grad)
                added.append(value)
        if to_add:
            torch._foreach_add_(to_add, added)

    def _unscale_directs(self, params: Sequence[torch.Tensor], scaler: LossScaler) -> None:
        scaler.unscale_([param.grad for param in params if param.grad is not None])  # type: ignore[misc]
        to_add, stashed = [], []
        for param in params:
            old = self.stash.get(id(param))
            if old is None:
                continue
            if param.grad is None:
                param.grad = old
            else:
                to_add.append(param.grad)
                stashed.append(old)
        if to_add:
            torch._foreach_add_(to_add, stashed)

    # ---- packing -----------------------------------------------------------------------------

    @torch.no_grad()
    def _pack(self) -> None:
        """Pack the grads that exist now; params without a grad yet stay per-tensor."""
        halves = [
            (h, m)
            for h, m in zip(self.half_params, self.master_params, strict=True)
            if h.grad is not None
        ]
        directs = [param for param in self.direct_params if param.grad is not None]
        if not halves and not directs:
            return
        packed = {id(half) for half, _ in halves} | {id(param) for param in directs}
        self.left_out = [
            param for param in [*self.half_params, *self.direct_params] if id(param) not in packed
        ]
        combined = CombinedGrads()
        # Masters need a grad before packing (an NpuFused optimizer packs only params with one).
        for _, master in halves:
            if master.grad is None:
                master.grad = torch.zeros_like(master)
        for group in _grouped(halves, key=lambda pair: pair[0].grad):
            group_halves = [half for half, _ in group]
            masters = [master for _, master in group]
            half_packed = PackedGrads.of(_combine([h.grad for h in group_halves]), group_halves)
            master_packed = None
            if not self.is_npu_fused:
                master_packed = PackedGrads.of(_combine([m.grad for m in masters]), masters)
            combined.half.append(HalfBuffer(half_packed, masters, master_packed))
        if self.is_npu_fused:
            # The optimizer packs its own params and grads (masters and direct params) per group.
            self.optimizer.pack()  # type: ignore[attr-defined]
            optimizer_buffers = list(self.optimizer.flat_grad_buffers())  # type: ignore[attr-defined]
            if not self.master_weights:
                for buffer in optimizer_buffers:
                    combined.direct.append(PackedGrads.of(buffer, _held_by(buffer, directs)))
            combined.optimizer_buffers = optimizer_buffers
            if self.master_weights:
                combined.masters_in_optimizer = _masters_in(optimizer_buffers, combined, directs)
        else:
            for group in _grouped(directs, key=lambda param: param.grad):
                combined.direct.append(PackedGrads.of(_combine([p.grad for p in group]), group))
            masters_packed = [hb.master.buffer for hb in combined.half if hb.master is not None]
            combined.optimizer_buffers = [*masters_packed, *(p.buffer for p in combined.direct)]
        combined.direct_stash = [None] * len(combined.direct)
        self._fold_stash_into_packed(combined)
        self.combined = combined
        if self.combine_ddp is not None:
            self.combine_ddp.check_layout(self.scaled_grads_to_reduce())

    def _check_late_gradients(self) -> None:
        """Warn (raise under ``APEX_AMP_STRICT=1``) once for the params left out of the
        buffers that have a gradient now."""
        late = [param for param in self.left_out if param.grad is not None]
        if not late:
            return
        self.left_out = [param for param in self.left_out if param.grad is None]
        names = [
            self.parameter_name(param) or f"a parameter of shape {tuple(param.shape)}"
            for param in late
        ]
        one = len(names) == 1
        message = _LATE_GRADIENT_MESSAGE.format(
            params=("parameter " if one else "parameters ") + ", ".join(names),
            their="its" if one else "their",
            these="it" if one else "they",
            them="it" if one else "them",
        )
        if os.environ.get(STRICT_ENVIRONMENT_VARIABLE, "").strip() == "1":
            raise RuntimeError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=5)  # the `with amp.scale_loss` line

    def _fold_stash_into_packed(self, combined: CombinedGrads) -> None:
        """Stashes taken per tensor before packing become the packed buffers' stash."""
        for index, packed in enumerate(combined.direct):
            old = [self.stash.pop(id(param), None) for param in packed.params()]
            if all(value is None for value in old):
                continue
            stash = torch.zeros_like(packed.buffer)
            views = packed.views_like_members(stash)
            for view, value in zip(views, old, strict=True):
                if value is not None:
                    view.copy_(value)
            combined.direct_stash[index] = stash

    def _drop_combined_if_broken(self) -> None:
        if self.combined is None:
            return
        if all(packed.intact(self.check_combined_tensors) for packed in self.combined.packed()):
            return
        maybe_print(_DESTROYED_MESSAGE)
        self.combined = None  # packed again at the end of the next scale_loss

    # ---- step and zero_grad ------------------------------------------------------------------

    def zero_grads(self, set_to_none: bool) -> None:
        self.lazy_init()
        self._drop_combined_if_broken()
        combined = self.combined
        if combined is not None:
            for packed in combined.packed():
                packed.buffer.zero_()
            for buffer in combined.optimizer_buffers:
                buffer.zero_()
        outside_halves, outside_directs = self._outside()
        outside = [*(h for h, _ in outside_halves), *outside_directs, *self._unpacked_masters()]
        for param in outside:
            if param.grad is None:
                continue
            if set_to_none and not self.combine:
                param.grad = None
            else:
                param.grad.detach_()
                param.grad.zero_()
        self.stash.clear()
        self.grads_known_zero = True
        self.masters_known_zero = True

    def _unpacked_masters(self) -> list[torch.Tensor]:
        packed = self.combined.packed_param_ids() if self.combined is not None else set()
        return [master for master in self.master_params if id(master) not in packed]

    def clear_master_grads(self) -> None:
        """After a step (taken or skipped) the master grads start again from zero."""
        self.masters_known_zero = True
        grads = [master.grad for master in self.master_params if master.grad is not None]
        if self.combine:
            if grads:
                torch._foreach_zero_(grads)  # they may be views into a buffer
            return
        for master in self.master_params:
            master.grad = None

    @torch.no_grad()
    def copy_masters_to_model(self) -> None:
        if self.half_params:
            torch._foreach_copy_(self.half_params, self.master_params)

    # ---- combined tensors for users ----------------------------------------------------------

    def model_combined_grads(self) -> list[torch.Tensor]:
        if not self._combined_available():
            return []
        assert self.combined is not None
        return self.combined.scaled_buffers()

    def optimizer_combined_grads(self) -> list[torch.Tensor]:
        if not self._combined_available():
            return []
        assert self.combined is not None
        return list(self.combined.optimizer_buffers)

    def _combined_available(self) -> bool:
        if not self.combine:
            maybe_print(
                "To get combined grads, please set combine_grad=True or use npu fused optimizer."
            )
            return False
        self._drop_combined_if_broken()
        if self.combined is None:
            maybe_print("Please get the combined grads after backward phase.")
            return False
        return True

    def grads_outside_optimizer_buffers(self) -> list[torch.Tensor]:
        """Grads the optimizer reads that are in none of its combined buffers."""
        buffers = self.combined.optimizer_buffers if self.combined is not None else []
        inside = {buffer.untyped_storage().data_ptr() for buffer in buffers}
        return [
            param.grad
            for param in _optimizer_params(self.optimizer)
            if param.grad is not None and param.grad.untyped_storage().data_ptr() not in inside
        ]


# Keyed by the half model param, weakly (a deleted model frees its entries) and by identity
# (tensors compare elementwise, so a plain WeakKeyDictionary cannot hold them). A deepcopy of the
# model, an EMA copy say, is not a key, so it never reads another model's masters.
MASTER_OF = WeakIdKeyDictionary()
# fp32 values a checkpoint brought for a half param whose master does not exist yet.
LOADED_FP32_OF = WeakIdKeyDictionary()


def _master_copy_of(param: torch.Tensor) -> torch.Tensor:
    """A fresh fp32 master; from the checkpoint's fp32 values when the model just loaded one."""
    loaded = LOADED_FP32_OF.pop(param, None)
    if loaded is not None and loaded.shape == param.shape:
        source = loaded.to(param.device)
    else:
        source = param.detach().float()
    master = source.clone().requires_grad_(True)
    MASTER_OF[param] = master
    return master


def _masters_in(
    buffers: Sequence[torch.Tensor], combined: CombinedGrads, directs: Sequence[torch.Tensor]
) -> MastersInOptimizer | None:
    """Where the optimizer's buffers hold every packed master's grad (NpuFused, O2)."""
    storages = {buffer.untyped_storage().data_ptr() for buffer in buffers}

    def inside(grad: torch.Tensor | None) -> bool:
        return grad is not None and grad.untyped_storage().data_ptr() in storages

    half_grads: list[torch.Tensor] = []
    master_grads: list[torch.Tensor] = []
    for half_buffer in combined.half:
        for (_, half_grad), master in zip(
            half_buffer.half.members, half_buffer.masters, strict=True
        ):
            if not inside(master.grad):
                return None
            half_grads.append(half_grad)
            master_grads.append(master.grad)  # type: ignore[arg-type]
    packed_directs = [(p, p.grad) for p in directs if inside(p.grad)]
    return MastersInOptimizer(half_grads, master_grads, packed_directs, storages)  # type: ignore[arg-type]


def _combine(tensors: list[Any]) -> torch.Tensor:
    buffer = combine_npu(tensors)
    assert buffer is not None  # never called with an empty list
    return buffer


def _grouped(items: Sequence[Any], key: Callable[[Any], Any]) -> list[list[Any]]:
    """Split ``items`` by the (device, dtype) of ``key(item)``, keeping their order."""
    groups: dict[tuple[torch.device, torch.dtype], list[Any]] = defaultdict(list)
    for item in items:
        tensor = key(item)
        groups[(tensor.device, tensor.dtype)].append(item)
    return list(groups.values())


def _held_by(buffer: torch.Tensor, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    storage = buffer.untyped_storage().data_ptr()
    return [
        p for p in params if p.grad is not None and p.grad.untyped_storage().data_ptr() == storage
    ]


def _optimizer_params(optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]


def clip_grad_norm_of(
    tensors: Sequence[torch.Tensor], max_norm: float, norm_type: float
) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over flat buffers (zero padding adds nothing)."""
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not tensors:
        return torch.tensor(0.0)
    norms = [torch.linalg.vector_norm(tensor, norm_type) for tensor in tensors]
    device = tensors[0].device
    total_norm = torch.linalg.vector_norm(torch.stack([n.to(device) for n in norms]), norm_type)
    clip_coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    torch._foreach_mul_(list(tensors), clip_coef)
    return total_norm


# ---------------------------------------------------------------------------------------------
# Installing the behaviour on an optimizer


def install(
    optimizer: torch.optim.Optimizer,
    properties: Any,
    models: Sequence[torch.nn.Module] = (),
) -> AmpOptimizerState:
    if hasattr(optimizer, "_amp_stash"):
        raise RuntimeError("A given optimizer should only be passed through amp.initialize once.")
    stash = AmpOptimizerState(optimizer, properties, models)
    original_step = optimizer.step
    original_zero_grad = optimizer.zero_grad
    original_load_state_dict = optimizer.load_state_dict

    def step(self: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        if closure is not None:
            raise RuntimeError("Currently, Amp does not support closure use with optimizers.")
        stash.lazy_init()
        if stash.skip_next_step is not None:
            loss_id, scaler = stash.skip_next_step
            stash.skip_next_step = None
            maybe_print(
                "Gradient overflow.  Skipping step, loss scaler "
                f"{loss_id} reducing loss scale to {scaler.loss_scale()}"
            )
            stash.clear_master_grads()
            return None
        with disable_casts():  # the step updates fp32 params: no registered cast applies
            result = original_step()
        stash.copy_masters_to_model()
        stash.clear_master_grads()
        return result

    def zero_grad(self: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        if stash.combine or stash.master_weights:
            stash.zero_grads(set_to_none=set_to_none)
        else:
            stash.lazy_init()
            original_zero_grad(set_to_none=set_to_none)
            stash.stash.clear()
            stash.grads_known_zero = True

    def load_state_dict(self: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
        # Masters first, so O2 state (momentum...) is loaded in fp32, not rounded to half.
        stash.lazy_init()
        original_load_state_dict(state_dict)

    def get_model_combined_grads(self: torch.optim.Optimizer) -> list[torch.Tensor]:
        return stash.model_combined_grads()

    def get_optimizer_combined_grads(self: torch.optim.Optimizer) -> list[torch.Tensor]:
        return stash.optimizer_combined_grads()

    def clip_optimizer_grad_norm_fused(
        self: torch.optim.Optimizer, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """Same result as ``torch.nn.utils.clip_grad_norm_`` over the optimizer's params."""
        stash.lazy_init()
        stash._drop_combined_if_broken()
        buffers = stash.combined.optimizer_buffers if stash.combined is not None else []
        tensors = [*buffers, *stash.grads_outside_optimizer_buffers()]
        return clip_grad_norm_of(tensors, max_norm, norm_type)

    def clip_model_grad_norm_fused(
        self: torch.optim.Optimizer, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """O1's version of the above over the model's grads (they are the optimizer's there)."""
        if stash.master_weights:
            raise RuntimeError("clip_model_grad_norm_fused can only be used when opt_level='O1'")
        return clip_optimizer_grad_norm_fused(self, max_norm, norm_type)

    def get_optimizer_combined_params(self: torch.optim.Optimizer) -> list[torch.Tensor]:
        if not stash.is_npu_fused:
            maybe_print("To get combined params, please use npu fused optimizer.")
            return []
        if not stash._combined_available():
            return []
        return list(self.flat_param_buffers())  # type: ignore[attr-defined]

    def get_model_combined_params(self: torch.optim.Optimizer) -> list[torch.Tensor]:
        # Without master weights the optimizer's params are the model's; under O2 the model's
        # half params are never packed (their fp32 masters are).
        if stash.master_weights:
            maybe_print("Combined model params are not available with master weights (O2).")
            return []
        return get_optimizer_combined_params(self)

    for function in (
        step,
        zero_grad,
        load_state_dict,
        get_model_combined_grads,
        get_optimizer_combined_grads,
        get_model_combined_params,
        get_optimizer_combined_params,
        clip_optimizer_grad_norm_fused,
        clip_model_grad_norm_fused,
    ):
        setattr(optimizer, function.__name__, types.MethodType(function, optimizer))
    optimizer._amp_stash = stash  # type: ignore[attr-defined]
    return stash
