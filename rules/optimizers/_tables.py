"""The optimizer tables of the NPU1xx rules (DOMAIN.md section 2 and 3). Not a rule.

Which constructors have an NPU fused version, their signatures and which of their arguments can
be dropped, kept or block the rewrite; the apex optimizers without one; ``amp.initialize``'s
signature and the opt levels at which Ascend apex accepts NPU fused optimizers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

AMP_INITIALIZE = "apex.amp.initialize"
AMP_OPTIMIZERS_POSITION = 1

APEX_HOME = "apex.optimizers"
TORCH_NPU_HOME = "torch_npu.optim"
# Ascend's fused optimizers, also under the module that defines each one
# (`from apex.optimizers.npu_fused_adam import NpuFusedAdam`): (home, class).
NPU_FUSED = re.compile(r"(apex\.optimizers|torch_npu\.optim)(?:\.npu_fused_\w+)?\.(NpuFused\w+)")

# Roots of every qualified name the NPU1xx rules look for, for the candidate filter
# Rule.may_name. One set for all of them: the index computes the names reaching a set of roots
# once per file and set, and the resolution of a name is shared by every rule that asks.
NPU1_ROOTS = frozenset({"torch", "apex", "torch_npu"})

# Text without which a file has no optimizer constructor to rewrite or report (NPU101's
# trigger): every spelling of torch.optim, apex.optimizers and torch_npu.optim contains "optim";
# the class names cover names bound elsewhere (`from mylib import SGD`). "Fused" covers NpuFused.
OPTIMIZER_TRIGGER = ("optim", "Optim", "SGD", "Adam", "Adadelta", "RMSprop", "Fused")

# Target signatures (Ascend apex and torch_npu agree): positional order after `params`.
TARGET_PARAMETERS: dict[str, tuple[str, ...]] = {
    "NpuFusedSGD": ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "NpuFusedAdam": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "NpuFusedAdamW": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "NpuFusedAdadelta": ("params", "lr", "rho", "eps", "weight_decay"),
    "NpuFusedRMSprop": (
        "params",
        "lr",
        "alpha",
        "eps",
        "weight_decay",
        "momentum",
        "centered",
    ),
}


@dataclass(frozen=True)
class Source:
    """A constructor with an NPU fused version. ``target`` is None when an argument decides it."""

    display: str
    target: str | None
    positional: tuple[str, ...]
    keyword_only: tuple[str, ...] = ()
    # For NVIDIA apex's classes: the torch optimizer to use instead when the NPU fused one cannot
    # be used (they need apex's CUDA extension `amp_C`, which Ascend's apex lacks).
    unfused_replacement: str | None = None
    # The torch class with the same arithmetic for each NPU fused target (FusedSGD's
    # torch.optim.SGD; FusedAdam's torch.optim.AdamW, or Adam with `adam_w_mode=False`): the class
    # a path that cannot be fused keeps instead (see the planner's KeptWhen). It takes the
    # arguments rewritten for the target with the same meaning and defaults.
    unfused_classes: tuple[tuple[str, str], ...] = ()
    # FusedSGD's `lr` has no default; torch.optim.SGD's is 1e-3.
    requires_lr: bool = False
    # For Ascend apex's own fused classes (`apex.optimizers.NpuFusedSGD`): the class is already
    # the NPU one, and only its home may change, to torch_npu's class of the same name.
    npu_class: bool = False

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.positional + self.keyword_only

    def unfused_class(self, target: str) -> str | None:
        return dict(self.unfused_classes).get(target)

    @property
    def target_hint(self) -> str:
        """The NPU fused class as messages name it: FusedAdam's depends on `adam_w_mode`."""
        if self.target is None:
            return "`NpuFusedAdamW` (`NpuFusedAdam` with `adam_w_mode=False`)"
        return f"`{self.target}`"


_TORCH_SGD = Source(
    "torch.optim.SGD",
    "NpuFusedSGD",
    ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    ("maximize", "foreach", "differentiable", "fused"),
)
_TORCH_ADAM = Source(
    "torch.optim.Adam",
    "NpuFusedAdam",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    ("foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay"),
)
_TORCH_ADAMW = Source(
    "torch.optim.AdamW",
    "NpuFusedAdamW",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    ("maximize", "foreach", "capturable", "differentiable", "fused"),
)
_TORCH_ADADELTA = Source(
    "torch.optim.Adadelta",
    "NpuFusedAdadelta",
    ("params", "lr", "rho", "eps", "weight_decay", "foreach"),
    ("capturable", "maximize", "differentiable"),
)
_TORCH_RMSPROP = Source(
    "torch.optim.RMSprop",
    "NpuFusedRMSprop",
    (
        "params",
        "lr",
        "alpha",
        "eps",
        "weight_decay",
        "momentum",
        "centered",
        "capturable",
        "foreach",
        "maximize",
        "differentiable",
    ),
)
_APEX_SGD = Source(
    "apex.optimizers.FusedSGD",
    "NpuFusedSGD",
    (
        "params",
        "lr",
        "momentum",
        "dampening",
        "weight_decay",
        "nesterov",
        "wd_after_momentum",
        "materialize_master_grads",
        "set_grad_none",
    ),
    unfused_replacement="`torch.optim.SGD`",
    unfused_classes=(("NpuFusedSGD", "torch.optim.SGD"),),
    requires_lr=True,
)
_APEX_ADAM = Source(
    "apex.optimizers.FusedAdam",
    None,  # adam_w_mode picks NpuFusedAdamW (default) or NpuFusedAdam
    (
        "params",
        "lr",
        "bias_correction",
        "betas",
        "eps",
        "adam_w_mode",
        "weight_decay",
        "amsgrad",
        "set_grad_none",
        "capturable",
        "master_weights",
    ),
    unfused_replacement="`torch.optim.AdamW` (`torch.optim.Adam` for `adam_w_mode=False`)",
    unfused_classes=(("NpuFusedAdamW", "torch.optim.AdamW"), ("NpuFusedAdam", "torch.optim.Adam")),
)

