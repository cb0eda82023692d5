"""NPU108: optimizers chosen by name through timm or Hugging Face's `TrainingArguments`."""

from __future__ import annotations

import ast

from migrator.analysis.calls import NOT_LITERAL, argument, has_star, literal_value
from migrator.analysis.names import Ambiguous
from migrator.diagnostics import Severity
from migrator.rule import FixSafety, Rule

TIMM_FACTORIES = frozenset(
    {
        "timm.optim.create_optimizer_v2",
        "timm.optim.optim_factory.create_optimizer_v2",
        "timm.optim._optim_factory.create_optimizer_v2",
    }
)
TIMM_ARGS_FACTORIES = frozenset(
    {
        "timm.optim.create_optimizer",
        "timm.optim.optim_factory.create_optimizer",
        "timm.optim._optim_factory.create_optimizer",
    }
)
HF_ARGUMENTS = frozenset(
    {
        "transformers.TrainingArguments",
        "transformers.training_args.TrainingArguments",
        "transformers.Seq2SeqTrainingArguments",
        "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
    }
)
ROOTS = frozenset({"timm", "transformers"})

_GROUPS = (
    "with `weight_decay` and `filter_bias_and_bn=True` (the defaults) timm passes "
    "`param_groups_weight_decay(model, weight_decay)` (biases and 1-D parameters without decay) "
    "and `weight_decay=0.0` to the class"
)
_HOME = "from `apex.optimizers` instead when it goes through `amp.initialize`"
# timm's names (the part after the last `_`) -> what create_optimizer_v2 builds, and its NPU
# fused counterpart built the same way.
TIMM_CHOICES: dict[str, tuple[str, str]] = {
    "sgd": (
        "`torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, ...)`",
        "`torch_npu.optim.NpuFusedSGD(params, lr=lr, momentum=momentum, nesterov=True, ...)`",
    ),
    "nesterov": (
        "`torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, ...)`",
        "`torch_npu.optim.NpuFusedSGD(params, lr=lr, momentum=momentum, nesterov=True, ...)`",
    ),
    "momentum": (
        "`torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=False, ...)`",
        "`torch_npu.optim.NpuFusedSGD(params, lr=lr, momentum=momentum, ...)`",
    ),
    "adam": (
        "`torch.optim.Adam(params, lr=lr, ...)`",
        "`torch_npu.optim.NpuFusedAdam(params, lr=lr, ...)`",
    ),
    "adamw": (
        "`torch.optim.AdamW(params, lr=lr, ...)`",
        "`torch_npu.optim.NpuFusedAdamW(params, lr=lr, weight_decay=..., ...)` (pass the "
        "weight decay explicitly: AdamW's default 1e-2 is not timm's 0)",
    ),
    "adadelta": (
        "`torch.optim.Adadelta(params, lr=lr, ...)`",
        "`torch_npu.optim.NpuFusedAdadelta(params, lr=lr, ...)`",
    ),
    "rmsprop": (
        "`torch.optim.RMSprop(params, lr=lr, alpha=0.9, momentum=momentum, ...)`",
        "`torch_npu.optim.NpuFusedRMSprop(params, lr=lr, alpha=0.9, momentum=momentum, ...)`",
    ),
}
# Hugging Face `optim=` values with an NPU fused counterpart computing the same update.
HF_EXACT = {
    "adamw_torch": "torch.optim.AdamW",
    "adamw_torch_fused": "torch.optim.AdamW(fused=True)",
    "adamw_apex_fused": "apex's FusedAdam (AdamW mode)",
}
HF_NPU = "adamw_torch_npu_fused"


