"""NPU304: a bare integer used as a device: `.to(0)`, `device=local_rank`, `torch.device(i)`."""

from __future__ import annotations

import re

import libcst as cst

from migrator.callargs import find_keyword, positional
from migrator.rule import FixSafety
from migrator.rules.npu3_device import (
    ACCELERATOR_TYPE,
    DEVICE_CONSTRUCTORS,
    DeviceRule,
    Index,
    add_device_import,
    expression,
    int_index,
    is_accelerator,
)


class IntDevice(DeviceRule):
    """
    ## What it does
    Rewrites an integer device index used as a device to an explicit NPU device:
    `.to(0)` -> `.to("npu:0")`, `torch.zeros(2, device=local_rank)` ->
    `torch.zeros(2, device=f"npu:{local_rank}")`, `torch.device(args.local_rank)` ->
    `torch.device(f"npu:{args.local_rank}")`.

    Only expressions known to be integers are rewritten: integer literals, `int(...)`,
    `len(...)`, `torch.distributed.get_rank()` and friends, names assigned only from those in the
    same scope, parameters annotated `int`, `rank` / `local_rank` parameters without a default
    (`def run(rank, world_size)`, as `torch.multiprocessing.spawn` calls it), and
    `args.<name>` from `parser.add_argument("--<name>", type=int, default=<int>)`. An expression
    that is named like an index (`rank`, `local_rank`, `gpu`, `gpu_id`, `device_id`, ...) but not
    known to be an int, such as an option with `default=None`, is reported.

    With `--target accelerator`: `torch.device(torch.accelerator.current_accelerator().type, i)`.

    ## Why
    Stock PyTorch reads a bare integer device as a CUDA (or current accelerator) index; torch_npu
    does not accept a bare integer in these places.

    ## Example
    ```python
    inputs = inputs.to(local_rank)
    ```

    ## Use instead
    ```python
    inputs = inputs.to(f"npu:{local_rank}")
    ```

    ## Fix safety
    Safe for the integers listed above; anything else is reported, never rewritten.
    """

    CODE = "NPU304"
    NAME = "int-device"
    SUMMARY = "integer device index passed where torch_npu needs a device"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"\.to\(|\bdevice\b")

    def visit_Module(self, node: cst.Module) -> None:
        self.module = node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        args = list(updated_node.args)
        for index in self._device_arg_indices(original_node):
            new_value = self._explicit_device(original_node.args[index].value)
            if new_value is not None:
                args[index] = args[index].with_changes(value=new_value)
        return updated_node.with_changes(args=args)

    def _device_arg_indices(self, call: cst.Call) -> list[int]:
        indices = []
        name = self.qualified_name(call.func)
        args = list(call.args)
        first = positional(call)
        is_to = isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
        if first and (is_to or (name in DEVICE_CONSTRUCTORS and len(args) == 1)):
            indices.append(0)
        keyword = find_keyword(call, "device")
        if keyword is not None and name not in DEVICE_CONSTRUCTORS:
            indices.append(args.index(keyword))
        return indices

    def _explicit_device(self, value: cst.BaseExpression) -> cst.BaseExpression | None:
        kind = int_index(self, self.module, value)
        if kind is Index.NO:
            return None
        code = self.module.code_for_node(value)
        if kind is Index.MAYBE:
            self.report(
                value,
                f"`{code}` is used as a device but is not known to be an int index here "
                f'(it may be None or a device); if it is an index, write f"npu:{{{code}}}"',
            )
            return None
        new = self._device_code(value, code)
        if new is None:
            self.report(value, f'write the device for `{code}` by hand: f"npu:{{...}}"')
            return None
        if not self.fix(value, f"device `{code}` -> `{new}`"):
            return None
        add_device_import(self)
        return expression(new)

    def _device_code(self, value: cst.BaseExpression, code: str) -> str | None:
        if is_accelerator(self):
            return f"torch.device({ACCELERATOR_TYPE}, {code})"
        if isinstance(value, cst.Integer):
            return f'"npu:{value.value}"'
        if "\n" in code or ("'" in code and '"' in code):
            return None  # cannot sit inside a single-line f-string on Python < 3.12
        quote = "'" if '"' in code else '"'
        return f"f{quote}npu:{{{code}}}{quote}"
