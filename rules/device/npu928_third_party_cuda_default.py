"""NPU928: calls of third-party helpers whose device defaults to CUDA."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migrator.analysis.calls import argument
from migrator.analysis.index import ModuleIndex
from migrator.analysis.names import Ambiguous
from migrator.analysis.project import Facts, Module
from migrator.rule import FixSafety, Linking, Rule
from migrator.rules.device import _reexports as reexports
from migrator.rules.device._reexports import Export
from migrator.rules.device._target import device_target
from migrator.settings import Settings


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

    A helper that a module of the run re-exports is followed: yolov5's `utils/torch_utils.py`
    imports ultralytics' `autocast as smart_amp_autocast`, and its training scripts call
    `smart_amp_autocast(amp)` imported from there. A call of a name that the file imports from
    a module of the run (under any alias, by `from ... import` or as an attribute of the module)
    is the helper's when that module binds the name by importing the helper, directly or through
    up to four such modules (a package's `__init__.py`); it is reported as a direct call is. When
    that module also defines or assigns the name, or binds it by a `try`/`except` fallback, or
    the caller gets it by a star import, or the caller's import could name another file too
    (depending on how the program is run), the call is reported with that doubt. Not followed:
    a name re-exported by a star import, and a re-exported module of the helper's library
    (`from ultralytics.utils import torch_utils`).

    ## Why
    The helper's code is not the repository's, so npu-migrate does not migrate it, and its
    CUDA default stays: on the NPU ultralytics' autocast is CUDA's and AMP is silently off,
    timm's prefetcher sends batches to CUDA, timm's scaler scales nothing.

    ## Example
    ```python
    from ultralytics.utils.torch_utils import autocast

    with autocast(amp):
        loss = model(images)

    # train.py, with utils/torch_utils.py re-exporting it as smart_amp_autocast
    from utils.torch_utils import smart_amp_autocast

    with smart_amp_autocast(amp):
        loss = model(images)
    ```

    ## Use instead
    ```python
    with autocast(amp, device="npu"):
        loss = model(images)

    with smart_amp_autocast(amp, device="npu"):
        loss = model(images)
    ```

    ## Fix safety
    No fix: which device the helper should use (and whether the installed release takes the
    argument) is the user's to check. Re-exports are seen only among the files of the run:
    `npu-migrate train.py` alone does not know what `utils/torch_utils.py` binds.
    """

    CODE = "NPU928"
    NAME = "third-party-cuda-default"
    SUMMARY = "third-party helper whose device defaults to CUDA (ultralytics, timm)"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("autocast", "create_loader", "PrefetchLoader", "NativeScaler")
    # Modules that import a helper may re-export it to the files that call it (_reexports).
    PROJECT_TRIGGER = tuple(sorted(ROOTS))

    @classmethod
    def triggers(cls, settings: Settings) -> tuple[str, ...]:
        """The helpers' names, and the names the run's modules re-export them under."""
        return cls.TRIGGER + reexports.linked_words(settings.project, cls.project_key())

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        return reexports.wants_summary(source, HELPERS)

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        return reexports.summarize(index, module.path, HELPERS)

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        summaries = linking.project.summaries(cls.project_key())
        return reexports.link(linking.files, summaries, HELPERS)

    def check(self) -> None:
        reexported = reexports.linked_names(self.project, self.project_key(), self.context.path)
        wanted = HELPERS.keys() | reexported.keys()
        for call in self._candidates(reexported):
            name = self.qualified_name_in(call.func, wanted)
            if isinstance(name, Ambiguous):
                first = next(candidate for candidate in name.candidates if candidate in wanted)
                self._report(call, reexported.get(first, Export(first)), name.describe())
            elif name is not None:
                export = reexported.get(name, Export(name))
                self._report(call, export, export.doubt)

    def _candidates(self, reexported: Mapping[str, Export]) -> Iterable[ast.Call]:
        """The calls that may be of a helper: in a file that calls one by a name a module of
        the run re-exports it under, every call (their names start anywhere)."""
        return self.index.nodes(ast.Call) if reexported else self.calls_to(ROOTS)

    def _report(self, call: ast.Call, export: Export, doubt: str) -> None:
        name = export.helper
        helper = HELPERS[name]
        if argument(call, helper.parameter, helper.position) is not None:
            return
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        ):
            return  # `**options` may pass it
        device = device_target(self).device_type
        advice = f"pass `{helper.parameter}={device}`"
        prefix = f"cannot tell whether this is `{name}`: {doubt}; if it is, " if doubt else ""
        if helper.since is None:
            self.report(
                call,
                f'{prefix}`{name}` defaults to `{helper.parameter}="cuda"`: on the NPU '
                f"{helper.effect}; {advice}",
            )
            return
        self.report(
            call,
            f"{prefix}`{name}` runs on CUDA: on the NPU {helper.effect}; {helper.since} and "
            f"later take `{helper.parameter}=`: {advice}; earlier releases hard-code CUDA: "
            f"upgrade, or {helper.before}",
        )
