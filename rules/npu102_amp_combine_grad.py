"""NPU102: `amp.initialize(...)` of fused optimizers without `combine_grad=True`."""

from __future__ import annotations

import re

import libcst as cst

from migrator.callargs import append_arg, find_keyword, keyword
from migrator.names import Ambiguous
from migrator.rule import FixSafety, Rule

AMP_INITIALIZE = "apex.amp.initialize"


class AmpCombineGrad(Rule):
    """
    ## What it does
    Adds `combine_grad=True` to `apex.amp.initialize(...)` calls.

    ## Why
    On Ascend, `combine_grad=True` packs the gradients into flat buffers so that unscaling, the
    overflow check and `zero_grad` run once per buffer instead of once per tensor.

    ## Example
    ```python
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    ```

    ## Use instead
    ```python
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2", combine_grad=True)
    ```

    ## Fix safety
    Safe: the gradients keep their values; only their storage changes.
    """

    CODE = "NPU102"
    NAME = "amp-combine-grad"
    SUMMARY = "`amp.initialize(...)` without `combine_grad=True`"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"\binitialize\b")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualified_name_in(original_node.func, {AMP_INITIALIZE})
        if isinstance(name, Ambiguous):
            self.report(
                original_node,
                f"cannot tell whether this is `apex.amp.initialize`: {name.describe()}; "
                "add `combine_grad=True` by hand if it is",
            )
            return updated_node
        if name != AMP_INITIALIZE:
            return updated_node
        if find_keyword(original_node, "combine_grad") is not None:
            return updated_node
        if not self.fix(original_node, "added `combine_grad=True` to `amp.initialize`"):
            return updated_node
        return append_arg(updated_node, keyword("combine_grad", cst.Name("True")))
