"""NPU108: optimizers chosen by name through timm, Hugging Face's `TrainingArguments`, or a
dotted class path (`class_name="torch.optim.Adam"`)."""

from __future__ import annotations

import ast

from migrator.analysis.calls import NOT_LITERAL, argument, has_star, literal_value
from migrator.analysis.names import Ambiguous
from migrator.diagnostics import Severity
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._tables import SOURCES, UNSUPPORTED

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
# Keys whose string names the class that code builds by its dotted path: dnnlib's
# `construct_class_by_name(class_name=...)` (NVlabs' StyleGAN2-ADA, StyleGAN3, EDM) and Hydra's
# `instantiate` (`_target_`).
DOTTED_KEYS = frozenset({"class_name", "_target_"})


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
    - a class named by its dotted path, as the value of `class_name=` (dnnlib's
      `construct_class_by_name`: NVlabs' StyleGAN2-ADA, StyleGAN3 and EDM build their Adam from
      `EasyDict(class_name="torch.optim.Adam", ...)`) or `_target_=` (Hydra's `instantiate`),
      as a keyword or a dict key: torch's SGD, Adam, AdamW, Adadelta and RMSprop have an NPU
      fused counterpart to name there once the code that builds and steps it is checked
      against the fused optimizers' contract; NVIDIA apex's classes do not run on Ascend.
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
    SUMMARY = "optimizer chosen by name through timm, Hugging Face or a dotted class path"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("create_optimizer", "TrainingArguments", "class_name", "_target_")

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
        for key, value in self._dotted_paths():
            self._dotted(key, value)

    # -- dotted class paths ----------------------------------------------------------------------

    def _dotted_paths(self) -> list[tuple[str, ast.expr]]:
        """``(key, value)`` for every ``class_name=`` / ``_target_=`` keyword of a call, and
        every such key of a dict display, in line order."""
        found: list[tuple[str, ast.expr]] = []
        for call in self.index.nodes(ast.Call):
            found += [(k.arg, k.value) for k in call.keywords if k.arg in DOTTED_KEYS]
        for display in self.index.nodes(ast.Dict):
            for key, value in zip(display.keys, display.values, strict=True):
                name = literal_value(key) if key is not None else None
                if isinstance(name, str) and name in DOTTED_KEYS:
                    found.append((name, value))
        found.sort(key=lambda item: (item[1].lineno, item[1].col_offset))
        return found

    def _dotted(self, key: str, value: ast.expr) -> None:
        path = literal_value(value)
        if not isinstance(path, str):
            return
        written = f"`{key}={path!r}`"
        builder = (
            "dnnlib's `construct_class_by_name`" if key == "class_name" else "Hydra's `instantiate`"
        )
        builder = f"code that builds the class by its dotted path ({builder})"
        if path in UNSUPPORTED:
            self.report(
                value,
                f"{written} names NVIDIA apex's `{path.rpartition('.')[2]}` for {builder}: "
                f"{UNSUPPORTED[path]}",
            )
            return
        source = SOURCES.get(path)
        if source is None or source.npu_class:
            return
        target = f"{source.target_hint} from `torch_npu.optim`"
        if source.unfused_replacement is not None:
            self.report(
                value,
                f"{written} names NVIDIA apex's `{source.display}` for {builder}, which "
                f"npu-migrate does not follow; it does not run on Ascend (it needs apex's CUDA "
                f"extension `amp_C`): name {target} there ({_HOME}), or "
                f"{source.unfused_replacement}",
            )
            return
        self.report(
            value,
            f"{written} names `{source.display}` for {builder}, which npu-migrate does not "
            f"follow: name {target} there ({_HOME}) once that code is "
            "checked against the NPU fused optimizers' contract (no `zero_grad(set_to_none="
            "True)`, no parameter re-allocated between steps, no group added after the first "
            "step), or leave it: it runs on NPU unfused",
        )

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
