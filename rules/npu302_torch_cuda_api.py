"""NPU302: `torch.cuda.X` APIs (device management, memory, streams, amp, random state)."""

from __future__ import annotations

import re

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import ParentNodeProvider

from migrator.callargs import positional
from migrator.names import Ambiguous
from migrator.rule import FixSafety
from migrator.rules.npu3_device import (
    ACCELERATOR_API,
    ACCELERATOR_TORCH_API,
    ACCELERATOR_TYPE,
    NPU_CUDA_AMP_API,
    NPU_CUDA_API,
    REPORTED_BY_OTHER_RULES,
    UNSUPPORTED_HINTS,
    DeviceRule,
    add_device_import,
    expression,
    is_accelerator,
)

# import-time module names: torch.npu only exists once torch_npu is imported, so imports name
# torch_npu's own module, which works wherever the line sits.
IMPORTED_MODULES = {"torch.cuda": "torch_npu.npu", "torch.cuda.amp": "torch_npu.npu.amp"}


class TorchCudaApi(DeviceRule):
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
    `import torch_npu.npu as tc`. Any other `torch.cuda` attribute is reported.

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
    TRIGGER = re.compile(r"\bcuda\b")

    # -- attributes --------------------------------------------------------------------------

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if self._inside_import(original_node):
            return updated_node
        if original_node.attr.value == "cuda":
            torch = self.qualified_name(original_node.value)
            if isinstance(torch, Ambiguous):
                self.report(
                    original_node,
                    f"cannot tell whether this is `torch.cuda`: {torch.describe()}; "
                    "use `torch.npu` by hand if it is",
                )
                return updated_node
            if torch == "torch":
                return self._torch_cuda(original_node, updated_node)
        if is_accelerator(self) and self._is_torch_cuda(original_node.value):
            return self._accelerator_member(original_node, updated_node)
        if isinstance(original_node.value, cst.Name):
            self._check_alias_member(original_node)
        return updated_node

    def _is_torch_cuda(self, node: cst.BaseExpression) -> bool:
        return (
            isinstance(node, cst.Attribute)
            and node.attr.value == "cuda"
            and self.qualified_name(node.value) == "torch"
        )

    def _members(self, node: cst.Attribute) -> tuple[str | None, str | None]:
        """``("amp", "autocast")`` for ``torch.cuda`` inside ``torch.cuda.amp.autocast``."""
        found: list[str | None] = []
        current: cst.CSTNode = node
        for _ in range(2):
            parent = self.get_metadata(ParentNodeProvider, current, None)
            if not isinstance(parent, cst.Attribute) or parent.value is not current:
                break
            found.append(parent.attr.value)
            current = parent
        found += [None, None]
        return found[0], found[1]

    def _unsupported(self, member: str | None, sub: str | None) -> bool:
        if member is None:
            return False
        if member not in NPU_CUDA_API:
            return True
        return member == "amp" and sub is not None and sub not in NPU_CUDA_AMP_API

    def _torch_cuda(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        member, sub = self._members(original)
        if member in REPORTED_BY_OTHER_RULES:
            return updated
        if self._unsupported(member, sub):
            self._report_unsupported(original, member, sub)
            return updated
        if is_accelerator(self):
            if member is not None:
                return updated  # rewritten with its member, in _accelerator_member / leave_Call
            if not self.fix(original.attr, "`torch.cuda` -> `torch.get_device_module()`"):
                return updated
            add_device_import(self)
            return expression("torch.get_device_module()")
        dotted = ".".join(p for p in (member, sub) if p)
        dotted = f".{dotted}" if dotted else ""
        if not self.fix(original.attr, f"`torch.cuda{dotted}` -> `torch.npu{dotted}`"):
            return updated
        add_device_import(self)
        return updated.with_changes(attr=cst.Name("npu"))

    def _report_unsupported(self, node: cst.CSTNode, member: str | None, sub: str | None) -> None:
        dotted = ".".join(p for p in ("torch.cuda", member, sub) if p)
        advice = UNSUPPORTED_HINTS.get(member or "") if member != "amp" else None
        self.report(
            node,
            f"`{dotted}` has no torch_npu equivalent under `torch.npu`; "
            + (
                advice or "find the Ascend replacement in the torch_npu API list or remove the call"
            ),
        )

    def _check_alias_member(self, node: cst.Attribute) -> None:
        """``tc.nvtx`` after ``import torch.cuda as tc``: the import is rewritten, so say when a
        member will not exist under torch_npu."""
        base = self.qualified_name(node.value)
        member = node.attr.value
        if base == "torch.cuda" and member not in REPORTED_BY_OTHER_RULES:
            if member not in NPU_CUDA_API:
                self._report_unsupported(node, member, None)
        elif base == "torch.cuda.amp" and member not in NPU_CUDA_AMP_API:
            self._report_unsupported(node, "amp", member)

    # -- --target accelerator ----------------------------------------------------------------

    def _accelerator_member(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        member = original.attr.value
        if member in REPORTED_BY_OTHER_RULES or member not in NPU_CUDA_API or member == "amp":
            return updated
        if member in ACCELERATOR_API:
            code = f"torch.accelerator.{ACCELERATOR_API[member]}"
        elif member in ACCELERATOR_TORCH_API:
            code = f"torch.{ACCELERATOR_TORCH_API[member]}"
        else:
            code = f"torch.get_device_module().{member}"
        if not self.fix(original.attr, f"`torch.cuda.{member}` -> `{code}`"):
            return updated
        add_device_import(self)
        return expression(code)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not is_accelerator(self):
            return updated_node
        name = self.qualified_name(original_node.func)
        if name == "torch.cuda.amp.autocast" and self._is_written_out(original_node.func):
            if positional(original_node):
                self.report(
                    original_node,
                    "`torch.cuda.amp.autocast(...)` with positional arguments: their order differs "
                    "in `torch.autocast(device_type, dtype, enabled, ...)`; rewrite by hand",
                )
                return updated_node
            return self._with_device_type(original_node, updated_node, "torch.autocast")
        if name == "torch.cuda.amp.GradScaler" and self._is_written_out(original_node.func):
            return self._with_device_type(original_node, updated_node, "torch.amp.GradScaler")
        return updated_node

    def _is_written_out(self, func: cst.BaseExpression) -> bool:
        """``torch.cuda.amp.X`` spelled in full (imported names are reported at the import)."""
        return (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Attribute)
            and func.value.attr.value == "amp"
            and self._is_torch_cuda(func.value.value)
        )

    def _with_device_type(
        self, original: cst.Call, updated: cst.Call, replacement: str
    ) -> cst.BaseExpression:
        dotted = get_full_name_for_node(original.func)
        if not self.fix(original, f"`{dotted}(...)` -> `{replacement}(<accelerator type>, ...)`"):
            return updated
        add_device_import(self)
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        device_type = cst.Arg(
            expression(ACCELERATOR_TYPE), comma=comma if updated.args else cst.MaybeSentinel.DEFAULT
        )
        return updated.with_changes(func=expression(replacement), args=[device_type, *updated.args])

    # -- imports -----------------------------------------------------------------------------

    def _inside_import(self, node: cst.CSTNode) -> bool:
        current: cst.CSTNode | None = node
        while isinstance(current, cst.Attribute | cst.Name | cst.ImportAlias):
            current = self.get_metadata(ParentNodeProvider, current, None)
        return isinstance(current, cst.Import | cst.ImportFrom)

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        aliases = list(updated_node.names)
        for index, alias in enumerate(original_node.names):
            module = get_full_name_for_node(alias.name)
            if module not in IMPORTED_MODULES or alias.asname is None:
                continue  # `import torch.cuda` binds `torch`: its uses are rewritten instead
            if is_accelerator(self):
                self._report_accelerator_import(alias, module)
                continue
            target = IMPORTED_MODULES[module]
            if self.fix(alias, f"`import {module} as ...` -> `import {target} as ...`"):
                add_device_import(self)
                new_name = expression(target)
                assert isinstance(new_name, cst.Attribute)
                aliases[index] = aliases[index].with_changes(name=new_name)
        return updated_node.with_changes(names=aliases)

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom:
        if original_node.relative or original_node.module is None:
            return updated_node
        module = get_full_name_for_node(original_node.module)
        if module == "torch":
            return self._from_torch_import_cuda(original_node, updated_node)
        if module not in IMPORTED_MODULES:
            return updated_node
        if isinstance(original_node.names, cst.ImportStar):
            self.report(
                original_node,
                f"`from {module} import *`: import the names you use from "
                f"`{IMPORTED_MODULES[module]}` instead",
            )
            return updated_node
        if is_accelerator(self):
            self._report_accelerator_import(original_node, module)
            return updated_node
        supported = NPU_CUDA_API if module == "torch.cuda" else NPU_CUDA_AMP_API
        missing = [
            a.evaluated_name for a in original_node.names if a.evaluated_name not in supported
        ]
        if any(name in REPORTED_BY_OTHER_RULES for name in missing):
            return updated_node  # NPU922 / NPU924 report the uses; the import stays torch's
        if missing:
            self._report_unsupported(
                original_node,
                *((missing[0], None) if module == "torch.cuda" else ("amp", missing[0])),
            )
            return updated_node
        target = IMPORTED_MODULES[module]
        if not self.fix(original_node, f"`from {module} import` -> `from {target} import`"):
            return updated_node
        add_device_import(self)
        new_module = expression(target)
        assert isinstance(new_module, cst.Attribute)
        return updated_node.with_changes(module=new_module)

    def _from_torch_import_cuda(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom:
        """``from torch import cuda`` -> ``from torch_npu import npu as cuda``."""
        if isinstance(original.names, cst.ImportStar):
            return updated
        cuda = [a for a in original.names if a.evaluated_name == "cuda"]
        if not cuda:
            return updated
        if is_accelerator(self) or len(original.names) > 1:
            self.report(
                original,
                "`from torch import cuda` together with other names: import `cuda` on its own "
                "line as `from torch_npu import npu as cuda`",
            )
            return updated
        if not self.fix(original, "`from torch import cuda` -> `from torch_npu import npu`"):
            return updated
        add_device_import(self)
        alias = cuda[0]
        asname = alias.asname or cst.AsName(name=cst.Name("cuda"))
        return updated.with_changes(
            module=cst.Name("torch_npu"),
            names=[alias.with_changes(name=cst.Name("npu"), asname=asname)],
        )

    def _report_accelerator_import(self, node: cst.CSTNode, module: str) -> None:
        self.report(
            node,
            f"importing from `{module}` cannot be made device-agnostic: import torch and use "
            "`torch.accelerator`, `torch.get_device_module()` or `torch.amp` at the call sites",
        )
