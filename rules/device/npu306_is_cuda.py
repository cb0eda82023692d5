"""NPU306: `tensor.is_cuda`."""

from __future__ import annotations

import ast

from migrator.analysis.calls import arguments
from migrator.analysis.index import full_name
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import add_device_import, expression, string_body
from migrator.rules.device._guards import held_guards, held_message
from migrator.rules.device._target import DeviceTarget, NoCounterpart, device_target

# Where a comparison needs no parentheses of its own.
STATEMENT_PARENTS = (ast.If, ast.While, ast.Assign, ast.Return, ast.Assert, ast.keyword)


class IsCuda(Rule):
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
    TRIGGER = ("is_cuda",)

    def check(self) -> None:
        for call in self.index.nodes(ast.Call):
            if _is_getattr_is_cuda(self, call):
                self.report(call, '`getattr(..., "is_cuda")`: use the `.is_npu` property instead')
        user_attributes = {
            self.code(target.value)
            for assign in self.index.nodes(ast.Assign)
            for target in assign.targets
            if isinstance(target, ast.Attribute) and target.attr == "is_cuda"
        }
        target = device_target(self)
        renamed = target.is_cuda_property
        held = held_guards(self.view, self.project, self.context.path)
        for attribute in self.index.attributes("is_cuda"):
            if self.code(attribute.value) in user_attributes:
                continue
            if id(attribute) in held:
                written = self.view.written(attribute)
                new = (
                    f"{written[: -len('is_cuda')]}{renamed}"
                    if isinstance(renamed, str)
                    else (
                        f"{self.view.written(attribute.value)}.device.type == {target.device_type}"
                    )
                )
                guard = held[id(attribute)]
                self.report(
                    self.attr_position(attribute), held_message(written, new, guard), guard.severity
                )
                continue
            if isinstance(renamed, NoCounterpart):
                self._compare_device_type(attribute, target)
                continue
            edit = self.replace(
                attribute, cst.Attribute, lambda node: node.with_changes(attr=cst.Name(renamed))
            )
            if self.fix(self.attr_position(attribute), f"`.is_cuda` -> `.{renamed}`", edit):
                add_device_import(self)

    def _compare_device_type(self, attribute: ast.Attribute, target: DeviceTarget) -> None:
        """``x.is_cuda`` -> ``x.device.type == <device type>``, for a target without a
        property of its own."""
        parent = self.index.parent(attribute)
        bare = isinstance(parent, STATEMENT_PARENTS) or (
            isinstance(parent, ast.Call) and attribute is not parent.func
        )

        def compared(node: cst.Attribute) -> cst.BaseExpression:
            comparison = _with_receiver(
                expression(f"x.device.type == {target.device_type}"), node.value
            )
            if bare:
                return comparison
            return comparison.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

        if self.fix(
            self.attr_position(attribute),
            "`.is_cuda` -> compare the device type with the accelerator's",
            self.replace(attribute, cst.Attribute, compared),
        ):
            add_device_import(self)


def _is_getattr_is_cuda(rule: Rule, call: ast.Call) -> bool:
    given = arguments(call)
    return (
        full_name(call.func) == "getattr"
        and len(given) > 1
        and string_body(rule.view, given[1].value) == "is_cuda"
    )


def _with_receiver(comparison: cst.BaseExpression, receiver: cst.BaseExpression) -> cst.Comparison:
    """Keep the receiver's own nodes (comments, formatting) instead of the re-parsed copy."""
    assert isinstance(comparison, cst.Comparison)
    left = comparison.left
    assert isinstance(left, cst.Attribute) and isinstance(left.value, cst.Attribute)
    return comparison.with_changes(
        left=left.with_changes(value=left.value.with_changes(value=receiver))
    )
