"""Shared knowledge of the CUDA-to-NPU device rules (NPU3xx, NPU92x). Not a rule itself.

- what ``torch_npu`` provides under ``torch.npu`` (the ``torch.cuda`` names that map one to one);
- the import every fix needs on the run's target (the target's spellings: :mod:`._target`);
- where an expression is a *device* (so that ``"cuda"`` there is a device string, and ``"cuda"`` in
  a log line is not): :func:`device_positions`;
- which expressions are known to be integer device indices: :func:`int_index`.
"""

from __future__ import annotations

import ast
import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from migrator.analysis.calls import StringLiteral, argument, keyword, positional, string_literal
from migrator.analysis.index import full_name
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import DEVICE_VALUES, Origins, origins_of
from migrator.analysis.scopes import Binding
from migrator.analysis.view import FileView
from migrator.diagnostics import Diagnostic, Severity
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._target import device_target

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

# Device strings: "cuda", "cuda:0", and the templates "cuda:{}", "cuda:%d" that code formats.
CUDA_DEVICE_TEXT = re.compile(r"cuda(:(\d+|%[ds]|\{[^{}]*\}))?")
CUDA_FSTRING_HEAD = re.compile(r"cuda(:)?")
# An f-string without expressions: f"cuda", f"cuda:0".
CUDA_FSTRING_TEXT = re.compile(r"cuda(:\d+)?")

# A name or attribute whose last part says it holds a device: device, self.device, args.device,
# train_device, and in any case (yacs configs write `_C.MODEL.DEVICE = "cuda"`). Also
# dist_backend, backend, args.backend, DIST_BACKEND for the backend rule.
DEVICE_NAME = re.compile(r"(.*_)?device", re.IGNORECASE)
# A name that says it holds a device type: device_type, amp_device_type (autocast's spelling).
DEVICE_TYPE_NAME = re.compile(r"(.*_)?device_type", re.IGNORECASE)
BACKEND_NAME = re.compile(r"(.*_)?backend", re.IGNORECASE)
# Names that conventionally hold an integer device index (ranks and GPU ids).
RANK_NAME = re.compile(r"(local_)?rank")
INDEX_NAME = re.compile(r"(local_)?rank|(local_)?gpu(_id|_index)?|(device|gpu)_(id|idx|index)")


# Shell launch scripts (--include-shell): what the device rules report there, never rewritten.
SHELL_NOT_REWRITTEN = "npu-migrate does not rewrite shell scripts"


def shell_finding(
    path: str, line: int, offset: int, code: str, message: str, severity: Severity = Severity.MANUAL
) -> Diagnostic:
    """A finding in a shell script at 0-based ``offset`` of ``line``, saying it stays as is."""
    return Diagnostic(path, line, offset + 1, code, severity, f"{message}; {SHELL_NOT_REWRITTEN}")


class Place(enum.Enum):
    """What a device position accepts: any device, or only a device type ("cuda", not "cuda:0")."""

    DEVICE = "device"
    DEVICE_TYPE = "device type"


