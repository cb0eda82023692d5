"""NPU901: imports of apex's CUDA extensions (`amp_C`, `multi_tensor_applier`, `apex.contrib`)."""

from __future__ import annotations

import ast
import re

from migrator.analysis.index import base_name, full_name
from migrator.analysis.scopes import BindingKind
from migrator.rule import FixSafety, Rule

# Compiled modules that apex builds with nvcc; none of them exists in Ascend's apex.
CUDA_EXTENSION_MODULES = frozenset(
    {
        "amp_C",
        "apex_C",
        "syncbn",
        "fused_layer_norm_cuda",
        "fused_adam_cuda",
        "fused_lamb_cuda",
        "fused_dense_cuda",
        "mlp_cuda",
        "xentropy_cuda",
        "fast_multihead_attn",
        "fused_weight_gradient_mlp_cuda",
        "scaled_masked_softmax_cuda",
        "scaled_upper_triang_masked_softmax_cuda",
        "focal_loss_cuda",
        "transducer_joint_cuda",
        "transducer_loss_cuda",
    }
)
MULTI_TENSOR = "apex.multi_tensor_apply"
CONTRIB = "apex.contrib"
# Ascend's apex ships this one contrib module itself (flat-buffer packing for NPU).
ASCEND_CONTRIB = ("apex.contrib.combine_tensors",)

ADVICE_KERNELS = (
    "replace its multi-tensor kernels with `torch._foreach_*` ops, or let the Ascend fused "
    "optimizers (`apex.optimizers.NpuFused*`) do the work"
)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def extension_advice(module: str) -> str | None:
    """Why ``module`` does not exist on Ascend and what to use instead, or None if it does."""
    top = module.split(".")[0]
    if top in CUDA_EXTENSION_MODULES:
        advice = ADVICE_KERNELS if top == "amp_C" else "write the operation with torch ops"
        return f"`{top}` is a CUDA extension built by apex and has no NPU build: {advice}"
    if _within(module, MULTI_TENSOR):
        return (
            "`apex.multi_tensor_apply` launches CUDA kernels from `amp_C` and has no NPU "
            f"build: {ADVICE_KERNELS}"
        )
    if (
        module.startswith(CONTRIB + ".")  # the package itself exists in Ascend's apex
        and not any(_within(module, a) for a in ASCEND_CONTRIB)
    ):
        return (
            f"`{module}` is built from CUDA extensions and has no Ascend version: replace it "
            "with a torch implementation by hand"
        )
    return None


class ApexCudaExtension(Rule):
    """
    ## What it does
    Reports imports of apex's compiled CUDA extensions (`amp_C`, `apex_C`, `*_cuda` modules),
    `apex.multi_tensor_apply.multi_tensor_applier` and `apex.contrib.*`, and uses of them
    through `import apex`.

    ## Why
    These modules are CUDA kernels compiled with nvcc; Ascend's apex does not build them, so
    the import fails on NPU. Their imports are never deleted: code that calls them needs a
    replacement written by hand.

    ## Example
    ```python
    import amp_C
    from apex.multi_tensor_apply import multi_tensor_applier
    multi_tensor_applier(amp_C.multi_tensor_scale, overflow_buf, [grads, grads], 1.0 / scale)
    ```

    ## Use instead
    ```python
    torch._foreach_mul_(grads, 1.0 / scale)
    ```

    ## Fix safety
    No fix: report only.
    """

    CODE = "NPU901"
    NAME = "apex-cuda-extension"
    SUMMARY = "import of an apex CUDA extension (`amp_C`, `multi_tensor_applier`, `apex.contrib`)"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ("contrib", "multi_tensor_apply", *sorted(CUDA_EXTENSION_MODULES))

    def check(self) -> None:
        for statement in self.index.nodes(ast.Import):
            for alias in statement.names:
                advice = extension_advice(alias.name)
                if advice is not None:
                    self.report(alias, advice)
        for from_import in self.index.nodes(ast.ImportFrom):
            self._check_import_from(from_import)
        reported: set[int] = set()
        for name in ("contrib", "multi_tensor_apply"):
            for attribute in self.index.attributes(name):
                self._check_access(attribute, reported)
            for base in self.index.names(name):
                parent = self.index.parent(base)
                if isinstance(parent, ast.Attribute) and parent.value is base:
                    self._check_access(parent, reported)

    def _check_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            return
        module = node.module
        advice = extension_advice(module)
        if advice is not None:
            self.report(node, advice)
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            # `from apex import contrib`, `from apex.contrib import xentropy`
            advice = extension_advice(f"{module}.{alias.name}")
            if advice is not None:
                self.report(alias, advice)

    def _check_access(self, node: ast.Attribute, reported: set[int]) -> None:
        """``apex.contrib.xentropy.SoftmaxCrossEntropyLoss`` reached through ``import apex``:
        reported once, at the outermost attribute that names an extension module."""
        outer = self._outermost_extension(node)
        if outer is None or id(outer) in reported:
            return
        reported.add(id(outer))
        name = self.qualified_name(outer)
        assert isinstance(name, str)
        advice = extension_advice(name)
        assert advice is not None
        self.report(outer, advice)

    def _outermost_extension(self, node: ast.Attribute) -> ast.Attribute | None:
        """Of the dotted access through ``node``, the part that is reported: going inwards from
        the outermost attribute, the first whose name resolves to an extension module."""
        chain: list[ast.Attribute] = [node]
        current: ast.AST = node
        parent = self.index.parent(node)
        while (
            (isinstance(parent, ast.Attribute) and parent.value is current)
            or (isinstance(parent, ast.Call) and parent.func is current)
            or (isinstance(parent, ast.Subscript) and parent.value is current)
        ):
            if isinstance(parent, ast.Attribute):
                chain.append(parent)
            current = parent
            parent = self.index.parent(current)
        for attribute in reversed(chain):
            dotted = full_name(attribute)
            if dotted is None or not re.search(r"(^|\.)(contrib|multi_tensor_apply)\b", dotted):
                continue
            if not self.may_name(attribute, ("apex", *CUDA_EXTENSION_MODULES)):
                continue
            name = self.qualified_name(attribute)
            if not isinstance(name, str):
                continue
            if self._reported_at_import(attribute, name):
                return None  # its inner attributes are the same access
            if extension_advice(name) is not None:
                return attribute
        return None

    def _reported_at_import(self, node: ast.Attribute, name: str) -> bool:
        """An import binding the base name was reported for this module already
        (``import apex.contrib.x`` then ``apex.contrib.x.f``)."""
        base = base_name(node)
        if base is None:
            return False
        for binding in self.index.bindings_of(base):
            if binding.kind is not BindingKind.IMPORT or not isinstance(binding.node, ast.Import):
                continue
            for alias in binding.node.names:
                module = alias.name
                local = alias.asname or module.split(".")[0]
                if local == base.id and extension_advice(module) and _within(name, module):
                    return True
        return False
