"""NVIDIA apex's fused optimizers as plain-torch implementations with NVIDIA's semantics.

NVIDIA's versions need CUDA extensions (``amp_C``); these run anywhere torch runs, so an
unmigrated GPU-style script also runs on CPU (the original side of ``npu-migrate verify``). Each
class keeps what NVIDIA's class and its CUDA kernel do (apex 6424da3b, ``apex/optimizers`` and
``csrc/multi_tensor_*``):

- **State dtypes.** ``FusedAdam`` keeps ``exp_avg`` / ``exp_avg_sq`` in fp32 (``.float()``);
  ``FusedSGD``'s ``momentum_buffer``, ``FusedAdagrad``'s ``sum``, ``FusedLAMB``'s moments and
  ``FusedNovoGrad``'s ``exp_avg`` have the parameter's dtype (``torch.zeros_like(p)``).
  ``FusedNovoGrad`` keeps its per-tensor norms in the group, as fp32 tensors
  (``group['exp_avg_sq'] = [half norms, fp32 norms]``), so checkpoints have NVIDIA's layout.
- **Arithmetic.** Every kernel reads parameter, gradient and state, computes in fp32 and rounds
  what it stores; the functions below follow each kernel's order of operations. FusedLAMB
  stores its update in the gradient (in the parameter's dtype) before the trust ratio is applied,
  as NVIDIA's stage-1 kernel does, so after ``step()`` the gradients hold the updates.
- **Dtypes.** NVIDIA's kernels take fp16 and fp32 (FusedAdam also bf16). bf16 parameters are
  accepted by every class here and treated as NVIDIA treats fp16 ones, because on the CPU amp's
  half precision is bf16; any other dtype raises NVIDIA's error ("... only support fp16 and
  fp32.") before anything is updated (NVIDIA's FusedSGD silently never updates such a
  parameter; here that is an error too).
- **Step counts** are per group where NVIDIA keeps one: FusedAdam counts every step of a group
  with parameters, FusedLAMB and FusedNovoGrad every step of every group, whether or not a
  parameter had a gradient; FusedSGD and FusedAdagrad keep none.

``set_grad_none`` decides what ``zero_grad()`` does, and the AMSGrad variants are refused with
NVIDIA's error. Two NVIDIA behaviours are deliberately not reproduced: FusedAdam steps groups added
with ``add_param_group`` (NVIDIA's never does: it pairs groups with master lists made in
``__init__``), and its fp32 moments stay fp32 across ``load_state_dict`` (torch casts them to a
half parameter's dtype, which NVIDIA's kernel then misreads as fp32).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import required  # type: ignore[attr-defined]

from apex.optimizers._fused_base import check_hyperparameter, check_state_dict_layout

_HALF_DTYPES = (torch.float16, torch.bfloat16)
ParamGroup = dict[str, Any]


def _fp32(tensor: torch.Tensor) -> torch.Tensor:
    """An fp32 working copy of a half tensor; an fp32 tensor itself (updated in place)."""
    return tensor if tensor.dtype == torch.float32 else tensor.float()


def _rounded_to(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``value`` rounded to ``dtype`` and back: a kernel's ``static_cast<T>`` on a float."""
    return value if dtype == torch.float32 else value.to(dtype).float()


def _bias_correction(beta: float, step: int) -> float:
    """``1 - beta**step`` as NVIDIA's host code computes it (double) and hands it over (float)."""
    return float(torch.tensor(1.0 - math.pow(beta, step), dtype=torch.float32))


def _master_of(p: torch.Tensor) -> torch.Tensor:
    return p.detach().clone().float()


def _grad_of(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None  # the step loops select parameters with a gradient
    return p.grad


class _NvidiaOptimizer(torch.optim.Optimizer):
    """What NVIDIA's classes share: ``set_grad_none``, the input checks, state dict layout."""

    # The dtypes this class's kernels take; bf16 stands in for fp16 (amp's half on the CPU).
    _kernel_dtypes: ClassVar[tuple[torch.dtype, ...]] = (
        torch.float16,
        torch.bfloat16,
        torch.float32,
    )

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any], set_grad_none: bool):
        super().__init__(params, defaults)
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        check_state_dict_layout(self, state_dict)
        super().load_state_dict(state_dict)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_gradients()
        self._step()
        return loss

    def _step(self) -> None:
        raise NotImplementedError

    def _check_gradients(self) -> None:
        """NVIDIA's refusals, for every group before any is updated."""
        name = type(self).__name__
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError(f"{name} does not support sparse gradients.")
                if p.dtype not in self._kernel_dtypes:
                    raise RuntimeError(self._unsupported_dtype_message(p))

    def _unsupported_dtype_message(self, p: torch.Tensor) -> str:
        return (
            f"{type(self).__name__} only support fp16 and fp32. (NVIDIA's kernels take float16 "
            f"and float32 parameters; one of shape {tuple(p.shape)} is {p.dtype}.)"
        )

    @staticmethod
    def _with_grads(group: ParamGroup) -> list[torch.Tensor]:
        return [p for p in group["params"] if p.grad is not None]


