"""NPU107: `type='SGD'` of the optimizer in an mmcv / mmengine config -> `type='NpuFusedSGD'`."""

from __future__ import annotations

import ast

from migrator.analysis.calls import NOT_LITERAL, literal_value, string_literal
from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import Facts, Module
from migrator.callargs import remove_arg_objects
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers import _configs
from migrator.rules.optimizers._configs import ConfigDict, Entry

# Registry names (mmcv and mmengine register every torch.optim class under its class name)
# -> the torch_npu.optim class that mmcv >= 1.7.2 and mmengine >= 0.7.3 register beside them.
TARGETS = {
    "SGD": "NpuFusedSGD",
    "Adam": "NpuFusedAdam",
    "AdamW": "NpuFusedAdamW",
    "Adadelta": "NpuFusedAdadelta",
    "RMSprop": "NpuFusedRMSprop",
}
FUSED = frozenset(TARGETS.values())
# The constructors' own parameters (torch.optim's), which the NPU fused ones take alike.
PARAMETERS = {
    "SGD": ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "Adam": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "AdamW": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "Adadelta": ("lr", "rho", "eps", "weight_decay"),
    "RMSprop": ("lr", "alpha", "eps", "weight_decay", "momentum", "centered"),
}
# Keys the builders take out of the dict before the constructor sees it.
BUILDER_KEYS = frozenset({"type", "paramwise_cfg", "constructor", "_delete_"})
# Switches that pick a kernel only: dropped.
PERFORMANCE_ONLY = frozenset({"foreach", "fused", "capturable"})
# Keys harmless at one value, that change the update (or are not supported) at any other.
NEUTRAL_AT: dict[str, tuple[object, str]] = {
    "maximize": (False, "`maximize=True` (gradient ascent) has no NPU fused equivalent"),
    "differentiable": (False, "`differentiable=True` has no NPU fused equivalent"),
    "decoupled_weight_decay": (
        False,
        "`decoupled_weight_decay=True` makes it AdamW: use `type='NpuFusedAdamW'` instead",
    ),
    "amsgrad": (False, "the NPU fused Adam optimizers do not implement AMSGrad"),
}
KEPT_WHEN_NEUTRAL = frozenset({"amsgrad"})

_REGISTERED = (
    "mmcv >= 1.7.2 and mmengine >= 0.7.3 register `torch_npu.optim.{target}` in their "
    "`OPTIMIZERS` under that name when an NPU is available (it needs no apex amp); older "
    "versions raise KeyError when building it: register it there yourself with "
    "`OPTIMIZERS.register_module(module=torch_npu.optim.{target})`"
)


