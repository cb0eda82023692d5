"""NPU308: `"torch.cuda.FloatTensor"` tensor-type strings where they name a tensor type."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from migrator.analysis.calls import argument
from migrator.analysis.names import Ambiguous
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import add_device_import, string_body, values_reaching
from migrator.rules.device._target import NoCounterpart, device_target

CUDA_PREFIX = "torch.cuda."
NPU_PREFIX = "torch.npu."
# The legacy tensor types torch_npu registers under torch.npu, whose names its Tensor.type()
# accepts as strings ("torch.npu.FloatTensor"); listed in Ascend's "NPU Tensor" API table.
NPU_TENSOR_TYPES = frozenset(
    f"{kind}Tensor"
    for kind in (
        "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short", "BFloat16",
    )
)  # fmt: skip
# What a CUDA tensor-type name looks like, known to torch_npu or not (sparse ones included).
CUDA_TYPE_NAME = re.compile(r"torch\.cuda\.(sparse\.)?\w+Tensor")
DEFAULT_TYPE_SETTERS = frozenset({"torch.set_default_tensor_type"})
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


class TensorTypeString(Rule):
    """
    ## What it does
    Rewrites the CUDA tensor-type names `"torch.cuda.FloatTensor"`, `"torch.cuda.HalfTensor"`,
    ... to `"torch.npu.FloatTensor"`, ... where the string is provably a tensor type:

    - the argument of `tensor.type("torch.cuda.HalfTensor")` (also `dtype=`);
    - the argument of `torch.set_default_tensor_type("torch.cuda.FloatTensor")`;
    - compared with a tensor's type name: `t.type() == "torch.cuda.HalfTensor"`,
      `t.type() in ("torch.cuda.HalfTensor", "torch.cuda.FloatTensor")`.

    The value is followed through `a if cond else b`, `a or b` and names assigned in the same
    scope. The other strings that are exactly a CUDA tensor-type name (a list of type names
    compared through a loop variable, a dictionary keyed by type name) are reported, and so are
    CUDA types torch_npu has no counterpart for (`torch.cuda.sparse.*`, complex types).

    ## Why
    On an Ascend machine a tensor's `type()` is `"torch.npu.HalfTensor"`, and torch_npu's
    `Tensor.type(...)` accepts the `torch.npu.*` names (Ascend's "NPU Tensor" API table lists
    `torch_npu.npu.FloatTensor` & co. as the counterparts of `torch.cuda.FloatTensor` & co.). A
    comparison with `"torch.cuda.HalfTensor"` is silently never true there, and
    `.type("torch.cuda.HalfTensor")` fails because CUDA is not available.

    ## Example
    ```python
    if param.type() == "torch.cuda.HalfTensor":
        master = param.detach().clone().type("torch.cuda.FloatTensor")
    ```

    ## Use instead
    ```python
    if param.type() == "torch.npu.HalfTensor":
        master = param.detach().clone().type("torch.npu.FloatTensor")
    ```

    ## Fix safety
    Safe: `import torch_npu` is added, which registers the `torch.npu.*` types.
    `torch.set_default_tensor_type` is deprecated since torch 2.1; prefer
    `torch.set_default_dtype(...)` with `torch.set_default_device("npu")`. With
    `--target accelerator` nothing is rewritten (there is no device-neutral tensor-type name):
    each site is reported with the `.to(device, dtype)` spelling to use instead.
    """

    CODE = "NPU308"
    NAME = "tensor-type-string"
    SUMMARY = '`"torch.cuda.FloatTensor"` tensor-type string'
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ('"torch.cuda.', "'torch.cuda.")

    def check(self) -> None:
        self.handled: set[int] = set()  # literals already fixed or reported
        for value in self._type_arguments():
            if id(value) not in self.handled:
                self.handled.add(id(value))
                self._migrate(value)
        for constant in self.index.nodes(ast.Constant):
            if id(constant) in self.handled or not _may_name_cuda_type(constant):
                continue
            body = string_body(self.view, constant)
            if body is not None and CUDA_TYPE_NAME.fullmatch(body):
                self.report(
                    constant,
                    f"{self.code(constant)} names a CUDA tensor type; where it is compared with "
                    f"`tensor.type()` or passed to `.type()`, use {_npu_spelling(body)} "
                    "(npu-migrate rewrites it only where it can see that use)",
                )

    # -- where a string is a tensor type ---------------------------------------------------------

    def _type_arguments(self) -> Iterator[ast.AST]:
        """Every string literal that reaches a tensor-type position, in source order."""
        found: list[ast.AST] = []
        for position in self._positions():
            for value in values_reaching(self.view, position):
                found.extend(_elements(value))
        found.sort(key=self.source.start)
        return iter(found)

    def _positions(self) -> Iterator[ast.AST]:
        index = self.index
        for attribute in index.attributes("type"):
            call = index.parent(attribute)
            if not isinstance(call, ast.Call) or call.func is not attribute:
                continue
            given = argument(call, "dtype", 0)
            if given is not None:
                yield given.value
            elif not call.args and not call.keywords:
                yield from _compared_with(index.parent(call), call)
        # `torch.set_default_tensor_type`, `from torch import set_default_tensor_type as f`
        spellings = {"set_default_tensor_type", *index.imported_as(DEFAULT_TYPE_SETTERS)}
        callees: list[ast.Name | ast.Attribute] = [*index.attributes("set_default_tensor_type")]
        for spelling in sorted(spellings):
            callees += index.names(spelling)
        for node in callees:
            yield from self._default_type_argument(node)

    def _default_type_argument(self, node: ast.Name | ast.Attribute) -> Iterator[ast.AST]:
        call = self.index.parent(node)
        if not isinstance(call, ast.Call) or call.func is not node:
            return
        given = argument(call, "t", 0)
        if given is None:
            return
        name = self.qualified_name_in(node, DEFAULT_TYPE_SETTERS)
        if isinstance(name, Ambiguous):
            for value in values_reaching(self.view, given.value):
                if _is_cuda_type_literal(self, value) and id(value) not in self.handled:
                    self.handled.add(id(value))
                    self.report(
                        value,
                        f"cannot tell whether this sets torch's default tensor type: "
                        f"{name.describe()}; if it does, use "
                        f"{_npu_spelling(string_body(self.view, value) or '')}",
                    )
            return
        if name in DEFAULT_TYPE_SETTERS:
            yield given.value

    # -- fixing ----------------------------------------------------------------------------------

    def _migrate(self, node: ast.AST) -> None:
        body = string_body(self.view, node)
        if body is None or not body.startswith(CUDA_PREFIX):
            return
        if not CUDA_TYPE_NAME.fullmatch(body):
            self.report(
                node,
                f"tensor-type string {self.code(node)} is built from a template: write the "
                "`torch.npu.` name by hand",
            )
            return
        type_name = body.removeprefix(CUDA_PREFIX)
        if type_name not in NPU_TENSOR_TYPES:
            self.report(node, f"`{body}` has no torch_npu counterpart: port this code by hand")
            return
        prefix = device_target(self).tensor_type_prefix
        if isinstance(prefix, NoCounterpart):
            self.report(node, f"`{body}` has no device-neutral name: {prefix.reason}")
            return
        new = prefix + type_name
        edit = self.replace(node, cst.SimpleString, lambda string: _renamed(string, prefix))
        if self.fix(node, f'"{body}" -> "{new}"', edit):
            add_device_import(self)


def _may_name_cuda_type(node: ast.Constant) -> bool:
    """Cheap filter before the literal is read from the source."""
    return isinstance(node.value, str) and node.value.startswith(CUDA_PREFIX)


def _is_cuda_type_literal(rule: Rule, node: ast.AST) -> bool:
    body = string_body(rule.view, node) if isinstance(node, ast.Constant) else None
    return body is not None and CUDA_TYPE_NAME.fullmatch(body) is not None


def _elements(value: ast.AST) -> list[ast.AST]:
    """The string literals of a value: itself, or the elements of a literal list, tuple or set
    (``t.type() in ("torch.cuda.HalfTensor", ...)``)."""
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return [element for element in value.elts if _is_str_constant(element)]
    return [value] if _is_str_constant(value) else []


def _is_str_constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _compared_with(parent: ast.AST | None, call: ast.Call) -> Iterator[ast.AST]:
    """The other operand of ``t.type() == x`` / ``t.type() in x`` (either side)."""
    if not isinstance(parent, ast.Compare):
        return
    operands = [parent.left, *parent.comparators]
    for position, operator in enumerate(parent.ops):
        if not isinstance(operator, COMPARISONS):
            continue
        left, right = operands[position], operands[position + 1]
        if left is call:
            yield right
        elif right is call and isinstance(operator, (ast.Eq, ast.NotEq)):
            yield left


def _npu_spelling(body: str) -> str:
    type_name = body.removeprefix(CUDA_PREFIX)
    if type_name in NPU_TENSOR_TYPES:
        return f'"{NPU_PREFIX}{type_name}"'
    return "an NPU tensor type (torch_npu has no counterpart of this one: port it by hand)"


def _renamed(node: cst.SimpleString, prefix: str) -> cst.SimpleString:
    """The literal with ``torch.cuda.`` replaced by ``prefix``, string prefix and quotes kept."""
    start = len(node.prefix) + len(node.quote)
    value = node.value
    assert value[start:].startswith(CUDA_PREFIX)
    return node.with_changes(value=value[:start] + prefix + value[start + len(CUDA_PREFIX) :])
