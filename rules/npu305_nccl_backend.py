"""NPU305: the `"nccl"` distributed backend, and `is_nccl_available()`."""

from __future__ import annotations

import itertools
import re

import libcst as cst

from migrator.callargs import argument
from migrator.rule import FixSafety, Rule
from migrator.rules.npu3_device import (
    ACCELERATOR_DEVICE,
    BACKEND_NAME,
    DeviceRule,
    add_device_import,
    expression,
    is_accelerator,
    names_match,
    string_body,
    values_reaching,
)

INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
NEW_GROUP = "torch.distributed.new_group"
GET_BACKEND = "torch.distributed.get_backend"
IS_NCCL_AVAILABLE = "torch.distributed.is_nccl_available"
ACCELERATOR_BACKEND = f"torch.distributed.get_default_backend_for_device({ACCELERATOR_DEVICE})"
# "cpu:gloo,cuda:nccl": one backend per device type
PER_DEVICE_BACKENDS = re.compile(r"(\w+:\w+,)*\w+:\w+")


class NcclBackend(DeviceRule):
    """
    ## What it does
    Rewrites the `"nccl"` backend to `"hccl"` where it names a backend: the `backend` of
    `torch.distributed.init_process_group(...)` (positional or keyword) and of
    `torch.distributed.new_group(...)`, assignments to a `*backend` variable or attribute,
    `*backend` parameter defaults, the default of an `--*backend` command-line option, and
    comparisons with those or with `dist.get_backend()`. Values are followed through
    `a if cond else b` and names assigned in the same scope. `"cuda:nccl"` inside a per-device
    backend string (`"cpu:gloo,cuda:nccl"`) becomes `"npu:hccl"`.
    `torch.distributed.is_nccl_available()` becomes `is_hccl_available()` (torch_npu adds it).

    With `--target accelerator`: `"nccl"` becomes
    `torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator())`
    (torch >= 2.6), which is `"nccl"` on a GPU and `"hccl"` on an NPU.

    ## Why
    NCCL is NVIDIA's collective library; Ascend's is HCCL, registered by torch_npu as `"hccl"`.

    ## Example
    ```python
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    ```

    ## Use instead
    ```python
    dist.init_process_group("hccl" if torch.cuda.is_available() else "gloo")
    ```

    ## Fix safety
    Safe. A backend computed at run time from text that mentions `"nccl"` (an environment
    variable with an `"nccl"` default, for example) is reported.
    """

    CODE = "NPU305"
    NAME = "nccl-backend"
    SUMMARY = '`"nccl"` distributed backend'
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = re.compile(r"nccl")

    def visit_Module(self, node: cst.Module) -> None:
        self.module = node
        self.targets: set[int] = set()
        collector = _BackendPositions(self)
        node.visit(collector)
        for position in collector.found:
            for value in values_reaching(self, position):
                if isinstance(value, cst.SimpleString) and _new_backend_text(value) is not None:
                    self.targets.add(id(value))
                elif re.search(r"""["'][^"']*nccl""", node.code_for_node(value)):
                    self.report(
                        value,
                        f"the backend `{node.code_for_node(value)}` is chosen at run time and may "
                        'be "nccl": make sure it is "hccl" on Ascend',
                    )

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        if id(original_node) not in self.targets:
            return updated_node
        text = _new_backend_text(original_node)
        assert text is not None
        if is_accelerator(self):
            if string_body(original_node) != "nccl":
                self.report(
                    original_node, "per-device backend string: add the accelerator's by hand"
                )
                return updated_node
            new: cst.BaseExpression = expression(ACCELERATOR_BACKEND)
        else:
            start = len(updated_node.prefix) + len(updated_node.quote)
            new = updated_node.with_changes(
                value=updated_node.value[:start]
                + text
                + updated_node.value[-len(updated_node.quote) :]
            )
        message = f"{self.module.code_for_node(original_node)} -> {self.module.code_for_node(new)}"
        if not self.fix(original_node, message):
            return updated_node
        add_device_import(self)
        return new

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.qualified_name(original_node.func) != IS_NCCL_AVAILABLE:
            return updated_node
        if is_accelerator(self):
            self.report(
                original_node,
                "`is_nccl_available()`: check `torch.distributed.is_backend_available(...)` of the "
                "accelerator's backend by hand",
            )
            return updated_node
        func = updated_node.func
        if not isinstance(func, cst.Attribute | cst.Name):
            return updated_node
        if not self.fix(original_node, "`is_nccl_available()` -> `is_hccl_available()`"):
            return updated_node
        add_device_import(self)
        if isinstance(func, cst.Attribute):
            return updated_node.with_changes(
                func=func.with_changes(attr=cst.Name("is_hccl_available"))
            )
        self.report(
            original_node,
            "`is_nccl_available` was imported by name: import `is_hccl_available` instead",
        )
        return updated_node


def _new_backend_text(node: cst.SimpleString) -> str | None:
    body = string_body(node)
    if body == "nccl":
        return "hccl"
    if body and PER_DEVICE_BACKENDS.fullmatch(body) and "cuda:nccl" in body.split(","):
        return ",".join("npu:hccl" if part == "cuda:nccl" else part for part in body.split(","))
    return None


class _BackendPositions(cst.CSTVisitor):
    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule = rule
        self.found: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        name = self.rule.qualified_name(node.func)
        if name == INIT_PROCESS_GROUP:
            arg = argument(node, "backend", 0)
        elif name == NEW_GROUP:
            arg = argument(node, "backend", 2)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "add_argument":
            self._backend_option(node)
            return
        else:
            arg = None
        if arg is not None:
            self.found.append(arg.value)

    def _backend_option(self, call: cst.Call) -> None:
        """``add_argument("--dist-backend", default="nccl", choices=["nccl", "gloo"])``."""
        options = [
            (string_body(a.value) or "").lstrip("-").replace("-", "_")
            for a in call.args
            if a.keyword is None and isinstance(a.value, cst.SimpleString)
        ]
        if not any(BACKEND_NAME.fullmatch(option) for option in options):
            return
        default = argument(call, "default", None)
        if default is not None:
            self.found.append(default.value)
        choices = argument(call, "choices", None)
        if choices is not None and isinstance(choices.value, cst.List | cst.Tuple | cst.Set):
            self.found.extend(element.value for element in choices.value.elements)

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(names_match(target.target, BACKEND_NAME) for target in node.targets):
            self.found.append(node.value)

    def visit_Param(self, node: cst.Param) -> None:
        if node.default is not None and BACKEND_NAME.fullmatch(node.name.value):
            self.found.append(node.default)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(target.comparator for target in node.comparisons)]
        for left, right in itertools.pairwise(operands):
            if self._names_backend(left):
                self.found.append(right)
            elif self._names_backend(right):
                self.found.append(left)

    def _names_backend(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Call):
            return self.rule.qualified_name(node.func) == GET_BACKEND
        return names_match(node, BACKEND_NAME)