# Every public spelling of each source: the package attribute and the defining submodule.
SOURCES: dict[str, Source] = {
    "torch.optim.SGD": _TORCH_SGD,
    "torch.optim.sgd.SGD": _TORCH_SGD,
    "torch.optim.Adam": _TORCH_ADAM,
    "torch.optim.adam.Adam": _TORCH_ADAM,
    "torch.optim.AdamW": _TORCH_ADAMW,
    "torch.optim.adamw.AdamW": _TORCH_ADAMW,
    "torch.optim.Adadelta": _TORCH_ADADELTA,
    "torch.optim.adadelta.Adadelta": _TORCH_ADADELTA,
    "torch.optim.RMSprop": _TORCH_RMSPROP,
    "torch.optim.rmsprop.RMSprop": _TORCH_RMSPROP,
    "apex.optimizers.FusedSGD": _APEX_SGD,
    "apex.optimizers.fused_sgd.FusedSGD": _APEX_SGD,
    "apex.optimizers.FusedAdam": _APEX_ADAM,
    "apex.optimizers.fused_adam.FusedAdam": _APEX_ADAM,
}

_LAMB_ADVICE = (
    "Ascend's `NpuFusedLamb` has no bias correction, clamps the weight norm at 10 and always "
    "applies the trust ratio, so it trains differently: switch to it only after comparing loss "
    "curves, or keep a pure-PyTorch LAMB"
)
# apex optimizers with no exact NPU version: reported, never rewritten.
UNSUPPORTED: dict[str, str] = {
    "apex.optimizers.FusedLAMB": _LAMB_ADVICE,
    "apex.optimizers.fused_lamb.FusedLAMB": _LAMB_ADVICE,
    "apex.optimizers.FusedMixedPrecisionLamb": _LAMB_ADVICE,
    "apex.optimizers.fused_mixed_precision_lamb.FusedMixedPrecisionLamb": _LAMB_ADVICE,
    "apex.optimizers.FusedNovoGrad": (
        "it is a CUDA extension with no NPU version: use a pure-PyTorch NovoGrad, or "
        "`torch_npu.optim.NpuFusedAdamW` if switching algorithms is acceptable"
    ),
    "apex.optimizers.fused_novograd.FusedNovoGrad": (
        "it is a CUDA extension with no NPU version: use a pure-PyTorch NovoGrad, or "
        "`torch_npu.optim.NpuFusedAdamW` if switching algorithms is acceptable"
    ),
    "apex.optimizers.FusedAdagrad": (
        "it is a CUDA extension with no NPU version: use `torch.optim.Adagrad`, which runs on NPU"
    ),
    "apex.optimizers.fused_adagrad.FusedAdagrad": (
        "it is a CUDA extension with no NPU version: use `torch.optim.Adagrad`, which runs on NPU"
    ),
}
KNOWN_OPTIMIZERS = frozenset(SOURCES.keys() | UNSUPPORTED.keys())
_OPTIMIZER_MODULES = ("torch.optim", "apex.optimizers", "torch_npu.optim")
_NOT_OPTIMIZER_MODULES = ("torch.optim.lr_scheduler", "torch.optim.swa_utils")


def of_optimizer_module(name: str) -> bool:
    """``name`` is a class of ``torch.optim``, ``apex.optimizers`` or ``torch_npu.optim``
    (``torch.optim.Adagrad``, ``torch.optim.lbfgs.LBFGS``), not of their schedulers or
    averaging helpers."""
    module, _, last = name.rpartition(".")
    return (
        module.startswith(_OPTIMIZER_MODULES)
        and not module.startswith(_NOT_OPTIMIZER_MODULES)
        and last[:1].isupper()
    )


