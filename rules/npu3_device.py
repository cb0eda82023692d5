"""Shared knowledge of the CUDA-to-NPU device rules (NPU3xx, NPU92x). Not a rule itself.

- what ``torch_npu`` provides under ``torch.npu`` (the ``torch.cuda`` names that map one to one);
- the device-agnostic replacements used with ``--target accelerator``;
- where an expression is a *device* (so that ``"cuda"`` there is a device string, and ``"cuda"`` in
  a log line is not): :func:`device_positions`;
- which expressions are known to be integer device indices: :func:`int_index`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterator
from typing import ClassVar

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import Assignment, ParentNodeProvider, ScopeProvider

from migrator.callargs import find_keyword, positional
from migrator.diagnostics import Severity
from migrator.names import Ambiguous
from migrator.rule import FixSafety, Rule, Target

# torch.cuda names that torch_npu mirrors under torch.npu with the same signature.
NPU_CUDA_API = frozenset(
    {
        # device management
        "is_available", "is_initialized", "init", "device_count", "current_device", "set_device",
        "device", "device_of", "get_device_name", "get_device_properties", "synchronize",
        "is_bf16_supported", "utilization", "ipc_collect",
        # memory
        "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
        "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_stats",
        "memory_summary", "memory_snapshot", "mem_get_info", "reset_peak_memory_stats",
        "reset_max_memory_allocated", "reset_max_memory_cached", "reset_accumulated_memory_stats",
        "set_per_process_memory_fraction", "caching_allocator_alloc", "caching_allocator_delete",
        # streams and events
        "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
        "StreamContext",
        # random state
        "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
        "set_rng_state", "get_rng_state_all", "set_rng_state_all",
        # submodules
        "amp",
        # legacy tensor types
        "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
        "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor",
    }
)  # fmt: skip
NPU_CUDA_AMP_API = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})

# Advice for torch.cuda names with no one-to-one torch.npu equivalent (NPU302 reports them).
UNSUPPORTED_HINTS = {
    "CUDAGraph": "recent torch_npu releases capture graphs with `torch.npu.NPUGraph` (ACL graph), "
    "with their own capture rules: port it by hand",
    "graph": "recent torch_npu releases have `torch.npu.graph` (ACL graph capture): port by hand",
    "nccl": "collectives go through torch.distributed with the hccl backend",
    "jiterator": "write the kernel with PyTorch ops instead",
}

# torch.cuda names that a report-only rule explains; NPU302 leaves them to it.
REPORTED_BY_OTHER_RULES = {"get_device_capability": "NPU922", "nvtx": "NPU924"}

# --target accelerator: torch.cuda.X -> torch.accelerator.Y (torch >= 2.6; memory: >= 2.8).
ACCELERATOR_API = {
    "is_available": "is_available",
    "device_count": "device_count",
    "current_device": "current_device_index",
    "set_device": "set_device_index",
    "synchronize": "synchronize",
    "current_stream": "current_stream",
    "set_stream": "set_stream",
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
}
# --target accelerator: torch.cuda.X -> torch.X (generic stream and event classes, torch >= 2.5).
ACCELERATOR_TORCH_API = {"Stream": "Stream", "Event": "Event"}
# Everything else of NPU_CUDA_API under --target accelerator: torch.get_device_module().X
# (torch >= 2.3), which is torch.cuda on a GPU and torch.npu on an NPU.

ACCELERATOR_DEVICE = "torch.accelerator.current_accelerator()"
ACCELERATOR_TYPE = "torch.accelerator.current_accelerator().type"

# Device strings: "cuda", "cuda:0", and the templates "cuda:{}", "cuda:%d" that code formats.
CUDA_DEVICE_TEXT = re.compile(r"cuda(:(\d+|%[ds]|\{[^{}]*\}))?")
CUDA_FSTRING_HEAD = re.compile(r"cuda(:)?")

# A name or attribute whose last part says it holds a device: device, self.device, args.device,
# train_device. Also dist_backend, backend, args.backend for the backend rule.
DEVICE_NAME = re.compile(r"(.*_)?device")
BACKEND_NAME = re.compile(r"(.*_)?backend")
# Names that conventionally hold an integer device index (ranks and GPU ids).
RANK_NAME = re.compile(r"(local_)?rank")
INDEX_NAME = re.compile(r"(local_)?rank|(local_)?gpu(_id|_index)?|(device|gpu)_(id|idx|index)")


class DeviceRule(Rule):
    """Base of the device rules.

    Works around a name-resolution loop: ``migrator.names`` follows value aliases without a visited
    set, so ``model = model.module`` makes ``qualified_name(model.x)`` recurse until Python's
    limit. Such a name is not an import, so it is treated as resolving to nothing.
    """

    def qualified_name(self, node: cst.BaseExpression) -> str | Ambiguous | None:
        try:
            return super().qualified_name(node)
        except RecursionError:
            return None

    def qualified_name_in(
        self, node: cst.BaseExpression, wanted: Collection[str]
    ) -> str | Ambiguous | None:
        try:
            return super().qualified_name_in(node, wanted)
        except RecursionError:
            return None


class Place(enum.Enum):
    """What a device position accepts: any device, or only a device type ("cuda", not "cuda:0")."""

    DEVICE = "device"
    DEVICE_TYPE = "device type"


def add_device_import(rule: Rule) -> None:
    """Every NPU-target fix needs ``import torch_npu``; device-agnostic code needs only torch."""
    if rule.settings.target is Target.NPU:
        rule.add_import("torch_npu", after="torch")
    else:
        rule.add_import("torch")


def is_accelerator(rule: Rule) -> bool:
    return rule.settings.target is Target.ACCELERATOR


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def last_name(node: cst.BaseExpression) -> str | None:
    """``device`` for ``self.device``, ``args.device`` and ``device``."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def names_match(node: cst.BaseExpression, pattern: re.Pattern[str]) -> bool:
    name = last_name(node)
    return name is not None and pattern.fullmatch(name) is not None


