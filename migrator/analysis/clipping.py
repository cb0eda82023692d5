"""Functions that hand back the optimizer class they are given, clipped. Not a rule.

detectron2 and the projects built on it (DETR, Mask2Former, DiT) hand the optimizer class to a
function that gives back the class itself, or a subclass of it whose ``step`` clips the
gradients first, and build the optimizer from what it gives::

    def maybe_add_full_model_gradient_clipping(optim):
        class FullModelGradientClippingOptimizer(optim):
            def step(self, closure=None):
                all_params = itertools.chain(*[x["params"] for x in self.param_groups])
                torch.nn.utils.clip_grad_norm_(all_params, clip_norm_val)
                super().step(closure=closure)

        return FullModelGradientClippingOptimizer if enable else optim

    optimizer = maybe_add_full_model_gradient_clipping(torch.optim.SGD)(params, lr, momentum=m)

The clipping scales each gradient in place (``clip_grad_norm_``, ``clip_grad_value_``), and the
step is the class's own: what ``optimizer`` does is what the class it is given does, clipped
alike. For the analyses, the call builds an optimizer of the class given: :func:`class_of` says
where that class is written (the callee, or the argument of such a wrapper), and
:func:`clipped_class` when a callee is such a wrapper's call. detectron2's own
``maybe_add_gradient_clipping(cfg, optimizer)`` is known by its name: given a class, it hands
back the class or one built with ``type(...)`` whose ``step`` clips each parameter's gradient in
place and then runs the class's.
"""

from __future__ import annotations

import ast

from migrator.analysis.calls import has_star
from migrator.analysis.classes import is_docstring, is_super_of
from migrator.analysis.scopes import BindingKind
from migrator.analysis.view import FileView

# Functions of other packages that give back the optimizer class they are given (position,
# keyword), or a subclass of it that clips the gradients in place before the class's step.
LIBRARY_CLIPPERS = {"detectron2.solver.build.maybe_add_gradient_clipping": (1, "optimizer")}
# What the clipping statements of such a subclass's ``step`` may call: the in-place clips, and
# what gathers the parameters from the groups.
_CLIPS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_",
    }
)
# Tensor methods that change a gradient's values in place, keeping its storage (never `set_`,
# `resize_`: those would leave an NPU fused optimizer's flat gradient buffer).
_IN_PLACE = frozenset(
    {"mul_", "div_", "add_", "sub_", "neg_", "clamp_", "clamp_min_", "clamp_max_", "nan_to_num_"}
)
_GATHERING = frozenset(
    {"itertools.chain", "itertools.chain.from_iterable", "builtins.list", "builtins.tuple"}
)


def clipped_class(view: FileView, wrapper: ast.Call) -> ast.Name | ast.Attribute | None:
    """The class argument of ``wrapper`` when the call gives back that class, or a subclass of
    it that only clips the gradients in place before running the class's own ``step``: a call
    of :data:`LIBRARY_CLIPPERS`, or of a function of the module, undecorated, that returns
    only its parameter, a class it defines on that parameter alone whose one method is such a
    ``step``, or a choice between the two (``Clipping if enable else optim``), and reads the
    parameter nowhere else. None otherwise."""
    if has_star(wrapper):
        return None
    name = view.qualified_name(wrapper.func)
    if isinstance(name, str) and name in LIBRARY_CLIPPERS:
        position, keyword = LIBRARY_CLIPPERS[name]
        return _given(wrapper, position, keyword)
    function = _local_function(view, wrapper.func)
    if function is None:
        return None
    parameter = _class_parameter(view, function)
    if parameter is None:
        return None
    position = [arg.arg for arg in function.args.args].index(parameter)
    return _given(wrapper, position, parameter)


def _given(call: ast.Call, position: int, keyword: str) -> ast.Name | ast.Attribute | None:
    """The argument of ``call`` for the parameter at ``position`` named ``keyword``, when it is
    a name or a dotted name (what a class is written as)."""
    by_name = [k.value for k in call.keywords if k.arg == keyword]
    given = by_name[0] if by_name else call.args[position] if position < len(call.args) else None
    return given if isinstance(given, ast.Name | ast.Attribute) else None


