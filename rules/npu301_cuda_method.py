"""NPU301: `.cuda(...)` method calls."""

from __future__ import annotations

import re

import libcst as cst
from libcst.helpers import get_full_name_for_node

from migrator.callargs import argument, remove_arg_objects
from migrator.rule import FixSafety
from migrator.rules.npu3_device import (
    ACCELERATOR_DEVICE,
    ACCELERATOR_TYPE,
    DeviceRule,
    Index,
    add_device_import,
    expression,
    int_index,
    is_accelerator,
    string_body,
)

METHOD_REFERENCES = {"torch.Tensor.cuda", "torch.nn.Module.cuda"}


class CudaMethod(DeviceRule):
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
    TRIGGER = re.compile(r"\bcuda\b")

    def visit_Module(self, node: cst.Module) -> None:
        self.module = node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if _is_getattr_cuda(original_node):
            self.report(
                original_node,
                '`getattr(..., "cuda")` cannot be rewritten safely; call `.npu()` instead',
            )
            return updated_node
        func = original_node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "cuda":
            return updated_node
        if self.qualified_name(func) == "torch.cuda":  # the module, not a method
            return updated_node
        if is_accelerator(self):
            return self._to_accelerator(original_node, updated_node)
        if not self.fix(func.attr, "`.cuda(...)` -> `.npu(...)`"):
            return updated_node
        add_device_import(self)
        assert isinstance(updated_node.func, cst.Attribute)
        return updated_node.with_changes(func=updated_node.func.with_changes(attr=cst.Name("npu")))

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        """``map(torch.Tensor.cuda, batch)``: the unbound method, not a call."""
        if original_node.attr.value != "cuda" or is_accelerator(self):
            return updated_node
        if self.qualified_name(original_node) not in METHOD_REFERENCES:
            return updated_node
        if not self.fix(original_node.attr, "`.cuda` -> `.npu`"):
            return updated_node
        add_device_import(self)
        return updated_node.with_changes(attr=cst.Name("npu"))

    def _to_accelerator(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        device_arg = argument(original, "device", 0)
        if device_arg is None:
            device = expression(ACCELERATOR_DEVICE)
        elif int_index(self, self.module, device_arg.value) is not Index.NO:
            # an index, or None for "the current device": torch.device(type, None) accepts both
            device = cst.Call(
                func=expression("torch.device"),
                args=[cst.Arg(expression(ACCELERATOR_TYPE)), cst.Arg(device_arg.value)],
            )
        else:
            self.report(
                device_arg,
                "`.cuda(<device>)` with a device that is not an index: pass the device to "
                "`.to(...)` by hand (device-agnostic target)",
            )
            return updated
        assert isinstance(original.func, cst.Attribute)
        if not self.fix(original.func.attr, "`.cuda(...)` -> `.to(<current accelerator>)`"):
            return updated
        add_device_import(self)
        assert isinstance(updated.func, cst.Attribute)
        rest = list(updated.args)
        if device_arg is not None:
            rest = list(remove_arg_objects(updated, [rest[original.args.index(device_arg)]]).args)
        first = cst.Arg(device)
        if rest:
            first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(
            func=updated.func.with_changes(attr=cst.Name("to")), args=[first, *rest]
        )


def _is_getattr_cuda(call: cst.Call) -> bool:
    if get_full_name_for_node(call.func) != "getattr" or len(call.args) < 2:
        return False
    name = call.args[1].value
    return isinstance(name, cst.SimpleString) and string_body(name) == "cuda"
