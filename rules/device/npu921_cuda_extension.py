"""NPU921: CUDA C++ extensions built with `torch.utils.cpp_extension`."""

from __future__ import annotations

import ast
import re

from migrator.analysis.calls import keyword
from migrator.rules.device._common import ReportUses

EXTENSIONS = "torch.utils.cpp_extension"
JIT_BUILDERS = {f"{EXTENSIONS}.load", f"{EXTENSIONS}.load_inline"}
CUDA_SOURCE = re.compile(r"""\.(cu|cuh)["']""")


class CudaExtension(ReportUses):
    """
    ## What it does
    Reports CUDA C++ extensions: `torch.utils.cpp_extension.CUDAExtension(...)` in a `setup.py`,
    and `load(...)` / `load_inline(...)` calls that compile `.cu` sources, pass `cuda_sources=`
    or `with_cuda=True`. C++-only extensions (`CppExtension`, `load` of `.cpp` files) are not
    reported.

    ## Why
    CUDA kernels do not run on Ascend NPUs. The operation has to come from torch_npu (many fused
    CUDA kernels have an `torch_npu.npu_*` counterpart), from plain PyTorch ops, or be rewritten
    as an Ascend C custom operator.

    ## Example
    ```python
    from torch.utils.cpp_extension import load
    fused = load(name="fused", sources=["fused.cpp", "fused_kernel.cu"])
    ```

    ## Use instead
    ```python
    # a torch_npu fused op or plain PyTorch ops instead of the CUDA kernel
    ```

    ## Fix safety
    No fix: the kernels have to be ported by hand.
    """

    CODE = "NPU921"
    NAME = "cuda-extension"
    SUMMARY = "CUDA C++ extension (`torch.utils.cpp_extension`)"
    TRIGGER = ("cpp_extension",)
    NAMESPACES = (EXTENSIONS,)

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        member = name.removeprefix(EXTENSIONS + ".")
        if member == "CUDAExtension":
            return (
                "`CUDAExtension` builds CUDA kernels, which do not run on Ascend: use a torch_npu "
                "op or PyTorch ops instead, or port the kernels to an Ascend C custom operator"
            )
        if name in JIT_BUILDERS and self._compiles_cuda(node):
            return (
                f"`{member}(...)` compiles CUDA sources, which do not run on Ascend: use a "
                "torch_npu op or PyTorch ops instead, or port the kernels to Ascend C"
            )
        return None

    def _compiles_cuda(self, node: ast.AST) -> bool:
        call = self.index.parent(node)
        if not isinstance(call, ast.Call) or call.func is not node:
            return False
        if keyword(call, "cuda_sources") is not None:
            return True
        with_cuda = keyword(call, "with_cuda")
        if with_cuda is not None and self.code(with_cuda.value) == "True":
            return True
        return CUDA_SOURCE.search(self.code(call)) is not None