def _local_function(view: FileView, func: ast.expr) -> ast.FunctionDef | None:
    """The function of the module that the name ``func`` calls (its one binding)."""
    if not isinstance(func, ast.Name):
        return None
    bindings = view.index.bindings_of(func)
    if len(bindings) != 1 or bindings[0].kind is not BindingKind.FUNCTION:
        return None
    function = bindings[0].node
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return None
    spec = function.args
    if spec.posonlyargs or spec.vararg or spec.kwonlyargs or spec.kwarg:
        return None
    return function


def _class_parameter(view: FileView, function: ast.FunctionDef) -> str | None:
    """The parameter of ``function`` it returns as a class or clipped (see
    :func:`clipped_class`), when that is all the function does with it."""
    parameters = {arg.arg for arg in function.args.args}
    returns = [node for node in _own_nodes(function) if isinstance(node, ast.Return)]
    classes = {node.name: node for node in _own_nodes(function) if isinstance(node, ast.ClassDef)}
    given: set[str] = set()
    for statement in returns:
        for value in _choices(statement.value):
            if not isinstance(value, ast.Name):
                return None
            if value.id in parameters:
                given.add(value.id)
            elif value.id in classes and _clips_then_steps(view, classes[value.id]):
                base = classes[value.id].bases[0]
                assert isinstance(base, ast.Name)
                given.add(base.id)
            else:
                return None
    if len(given) != 1 or not given <= parameters:
        return None  # (a class derived from something else than the parameter)
    [parameter] = given
    allowed = {id(value) for statement in returns for value in _choices(statement.value)}
    allowed |= {id(owner.bases[0]) for owner in classes.values() if owner.bases}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in {parameter, *classes}:
            if isinstance(node.ctx, ast.Load) and id(node) in allowed:
                continue
            if isinstance(node.ctx, ast.Load) and node.id != parameter:
                continue  # a method's `super(K, self)` reads its class
            return None  # read otherwise, or rebound
        if isinstance(node, (ast.Nonlocal, ast.Global)) and parameter in node.names:
            return None
    return parameter


def _own_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of ``function``'s own body: the classes it defines, not what is inside them
    or inside functions nested in it."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return found


def _choices(value: ast.expr | None) -> list[ast.expr | None]:
    """What a returned value may be: the arms of conditional expressions, else itself."""
    if isinstance(value, ast.IfExp):
        return _choices(value.body) + _choices(value.orelse)
    return [value]


def _clips_then_steps(view: FileView, owner: ast.ClassDef) -> bool:
    """``class K(optim)`` whose one method is ``step(self, closure=None)``: statements that
    gather the parameters from ``self.param_groups`` and clip their gradients in place, then
    the base's ``step`` with the closure (``super().step(closure)``), its value returned or
    not."""
    if owner.decorator_list or owner.keywords or len(owner.bases) != 1:
        return False
    if not isinstance(owner.bases[0], ast.Name):
        return False
    methods = [s for s in owner.body if not (isinstance(s, ast.Pass) or is_docstring(s))]
    if len(methods) != 1 or not isinstance(methods[0], ast.FunctionDef):
        return False
    step = methods[0]
    spec = step.args
    names = [arg.arg for arg in spec.args]
    if step.name != "step" or step.decorator_list or spec.posonlyargs or spec.vararg:
        return False
    if spec.kwonlyargs or spec.kwarg or not 1 <= len(names) <= 2:
        return False
    if len(names) == 2 and not (
        len(spec.defaults) == 1
        and isinstance(spec.defaults[0], ast.Constant)
        and spec.defaults[0].value is None
    ):
        return False
    body = [s for s in step.body if not is_docstring(s)]
    if not body or not _steps_the_base(owner, body[-1], names):
        return False
    return all(_clips(view, statement, names[0]) for statement in body[:-1])


def _steps_the_base(owner: ast.ClassDef, statement: ast.stmt, names: list[str]) -> bool:
    """``super().step(closure)`` (or ``closure=closure``, or no argument without a closure),
    as a statement or returned."""
    if not isinstance(statement, (ast.Expr, ast.Return)) or statement.value is None:
        return False
    call = statement.value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr != "step" or not is_super_of(owner, call.func.value, names[0]):
        return False
    given = [*call.args, *(k.value for k in call.keywords)]
    if any(k.arg not in (None, "closure") for k in call.keywords) or len(given) > 1:
        return False
    if not given:
        return len(names) == 1
    return len(names) == 2 and isinstance(given[0], ast.Name) and given[0].id == names[1]


