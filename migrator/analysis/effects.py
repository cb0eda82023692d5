"""What a statement line reads and changes: the facts NPU203 proves its moves with.

NPU203 moves an optimizer above a DDP wrap only when nothing it skips over can tell the
difference. The proof works on dotted paths (``model``, ``args.lr``, ``model.module.head``)
collected on ``ast``, one statement line at a time:

- what the line reads, binds (``x = ...``), mutates (``x.a = ...``, ``x.append(...)``, an
  unknown function that gets ``x``), wraps in DDP, or moves to a device (``x.cuda()``);
- the calls it makes that might do anything (``scale_lr(...)``, ``print(...)``);
- the calls that may be DDP under an ambiguous name.

Paths are named as libcst's ``get_full_name_for_node`` names them (``index.full_name``): the
attribute of a call or subscript keeps the callee's name (``f().x`` is ``f.x``). The collector
follows the structure the rule has always had: where a node is handled, what it visits next,
and in which order, so that the first unknown call (named in a message) stays the same. One
addition: a call the rule knows (an optimizer class, ``amp.initialize``, a builtin) also reads
its callee, so that an import between the wrap and the call moves with it.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migrator.analysis.calls import argument, arguments
from migrator.analysis.classes import ModuleClasses, OptimizerClass, is_optimizer_class
from migrator.analysis.clipping import class_of
from migrator.analysis.functions import (
    MODEL_NAME_METHODS,
    WEIGHT_DECAY_GROUPS,
    FunctionSummary,
    ModuleFunctions,
    linked_builder,
    linked_class,
    linked_summary,
    model_method_assumption,
)
from migrator.analysis.index import ModuleIndex, full_name
from migrator.analysis.names import Ambiguous
from migrator.analysis.origins import OPTIMIZER_VALUES, origins_of
from migrator.analysis.project import Facts
from migrator.analysis.view import FileView

DDP_CLASSES = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DataParallel",  # not a trigger: only recognised as a wrapper with `.module`
        "torch.nn.parallel.DataParallel",
        "apex.parallel.DistributedDataParallel",
        "apex.parallel.distributed.DistributedDataParallel",
    }
)
DATA_PARALLEL = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel"})
AMP_INITIALIZE = "apex.amp.initialize"
ADD_PARAM_GROUP = "add_param_group"

# Methods that neither change their receiver nor the parameters behind it.
READ_ONLY_METHODS = frozenset(
    {
        "parameters", "named_parameters", "state_dict", "modules", "named_modules", "children",
        "named_children", "buffers", "named_buffers", "keys", "values", "items", "get", "format",
        "startswith", "endswith", "numel", "dim", "size", "lower", "upper", "strip", "split",
    }
)  # fmt: skip
# Methods that move or cast a module in place and keep its Parameter objects (torch swaps
# `param.data`; torch_npu does the same for NPU tensors), so an optimizer built before them
# still holds the right parameters. amp.initialize, though, must come after them.
DEVICE_METHODS = frozenset(
    {"cuda", "npu", "to", "cpu", "half", "float", "bfloat16", "double", "train", "eval"}
)
# Functions that return a module with the Parameter objects of the module they are given
# (torch's `convert_sync_batchnorm`; apex's `convert_syncbn_model` copies them, so is not one).
KEEPING_CONVERSIONS = frozenset(
    {
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
        "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm",
    }
)
# Methods a moved statement may call on its own lists and dicts.
BUILDING_METHODS = frozenset({"append", "extend", "update", "insert", ADD_PARAM_GROUP})
# Functions without side effects that moved statements may call.
PURE_FUNCTIONS = frozenset(
    "builtins." + name
    for name in [
        "list", "dict", "tuple", "set", "frozenset", "filter", "map", "sorted", "reversed", "len",
        "float", "int", "bool", "str", "min", "max", "sum", "zip", "enumerate", "any", "all",
        "range", "isinstance", "getattr", "hasattr", "abs", "round",
    ]
) | frozenset({"itertools.chain"}) | WEIGHT_DECAY_GROUPS  # fmt: skip
PURE_MODULES = ("math.",)
# Functions that only read their arguments, in the statements that are skipped over.
READING_FUNCTIONS = PURE_FUNCTIONS | {"builtins.print", "builtins.repr", "builtins.type"}

Path = tuple[str, ...]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NOT_VISITED = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
# Nodes whose fields are not in source order (keys before values, keywords after `*args`,
# decorators last, defaults after the parameters), and whose children all have positions.
_UNORDERED = (ast.Dict, ast.IfExp, ast.Call, ast.ClassDef, ast.arguments)


def dotted_path(node: ast.AST) -> Path | None:
    """The path of a name or attribute (``f().x`` is ``f.x``), else None."""
    if not isinstance(node, ast.Name | ast.Attribute):
        return None
    name = full_name(node)
    return tuple(name.split(".")) if name else None


def related(a: Path, b: Path) -> bool:
    """One path is a prefix of the other: a change to one can be seen through the other."""
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def show(path: Path) -> str:
    return ".".join(path)


def children(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node`` in source order (the order libcst visits them in)."""
    if isinstance(node, _FUNCTIONS):  # ast lists the decorators last
        head: list[ast.AST] = [*node.decorator_list, node.args]
        return [*head, *([node.returns] if node.returns else []), *node.body]
    found = [c for c in ast.iter_child_nodes(node) if not isinstance(c, _NOT_VISITED)]
    if isinstance(node, _UNORDERED):
        found.sort(key=lambda child: (child.lineno, child.col_offset))  # type: ignore[attr-defined]
    return found


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and everything under it, in source order (libcst's ``findall`` order)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def walk_line(line: Sequence[ast.stmt]) -> Iterator[ast.AST]:
    for statement in line:
        yield from walk(statement)


@dataclass
class Wrap:
    """``target = DDP(source, ...)``."""

    target: Path
    source: Path | None  # None when the wrapped value is not a plain name or attribute
    call: ast.Call
    data_parallel: bool = False
    moved: ast.Call | None = None  # `DDP(...).cuda()`: the device move of the wrapper


class CallNames:
    """What a call is, through the file's name resolution.

    ``links`` are the linked project facts of the functions and classes of other modules (see
    :func:`~migrator.analysis.functions.link`); ``respelled`` maps id(call) to the qualified
    name of the class a rule will give a constructor call (NPU101's NPU fused optimizers).
    """

    def __init__(
        self,
        view: FileView,
        path: str,
        links: Mapping[str, Facts],
        respelled: Mapping[int, str],
    ) -> None:
        self.view = view
        self.path = path
        self.links = links
        self.respelled = respelled
        self._functions: ModuleFunctions | None = None
        self._linked: dict[int, FunctionSummary | None] = {}
        self._classes: ModuleClasses | None = None
        self._optimizer_classes: dict[int, OptimizerClass | None] = {}

    def function_summary(self, call: ast.Call) -> FunctionSummary | None:
        """The summary of the pure function (or record class) that ``call`` calls: one of this
        module, or one of another module of the run per the project facts (see
        :mod:`migrator.analysis.functions`); else None."""
        func = call.func
        if isinstance(func, ast.Name):
            if self._functions is None:
                self._functions = ModuleFunctions(self.view.index)
            if func.id in self._functions.definitions or func.id in self._functions.records:
                return self._functions.summary_of_call(call)
        if id(call) not in self._linked:
            self._linked[id(call)] = self.linked_summary(func)
        return self._linked[id(call)]

    def linked_summary(self, func: ast.expr) -> FunctionSummary | None:
        if not self.links or dotted_path(func) is None:
            return None  # a call of no plain name or attribute path is never followed
        name = self.view.qualified_name(func)
        if not isinstance(name, str):
            return None  # unknown or ambiguous: an unknown call, as without the facts
        return linked_summary(self.links, self.path, name, self.view.code(func))

    def optimizer_class(self, call: ast.Call) -> OptimizerClass | None:
        """The optimizer class of the repository that ``call`` builds: one of this module,
        bound once by its ``class`` statement, or one of another module of the run per the
        project facts (see :mod:`migrator.analysis.classes`); else None."""
        if id(call) not in self._optimizer_classes:
            self._optimizer_classes[id(call)] = self._optimizer_class(call.func)
        return self._optimizer_classes[id(call)]

    def _optimizer_class(self, func: ast.expr) -> OptimizerClass | None:
        if isinstance(func, ast.Name):
            if self._classes is None:
                self._classes = ModuleClasses(self.view.index, self.view.qualified_name)
            if func.id in self._classes.definitions:
                return self.own_class(func)
        if not self.links or dotted_path(func) is None:
            return None
        name = self.view.qualified_name(func)
        if not isinstance(name, str):
            return None  # unknown or ambiguous: an unknown call, as without the facts
        return linked_class(self.links, self.path, name, self.view.code(func))

    def own_class(self, func: ast.Name) -> OptimizerClass | None:
        """The optimizer class of this module that the name at the call can only mean."""
        assert self._classes is not None
        definition = self._classes.definitions[func.id]
        bindings = self.view.index.bindings_of(func)
        if len(bindings) != 1 or bindings[0].node is not definition:
            return None  # shadowed where it is called (a parameter, a local of that name)
        verdict = self._classes.verdict(func.id)
        return None if verdict is None else OptimizerClass(func.id, verdict["problem"])

    def is_amp_initialize(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and self.view.qualified_name_in(node.func, {AMP_INITIALIZE}) == AMP_INITIALIZE
        )

    def builds_optimizer(self, call: ast.Call) -> bool:
        if isinstance(call.func, ast.Attribute) and call.func.attr == ADD_PARAM_GROUP:
            return True
        name = self.view.qualified_name(class_of(self.view, call))
        if isinstance(name, str) and (is_optimizer_class(name) or name == AMP_INITIALIZE):
            return True
        return (
            self.optimizer_class(call) is not None
            or self.class_value_call(call)
            or self.linked_builder(call)
        )

    def linked_builder(self, call: ast.Call) -> bool:
        """``create_optimizer(args, model)``: a function of another module of the run that
        builds an optimizer, per the project facts."""
        if not self.links or dotted_path(call.func) is None:
            return False
        name = self.view.qualified_name(call.func)
        return isinstance(name, str) and linked_builder(self.links, self.path, name)

    def class_value_call(self, call: ast.Call) -> bool:
        """``opt_class(params, ...)`` where the local name ``opt_class`` can only hold
        optimizer classes of torch, apex or torch_npu (``opt_class = torch.optim.AdamW if
        args.adamw else torch.optim.SGD``; a value alias, which name resolution calls
        ambiguous, is followed here to what it holds)."""
        func = call.func
        if not isinstance(func, ast.Name) or isinstance(self.view.qualified_name(func), str):
            return False  # an import: the class itself (or not a class)
        origins = origins_of(self.view, OPTIMIZER_VALUES).of(func)
        if not origins or any(origin is func for origin in origins):
            return False  # something the flow cannot follow (a parameter) is among them
        names = [self.view.qualified_name(origin) for origin in origins]
        return all(isinstance(name, str) and is_optimizer_class(name) for name in names)

    def movable_class(self, call: ast.Call) -> bool:
        """``call`` builds an optimizer class of the repository that does nothing else."""
        found = self.optimizer_class(call)
        return found is not None and found.problem is None

    def callee(self, call: ast.Call) -> Path | None:
        """The path of the callee as the migrated code spells it.

        A rule may respell an optimizer class (``respelled``: NPU101's plans):
        ``O.SGD`` becomes ``O.NpuFusedSGD`` when ``O`` is the new class's module, else the class
        is spelled out in full (``torch_npu.optim.NpuFusedSGD``, imported at the top). A plain
        name keeps where it is bound (its import is rewritten in place), or is spelled out in
        full, which the plan does not tell: then a second pass may see a move that the first
        one refused, and the engine's idempotence check leaves the file as it was.
        """
        written = dotted_path(call.func)
        target = self.respelled.get(id(call))
        if target is None or not isinstance(call.func, ast.Attribute):
            return written
        home = target.rpartition(".")[0]
        if self.view.qualified_name(call.func.value) == home:
            return written
        return tuple(target.split("."))

    def wrap_of(self, node: ast.Assign) -> Wrap | None:
        """``target = DDP(source, ...)``, also followed by a device move of the wrapper
        (``DataParallel(model).cuda()``: the method returns the wrapper itself)."""
        if len(node.targets) != 1 or not isinstance(node.value, ast.Call):
            return None
        call = node.value
        moved: ast.Call | None = None
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in DEVICE_METHODS
            and isinstance(func.value, ast.Call)
        ):
            moved, call = call, func.value
        name = self.view.qualified_name_in(call.func, DDP_CLASSES)
        target = dotted_path(node.targets[0])
        if not isinstance(name, str) or target is None:
            return None
        given = arguments(call)
        module = next((a for a in given if a.keyword == "module"), None)
        if module is None and given and given[0].keyword is None and not given[0].star:
            module = given[0]
        source = dotted_path(module.value) if module is not None else None
        return Wrap(target, source, call, data_parallel=name in DATA_PARALLEL, moved=moved)