_HF_ADAMW = (
    "it has no NPU fused version: Hugging Face's AdamW adds `eps` to the square root of the "
    "second moment before the bias correction and applies the weight decay after the update, "
    "so `NpuFusedAdamW` (torch's AdamW arithmetic) trains slightly differently. It runs on NPU "
    "unfused; to fuse it, switch to `torch.optim.AdamW` (which transformers recommends in its "
    "place) after comparing loss curves, and NPU101 fuses that"
)
# Optimizers of other packages that run on NPU as they are and have no NPU fused version with
# the same arithmetic: their constructions are reported (info), never rewritten.
NO_FUSED_VERSION: dict[str, str] = {
    "transformers.AdamW": _HF_ADAMW,
    "transformers.optimization.AdamW": _HF_ADAMW,
    # transformers' name until its 2.0 release (2019): the same class (BERT-NER scripts)
    "pytorch_transformers.AdamW": _HF_ADAMW,
    "pytorch_transformers.optimization.AdamW": _HF_ADAMW,
}
NO_FUSED_ROOTS = frozenset({"transformers", "pytorch_transformers"})

# Ascend apex's own fused classes that torch_npu also has, with the same signature and update:
# only their home changes (`apex.optimizers.NpuFusedSGD` -> `torch_npu.optim.NpuFusedSGD`).
APEX_HOME_SOURCES: dict[str, Source] = {
    f"{APEX_HOME}.{target}": Source(f"{APEX_HOME}.{target}", target, positional, npu_class=True)
    for target, positional in TARGET_PARAMETERS.items()
}

FP16_OPTIMIZERS = frozenset(
    {
        "apex.fp16_utils.FP16_Optimizer",
        "apex.fp16_utils.fp16_optimizer.FP16_Optimizer",
        "apex.optimizers.FP16_Optimizer",
        "apex.optimizers.fp16_optimizer.FP16_Optimizer",
        "apex.contrib.optimizers.FP16_Optimizer",
        "apex.contrib.optimizers.fp16_optimizer.FP16_Optimizer",
    }
)

# Modules whose attributes `getattr(module, name)` may turn into an optimizer class at run time.
OPTIMIZER_MODULES = frozenset({"torch.optim", "apex.optimizers"})

# The last part of every name the NPU1xx rules resolve a callee to: a dotted callee can only
# resolve to a name that ends as it does (`x.y.SGD` is some `....SGD`), so the others are never
# resolved. A plain name may be an alias (`from torch.optim import SGD as S`) and always is.
OPTIMIZER_LAST_NAMES = frozenset(
    name.rpartition(".")[2] for name in KNOWN_OPTIMIZERS | FP16_OPTIMIZERS | {AMP_INITIALIZE}
)
FUSED_PREFIX = "NpuFused"


# -- amp.initialize's options and NPU102's opt-level option ------------------------------------

NPU102 = "NPU102"
OPT_LEVEL_OPTION = "opt-level"  # [tool.npu-migrate.rules.NPU102] opt-level = "O2"
NPU102_OPTIONS = (OPT_LEVEL_OPTION,)
OPT_LEVELS = ("O0", "O1", "O2", "O3")
FUSED_LEVELS = ("O1", "O2")  # where Ascend apex accepts NPU fused optimizers and combine_grad
DEFAULT_OPT_LEVEL = "O1"

# Positions in Ascend's `initialize(models, optimizers, enabled, opt_level, cast_model_type,
# patch_torch_functions, keep_batchnorm_fp32, master_weights, loss_scale, cast_model_outputs,
# num_losses, verbosity, dynamic_init_scale, scale_growth_factor, scale_backoff_factor,
# scale_window, min_loss_scale, max_loss_scale, combine_grad, combine_ddp, ddp_replica_count,
# user_cast_preferred, check_combined_tensors)`.
AMP_POSITIONS = {
    "enabled": 2,
    "opt_level": 3,
    "cast_model_type": 4,
    "patch_torch_functions": 5,
    "keep_batchnorm_fp32": 6,
    "master_weights": 7,
    "combine_grad": 18,
    "user_cast_preferred": 21,
    "check_combined_tensors": 22,
}
# Options Ascend apex refuses with a level (set to anything but None / a false value).
_O1_REFUSES = ("cast_model_type", "keep_batchnorm_fp32", "master_weights")
_O1_ONLY = ("patch_torch_functions", "user_cast_preferred")
_O1_O2_ONLY = ("combine_grad", "check_combined_tensors")


def requested_opt_level(options: Mapping[str, object]) -> str | None:
    """The ``opt-level`` of NPU102's options, validated; None when it is not set.

    Raises ValueError with the message a user sees for an unknown key or a bad value.
    """
    unknown = sorted(set(options) - set(NPU102_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown option(s) for {NPU102}: {', '.join(unknown)} "
            f"(known: {', '.join(NPU102_OPTIONS)})"
        )
    level = options.get(OPT_LEVEL_OPTION)
    if level is None:
        return None
    if level not in OPT_LEVELS:
        choices = ", ".join(f'"{choice}"' for choice in OPT_LEVELS)
        raise ValueError(
            f"{NPU102} option `{OPT_LEVEL_OPTION}` must be one of {choices} (the letter O, then "
            f"a digit), got {level!r}"
        )
    assert isinstance(level, str)
    return level
