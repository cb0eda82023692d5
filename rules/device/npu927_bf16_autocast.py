"""NPU927: bf16 autocast, which the first Atlas training series (Ascend 910) does not have."""

from __future__ import annotations

import ast

from migrator.analysis.calls import argument
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import LookThrough, origins_of
from migrator.diagnostics import Severity
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import TORCH_ROOTS, last_name, torch_name

# Autocast entry points, with the position of their `dtype` parameter.
AUTOCASTS = {
    "torch.autocast": 1,
    "torch.amp.autocast": 1,
    "torch.amp.autocast_mode.autocast": 1,
    "torch.cuda.amp.autocast": 1,
    "torch.npu.amp.autocast": 1,
    "torch_npu.npu.amp.autocast": 1,
}
BFLOAT16 = frozenset({"torch.bfloat16"})
# A dtype chosen from a table (nanoGPT's `{"bfloat16": torch.bfloat16, ...}[dtype]`) or a list.
DTYPE_VALUES = LookThrough(boolean=True, containers=True, subscripts=True, attributes=True)
# A file that asks the device whether it has bf16 chooses at run time.
RUNTIME_CHECK = "is_bf16_supported"


class Bf16Autocast(Rule):
    """
    ## What it does
    Reports, at info level, autocast regions that may compute in bfloat16
    (`torch.autocast(..., dtype=torch.bfloat16)`, `torch.cuda.amp.autocast(dtype=...)` and the
    `torch.npu` spelling), with the dtype followed through names, conditional expressions and
    dtype tables (`{"bfloat16": torch.bfloat16, ...}[dtype]`). A file that asks
    `is_bf16_supported()` chooses at run time and is not reported.

    ## Why
    The first Atlas training series (Ascend 910: SoCs 910A, 910ProA, 910PremiumA, 910ProB) has
    no bf16: torch_npu's `torch.npu.is_bf16_supported()` is true only from the Ascend 910B1 on
    (Atlas A2 and A3 training series), and Ascend C's bf16 conversions list the Atlas training
    series as unsupported. A script that autocasts to bf16 unconditionally fails there, or needs
    float16 with a `GradScaler` instead.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(batch)
    ```

    ## Use instead
    ```python
    dtype = torch.bfloat16 if torch.npu.is_bf16_supported() else torch.float16
    with torch.autocast("npu", dtype=dtype):
        loss = model(batch)
    ```

    ## Fix safety
    No fix: which products the script must run on is the user's decision.
    """

    CODE = "NPU927"
    NAME = "bf16-autocast"
    SUMMARY = "bf16 autocast (no bf16 on the Atlas training series, Ascend 910)"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("autocast",)

    def check(self) -> None:
        text = self.source.text
        if RUNTIME_CHECK in text or "bfloat16" not in text:
            return
        origins = origins_of(self.view, DTYPE_VALUES)
        spellings = {"autocast", *self.index.imported_as(frozenset(AUTOCASTS))}
        for call in self.calls_to(TORCH_ROOTS | {"torch_npu"}):
            if not self.view.fast or last_name(call.func) in spellings:
                name = torch_name(self.view, call.func)
            else:
                continue
            position = AUTOCASTS.get(name or "")
            if position is None:
                continue
            given = argument(call, "dtype", position)
            if given is None:
                continue
            for origin in origins.of(given.value):
                name = self._bfloat16(origin)
                if name is None:
                    continue
                written = self.view.written(origin)
                doubt = (
                    f"cannot tell whether `{written}` is `torch.bfloat16`: {name.describe()}; if "
                    "it is, "
                    if isinstance(name, Ambiguous)
                    else ""
                )
                self.report(
                    call,
                    f"{doubt}`{self.view.written(call.func)}` may compute in bfloat16 "
                    f"(`{written}`), which the Atlas training series (Ascend 910) does not "
                    "have; Atlas A2 / A3 (Ascend 910B and later) have it: choose float16 with "
                    "a GradScaler where `torch.npu.is_bf16_supported()` is False",
                    Severity.MANUAL if doubt else Severity.INFO,
                )
                break

    def _bfloat16(self, origin: ast.AST) -> str | Ambiguous | None:
        if not isinstance(origin, (ast.Attribute, ast.Name)):
            return None
        name = self.qualified_name_in(origin, BFLOAT16)
        return name if name in BFLOAT16 or isinstance(name, Ambiguous) else None