@dataclass
class Effects:
    """What one statement line reads and changes, by dotted path."""

    reads: set[Path] = field(default_factory=set)
    binds: set[str] = field(default_factory=set)  # every name bound
    plain_binds: set[str] = field(default_factory=set)  # bound to a new object
    mutates: set[Path] = field(default_factory=set)  # attribute/item assignment, unknown calls
    wrap_targets: set[Path] = field(default_factory=set)  # bound to a DDP/DP wrapper
    device_moves: set[Path] = field(default_factory=set)  # x.cuda(), x = x.to(device)
    # Of those, the SyncBatchNorm conversions (`x = SyncBatchNorm.convert_sync_batchnorm(x)`).
    conversions: set[Path] = field(default_factory=set)
    wraps: list[Wrap] = field(default_factory=list)
    wrap_sources: set[Path] = field(default_factory=set)  # read only as the value DDP wraps
    unknown_calls: list[ast.Call] = field(default_factory=list)
    amp_models: set[str] = field(default_factory=set)  # names amp.initialize rebinds in place
    ambiguous: list[tuple[ast.Call, Ambiguous]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)  # what moving the line assumes

    def writes(self) -> set[Path]:
        return {(n,) for n in self.binds} | self.mutates | self.wrap_targets | self.device_moves

    def replaces(self, path: Path) -> bool:
        """``path`` gets a new object here, or is changed in a way other than wrapping/moving."""
        return (len(path) == 1 and path[0] in self.plain_binds) or path in self.mutates


