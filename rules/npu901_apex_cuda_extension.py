"""NPU901: imports of apex's CUDA extensions (`amp_C`, `multi_tensor_applier`, `apex.contrib`)."""

from __future__ import annotations

import re

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import Assignment, ScopeProvider

from migrator.rule import FixSafety, Rule
from migrator.rules.npu2_support import base_name, imported_name, local_name

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
    TRIGGER = re.compile(r"contrib|multi_tensor_apply|" + "|".join(sorted(CUDA_EXTENSION_MODULES)))

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            advice = extension_advice(imported_name(alias))
            if advice is not None:
                self.report(alias, advice)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None:
            return False
        module = get_full_name_for_node(node.module) or ""
        advice = extension_advice(module)
        if advice is not None:
            self.report(node, advice)
        elif not isinstance(node.names, cst.ImportStar):
            # `from apex import contrib`, `from apex.contrib import xentropy`
            for alias in node.names:
                advice = extension_advice(f"{module}.{imported_name(alias)}")
                if advice is not None:
                    self.report(alias, advice)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        """``apex.contrib.xentropy.SoftmaxCrossEntropyLoss`` reached through ``import apex``."""
        dotted = get_full_name_for_node(node)
        if dotted is None or not re.search(r"(^|\.)(contrib|multi_tensor_apply)\b", dotted):
            return True
        name = self.qualified_name(node)
        if not isinstance(name, str):
            return True
        if self._reported_at_import(node, name):
            return False  # its inner attributes are the same access
        advice = extension_advice(name)
        if advice is None:
            return True
        self.report(node, advice)
        return False  # the inner attributes name the same module

    def _reported_at_import(self, node: cst.Attribute, name: str) -> bool:
        """An import binding the base name was reported for this module already
        (``import apex.contrib.x`` then ``apex.contrib.x.f``)."""
        base = base_name(node)
        scope = self.get_metadata(ScopeProvider, base, None) if base is not None else None
        if base is None or scope is None:
            return False
        for assignment in scope[base.value]:
            if isinstance(assignment, Assignment) and isinstance(assignment.node, cst.Import):
                for alias in assignment.node.names:
                    module = imported_name(alias)
                    if (
                        local_name(alias) == base.value
                        and extension_advice(module)
                        and _within(name, module)
                    ):
                        return True
        return False
