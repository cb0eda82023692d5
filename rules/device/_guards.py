"""Device guards and the code they make reachable on an NPU. Not a rule.

NPU302, NPU303 and NPU306 rewrite the tests a program asks "am I on the accelerator?" with:
``torch.cuda.is_available()``, ``x.is_cuda``, ``device.type == "cuda"``. Rewritten, such a test
is true on the NPU, and the branch it guards runs there. That is the point, unless the branch
calls something that exists only for CUDA and that no rule migrates: a kernel of the
repository's own CUDA extension (``_C.sigmoid_focalloss_forward``), a ``torch.cuda`` function
without an NPU counterpart (``get_device_capability``), a CUDA build of a third-party package
(``"onnxruntime-gpu"``, ``"CUDAExecutionProvider"``). Then the rewrite would turn a working
fallback into a crash, and the rules leave the test as it is and report it.

:func:`held_guards` finds, for each such test of a file, the guard it decides (an ``if``,
``while`` or conditional expression, through ``not``, ``and``, comparisons and a name the test
is assigned to) and the CUDA-only uses of the branch it selects, following the names of the
module's own functions, classes and assignments that the branch uses (maskrcnn-benchmark's
``loss_func = sigmoid_focal_loss_cuda``, where ``sigmoid_focal_loss_cuda =
_SigmoidFocalLoss.apply`` calls the kernel in ``forward``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from migrator.analysis.names import Ambiguous
from migrator.analysis.project import ProjectFacts
from migrator.analysis.scopes import BindingKind, ScopeKind
from migrator.analysis.view import FileView
from migrator.diagnostics import Severity
from migrator.rules.device._common import AVAILABILITY, NPU_CUDA_API, TORCH_ROOTS, torch_name
from migrator.rules.device._tests import device_tests
from migrator.rules.preflight_api._extensions import Catalog, local_module_call

# Third-party packages and providers built for CUDA, as code names them in strings.
CUDA_PACKAGE = re.compile(
    r"(onnxruntime|paddlepaddle|tensorflow|mxnet|faiss)[-_]gpu\b.*"
    r"|\w*(CUDA|Tensorrt)ExecutionProvider"
    r"|cupy(-cuda\w*)?|pycuda|tensorrt|nvidia-\w+|cudf|cuml",
    re.IGNORECASE,
)
CUDA_MODULES = frozenset({"cupy", "pycuda", "tensorrt", "cudf", "cuml", "numba.cuda"})
# A CUDA build: CUDA sources, the CUDA compile switch, torch's CUDA builder and toolkit path.
CUDA_BUILD_TEXT = re.compile(r".*\.cuh?|-DWITH_CUDA|WITH_CUDA")
CUDA_BUILD_NAMES = frozenset(
    {"torch.utils.cpp_extension.CUDAExtension", "torch.utils.cpp_extension.CUDA_HOME"}
)
# Compiled extension modules by their conventional names, when the run has no facts about
# their build (NPU932 not selected, a build the scan cannot read).
EXTENSION_MODULES = frozenset({"_C", "_ext", "_cuda"})
_DEPTH = 3  # module-level names followed from a branch into what they run
# Words without one of which a file has no CUDA-only code to find (see _may_have_cuda_only_code).
MARKERS = (
    "_C", "_ext", "_cuda", ".cu", "WITH_CUDA", "CUDAExtension", "CUDA_HOME", "ExecutionProvider",
    "-gpu", "_gpu", "cupy", "pycuda", "tensorrt", "nvidia-", "cudf", "cuml", "numba", "torch.ops.",
)  # fmt: skip


@dataclass(frozen=True)
class CudaOnly:
    """A use, in a guarded branch, of something that exists only for CUDA."""

    node: ast.AST
    what: str  # "`_C.nms` (`nms` of the CUDA extension `mypkg._C`, csrc/vision.cpp:8)"
    instead: str  # what to do for the NPU to take the branch (an imperative phrase); "": nothing
    doubt: str = ""  # why it is not certain (an ambiguous name), when it is not


@dataclass(frozen=True)
class HeldGuard:
    """A guard whose accelerator branch uses CUDA-only code: its test is left as it is."""

    guard: ast.AST  # the If / While / IfExp
    branch_line: int
    uses: tuple[CudaOnly, ...]

    @property
    def doubtful(self) -> bool:
        return all(use.doubt for use in self.uses)

    @property
    def severity(self) -> Severity:
        """Info when the branch is only for CUDA machines (a CUDA build): nothing to port."""
        return Severity.MANUAL if any(use.instead for use in self.uses) else Severity.INFO


def held_guards(view: FileView, project: ProjectFacts, path: str) -> dict[int, HeldGuard]:
    """The file's device tests whose guarded branch uses CUDA-only code, by ``id`` of the node
    the rules rewrite: the ``torch.cuda`` attribute of an availability call (NPU302), the
    ``.is_cuda`` attribute (NPU306), the CUDA strings of a device test (NPU303)."""
    return view.memo("held-guards", lambda: _Guards(view, project, path).held())


class _Guards:
    def __init__(self, view: FileView, project: ProjectFacts, path: str) -> None:
        self.view = view
        self.index = view.index
        self.project = project
        self.path = path
        self.catalog = Catalog.of(project)
        self.branch_uses: dict[int, tuple[CudaOnly, ...]] = {}
        # What a definition of the module uses, scanned once (by id of its node and the depth
        # it was reached at): guards of a file often share the functions they call.
        self.definition_uses: dict[tuple[int, int], list[CudaOnly]] = {}

    def held(self) -> dict[int, HeldGuard]:
        found: dict[int, HeldGuard] = {}
        if not self._may_have_cuda_only_code():
            return found
        for condition, keys in self._conditions():
            held = self._held(condition)
            if held is not None:
                for key in keys:
                    found[key] = held
        return found

    def _may_have_cuda_only_code(self) -> bool:
        """A cheap test: a branch can only use CUDA-only code that the file itself spells (its
        own names are followed, not other modules'), so a file without any of these words or
        ``torch.cuda`` members has no guard to hold."""
        text = self.view.source.text
        if any(word in text for word in (*MARKERS, *self.catalog.words)):
            return True
        for cuda in self.index.attributes("cuda"):
            member = self.index.parent(cuda)
            if (
                isinstance(member, ast.Attribute)
                and member.value is cuda
                and member.attr not in NPU_CUDA_API
            ):
                return True
        return False

    def _conditions(self) -> Iterator[tuple[ast.AST, list[int]]]:
        index = self.index
        for attribute in index.attributes("is_cuda"):
            yield attribute, [id(attribute)]
        for member in ("is_available", "device_count"):
            for attribute in index.attributes(member):
                call = index.parent(attribute)
                if not isinstance(call, ast.Call) or call.func is not attribute:
                    continue
                if torch_name(self.view, attribute) in AVAILABILITY:
                    yield call, [id(attribute.value)]
        for test in device_tests(self.view):
            yield test.at, [id(literal) for literal in test.literals]

    def _held(self, condition: ast.AST) -> HeldGuard | None:
        """The guards the condition decides whose branch uses CUDA-only code, as one: the
        first that needs porting (else the first), with every guard's uses, those that need
        porting first."""
        held: list[HeldGuard] = []
        for guard, positive in guards_of(self.view, condition):
            branch = _branch(self.view, guard, positive)
            if not branch:
                continue
            uses = self._uses_in(guard, branch, positive)
            if uses:
                line = branch[0].lineno  # type: ignore[attr-defined]
                held.append(HeldGuard(guard, line, uses))
        if not held:
            return None
        first = next((h for h in held if h.severity is Severity.MANUAL), held[0])
        every = [use for h in [first, *held] for use in h.uses]
        unique = list({id(use.node): use for use in every}.values())
        unique.sort(key=lambda use: not use.instead)
        return HeldGuard(first.guard, first.branch_line, tuple(unique))

    def _uses_in(
        self, guard: ast.AST, branch: list[ast.AST], positive: bool
    ) -> tuple[CudaOnly, ...]:
        key = id(guard) * 2 + int(positive)
        if key not in self.branch_uses:
            found: list[CudaOnly] = []
            _Scan(self, found).nodes(branch, 0, set())
            self.branch_uses[key] = tuple(found)
        return self.branch_uses[key]


def guards_of(view: FileView, condition: ast.AST, depth: int = 0) -> Iterator[tuple[ast.AST, bool]]:
    """The guards ``condition`` decides, each with whether the condition being true selects
    its body (``False``: its ``else``): through ``not``, ``and`` / ``or``, a comparison with a
    count (``device_count() > 0``), and a name it is assigned to (two names deep)."""
    index = view.index
    positive = True
    child: ast.AST = condition
    parent = index.parent(child)
    while parent is not None:
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            positive = not positive
        elif isinstance(parent, ast.Compare) and child is not parent:
            if child is condition and _counts_down(parent):
                positive = not positive
        elif isinstance(parent, (ast.If, ast.While, ast.IfExp)):
            if child is parent.test:
                yield parent, positive
            return
        elif isinstance(parent, ast.Assign) and parent.value is child:
            if depth < 2 and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
                for read in _reads(view, parent.targets[0]):
                    for guard, polarity in guards_of(view, read, depth + 1):
                        yield guard, polarity == positive
            return
        elif not isinstance(parent, ast.BoolOp):
            return
        child, parent = parent, index.parent(parent)


def _counts_down(compare: ast.Compare) -> bool:
    """``device_count() == 0``, ``< 1``: true when there is no device."""
    return len(compare.ops) == 1 and isinstance(compare.ops[0], (ast.Eq, ast.Lt, ast.LtE))


def _reads(view: FileView, target: ast.Name) -> Iterator[ast.Name]:
    for name in view.index.names(target.id):
        if isinstance(name.ctx, ast.Load) and any(
            binding.node is target for binding in view.index.bindings_of(name)
        ):
            yield name


def _branch(view: FileView, guard: ast.AST, positive: bool) -> list[ast.AST]:
    """What runs when the test is true (``positive``) or false: a branch, or, after
    ``if not x.is_cuda: raise ...`` without an ``else``, the rest of the block."""
    if isinstance(guard, ast.IfExp):
        return [guard.body if positive else guard.orelse]
    assert isinstance(guard, (ast.If, ast.While))
    taken, other = (guard.body, guard.orelse) if positive else (guard.orelse, guard.body)
    if taken or not isinstance(guard, ast.If) or not _leaves(other):
        return list(taken)
    return list(_following(view, guard))


def _leaves(block: list[ast.stmt]) -> bool:
    """A block that never falls through to what follows it."""
    return bool(block) and isinstance(block[-1], (ast.Raise, ast.Return, ast.Continue, ast.Break))


def _following(view: FileView, statement: ast.stmt) -> list[ast.stmt]:
    parent = view.index.parent(statement)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(item is statement for item in block):
            position = next(i for i, item in enumerate(block) if item is statement)
            return block[position + 1 :]
    return []


class _Scan:
    """The CUDA-only uses of some code, and of the module's own code it refers to."""

    def __init__(self, guards: _Guards, found: list[CudaOnly]) -> None:
        self.guards = guards
        self.view = guards.view
        self.index = guards.index
        self.found = found

    def nodes(self, nodes: list[ast.AST], depth: int, seen: set[int]) -> None:
        for top in nodes:
            for node in ast.walk(top):
                self.node(node, depth, seen)

    def node(self, node: ast.AST, depth: int, seen: set[int]) -> None:
        if isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            self.torch_cuda(node)
            self.cuda_build_name(node)
            self.local(node.value, depth, seen)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self.cuda_build_name(node)
            self.local(node, depth, seen)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if CUDA_BUILD_TEXT.fullmatch(node.value):
                self.found.append(self._build(node))
            elif CUDA_PACKAGE.fullmatch(node.value):
                self.found.append(
                    CudaOnly(
                        node,
                        f"`{self.view.written(node)}` (CUDA-only third-party software)",
                        "use its CPU build or its Ascend counterpart (onnxruntime's "
                        "`CANNExecutionProvider`, `npu-smi` for `nvidia-smi`)",
                    )
                )
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            modules += [alias.name for alias in node.names]
            for module in modules:
                if module in CUDA_MODULES or module.split(".")[0] in CUDA_MODULES:
                    self.found.append(
                        CudaOnly(
                            node, f"`{module}` (a CUDA-only package)", "give it a CPU or NPU path"
                        )
                    )
                    break

    def call(self, call: ast.Call) -> None:
        func = call.func
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return
        guards = self.guards
        name = self.view.qualified_name(func)
        if isinstance(name, Ambiguous):
            for candidate in name.candidates:
                kernel = guards.catalog.kernel(candidate, guards.path, guards.project)
                if kernel is not None:
                    self.found.append(
                        self._kernel(call, kernel.operator, kernel.module, kernel.defined, name)
                    )
                    return
            return
        if name is None:
            name = local_module_call(call, guards.catalog, guards.path)
            if name is None:
                return
        kernel = guards.catalog.kernel(name, guards.path, guards.project)
        if kernel is not None:
            self.found.append(self._kernel(call, kernel.operator, kernel.module, kernel.defined))
            return
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in EXTENSION_MODULES and parts[0] not in TORCH_ROOTS:
            self.found.append(self._kernel(call, parts[-1], ".".join(parts[:-1]), ""))

    def _kernel(
        self,
        call: ast.Call,
        operator: str,
        module: str,
        defined: str,
        ambiguous: Ambiguous | None = None,
    ) -> CudaOnly:
        where = f", {defined}" if defined else ""
        return CudaOnly(
            call,
            f"`{self.view.written(call.func)}` (`{operator}` of the repository's CUDA extension "
            f"`{module}`{where})",
            "replace the kernel with a torch_npu or PyTorch operation (or port it to an Ascend C "
            "custom operator)",
            "" if ambiguous is None else ambiguous.describe(),
        )

    def _build(self, node: ast.AST) -> CudaOnly:
        return CudaOnly(
            node,
            f"`{self.view.written(node)}` (a CUDA build)",
            "",
        )

    def cuda_build_name(self, node: ast.Name | ast.Attribute) -> None:
        """``CUDAExtension``, ``CUDA_HOME``: the branch builds CUDA code."""
        if not self.view.may_name(node, TORCH_ROOTS):
            return
        if self.view.qualified_name(node) in CUDA_BUILD_NAMES:
            self.found.append(self._build(node))

    def torch_cuda(self, attribute: ast.Attribute) -> None:
        """``torch.cuda.get_device_capability`` and the other ``torch.cuda`` members that
        torch_npu does not have (NPU302 leaves them)."""
        value = attribute.value
        if not (isinstance(value, ast.Attribute) and value.attr == "cuda"):
            return
        if torch_name(self.view, value) != "torch.cuda" or attribute.attr in NPU_CUDA_API:
            return
        self.found.append(
            CudaOnly(
                attribute,
                f"`{self.view.written(attribute)}` (no NPU counterpart)",
                "ask for what it decides instead (`torch.npu.is_bf16_supported()` rather than a "
                "compute capability, say)",
            )
        )

    def local(self, node: ast.expr, depth: int, seen: set[int]) -> None:
        """A name of the module's own function or class, or a name assigned in the module or
        the function: what it runs or holds is scanned too (a few names deep)."""
        if depth >= _DEPTH or not isinstance(node, ast.Name):
            return
        for binding in self.index.bindings_of(node):
            target = binding.node
            if target is None or id(target) in seen:
                continue
            if binding.kind in (BindingKind.FUNCTION, BindingKind.CLASS):
                if binding.scope.kind is not ScopeKind.MODULE:
                    continue
                body: list[ast.AST] = list(target.body)  # type: ignore[attr-defined]
            elif binding.kind is BindingKind.ASSIGN and binding.assigned_value is not None:
                body = [binding.assigned_value]
            else:
                continue
            seen.add(id(target))
            key = (id(target), depth + 1)
            cached = self.guards.definition_uses.get(key)
            if cached is None:
                cached = self.guards.definition_uses[key] = []
                _Scan(self.guards, cached).nodes(body, depth + 1, seen)
            self.found.extend(cached)


def held_message(written: str, migrated: str, held: HeldGuard) -> str:
    """Why the test ``written`` stays as it is, and the edit that would take the branch on the
    NPU (``migrated``: the test as the rule would have written it)."""
    use = held.uses[0]
    more = len(held.uses) - 1
    others = f" (and {more} more CUDA-only use{'s' if more > 1 else ''})" if more else ""
    doubt = (
        f"cannot tell whether {use.what} is CUDA-only ({use.doubt}); if it is: "
        if held.doubtful
        else ""
    )
    use = next((use for use in held.uses if use.instead), use)
    head = (
        f"{doubt}`{written}` is left as it is: the branch it selects (line {held.branch_line}) "
        f"uses {use.what}{others}, which does not run on Ascend; on the NPU the other branch "
        "runs, as it did without CUDA"
    )
    if not use.instead:
        return f"{head} (that branch is for CUDA machines only)"
    return f"{head}. To take that branch on the NPU, {use.instead}, then write `{migrated}`"
