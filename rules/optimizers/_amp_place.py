"""Where NPU105's ``amp.initialize`` goes, its command-line switch, and what rules amp out.
Not a rule.

- :func:`placement`: the statement ``amp.initialize`` follows. Right after the assignment of
  the last optimizer (after the ``if``/``elif`` that chooses it), and after the device moves of
  the models that follow it there, since apex wants the models on their device; never after a
  later use of a model or an optimizer (a checkpoint's ``load_state_dict`` then comes after
  amp.initialize, as apex requires).
- :func:`command_line`: the ``argparse`` parser the ``--amp``, ``--opt-level`` and
  ``--loss-scale`` flags join, and the name its parsed arguments have.
- :func:`blockers`: code around which apex amp cannot be added safely: ``torch.compile``,
  FSDP and tensor parallelism, custom autograd functions that cast, half models,
  ``torch.autograd.grad``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from migrator.analysis.calls import argument, literal_value
from migrator.analysis.effects import DDP_CLASSES
from migrator.analysis.index import dotted_name, end_of, line_of
from migrator.analysis.view import FileView
from migrator.rules.optimizers._amp_steps import Problem, Setup, TrainingSteps, scope_statements

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar,
    ast.Match, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
)  # fmt: skip
_DEVICE_MOVES = frozenset({"cuda", "npu", "to", "xpu"})
_HALF_CASTS = frozenset({"half", "bfloat16"})
_HALF_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16"})
_COMPILE = frozenset({"torch.compile", "torch._dynamo.optimize"})
_AUTOGRAD_FUNCTION = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})
_AUTOGRAD_GRAD = frozenset({"torch.autograd.grad", "torch.autograd.functional.jacobian"})
# Sharding the model across processes: apex amp casts and steps a whole local model.
_SHARDING = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed.fsdp._fully_shard.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
        "torch.distributed.tensor.parallel.parallelize_module",
        "torch.distributed.tensor.parallel.api.parallelize_module",
    }
)
_CASTS = frozenset({"half", "float", "double", "bfloat16", "type"})
_ARGUMENT_PARSER = frozenset({"argparse.ArgumentParser"})
# Option strings and destinations of the flags NPU105 adds; one already there is a conflict.
FLAG_OPTIONS = ("--amp", "--opt-level", "--loss-scale")
_TAKEN = frozenset({"--amp", "--opt-level", "--opt_level", "--loss-scale", "--loss_scale"})
_TAKEN_DESTS = frozenset({"amp", "opt_level", "loss_scale"})


@dataclass
class Placement:
    """``amp.initialize`` goes right after ``anchor``, a statement of ``function``."""

    anchor: ast.stmt
    function: ast.AST
    indent: str  # the indentation of the anchor's block
    wraps_before: list[ast.Call] = field(default_factory=list)  # DDP wraps it would follow


def placement(view: FileView, steps: TrainingSteps) -> Placement | Problem:
    setups = steps.setups
    functions = {id(setup.function) for setup in setups}
    if len(functions) != 1:
        where = ", ".join(f"`{s.target}` (line {line_of(s.bindings[0])})" for s in setups)
        return Problem(
            setups[-1].bindings[-1], f"the optimizers are built in different functions: {where}"
        )
    function = setups[0].function
    bindings = [binding for setup in setups for binding in setup.bindings]
    body, anchor = _common_block(view, function, bindings)
    if body is None or anchor is None:
        return Problem(
            bindings[-1], "cannot find one block that holds every optimizer's assignment"
        )
    for ancestor in view.index.ancestors(anchor):
        if ancestor is function:
            break
        if isinstance(ancestor, _LOOPS):
            return Problem(
                bindings[-1],
                f"the optimizer is built inside a loop (line {line_of(ancestor)}); "
                "amp.initialize must run once",
            )
    models = steps.models
    targets = [setup.target for setup in setups]
    position = next(i for i, statement in enumerate(body) if statement is anchor)
    for statement in body[position + 1 :]:
        if _only_device_moves(statement, models):
            anchor = statement
            continue
        if _mentions(statement, [*models, *targets]):
            break
    end = end_of(anchor)
    for statement in scope_statements(_body_of(function)):
        if (statement.lineno, statement.col_offset) <= end or isinstance(statement, _COMPOUND):
            continue
        move = next((node for node in ast.walk(statement) if _is_move_of(node, models)), None)
        if move is not None:
            return Problem(
                move,
                f"the model is moved to its device here, after amp.initialize would run (it "
                f"follows line {line_of(anchor)}, and apex needs the model on its device then)",
            )
    line = view.source.line_text(anchor.lineno)
    placed = Placement(anchor, function, line[: len(line) - len(line.lstrip())])
    placed.wraps_before = _wraps_before(view, function, models, end)
    for wrap in placed.wraps_before:
        problem = _moved_and_wrapped_apart(view, wrap, body, models)
        if problem is not None:
            return problem
    return placed


def _moved_and_wrapped_apart(
    view: FileView, wrap: ast.Call, body: list[ast.stmt], models: list[str]
) -> Problem | None:
    """A wrap in another block than amp.initialize's, where the model also reaches its device
    (pytorch/examples' imagenet: `model.cuda(gpu)` then `model = DDP(model, ...)` in one
    branch): amp.initialize belongs between the two, which only a restructuring can give."""
    statement = view.index.statement_of(wrap)
    if statement is None:
        return None
    for node in ast.walk(statement):  # DDP(model.cuda()), DDP(model).cuda()
        if _is_move_of(node, models) or (
            _is_move_of(node, [], any_receiver=True)
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.value is wrap
        ):
            return _apart(wrap, statement.lineno, "in the same statement")
    block = _block_of(view, statement)
    if block is None or block is body:
        return None
    for inner in scope_statements(block):
        if isinstance(inner, ast.Expr | ast.Assign) and _device_move_of(inner, models):
            return _apart(wrap, inner.lineno, "in the same branch")
    return None


def _apart(wrap: ast.Call, line: int, where: str) -> Problem:
    return Problem(
        wrap,
        f"the model reaches its device (line {line}) and is wrapped here, {where}, before its "
        "optimizer is built: apex needs `amp.initialize` between the two, after the optimizer. "
        "Build the optimizer and call `amp.initialize` before the wrap (ModelZoo's migration "
        "of imagenet wraps after them), or add amp by hand",
    )


def _block_of(view: FileView, statement: ast.stmt) -> list[ast.stmt] | None:
    parent = view.index.parent(statement)
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and any(s is statement for s in block):
            return block
    return None


def _body_of(function: ast.AST) -> list[ast.stmt]:
    body = getattr(function, "body", [])
    return body if isinstance(body, list) else []


def _common_block(
    view: FileView, function: ast.AST, bindings: list[ast.Assign]
) -> tuple[list[ast.stmt] | None, ast.stmt | None]:
    """The innermost block holding every binding, and its statement holding the last one."""
    chains = [_block_chain(view, function, binding) for binding in bindings]
    if any(chain is None for chain in chains):
        return None, None
    common: list[tuple[list[ast.stmt], ast.stmt]] = []
    for level in zip(*chains, strict=False):  # type: ignore[misc]
        blocks = {id(block) for block, _ in level}
        if len(blocks) != 1:
            break
        common.append(level[0])
        if len({id(statement) for _, statement in level}) != 1:
            break
    if not common:
        return None, None
    block = common[-1][0]
    last = max(bindings, key=lambda binding: (binding.lineno, binding.col_offset))
    holder = next(s for s in block if any(inner is last for inner in ast.walk(s)))
    return block, holder


def _block_chain(
    view: FileView, function: ast.AST, node: ast.stmt
) -> list[tuple[list[ast.stmt], ast.stmt]] | None:
    """(block, statement of that block holding ``node``), from ``function``'s body down."""
    chain: list[tuple[list[ast.stmt], ast.stmt]] = []
    child: ast.AST = node
    for parent in view.index.ancestors(node):
        for field_name in ("body", "orelse", "finalbody"):
            block = getattr(parent, field_name, None)
            if isinstance(block, list) and any(s is child for s in block):
                assert isinstance(child, ast.stmt)
                chain.append((block, child))
                break
        if parent is function:
            chain.reverse()
            return chain
        child = parent
    return None