def _by_kernel_dtype(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """The launch sets NVIDIA makes of one group: half parameters first, then fp32 ones."""
    order = (torch.float16, torch.bfloat16, torch.float32)
    sets = [[p for p in params if p.dtype == dtype] for dtype in order]
    return [launch for launch in sets if launch]


class FusedSGD(_NvidiaOptimizer):
    """NVIDIA's FusedSGD: torch's SGD plus ``wd_after_momentum`` (weight decay added to the
    direction after the momentum update instead of to the gradient before it).

    As NVIDIA's: ``momentum_buffer`` has the parameter's dtype and exists for every stepped
    parameter, even with ``momentum=0``; the update is computed in fp32 and the parameter and
    the buffer are rounded when stored. Whether a launch set (a group's half or fp32 parameters)
    starts its momentum from the gradient is decided once per set, by whether its last
    parameter had a buffer (NVIDIA's ``first_run``). ``materialize_master_grads`` only matters
    for NVIDIA's amp and is accepted and ignored.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = required,  # type: ignore[assignment]
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        wd_after_momentum: bool = False,
        materialize_master_grads: bool = True,
        set_grad_none: bool = False,
    ) -> None:
        check_hyperparameter(lr is required or lr >= 0.0, f"Invalid learning rate: {lr}")
        check_hyperparameter(momentum >= 0.0, f"Invalid momentum value: {momentum}")
        check_hyperparameter(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        check_hyperparameter(
            not nesterov or (momentum > 0 and dampening == 0),
            "Nesterov momentum requires a momentum and zero dampening",
        )
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
        )
        super().__init__(params, defaults, set_grad_none)
        self.wd_after_momentum = wd_after_momentum
        self.materialize_master_grads = materialize_master_grads

    def _unsupported_dtype_message(self, p: torch.Tensor) -> str:
        return (
            f"FusedSGD steps float16 and float32 parameters only: NVIDIA's silently never "
            f"updates one of shape {tuple(p.shape)} in {p.dtype}. Convert it, or use "
            "torch.optim.SGD."
        )

    def _step(self) -> None:
        for group in self.param_groups:
            for launch in _by_kernel_dtype(self._with_grads(group)):
                first_run = self._momentum_buffers(launch)
                for p in launch:
                    self._update(p, group, first_run)

    def _momentum_buffers(self, params: list[torch.Tensor]) -> bool:
        first_run = True
        for p in params:
            state = self.state[p]
            first_run = "momentum_buffer" not in state
            if first_run:
                state["momentum_buffer"] = torch.zeros_like(p)
        return first_run

    def _update(self, p: torch.Tensor, group: ParamGroup, first_run: bool) -> None:
        weight_decay, momentum = group["weight_decay"], group["momentum"]
        param = _fp32(p)
        direction = _grad_of(p).float()
        if weight_decay != 0 and not self.wd_after_momentum:
            direction = direction + weight_decay * param
        if momentum != 0:
            buffer = self.state[p]["momentum_buffer"]
            if first_run:
                velocity = direction
            else:
                velocity = buffer.float() * momentum + (1 - group["dampening"]) * direction
            direction = direction + momentum * velocity if group["nesterov"] else velocity
            buffer.copy_(velocity)
        if weight_decay != 0 and self.wd_after_momentum:
            direction = direction + weight_decay * param
        p.copy_(param - group["lr"] * direction)


class FusedAdam(_NvidiaOptimizer):
    """NVIDIA's FusedAdam: AdamW by default (``adam_w_mode=True``), L2 Adam otherwise, with
    optional bias correction. ``weight_decay`` defaults to 0 (torch's AdamW: 1e-2). The moments
    are fp32 for every parameter dtype (NVIDIA's ``.float()``), the update is computed in fp32,
    and a group's step count advances at every ``step()``, whether or not its parameters had
    gradients.

    ``capturable=True`` (NVIDIA's CUDA-graph variant; no graphs here) takes the loss scale into
    the step, as NVIDIA's kernel does: driven by ``torch.amp.GradScaler``, ``scaler.step(
    optimizer)`` does not unscale the gradients (which fails for fp16 ones) but hands this
    optimizer the scale and the inf check. The kernel unscales each gradient in fp32, writes it
    back unscaled, and updates; a step whose gradients hold an inf or NaN changes nothing (the
    gradients stay scaled), and the step count then advances one step late, as NVIDIA's reads
    the previous inf flag. The moments are stored rounded through the parameter's dtype (the
    kernel's cast), unless ``master_weights=True`` (only together with ``capturable``, NVIDIA's
    rule): then fp32 masters, copied from the fp16 and fp32 parameters **when the optimizer is
    built**, are updated and the parameters are their rounded copies. The masters are not part
    of ``state_dict()`` (NVIDIA keeps them in ``param_groups_master``): values loaded into the
    model after the optimizer was built are overwritten by its first step, on NVIDIA's too.
    bf16 parameters never get masters.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        capturable: bool = False,
        master_weights: bool = False,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        if master_weights and not capturable:
            raise RuntimeError(
                "Master weights is currently only supported with the capturable version."
            )
        defaults = dict(
            lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay
        )
        super().__init__(params, defaults, set_grad_none)
        self.adam_w_mode = adam_w_mode
        self.capturable = capturable
        self.master_weights = master_weights
        self.param_groups_master = [
            {"params": [_master_of(p) if master_weights else None for p in group["params"]]}
            for group in self.param_groups
        ]
        # The capturable kernel's "skip" flag, read before it is set for the current group.
        self._overflow = 0.0
        # torch.amp.GradScaler then sets ``grad_scale`` and ``found_inf`` on this optimizer
        # around ``step()`` instead of unscaling the gradients itself.
        self._step_supports_amp_scaling = capturable

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's, keeping the moments fp32: torch casts them to a half parameter's dtype."""
        super().load_state_dict(state_dict)
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        with torch.no_grad():
            for saved_id, p in zip(saved_ids, params, strict=True):
                saved = state_dict["state"].get(saved_id, {})
                for name in ("exp_avg", "exp_avg_sq"):
                    if p in self.state and isinstance(saved.get(name), torch.Tensor):
                        self.state[p][name] = saved[name].to(p.device, torch.float32).clone()

    def _step(self) -> None:
        found = getattr(self, "found_inf", None)  # set by torch.amp.GradScaler around step()
        found_inf = float(found) if self.capturable and found is not None else 0.0
        for group, masters in zip(self.param_groups, self._masters_by_group(), strict=True):
            if not group["params"]:
                continue
            self._advance_step(group, found_inf)
            params = self._with_grads(group)
            for p in params:
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p).float()
                    state["exp_avg_sq"] = torch.zeros_like(p).float()
            if found_inf != 0.0:
                continue  # the capturable kernel returns at once
            for p in params:
                self._update(p, group, masters.get(id(p)))

    def _masters_by_group(self) -> list[dict[int, torch.Tensor]]:
        """Each group's masters by parameter (groups added later have none)."""
        by_group: list[dict[int, torch.Tensor]] = []
        for index, group in enumerate(self.param_groups):
            masters: dict[int, torch.Tensor] = {}
            if self.master_weights and index < len(self.param_groups_master):
                listed = self.param_groups_master[index]["params"]
                for p, master in zip(group["params"], listed, strict=False):
                    if master is not None and p.dtype in (torch.float16, torch.float32):
                        masters[id(p)] = master
            by_group.append(masters)
        return by_group

    def _advance_step(self, group: ParamGroup, found_inf: float) -> None:
        if not self.capturable:
            group["step"] = group.get("step", 0) + 1
            return
        if "step" in group:
            group["step"] += 0 if self._overflow == 1.0 else 1
        else:
            group["step"] = 1
        self._overflow = 1.0 if found_inf != 0.0 else 0.0

    def _inverse_scale(self) -> float:
        """1 / the loss scale GradScaler handed over (1 without GradScaler, or after unscale_)."""
        scale = getattr(self, "grad_scale", None)
        if scale is None:
            return 1.0
        return float(torch.as_tensor(scale).double().reciprocal().float())

    def _update(self, p: torch.Tensor, group: ParamGroup, master: torch.Tensor | None) -> None:
        grad = _grad_of(p)
        if self.capturable:
            unscaled = grad.float() * self._inverse_scale()
            grad.copy_(unscaled)  # NVIDIA's capturable kernel writes the gradient back unscaled
            g = unscaled
        else:
            g = grad.float()
        param = master if master is not None else _fp32(p)
        beta1, beta2 = group["betas"]
        step, lr, decay = group["step"], float(group["lr"]), group["weight_decay"]
        correction1, correction2 = 1.0, 1.0
        if group["bias_correction"]:
            correction1, correction2 = _bias_correction(beta1, step), _bias_correction(beta2, step)
        state = self.state[p]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        if not self.adam_w_mode:
            g = g + decay * param
        m = beta1 * exp_avg + (1 - beta1) * g
        v = beta2 * exp_avg_sq + (1 - beta2) * g * g
        denom = (v / correction2).sqrt_().add_(group["eps"])
        update = (m / correction1).div_(denom)
        if self.adam_w_mode:
            update.add_(decay * param)
        new_param = param - lr * update
        if self.capturable and master is None:
            # The capturable kernel casts the moments to the parameter's type before storing.
            m, v = _rounded_to(m, p.dtype), _rounded_to(v, p.dtype)
        exp_avg.copy_(m)
        exp_avg_sq.copy_(v)
        if master is not None:
            master.copy_(new_param)
        p.copy_(new_param)


class FusedLAMB(_NvidiaOptimizer):
    """NVIDIA's FusedLAMB (the NVLAMB variant), with NVIDIA's two kernel stages.

    Gradients are divided by ``global_norm / max_grad_norm`` when the global L2 norm of all
    gradients exceeds ``max_grad_norm`` (the constructor's value: NVIDIA reads
    ``defaults['max_grad_norm']``, not the group's; ``max_grad_norm=0`` therefore divides every
    gradient by infinity, as on NVIDIA's). Moments use ``beta3 = 1 - beta1`` with
    ``grad_averaging`` (else 1) and have the parameter's dtype; ``update = m_hat / (sqrt(v_hat)
    + eps)`` plus ``weight_decay * p`` (``adam_w_mode``; else the decay is added to the clipped
    gradient) is stored into the gradient in the parameter's dtype; the per-tensor trust ratio
    ``||p|| / ||update||`` (norms of the stored values, the parameter's taken before the step)
    applies when ``weight_decay != 0`` or ``use_nvlamb`` and both norms are non-zero.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        adam_w_mode: bool = True,
        grad_averaging: bool = True,
        set_grad_none: bool = True,
        max_grad_norm: float = 1.0,
        use_nvlamb: bool = False,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(
            lr=lr,
            bias_correction=bias_correction,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            grad_averaging=grad_averaging,
            max_grad_norm=max_grad_norm,
        )
        super().__init__(params, defaults, set_grad_none)
        self.adam_w_mode = adam_w_mode
        self.use_nvlamb = use_nvlamb

    def _step(self) -> None:
        clip = self._clip_divisor()
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            for launch in _by_kernel_dtype(self._with_grads(group)):
                for p in launch:
                    state = self.state[p]
                    if len(state) == 0:
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                param_norms = [float(torch.linalg.vector_norm(p.float())) for p in launch]
                for p in launch:
                    self._stage1(p, group, clip)
                for p, param_norm in zip(launch, param_norms, strict=True):
                    self._stage2(p, group, param_norm)

    def _clip_divisor(self) -> float:
        """NVIDIA's ``clipped_global_grad_norm`` from the norms of the fp32 and half grads."""
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norms = [
            torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g.float()) for g in same_kind])
            )
            for same_kind in (
                [g for g in grads if g.dtype == torch.float32],
                [g for g in grads if g.dtype != torch.float32],
            )
            if same_kind
        ]
        global_norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
        max_norm = float(self.defaults["max_grad_norm"])
        if global_norm > max_norm:
            return global_norm / max_norm if max_norm != 0 else math.inf
        return 1.0

    def _stage1(self, p: torch.Tensor, group: ParamGroup, clip: float) -> None:
        """Moments, and the update stored into the gradient (NVIDIA's stage-1 kernel)."""
        beta1, beta2 = group["betas"]
        beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
        step, decay = group["step"], group["weight_decay"]
        correction1, correction2 = 1.0, 1.0
        if group["bias_correction"]:
            correction1, correction2 = _bias_correction(beta1, step), _bias_correction(beta2, step)
        grad = _grad_of(p)
        state = self.state[p]
        param = p.float()
        g = grad.float() / clip
        if not self.adam_w_mode:
            g = g + decay * param
        m = state["exp_avg"].float() * beta1 + beta3 * g
        v = state["exp_avg_sq"].float() * beta2 + (1 - beta2) * g * g
        denom = (v / correction2).sqrt_().add_(group["eps"])
        update = (m / correction1).div_(denom)
        if self.adam_w_mode:
            update.add_(decay * param)
        grad.copy_(update)
        state["exp_avg"].copy_(m)
        state["exp_avg_sq"].copy_(v)

    def _stage2(self, p: torch.Tensor, group: ParamGroup, param_norm: float) -> None:
        """The trust-ratio step from the stored update (NVIDIA's stage-2 kernel)."""
        update = _grad_of(p).float()
        ratio = float(group["lr"])
        if self.use_nvlamb or group["weight_decay"] != 0:
            update_norm = float(torch.linalg.vector_norm(update))
            if update_norm != 0 and param_norm != 0:
                ratio = ratio * (param_norm / update_norm)
        p.copy_(p.float() - ratio * update)


