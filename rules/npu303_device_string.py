"""NPU303: `"cuda"` / `"cuda:N"` device strings where they are used as devices."""

from __future__ import annotations

import re

import libcst as cst

from migrator.rule import FixSafety
from migrator.rules.npu3_device import (
    ACCELERATOR_TYPE,
    CUDA_DEVICE_TEXT,
    DeviceRule,
    Place,
    add_device_import,
    cuda_fstring_head,
    device_positions,
    expression,
    is_accelerator,
    is_cuda_device_string,
    string_body,
    values_reaching,
)


class DeviceString(DeviceRule):
    """
    ## What it does
    Rewrites the device strings `"cuda"`, `"cuda:N"`, `f"cuda:{i}"`, and the templates
    `"cuda:{}".format(i)` / `"cuda:%d" % i` to `"npu"`, `"npu:N"`, ... where they are used as
    devices: `torch.device(...)`, `.to(...)`, any `device=` / `map_location=` / `device_type=`
    argument, `torch.autocast(...)`, `torch.amp.GradScaler(...)`, comparisons with
    `x.device.type` or a `*device` variable, assignments to a `*device` variable or attribute,
    `*device` parameter defaults, `torch.set_default_device(...)` and the default and choices of
    an `--*device` command-line option. The value
    is followed through `a if cond else b`, `a or b` and names assigned in the same scope, so
    `device = torch.device("cuda" if torch.cuda.is_available() else "cpu")` and
    `loc = "cuda:{}".format(gpu); torch.load(path, map_location=loc)` are both covered. Strings
    anywhere else (log messages, docstrings, comments, dictionary keys) are left alone, and so are
    the keys of a `map_location={"cuda:0": ...}` dict, which name where a checkpoint was saved.

    With `--target accelerator`: `"cuda"` becomes `torch.accelerator.current_accelerator().type`
    and `"cuda:N"` becomes `f"{torch.accelerator.current_accelerator().type}:N"`.

    ## Why
    torch_npu's devices are called `npu`; `"cuda"` devices do not exist on an Ascend machine.

    ## Example
    ```python
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    logger.info("running on cuda")
    ```

    ## Use instead
    ```python
    device = torch.device("npu" if torch.cuda.is_available() else "cpu")
    logger.info("running on cuda")
    ```
    (`torch.cuda.is_available()` is NPU302's.)

    ## Fix safety
    Safe. A device string assembled from pieces (`"cuda" + suffix`) is reported.
    """

    CODE = "NPU303"
    NAME = "device-string"
    SUMMARY = '`"cuda"` / `"cuda:N"` device string'
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"""["']cuda\b""")

    def visit_Module(self, node: cst.Module) -> None:
        self.module = node
        self.targets: set[int] = set()
        for position, place in device_positions(self, node):
            for value in values_reaching(self, position):
                if is_cuda_device_string(value) and _fits(value, place):
                    self.targets.add(id(value))
                elif _is_concatenated_device(value):
                    self.report(
                        value,
                        'device string built with `+` from "cuda": write "npu" (or "npu:N") '
                        "by hand; the rest of the string cannot be checked here",
                    )

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        return self._rewrite(original_node, updated_node)

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.BaseExpression:
        return self._rewrite(original_node, updated_node)

    def _rewrite(
        self,
        original: cst.SimpleString | cst.FormattedString,
        updated: cst.SimpleString | cst.FormattedString,
    ) -> cst.BaseExpression:
        if id(original) not in self.targets:
            return updated
        old = self.module.code_for_node(original)
        new = _accelerator_form(updated) if is_accelerator(self) else _npu_form(updated)
        if new is None:
            self.report(
                original,
                f"device string template {old} cannot be made device-agnostic; rewrite it by hand",
            )
            return updated
        if not self.fix(original, f"{old} -> {self.module.code_for_node(new)}"):
            return updated
        add_device_import(self)
        return new


def _fits(node: cst.BaseExpression, place: Place) -> bool:
    """A device type position takes ``"cuda"``, not ``"cuda:0"``."""
    if place is Place.DEVICE:
        return True
    return isinstance(node, cst.SimpleString) and string_body(node) == "cuda"


def _is_concatenated_device(node: cst.BaseExpression) -> bool:
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
        return False
    left = node.left
    return isinstance(left, cst.SimpleString) and (string_body(left) or "").startswith("cuda")


def _npu_form(node: cst.SimpleString | cst.FormattedString) -> cst.BaseExpression:
    if isinstance(node, cst.SimpleString):
        start = len(node.prefix) + len(node.quote)
        return node.with_changes(value=node.value[:start] + "npu" + node.value[start + 4 :])
    head = cuda_fstring_head(node)
    assert head is not None
    return node.with_changes(
        parts=[head.with_changes(value="npu" + head.value[4:]), *node.parts[1:]]
    )


def _accelerator_form(node: cst.SimpleString | cst.FormattedString) -> cst.BaseExpression | None:
    """``"cuda"`` -> the accelerator's type; ``"cuda:0"`` / ``f"cuda:{i}"`` -> an f-string."""
    quote = node.quote if isinstance(node, cst.SimpleString) else node.start[-1]
    accelerator = "{" + ACCELERATOR_TYPE + "}"
    if isinstance(node, cst.SimpleString):
        body = string_body(node) or ""
        if body == "cuda":
            return expression(ACCELERATOR_TYPE)
        match = CUDA_DEVICE_TEXT.fullmatch(body)
        if match is None or not body[5:].isdigit():
            return None  # a "cuda:{}" / "cuda:%d" template: formatted later, by the user's code
        return expression(f"f{quote}{accelerator}:{body[5:]}{quote}")
    head = cuda_fstring_head(node)
    assert head is not None
    parts = [head.with_changes(value=head.value[4:]), *node.parts[1:]]
    rest = cst.Module([]).code_for_node(node.with_changes(parts=parts))
    body = rest[len(node.start) : -len(node.end)]
    return expression(f"f{quote}{accelerator}{body}{quote}")