# -- strings -------------------------------------------------------------------------------------


def string_body(node: cst.SimpleString) -> str | None:
    """The text between the quotes of a str literal (None for bytes)."""
    if "b" in node.prefix.lower():
        return None
    return node.value[len(node.prefix) + len(node.quote) : -len(node.quote)]


def is_cuda_device_string(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.SimpleString):
        body = string_body(node)
        return body is not None and CUDA_DEVICE_TEXT.fullmatch(body) is not None
    if isinstance(node, cst.FormattedString):
        return cuda_fstring_head(node) is not None
    return False


def cuda_fstring_head(node: cst.FormattedString) -> cst.FormattedStringText | None:
    """``f"cuda:{rank}"``: the leading text part, when the rest are only expressions."""
    if not node.parts or "b" in node.prefix.lower():
        return None
    head, *rest = node.parts
    if not isinstance(head, cst.FormattedStringText) or not rest:
        return None
    if not all(isinstance(part, cst.FormattedStringExpression) for part in rest):
        return None
    return head if CUDA_FSTRING_HEAD.fullmatch(head.value) else None


def with_device_type(node: cst.SimpleString | cst.FormattedString, new: str) -> cst.BaseExpression:
    """The same literal with its leading ``cuda`` replaced by ``new`` (quotes and prefix kept)."""
    if isinstance(node, cst.SimpleString):
        start = len(node.prefix) + len(node.quote)
        return node.with_changes(value=node.value[:start] + new + node.value[start + 4 :])
    head = node.parts[0]
    assert isinstance(head, cst.FormattedStringText)
    return node.with_changes(parts=[head.with_changes(value=new + head.value[4:]), *node.parts[1:]])


# -- where devices are ---------------------------------------------------------------------------

DEVICE_CONSTRUCTORS = {"torch.device"}
DEVICE_TYPE_CALLS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
DEFAULT_DEVICE_SETTERS = {"torch.set_default_device"}
GRAD_SCALERS = {"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"}


def device_positions(rule: Rule, module: cst.Module) -> Iterator[tuple[cst.BaseExpression, Place]]:
    """Every expression of ``module`` that is used as a device (or a device type).

    Calls: ``torch.device(x)``, ``.to(x)``, ``f(device=x)``, ``f(map_location=x)`` (the values of a
    dict: its keys name where a checkpoint was saved and must keep matching it),
    ``torch.autocast(x)``, ``f(device_type=x)``, ``torch.amp.GradScaler(x)``,
    ``torch.set_default_device(x)``. Also comparisons with
    ``<expr>.device.type`` or a ``*device`` name, assignments to a ``*device`` name or attribute,
    ``*device`` parameter defaults, and the ``default=`` and ``choices=`` of an ``--*device``
    command-line option.
    """
    collector = _DevicePositions(rule)
    module.visit(collector)
    return iter(collector.found)


