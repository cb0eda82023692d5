"""NPU303: `"cuda"` / `"cuda:N"` device strings where they are used as devices."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import libcst as cst

from migrator.analysis.calls import string_literal
from migrator.diagnostics import Diagnostic
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import (
    CUDA_DEVICE_TEXT,
    Place,
    add_device_import,
    cuda_fstring_head,
    device_flow,
    expression,
    is_cuda_device_string,
    shell_finding,
    simple_string,
    string_body,
)
from migrator.rules.device._target import DeviceTarget, device_target

# `--device cuda:0` style options in a shell script.
SHELL_DEVICE_OPTION = re.compile(r"(--[\w-]*device)(?:=|\s+)[\"']?(cuda(?::\d+)?)\b")


class DeviceString(Rule):
    """
    ## What it does
    Rewrites the device strings `"cuda"`, `"cuda:N"`, `f"cuda:{i}"`, and the templates
    `"cuda:{}".format(i)` / `"cuda:%d" % i` to `"npu"`, `"npu:N"`, ... where they are used as
    devices: `torch.device(...)`, `.to(...)`, any `device=` / `map_location=` / `device_type=`
    argument, `torch.autocast(...)`, `torch.amp.GradScaler(...)`, the device type of
    `init_device_mesh(...)`, `DeviceMesh(...)` and `DeviceMesh.from_group(...)`, comparisons with
    `x.device.type` or a `*device` variable, assignments to a `*device` variable or attribute (in
    any case: `_C.MODEL.DEVICE`), `*device` parameter defaults, `torch.set_default_device(...)`,
    the default and choices of an `--*device` command-line option and the default of an absl
    `*device` flag (`flags.DEFINE_string("base_device", "cuda", ...)`). The value
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
    TRIGGER = ('"cuda', "'cuda")

    @classmethod
    def scan_shell_line(cls, code: str, path: str, number: int) -> Iterator[Diagnostic]:
        """``--device cuda:0`` style options of a launch command."""
        for match in SHELL_DEVICE_OPTION.finditer(code):
            option, device = match.group(1), match.group(2)
            yield shell_finding(
                path,
                number,
                match.start(2),
                cls.CODE,
                f"`{option}` selects `{device}`: pass `{'npu' + device[4:]}`",
            )

    def check(self) -> None:
        targets: dict[int, ast.AST] = {}
        flow = device_flow(self.view)
        for value, place in flow.reached:
            if is_cuda_device_string(self.view, value) and _fits(self, value, place):
                targets.setdefault(id(value), value)
            elif _is_concatenated_device(self, value):
                self.report(
                    value,
                    'device string built with `+` from "cuda": write "npu" (or "npu:N") '
                    "by hand; the rest of the string cannot be checked here",
                )
        for value in sorted(targets.values(), key=self.source.start):
            self._rewrite(value)

    def _rewrite(self, node: ast.AST) -> None:
        old = self.code(node)
        kind: type[cst.CSTNode] = (
            cst.SimpleString if isinstance(node, ast.Constant) else cst.FormattedString
        )
        target = device_target(self)
        name = target.device_type_name
        if isinstance(name, str):
            new_code: str | None = _renamed_code(self, node, name)
            edit = self.replace(node, kind, lambda literal: renamed_device(literal, name))
        else:
            new_code = _type_expression_code(self, node, target)
            if new_code is None:
                self.report(
                    node,
                    f"device string template {old} cannot be made device-agnostic; "
                    "rewrite it by hand",
                )
                return
            if isinstance(node, ast.JoinedStr):
                edit = self.replace(
                    node, kind, lambda fstring: _fstring_on_type(fstring, target.device_type)
                )
            else:
                code = new_code
                edit = self.replace(node, kind, lambda _: expression(code))
        if self.fix(node, f"{old} -> {new_code}", edit):
            add_device_import(self)


def _fits(rule: Rule, node: ast.AST, place: Place) -> bool:
    """A device type position takes ``"cuda"``, not ``"cuda:0"``."""
    if place is Place.DEVICE:
        return True
    return isinstance(node, ast.Constant) and string_body(rule.view, node) == "cuda"


def _is_concatenated_device(rule: Rule, node: ast.AST) -> bool:
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return False
    left = simple_string(rule.view, node.left)
    return left is not None and not left.is_bytes and left.body.startswith("cuda")


def _renamed_code(rule: Rule, node: ast.AST, name: str) -> str:
    """The literal as written with its leading ``cuda`` replaced by ``name``."""
    text = rule.code(node)
    start = text.index("cuda")
    return text[:start] + name + text[start + 4 :]


def renamed_device(
    node: cst.SimpleString | cst.FormattedString, name: str
) -> cst.SimpleString | cst.FormattedString:
    """The concrete literal with its leading ``cuda`` replaced by ``name`` (prefix, quotes and
    parentheses kept)."""
    if isinstance(node, cst.SimpleString):
        start = len(node.prefix) + len(node.quote)
        return node.with_changes(value=node.value[:start] + name + node.value[start + 4 :])
    head = node.parts[0]
    assert isinstance(head, cst.FormattedStringText)
    return node.with_changes(
        parts=[head.with_changes(value=name + head.value[4:]), *node.parts[1:]]
    )


def _type_expression_code(rule: Rule, node: ast.AST, target: DeviceTarget) -> str | None:
    """For a target whose device type is only known at run time: ``"cuda"`` -> the type's
    expression; ``"cuda:0"`` / ``f"cuda:{i}"`` -> an f-string around it."""
    literal = string_literal(rule.source, node)
    assert literal is not None
    on_type = "{" + target.device_type + "}"
    if isinstance(node, ast.Constant):
        quote = literal.quote
        body = string_body(rule.view, node) or ""
        if body == "cuda":
            return target.device_type
        match = CUDA_DEVICE_TEXT.fullmatch(body)
        if match is None or not body[5:].isdigit():
            return None  # a "cuda:{}" / "cuda:%d" template: formatted later, by the user's code
        return f"f{quote}{on_type}:{body[5:]}{quote}"
    assert isinstance(node, ast.JoinedStr) and cuda_fstring_head(rule.view, node) is not None
    quote = literal.quote[-1]
    return f"f{quote}{on_type}{literal.body[4:]}{quote}"


def _fstring_on_type(node: cst.FormattedString, device_type: str) -> cst.FormattedString:
    """``f"cuda:{i}"`` -> ``f"{<device type>}:{i}"``, keeping the expressions as the other
    rules edited them (what ``_type_expression_code`` describes from the original text)."""
    head = node.parts[0]
    assert isinstance(head, cst.FormattedStringText)
    quote = node.end[-1]
    on_type = cst.FormattedStringExpression(expression(device_type))
    rest = [head.with_changes(value=head.value[4:])] if head.value[4:] else []
    return node.with_changes(start=f"f{quote}", end=quote, parts=[on_type, *rest, *node.parts[1:]])