def _only_device_moves(statement: ast.stmt, models: list[str]) -> bool:
    if isinstance(statement, ast.If):
        inner = [*statement.body, *statement.orelse]
        return bool(inner) and all(_only_device_moves(s, models) for s in inner)
    return isinstance(statement, ast.Expr | ast.Assign) and _device_move_of(statement, models)


def _device_move_of(statement: ast.Expr | ast.Assign, models: list[str]) -> bool:
    """A statement that only moves a model: ``model.cuda()``, ``model.to(device)``, ``model =
    model.npu()``."""
    call = statement.value
    if not _is_move_of(call, models):
        return False
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
    if isinstance(statement, ast.Assign):
        moved = dotted_name(call.func.value)
        return len(statement.targets) == 1 and dotted_name(statement.targets[0]) == moved
    return True


def _is_move_of(node: ast.AST, models: list[str], *, any_receiver: bool = False) -> bool:
    """``model.cuda(...)``, ``model.npu(...)``, ``model.to(device)`` of one of ``models``; not
    ``model.to("cpu")`` or ``model.to(dtype=...)``, which put nothing on an accelerator."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr not in _DEVICE_MOVES:
        return False
    if not any_receiver and dotted_name(node.func.value) not in models:
        return False
    if node.func.attr != "to":
        return True
    device = (
        node.args[0]
        if node.args
        else next((k.value for k in node.keywords if k.arg == "device"), None)
    )
    if device is None:
        return False  # .to(dtype=...), .to(memory_format=...)
    value = literal_value(device)
    return not (isinstance(value, str) and value.startswith("cpu"))


def _mentions(statement: ast.stmt, paths: list[str]) -> bool:
    roots = {path.split(".")[0] for path in paths}
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and node.id in roots:
            dotted = node.id
            if dotted != "self" or any(_starts(statement, path) for path in paths):
                return True
    return False


def _starts(statement: ast.stmt, path: str) -> bool:
    return any(
        isinstance(node, ast.Attribute) and dotted_name(node) == path
        for node in ast.walk(statement)
    )


def _wraps_before(
    view: FileView, function: ast.AST, models: list[str], end: tuple[int, int]
) -> list[ast.Call]:
    found: list[ast.Call] = []
    for statement in scope_statements(_body_of(function)):
        if (statement.lineno, statement.col_offset) > end:
            continue
        value = getattr(statement, "value", None)
        for node in ast.walk(value) if isinstance(value, ast.AST) else ():
            if not isinstance(node, ast.Call) or not node.args:
                continue
            if dotted_name(node.args[0]) not in models:
                continue
            name = view.qualified_name_in(node.func, DDP_CLASSES)
            if isinstance(name, str) and node not in found:
                found.append(node)
    return found


# -- the command line ----------------------------------------------------------------------------


@dataclass
class CommandLine:
    """The script's ``argparse`` parser: the flags go after ``last_add``; ``args`` is the name
    of the parsed arguments where amp.initialize goes."""

    parser: str
    last_add: ast.stmt
    args: str
    quote: str
    indent: str


def command_line(view: FileView, place: Placement) -> CommandLine | Problem:
    index = view.index
    parsers: list[tuple[str, ast.Assign]] = []
    for call in view.calls_to({"argparse"}):
        if view.qualified_name_in(call.func, _ARGUMENT_PARSER) != "argparse.ArgumentParser":
            continue
        assign = index.parent(call)
        if isinstance(assign, ast.Assign) and len(assign.targets) == 1:
            target = assign.targets[0]
            if isinstance(target, ast.Name):
                parsers.append((target.id, assign))
    at = place.anchor
    if not parsers:
        return Problem(
            at,
            'no `argparse.ArgumentParser` to add `--amp` to (`switch = "flag"`); with '
            '`switch = "always"` NPU105 adds amp without a flag',
        )
    if len({name for name, _ in parsers}) != 1:
        return Problem(
            parsers[1][1],
            "several argparse parsers: npu-migrate cannot tell which one to add `--amp` to",
        )
    parser, construction = parsers[0]
    adds = _adds_of(view, parser)
    for call in _all_adds(view):
        taken = _taken_option(call)
        if taken is not None:
            return Problem(
                call,
                f"the command line already has `{taken}`: NPU105 cannot add its own flag; "
                'use `switch = "always"` or wire the switch by hand',
            )
    statement: ast.stmt = adds[-1] if adds else construction
    parsed = _parsed_names(view, parser)
    if len(parsed) != 1:
        why = "no" if not parsed else "more than one"
        return Problem(
            construction, f"{why} name holds the parsed command line (`{parser}.parse_args()`)"
        )
    args = parsed[0]
    if not _visible(view, args, place):
        return Problem(
            place.anchor,
            f"the parsed command line `{args}` is not visible where amp.initialize goes "
            f"(`{getattr(place.function, 'name', 'the module')}`)",
        )
    line = view.source.line_text(statement.lineno)
    return CommandLine(
        parser, statement, args, _quote_of(view, adds), line[: len(line) - len(line.lstrip())]
    )


def _adds_of(view: FileView, parser: str) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for attribute in view.index.attributes("add_argument"):
        call = view.index.parent(attribute)
        if not (isinstance(call, ast.Call) and call.func is attribute):
            continue
        if isinstance(attribute.value, ast.Name) and attribute.value.id == parser:
            statement = view.index.parent(call)
            if isinstance(statement, ast.Expr):  # a statement of its own, the usual way
                found.append(statement)
    return sorted(found, key=lambda s: (s.lineno, s.col_offset))


def _all_adds(view: FileView) -> Iterator[ast.Call]:
    for attribute in view.index.attributes("add_argument"):
        call = view.index.parent(attribute)
        if isinstance(call, ast.Call) and call.func is attribute:
            yield call


def _taken_option(call: ast.Call) -> str | None:
    for given in call.args:
        value = literal_value(given)
        if isinstance(value, str) and value in _TAKEN:
            return value
    dest = argument(call, "dest", None)
    if dest is not None and literal_value(dest.value) in _TAKEN_DESTS:
        return f"dest={literal_value(dest.value)!r}"
    return None


def _parsed_names(view: FileView, parser: str) -> list[str]:
    names: list[str] = []
    for method in ("parse_args", "parse_known_args"):
        for attribute in view.index.attributes(method):
            if not (isinstance(attribute.value, ast.Name) and attribute.value.id == parser):
                continue
            call = view.index.parent(attribute)
            holder = view.index.parent(call) if call is not None else None
            if isinstance(holder, ast.Subscript):  # parse_known_args()[0]
                holder = view.index.parent(holder)
            found = _bound_name(holder, method)
            if isinstance(holder, ast.Return):
                function = next(
                    (a for a in view.index.ancestors(holder) if isinstance(a, _FUNCTIONS)), None
                )
                found = _callers_name(view, function) if function is not None else None
            if found is not None and found not in names:
                names.append(found)
    return names


def _bound_name(holder: ast.AST | None, method: str) -> str | None:
    if not isinstance(holder, ast.Assign) or len(holder.targets) != 1:
        return None
    target = holder.targets[0]
    if isinstance(target, ast.Tuple) and method == "parse_known_args" and target.elts:
        target = target.elts[0]
    return target.id if isinstance(target, ast.Name) else None


def _callers_name(view: FileView, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``args = get_args()``: the name a function returning the parsed arguments is bound to."""
    for name in view.index.names(function.name):
        call = view.index.parent(name)
        if isinstance(call, ast.Call) and call.func is name:
            found = _bound_name(view.index.parent(call), "parse_args")
            if found is not None:
                return found
    return None


