"""NPU305: the `"nccl"` distributed backend, and `is_nccl_available()`."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator

import libcst as cst

from migrator.calls import argument
from migrator.index import full_name
from migrator.rule import FixSafety, Rule
from migrator.rules.npu3_device import (
    ACCELERATOR_DEVICE,
    BACKEND_NAME,
    TORCH_ROOTS,
    add_device_import,
    expression,
    is_accelerator,
    is_add_argument,
    names_match,
    option_texts,
    parameter_defaults,
    simple_string,
    string_body,
    torch_name,
    values_reaching,
)

INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
NEW_GROUP = "torch.distributed.new_group"
GET_BACKEND = "torch.distributed.get_backend"
IS_NCCL_AVAILABLE = "torch.distributed.is_nccl_available"
ACCELERATOR_BACKEND = f"torch.distributed.get_default_backend_for_device({ACCELERATOR_DEVICE})"
# "cpu:gloo,cuda:nccl": one backend per device type
PER_DEVICE_BACKENDS = re.compile(r"(\w+:\w+,)*\w+:\w+")


class NcclBackend(Rule):
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
    TRIGGER = ("nccl",)

    def check(self) -> None:
        targets: dict[int, ast.Constant] = {}
        for position in _backend_positions(self):
            for value in values_reaching(self, position):
                if isinstance(value, ast.Constant) and _new_backend_text(self, value) is not None:
                    targets.setdefault(id(value), value)
                elif re.search(r"""["'][^"']*nccl""", self.code(value)):
                    self.report(
                        value,
                        f"the backend `{self.code(value)}` is chosen at run time and may "
                        'be "nccl": make sure it is "hccl" on Ascend',
                    )
        for value in sorted(targets.values(), key=lambda v: (v.lineno, v.col_offset)):
            self._rewrite(value)
        for call in self.calls_to(TORCH_ROOTS):
            if torch_name(self, call.func) == IS_NCCL_AVAILABLE:
                self._is_nccl_available(call)

    def _rewrite(self, node: ast.Constant) -> None:
        text = _new_backend_text(self, node)
        assert text is not None
        old = self.code(node)
        if is_accelerator(self):
            if string_body(self, node) != "nccl":
                self.report(node, "per-device backend string: add the accelerator's by hand")
                return
            new = ACCELERATOR_BACKEND
            edit = self.replace(node, cst.SimpleString, lambda _: expression(ACCELERATOR_BACKEND))
        else:
            literal = simple_string(self, node)
            assert literal is not None
            new = f"{literal.prefix}{literal.quote}{text}{literal.quote}"

            def renamed(string: cst.SimpleString) -> cst.SimpleString:
                start = len(string.prefix) + len(string.quote)
                return string.with_changes(
                    value=string.value[:start] + text + string.value[-len(string.quote) :]
                )

            edit = self.replace(node, cst.SimpleString, renamed)
        if self.fix(node, f"{old} -> {new}", edit):
            add_device_import(self)

    def _is_nccl_available(self, call: ast.Call) -> None:
        if is_accelerator(self):
            self.report(
                call,
                "`is_nccl_available()`: check `torch.distributed.is_backend_available(...)` of the "
                "accelerator's backend by hand",
            )
            return
        func = call.func
        if not isinstance(func, (ast.Attribute, ast.Name)):
            return
        if isinstance(func, ast.Attribute):
            edit = self.replace(
                func,
                cst.Attribute,
                lambda node: node.with_changes(attr=cst.Name("is_hccl_available")),
            )
            if self.fix(call, "`is_nccl_available()` -> `is_hccl_available()`", edit):
                add_device_import(self)
            return
        if self.fix(call, "`is_nccl_available()` -> `is_hccl_available()`"):
            add_device_import(self)
            self.report(
                call,
                "`is_nccl_available` was imported by name: import `is_hccl_available` instead",
            )


def _new_backend_text(rule: Rule, node: ast.AST) -> str | None:
    body = string_body(rule, node)
    if body == "nccl":
        return "hccl"
    if body and PER_DEVICE_BACKENDS.fullmatch(body) and "cuda:nccl" in body.split(","):
        return ",".join("npu:hccl" if part == "cuda:nccl" else part for part in body.split(","))
    return None


def _backend_positions(rule: Rule) -> Iterator[ast.AST]:
    index = rule.index
    for call in index.nodes(ast.Call):
        name = torch_name(rule, call.func)
        if name == INIT_PROCESS_GROUP:
            found = argument(call, "backend", 0)
        elif name == NEW_GROUP:
            found = argument(call, "backend", 2)
        elif is_add_argument(call):
            yield from _backend_option(rule, call)
            continue
        else:
            found = None
        if found is not None:
            yield found.value
    for assign in index.nodes(ast.Assign):
        if any(names_match(target, BACKEND_NAME) for target in assign.targets):
            yield assign.value
    for parameter, default in parameter_defaults(rule):
        if BACKEND_NAME.fullmatch(parameter.arg):
            yield default
    for comparison in index.nodes(ast.Compare):
        operands = [comparison.left, *comparison.comparators]
        for left, right in itertools.pairwise(operands):
            if _names_backend(rule, left):
                yield right
            elif _names_backend(rule, right):
                yield left


def _backend_option(rule: Rule, call: ast.Call) -> Iterator[ast.AST]:
    """``add_argument("--dist-backend", default="nccl", choices=["nccl", "gloo"])``."""
    if not any(BACKEND_NAME.fullmatch(option) for option in option_texts(rule, call)):
        return
    default = argument(call, "default", None)
    if default is not None:
        yield default.value
    choices = argument(call, "choices", None)
    if choices is not None and isinstance(choices.value, (ast.List, ast.Tuple, ast.Set)):
        for element in choices.value.elts:
            yield element.value if isinstance(element, ast.Starred) else element


def _names_backend(rule: Rule, node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return torch_name(rule, node.func) == GET_BACKEND
    return names_match(node, BACKEND_NAME)


__all__ = ["NcclBackend", "full_name"]
