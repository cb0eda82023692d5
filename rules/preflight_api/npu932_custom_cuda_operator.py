"""NPU932: Python calls of operators that a CUDA extension of the repository defines."""

from __future__ import annotations

import ast

from migrator.analysis import names
from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import Facts, Module
from migrator.rule import FixSafety, Rule
from migrator.rules.preflight_api._extensions import (
    KEY,
    Catalog,
    builds,
    local_module_call,
    scan_native,
)
from migrator.settings import Settings


class CustomCudaOperator(Rule):
    """
    ## What it does
    Reports every Python call of an operator that a CUDA extension of the repository defines:
    functions a `PYBIND11_MODULE` exports (`_C.nms(...)`, `from ext import forward`), operators a
    `TORCH_LIBRARY` registers with a CUDA kernel (`torch.ops.myops.roi_align(...)`), and
    functions of a module that `torch.utils.cpp_extension.load(...)` compiled from CUDA sources.
    The diagnostic names the C++ definition and the build (`setup.py`, `load(...)`).

    The operators are found before any file is checked: the run scans the C, C++ and CUDA
    sources under the folders it is given for `PYBIND11_MODULE` and `TORCH_LIBRARY` definitions,
    and its Python files for `CUDAExtension(...)` / `load(...)` builds, then ties each build to
    its sources (the `sources=` list, or the native files under the build script's folder when
    the list is computed).

    ## Why
    NPU921 reports the build, but the code that has to change is where the kernels are called:
    each call needs a torch_npu operation, plain PyTorch operations, or an Ascend C port of the
    kernel.

    ## Example
    ```python
    from mypkg import _C

    keep = _C.nms(boxes, scores, 0.5)
    ```

    ## Use instead
    ```python
    import torchvision

    keep = torchvision.ops.nms(boxes, scores, 0.5)  # or a torch_npu operator
    ```

    ## Fix safety
    No fix: the replacement depends on what the kernel computes.
    """

    CODE = KEY
    NAME = "custom-cuda-operator-call"
    SUMMARY = "call of a custom CUDA operator defined in the repository"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ()  # derived from the project's operators: see triggers()
    PROJECT_TRIGGER = ("cpp_extension",)
    NATIVE_TRIGGER = ("PYBIND11_MODULE", "TORCH_LIBRARY", "__global__")

    @classmethod
    def triggers(cls, settings: Settings) -> tuple[str, ...]:
        catalog = Catalog.of(settings.project)
        return catalog.words

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        builds_ = [build for build in builds(index) if build]
        return {"builds": builds_} if builds_ else None

    @classmethod
    def summarize_native(cls, text: str, path: str) -> Facts | None:
        return scan_native(text)

    def check(self) -> None:
        catalog = Catalog.of(self.project)
        if not catalog.words:
            return
        for call in self.index.nodes(ast.Call):
            found = self._operator(call, catalog)
            if found is not None:
                self.report(call, found)

    def _operator(self, call: ast.Call, catalog: Catalog) -> str | None:
        if not isinstance(call.func, ast.Name | ast.Attribute):
            return None
        name = self.qualified_name(call.func)
        if isinstance(name, names.Ambiguous):
            hits = [
                c for c in name.candidates if catalog.lookup(c, self.context.path, self.project)
            ]
            if not hits:
                return None
            return f"cannot tell whether this is `{hits[0]}`: {name.describe()}; if it is: " + (
                catalog.lookup(hits[0], self.context.path, self.project) or ""
            )
        if name is None:
            name = local_module_call(call, catalog, self.context.path)
            if name is None:
                return None
        return catalog.lookup(name, self.context.path, self.project)