def _visible(view: FileView, name: str, place: Placement) -> bool:
    function = place.function
    if isinstance(function, _FUNCTIONS):
        parameters = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
        if any(p.arg == name for p in parameters):
            return True
    scope = view.index.scope_of(place.anchor)
    return bool(scope.lookup(name))


def _quote_of(view: FileView, adds: list[ast.stmt]) -> str:
    for statement in reversed(adds):
        for node in ast.walk(statement):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = view.code(node)
                quote = text.lstrip("rRbBuUfF")[:1]
                if quote in ("'", '"'):
                    return quote
    return '"'


# -- what keeps amp out ---------------------------------------------------------------------------


def blockers(view: FileView, steps: TrainingSteps) -> list[Problem]:
    """Code that apex amp cannot be added around safely, each at its line."""
    found: list[Problem] = []
    index = view.index
    for call in view.calls_to({"torch"}):
        name = view.qualified_name_in(call.func, _COMPILE)
        if isinstance(name, str):
            found.append(
                Problem(
                    call,
                    f"`{view.written(call.func)}` compiles the model or the training step: apex "
                    "amp changes the model's forward, its parameters' dtype and the optimizer "
                    "after the graph would be captured; remove it, or add amp by hand",
                )
            )
        name = view.qualified_name_in(call.func, _SHARDING)
        if isinstance(name, str):
            found.append(
                Problem(
                    call,
                    f"`{view.written(call.func)}` shards the model across processes (FSDP, tensor "
                    "parallel): apex amp casts and steps a whole local model, so it does not go "
                    "with sharding; use FSDP's own mixed precision (MixedPrecisionPolicy)",
                )
            )
        name = view.qualified_name_in(call.func, _AUTOGRAD_GRAD)
        if isinstance(name, str):
            found.append(
                Problem(
                    call,
                    f"`{view.written(call.func)}` takes gradients outside `backward()` (a gradient "
                    "penalty?): amp.scale_loss does not scale them, so they need apex's "
                    "gradient-penalty recipe by hand",
                )
            )
    for decorated in index.nodes(ast.FunctionDef):
        for decorator in decorated.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if isinstance(view.qualified_name_in(target, _COMPILE), str):
                found.append(
                    Problem(
                        decorator,
                        f"`{decorated.name}` is compiled with `torch.compile`: apex amp cannot "
                        "be added to a compiled training step",
                    )
                )
    for class_def in index.nodes(ast.ClassDef):
        if not any(
            isinstance(view.qualified_name_in(b, _AUTOGRAD_FUNCTION), str) for b in class_def.bases
        ):
            continue
        cast = _first_cast(view, class_def)
        if cast is not None:
            found.append(
                Problem(
                    cast,
                    f"the custom autograd function `{class_def.name}` casts tensors "
                    f"(`{view.written(cast)}`): under amp its inputs may be half precision; "
                    "decorate it for amp (`amp.float_function`) or cast by hand, then add amp",
                )
            )
    models = set(steps.models)
    for name in _HALF_CASTS:
        for attribute in index.attributes(name):
            cast = index.parent(attribute)
            moved = dotted_name(attribute.value)
            if isinstance(cast, ast.Call) and cast.func is attribute and moved in models:
                found.append(Problem(cast, _half_model(view, attribute.value)))
    for attribute in index.attributes("to"):
        move = index.parent(attribute)
        if not (isinstance(move, ast.Call) and move.func is attribute):
            continue
        if dotted_name(attribute.value) not in models:
            continue
        for given in [*move.args, *(k.value for k in move.keywords)]:
            dtype = view.qualified_name(given)
            if isinstance(dtype, str) and dtype in _HALF_DTYPES:
                found.append(Problem(move, _half_model(view, attribute.value)))
    return found


def _half_model(view: FileView, model: ast.expr) -> str:
    return (
        f"`{view.written(model)}` is cast to half precision here: apex amp needs an fp32 model "
        "(it casts what O2 needs itself); remove the cast, then add amp"
    )


def _first_cast(view: FileView, class_def: ast.ClassDef) -> ast.AST | None:
    for node in ast.walk(class_def):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _CASTS and not node.args[1:]:
                return node
            if node.func.attr == "to" and any(
                view.qualified_name(a) in _HALF_DTYPES or view.qualified_name(a) == "torch.float32"
                for a in [*node.args, *(k.value for k in node.keywords)]
            ):
                return node
    return None


def setup_summary(setups: list[Setup]) -> str:
    return ", ".join(f"`{setup.target}`" for setup in setups)
