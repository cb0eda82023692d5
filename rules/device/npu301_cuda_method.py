"""NPU301: `.cuda(...)` method calls."""

from __future__ import annotations

import ast

from migrator.analysis.calls import argument
from migrator.analysis.calls import arguments as all_arguments
from migrator.analysis.index import full_name
from migrator.callargs import remove_arg_objects
from migrator.edits import NodeEdit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import (
    Index,
    add_device_import,
    expression,
    int_index,
    string_body,
    torch_name,
)
from migrator.rules.device._target import DeviceTarget, NoCounterpart, device_target

METHOD_REFERENCES = {"torch.Tensor.cuda", "torch.nn.Module.cuda"}


class CudaMethod(Rule):
    """
    ## What it does
    Rewrites `.cuda(...)` calls to `.npu(...)`, keeping the arguments (torch_npu gives tensors and
    modules an `.npu()` method with the same parameters), and adds `import torch_npu`.
    `torch.Tensor.cuda` / `torch.nn.Module.cuda` used as functions become `.npu` too.

    Every `.cuda(...)` call is rewritten, whatever its receiver: a class of yours with its own
    `.cuda()` method is rewritten as well, so give it an `.npu()` method (or suppress the line).

    With `--target accelerator`: `.cuda()` becomes `.to(torch.accelerator.current_accelerator())`
    and `.cuda(i)` with an integer index `i` becomes
    `.to(torch.device(torch.accelerator.current_accelerator().type, i))`.

    ## Why
    Tensors and modules on an Ascend NPU live on the `npu` device; `.cuda()` fails there.

    ## Example
    ```python
    model.cuda(args.gpu)
    images = images.cuda(args.gpu, non_blocking=True)
    ```

    ## Use instead
    ```python
    model.npu(args.gpu)
    images = images.npu(args.gpu, non_blocking=True)
    ```

    ## Fix safety
    Safe: `.npu()` takes the same arguments as `.cuda()`. `getattr(x, "cuda")` is reported.
    """

    CODE = "NPU301"
    NAME = "cuda-method"
    SUMMARY = "`.cuda(...)` method call"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("cuda",)

    def check(self) -> None:
        for call in self.index.nodes(ast.Call):
            if _is_getattr_cuda(self, call):
                self.report(
                    call, '`getattr(..., "cuda")` cannot be rewritten safely; call `.npu()` instead'
                )
        for attribute in self.index.attributes("cuda"):
            self._check_reference(attribute)
            parent = self.index.parent(attribute)
            if isinstance(parent, ast.Call) and parent.func is attribute:
                self._check_call(parent, attribute)

    def _check_call(self, call: ast.Call, func: ast.Attribute) -> None:
        if torch_name(self.view, func) == "torch.cuda":  # the module, not a method
            return
        target = device_target(self)
        method = target.cuda_method
        if isinstance(method, NoCounterpart):
            self._to_device(call, func, target)
            return
        message = f"`.cuda(...)` -> `.{method}(...)`"
        if self.fix(self.attr_position(func), message, self._rename(func, method)):
            add_device_import(self)

    def _check_reference(self, attribute: ast.Attribute) -> None:
        """``map(torch.Tensor.cuda, batch)``: the unbound method, not a call (left alone where
        the target has no method)."""
        method = device_target(self).cuda_method
        if isinstance(method, NoCounterpart):
            return
        if torch_name(self.view, attribute) not in METHOD_REFERENCES:
            return
        message = f"`.cuda` -> `.{method}`"
        if self.fix(self.attr_position(attribute), message, self._rename(attribute, method)):
            add_device_import(self)

    def _rename(self, attribute: ast.Attribute, method: str) -> NodeEdit:
        return self.replace(
            attribute, cst.Attribute, lambda node: node.with_changes(attr=cst.Name(method))
        )

    def _to_device(self, call: ast.Call, func: ast.Attribute, target: DeviceTarget) -> None:
        """``.cuda()`` -> ``.to(<current device>)``, ``.cuda(i)`` -> ``.to(torch.device(<type>,
        i))``: the spelling of a target without a per-device tensor method."""
        device_arg = argument(call, "device", 0)
        # an index, or None for "the current device": torch.device(type, None) accepts both
        if device_arg is not None and int_index(self.view, device_arg.value) is Index.NO:
            self.report(
                device_arg.node,
                "`.cuda(<device>)` with a device that is not an index: pass the device to "
                f"`.to(...)` by hand ({target.described})",
            )
            return
        index = device_arg.index if device_arg is not None else None

        def to_device(node: cst.Call) -> cst.Call:
            rest = list(node.args)
            if index is None:
                device: cst.BaseExpression = expression(target.current_device)
            else:
                device = cst.Call(
                    func=expression("torch.device"),
                    args=[cst.Arg(expression(target.device_type)), cst.Arg(rest[index].value)],
                )
                rest = list(remove_arg_objects(node, [rest[index]]).args)
            first = cst.Arg(device)
            if rest:
                space = cst.SimpleWhitespace(" ")
                first = first.with_changes(comma=cst.Comma(whitespace_after=space))
            assert isinstance(node.func, cst.Attribute)
            return node.with_changes(
                func=node.func.with_changes(attr=cst.Name("to")), args=[first, *rest]
            )

        edit = self.replace(call, cst.Call, to_device)
        if self.fix(self.attr_position(func), "`.cuda(...)` -> `.to(<current accelerator>)`", edit):
            add_device_import(self)


def _is_getattr_cuda(rule: Rule, call: ast.Call) -> bool:
    if full_name(call.func) != "getattr" or len(call.args) + len(call.keywords) < 2:
        return False
    arguments = all_arguments(call)
    return string_body(rule.view, arguments[1].value) == "cuda"
