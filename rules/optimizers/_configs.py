"""mmcv / mmengine config modules as NPU107 reads them. Not a rule.

A config module is a Python file of top-level assignments that mmcv's ``Config.fromfile`` (and
mmengine's) executes and turns into a dict: ``optimizer = dict(type='SGD', lr=0.02, ...)``
(mmcv 1.x: mmdet 2.x, mmseg 0.x, mmcls 0.x), ``optim_wrapper = dict(optimizer=dict(type=...))``
(mmengine: mmdet 3.x, mmseg 1.x, mmpretrain), inherited through ``_base_``. This module finds
the optimizer dicts of such a file and the settings around them that decide whether an NPU
fused optimizer is safe there, and summarises configs for the other files of the run.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from migrator.analysis import names
from migrator.analysis.calls import literal_value
from migrator.analysis.index import ModuleIndex, line_of

OPTIMIZER_KEY = "optimizer"  # mmcv 1.x
WRAPPER_KEY = "optim_wrapper"  # mmengine
FP16_KEY = "fp16"  # mmcv 1.x: turns the optimizer hook into Fp16OptimizerHook
HOOK_KEY = "optimizer_config"  # mmcv 1.x: the optimizer hook's settings and type
BASE_KEY = "_base_"
# Top-level keys that only mmcv / mmengine configs assign; one of them besides the optimizer
# (or a folder named `configs`) tells a config module from a script that happens to assign
# `optimizer = dict(...)`.
CONFIG_KEYS = frozenset(
    {
        BASE_KEY,
        HOOK_KEY,
        "lr_config",
        "runner",
        "param_scheduler",
        "train_cfg",
        "checkpoint_config",
        "log_config",
        "workflow",
        "total_epochs",
        "evaluation",
        "default_hooks",
        "train_dataloader",
        "custom_imports",
        "momentum_config",
        "dist_params",
        "load_from",
        "resume_from",
        "work_dir",
    }
)
CONFIG_FOLDERS = frozenset({"configs", "config"})
# Optimizer hooks of mmcv 1.x that zero gradients through the optimizer only.
SAFE_HOOKS = frozenset({"OptimizerHook", "GradientCumulativeOptimizerHook"})
# mmengine optimizer wrappers that call `optimizer.zero_grad()` and `step()` plainly
# (AmpOptimWrapper adds a GradScaler, which unscales the gradients in place).
SAFE_WRAPPERS = frozenset({"OptimWrapper", "AmpOptimWrapper"})
APEX_WRAPPER = "ApexOptimWrapper"  # mmengine's apex.amp wrapper
REGISTRY_CALL = re.compile(rb"Registry\(\s*['\"]optimizer['\"]")


@dataclass(frozen=True)
class Entry:
    """One ``key=value`` (or ``'key': value``) of a config dict."""

    key: str
    node: ast.AST  # the ast.keyword, or the key Constant of a dict literal
    value: ast.expr


@dataclass(frozen=True)
class ConfigDict:
    """A ``dict(...)`` call or a ``{...}`` literal with string keys; ``splat`` when it has
    ``**others`` (its keys cannot all be known)."""

    node: ast.Call | ast.Dict
    entries: tuple[Entry, ...]
    splat: bool

    def get(self, key: str) -> Entry | None:
        return next((entry for entry in self.entries if entry.key == key), None)


def config_dict(index: ModuleIndex, node: ast.AST) -> ConfigDict | None:
    """``node`` read as a config dict, or None."""
    if isinstance(node, ast.Dict):
        entries: list[Entry] = []
        splat = False
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                splat = True
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                entries.append(Entry(key.value, key, value))
            else:
                return None
        return ConfigDict(node, tuple(entries), splat)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and not node.args
        and all(binding.kind.value == "builtin" for binding in index.bindings_of(node.func))
    ):
        entries = [Entry(kw.arg, kw, kw.value) for kw in node.keywords if kw.arg is not None]
        splat = any(kw.arg is None for kw in node.keywords)
        return ConfigDict(node, tuple(entries), splat)
    return None


def top_level(index: ModuleIndex) -> dict[str, ast.Assign]:
    """Module-level ``name = value`` statements by name (the last one wins, as in a config)."""
    found: dict[str, ast.Assign] = {}
    for statement in index.tree.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            found[statement.targets[0].id] = statement
    return found


def is_config(index: ModuleIndex, path: str) -> bool:
    """Whether the module reads as an mmcv / mmengine config."""
    body = index.tree.body
    if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for s in body):
        return False
    names = top_level(index)
    if OPTIMIZER_KEY not in names and WRAPPER_KEY not in names:
        return False
    if WRAPPER_KEY in names or CONFIG_KEYS & names.keys():
        return True
    folders = os.path.normpath(path).split(os.sep)[:-1]
    return bool(CONFIG_FOLDERS & set(folders))


def optimizer_dicts(index: ModuleIndex) -> Iterator[tuple[str, ConfigDict]]:
    """The optimizer dicts of a config: ``optimizer = dict(type=...)``, mmcv's several
    optimizers ``optimizer = dict(generator=dict(type=...), ...)``, and mmengine's
    ``optim_wrapper = dict(optimizer=dict(type=...))`` (also one wrapper per model)."""
    names = top_level(index)
    optimizer = names.get(OPTIMIZER_KEY)
    if optimizer is not None:
        outer = config_dict(index, optimizer.value)
        if outer is not None and outer.get("type") is not None:
            yield OPTIMIZER_KEY, outer
        elif outer is not None:
            for entry in outer.entries:
                inner = config_dict(index, entry.value)
                if inner is not None and inner.get("type") is not None:
                    yield f"{OPTIMIZER_KEY}.{entry.key}", inner
    wrapper = names.get(WRAPPER_KEY)
    if wrapper is not None:
        outer = config_dict(index, wrapper.value)
        if outer is None:
            return
        single = outer.get(OPTIMIZER_KEY)
        if single is not None:
            inner = config_dict(index, single.value)
            if inner is not None:
                yield f"{WRAPPER_KEY}.{OPTIMIZER_KEY}", inner
            return
        for entry in outer.entries:
            sub = config_dict(index, entry.value)
            nested = sub.get(OPTIMIZER_KEY) if sub is not None else None
            inner = config_dict(index, nested.value) if nested is not None else None
            if inner is not None:
                yield f"{WRAPPER_KEY}.{entry.key}.{OPTIMIZER_KEY}", inner


@dataclass(frozen=True)
class Hazard:
    """A setting of a config under which an NPU fused optimizer would train wrongly.

    ``mmcv`` hazards (``fp16``, ``optimizer_config``) matter to mmcv 1.x's ``optimizer = ...``;
    mmengine ignores those keys (mmengine-era configs still carry a leftover ``fp16 = ...``),
    and its hazards (``optim_wrapper``) matter to ``optim_wrapper``'s optimizer only.
    """

    line: int
    text: str
    mmcv: bool

    def concerns(self, where: str) -> bool:
        """Whether it concerns the optimizer dict found at ``where`` (see optimizer_dicts)."""
        return self.mmcv == where.startswith(OPTIMIZER_KEY)


def hazards(index: ModuleIndex) -> list[Hazard]:
    """What in this config keeps its optimizers from becoming NPU fused ones."""
    names = top_level(index)
    found: list[Hazard] = []
    if FP16_KEY in names:
        statement = names[FP16_KEY]
        if literal_value(statement.value) is not None:
            found.append(
                Hazard(
                    line_of(statement),
                    "`fp16 = ...` turns mmcv's optimizer hook into `Fp16OptimizerHook`, which "
                    "calls `runner.model.zero_grad()` every iteration: with torch >= 2.0 that "
                    "sets the gradients to None and detaches them from the NPU fused "
                    "optimizer's flat buffers, which then step stale values",
                    mmcv=True,
                )
            )
    hook = names.get(HOOK_KEY)
    hook_dict = config_dict(index, hook.value) if hook is not None else None
    if hook is not None and hook_dict is not None:
        kind = _type_name(index, hook_dict)
        if kind is not None and kind not in SAFE_HOOKS:
            found.append(
                Hazard(
                    line_of(hook),
                    f"`optimizer_config` uses the optimizer hook `{kind}`; npu-migrate knows "
                    f"only that {' and '.join(sorted(SAFE_HOOKS))} zero gradients through the "
                    "optimizer (which keeps an NPU fused optimizer's flat buffers intact)",
                    mmcv=True,
                )
            )
    wrapper = names.get(WRAPPER_KEY)
    wrapper_dict = config_dict(index, wrapper.value) if wrapper is not None else None
    if wrapper is not None and wrapper_dict is not None:
        problem = _wrapper_problem(index, wrapper_dict)
        if problem is not None:
            found.append(Hazard(line_of(wrapper), problem, mmcv=False))
    return found


def _type_name(index: ModuleIndex, config: ConfigDict) -> str | None:
    """The registry name in `type`, or the name of mmengine's class that a lazy-import config
    puts there (`type=AmpOptimWrapper` after `from mmengine.optim import AmpOptimWrapper`)."""
    entry = config.get("type")
    if entry is None:
        return None
    value = literal_value(entry.value)
    if isinstance(value, str):
        return value
    try:
        qualified = names.resolve(index, entry.value)
    except RecursionError:  # a pathological alias chain names no wrapper npu-migrate knows
        qualified = None
    if isinstance(qualified, str) and qualified.startswith(("mmengine.", "mmcv.")):
        return qualified.rpartition(".")[2]
    return "<computed>"


def _wrapper_problem(index: ModuleIndex, wrapper: ConfigDict) -> str | None:
    kind = _type_name(index, wrapper)
    if kind is None or kind in SAFE_WRAPPERS:
        return None
    if kind == APEX_WRAPPER:
        return (
            "`ApexOptimWrapper` hands the optimizer to `apex.amp.initialize`, and the NPU fused "
            "classes the registry holds are `torch_npu.optim`'s, which step stale gradients "
            "under Ascend apex's amp (it sets their gradients to None before every backward): "
            "register `apex.optimizers.NpuFused*` in the repository's optimizer registry, as "
            "Ascend's mmcv fork does, or keep the torch optimizer"
        )
    return (
        f"the optimizer wrapper `{kind}` is not one npu-migrate knows to step and zero the "
        f"gradients plainly ({', '.join(sorted(SAFE_WRAPPERS | {APEX_WRAPPER}))})"
    )


# -- the run's other configs ----------------------------------------------------------------------


def wants_summary(source: bytes) -> bool:
    return b"_base_" in source or b"read_base" in source or REGISTRY_CALL.search(source) is not None


def summarize(index: ModuleIndex, path: str) -> dict[str, Any] | None:
    """What a derived config, or a module defining an optimizer registry, tells the others."""
    facts: dict[str, Any] = {}
    registry = _registry_line(index)
    if registry is not None:
        facts["registry"] = registry
    base = top_level(index).get(BASE_KEY)
    # mmengine's lazy-import configs inherit through `with read_base():` imports instead
    relative, absolute = _read_bases(index, path)
    lazy = bool(relative or absolute)
    if base is None and not lazy:
        return facts or None
    listed = literal_value(base.value) if base is not None else ()
    listed = [listed] if isinstance(listed, str) else listed
    if isinstance(listed, (list, tuple)) or lazy:
        facts["bases"] = [
            os.path.normpath(os.path.join(os.path.dirname(path), item))
            for item in (listed if isinstance(listed, (list, tuple)) else ())
            if isinstance(item, str) and "::" not in item and not item.startswith("{{")
        ] + relative
    if lazy:
        facts["module_bases"] = absolute
    facts["own_type"] = any(
        config.get("type") is not None for _, config in optimizer_dicts(index)
    ) or (lazy and _updates_type(index))
    found = hazards(index) + (_update_hazards(index) if lazy else [])
    if found:
        facts["hazards"] = [[hazard.line, hazard.text, hazard.mmcv] for hazard in found]
    return facts or None


def _read_bases(index: ModuleIndex, path: str) -> tuple[list[str], list[str]]:
    """The configs a lazy-import config inherits: the modules it imports under
    ``with read_base():``, as paths for relative imports (``from .._base_.schedules.x import
    *``) and as dotted names for absolute ones."""
    relative: list[str] = []
    absolute: list[str] = []
    for statement in index.tree.body:
        if not isinstance(statement, ast.With) or not any(
            isinstance(item.context_expr, ast.Call)
            and isinstance(item.context_expr.func, ast.Name)
            and item.context_expr.func.id == "read_base"
            for item in statement.items
        ):
            continue
        for inner in statement.body:
            if not isinstance(inner, ast.ImportFrom) or inner.module is None:
                continue
            if inner.level:
                folder = os.path.dirname(path)
                for _ in range(inner.level - 1):
                    folder = os.path.dirname(folder)
                relative.append(
                    os.path.normpath(os.path.join(folder, *inner.module.split("."))) + ".py"
                )
            else:
                absolute.append(inner.module)
    return relative, absolute


# What a lazy-import config may change in the optimizer it inherits, with
# `optim_wrapper.update(optimizer=dict(lr=4e-3))`, without npu-migrate looking further.
_UPDATABLE = frozenset(
    {"lr", "weight_decay", "momentum", "betas", "eps", "nesterov", "dampening", "alpha", "rho"}
)


def _wrapper_updates(index: ModuleIndex) -> Iterator[tuple[ast.stmt, ast.Call]]:
    """The top-level ``optim_wrapper.update(...)`` calls of a lazy-import config."""
    for statement in index.tree.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            continue
        receiver = call.func.value
        named = isinstance(receiver, ast.Name) and receiver.id == WRAPPER_KEY
        if call.func.attr == "update" and named:
            yield statement, call


def _updates_type(index: ModuleIndex) -> bool:
    """``optim_wrapper.update(optimizer=dict(type=AdamW, ...))``: an optimizer of its own."""
    for _, call in _wrapper_updates(index):
        for keyword in call.keywords:
            inner = config_dict(index, keyword.value) if keyword.arg == OPTIMIZER_KEY else None
            if inner is not None and inner.get("type") is not None:
                return True
    return False


def _update_hazards(index: ModuleIndex) -> list[Hazard]:
    """What a lazy-import config's ``optim_wrapper.update(...)`` changes that may keep the
    optimizer it inherits from becoming NPU fused: another wrapper type, or an optimizer key
    other than a hyper-parameter (``amsgrad=True``, ``maximize``...)."""
    found: list[Hazard] = []
    for statement, call in _wrapper_updates(index):
        given = ConfigDict(
            call,
            tuple(Entry(kw.arg, kw, kw.value) for kw in call.keywords if kw.arg is not None),
            any(kw.arg is None for kw in call.keywords) or bool(call.args),
        )
        line = line_of(statement)
        problem = _wrapper_problem(index, given) if given.get("type") is not None else None
        if given.splat:
            problem = "`optim_wrapper.update(...)` is given a dict npu-migrate cannot read"
        optimizer = given.get(OPTIMIZER_KEY)
        inner = config_dict(index, optimizer.value) if optimizer is not None else None
        if inner is not None and inner.get("type") is not None:
            inner = None  # its own optimizer (`update(optimizer=dict(type=AdamW, ...))`)
        elif optimizer is not None and (inner is None or inner.splat):
            problem = problem or "`optim_wrapper.update(optimizer=...)` cannot be read"
        elif inner is not None:
            keys = sorted(e.key for e in inner.entries if e.key not in _UPDATABLE)
            if keys:
                problem = problem or (
                    f"`optim_wrapper.update(optimizer=dict(...))` sets `{keys[0]}`, which "
                    "npu-migrate does not check there"
                )
        if problem is not None:
            found.append(Hazard(line, problem, mmcv=False))
    return found


def _registry_line(index: ModuleIndex) -> int | None:
    """The line of a top-level ``X = Registry('optimizer')`` without a parent registry (a copy
    of mmcv's own, which does not fall back to mmcv's or mmengine's)."""
    for statement in index.tree.body:
        if not isinstance(statement, ast.Assign) or not isinstance(statement.value, ast.Call):
            continue
        call = statement.value
        callee = call.func.attr if isinstance(call.func, ast.Attribute) else None
        if isinstance(call.func, ast.Name):
            callee = call.func.id
        if callee != "Registry" or not call.args:
            continue
        if literal_value(call.args[0]) != "optimizer":
            continue
        if any(keyword.arg == "parent" for keyword in call.keywords):
            continue
        return line_of(statement)
    return None


def descendants(path: str, summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The summarised configs that inherit the optimizer type of ``path`` through ``_base_``
    (directly or through configs that do not set a type of their own), in path order."""
    target = os.path.normpath(path)
    children: dict[str, list[str]] = {}
    for other, facts in summaries.items():
        for base in facts.get("bases", ()):
            children.setdefault(base, []).append(other)
        for module in facts.get("module_bases", ()):
            # `from mmpretrain.configs._base_.schedules.x import *`: any summarised config
            # whose path ends as that module's would is taken for it
            tail = os.path.join(*module.split(".")) + ".py"
            for candidate in summaries:
                if os.path.normpath(candidate).endswith(os.sep + tail):
                    children.setdefault(os.path.normpath(candidate), []).append(other)
            if target.endswith(os.sep + tail):
                children.setdefault(target, []).append(other)
    found: list[str] = []
    stack = [target]
    seen = {target}
    while stack:
        current = stack.pop()
        for child in children.get(current, ()):
            normalized = os.path.normpath(child)
            if normalized in seen or summaries[child].get("own_type"):
                continue
            seen.add(normalized)
            found.append(child)
            stack.append(normalized)
    return sorted(found)
