"""NPU306: `tensor.is_cuda`."""

from __future__ import annotations

import re

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ParentNodeProvider

from migrator.rule import FixSafety
from migrator.rules.npu3_device import (
    ACCELERATOR_TYPE,
    DeviceRule,
    add_device_import,
    expression,
    is_accelerator,
    string_body,
)

# Where a comparison needs no parentheses of its own.
STATEMENT_PARENTS = (cst.If, cst.While, cst.Assign, cst.Return, cst.Arg, cst.Assert)


class IsCuda(DeviceRule):
    """
    ## What it does
    Rewrites `x.is_cuda` to `x.is_npu` (torch_npu adds `Tensor.is_npu`) and adds
    `import torch_npu`. When the file assigns `obj.is_cuda = ...` itself, `obj.is_cuda` is the
    user's attribute, not the tensor property, and is left alone.

    With `--target accelerator`: `x.device.type == torch.accelerator.current_accelerator().type`.

    ## Why
    On Ascend a tensor's device is `npu`; `is_cuda` is always False there, so code guarded by it
    silently takes the CPU path.

    ## Example
    ```python
    if images.is_cuda:
        torch.cuda.synchronize()
    ```

    ## Use instead
    ```python
    if images.is_npu:
        torch.npu.synchronize()
    ```

    ## Fix safety
    Safe. `getattr(x, "is_cuda")` is reported.
    """

    CODE = "NPU306"
    NAME = "is-cuda"
    SUMMARY = "`tensor.is_cuda`"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"\bis_cuda\b")

    def visit_Module(self, node: cst.Module) -> None:
        finder = _AssignedIsCuda(node)
        node.visit(finder)
        self.user_attributes = finder.receivers

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if get_full_name_for_node(original_node.func) == "getattr" and len(original_node.args) > 1:
            name = original_node.args[1].value
            if isinstance(name, cst.SimpleString) and string_body(name) == "is_cuda":
                self.report(
                    original_node, '`getattr(..., "is_cuda")`: use the `.is_npu` property instead'
                )
        return updated_node

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if original_node.attr.value != "is_cuda":
            return updated_node
        receiver = cst.Module([]).code_for_node(original_node.value)
        if receiver in self.user_attributes:
            return updated_node
        if is_accelerator(self):
            return self._accelerator(original_node, updated_node)
        if not self.fix(original_node.attr, "`.is_cuda` -> `.is_npu`"):
            return updated_node
        add_device_import(self)
        return updated_node.with_changes(attr=cst.Name("is_npu"))

    def _accelerator(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if not self.fix(
            original.attr, "`.is_cuda` -> compare the device type with the accelerator's"
        ):
            return updated
        add_device_import(self)
        comparison = _with_receiver(
            expression(f"x.device.type == {ACCELERATOR_TYPE}"), updated.value
        )
        parent = self.get_metadata(ParentNodeProvider, original, None)
        if isinstance(parent, STATEMENT_PARENTS):
            return comparison
        return comparison.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _with_receiver(comparison: cst.BaseExpression, receiver: cst.BaseExpression) -> cst.Comparison:
    """Keep the receiver's own nodes (comments, formatting) instead of the re-parsed copy."""
    assert isinstance(comparison, cst.Comparison)
    left = comparison.left
    assert isinstance(left, cst.Attribute) and isinstance(left.value, cst.Attribute)
    return comparison.with_changes(
        left=left.with_changes(value=left.value.with_changes(value=receiver))
    )


class _AssignedIsCuda(cst.CSTVisitor):
    """Receivers of ``<receiver>.is_cuda = ...`` in the file: a user attribute, not the property."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__()
        self.module = module
        self.receivers: set[str] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        target = node.target
        if isinstance(target, cst.Attribute) and target.attr.value == "is_cuda":
            self.receivers.add(self.module.code_for_node(target.value))
