"""NPU931: torch APIs that the selected torch_npu release supports with different behaviour."""

from __future__ import annotations

from migrator.api_tables import ApiEntry
from migrator.diagnostics import Severity
from migrator.rules.preflight_api._common import ApiTableRule, source_of


class TorchApiBehaviourNote(ApiTableRule):
    """
    ## What it does
    Reports, at info level, uses of torch APIs that the selected torch_npu release
    (`--torch-npu-version`) supports with a restriction that matters when porting: CUDA graphs
    (`torch.cuda.CUDAGraph`, `torch.cuda.graph`, `make_graphed_callables`: inference only),
    `torch.cuda.get_device_properties(...)` (no `major` / `minor`), `nn.LSTM` arguments,
    `DataLoader` workers with NPU tensors, optimizers' `foreach`, `torch.compile` backends and
    about 70 more. The note is also given for the torch_npu spelling of the API
    (`torch.npu.NPUGraph`), so it survives the migration. Resolution is NPU930's. Each note
    is given once per file, at its first use, with the lines of the later uses it covers
    (`init_process_group` and `new_group` share one note).

    ## Why
    The program runs, but not quite as on a GPU: a training step captured in a graph, a
    capability check on `.major`, or a feature flag that torch_npu ignores changes results or
    speed without an error.

    ## Example
    ```python
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = step(batch)
    ```

    ## Use instead
    Keep graph capture for inference; run training steps eagerly on Ascend.

    ## Fix safety
    No fix: the note asks for a decision, not an edit.
    """

    CODE = "NPU931"
    UNSUPPORTED_API_SHEET = True
    NAME = "torch-api-behaviour-note"
    SUMMARY = "torch API that the selected torch_npu release supports with a restriction"
    STATUS = "supported-with-note"
    SEVERITY = Severity.INFO
    ONCE_PER_NOTE = True

    def describe(self, name: str, entry: ApiEntry, release: str) -> str:
        return f"`{name}` on Ascend ({source_of(entry, release)}): {entry.note}"