class LibraryOptimizerChoice(Rule):
    """
    ## What it does
    Reports optimizers that a library builds from a name, with the NPU fused call that
    computes the same update:

    - timm's `create_optimizer_v2(model, opt="sgd", ...)` (and `create_optimizer(args,
      model)`, which reads `args.opt`): `sgd` / `nesterov` / `momentum` (SGD, with and without
      Nesterov momentum), `adam`, `adamw`, `adadelta`, `rmsprop` (alpha 0.9) have an NPU fused
      counterpart; the message gives the class, the arguments timm passes, and the parameter
      groups it builds (`param_groups_weight_decay`). Other names, and `lookahead_` wrappers,
      are reported as having none.
    - Hugging Face `TrainingArguments(optim=...)` / `Seq2SeqTrainingArguments`: `adamw_torch`,
      `adamw_torch_fused`, `adamw_apex_fused` have `optim="adamw_torch_npu_fused"`
      (`torch_npu.optim.NpuFusedAdamW`, the same AdamW update); `adamw_hf` (Hugging Face's own
      AdamW, which decays after the update) and the others have no exact NPU fused choice.

    A name computed at run time (`opt=args.opt`) is reported with the table of names.

    ## Why
    These libraries pick the optimizer class inside their own code, which npu-migrate does
    not rewrite; the fused ones update every parameter of a group with one kernel.

    ## Example
    ```python
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05)
    ```

    ## Use instead
    ```python
    optimizer = torch_npu.optim.NpuFusedAdamW(
        param_groups_weight_decay(model, 0.05), lr=1e-3, weight_decay=0.0
    )
    ```

    ## Fix safety
    No fix: the call lives in the library (timm), or the option needs a transformers release
    that knows `adamw_torch_npu_fused`.
    """

    CODE = "NPU108"
    NAME = "library-optimizer-choice"
    SUMMARY = "optimizer chosen by name through timm or Hugging Face `TrainingArguments`"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("create_optimizer", "TrainingArguments")

    def check(self) -> None:
        wanted = TIMM_FACTORIES | TIMM_ARGS_FACTORIES | HF_ARGUMENTS
        for call in self.calls_to(ROOTS):
            name = self.qualified_name_in(call.func, wanted)
            if isinstance(name, Ambiguous):
                self.report(
                    call,
                    f"cannot tell which `{self.view.written(call.func)}` this is: "
                    f"{name.describe()}; if it is timm's or transformers', see "
                    "`npu-migrate --explain NPU108` for the NPU fused choices",
                )
            elif name in TIMM_FACTORIES:
                self._timm(call)
            elif name in TIMM_ARGS_FACTORIES:
                self._timm_args(call)
            elif name in HF_ARGUMENTS:
                self._hugging_face(call, str(name).rpartition(".")[2])

    # -- timm ------------------------------------------------------------------------------------

    def _timm(self, call: ast.Call) -> None:
        arg = argument(call, "opt", 1)
        if arg is None and has_star(call):
            self.report(
                call,
                f"timm builds the optimizer named by the `opt` its `*`/`**` arguments pass at run "
                f"time: {_timm_table()}",
                Severity.INFO,
            )
            return
        value = literal_value(arg.value) if arg is not None else "sgd"  # timm's default
        if value is NOT_LITERAL or not isinstance(value, str):
            assert arg is not None
            self.report(
                call,
                f"timm builds the optimizer named by `{self.view.written(arg.value)}` at run "
                f"time: {_timm_table()}",
                Severity.INFO,
            )
            return
        message, fused = _timm_message(value, f"`create_optimizer_v2(..., opt={value!r})`")
        self.report(call, message, Severity.MANUAL if fused else Severity.INFO)

    def _timm_args(self, call: ast.Call) -> None:
        self.report(
            call,
            f"timm's `create_optimizer(args, ...)` builds the optimizer named by `args.opt`: "
            f"{_timm_table()}",
            Severity.INFO,
        )

    # -- Hugging Face ----------------------------------------------------------------------------

    def _hugging_face(self, call: ast.Call, class_name: str) -> None:
        arg = argument(call, "optim", None)
        if arg is None:
            # The default depends on the transformers release, and `**kwargs` may set it: there
            # is nothing written here to replace.
            return
        value = literal_value(arg.value)
        written = self.view.written(arg.value)
        if value is NOT_LITERAL or not isinstance(value, str):
            self.report(
                arg.value,
                f"`{class_name}(optim={written})` is chosen at run time: "
                f"{', '.join(repr(name) for name in HF_EXACT)} have the NPU fused "
                f"`optim={HF_NPU!r}` (`torch_npu.optim.NpuFusedAdamW`, the same AdamW update)",
                Severity.INFO,
            )
            return
        if value in HF_EXACT:
            self.report(
                arg.value,
                f"`optim={written}` ({HF_EXACT[value]}) has an NPU fused equivalent: use "
                f"`optim={HF_NPU!r}` (`torch_npu.optim.NpuFusedAdamW`, the same AdamW update; "
                "transformers releases that know the name)",
            )
        elif value != HF_NPU:
            self.report(
                arg.value,
                f"`optim={written}` has no NPU fused equivalent in transformers "
                f"(only {HF_NPU!r}, AdamW); it runs on NPU unfused",
                Severity.INFO,
            )


def _timm_message(opt: str, call: str) -> tuple[str, bool]:
    """The message for timm's ``opt`` name, and whether it has an NPU fused counterpart."""
    parts = opt.lower().split("_")
    if len(parts) > 1 and parts[0] == "lookahead":
        return (
            f"{call} wraps the optimizer in timm's Lookahead, which has no NPU fused "
            "counterpart; it runs on NPU unfused",
            False,
        )
    choice = TIMM_CHOICES.get(parts[-1])
    if choice is None:
        return (
            f"{call}: {opt!r} has no NPU fused counterpart (the NPU fused optimizers are SGD, "
            "Adam, AdamW, Adadelta, RMSprop); it runs on NPU unfused",
            False,
        )
    built, fused = choice
    return f"{call} builds {built}; {_GROUPS}. On Ascend build {fused} yourself ({_HOME})", True


def _timm_table() -> str:
    names = ", ".join(f"{name!r} -> {fused}" for name, (_, fused) in TIMM_CHOICES.items())
    return f"the names with an NPU fused counterpart are {names}; {_GROUPS}"
