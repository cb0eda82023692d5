"""NPU310: tests of CUDA's error messages ("CUDA out of memory"), which torch_npu words its own."""

from __future__ import annotations

import ast

from migrator.analysis.names import Ambiguous
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import add_device_import, simple_string, string_body

# CUDA's wording -> torch_npu's, for the same error (torch_npu's NPUCachingAllocator raises
# torch.OutOfMemoryError with "NPU out of memory. Tried to allocate ...").
MESSAGES = {"CUDA out of memory": "NPU out of memory"}
# Functions whose first argument is a pattern searched in a text.
SEARCHES = frozenset({"re.search", "re.match", "re.fullmatch", "re.findall", "re.compile"})
TEXT_METHODS = frozenset({"startswith", "endswith", "find", "index", "count", "__contains__"})


class CudaErrorMessage(Rule):
    """
    ## What it does
    Rewrites `"CUDA out of memory"` to `"NPU out of memory"` where a program tests an error's
    text for it: `"CUDA out of memory" in str(e)`, `message.startswith("CUDA out of memory")`,
    `re.search("CUDA out of memory", text)` (the rest of the string is kept: `"CUDA out of
    memory. "` becomes `"NPU out of memory. "`). Elsewhere (a log message) the string is left.

    ## Why
    torch_npu raises the same `torch.OutOfMemoryError` for an NPU allocation that fails, worded
    "NPU out of memory. Tried to allocate ...". A test of CUDA's wording never matches on the
    NPU: detectron2's `retry_if_cuda_oom` would let the error through instead of emptying the
    cache and retrying.

    ## Example
    ```python
    except RuntimeError as e:
        if "CUDA out of memory. " in str(e):
            torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    except RuntimeError as e:
        if "NPU out of memory. " in str(e):
            torch.npu.empty_cache()
    ```

    ## Fix safety
    Safe: the migrated program runs on the NPU, where CUDA's message cannot occur.
    """

    CODE = "NPU310"
    NAME = "cuda-error-message"
    SUMMARY = 'test of CUDA\'s error message ("CUDA out of memory")'
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = tuple(MESSAGES)

    def check(self) -> None:
        for constant in self.index.nodes(ast.Constant):
            value = constant.value
            if not isinstance(value, str) or not any(message in value for message in MESSAGES):
                continue
            tested = self._tested(constant)
            body = string_body(self.view, constant)
            if simple_string(self.view, constant) is None or tested is False or body is None:
                continue
            old = next(message for message in MESSAGES if message in body)
            new = MESSAGES[old]
            if isinstance(tested, Ambiguous):
                self.report(
                    constant,
                    f"cannot tell whether this searches a text: {tested.describe()}; if it "
                    f'does, write "{new}" (torch_npu\'s wording) for "{old}"',
                )
                continue

            def renamed(
                string: cst.SimpleString, old: str = old, new: str = new
            ) -> cst.SimpleString:
                return string.with_changes(value=string.value.replace(old, new, 1))

            edit = self.replace(constant, cst.SimpleString, renamed)
            if self.fix(constant, f'"{old}" -> "{new}" (torch_npu\'s wording)', edit):
                add_device_import(self)

    def _tested(self, constant: ast.Constant) -> bool | Ambiguous:
        """Whether the string is what a text is searched for (Ambiguous: a search function
        that may be something else)."""
        parent = self.index.parent(constant)
        if isinstance(parent, ast.Compare):
            operands = [parent.left, *parent.comparators]
            position = next(i for i, operand in enumerate(operands) if operand is constant)
            return position < len(parent.ops) and isinstance(
                parent.ops[position], (ast.In, ast.NotIn)
            )
        if not isinstance(parent, ast.Call) or not parent.args or parent.args[0] is not constant:
            return False
        func = parent.func
        if isinstance(func, ast.Attribute) and func.attr in TEXT_METHODS:
            return True
        name = self.qualified_name_in(func, SEARCHES)
        return name if isinstance(name, Ambiguous) else name in SEARCHES