def _clips(view: FileView, statement: ast.stmt, self_name: str) -> bool:
    """A statement that only gathers parameters from ``self.param_groups`` into names and
    clips or changes their gradients in place: the calls it makes are clips, gatherings or
    in-place arithmetic on a gradient, the attributes it reads are ``self.param_groups`` and
    those calls' own names, and it stores names only (a `for` loop: its target)."""
    if isinstance(statement, ast.For):
        # `for group in self.param_groups: clip_grad_value_(group["params"], value)`
        if statement.orelse or not all(
            isinstance(n, ast.Name | ast.Tuple)
            for n in ast.walk(statement.target)
            if not isinstance(n, ast.expr_context)
        ):
            return False
        return _gathers(view, statement.iter, self_name) and all(
            _clips(view, inner, self_name) for inner in statement.body
        )
    if isinstance(statement, ast.Assign):
        if not all(isinstance(target, ast.Name) for target in statement.targets):
            return False
        value: ast.expr = statement.value
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        value = statement.value
        if _changes_a_gradient_in_place(view, value):
            return True
        if view.qualified_name(value.func) not in _CLIPS:
            return False
    else:
        return False
    return _gathers(view, value, self_name)


def _gathers(view: FileView, value: ast.expr, self_name: str) -> bool:
    """An expression whose calls are clips or gatherings, whose attributes are
    ``self.param_groups`` and those calls' own names, and which stores only the targets of its
    comprehensions."""
    callees = set()
    for node in ast.walk(value):
        if isinstance(node, ast.Call):
            if view.qualified_name(node.func) not in _CLIPS | _GATHERING:
                return False
            callees.add(id(node.func))
            callees.update(id(part) for part in ast.walk(node.func))
        elif isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
        elif isinstance(node, ast.Attribute) and id(node) not in callees:
            if not (
                node.attr == "param_groups"
                and isinstance(node.value, ast.Name)
                and node.value.id == self_name
            ):
                return False
        elif isinstance(node, ast.Name | ast.Subscript) and not isinstance(node.ctx, ast.Load):
            stored_by_comprehension = isinstance(node, ast.Name) and _comprehension_target(
                value, node
            )
            if not stored_by_comprehension:
                return False
    return True


def _changes_a_gradient_in_place(view: FileView, call: ast.Call) -> bool:
    """``p.grad.clamp_(-1.0, 1.0)``, ``torch.nan_to_num(p.grad, nan=0.0, out=p.grad)``
    (OneFormer's): arithmetic on a parameter's gradient, written into the same tensor, with
    plain values (literals and names) besides."""
    func = call.func
    given = [*call.args, *(keyword.value for keyword in call.keywords)]
    if isinstance(func, ast.Attribute) and func.attr in _IN_PLACE and _is_grad(func.value):
        others = given
    elif view.qualified_name(func) == "torch.nan_to_num" and call.args and _is_grad(call.args[0]):
        out = [keyword.value for keyword in call.keywords if keyword.arg == "out"]
        if len(out) != 1 or ast.dump(out[0]) != ast.dump(call.args[0]):
            return False
        others = [value for value in given if value is not call.args[0] and value is not out[0]]
    else:
        return False
    return all(_plain(value) for value in others)


def _is_grad(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.value, ast.Name)
    )


def _plain(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp):
        return _plain(node.operand)
    return isinstance(node, ast.Constant | ast.Name)


def _comprehension_target(value: ast.expr, name: ast.Name) -> bool:
    return any(
        isinstance(node, ast.comprehension) and any(n is name for n in ast.walk(node.target))
        for node in ast.walk(value)
    )


def class_of(view: FileView, call: ast.Call) -> ast.expr:
    """Where the class ``call`` may build an instance of is written: its callee, or the class
    that its callee, a call of a gradient-clipping wrapper, is given
    (``maybe_add_gradient_clipping(cfg, torch.optim.SGD)(params)``)."""
    func = call.func
    if not isinstance(func, ast.Call):
        return func
    given = view.memo(("clipped-class", id(func)), lambda: clipped_class(view, func))
    return func if given is None else given
