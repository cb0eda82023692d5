"""NPU309: the TF32 switches, whose Ascend counterparts are torch_npu's HF32 switches."""

from __future__ import annotations

import ast

from migrator.analysis.names import Ambiguous
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import TORCH_ROOTS, add_device_import, expression, torch_name

# torch's TF32 switch -> torch_npu's HF32 switch (torch_npu/npu/__init__.py: `matmul` and
# `conv` are torch_npu.npu.npu_config._allowHF32Matmul / _allowHF32Conv instances).
HF32_SWITCHES = {
    "torch.backends.cuda.matmul.allow_tf32": ("matmul", "off"),
    "torch.backends.cudnn.allow_tf32": ("conv", "on"),
}


class Tf32Switch(Rule):
    """
    ## What it does
    Rewrites the TF32 switches to torch_npu's HF32 switches:
    `torch.backends.cuda.matmul.allow_tf32 = x` becomes `torch.npu.matmul.allow_hf32 = x`, and
    `torch.backends.cudnn.allow_tf32 = x` becomes `torch.npu.conv.allow_hf32 = x` (the user's
    spelling of `torch` is kept). Turning a switch off (`= False`) is always rewritten, and so is
    turning on the convolution switch, which is on by default on the NPU; turning the matmul
    switch on, or either to a computed value, only with `--unsafe-fixes` (reported otherwise,
    with the line to write).

    ## Why
    On Ascend the TF32 switches do nothing. HF32 is the NPU's reduced-precision mode for fp32
    matrix multiplications and convolutions, with its own switches in torch_npu:
    `torch.npu.matmul.allow_hf32` (off unless set) and `torch.npu.conv.allow_hf32` (on unless
    set). A script that turns TF32 off to compute convolutions in full fp32 would compute them
    in HF32 on the NPU without the rewrite.

    ## Example
    ```python
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = False
    ```

    ## Use instead
    ```python
    torch.npu.matmul.allow_hf32 = True
    torch.npu.conv.allow_hf32 = False
    ```

    ## Fix safety
    `= False` is safe: fp32 on both machines. `cudnn.allow_tf32 = True` is safe: the NPU's
    convolutions run in HF32 unless told otherwise, so the line changes nothing there. The
    matmul switch `= True` (and a computed value) is unsafe: it turns HF32 on where the NPU
    would compute in fp32, and HF32 is not TF32's number format, so the NPU's results differ from
    the GPU's in other low bits; it keeps what the switch was for, speed at reduced precision.
    """

    CODE = "NPU309"
    NAME = "tf32-switch"
    SUMMARY = "TF32 switch (`allow_tf32`), whose Ascend counterpart is the HF32 switch"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("allow_tf32",)

    def check(self) -> None:
        for attribute in self.index.attributes("allow_tf32"):
            if not isinstance(attribute.ctx, ast.Store) or not self.may_name(
                attribute, TORCH_ROOTS
            ):
                continue
            statement = self.index.parent(attribute)
            if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
                continue
            name = self.qualified_name(attribute)
            if isinstance(name, Ambiguous):
                candidates = [c for c in name.candidates if c in HF32_SWITCHES]
                if candidates:
                    self.report(
                        attribute,
                        f"cannot tell whether this is `{candidates[0]}`: {name.describe()}; if "
                        f"it is, its Ascend counterpart is `torch.npu."
                        f"{HF32_SWITCHES[candidates[0]][0]}.allow_hf32`",
                    )
                continue
            if name in HF32_SWITCHES:
                self._switch(attribute, name, statement.value)

    def _switch(self, attribute: ast.Attribute, name: str, value: ast.expr) -> None:
        module, default = HF32_SWITCHES[name]
        base = _base(attribute)
        spelled = base is not None and torch_name(self.view, base) == "torch"
        torch = base.id if spelled and base is not None else "torch"
        new = f"{torch}.npu.{module}.allow_hf32"
        written = self.view.written(value)
        literal = value.value if isinstance(value, ast.Constant) else None
        # Off: fp32 on both machines. On, where HF32 is the NPU's default (convolutions): the
        # NPU computes the same with and without the line, so writing it changes nothing there.
        same_on_the_npu = literal is False or (literal is True and default == "on")
        if not same_on_the_npu and not self.settings.unsafe_fixes:
            self.report(
                attribute,
                f"`{name}` has no effect on Ascend; its counterpart is `{new}` (HF32, the NPU's "
                f"reduced-precision fp32 mode, {default} unless set): write `{new} = {written}` "
                "(not applied without --unsafe-fixes: HF32 rounds differently from TF32)",
            )
            return
        edit = self.replace(attribute, cst.Attribute, lambda _: expression(new))
        if self.fix(attribute, f"`{name}` -> `{new}`", edit):
            if not spelled:
                self.add_import("torch")  # `import torch.backends.cudnn as cudnn` binds no torch
            add_device_import(self)


def _base(attribute: ast.Attribute) -> ast.Name | None:
    """``T`` in ``T.backends.cudnn.allow_tf32``."""
    node: ast.AST = attribute
    while isinstance(node, ast.Attribute):
        node = node.value
    return node if isinstance(node, ast.Name) else None
