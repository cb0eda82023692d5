"""NPU302: `torch.cuda.X` APIs (device management, memory, streams, amp, random state)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from migrator.analysis.calls import positional
from migrator.analysis.index import full_name
from migrator.analysis.names import Ambiguous
from migrator.analysis.view import Location
from migrator.diagnostics import Diagnostic
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import (
    NPU_CUDA_AMP_API,
    NPU_CUDA_API,
    REPORTED_BY_OTHER_RULES,
    TORCH_ROOTS,
    UNSUPPORTED_HINTS,
    add_device_import,
    expression,
    shell_finding,
    string_body,
    torch_name,
)
from migrator.rules.device._guards import held_guards, held_message
from migrator.rules.device._target import NPU_IMPORTED_MODULES, NoCounterpart, device_target

# The modules whose imports are rewritten (to the target's module, see DeviceTarget).
IMPORTED_MODULES = frozenset(NPU_IMPORTED_MODULES)

# Functions whose first argument names what a test replaces ("torch.cuda.current_stream").
PATCHERS = frozenset({"unittest.mock.patch", "mock.patch"})
# pytest's fixtures, which are parameters and resolve to nothing: known by their usual names.
FIXTURE_PATCHERS = {("mocker", "patch"), ("monkeypatch", "setattr")}


# `torch.cuda.X` in inline Python of a shell script.
SHELL_TORCH_CUDA = re.compile(r"\btorch\.cuda\.(\w+)")


class TorchCudaApi(Rule):
    """
    ## What it does
    Rewrites `torch.cuda.X` to `torch.npu.X` for everything torch_npu provides under `torch.npu`
    with the same signature: device management (`is_available`, `device_count`, `set_device`,
    `synchronize`, ...), memory statistics, `Stream` / `Event` / `stream(...)`, random state
    (`manual_seed_all`, `get_rng_state`, ...), `amp.autocast` and `amp.GradScaler`, and adds
    `import torch_npu`. The user's spelling stays: `import torch as T; T.cuda.synchronize()`
    becomes `T.npu.synchronize()`. Imports are rewritten with their aliases kept, to torch_npu's
    own module (which, unlike `torch.npu`, can be imported before `import torch_npu` has run):
    `from torch.cuda.amp import GradScaler as GS` becomes
    `from torch_npu.npu.amp import GradScaler as GS`, `import torch.cuda as tc` becomes
    `import torch_npu.npu as tc`. Any other `torch.cuda` attribute is reported. Patch targets of
    tests follow: `mock.patch("torch.cuda.current_stream")` (also `mocker.patch`,
    `monkeypatch.setattr` with a string target) becomes `mock.patch("torch.npu.current_stream")`.

    With `--target accelerator`: `torch.cuda.is_available()` and the other functions that
    `torch.accelerator` has become `torch.accelerator.*` (`current_device` ->
    `current_device_index`, `set_device` -> `set_device_index`); `Stream` / `Event` become
    `torch.Stream` / `torch.Event`; the rest become `torch.get_device_module().X`;
    `torch.cuda.amp.autocast(...)` / `GradScaler(...)` become `torch.autocast(<type>, ...)` /
    `torch.amp.GradScaler(<type>, ...)`. Imports from `torch.cuda` are reported.

    ## Why
    `torch.cuda` drives NVIDIA GPUs only; on Ascend the same calls live in `torch.npu`.

    ## Example
    ```python
    torch.cuda.set_device(args.gpu)
    scaler = torch.cuda.amp.GradScaler()
    ```

    ## Use instead
    ```python
    torch.npu.set_device(args.gpu)
    scaler = torch.npu.amp.GradScaler()
    ```

    ## Fix safety
    Safe: only names that torch_npu provides with the same signature are rewritten.
    """

    CODE = "NPU302"
    NAME = "torch-cuda-api"
    SUMMARY = "`torch.cuda.X` API that has a `torch.npu` equivalent"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("cuda",)

    @classmethod
    def scan_shell_line(cls, code: str, path: str, number: int) -> Iterator[Diagnostic]:
        """``python -c "import torch; torch.cuda.set_device(...)"`` and here-documents."""
        for match in SHELL_TORCH_CUDA.finditer(code):
            name = match.group(1)
            yield shell_finding(
                path,
                number,
                match.start(),
                cls.CODE,
                f"inline Python uses `torch.cuda.{name}`: write `torch.npu.{name}` and "
                "`import torch_npu`",
            )

    def check(self) -> None:
        target = device_target(self)
        by_member = isinstance(target.cuda_module_attribute, NoCounterpart)
        for attribute in self.index.attributes("cuda"):
            self._check_cuda(attribute)
            if by_member:
                parent = self.index.parent(attribute)
                member = isinstance(parent, ast.Attribute) and parent.value is attribute
                if member and self._is_torch_cuda(attribute):
                    assert isinstance(parent, ast.Attribute)
                    self._member(parent)
        self._check_alias_members()
        if target.amp_calls:
            for call in self.calls_to(TORCH_ROOTS):
                self._amp_call(call)
        for plain in self.index.nodes(ast.Import):
            self._check_import(plain)
        for from_import in self.index.nodes(ast.ImportFrom):
            self._check_import_from(from_import)
        text = self.source.text
        if '"torch.cuda.' in text or "'torch.cuda." in text:  # a patch target, maybe
            for constant in self.index.nodes(ast.Constant):
                if isinstance(constant.value, str) and constant.value.startswith("torch.cuda."):
                    self._check_patch_target(constant)

    # -- patch targets in tests --------------------------------------------------------------

    def _check_patch_target(self, constant: ast.Constant) -> None:
        """``@patch("torch.cuda.current_stream")``: once the code under test calls
        ``torch.npu.current_stream``, a test that patches the CUDA name replaces nothing."""
        call = self.index.parent(constant)
        if not isinstance(call, ast.Call) or not call.args or call.args[0] is not constant:
            return
        patcher = self._patcher(call.func)
        if patcher is None:
            return
        body = string_body(self.view, constant)
        if body is None or body != constant.value:
            return  # escapes or an implicit concatenation: not worth the risk
        parts = body.split(".")
        member, sub = parts[2], parts[3] if len(parts) > 3 else None
        if member in REPORTED_BY_OTHER_RULES or self._unsupported(member, sub):
            return  # the code keeps (and NPU302 reports) the CUDA name: so does the test
        prefix = device_target(self).patch_prefix
        if isinstance(prefix, NoCounterpart):
            self.report(
                constant,
                f"this patches `{body}`, which the migrated code no longer calls: {prefix.reason}",
            )
            return
        new = prefix + body.removeprefix("torch.cuda.")
        if isinstance(patcher, Ambiguous):
            self.report(
                constant,
                f"cannot tell whether this is `unittest.mock.patch`: {patcher.describe()}; if it "
                f"is, patch `{new}`, which the migrated code calls instead of `{body}`",
            )
            return
        edit = self.replace(
            constant,
            cst.SimpleString,
            lambda string: string.with_changes(value=string.value.replace(body, new, 1)),
        )
        if self.fix(constant, f"patch target `{body}` -> `{new}`", edit):
            add_device_import(self)

    def _patcher(self, callee: ast.expr) -> str | Ambiguous | None:
        """What patches, when ``callee`` may be one of the patching functions."""
        if (
            isinstance(callee, ast.Attribute)
            and isinstance(callee.value, ast.Name)
            and (callee.value.id, callee.attr) in FIXTURE_PATCHERS
        ):
            return f"{callee.value.id}.{callee.attr}"
        return self.qualified_name_in(callee, PATCHERS)

    # -- attributes --------------------------------------------------------------------------

    def _check_cuda(self, node: ast.Attribute) -> None:
        """``torch.cuda`` (any spelling of torch) and what follows it."""
        if not self.may_name(node.value, TORCH_ROOTS):
            return
        # Ambiguity matters only when one of the candidates is torch (`tl.extra.cuda` after a
        # try/except import of triton is not torch.cuda, whatever else it is).
        torch = self.qualified_name_in(node.value, {"torch"})
        if isinstance(torch, Ambiguous):
            self.report(
                node,
                f"cannot tell whether this is `torch.cuda`: {torch.describe()}; "
                "use `torch.npu` by hand if it is",
            )
        elif torch == "torch":
            self._torch_cuda(node)

    def _is_torch_cuda(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "cuda"
            and torch_name(self.view, node.value) == "torch"
        )

    def _members(self, node: ast.Attribute) -> tuple[str | None, str | None]:
        """``("amp", "autocast")`` for ``torch.cuda`` inside ``torch.cuda.amp.autocast``."""
        found: list[str | None] = []
        current: ast.AST = node
        for _ in range(2):
            parent = self.index.parent(current)
            if not isinstance(parent, ast.Attribute) or parent.value is not current:
                break
            found.append(parent.attr)
            current = parent
        found += [None, None]
        return found[0], found[1]

    def _unsupported(self, member: str | None, sub: str | None) -> bool:
        if member is None:
            return False
        if member not in NPU_CUDA_API:
            return True
        return member == "amp" and sub is not None and sub not in NPU_CUDA_AMP_API

    def _torch_cuda(self, node: ast.Attribute) -> None:
        member, sub = self._members(node)
        if member in REPORTED_BY_OTHER_RULES:
            return
        held = held_guards(self.view, self.project, self.context.path).get(id(node))
        if held is not None:
            member_node = self.index.parent(node)
            call = self.index.parent(member_node) if member_node is not None else None
            assert isinstance(call, ast.Call)
            written = self.view.written(call)
            target = device_target(self)
            renamed = target.cuda_module_attribute
            new = (
                written.replace("cuda", renamed, 1)
                if isinstance(renamed, str)
                else f"{target.cuda_api.get(member or '', target.device_module)}()"
            )
            self.report(self.attr_position(node), held_message(written, new, held), held.severity)
            return
        if self._unsupported(member, sub):
            self._report_unsupported(node, member, sub)
            return
        at = self.attr_position(node)
        target = device_target(self)
        renamed = target.cuda_module_attribute
        if isinstance(renamed, NoCounterpart):
            if member is not None:
                return  # rewritten with its member, in _member / _amp_call
            module = target.device_module
            edit = self.replace(node, cst.Attribute, lambda _: expression(module))
            if self.fix(at, f"`torch.cuda` -> `{module}`", edit):
                add_device_import(self)
            return
        dotted = ".".join(p for p in (member, sub) if p)
        dotted = f".{dotted}" if dotted else ""
        edit = self.replace(
            node, cst.Attribute, lambda attribute: attribute.with_changes(attr=cst.Name(renamed))
        )
        if self.fix(at, f"`torch.cuda{dotted}` -> `torch.{renamed}{dotted}`", edit):
            add_device_import(self)

    def _report_unsupported(
        self, at: ast.AST | Location, member: str | None, sub: str | None
    ) -> None:
        dotted = ".".join(p for p in ("torch.cuda", member, sub) if p)
        advice = UNSUPPORTED_HINTS.get(member or "") if member != "amp" else None
        self.report(
            at,
            f"`{dotted}` has no one-to-one counterpart under `torch.npu` (not rewritten): "
            + (
                advice or "find the Ascend replacement in the torch_npu API list or remove the call"
            ),
        )

    def _check_alias_members(self) -> None:
        """``tc.nvtx`` after ``import torch.cuda as tc``: the import is rewritten, so say when a
        member will not exist under torch_npu."""
        modules = frozenset(IMPORTED_MODULES)
        bound = self.index.imported_as(modules) if self.context.fast else None
        for attribute in self.index.nodes(ast.Attribute):
            value = attribute.value
            if not isinstance(value, ast.Name) or (bound is not None and value.id not in bound):
                continue
            base = self.qualified_name(value)
            member = attribute.attr
            if base == "torch.cuda" and member not in REPORTED_BY_OTHER_RULES:
                if member not in NPU_CUDA_API:
                    self._report_unsupported(attribute, member, None)
            elif base == "torch.cuda.amp" and member not in NPU_CUDA_AMP_API:
                self._report_unsupported(attribute, "amp", member)

    # -- targets that spell each member on its own (--target accelerator) ----------------------

    def _member(self, node: ast.Attribute) -> None:
        member = node.attr
        if member in REPORTED_BY_OTHER_RULES or member not in NPU_CUDA_API or member == "amp":
            return
        target = device_target(self)
        code = target.cuda_api.get(member, f"{target.device_module}.{member}")
        edit = self.replace(node, cst.Attribute, lambda _: expression(code))
        if self.fix(self.attr_position(node), f"`torch.cuda.{member}` -> `{code}`", edit):
            add_device_import(self)

    def _amp_call(self, call: ast.Call) -> None:
        """``torch.cuda.amp.autocast(...)`` / ``GradScaler(...)`` spelled out, on a target that
        names the device type instead (``torch.autocast(<type>, ...)``)."""
        name = torch_name(self.view, call.func)
        replacement = device_target(self).amp_calls.get(name or "")
        if replacement is None or not self._is_written_out(call.func):
            return
        if name == "torch.cuda.amp.autocast" and positional(call):
            self.report(
                call,
                "`torch.cuda.amp.autocast(...)` with positional arguments: their order differs "
                "in `torch.autocast(device_type, dtype, enabled, ...)`; rewrite by hand",
            )
            return
        self._with_device_type(call, replacement)

    def _is_written_out(self, func: ast.AST) -> bool:
        """``torch.cuda.amp.X`` spelled in full (imported names are reported at the import)."""
        return (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "amp"
            and self._is_torch_cuda(func.value.value)
        )

    def _with_device_type(self, call: ast.Call, replacement: str) -> None:
        dotted = full_name(call.func)

        def with_device_type(node: cst.Call) -> cst.Call:
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            device_type = cst.Arg(
                expression(device_target(self).device_type),
                comma=comma if node.args else cst.MaybeSentinel.DEFAULT,
            )
            return node.with_changes(func=expression(replacement), args=[device_type, *node.args])

        edit = self.replace(call, cst.Call, with_device_type)
        if self.fix(call, f"`{dotted}(...)` -> `{replacement}(<accelerator type>, ...)`", edit):
            add_device_import(self)

    # -- imports -----------------------------------------------------------------------------

    def _check_import(self, statement: ast.Import) -> None:
        for alias in statement.names:
            module = alias.name
            if module not in IMPORTED_MODULES or alias.asname is None:
                continue  # `import torch.cuda` binds `torch`: its uses are rewritten instead
            modules = device_target(self).imported_modules
            if isinstance(modules, NoCounterpart):
                self._report_import(alias, module, modules)
                continue
            target = modules[module]

            def renamed(node: cst.ImportAlias, target: str = target) -> cst.ImportAlias:
                new_name = expression(target)
                assert isinstance(new_name, cst.Attribute)
                return node.with_changes(name=new_name)

            edit = self.replace(alias, cst.ImportAlias, renamed)
            if self.fix(alias, f"`import {module} as ...` -> `import {target} as ...`", edit):
                add_device_import(self)

    def _check_import_from(self, statement: ast.ImportFrom) -> None:
        if statement.level or statement.module is None:
            return
        module = statement.module
        if module == "torch":
            self._from_torch_import_cuda(statement)
            return
        if module not in IMPORTED_MODULES:
            return
        modules = device_target(self).imported_modules
        if any(alias.name == "*" for alias in statement.names):
            self.report(
                statement,
                f"`from {module} import *`: import the names you use from "
                f"`{NPU_IMPORTED_MODULES[module]}` instead",
            )
            return
        if isinstance(modules, NoCounterpart):
            self._report_import(statement, module, modules)
            return
        supported = NPU_CUDA_API if module == "torch.cuda" else NPU_CUDA_AMP_API
        missing = [a.name for a in statement.names if a.name not in supported]
        if any(name in REPORTED_BY_OTHER_RULES for name in missing):
            return  # NPU922 / NPU924 report the uses; the import stays torch's
        if missing:
            self._report_unsupported(
                statement,
                *((missing[0], None) if module == "torch.cuda" else ("amp", missing[0])),
            )
            return
        target = modules[module]

        def rehomed(node: cst.ImportFrom) -> cst.ImportFrom:
            new_module = expression(target)
            assert isinstance(new_module, cst.Attribute)
            return node.with_changes(module=new_module)

        edit = self.replace(statement, cst.ImportFrom, rehomed)
        if self.fix(statement, f"`from {module} import` -> `from {target} import`", edit):
            add_device_import(self)

    def _from_torch_import_cuda(self, statement: ast.ImportFrom) -> None:
        """``from torch import cuda`` -> ``from torch_npu import npu as cuda``."""
        if any(alias.name == "*" for alias in statement.names):
            return
        cuda = [a for a in statement.names if a.name == "cuda"]
        if not cuda:
            return
        target = device_target(self)
        renamed = target.cuda_module_attribute
        if isinstance(renamed, NoCounterpart) or len(statement.names) > 1:
            self.report(
                statement,
                "`from torch import cuda` together with other names: import `cuda` on its own "
                "line as `from torch_npu import npu as cuda`",
            )
            return
        home = target.import_module

        def rehomed(node: cst.ImportFrom) -> cst.ImportFrom:
            assert not isinstance(node.names, cst.ImportStar)
            alias = node.names[0]
            asname = alias.asname or cst.AsName(name=cst.Name("cuda"))
            return node.with_changes(
                module=cst.Name(home),
                names=[alias.with_changes(name=cst.Name(renamed), asname=asname)],
            )

        edit = self.replace(statement, cst.ImportFrom, rehomed)
        message = f"`from torch import cuda` -> `from {home} import {renamed}`"
        if self.fix(statement, message, edit):
            add_device_import(self)

    def _report_import(self, node: ast.AST, module: str, absent: NoCounterpart) -> None:
        self.report(
            node, f"importing from `{module}` cannot be made device-agnostic: {absent.reason}"
        )
