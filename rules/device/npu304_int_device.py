"""NPU304: a bare integer used as a device: `.to(0)`, `device=local_rank`, `torch.device(i)`."""

from __future__ import annotations

import ast

from migrator.analysis.calls import arguments, keyword, positional
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import (
    DEVICE_CONSTRUCTORS,
    Index,
    add_device_import,
    expression,
    int_index,
    torch_name,
)
from migrator.rules.device._target import device_target


class IntDevice(Rule):
    """
    ## What it does
    Rewrites an integer device index used as a device to an explicit NPU device:
    `.to(0)` -> `.to("npu:0")`, `torch.zeros(2, device=local_rank)` ->
    `torch.zeros(2, device=f"npu:{local_rank}")`, `torch.device(args.local_rank)` ->
    `torch.device(f"npu:{args.local_rank}")`.

    Only expressions known to be integers are rewritten: integer literals, `int(...)`,
    `len(...)`, `torch.distributed.get_rank()` and friends, names whose every binding in the
    scope is one of those (an assignment from them, a parameter annotated `int`, a `rank` /
    `local_rank` parameter without a default (`def run(rank, world_size)`, as
    `torch.multiprocessing.spawn` calls it), the counter of `for i in range(...)` or
    `for i, x in enumerate(...)`), `+ - * // %` of two of those, `args.<name>` from
    `parser.add_argument("--<name>", type=int, default=<int>)`, and `self.<name>` in a method when
    every assignment of `<x>.<name>` in the file is `self.<name> = <one of those>` in a method of
    the same class (`self.gpu_id = int(os.environ["LOCAL_RANK"])`). An expression that is named like
    an index (`rank`, `local_rank`, `gpu`, `gpu_id`, `device_id`, ...) but not known to be an
    int, such as an option with `default=None` or a name also bound by tuple unpacking, is
    reported. A string option (no `type`, or `type=str`, without an int default) is a device
    already and is left alone.

    The `device=` of `torch.cuda.*` / `torch.npu.*` calls (`memory_summary(device=i)`) is an
    index already and is left alone.

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
    TRIGGER = (".to(", "device")

    def check(self) -> None:
        for call in self.index.nodes(ast.Call):
            for value in self._device_arguments(call):
                self._explicit_device(value)

    def _device_arguments(self, call: ast.Call) -> list[ast.expr]:
        # Syntax first (most calls have no `device=` and are neither `.to(x)` nor `f(x)`);
        # the callee's name is resolved only for the few calls that are left.
        is_to = isinstance(call.func, ast.Attribute) and call.func.attr == "to"
        has_device = any(k.arg == "device" for k in call.keywords)
        lone_argument = len(call.args) == 1 and not call.keywords
        if not (is_to and call.args) and not has_device and not lone_argument:
            return []
        found = []
        name = torch_name(self.view, call.func)
        first = positional(call)
        if first and (is_to or (name in DEVICE_CONSTRUCTORS and len(arguments(call)) == 1)):
            found.append(first[0].value)
        device = keyword(call, "device")
        if device is not None and name not in DEVICE_CONSTRUCTORS and not _takes_an_index(name):
            found.append(device.value)
        return found

    def _explicit_device(self, value: ast.expr) -> None:
        kind = int_index(self.view, value)
        if kind is Index.NO:
            return
        code = self.code(value)
        if kind is Index.MAYBE:
            self.report(
                value,
                f"`{code}` is used as a device but is not known to be an int index here "
                f'(it may be None or a device); if it is an index, write f"npu:{{{code}}}"',
            )
            return
        new = self._device_code(value, code)
        if new is None:
            self.report(value, f'write the device for `{code}` by hand: f"npu:{{...}}"')
            return

        def to_npu_device(node: cst.CSTNode) -> cst.BaseExpression:
            # Built from the node as the other rules left it: `torch.cuda.current_device()`
            # inside the index is rewritten by NPU302 in the same pass.
            edited = cst.Module([]).code_for_node(node)
            return expression(self._device_code(value, edited) or new)

        edit = self.replace(value, _kind(value), to_npu_device)
        if self.fix(value, f"device `{code}` -> `{new}`", edit):
            add_device_import(self)

    def _device_code(self, value: ast.expr, code: str) -> str | None:
        target = device_target(self)
        if target.int_device_call is not None:
            return target.int_device_call.format(index=code)
        name = target.device_type_name
        if isinstance(value, ast.Constant):
            return f'"{name}:{code}"'
        if "\n" in code or ("'" in code and '"' in code):
            return None  # cannot sit inside a single-line f-string on Python < 3.12
        quote = "'" if '"' in code else '"'
        return f"f{quote}{name}:{{{code}}}{quote}"


def _takes_an_index(name: object) -> bool:
    """``torch.cuda.memory_summary(device=i)`` and the other device-runtime calls take an index
    (NPU302 makes them ``torch.npu.*``, which takes one too)."""
    return isinstance(name, str) and name.startswith(("torch.cuda.", "torch.npu."))


def _kind(value: ast.expr) -> type[cst.CSTNode]:
    """The concrete node type of an int device value (see ``int_index``)."""
    if isinstance(value, ast.Constant):
        return cst.Integer
    if isinstance(value, ast.Call):
        return cst.Call
    if isinstance(value, ast.Attribute):
        return cst.Attribute
    if isinstance(value, ast.BinOp):
        return cst.BinaryOperation
    return cst.Name