def effects_of(calls: CallNames, line: Sequence[ast.stmt]) -> Effects:
    collector = EffectsCollector(calls)
    for statement in line:
        collector.visit(statement)
    # Comprehension variables are only known once the comprehension is visited.
    effects = collector.effects
    effects.reads = {p for p in effects.reads if p[0] not in collector.local_names}
    return effects


class EffectsCollector:
    """Fills :class:`Effects` for one statement line.

    ``visit`` dispatches on the node type; a handler decides what to visit below its node, and
    a node without a handler has its children visited in source order.
    """

    def __init__(self, calls: CallNames) -> None:
        self.calls = calls
        self.effects = Effects()
        self.local_names: set[str] = set()  # comprehension variables and lambda parameters

    def visit(self, node: ast.AST) -> None:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            self.visit_children(node)
        else:
            handler(self, node)

    def visit_children(self, node: ast.AST) -> None:
        for child in children(node):
            self.visit(child)

    # -- binding forms ---------------------------------------------------------------------------

    def assign(self, node: ast.Assign) -> None:
        wrap = self.calls.wrap_of(node)
        if wrap is not None:
            self.wrapped(wrap)
            return
        identity = self.identity_move(node)
        if identity is not None:
            self.effects.device_moves.add(identity)
            self.visit(node.value)
            return
        converted = self.converted(node)
        if converted is not None:
            path, others = converted
            self.effects.device_moves.add(path)
            self.effects.conversions.add(path)
            self.read(path)
            for other in others:
                self.visit(other)
            return
        if self.calls.is_amp_initialize(node.value):
            self.effects.amp_models |= self.amp_rebound_models(node)
        for target in node.targets:
            self.bind_target(target)
        self.visit(node.value)

    def wrapped(self, wrap: Wrap) -> None:
        """``target = DDP(source, ...)``: the source is not read as such, nor the callee."""
        self.effects.wraps.append(wrap)
        if wrap.source is not None:
            self.effects.wrap_sources.add(wrap.source)
        for given in arguments(wrap.call)[1:]:
            self.visit(given.value)
        if wrap.moved is not None:  # the wrapper keeps the module's Parameter objects
            for given in arguments(wrap.moved):
                self.visit(given.value)
            self.effects.device_moves.add(wrap.target)
        self.effects.wrap_targets.add(wrap.target)
        if len(wrap.target) == 1:
            self.effects.binds.add(wrap.target[0])

    @staticmethod
    def identity_move(node: ast.Assign) -> Path | None:
        """``model = model.cuda()``: modules return themselves from these methods."""
        if len(node.targets) != 1:
            return None
        target = dotted_path(node.targets[0])
        call = node.value
        if target is None or not isinstance(call, ast.Call):
            return None
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in DEVICE_METHODS:
            return target if dotted_path(func.value) == target else None
        return None

    def converted(self, node: ast.Assign) -> tuple[Path, list[ast.expr]] | None:
        """``model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, group)``: the module
        it returns (the same one, or a SyncBatchNorm in place of a BatchNorm given alone) has
        the given module's Parameter objects, in the same order (each new layer is handed the
        old layer's ``weight`` and ``bias``), as after a device move. The path, and the other
        arguments (read)."""
        call = node.value
        if len(node.targets) != 1 or not isinstance(call, ast.Call):
            return None
        if self.calls.view.qualified_name(call.func) not in KEEPING_CONVERSIONS:
            return None
        target = dotted_path(node.targets[0])
        module = argument(call, "module", 0)
        if target is None or module is None or dotted_path(module.value) != target:
            return None
        return target, [a.value for a in arguments(call) if a.node is not module.node]

    @staticmethod
    def amp_rebound_models(node: ast.Assign) -> set[str]:
        """``model, optimizer = amp.initialize(model, optimizer)``: ``model`` is rebound to the
        same object (apex patches it in place)."""
        assert isinstance(node.value, ast.Call)
        given = arguments(node.value)
        first = given[0].value if given else None
        if len(node.targets) != 1 or first is None:
            return set()
        target = node.targets[0]
        outputs = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
        output = outputs[0] if outputs else None
        if isinstance(output, ast.Name) and isinstance(first, ast.Name):
            return {output.id} if output.id == first.id else set()
        return set()

    def aug_assign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        path = dotted_path(node.target)
        if path is not None:
            self.effects.reads.add(path)
        self.bind_target(node.target)

    def ann_assign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.bind_target(node.target)

    def for_loop(self, node: ast.For | ast.AsyncFor) -> None:
        self.bind_target(node.target)
        self.visit_children(node)  # the target too: it counts as read as well
        self.alias_elements(node.target, node.iter)

    def comprehensions(
        self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
    ) -> None:
        self.visit_children(node)
        for generator in node.generators:
            self.alias_elements(generator.target, generator.iter)

    def alias_elements(self, target: ast.AST, iterated: ast.expr) -> None:
        """``for group in groups: group["lr"] = 0``: the loop variable is an element of what
        the loop iterates over, so a change through it changes that too."""
        names = _bound_names(target)
        if any(path[0] in names for path in self.effects.mutates):
            self.effects.mutates |= _element_sources(iterated)

    def with_item(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self.bind_target(node.optional_vars)

    def except_handler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name is not None:
            self.target((node.name,))
        for statement in node.body:
            self.visit(statement)

    def delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.bind_target(target)

    def named_expr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bind_target(node.target)

    def definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.target((node.name,))  # its body runs later, when called

    def import_names(self, node: ast.Import) -> None:
        for alias in node.names:
            self.target((alias.asname or alias.name.split(".")[0],))

    def import_from(self, node: ast.ImportFrom) -> None:
        if any(alias.name == "*" for alias in node.names):
            return
        for alias in node.names:
            self.target((alias.asname or alias.name,))

    def comprehension(self, node: ast.comprehension) -> None:
        self.collect_local(node.target)
        self.visit_children(node)

    def lambda_(self, node: ast.Lambda) -> None:
        parameters = node.args
        self.local_names.update(p.arg for p in parameters.args)
        every = [*parameters.posonlyargs, *parameters.args, *parameters.kwonlyargs]
        every += [p for p in (parameters.vararg, parameters.kwarg) if p is not None]
        for parameter in every:
            self.read((parameter.arg,))  # filtered out below for plain parameters
        for default in [*parameters.defaults, *parameters.kw_defaults]:
            if default is not None:
                self.visit(default)
        self.visit(node.body)

    def collect_local(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.local_names.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.collect_local(element.value if isinstance(element, ast.Starred) else element)

    def target(self, path: Path) -> None:
        if len(path) == 1:
            self.effects.binds.add(path[0])
            self.effects.plain_binds.add(path[0])
        else:
            self.effects.mutates.add(path)

    def bind_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.bind_target(element)
            return
        if isinstance(target, ast.Starred):
            self.bind_target(target.value)
            return
        if isinstance(target, ast.Subscript):
            self.visit(target.slice)
            path = dotted_path(target.value)
            if path is not None:
                self.effects.mutates.add(path)
            return
        path = dotted_path(target)
        if path is not None:
            self.target(path)

    # -- uses ------------------------------------------------------------------------------------

    def call(self, node: ast.Call) -> None:
        name = self.calls.view.qualified_name(node.func)
        if isinstance(name, Ambiguous) and any(c in DDP_CLASSES for c in name.candidates):
            self.effects.ambiguous.append((node, name))
        func = node.func
        if isinstance(func, ast.Attribute) and not isinstance(name, str):
            self.method_call(node, func)
        elif isinstance(name, str) and (
            name in PURE_FUNCTIONS
            or name.startswith(PURE_MODULES)
            or is_optimizer_class(name)
            or name == AMP_INITIALIZE
            or name in DDP_CLASSES
        ):
            # The callee is read too: `from torch.optim import SGD` between the wrap and
            # `SGD(...)` must move with it, or the moved call would come before the import.
            callee = self.calls.callee(node)
            if callee is not None:
                self.read(callee)
        elif self.calls.movable_class(node):
            # An optimizer class of the repository: read like torch's (migrator.analysis.classes).
            callee = dotted_path(func)
            if callee is not None:
                self.read(callee)
        elif isinstance(func, ast.Name) and self.calls.class_value_call(node):
            self.read((func.id,))  # a name holding torch's classes: constructs, as they do
        elif (summary := self.calls.function_summary(node)) is not None:
            # A pure function (of this module, or of another per the project facts): it reads
            # its arguments and its free names.
            callee = dotted_path(func)
            assert callee is not None  # function_summary follows plain paths only
            for path in summary.reads(callee):
                self.read(path)
        elif isinstance(name, str) and name in READING_FUNCTIONS:
            self.effects.unknown_calls.append(node)  # prints: visible, so never moved
        else:
            if not isinstance(func, ast.Name | ast.Attribute):
                self.visit(func)
            self.effects.unknown_calls.append(node)
            for argument in arguments(node):
                passed = dotted_path(argument.value)
                if passed is not None and passed[0] not in self.local_names:
                    self.effects.mutates.add(passed)  # an unknown function may change it
        for argument in arguments(node):
            self.visit(argument.value)

    def method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        """``x.method(...)`` on a value (not a module function)."""
        receiver = dotted_path(func.value)
        method = func.attr
        if receiver is not None:
            self.read(receiver)
            if method in MODEL_NAME_METHODS and not node.args and not node.keywords:
                # MAE's `no_weight_decay_list=model_without_ddp.no_weight_decay()`
                self.effects.assumptions.append(model_method_assumption(show((*receiver, method))))
            elif method in DEVICE_METHODS:
                self.effects.device_moves.add(receiver)
            elif method not in READ_ONLY_METHODS:
                self.effects.mutates.add(receiver)
                if method not in BUILDING_METHODS:
                    self.effects.unknown_calls.append(node)
        else:
            self.visit(func.value)
            if method not in READ_ONLY_METHODS:
                self.effects.unknown_calls.append(node)

    def attribute(self, node: ast.Attribute) -> None:
        path = dotted_path(node)
        if path is None:
            self.visit(node.value)
        else:
            self.read(path)  # `f().x` reads `f.x`: the call itself is not visited

    def name(self, node: ast.Name) -> None:
        self.read((node.id,))

    def bare_names(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self.read((name,))

    def pattern_names(self, node: ast.MatchAs | ast.MatchStar | ast.MatchMapping) -> None:
        """Names a match pattern captures count as read, as libcst's ``Name`` nodes did."""
        name = node.rest if isinstance(node, ast.MatchMapping) else node.name
        if name is not None:
            self.read((name,))
        self.visit_children(node)

    def match_class(self, node: ast.MatchClass) -> None:
        for name in node.kwd_attrs:
            self.read((name,))
        self.visit_children(node)

    def read(self, path: Path) -> None:
        if path[0] not in self.local_names:
            self.effects.reads.add(path)


_HANDLERS: dict[type, Callable[[EffectsCollector, Any], None]] = {
    ast.Assign: EffectsCollector.assign,
    ast.AugAssign: EffectsCollector.aug_assign,
    ast.AnnAssign: EffectsCollector.ann_assign,
    ast.For: EffectsCollector.for_loop,
    ast.AsyncFor: EffectsCollector.for_loop,
    ast.withitem: EffectsCollector.with_item,
    ast.ExceptHandler: EffectsCollector.except_handler,
    ast.Delete: EffectsCollector.delete,
    ast.NamedExpr: EffectsCollector.named_expr,
    ast.FunctionDef: EffectsCollector.definition,
    ast.AsyncFunctionDef: EffectsCollector.definition,
    ast.ClassDef: EffectsCollector.definition,
    ast.Import: EffectsCollector.import_names,
    ast.ImportFrom: EffectsCollector.import_from,
    ast.comprehension: EffectsCollector.comprehension,
    ast.ListComp: EffectsCollector.comprehensions,
    ast.SetComp: EffectsCollector.comprehensions,
    ast.DictComp: EffectsCollector.comprehensions,
    ast.GeneratorExp: EffectsCollector.comprehensions,
    ast.Lambda: EffectsCollector.lambda_,
    ast.Call: EffectsCollector.call,
    ast.Attribute: EffectsCollector.attribute,
    ast.Name: EffectsCollector.name,
    ast.Global: EffectsCollector.bare_names,
    ast.Nonlocal: EffectsCollector.bare_names,
    ast.MatchAs: EffectsCollector.pattern_names,
    ast.MatchStar: EffectsCollector.pattern_names,
    ast.MatchMapping: EffectsCollector.pattern_names,
    ast.MatchClass: EffectsCollector.match_class,
}


def _bound_names(target: ast.AST) -> set[str]:
    """The names a loop target binds (``i, (name, param)`` binds three)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return {name for element in target.elts for name in _bound_names(element)}
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return set()


def _element_sources(node: ast.expr) -> set[Path]:
    """What the elements of an iterated value may belong to: ``groups`` for ``groups``,
    ``enumerate(groups)``, ``groups.items()``, ``groups[1:]`` or ``(a, b)``; the receiver of
    ``model.parameters()``."""
    path = dotted_path(node)
    if path is not None:
        return {path}
    if isinstance(node, ast.Call):
        found = _element_sources(node.func.value) if isinstance(node.func, ast.Attribute) else set()
        for argument in node.args:
            found |= _element_sources(
                argument.value if isinstance(argument, ast.Starred) else argument
            )
        return found
    if isinstance(node, ast.Subscript):
        return _element_sources(node.value)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {path for element in node.elts for path in _element_sources(element)}
    return set()


# -- uses of a wrapped model ---------------------------------------------------------------------


class UseKind(enum.Enum):
    """Where a name or dotted path is used, as far as rewriting a DDP model's use goes."""

    MODULE = "x.module"  # the value of a `.module` attribute
    PARAMETERS = "x.parameters()"  # the receiver of a `.parameters()` call
    ARGUMENT = "f(x)"  # an argument (or a keyword's name) of a call
    ELEMENT = "(x, y)"  # an element of a tuple, list or set display
    ASSIGNED = "x = ..."  # a whole target of `=`
    OTHER = "other"


@dataclass(frozen=True)
class Use:
    path: Path
    kind: UseKind
    call: ast.Call | None = None  # for ARGUMENT: the call


def uses(index: ModuleIndex, line: Sequence[ast.stmt]) -> list[Use]:
    """Every name and dotted path in ``line``, with how it is used.

    Besides names and attributes, this lists the identifiers libcst holds as ``Name`` nodes
    (attribute names, keyword names, import names, ``global`` names, lambda parameters), since
    the rule has always treated a use of those spelled like a wrapped model as a use of it.
    """
    found: list[Use] = []
    for node in walk_line(line):
        if isinstance(node, ast.Name | ast.Attribute):
            path = dotted_path(node)
            if path is not None:
                found.append(_expression_use(index, node, path))
        if isinstance(node, ast.Attribute):
            found.append(Use((node.attr,), UseKind.OTHER))
        elif isinstance(node, ast.keyword) and node.arg is not None:
            call = index.parent(node)
            found.append(
                Use((node.arg,), UseKind.ARGUMENT, call if isinstance(call, ast.Call) else None)
            )
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.extend(_import_uses(node))
        elif isinstance(node, ast.Global | ast.Nonlocal):
            found.extend(Use((name,), UseKind.OTHER) for name in node.names)
        elif isinstance(node, ast.arg):
            found.append(Use((node.arg,), UseKind.OTHER))
    return found


def _expression_use(index: ModuleIndex, node: ast.expr, path: Path) -> Use:
    parent = index.parent(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr == "module":
            return Use(path, UseKind.MODULE)
        grand = index.parent(parent)
        if parent.attr == "parameters" and isinstance(grand, ast.Call) and grand.func is parent:
            return Use(path, UseKind.PARAMETERS)
        return Use(path, UseKind.OTHER)
    if isinstance(parent, ast.Call) and parent.func is not node:
        return Use(path, UseKind.ARGUMENT, parent)
    if isinstance(parent, ast.keyword | ast.Starred):
        call = index.parent(parent)
        if isinstance(call, ast.Call):
            return Use(path, UseKind.ARGUMENT, call)
        if isinstance(parent, ast.keyword):
            return Use(path, UseKind.ARGUMENT)  # a class keyword: an argument of no call
        return Use(path, UseKind.OTHER)
    if isinstance(parent, ast.Tuple | ast.List | ast.Set) and _is_display(index, parent):
        return Use(path, UseKind.ELEMENT)
    if isinstance(parent, ast.Delete) and len(parent.targets) > 1:
        return Use(path, UseKind.ELEMENT)  # `del a, b` deletes a tuple's elements
    if isinstance(parent, ast.Assign) and any(node is t for t in parent.targets):
        return Use(path, UseKind.ASSIGNED)
    return Use(path, UseKind.OTHER)


def _is_display(index: ModuleIndex, node: ast.expr) -> bool:
    """Not the bare tuple of ``x[a, b]``, which libcst holds as subscript elements."""
    holder = index.parent(node)
    if not isinstance(node, ast.Tuple) or not isinstance(holder, ast.Subscript):
        return True
    if holder.slice is not node:
        return True
    # ast gives a parenthesised tuple the span of its parentheses
    return index.source.segment(node).startswith("(")


def _import_uses(node: ast.Import | ast.ImportFrom) -> list[Use]:
    found: list[Use] = []
    if isinstance(node, ast.ImportFrom) and node.module:
        found.extend(_dotted_uses(node.module))
    for alias in node.names:
        if alias.name != "*":
            found.extend(_dotted_uses(alias.name))
        if alias.asname is not None:
            found.append(Use((alias.asname,), UseKind.OTHER))
    return found


def _dotted_uses(dotted: str) -> list[Use]:
    """The names and attributes of a dotted import name, as libcst spells it out."""
    parts = tuple(dotted.split("."))
    found = [Use(parts, UseKind.OTHER)]
    for end in range(1, len(parts)):
        kind = UseKind.MODULE if parts[end] == "module" else UseKind.OTHER
        found.append(Use(parts[:end], kind))
        found.append(Use((parts[end],), UseKind.OTHER))
    return found