class FusedNovoGrad(_NvidiaOptimizer):
    """NVIDIA's FusedNovoGrad: Adam-like with a per-tensor second moment.

    Per tensor, the gradient norm ``n`` (L2, or the max-norm with ``norm_type=0``) is blended
    into ``v``: ``v = sqrt(beta2 * v**2 + (1 - beta2) * n**2)`` (L2) or ``beta2 * v + (1 -
    beta2) * n`` (max-norm), starting from the first step's norms (from 0 with ``init_zero``);
    ``denom = v / sqrt(bc2) + eps``. With ``reg_inside_moment`` the decay enters the moment:
    ``m = beta1 * m + beta3 * (g / denom + wd * p)``, ``p -= lr * m / bc1``; otherwise ``m = beta1
    * m + beta3 * g``, ``p -= lr * (m / bc1 / denom + wd * p)``. As in NVIDIA's, ``exp_avg`` has
    the parameter's dtype and the norms are the group's ``exp_avg_sq``: ``[half norms, fp32
    norms]``, fp32 tensors with one entry per parameter that had a gradient at the first step,
    in order; a later step with another set of parameters raises (NVIDIA's asserts).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        reg_inside_moment: bool = False,
        grad_averaging: bool = True,
        norm_type: int = 2,
        init_zero: bool = False,
        set_grad_none: bool = True,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedNovoGrad does not support the AMSGrad variant.")
        if norm_type not in (0, 2):
            raise RuntimeError("FusedNovoGrad only support l2/inf norm now.")
        defaults = dict(
            lr=lr,
            bias_correction=bias_correction,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            grad_averaging=grad_averaging,
            norm_type=norm_type,
            init_zero=init_zero,
        )
        super().__init__(params, defaults, set_grad_none)
        self.moment_mode = 0 if reg_inside_moment else 1

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:  # NVIDIA's: the norms follow the parameters' device
            if group["params"] and "exp_avg_sq" in group:
                device = group["params"][0].device
                group["exp_avg_sq"] = [norms.to(device) for norms in group["exp_avg_sq"]]

    def _step(self) -> None:
        for index, group in enumerate(self.param_groups):
            group["step"] = group.get("step", 0) + 1
            params = self._with_grads(group)
            half = [p for p in params if p.dtype != torch.float32]
            full = [p for p in params if p.dtype == torch.float32]
            for p in params:
                if len(self.state[p]) == 0:
                    self.state[p]["exp_avg"] = torch.zeros_like(p)
            current = [self._grad_norms(half, group), self._grad_norms(full, group)]
            if "exp_avg_sq" not in group:
                device = self._norms_device()
                start = [torch.zeros_like(n) if group["init_zero"] else n for n in current]
                group["exp_avg_sq"] = [norms.to(device) for norms in start]
            self._check_norm_layout(index, group, current)
            launches = zip((half, full), group["exp_avg_sq"], current, strict=True)
            for launch, norms, fresh in launches:
                if not launch:
                    continue
                self._blend(norms, fresh.to(norms.device), group)
                for p, norm in zip(launch, norms.tolist(), strict=True):
                    self._update(p, group, norm)

    def _norms_device(self) -> torch.device:
        """NVIDIA's: the device of the first group's first parameter (of any, here)."""
        for group in self.param_groups:
            for p in group["params"]:
                return p.device
        return torch.device("cpu")

    @staticmethod
    def _grad_norms(params: list[torch.Tensor], group: ParamGroup) -> torch.Tensor:
        if not params:
            return torch.zeros(0)
        grads = [_grad_of(p).float() for p in params]
        if group["norm_type"] == 0:
            return torch.stack([g.abs().max() if g.numel() else g.new_zeros(()) for g in grads])
        return torch.stack([torch.linalg.vector_norm(g) for g in grads])

    @staticmethod
    def _check_norm_layout(index: int, group: ParamGroup, current: list[torch.Tensor]) -> None:
        for kind, norms, fresh in zip(("half", "fp32"), group["exp_avg_sq"], current, strict=True):
            if norms.numel() != fresh.numel():
                raise RuntimeError(
                    f"FusedNovoGrad keeps one norm per {kind} parameter that had a gradient at "
                    f"its first step: group {index} had {norms.numel()} then and has "
                    f"{fresh.numel()} now (NVIDIA's FusedNovoGrad fails this assertion too); "
                    "give every parameter a gradient at every step, or build the optimizer "
                    "after the set of trained parameters is final."
                )

    @staticmethod
    def _blend(norms: torch.Tensor, fresh: torch.Tensor, group: ParamGroup) -> None:
        beta2 = group["betas"][1]
        if group["norm_type"] == 0:
            norms.copy_(beta2 * norms + (1 - beta2) * fresh)
        else:
            norms.copy_((beta2 * norms * norms + (1 - beta2) * fresh * fresh).sqrt())

    def _update(self, p: torch.Tensor, group: ParamGroup, grad_norm: float) -> None:
        beta1, beta2 = group["betas"]
        beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
        step, decay, lr = group["step"], group["weight_decay"], float(group["lr"])
        correction1, correction2 = 1.0, 1.0
        if group["bias_correction"]:
            correction1 = _bias_correction(beta1, step)
            correction2 = float(torch.tensor(math.sqrt(1.0 - math.pow(beta2, step))).float())
        denom = grad_norm / correction2 + group["eps"]
        exp_avg = self.state[p]["exp_avg"]
        param = _fp32(p)
        g = _grad_of(p).float()
        if self.moment_mode == 0:
            m = beta1 * exp_avg.float() + beta3 * (g / denom + decay * param)
            new_param = param - lr * (m / correction1)
        else:
            m = beta1 * exp_avg.float() + beta3 * g
            new_param = param - lr * ((m / correction1) / denom + decay * param)
        exp_avg.copy_(m)
        p.copy_(new_param)


class FusedAdagrad(_NvidiaOptimizer):
    """NVIDIA's FusedAdagrad: ``h += g*g``, ``p -= lr * g / (sqrt(h) + eps)``; weight decay
    on the gradient, or decoupled (``+ wd * p`` on the update) with ``adagrad_w_mode``.
    The accumulator is ``state[p]['sum']`` in the parameter's dtype (NVIDIA's ``zeros_like``);
    the update is computed in fp32. No step count.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        set_grad_none: bool = True,
        adagrad_w_mode: bool = False,
    ) -> None:
        defaults = dict(lr=lr, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults, set_grad_none)
        self.adagrad_w_mode = adagrad_w_mode

    def _step(self) -> None:
        for group in self.param_groups:
            for p in self._with_grads(group):
                if len(self.state[p]) == 0:
                    self.state[p]["sum"] = torch.zeros_like(p)
                self._update(p, group)

    def _update(self, p: torch.Tensor, group: ParamGroup) -> None:
        decay, lr, eps = group["weight_decay"], group["lr"], group["eps"]
        accumulator = self.state[p]["sum"]
        param = _fp32(p)
        g = _grad_of(p).float()
        if not self.adagrad_w_mode:
            g = g + decay * param
        h = accumulator.float() + g * g
        update = g / (h.sqrt() + eps)
        if self.adagrad_w_mode:
            update = update + decay * param
        new_param = param - lr * update
        accumulator.copy_(h)
        p.copy_(new_param)
