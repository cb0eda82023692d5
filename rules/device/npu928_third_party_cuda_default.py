"""NPU928: calls of third-party helpers whose device defaults to CUDA."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from migrator.analysis.calls import argument
from migrator.analysis.names import Ambiguous
from migrator.rule import FixSafety, Rule
from migrator.rules.device._target import device_target


@dataclass(frozen=True)
class CudaDefault:
    """A helper's device parameter (its position, when it can be passed by position), what its
    CUDA default does on an NPU, and, for a parameter that only later releases have, the first
    of them and what to do on the earlier ones (which hard-code CUDA)."""

    parameter: str
    position: int | None
    effect: str
    since: str | None = None
    before: str | None = None


_AUTOCAST = CudaDefault("device", 1, "its autocast is CUDA's, so AMP is silently off")
_LOADER_EFFECT = "its prefetcher sends every batch to CUDA, which fails there"
_LOADER_BEFORE = "pass `use_prefetcher=False` and move the batches to the NPU in the training loop"
_LOADER = CudaDefault("device", None, _LOADER_EFFECT, "timm 0.9.0", _LOADER_BEFORE)
_PREFETCHER = CudaDefault(
    "device", 4, _LOADER_EFFECT, "timm 0.9.0", "move the batches to the NPU without it"
)
_SCALER = CudaDefault(
    "device",
    0,
    "its GradScaler is CUDA's and disables itself: nothing is scaled",
    "timm 1.0.12",
    'use a scaler of your own around `torch.amp.GradScaler("npu")`',
)
# Well-known helpers, by every name they are imported under. Their signatures, from the
# projects' release tags: ultralytics' `autocast(enabled: bool, device: str = "cuda")`; timm's
# `create_loader(..., device=torch.device("cuda"))` and `PrefetchLoader(loader, mean, std,
# channels, device=...)` from 0.9.0 (0.8.x pre-releases and earlier call `.cuda()`), and
# `NativeScaler(device="cuda")` from 1.0.12 (earlier: `NativeScaler()`, which builds
# `torch.cuda.amp.GradScaler()`; DeiT pins timm 0.3.2).
HELPERS = {
    "ultralytics.utils.torch_utils.autocast": _AUTOCAST,
    "timm.data.create_loader": _LOADER,
    "timm.data.loader.create_loader": _LOADER,
    "timm.data.PrefetchLoader": _PREFETCHER,
    "timm.data.loader.PrefetchLoader": _PREFETCHER,
    "timm.utils.NativeScaler": _SCALER,
    "timm.utils.cuda.NativeScaler": _SCALER,
}
ROOTS = frozenset(name.split(".")[0] for name in HELPERS)


class ThirdPartyCudaDefault(Rule):
    """
    ## What it does
    Reports calls of well-known third-party helpers whose device parameter defaults to CUDA
    when the call does not pass one: ultralytics' `autocast(enabled)` (`device="cuda"`), timm's
    `create_loader(...)` and `PrefetchLoader(...)` (`device=torch.device("cuda")`) and
    `NativeScaler()`. The message names the argument to pass, and, for a parameter that only
    later releases of the helper have, the first release that takes it and what to do on the
    earlier ones, which hard-code CUDA: timm's loaders take `device=` from 0.9.0 (before, pass
    `use_prefetcher=False` and move the batches yourself), its `NativeScaler` from 1.0.12
    (before, e.g. the 0.3.2 that DeiT-era code pins, use a scaler of your own around
    `torch.amp.GradScaler("npu")`).

    ## Why
    The helper's code is not the repository's, so npu-migrate does not migrate it, and its
    CUDA default stays: on the NPU ultralytics' autocast is CUDA's and AMP is silently off,
    timm's prefetcher sends batches to CUDA, timm's scaler scales nothing.

    ## Example
    ```python
    from ultralytics.utils.torch_utils import autocast

    with autocast(amp):
        loss = model(images)
    ```

    ## Use instead
    ```python
    with autocast(amp, device="npu"):
        loss = model(images)
    ```

    ## Fix safety
    No fix: which device the helper should use (and whether the installed release takes the
    argument) is the user's to check.
    """

    CODE = "NPU928"
    NAME = "third-party-cuda-default"
    SUMMARY = "third-party helper whose device defaults to CUDA (ultralytics, timm)"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("autocast", "create_loader", "PrefetchLoader", "NativeScaler")

    def check(self) -> None:
        for call in self.calls_to(ROOTS):
            name = self.qualified_name_in(call.func, HELPERS)
            if isinstance(name, Ambiguous):
                wanted = [candidate for candidate in name.candidates if candidate in HELPERS]
                self._report(
                    call,
                    wanted[0],
                    f"cannot tell whether this is `{wanted[0]}`: {name.describe()}; if it is, ",
                )
            elif name in HELPERS:
                self._report(call, name, "")

    def _report(self, call: ast.Call, name: str, doubt: str) -> None:
        helper = HELPERS[name]
        if argument(call, helper.parameter, helper.position) is not None:
            return
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        ):
            return  # `**options` may pass it
        device = device_target(self).device_type
        advice = f"pass `{helper.parameter}={device}`"
        if helper.since is None:
            self.report(
                call,
                f'{doubt}`{name}` defaults to `{helper.parameter}="cuda"`: on the NPU '
                f"{helper.effect}; {advice}",
            )
            return
        self.report(
            call,
            f"{doubt}`{name}` runs on CUDA: on the NPU {helper.effect}; {helper.since} and "
            f"later take `{helper.parameter}=`: {advice}; earlier releases hard-code CUDA: "
            f"upgrade, or {helper.before}",
        )
