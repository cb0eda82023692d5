"""Lightning's Trainer and the strategy a LightningModule's optimizers meet. Not a rule.

A ``LightningModule`` builds its optimizers in ``configure_optimizers``, and the ``Trainer``
hands them, with the module, to its *strategy*: single device, DDP, or one that re-allocates the
parameters (FSDP, DeepSpeed, fairscale's sharded DDP), which breaks the NPU fused optimizers'
"never re-allocate a parameter" constraint without an error. The strategy is an argument of the
Trainer, usually in another file, and often not in the code at all (``Trainer.from_argparse_args``,
``LightningCLI``, ``Trainer(**config)``). So NPU101 fuses the optimizers of a LightningModule only
when every ``Trainer`` that may train them is built in a way that rules those strategies out, and
there is at least one:

- :func:`trainer_facts` (in the summary of each file that mentions Lightning) says for each
  Trainer of the file whether its strategy is plain, or why it may not be;
- :func:`run_doubt` (in the link stage) gives, for a file of LightningModules, the first doubt
  among the Trainers of the files that may import it (in a monorepo, not a sibling project's),
  or None;
- :func:`lightning_class` finds the LightningModule a constructor (or a factory's call) is in.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from migrator.analysis.calls import literal_value
from migrator.analysis.index import line_of
from migrator.analysis.view import FileView

_ROOTS = frozenset({"lightning", "pytorch_lightning"})
# `Trainer(strategy=...)` strings that neither shard nor partition the parameters.
_PLAIN_STRATEGIES = frozenset(
    {
        "auto",
        "ddp",
        "ddp_spawn",
        "ddp_fork",
        "ddp_notebook",
        "ddp_find_unused_parameters_true",
        "ddp_find_unused_parameters_false",
        "ddp_spawn_find_unused_parameters_true",
        "ddp_spawn_find_unused_parameters_false",
        "dp",
        "single_device",
    }
)
# Strategy and plugin classes that keep the parameters where they are.
_PLAIN_CLASSES = frozenset(
    {
        "DDPStrategy",
        "DDPSpawnStrategy",
        "SingleDeviceStrategy",
        "DataParallelStrategy",
        "DDPPlugin",
        "DDPSpawnPlugin",
        "SingleDevicePlugin",
        "DataParallelPlugin",
    }
)
# Words of a plugin that re-allocates the parameters (older Lightning passed strategies there).
_MAX_BASES = 8  # classes of the file followed up from a LightningModule subclass
_SHARDING_WORDS = ("deepspeed", "fsdp", "shard", "colossal", "bagua")
_NO_TRAINER = "no Lightning `Trainer(...)` is in the files of this run"


def mentions_lightning(source: bytes) -> bool:
    return b"lightning" in source


def _lightning_name(view: FileView, node: ast.AST) -> str | None:
    name = view.qualified_name(node)
    if isinstance(name, str) and name.split(".", 1)[0] in _ROOTS:
        return name
    return None


def _is_lightning_module(view: FileView, class_def: ast.ClassDef, depth: int = 0) -> bool:
    """``class_def`` derives from a ``LightningModule``: directly, or through classes of the same
    file (latent-diffusion's ``LatentDiffusion(DDPM)``, ``DDPM(pl.LightningModule)``)."""
    for base in class_def.bases:
        if (_lightning_name(view, base) or "").endswith("LightningModule"):
            return True
        parent = _class_of_file(view, base)
        if (
            parent is not None
            and depth < _MAX_BASES
            and _is_lightning_module(view, parent, depth + 1)
        ):
            return True
    return False


def _class_of_file(view: FileView, base: ast.expr) -> ast.ClassDef | None:
    """The top-level class of the file that the name ``base`` is bound to, by its one binding."""
    if not isinstance(base, ast.Name):
        return None
    bindings = view.index.bindings_of(base)
    if len(bindings) != 1 or not isinstance(bindings[0].node, ast.ClassDef):
        return None
    return bindings[0].node


def lightning_class(view: FileView, node: ast.AST) -> ast.ClassDef | None:
    """The class around ``node`` (innermost first) that derives from a ``LightningModule``."""
    for ancestor in view.index.ancestors(node):
        if isinstance(ancestor, ast.ClassDef) and _is_lightning_module(view, ancestor):
            return ancestor
    return None


def trainer_facts(view: FileView) -> list[dict[str, Any]]:
    """Each Trainer of the file (``Trainer(...)``, ``Trainer.from_argparse_args(...)``,
    ``LightningCLI(...)``): its line, and why it may build a strategy that re-allocates the
    parameters (``doubt``; None when it cannot)."""
    found: list[dict[str, Any]] = []
    for call in view.index.nodes(ast.Call):
        name = _lightning_name(view, call.func)
        if name is None:
            continue
        last = name.rpartition(".")[2]
        written = f"`{view.written(call.func)}(...)`"
        if last == "Trainer":
            doubt = _trainer_doubt(view, call)
        elif last in ("from_argparse_args", "from_argparse") or last.endswith("CLI"):
            doubt = "takes its strategy from the command line or a configuration file"
        else:
            continue
        found.append({"line": line_of(call), "code": written, "doubt": doubt})
    return found


def _trainer_doubt(view: FileView, call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg is None:
            return f"gets `**{view.written(keyword.value)}`, which may choose its strategy"
        if keyword.arg == "strategy":
            doubt = _strategy_doubt(view, keyword.value)
        elif keyword.arg in ("plugins", "accelerator"):
            doubt = _plugin_doubt(view, keyword.value, keyword.arg)
        else:
            continue
        if doubt is not None:
            return doubt
    if any(isinstance(arg, ast.Starred) for arg in call.args):
        return "gets `*args`, which may choose its strategy"
    return None


def _strategy_doubt(view: FileView, value: ast.expr) -> str | None:
    written = f"`strategy={view.written(value)}`"
    literal = literal_value(value)
    if isinstance(literal, str) or literal is None:
        return None if literal in _PLAIN_STRATEGIES or literal is None else f"has {written}"
    if isinstance(value, ast.Call):
        name = view.qualified_name(value.func)
        if isinstance(name, str) and name.rpartition(".")[2] in _PLAIN_CLASSES:
            return None
        return f"has {written}"
    return f"has {written}, chosen at run time"


def _plugin_doubt(view: FileView, value: ast.expr, keyword: str) -> str | None:
    written = f"`{keyword}={view.written(value)}`"
    parts = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    for part in parts:
        literal = literal_value(part)
        if isinstance(literal, str) or literal is None:
            text = (literal or "").lower()
        elif isinstance(part, ast.Call):
            text = view.written(part.func).lower()
        elif keyword == "accelerator":
            continue  # a device type chosen at run time ("gpu", "npu")
        else:
            return f"has {written}, chosen at run time"
        if any(word in text for word in _SHARDING_WORDS):
            return f"has {written}"
    return None


def summarize(view: FileView) -> dict[str, Any]:
    """The file's Trainers, and whether it defines a LightningModule."""
    facts: dict[str, Any] = {}
    trainers = trainer_facts(view)
    if trainers:
        facts["trainers"] = trainers
    if any(_is_lightning_module(view, c) for c in view.index.nodes(ast.ClassDef)):
        facts["lightning_modules"] = True
    return facts


def run_doubt(
    summaries: Mapping[str, Mapping[str, Any]], module: str, sees: Callable[[str, str], bool]
) -> str | None:
    """Why a strategy that re-allocates the parameters cannot be ruled out for the
    LightningModules of the file ``module``, from the file summaries of the run (path -> facts
    with ``trainers``) of the files that may import it (``sees(importer, path)``: in a
    monorepo, not a sibling project's); None when each of those Trainers is plain and there is
    one."""
    trainers: Iterable[tuple[str, dict[str, Any]]] = (
        (path, trainer)
        for path, facts in sorted(summaries.items())
        if sees(path, module)
        for trainer in facts.get("trainers", [])
    )
    seen = False
    for path, trainer in trainers:
        seen = True
        if trainer["doubt"] is not None:
            where = f"{os.path.normpath(path)}:{trainer['line']}"
            return f"{trainer['code']} ({where}) {trainer['doubt']}"
    return None if seen else _NO_TRAINER


def default_doubt() -> str:
    """The doubt when the run's Trainers are not known (no link stage)."""
    return _NO_TRAINER
