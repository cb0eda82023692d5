"""NPU303: `"cuda"` / `"cuda:N"` device strings where they are used as devices."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from migrator.analysis.calls import string_literal
from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import Facts, Module
from migrator.analysis.view import FileView
from migrator.diagnostics import Diagnostic, Severity
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Linking, Rule
from migrator.rules.device import _tests as tests
from migrator.rules.device._common import (
    CUDA_DEVICE_TEXT,
    TORCH_ROOTS,
    add_device_import,
    cuda_fstring_head,
    device_flow,
    expression,
    moved_device_literals,
    shell_finding,
    simple_string,
    string_body,
    torch_name,
)
from migrator.rules.device._guards import held_guards, held_message
from migrator.rules.device._target import DeviceTarget, device_target
from migrator.rules.optimizers._plans import DroppedKeys, dropped_keys


@dataclass(frozen=True)
class CudaDefault:
    """A torch call whose device type defaults to CUDA: when it applies (no device type is
    given), the device type is passed first (and the function renamed where torch spells the
    device-typed form differently)."""

    why: str
    given_by: str | None = None  # the parameter that names the device, when the call has one
    arguments: int | None = None  # the call applies with exactly this many arguments
    renamed: str | None = None

    def applies(self, call: ast.Call) -> bool:
        given = len(call.args) + len(call.keywords)
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        ):
            return False
        if self.given_by is not None:
            return not call.args and all(k.arg != self.given_by for k in call.keywords)
        return given == self.arguments


_SCALER = CudaDefault("it disables itself where CUDA is missing", given_by="device")
CUDA_DEFAULTS = {
    "torch.amp.GradScaler": _SCALER,
    "torch.amp.grad_scaler.GradScaler": _SCALER,
    "torch.is_autocast_enabled": CudaDefault("it reads CUDA's autocast state", arguments=0),
    "torch.set_autocast_enabled": CudaDefault("it sets CUDA's autocast state", arguments=1),
    "torch.get_autocast_gpu_dtype": CudaDefault(
        "it reads CUDA's autocast dtype", arguments=0, renamed="get_autocast_dtype"
    ),
    "torch.set_autocast_gpu_dtype": CudaDefault(
        "it sets CUDA's autocast dtype", arguments=1, renamed="set_autocast_dtype"
    ),
}

# `--device cuda:0` style options in a shell script.
SHELL_DEVICE_OPTION = re.compile(r"(--[\w-]*device)(?:=|\s+)[\"']?(cuda(?::\d+)?)\b")


class DeviceString(Rule):
    """
    ## What it does
    Rewrites the device strings `"cuda"`, `"cuda:N"`, `f"cuda:{i}"`, `f"cuda"`, and the templates
    `"cuda:{}".format(i)` / `"cuda:%d" % i` to `"npu"`, `"npu:N"`, ... where they are used as
    devices: `torch.device(...)`, `.to(...)`, any `device=` / `map_location=` / `device_type=`
    argument, `torch.autocast(...)`, `torch.amp.GradScaler(...)`, the device type of
    `init_device_mesh(...)`, `DeviceMesh(...)` and `DeviceMesh.from_group(...)`, comparisons with
    `x.device.type` or a `*device` variable, assignments to a `*device` variable or attribute (in
    any case: `_C.MODEL.DEVICE`), `*device` parameter defaults, `torch.set_default_device(...)`,
    the default and choices of an `--*device` command-line option and the default of an absl
    `*device` flag (`flags.DEFINE_string("base_device", "cuda", ...)`), and the strings a
    conditional expression picks when `torch.cuda.is_available()` holds (`["cuda:0"] if
    torch.cuda.is_available() else ["cpu"]`), whose test NPU302 makes ask for the NPU. The value
    is followed through `a if cond else b`, `a or b` and the assignments that reach it, so
    `device = torch.device("cuda" if torch.cuda.is_available() else "cpu")` and
    `loc = "cuda:{}".format(gpu); torch.load(path, map_location=loc)` are both covered. Strings
    anywhere else (log messages, docstrings, comments) are left alone, and so are the keys of a
    `map_location={"cuda:0": ...}` dict, which name where a checkpoint was saved.

    The tests of those values move with them: every comparison, membership or prefix test,
    `match` case or dictionary lookup that compares a value with `"cuda"` / `"cuda:N"`
    (`"cuda" in device`, `device_type == "cuda"`, `device in ("cuda", "mps")`,
    `str(x.device).startswith("cuda")`, `device.split(":")[0] == "cuda"`, `case "cuda":`,
    `{"cuda": a, "cpu": b}[device_type]`) is rewritten when a value it tests moves to the NPU.
    A parameter is followed into the calls of its function, in its module and (through the
    project stage) in the other modules of the run. A test whose values cannot all be seen, or
    that tests values that move together with CUDA strings that stay, is reported with the
    edit to make; a test that turns on an optimizer's `fused=True` is left, with a note.

    Calls whose device type defaults to CUDA get it: `torch.amp.GradScaler()` becomes
    `torch.amp.GradScaler("npu")`, `torch.is_autocast_enabled()` /
    `torch.set_autocast_enabled(flag)` take `"npu"` first, and `torch.get_autocast_gpu_dtype()` /
    `set_autocast_gpu_dtype(d)` become `torch.get_autocast_dtype("npu")` /
    `set_autocast_dtype("npu", d)`.

    With `--target accelerator`: `"cuda"` becomes `torch.accelerator.current_accelerator().type`
    and `"cuda:N"` becomes `f"{torch.accelerator.current_accelerator().type}:N"`.

    ## Why
    torch_npu's devices are called `npu`; `"cuda"` devices do not exist on an Ascend machine.
    A test left as `"cuda"` while the value it tests becomes `"npu"` silently takes the other
    branch (nanoGPT's `device_type = "cuda" if "cuda" in device else "cpu"` would turn autocast
    off), and a `GradScaler()` left on its CUDA default scales nothing on the NPU.

    ## Example
    ```python
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device_type = "cuda" if "cuda" in str(device) else "cpu"
    logger.info("running on cuda")
    ```

    ## Use instead
    ```python
    device = torch.device("npu" if torch.cuda.is_available() else "cpu")
    device_type = "npu" if "npu" in str(device) else "cpu"
    logger.info("running on cuda")
    ```
    (`torch.cuda.is_available()` is NPU302's.)

    ## Fix safety
    Safe. A device string assembled from pieces (`"cuda" + suffix`, `f"cuda" + ":" + rank`) is
    reported, and so is a test whose values cannot all be followed.
    """

    CODE = "NPU303"
    NAME = "device-string"
    SUMMARY = '`"cuda"` / `"cuda:N"` device string'
    FIX_SAFETY = FixSafety.SAFE
    # Device strings, and the calls whose device type defaults to CUDA (CUDA_DEFAULTS).
    TRIGGER = ('"cuda', "'cuda", "GradScaler", "_autocast_")
    # Files with a test of a device string on a parameter: the link stage finds what the calls
    # of its function in the other modules pass (rules/device/_tests.py).
    PROJECT_TRIGGER = ('"cuda', "'cuda")
    # NPU101's dropped `fused` keys: a device test that decided only those is rewritten.
    READS = (DroppedKeys,)

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        return tests.wants_summary(source)

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        return tests.summarize(FileView(index))

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        return tests.link(linking, cls.project_key())

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
        self._rewritten: set[int] = set()
        self._left: list[tuple[tests.DeviceTest, tests.Judgement]] = []
        for value, _ in device_flow(self.view).reached:
            if _is_concatenated_device(self, value):
                self.report(
                    value,
                    'device string built with `+` from "cuda": write "npu" (or "npu:N") '
                    "by hand; the rest of the string cannot be checked here",
                )
        moved = moved_device_literals(self.view)
        device_tests = tests.device_tests(self.view)
        dropped = dropped_keys(self)  # NPU101 removes these `fused` keys
        fused = {
            id(literal): (test, choice)
            for test in device_tests
            if (choice := tests.fused_choice(self.view, test, dropped)) is not None
            for literal in test.literals
        }
        held = held_guards(self.view, self.project, self.context.path)
        for value in moved.values():
            if id(value) not in fused and id(value) not in held:
                self._rewrite(value)
        for call in self.calls_to(TORCH_ROOTS):
            self._check_cuda_default(call)
        linked = self.project.links(self.project_key()).get(self.context.path, {})
        judge = tests.TestJudge(self.view, linked.get("parameters"))
        for test in device_tests:
            literals = test.literals
            if id(literals[0]) in held:
                guard = held[id(literals[0])]
                written = self.view.written(test.at)
                self.report(
                    test.at,
                    held_message(written, self._edited_test(test), guard),
                    guard.severity,
                )
                continue
            if all(id(literal) in moved for literal in literals) and id(literals[0]) not in fused:
                continue  # a comparison with a value named as a device: rewritten above
            by_name = all(id(literal) in moved for literal in literals)
            judgement = tests.MOVES if by_name else judge.judge(test)
            self._check_test(test, judgement, fused.get(id(literals[0]), (None, None))[1])
        if self._rewritten:  # device strings move in this file: say why these tests do not
            for test, judgement in self._left:
                kind = (
                    "CUDA strings that are not used as devices"
                    if judgement.staying
                    else "not devices"
                )
                self.report(
                    test.at,
                    f"this {test.form.value} is left as it is: the values it tests are {kind} "
                    "and do not change",
                    Severity.INFO,
                )

    # -- tests of device strings -----------------------------------------------------------------

    def _check_test(
        self, test: tests.DeviceTest, judgement: tests.Judgement, fused: ast.AST | None
    ) -> None:
        verdict = judgement.verdict
        if verdict in (tests.Verdict.STAYS, tests.Verdict.OTHER):
            self._left.append((test, judgement))  # noted once the file's rewrites are known
            return
        written = self.view.written(test.at)
        edited = self._edited_test(test)
        if verdict is tests.Verdict.UNKNOWN:
            origin = _listed(judgement.unseen) or "a value npu-migrate cannot follow"
            self.report(
                test.at,
                f"cannot tell whether this {test.form.value} tests a device that the migration "
                f"moves to the NPU (it reads {origin}); if it does, write `{edited}`",
            )
            return
        if verdict is tests.Verdict.CONFLICT:
            self.report(
                test.at,
                f"this {test.form.value} tests values that move to the NPU and values that stay "
                f"CUDA strings ({_listed(judgement.staying)}): make them agree, then write "
                f"`{edited}`",
            )
            return
        if fused is not None:
            self.report(
                test.at,
                f"`{written}` is left as it is: it decides the `fused` option at line "
                f"{self.view.line(fused)}, and torch's fused optimizer kernels are CUDA's; on the "
                "NPU the optimizer runs unfused (NPU101 swaps in an NPU fused optimizer where it "
                "can)",
                Severity.INFO,
            )
            return
        if test.other_uses:
            self.report(
                test.at,
                "this dictionary is looked up by a device that moves to the NPU and also used "
                f"another way: give it the NPU's key (`{edited}`) where it is looked up",
            )
            return
        if test.form is tests.Form.CASE and not isinstance(
            device_target(self).device_type_name, str
        ):
            self.report(
                test.at,
                f"`case {self.view.written(test.literals[0])}:` cannot name the device type "
                "known only at run time: compare with it in a guard (`case _ if ...`)",
            )
            return
        for literal in test.literals:
            self._rewrite(literal)

    def _edited_test(self, test: tests.DeviceTest) -> str:
        """The test as written, with its CUDA strings as the target spells them."""
        start, end = self.view.written_span(test.at)
        text = self.source.text[start:end]
        for literal in sorted(test.literals, key=self.source.start, reverse=True):
            literal_start, literal_end = self.source.span(literal)
            new = self._new_code(literal) or self.code(literal)
            text = text[: literal_start - start] + new + text[literal_end - start :]
        return text.split("\n")[0] + (" ..." if "\n" in text else "")

    def _new_code(self, node: ast.AST) -> str | None:
        target = device_target(self)
        name = target.device_type_name
        if isinstance(name, str):
            return _renamed_code(self, node, name)
        return _type_expression_code(self, node, target)

    # -- calls whose device type defaults to CUDA ------------------------------------------------

    def _check_cuda_default(self, call: ast.Call) -> None:
        """``torch.amp.GradScaler()`` and the autocast state functions that mean CUDA when they
        are not told a device type: on the NPU they would scale nothing or read the wrong
        autocast state."""
        name = torch_name(self.view, call.func)
        default = CUDA_DEFAULTS.get(name or "")
        if default is None or not default.applies(call):
            return
        written = self.view.written(call.func)
        if default.renamed is not None and not isinstance(call.func, ast.Attribute):
            self.report(
                call,
                f"`{written}()` means CUDA: import `{default.renamed}` instead and call it with "
                "the device type first",
            )
            return
        device_type = device_target(self).device_type
        renamed = default.renamed

        def with_device_type(node: cst.Call) -> cst.Call:
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            first = cst.Arg(
                expression(device_type), comma=comma if node.args else cst.MaybeSentinel.DEFAULT
            )
            func = node.func
            if renamed is not None:
                assert isinstance(func, cst.Attribute)
                func = func.with_changes(attr=cst.Name(renamed))
            return node.with_changes(func=func, args=[first, *node.args])

        new_func = written if renamed is None else f"{written.rpartition('.')[0]}.{renamed}"
        given = self.code(call)[len(self.code(call.func)) :].strip()[1:-1].strip()
        rest = "" if not given else ", ..." if "\n" in given else f", {given}"
        message = (
            f"`{written}()` means CUDA without a device type ({default.why}): -> "
            f"`{new_func}({device_type}{rest})`"
        )
        if self.fix(call, message, self.replace(call, cst.Call, with_device_type)):
            add_device_import(self)

    def _rewrite(self, node: ast.AST) -> None:
        if id(node) in self._rewritten:
            return
        self._rewritten.add(id(node))
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


def _is_concatenated_device(rule: Rule, node: ast.AST) -> bool:
    """``"cuda" + suffix``, ``"cuda" + ":" + str(rank)``, ``f"cuda:{rank}" + suffix``: a sum
    whose leftmost operand is a string that starts with ``cuda``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return False
    left = node.left
    while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add):
        left = left.left
    if isinstance(left, ast.JoinedStr):
        return cuda_fstring_head(rule.view, left) is not None
    literal = simple_string(rule.view, left)
    return literal is not None and not literal.is_bytes and literal.body.startswith("cuda")


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


def _listed(items: tuple[str, ...]) -> str:
    quoted = [item if item.startswith("the ") else f"`{item}`" for item in items[:3]]
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return ", ".join(quoted) + more