class _DevicePositions(cst.CSTVisitor):
    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule = rule
        self.found: list[tuple[cst.BaseExpression, Place]] = []

    def add(self, node: cst.BaseExpression | None, place: Place = Place.DEVICE) -> None:
        if node is not None:
            self.found.append((node, place))

    def visit_Call(self, node: cst.Call) -> None:
        name = self.rule.qualified_name(node.func)
        name = name if isinstance(name, str) else None
        first = positional(node)[:1]
        if name in DEVICE_CONSTRUCTORS:
            self.add(_arg_value(node, "type", 0))
        elif name in DEVICE_TYPE_CALLS:
            self.add(first[0].value if first else None, Place.DEVICE_TYPE)
        elif name in GRAD_SCALERS:
            self.add(_arg_value(node, "device", 0), Place.DEVICE_TYPE)
        elif (
            isinstance(node.func, cst.Attribute) and node.func.attr.value == "to"
        ) or name in DEFAULT_DEVICE_SETTERS:
            self.add(first[0].value if first else None)
        elif _is_add_argument(node) and _option_matches(node, DEVICE_NAME):
            self.add(_keyword_value(node, "default"))
            choices = _keyword_value(node, "choices")
            if isinstance(choices, cst.List | cst.Tuple | cst.Set):
                for element in choices.elements:
                    self.add(element.value)
        for arg in node.args:
            if arg.keyword is None:
                continue
            if arg.keyword.value == "device" and name not in GRAD_SCALERS:
                self.add(arg.value)
            elif arg.keyword.value == "device_type":
                self.add(arg.value, Place.DEVICE_TYPE)
            elif arg.keyword.value == "map_location":
                if isinstance(arg.value, cst.Dict):
                    for entry in arg.value.elements:
                        if isinstance(entry, cst.DictElement):
                            self.add(entry.value)
                else:
                    self.add(arg.value)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(target.comparator for target in node.comparisons)]
        for index, target in enumerate(node.comparisons):
            if not isinstance(target.operator, cst.Equal | cst.NotEqual | cst.Is | cst.IsNot):
                continue
            left, right = operands[index], operands[index + 1]
            if _names_a_device(left):
                self.add(right, Place.DEVICE_TYPE if _is_device_type(left) else Place.DEVICE)
            elif _names_a_device(right):
                self.add(left, Place.DEVICE_TYPE if _is_device_type(right) else Place.DEVICE)

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(names_match(target.target, DEVICE_NAME) for target in node.targets):
            self.add(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if names_match(node.target, DEVICE_NAME):
            self.add(node.value)

    def visit_Param(self, node: cst.Param) -> None:
        if DEVICE_NAME.fullmatch(node.name.value):
            self.add(node.default)


def _names_a_device(node: cst.BaseExpression) -> bool:
    """``x.device``, ``x.device.type``, ``device``, ``args.device``."""
    if isinstance(node, cst.Attribute) and node.attr.value == "type":
        return names_match(node.value, DEVICE_NAME)
    return names_match(node, DEVICE_NAME)


def _is_device_type(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == "type"


def _arg_value(call: cst.Call, name: str, position: int) -> cst.BaseExpression | None:
    keyword = find_keyword(call, name)
    if keyword is not None:
        return keyword.value
    args = positional(call)
    return args[position].value if position < len(args) else None


def _keyword_value(call: cst.Call, name: str) -> cst.BaseExpression | None:
    keyword = find_keyword(call, name)
    return keyword.value if keyword is not None else None


def _is_add_argument(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"


def _option_matches(call: cst.Call, pattern: re.Pattern[str]) -> bool:
    """``add_argument("--dist-backend", ...)`` matches BACKEND_NAME (dashes read as ``_``)."""
    for arg in positional(call):
        if isinstance(arg.value, cst.SimpleString):
            text = (string_body(arg.value) or "").lstrip("-").replace("-", "_")
            if pattern.fullmatch(text):
                return True
    return False


# -- values that reach a position ----------------------------------------------------------------


def values_reaching(
    rule: Rule, node: cst.BaseExpression, depth: int = 0
) -> Iterator[cst.BaseExpression]:
    """The literal-ish expressions that may be the value of ``node``.

    Looks through ``a if c else b``, ``a or b``, ``"cuda:{}".format(i)``, ``"cuda:%d" % i`` and
    names assigned in the same scope (``loc = "cuda:{}".format(gpu)`` then ``map_location=loc``).
    """
    if depth > 4:
        return
    if isinstance(node, cst.IfExp):
        yield from values_reaching(rule, node.body, depth + 1)
        yield from values_reaching(rule, node.orelse, depth + 1)
    elif isinstance(node, cst.BooleanOperation):
        yield from values_reaching(rule, node.left, depth + 1)
        yield from values_reaching(rule, node.right, depth + 1)
    elif (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "format"
        and isinstance(node.func.value, cst.SimpleString)
    ):
        yield node.func.value
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        if isinstance(node.left, cst.SimpleString):
            yield node.left
    elif isinstance(node, cst.Name):
        for value in assigned_values(rule, node):
            yield from values_reaching(rule, value, depth + 1)
    else:
        yield node


def assigned_values(rule: Rule, name: cst.Name) -> list[cst.BaseExpression]:
    """The right-hand sides of plain ``name = value`` statements that bind ``name`` here."""
    scope = rule.get_metadata(ScopeProvider, name, None)
    if scope is None:
        return []
    values = []
    for assignment in scope[name.value]:
        if not isinstance(assignment, Assignment):
            continue
        value = _plain_assignment_value(rule, assignment.node, name.value)
        if value is not None:
            values.append(value)
    return values


def _plain_assignment_value(rule: Rule, node: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    statement: cst.CSTNode | None = node
    if isinstance(node, cst.Name):
        parent = rule.get_metadata(ParentNodeProvider, node, None)
        if isinstance(parent, cst.AssignTarget):
            statement = rule.get_metadata(ParentNodeProvider, parent, None)
        elif isinstance(parent, cst.AnnAssign):
            statement = parent
    if isinstance(statement, cst.Assign) and all(
        isinstance(t.target, cst.Name) and t.target.value == name for t in statement.targets
    ):
        return statement.value
    if isinstance(statement, cst.AnnAssign) and isinstance(statement.target, cst.Name):
        return statement.value
    return None


# -- integer device indices ----------------------------------------------------------------------

INT_RETURNING_CALLS = {
    "int",
    "len",
    "torch.distributed.get_rank",
    "torch.distributed.get_local_rank",
    "torch.distributed.get_world_size",
    "torch.distributed.get_node_local_rank",
    "torch.cuda.current_device",
    "torch.cuda.device_count",
    "torch.npu.current_device",
    "torch.accelerator.current_device_index",
}


class Index(enum.Enum):
    INT = "int"  # known to be an int
    MAYBE = "maybe"  # named like an index (rank, gpu, local_rank) but not provably an int
    NO = "no"  # anything else: a device, a string, a tensor


def int_index(rule: Rule, module: cst.Module, node: cst.BaseExpression, depth: int = 0) -> Index:
    """Whether ``node`` is an integer device index (see the docs for the exact rules)."""
    if depth > 4:
        return Index.NO
    if isinstance(node, cst.Integer):
        return Index.INT
    if isinstance(node, cst.Call):
        name = rule.qualified_name(node.func)
        full = get_full_name_for_node(node.func)
        if (isinstance(name, str) and name in INT_RETURNING_CALLS) or full in {"int", "len"}:
            return Index.INT
        return Index.NO
    if isinstance(node, cst.Name):
        values = assigned_values(rule, node)
        if values and all(int_index(rule, module, v, depth + 1) is Index.INT for v in values):
            return Index.INT
        if _is_int_parameter(rule, node):
            return Index.INT
        return Index.MAYBE if INDEX_NAME.fullmatch(node.value) else Index.NO
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
        option = _int_option(module, node.attr.value)
        if option is not None:
            return option
        return Index.MAYBE if INDEX_NAME.fullmatch(node.attr.value) else Index.NO
    return Index.NO


def _is_int_parameter(rule: Rule, name: cst.Name) -> bool:
    """A parameter annotated ``int``, or an unannotated ``rank`` / ``local_rank`` parameter with
    no default. (A ``gpu`` parameter is not enough: the imagenet example calls
    ``main_worker(args.gpu, ...)`` with None when it does not spawn.)"""
    scope = rule.get_metadata(ScopeProvider, name, None)
    if scope is None:
        return False
    for assignment in scope[name.value]:
        if isinstance(assignment, Assignment) and isinstance(assignment.node, cst.Param):
            param = assignment.node
            annotation = param.annotation
            if annotation is not None:
                return get_full_name_for_node(annotation.annotation) == "int"
            return param.default is None and RANK_NAME.fullmatch(name.value) is not None
    return False


def _int_option(module: cst.Module, dest: str) -> Index | None:
    """``args.local_rank`` from ``parser.add_argument("--local_rank", type=int, default=0)``:
    an int when the option has ``type=int`` and an int default (or is required); MAYBE when its
    default is ``None`` (then ``f"npu:{args.gpu}"`` would give ``"npu:None"``)."""
    finder = _OptionFinder(dest)
    module.visit(finder)
    call = finder.found
    if call is None:
        return None
    type_arg = _keyword_value(call, "type")
    if type_arg is None or get_full_name_for_node(type_arg) != "int":
        return Index.MAYBE
    default = _keyword_value(call, "default")
    required = _keyword_value(call, "required")
    if isinstance(default, cst.Integer):
        return Index.INT
    if default is None and required is not None and get_full_name_for_node(required) == "True":
        return Index.INT
    return Index.MAYBE


class _OptionFinder(cst.CSTVisitor):
    def __init__(self, dest: str) -> None:
        super().__init__()
        self.dest = dest
        self.found: cst.Call | None = None

    def visit_Call(self, node: cst.Call) -> None:
        if self.found is not None or not _is_add_argument(node):
            return
        dest = _keyword_value(node, "dest")
        if isinstance(dest, cst.SimpleString) and string_body(dest) == self.dest:
            self.found = node
            return
        for arg in positional(node):
            if isinstance(arg.value, cst.SimpleString):
                text = (string_body(arg.value) or "").lstrip("-").replace("-", "_")
                if text == self.dest:
                    self.found = node
                    return


# -- report-only rules ---------------------------------------------------------------------------


def outermost_use(rule: Rule, node: cst.Name | cst.Attribute) -> str | Ambiguous | None:
    """The qualified name of ``node`` when it is a whole dotted use (``torch.cuda.nvtx.mark``, not
    its ``torch.cuda`` part) outside an import statement; else None."""
    if not _is_dotted_name(node):
        return None  # `f(x).attr`: libcst names it after `f`, but it is a value, not a name
    parent = rule.get_metadata(ParentNodeProvider, node, None)
    if isinstance(parent, cst.Attribute):  # part of a longer name, or its attribute
        return None
    current: cst.CSTNode | None = parent
    while isinstance(current, cst.Attribute | cst.Name | cst.ImportAlias | cst.AsName):
        current = rule.get_metadata(ParentNodeProvider, current, None)
    if isinstance(current, cst.Import | cst.ImportFrom):
        return None
    return rule.qualified_name(node)


def _is_dotted_name(node: cst.BaseExpression) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def in_namespace(name: str, namespaces: tuple[str, ...]) -> bool:
    return any(name == space or name.startswith(space + ".") for space in namespaces)


class ReportUses(DeviceRule):
    """Base of the report-only rules: one diagnostic per use of a name in ``NAMESPACES``."""

    NAMESPACES: ClassVar[tuple[str, ...]]
    SEVERITY: ClassVar[Severity] = Severity.MANUAL
    FIX_SAFETY = FixSafety.NONE

    def message(self, name: str, node: cst.Name | cst.Attribute) -> str | None:
        raise NotImplementedError

    def visit_Name(self, node: cst.Name) -> None:
        self._check(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._check(node)

    def _check(self, node: cst.Name | cst.Attribute) -> None:
        name = outermost_use(self, node)
        if isinstance(name, Ambiguous):
            wanted = [c for c in name.candidates if in_namespace(c, self.NAMESPACES)]
            message = self.message(wanted[0], node) if wanted else None
            if message is not None:
                self.report(
                    node,
                    f"cannot tell whether this is `{wanted[0]}`: {name.describe()}; "
                    f"if it is: {message}",
                )
            return
        if name is None or not in_namespace(name, self.NAMESPACES):
            return
        message = self.message(name, node)
        if message is not None:
            self.report(node, message, self.SEVERITY)
