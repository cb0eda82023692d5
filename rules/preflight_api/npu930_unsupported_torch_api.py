"""NPU930: torch APIs that the selected torch_npu release does not support."""

from __future__ import annotations

from migrator.api_tables import ApiEntry
from migrator.diagnostics import Severity
from migrator.rules.preflight_api._common import ApiTableRule, source_of


class UnsupportedTorchApi(ApiTableRule):
    """
    ## What it does
    Reports every use of a torch API that Ascend's API support list for the selected torch_npu
    release (`--torch-npu-version`, default the newest table) marks as not supported on the
    Atlas A2 / A3 training products: `torch.nn.GRU`, `torch.nn.RNN`, `torch.nn.MaxPool3d`,
    `torch.nn.functional.avg_pool3d`, the `torch.backends.cuda` attention-kernel switches,
    `torch.cuda.comm.scatter` / `gather`, `torch.cuda.memory_usage` and about 230 more.
    Names are resolved like every rule's (aliases, `from` imports); `torch.Tensor` methods are
    reported only where the receiver is provably a tensor (a torch factory call, or a name
    bound only to one, or a parameter annotated `torch.Tensor`). A name the table does not
    list is never reported. Where a more specific rule already reports the same use (NPU920 on
    `DataParallel`, NPU302 on `torch.cuda` names without an NPU counterpart), this rule stays
    silent.

    ## Why
    These calls import and run on a GPU, then fail on an Ascend machine (or run on the CPU):
    it is cheaper to learn it before the job is launched.

    ## Example
    ```python
    self.rnn = nn.GRU(512, 512, batch_first=True)
    ```

    ## Use instead
    ```python
    self.rnn = nn.LSTM(512, 512, batch_first=True)  # supported on Ascend
    ```
    or whatever the note suggests; add `[tool.npu-migrate.torch-npu-api."torch.nn.GRU"]` with
    `status = "supported"` to silence an entry your torch_npu build supports.

    ## Fix safety
    No fix: the replacement changes the model or the program's structure.
    """

    CODE = "NPU930"
    UNSUPPORTED_API_SHEET = True
    NAME = "unsupported-torch-api"
    SUMMARY = "torch API that the selected torch_npu release does not support"
    STATUS = "unsupported"
    SEVERITY = Severity.MANUAL

    def describe(self, name: str, entry: ApiEntry, release: str) -> str:
        return f"`{name}` is not supported on Ascend ({source_of(entry, release)}): {entry.note}"