class ConfigOptimizerType(Rule):
    """
    ## What it does
    In mmcv / mmengine config modules (mmdet, mmseg, mmcls, mmpose... `configs/`), replaces the
    registry name of a torch optimizer with its NPU fused counterpart, keeping the quotes:
    `optimizer = dict(type='SGD', ...)` (mmcv 1.x, also `{'type': 'SGD', ...}` and one dict per
    model, `optimizer = dict(generator=dict(type='Adam'), ...)`) and
    `optim_wrapper = dict(optimizer=dict(type='SGD', ...))` (mmengine, also one wrapper per
    model). `SGD`, `Adam`, `AdamW`, `Adadelta`, `RMSprop` become `NpuFusedSGD`, `NpuFusedAdam`,
    `NpuFusedAdamW`, `NpuFusedAdadelta`, `NpuFusedRMSprop`. Kernel switches (`foreach`,
    `fused`, `capturable`) and no-op `maximize=False` / `differentiable=False` /
    `decoupled_weight_decay=False` are dropped.

    A module is a config when it has no function or class definitions, assigns `optimizer` or
    `optim_wrapper` at its top level, and also assigns `optim_wrapper`, `_base_` or another
    key only configs set (`optimizer_config`, `lr_config`, `runner`, `param_scheduler`,
    `train_cfg`, ...), or lives in a `configs` folder.

    In mmengine's lazy-import configs, where `type` is the class itself (`type=SGD` after
    `from torch.optim import SGD`), the class becomes the NPU fused one imported from
    `torch_npu.optim` (`type=NpuFusedSGD` after `from torch_npu.optim import NpuFusedSGD`; the
    old import goes when nothing else uses it): the builder takes a class as it is given, so no
    registry is involved.

    Reported, not rewritten: a key that changes the update (`maximize=True`, `amsgrad=True`...),
    a key the optimizer does not take, `**` in the dict, a type computed at run time;
    settings that break a fused optimizer, in the config or in a config of the run that
    inherits its optimizer through `_base_`: `fp16 = dict(...)` with mmcv 1.x
    (`Fp16OptimizerHook` calls `runner.model.zero_grad()`, which with torch >= 2.0 detaches the
    gradients from the fused optimizer's flat buffers), an `optimizer_config` hook other than
    `OptimizerHook` / `GradientCumulativeOptimizerHook`, an mmengine `optim_wrapper` type other
    than `OptimWrapper` / `AmpOptimWrapper` (`ApexOptimWrapper` hands torch_npu's class to apex
    amp, which steps stale gradients with it); and a
    repository that defines its own `Registry('optimizer')` without a parent (a copy of mmcv's
    builder): the name must be registered there, as Ascend's mmcv fork does.

    ## Why
    The NPU fused optimizers update all parameters of a group with one kernel. mmcv and
    mmengine build the optimizer from the config's `type` through their `OPTIMIZERS` registry,
    which holds every `torch.optim` class and, on an NPU, the `torch_npu.optim` ones; changing
    the name is all it takes (Ascend's model zoo changed it by hand in dozens of configs).

    ## Example
    ```python
    optimizer = dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=0.0001)
    optimizer_config = dict(grad_clip=None)
    ```

    ## Use instead
    ```python
    optimizer = dict(type='NpuFusedSGD', lr=0.02, momentum=0.9, weight_decay=0.0001)
    optimizer_config = dict(grad_clip=None)
    ```

    ## Fix safety
    Safe: `torch_npu.optim`'s fused optimizers compute the same update as the torch ones and
    take the same arguments, and any key that would make them differ blocks the rewrite. Keys
    set by configs that inherit this one are not seen here: an argument the fused optimizer
    does not take raises when the optimizer is built. The registry must hold the name: mmcv >=
    1.7.2 and mmengine >= 0.7.3 register `torch_npu.optim`'s classes when an NPU is available;
    older versions, and machines without an NPU, raise KeyError when building the optimizer.
    `paramwise_cfg` makes mmcv put every parameter in a group of its own, which leaves little to
    fuse (the update is the same).
    """

    CODE = "NPU107"
    NAME = "config-optimizer-type"
    SUMMARY = "torch optimizer named by `type=` in an mmcv / mmengine config"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("optimizer",)
    # Derived configs (`_base_`, lazy-import `read_base()`) and copies of mmcv's optimizer
    # registry elsewhere in the run.
    PROJECT_TRIGGER = ("_base_", "read_base", "Registry(")

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        return _configs.wants_summary(source)

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        return _configs.summarize(index, module.path)

    def check(self) -> None:
        if not _configs.is_config(self.index, self.context.path):
            return
        blockers = self._blockers()
        registry = self._registry_blocker()
        for where, config in _configs.optimizer_dicts(self.index):
            self._examine(where, config, blockers, registry)

    # -- what the config and its run say ---------------------------------------------------------

    def _blockers(self) -> list[tuple[_configs.Hazard, str]]:
        """What keeps optimizers of this config from becoming NPU fused: each hazard with its
        text as the message shows it (``Hazard.concerns`` says which optimizer dicts)."""
        found = [
            (hazard, f"{hazard.text} (line {hazard.line})")
            for hazard in _configs.hazards(self.index)
        ]
        summaries = self.project.summaries(self.CODE)
        for child in _configs.descendants(self.context.path, summaries):
            for line, text, mmcv in summaries[child].get("hazards", ()):
                hazard = _configs.Hazard(line, text, mmcv)
                found.append(
                    (hazard, f"{child} inherits this optimizer, and there {text} (line {line})")
                )
        return found

    def _registry_blocker(self) -> str | None:
        """A registry of the repository's own that a name in `type` may be looked up in (a class
        in `type`, a lazy-import config's, is built without one)."""
        summaries = self.project.summaries(self.CODE)
        registries = [
            f"{path}:{facts['registry']}"
            for path, facts in sorted(summaries.items())
            if "registry" in facts
        ]
        if not registries:
            return None
        return (
            f"the repository defines its own optimizer registry ({', '.join(registries)}), "
            "which may be the one this config is built through: register the "
            "`torch_npu.optim` class there (as Ascend's mmcv fork registers the NPU fused "
            "optimizers in its builder), then change `type` by hand"
        )

    # -- one optimizer dict ----------------------------------------------------------------------

    def _examine(
        self,
        where: str,
        config: ConfigDict,
        hazards: list[tuple[_configs.Hazard, str]],
        registry: str | None,
    ) -> None:
        entry = config.get("type")
        if entry is None:
            return  # `optim_wrapper = dict(optimizer=dict(lr=4e-3))`: the type is inherited
        name = literal_value(entry.value)
        lazy = None if isinstance(name, str) else self._lazy_class(entry)
        if lazy is not None:
            name = lazy.rpartition(".")[2]
        elif not isinstance(name, str):
            self._report_computed(where, entry)
            return
        assert isinstance(name, str)
        target = TARGETS.get(name)
        if target is None:
            return  # already NPU fused, or an optimizer without an NPU fused version
        if self.suppressed(entry.value):
            return
        problems = self._problems(name, config)
        blockers = [text for hazard, text in hazards if hazard.concerns(where)]
        if registry is not None and lazy is None:
            blockers.append(registry)  # a class is built without a registry lookup
        if lazy is not None:
            clash = self._name_clash(target)
            if clash is not None:
                problems.append(clash)
        if problems or blockers:
            reason = "; ".join(problems) if problems else blockers[0]
            if lazy is not None:
                self.report(
                    entry.value,
                    f"`{where}` type is the class `{lazy}` (a lazy-import config), not changed "
                    f"to `torch_npu.optim.{target}`: {reason}",
                )
                return
            self.report(
                entry.value,
                f"`{where}` type {name!r} is not changed to {target!r}: {reason}. "
                + _REGISTERED.format(target=target),
            )
            return
        dropped = [
            e for e in config.entries if e.key in PERFORMANCE_ONLY or self._neutral_dropped(e)
        ]
        notes = []
        if dropped:
            written = ", ".join(f"`{e.key}={self.view.written(e.value)}`" for e in dropped)
            notes.append(f"dropped {written} (no effect on the update)")
        if config.get("paramwise_cfg") is not None:
            notes.append(
                "`paramwise_cfg` puts every parameter in a group of its own, and the fused "
                "optimizer fuses group by group: little is fused (the update is the same)"
            )
        if lazy is not None:
            edits = [self._class_edit(entry, target)]
            message = (
                f"`{where}` type `{self.view.written(entry.value)}` (the class `{lazy}`, a "
                f"lazy-import config) -> `{target}` from `torch_npu.optim`: the builder takes the "
                "class as it is given, no registry involved (it needs no apex amp)"
            )
        else:
            edits = [self._type_edit(entry, target)]
            message = f"`{where}` type {name!r} -> {target!r}: " + _REGISTERED.format(target=target)
        if dropped:
            edits.append(self._drop_edit(config, dropped))
        message += "".join(f"; {note}" for note in notes)
        if not self.fix(entry.value, message, *edits) or lazy is None:
            return
        self.add_import("torch_npu.optim", name=target)
        binding = self._from_import(entry.value)
        if binding is not None:
            self.remove_import_if_unused(*binding)

    def _lazy_class(self, entry: Entry) -> str | None:
        """The torch.optim class that `type` holds as a class (mmengine's lazy-import configs:
        `type=SGD` after `from torch.optim import SGD`), written as a name or a dotted name."""
        if not isinstance(entry.value, ast.Name | ast.Attribute):
            return None
        qualified = self.qualified_name(entry.value)
        if not isinstance(qualified, str) or not qualified.startswith("torch.optim."):
            return None
        return qualified if qualified.rpartition(".")[2] in TARGETS else None

    def _name_clash(self, target: str) -> str | None:
        """`NpuFusedSGD` already names something else in the config."""
        for name in self.index.names(target):
            if self.qualified_name(name) != f"torch_npu.optim.{target}":
                return f"`{target}` already names something else in this config"
        return None

    def _from_import(self, node: ast.expr) -> tuple[str, str, str | None] | None:
        """The `from m import x [as y]` that binds the name ``node`` (to release it)."""
        if not isinstance(node, ast.Name):
            return None
        for binding in self.index.bindings_of(node):
            statement = binding.node
            if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    if (alias.asname or alias.name) == node.id:
                        return statement.module, alias.name, alias.asname
        return None

    def _class_edit(self, entry: Entry, target: str) -> Edit:
        kind = cst.Name if isinstance(entry.value, ast.Name) else cst.Attribute
        return self.replace(entry.value, kind, lambda node: cst.Name(target))

    def _report_computed(self, where: str, entry: Entry) -> None:
        value = entry.value
        written = self.view.written(value)
        if isinstance(self.qualified_name(value), str):
            return  # a class imported by a lazy-import config: not one with an NPU fused version
        if not isinstance(value, ast.Constant):
            self.report(
                value,
                f"`{where}` type `{written}` is computed, so npu-migrate cannot tell which "
                f"optimizer it names: use the NPU fused names ({_names()}) for the torch ones",
            )

    def _problems(self, name: str, config: ConfigDict) -> list[str]:
        problems: list[str] = []
        if config.splat:
            problems.append("its keys passed with `**` cannot be checked")
        allowed = set(PARAMETERS[name]) | BUILDER_KEYS | PERFORMANCE_ONLY | set(NEUTRAL_AT)
        for entry in config.entries:
            if entry.key not in allowed:
                problems.append(f"`{entry.key}` is not a parameter of `torch.optim.{name}`")
            elif entry.key in NEUTRAL_AT:
                neutral, reason = NEUTRAL_AT[entry.key]
                value = literal_value(entry.value)
                if value is NOT_LITERAL:
                    problems.append(
                        f"`{entry.key}={self.view.written(entry.value)}` is not a literal, so "
                        "npu-migrate cannot tell whether it changes the update"
                    )
                elif value != neutral:
                    problems.append(reason)
        return problems

    def _neutral_dropped(self, entry: Entry) -> bool:
        if entry.key not in NEUTRAL_AT or entry.key in KEPT_WHEN_NEUTRAL:
            return False
        return literal_value(entry.value) == NEUTRAL_AT[entry.key][0]

    # -- edits -----------------------------------------------------------------------------------

    def _type_edit(self, entry: Entry, target: str) -> Edit:
        literal = string_literal(self.source, entry.value)
        prefix, quote = (literal.prefix, literal.quote) if literal is not None else ("", "'")
        text = f"{prefix}{quote}{target}{quote}"
        return self.replace(entry.value, cst.SimpleString, lambda node: cst.SimpleString(text))

    def _drop_edit(self, config: ConfigDict, dropped: list[Entry]) -> Edit:
        keys = {entry.key for entry in dropped}
        if isinstance(config.node, ast.Call):

            def drop_arguments(call: cst.Call) -> cst.Call:
                doomed = [
                    arg
                    for arg in call.args
                    if arg.keyword is not None and arg.keyword.value in keys
                ]
                return remove_arg_objects(call, doomed)

            return self.replace(config.node, cst.Call, drop_arguments)

        def drop_elements(literal: cst.Dict) -> cst.Dict:
            elements = list(literal.elements)
            kept = [
                element
                for element in elements
                if not (
                    isinstance(element, cst.DictElement)
                    and isinstance(element.key, cst.SimpleString)
                    and element.key.evaluated_value in keys
                )
            ]
            if kept and kept[-1] is not elements[-1]:
                kept[-1] = kept[-1].with_changes(comma=elements[-1].comma)
            return literal.with_changes(elements=kept)

        return self.replace(config.node, cst.Dict, drop_elements)


def _names() -> str:
    return ", ".join(f"{source} -> {target}" for source, target in TARGETS.items())