def add_device_import(rule: Rule) -> None:
    """Every NPU-target fix needs ``import torch_npu``; device-agnostic code needs only torch."""
    target = device_target(rule)
    rule.add_import(target.import_module, after=target.import_after)


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def last_name(node: ast.AST) -> str | None:
    """``device`` for ``self.device``, ``args.device`` and ``device``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def names_match(node: ast.AST, pattern: re.Pattern[str]) -> bool:
    name = last_name(node)
    return name is not None and pattern.fullmatch(name) is not None


def torch_name(view: FileView, node: ast.AST) -> str | None:
    """The qualified name of ``node`` when it may be a torch name, else None (cheap)."""
    if not view.may_name(node, TORCH_ROOTS):
        return None
    name = view.qualified_name(node)
    return name if isinstance(name, str) else None


TORCH_ROOTS = frozenset({"torch", "torch_npu"})


# -- strings -------------------------------------------------------------------------------------


def string_body(view: FileView, node: ast.AST) -> str | None:
    """The text between the quotes of a str literal written as one token (None for bytes)."""
    literal = string_literal(view.source, node)
    if literal is None or literal.is_bytes or literal.is_format:
        return None
    return literal.body


def simple_string(view: FileView, node: ast.AST) -> StringLiteral | None:
    """``node`` as one plain (not formatted) string literal token, bytes included."""
    literal = string_literal(view.source, node)
    if literal is None or literal.is_format or not isinstance(node, ast.Constant):
        return None
    return literal


def is_cuda_device_string(view: FileView, node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        body = string_body(view, node)
        return body is not None and CUDA_DEVICE_TEXT.fullmatch(body) is not None
    if isinstance(node, ast.JoinedStr):
        return cuda_fstring_head(view, node) is not None
    return False


def cuda_fstring_head(view: FileView, node: ast.JoinedStr) -> str | None:
    """The CUDA text an f-string device starts with: ``cuda:`` for ``f"cuda:{rank}"`` (the
    text, then only expressions), the whole text for ``f"cuda"`` / ``f"cuda:0"`` (no
    expression: a plain device string written with an ``f`` prefix); else None."""
    literal = string_literal(view.source, node)
    if literal is None or not literal.is_format or not node.values:
        return None
    head, *rest = node.values
    if not isinstance(head, ast.Constant):
        return None
    if not rest:  # `{{` / `}}` or escapes in the body: not a device's text
        return literal.body if CUDA_FSTRING_TEXT.fullmatch(literal.body) else None
    if not all(isinstance(part, ast.FormattedValue) for part in rest):
        return None
    raw = _fstring_head_text(literal.body)
    return raw if raw is not None and CUDA_FSTRING_HEAD.fullmatch(raw) else None


def _fstring_head_text(body: str) -> str | None:
    """The text of an f-string body before its first ``{`` (``{{`` is text)."""
    index = 0
    while index < len(body):
        if body.startswith("{{", index):
            index += 2
            continue
        if body[index] == "{":
            return body[:index]
        index += 1
    return None


# -- where devices are ---------------------------------------------------------------------------

DEVICE_CONSTRUCTORS = {"torch.device"}
DEVICE_TYPE_CALLS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
DEFAULT_DEVICE_SETTERS = {"torch.set_default_device"}
GRAD_SCALERS = {"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"}
# DeviceMesh(device_type, mesh) and init_device_mesh(device_type, shape), under every module
# that exports them; DeviceMesh.from_group(group, device_type).
_MESH_MODULES = (
    "torch.distributed",
    "torch.distributed.device_mesh",
    "torch.distributed.tensor",
    "torch.distributed._tensor",
    "torch.distributed._tensor.device_mesh",
)
DEVICE_MESHES = {
    f"{module}.{name}" for module in _MESH_MODULES for name in ("DeviceMesh", "init_device_mesh")
}
DEVICE_MESH_FROM_GROUP = {f"{module}.DeviceMesh.from_group" for module in _MESH_MODULES}


def device_positions(view: FileView) -> Iterator[tuple[ast.expr, Place]]:
    """Every expression of the module that is used as a device (or a device type).

    Calls: ``torch.device(x)``, ``.to(x)``, ``f(device=x)``, ``f(map_location=x)`` (the values of a
    dict: its keys name where a checkpoint was saved and must keep matching it),
    ``torch.autocast(x)``, ``f(device_type=x)``, ``torch.amp.GradScaler(x)``,
    ``torch.set_default_device(x)``, ``init_device_mesh(x, ...)``, ``DeviceMesh(x, ...)``,
    ``DeviceMesh.from_group(g, x)``. Also comparisons with ``<expr>.device.type`` or a
    ``*device`` / ``*device_type`` name, assignments to such a name or attribute (any case),
    such parameter defaults, and the default and choices of an ``--*device`` command-line
    option or absl flag."""
    index = view.index
    for call in index.nodes(ast.Call):
        yield from _call_positions(view, call)
    for comparison in index.nodes(ast.Compare):
        yield from _comparison_positions(comparison)
    for assign in index.nodes(ast.Assign):
        place = next(filter(None, map(named_place, assign.targets)), None)
        if place is not None:
            yield assign.value, place
    for annotated in index.nodes(ast.AnnAssign):
        place = named_place(annotated.target)
        if annotated.value is not None and place is not None:
            yield annotated.value, place
    for parameter, default in parameter_defaults(view):
        if DEVICE_NAME.fullmatch(parameter.arg):
            yield default, Place.DEVICE
        elif DEVICE_TYPE_NAME.fullmatch(parameter.arg):
            yield default, Place.DEVICE_TYPE


def named_place(node: ast.AST) -> Place | None:
    """What a name or attribute holds by its name: ``device`` a device, ``device_type`` a
    device type, anything else nothing the device rules know."""
    if names_match(node, DEVICE_NAME):
        return Place.DEVICE
    if names_match(node, DEVICE_TYPE_NAME):
        return Place.DEVICE_TYPE
    return None


def parameter_defaults(view: FileView) -> Iterator[tuple[ast.arg, ast.expr]]:
    """Each parameter that has a default, with its default."""
    for arguments in view.index.nodes(ast.arguments):
        plain = [*arguments.posonlyargs, *arguments.args]
        yield from zip(
            plain[len(plain) - len(arguments.defaults) :], arguments.defaults, strict=True
        )
        for keyword_only, value in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
            if value is not None:
                yield keyword_only, value


def _call_positions(view: FileView, call: ast.Call) -> Iterator[tuple[ast.expr, Place]]:
    name = torch_name(view, call.func)
    first = positional(call)[:1]
    if name in DEVICE_CONSTRUCTORS:
        found = argument(call, "type", 0)
        if found is not None:
            yield found.value, Place.DEVICE
    elif name in DEVICE_TYPE_CALLS:
        if first:
            yield first[0].value, Place.DEVICE_TYPE
    elif name in GRAD_SCALERS:
        found = argument(call, "device", 0)
        if found is not None:
            yield found.value, Place.DEVICE_TYPE
    elif (isinstance(call.func, ast.Attribute) and call.func.attr == "to") or (
        name in DEFAULT_DEVICE_SETTERS
    ):
        if first:
            yield first[0].value, Place.DEVICE
    elif name in DEVICE_MESHES:
        if first:
            yield first[0].value, Place.DEVICE_TYPE
    elif name in DEVICE_MESH_FROM_GROUP:
        second = positional(call)[1:2]
        if second:
            yield second[0].value, Place.DEVICE_TYPE
    else:
        for value in option_values(view, call, DEVICE_NAME):
            yield value, Place.DEVICE
    for given in call.keywords:
        if given.arg == "device" and name not in GRAD_SCALERS:
            yield given.value, Place.DEVICE
        elif given.arg == "device_type":
            yield given.value, Place.DEVICE_TYPE
        elif given.arg == "map_location":
            if isinstance(given.value, ast.Dict):
                for key, value in zip(given.value.keys, given.value.values, strict=True):
                    if key is not None:
                        yield value, Place.DEVICE
            else:
                yield given.value, Place.DEVICE


def _element_value(element: ast.expr) -> ast.expr:
    return element.value if isinstance(element, ast.Starred) else element


def _comparison_positions(node: ast.Compare) -> Iterator[tuple[ast.expr, Place]]:
    operands = [node.left, *node.comparators]
    for index, operator in enumerate(node.ops):
        if not isinstance(operator, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            continue
        left, right = operands[index], operands[index + 1]
        place = _compared_place(left)
        if place is not None:
            yield right, place
        elif (place := _compared_place(right)) is not None:
            yield left, place


def _compared_place(node: ast.AST) -> Place | None:
    """``x.device``, ``device``, ``args.device`` (a device); ``x.device.type``,
    ``device_type`` (a device type)."""
    if isinstance(node, ast.Attribute) and node.attr == "type":
        return Place.DEVICE_TYPE if names_match(node.value, DEVICE_NAME) else None
    return named_place(node)


def is_add_argument(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"


# absl flags that hold a string: DEFINE_string(name, default, help),
# DEFINE_enum(name, default, enum_values, help).
ABSL_ENUM_FLAG = "absl.flags.DEFINE_enum"
ABSL_STRING_FLAGS = {"absl.flags.DEFINE_string", ABSL_ENUM_FLAG}
_ABSL_FLAG_NAMES = {name.rpartition(".")[2] for name in ABSL_STRING_FLAGS}
ABSL_ROOTS = frozenset({"absl"})


def option_values(view: FileView, call: ast.Call, pattern: re.Pattern[str]) -> Iterator[ast.expr]:
    """The default and the choices of a command-line option whose name matches ``pattern``:
    ``parser.add_argument("--device", default=..., choices=[...])`` and the absl flags
    ``flags.DEFINE_string("base_device", <default>, ...)`` /
    ``flags.DEFINE_enum("backend", <default>, [<values>], ...)``."""
    if is_add_argument(call):
        if not option_matches(view, call, pattern):
            return
        default, choices = keyword(call, "default"), keyword(call, "choices")
    elif (flag := _absl_string_flag(view, call)) is not None:
        name = argument(call, "name", 0)
        body = None if name is None else _option_body(view, name.value)
        if body is None or not pattern.fullmatch(body):
            return
        default = argument(call, "default", 1)
        choices = argument(call, "enum_values", 2) if flag == ABSL_ENUM_FLAG else None
    else:
        return
    if default is not None:
        yield default.value
    if choices is not None and isinstance(choices.value, (ast.List, ast.Tuple, ast.Set)):
        for element in choices.value.elts:
            yield _element_value(element)


def _absl_string_flag(view: FileView, call: ast.Call) -> str | None:
    """The qualified name of an absl ``DEFINE_string`` / ``DEFINE_enum`` call, else None."""
    func = call.func
    if last_name(func) not in _ABSL_FLAG_NAMES or not view.may_name(func, ABSL_ROOTS):
        return None
    name = view.qualified_name(func)
    return name if isinstance(name, str) and name in ABSL_STRING_FLAGS else None


def option_texts(view: FileView, call: ast.Call) -> list[str]:
    """``add_argument("--dist-backend", ...)`` -> ["dist_backend"] (dashes read as ``_``)."""
    texts = []
    for found in positional(call):
        body = _option_body(view, found.value)
        if body is not None:
            texts.append(body.lstrip("-").replace("-", "_"))
    return texts


def _option_body(view: FileView, node: ast.AST) -> str | None:
    literal = simple_string(view, node)
    if literal is None:
        return None
    return "" if literal.is_bytes else literal.body


def option_matches(view: FileView, call: ast.Call, pattern: re.Pattern[str]) -> bool:
    return any(pattern.fullmatch(text) for text in option_texts(view, call))


# -- values that reach a position ----------------------------------------------------------------


def device_origins(view: FileView) -> Origins:
    """The file's value-origin analysis under the device rules' policy
    (:data:`~migrator.analysis.origins.DEVICE_VALUES`): names through the assignments that
    reach them (tuple unpacking and ``:=`` included), ``a if c else b``, ``a or b``, the
    templates ``"cuda:{}".format(i)`` / ``"cuda:%d" % i``; a dictionary, an attribute, a call
    and a parameter (``ast.arg``) are origins."""
    return origins_of(view, DEVICE_VALUES)


def values_reaching(view: FileView, node: ast.expr) -> list[ast.expr]:
    """The expressions that may be the value of ``node`` (:func:`device_origins`, without the
    parameters): ``loc = "cuda:{}".format(gpu)`` then ``map_location=loc`` reaches
    ``"cuda:{}"``."""
    return [origin for origin in device_origins(view).of(node) if isinstance(origin, ast.expr)]


@dataclass(frozen=True)
class DeviceFlow:
    """Where a module uses devices, as NPU303 sees it: every device position with its place,
    and every expression that :func:`values_reaching` finds there (with the position's place).

    Computed once per file (:func:`device_flow`): NPU303 rewrites the literals it reaches,
    NPU925 reports the ``"cuda"`` literals it does not."""

    positions: tuple[tuple[ast.expr, Place], ...]
    reached: tuple[tuple[ast.expr, Place], ...]


def device_flow(view: FileView) -> DeviceFlow:
    """The module's device positions and the values reaching them, in source order (computed
    once per file: NPU303 rewrites what reaches them, NPU925 reports the rest)."""
    return view.memo(DeviceFlow, lambda: _device_flow(view))


def _device_flow(view: FileView) -> DeviceFlow:
    positions = tuple(device_positions(view))
    reached = tuple(
        (value, place) for position, place in positions for value in values_reaching(view, position)
    )
    return DeviceFlow(positions, reached)


def moved_device_literals(view: FileView) -> dict[int, ast.expr]:
    """The CUDA device strings NPU303 rewrites in this file (the values that reach a device
    position and fit it), by ``id``, in source order: the values that move to the NPU."""
    return view.memo("moved-device-literals", lambda: _moved_device_literals(view))


# `torch.cuda` calls that ask for the accelerator (NPU302 makes them `torch.npu.*`).
AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.cuda.device_count"})


def _moved_device_literals(view: FileView) -> dict[int, ast.expr]:
    moved: dict[int, ast.expr] = {}
    for value, place in device_flow(view).reached:
        if is_cuda_device_string(view, value) and fits_place(view, value, place):
            moved.setdefault(id(value), value)
    for value in _picked_when_available(view):
        moved.setdefault(id(value), value)
    return dict(sorted(moved.items(), key=lambda item: view.source.start(item[1])))


def _picked_when_available(view: FileView) -> list[ast.expr]:
    """The CUDA device strings a conditional expression picks when CUDA is available
    (``"cuda:0" if torch.cuda.is_available() else "cpu"``, also inside a list or tuple there:
    allennlp's ``["cuda:0"] if torch.cuda.is_available() else ["cpu"]``): NPU302 makes the test
    ask for the NPU, so the value it picks names the NPU too, whatever it is used for. Only
    where that branch is strings and nothing else: it runs no CUDA-only code, so NPU302 always
    rewrites its test (see _guards)."""
    found: list[ast.expr] = []
    for node in view.index.nodes(ast.IfExp):
        picked = _displayed(node.body)
        if not all(isinstance(value, ast.Constant | ast.JoinedStr) for value in picked):
            continue
        if _asks_for_cuda(view, node.test):
            found += [value for value in picked if is_cuda_device_string(view, value)]
    return found


def _asks_for_cuda(view: FileView, test: ast.expr) -> bool:
    """``torch.cuda.is_available()``, ``torch.cuda.device_count() > 0``, or an ``and`` of
    tests one of which is such."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_asks_for_cuda(view, value) for value in test.values)
    if isinstance(test, ast.Compare):
        test = test.left
    return isinstance(test, ast.Call) and torch_name(view, test.func) in AVAILABILITY


def _displayed(node: ast.expr) -> list[ast.expr]:
    """``node``, or the elements of a list or tuple display, nested ones too."""
    if isinstance(node, ast.List | ast.Tuple):
        return [element for item in node.elts for element in _displayed(item)]
    return [node]


def fits_place(view: FileView, node: ast.AST, place: Place) -> bool:
    """A device type position takes ``"cuda"``, not ``"cuda:0"``."""
    if place is Place.DEVICE:
        return True
    if isinstance(node, ast.JoinedStr):
        return len(node.values) == 1 and cuda_fstring_head(view, node) == "cuda"
    return isinstance(node, ast.Constant) and string_body(view, node) == "cuda"


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


# Operators that give an int for two ints (not `/`, which gives a float).
INT_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)


class Index(enum.Enum):
    INT = "int"  # known to be an int
    MAYBE = "maybe"  # named like an index (rank, gpu, local_rank) but not provably an int
    NO = "no"  # anything else: a device, a string, a tensor


def int_index(view: FileView, node: ast.AST, depth: int = 0) -> Index:
    """Whether ``node`` is an integer device index (see the docs for the exact rules)."""
    if depth > 4:
        return Index.NO
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Index.INT
    if isinstance(node, ast.Call):
        name = torch_name(view, node.func)
        full = full_name(node.func)
        if name in INT_RETURNING_CALLS or full in {"int", "len"}:
            return Index.INT
        return Index.NO
    if isinstance(node, ast.BinOp):  # `rank % torch.cuda.device_count()`: int op int
        operands = (node.left, node.right)
        if isinstance(node.op, INT_OPERATORS) and all(
            int_index(view, operand, depth + 1) is Index.INT for operand in operands
        ):
            return Index.INT
        return Index.NO
    if isinstance(node, ast.Name):
        bindings = view.index.bindings_of(node)
        if bindings and all(_binds_an_int(view, node, b, depth) for b in bindings):
            return Index.INT
        return Index.MAYBE if INDEX_NAME.fullmatch(node.id) else Index.NO
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        attribute = _self_attribute(view, node, depth)
        if attribute is not None:
            return attribute
        option = _int_option(view, node.attr)
        if option is not None:
            return option
        return Index.MAYBE if INDEX_NAME.fullmatch(node.attr) else Index.NO
    return Index.NO


def _self_attribute(view: FileView, node: ast.Attribute, depth: int) -> Index | None:
    """``self.gpu_id`` inside a method: INT when the file assigns ``<x>.gpu_id`` only as
    ``self.gpu_id = <int>`` in the methods of that class (or ``gpu_id = <int>`` in its body),
    MAYBE or NO (by its name) when some assignment may bind something else, None when the file
    does not assign it at all (or ``node`` is not an attribute of a method's ``self``)."""
    assert isinstance(node.value, ast.Name)
    owner = _method_class(view, node.value)
    if owner is None:
        return None
    values = _attribute_values(view, owner, node.attr)
    if values is not None and not values:
        return None
    if values is not None and all(int_index(view, v, depth + 1) is Index.INT for v in values):
        return Index.INT
    return Index.MAYBE if INDEX_NAME.fullmatch(node.attr) else Index.NO


def _method_class(view: FileView, name: ast.Name) -> ast.ClassDef | None:
    """The class whose instance ``name`` is: the first parameter of a plain method (not a
    static or class method), never rebound."""
    bindings = view.index.bindings_of(name)
    if len(bindings) != 1 or not isinstance(bindings[0].node, ast.arg):
        return None
    parameter = bindings[0].node
    arguments = view.index.parent(parameter)
    function = view.index.parent(arguments) if arguments is not None else None
    if not isinstance(arguments, ast.arguments) or not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        return None
    plain = [*arguments.posonlyargs, *arguments.args]
    owner = view.index.parent(function)
    if not plain or plain[0] is not parameter or not isinstance(owner, ast.ClassDef):
        return None
    decorators = {full_name(decorator) for decorator in function.decorator_list}
    return None if decorators & {"staticmethod", "classmethod"} else owner


def _attribute_values(view: FileView, owner: ast.ClassDef, attr: str) -> list[ast.expr] | None:
    """Every value the file assigns to the attribute ``attr`` of ``owner``'s instances, or None
    when something else may set it: an assignment of ``<x>.attr`` that is not a whole
    ``self.attr = value`` in a method of ``owner`` (another object, a tuple target, ``+=``, a
    loop or ``with`` target), or a ``setattr`` call that may name it."""
    values = []
    for attribute in view.index.attributes(attr):
        if not isinstance(attribute.ctx, ast.Store):
            continue
        statement = view.index.parent(attribute)
        if not (
            isinstance(attribute.value, ast.Name)
            and _method_class(view, attribute.value) is owner
            and isinstance(statement, (ast.Assign, ast.AnnAssign))
            and statement.value is not None
            and any(attribute is target for target in _targets(statement))
        ):
            return None
        values.append(statement.value)
    for statement in owner.body:  # class attributes: `gpu_id = 0`, `gpu_id: int = 0`
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(target, ast.Name) and target.id == attr for target in _targets(statement)
        ):
            if statement.value is None:
                continue  # `gpu_id: int`: a declaration, no value
            values.append(statement.value)
    if any(_may_set(view, name, attr) for name in view.index.names("setattr")):
        return None
    return values


def _targets(statement: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return statement.targets if isinstance(statement, ast.Assign) else [statement.target]


def _may_set(view: FileView, name: ast.Name, attr: str) -> bool:
    """Whether ``setattr(obj, <name>, value)`` may set ``attr``."""
    call = view.index.parent(name)
    if not isinstance(call, ast.Call) or call.func is not name:
        return False
    given = positional(call)[1:2]
    return not given or string_body(view, given[0].value) in (None, attr)


def _binds_an_int(view: FileView, name: ast.Name, binding: Binding, depth: int) -> bool:
    """Whether ``binding`` (one of those that reach ``name``) always binds an int: a whole
    assignment of an int, an int parameter, or the counter of ``for i in range(...)`` /
    ``for i, _ in enumerate(...)``. Any other binding (a tuple unpacking, a ``with`` target,
    an import) may bind anything."""
    statement = binding.statement
    if statement is not None:
        value = statement.value
        return value is not None and int_index(view, value, depth + 1) is Index.INT
    if isinstance(binding.node, ast.arg):
        return _is_int_parameter(view, name, binding.node)
    if isinstance(binding.node, ast.Name):
        return _is_loop_counter(view, binding.node)
    return False


def _is_int_parameter(view: FileView, name: ast.Name, parameter: ast.arg) -> bool:
    """A parameter annotated ``int``, or an unannotated ``rank`` / ``local_rank`` parameter with
    no default. (A ``gpu`` parameter is not enough: the imagenet example calls
    ``main_worker(args.gpu, ...)`` with None when it does not spawn.)"""
    if parameter.annotation is not None:
        return full_name(parameter.annotation) == "int"
    return not _has_default(view, parameter) and RANK_NAME.fullmatch(name.id) is not None


def _is_loop_counter(view: FileView, target: ast.Name) -> bool:
    """``for target in range(...)`` or ``for target, _ in enumerate(...)``, with the builtin
    ``range`` / ``enumerate``."""
    parent = view.index.parent(target)
    if isinstance(parent, ast.Tuple) and parent.elts and parent.elts[0] is target:
        loop, counting = view.index.parent(parent), "builtins.enumerate"
    else:
        loop, counting = parent, "builtins.range"
    if not isinstance(loop, (ast.For, ast.comprehension)) or not isinstance(loop.iter, ast.Call):
        return False
    if loop.target is not (parent if counting == "builtins.enumerate" else target):
        return False
    return view.qualified_name(loop.iter.func) == counting


def _has_default(view: FileView, parameter: ast.arg) -> bool:
    arguments = view.index.parent(parameter)
    if not isinstance(arguments, ast.arguments):
        return False
    plain = [*arguments.posonlyargs, *arguments.args]
    if any(parameter is p for p in plain):
        position = next(i for i, p in enumerate(plain) if p is parameter)
        return position >= len(plain) - len(arguments.defaults)
    for keyword_only, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        if keyword_only is parameter:
            return default is not None
    return False


def _int_option(view: FileView, dest: str) -> Index | None:
    """``args.local_rank`` from ``parser.add_argument("--local_rank", type=int, default=0)``:
    an int when the option has ``type=int`` and an int default (or is required); MAYBE when its
    default is ``None`` (then ``f"npu:{args.gpu}"`` would give ``"npu:None"``)."""
    call = _option_call(view, dest)
    if call is None:
        return None
    type_arg = keyword(call, "type")
    default = keyword(call, "default")
    converter = "str" if type_arg is None else full_name(type_arg.value)
    if converter == "str":
        # A string from the command line ("cuda:1", "cpu"): a device, not an index; with an
        # int default, an index when the option is not given.
        given = default.value if default is not None else None
        int_default = isinstance(given, ast.Constant) and type(given.value) is int
        return Index.MAYBE if int_default else Index.NO
    if converter != "int":
        return None  # a converter of the user's: judged by the option's name
    required = keyword(call, "required")
    if default is not None:
        value = default.value
        return (
            Index.INT
            if isinstance(value, ast.Constant) and type(value.value) is int
            else Index.MAYBE
        )
    if required is not None and full_name(required.value) == "True":
        return Index.INT
    return Index.MAYBE


def _option_call(view: FileView, dest: str) -> ast.Call | None:
    """The first ``add_argument`` call that defines option ``dest``."""
    for attribute in view.index.attributes("add_argument"):
        call = view.index.parent(attribute)
        if not isinstance(call, ast.Call) or call.func is not attribute:
            continue
        dest_arg = keyword(call, "dest")
        if dest_arg is not None and _option_body(view, dest_arg.value) == dest:
            return call
        if dest in option_texts(view, call):
            return call
    return None


# -- report-only rules ---------------------------------------------------------------------------


def outermost_uses(view: FileView) -> Iterator[ast.Name | ast.Attribute]:
    """Every whole dotted use (``torch.cuda.nvtx.mark``, not its ``torch.cuda`` part) of a name
    that may resolve under torch, in source order."""
    index = view.index
    reaching = index.names_reaching(TORCH_ROOTS) if view.fast else None
    identifiers = sorted(index.identifiers())
    found: list[ast.Name | ast.Attribute] = []
    for identifier in identifiers:
        if reaching is not None and identifier not in reaching:
            continue
        for name in index.names(identifier):
            top: ast.Name | ast.Attribute = name
            parent = index.parent(top)
            while isinstance(parent, ast.Attribute) and parent.value is top:
                top = parent
                parent = index.parent(top)
            found.append(top)
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return iter(found)


def in_namespace(name: str, namespaces: tuple[str, ...]) -> bool:
    return any(name == space or name.startswith(space + ".") for space in namespaces)


class ReportUses(Rule):
    """Base of the report-only rules: one diagnostic per use of a name in ``NAMESPACES``."""

    NAMESPACES: ClassVar[tuple[str, ...]]
    SEVERITY: ClassVar[Severity] = Severity.MANUAL
    FIX_SAFETY = FixSafety.NONE

    def message(self, name: str, node: ast.Name | ast.Attribute) -> str | None:
        raise NotImplementedError

    def check(self) -> None:
        for node in outermost_uses(self.view):
            self._check(node)

    def _check(self, node: ast.Name | ast.Attribute) -> None:
        name = self.qualified_name(node)
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
