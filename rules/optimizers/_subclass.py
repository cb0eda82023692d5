"""Thin local subclasses of an optimizer class chosen as a value. Not a rule itself.

EDSR's ``make_optimizer`` (and the super-resolution projects built on it) picks a class per
branch (``optimizer_class = optim.SGD`` / ``optim.Adam`` / ``optim.RMSprop``), derives a class
from it on the spot and builds the optimizer from that::

    class CustomOptimizer(optimizer_class):
        def __init__(self, *args, **kwargs):
            super(CustomOptimizer, self).__init__(*args, **kwargs)

        def _register_scheduler(self, scheduler_class, **kwargs):
            self.scheduler = scheduler_class(self, **kwargs)
        ...

    optimizer = CustomOptimizer(trainable, **kwargs_optimizer)

Such a class only adds methods of its own: its instances update the parameters exactly as its
base does, so NPU101 may map the base's classes to their NPU fused ones where the class
statement reads it (``class CustomOptimizer({torch.optim.SGD: ..., ...}.get(optimizer_class,
optimizer_class))``), as it maps a class value where it is called. :func:`subclass_base` says
when a call builds such a class, and which name it derives from.

A class given to a gradient-clipping wrapper, ``maybe_add_gradient_clipping(cfg,
torch.optim.SGD)(params)``, is another shape: :mod:`migrator.analysis.clipping`.
"""

from __future__ import annotations

import ast

from migrator.analysis.classes import is_docstring, is_super_of
from migrator.analysis.index import ModuleIndex
from migrator.analysis.scopes import BindingKind
from migrator.analysis.view import FileView

# What an optimizer defines or keeps on itself, in torch.optim.Optimizer and its fusable
# subclasses (torch 2.x) and in torch_npu's NpuFusedOptimizerBase: a subclass that defines or
# stores one of these changes what the optimizer does, or what the fused one relies on.
OPTIMIZER_NAMES = frozenset(
    {
        "__getstate__",
        "__setstate__",
        "add_param_group",
        "clip_grad_norm_fused_",
        "defaults",
        "get_combined_grads",
        "get_combined_params",
        "load_state_dict",
        "param_groups",
        "profile_hook_step",
        "register_load_state_dict_post_hook",
        "register_load_state_dict_pre_hook",
        "register_state_dict_post_hook",
        "register_state_dict_pre_hook",
        "register_step_post_hook",
        "register_step_pre_hook",
        "state",
        "state_dict",
        "step",
        "zero_grad",
    }
)
# The words of the optimizers' own private names (`_init_group`, `_group_step`,
# `_maybe_init_combined_states`, `_optimizer_step_code`, ...): a private method or attribute of
# the subclass that holds one of them may shadow one of theirs.
_PRIVATE_WORDS = ("amp", "combine", "grad", "group", "hook", "init", "param", "state", "step")
# What a method of the subclass must not read: the parameters' update happens through these, out
# of the sight of the checks made on the code that uses the optimizer.
_UPDATE_STATE = frozenset({"param_groups", "state", "defaults", "grad", "data"})
# Methods of the optimizer that a method of the subclass must not call on itself.
_SELF_CALLS = frozenset({"step", "zero_grad", "add_param_group"})


def derived_names(view: FileView) -> frozenset[str]:
    """The names of the module's class statements on one base read from a name: the only
    callees :func:`subclass_base` can accept (computed once per file)."""
    return view.memo("derived-classes", lambda: _derived_names(view.index))


def _derived_names(index: ModuleIndex) -> frozenset[str]:
    return frozenset(
        owner.name
        for owner in index.nodes(ast.ClassDef)
        if len(owner.bases) == 1 and isinstance(owner.bases[0], ast.Name)
    )


def subclass_base(view: FileView, call: ast.Call) -> ast.Name | None:
    """The name a thin subclass derives from, when ``call`` builds one: its callee names only a
    class statement of the call's own scope, on a single base read from a name, with no
    decorator or keyword; that class defines methods only, none that an optimizer defines, an
    ``__init__`` that hands every argument to the base's as it is (or none), and no method that
    reads the parameters' groups, the optimizer's state or a tensor's ``.grad``/``.data``, calls
    ``self.step()`` or ``self.zero_grad()``, or stores an optimizer's attribute on itself."""
    func = call.func
    if not isinstance(func, ast.Name) or func.id not in derived_names(view):
        return None
    index = view.index
    bindings = index.bindings_of(func)
    if len(bindings) != 1 or bindings[0].kind is not BindingKind.CLASS:
        return None
    owner = bindings[0].node
    if not isinstance(owner, ast.ClassDef) or _scope(index, owner) is not _scope(index, call):
        return None
    if owner.decorator_list or owner.keywords or len(owner.bases) != 1:
        return None
    base = owner.bases[0]
    if not isinstance(base, ast.Name) or not _only_methods(owner):
        return None
    return base


def _only_methods(owner: ast.ClassDef) -> bool:
    for statement in owner.body:
        if isinstance(statement, ast.Pass) or is_docstring(statement):
            continue
        if not isinstance(statement, ast.FunctionDef) or statement.decorator_list:
            return False
        if statement.name == "__init__":
            if not _forwards(owner, statement):
                return False
        elif _shadows(statement.name) or not _leaves_the_update(statement):
            return False
    return True


def _forwards(owner: ast.ClassDef, init: ast.FunctionDef) -> bool:
    """``def __init__(self, *args, **kwargs): super(...).__init__(*args, **kwargs)``."""
    spec = init.args
    if spec.posonlyargs or spec.kwonlyargs or spec.defaults or len(spec.args) != 1:
        return False
    if spec.vararg is None or spec.kwarg is None:
        return False
    body = [statement for statement in init.body if not is_docstring(statement)]
    if len(body) != 1 or not isinstance(body[0], ast.Expr):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    outer = call.func.value
    if call.func.attr != "__init__" or not is_super_of(owner, outer, spec.args[0].arg):
        return False
    star = call.args[0] if len(call.args) == 1 else None
    double = call.keywords[0] if len(call.keywords) == 1 else None
    return (
        isinstance(star, ast.Starred)
        and isinstance(star.value, ast.Name)
        and star.value.id == spec.vararg.arg
        and double is not None
        and double.arg is None
        and isinstance(double.value, ast.Name)
        and double.value.id == spec.kwarg.arg
    )


def _shadows(name: str) -> bool:
    if name in OPTIMIZER_NAMES:
        return True
    return name.startswith("_") and any(word in name for word in _PRIVATE_WORDS)


def _leaves_the_update(method: ast.FunctionDef) -> bool:
    self_name = method.args.args[0].arg if method.args.args else None
    for node in ast.walk(method):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in _UPDATE_STATE:
            return False
        on_self = isinstance(node.value, ast.Name) and node.value.id == self_name
        if on_self and not isinstance(node.ctx, ast.Load) and _shadows(node.attr):
            return False
        if on_self and node.attr in _SELF_CALLS:
            return False
    return True


def _scope(index: ModuleIndex, node: ast.AST) -> ast.AST:
    for parent in index.ancestors(node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return parent
    return index.tree
