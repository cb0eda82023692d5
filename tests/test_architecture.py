"""The import graph matches the layers of docs/architecture.md.

Every import between the project's own modules is read from the sources (module level and
inside functions alike: a deferred import is still a dependency) and checked against the
layers: a module may import its own layer and the layers below it, never one above; only the
registry imports the rules; the rules import no engine, runner or CLI code; a rule module never
imports another family's rule module (shared code lives in the ``_``-prefixed modules); and the
graph has no cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "migrator"  # in LAYERS, the package's own __init__ only

# Lowest first; docs/architecture.md draws the same stack.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "vocabulary",
        (
            "migrator",
            "migrator.source",
            "migrator.diagnostics",
            "migrator.suppressions",
            "migrator.results",
            "migrator.api_tables",
            "migrator.ipython",
            "migrator.lazy_imports",
        ),
    ),
    ("analysis", ("migrator.analysis",)),
    (
        "rule interface",
        (
            "migrator.settings",
            "migrator.edits",
            "migrator.rewriter",
            "migrator.slices",
            "migrator.imports",
            "migrator.callargs",
            "migrator.rule",
        ),
    ),
    ("rules", ("migrator.rules",)),
    ("engine", ("migrator.engine", "migrator.registry")),
    (
        "runner",
        (
            "migrator.project_stage",
            "migrator.discovery",
            "migrator.cache",
            "migrator.files",
            "migrator.notebooks",
            "migrator.shell",
            "migrator.jobs",
            "migrator.pool",
            "migrator.runner",
        ),
    ),
    (
        "cli",
        (
            "migrator.cli",
            "migrator.config",
            "migrator.adopt",
            "migrator.baseline",
            "migrator.suppress_writer",
            "migrator.statistics",
            "migrator.originals",
            "migrator.report",
            "migrator.formats",
            "migrator.verify",
            "migrator.__main__",
        ),
    ),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "rules":  # installed as migrator.rules (pyproject's package-dir)
        parts = ["migrator", "rules", *parts[1:]]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {
    module_name(path): path
    for folder in ("migrator", "rules")
    for path in (ROOT / folder).rglob("*.py")
}


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest prefix that names ``module``."""
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module.startswith(prefix + ".") and prefix != ROOT_PACKAGE
            if (module == prefix or inside) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS and the document"
    return best[0]


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """The project modules that ``module`` imports, with the line of each import."""
    tree = ast.parse(MODULES[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                target = full if full in MODULES else node.module
                if target in MODULES:
                    yield target, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, node.lineno


def family_of(module: str) -> str | None:
    """``optimizers`` for ``migrator.rules.optimizers.npu101_...``; None outside a family."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["migrator", "rules"] else None


def is_rule_module(module: str) -> bool:
    return family_of(module) is not None and not module.rpartition(".")[2].startswith("_")


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    own = layer_of(module)
    for target, line in imports_of(module):
        assert layer_of(target) <= own, (
            f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}: "
            f"{LAYERS[own][0]} must not depend on {LAYERS[layer_of(target)][0]}"
        )


def test_only_the_registry_imports_the_rules() -> None:
    for module in MODULES:
        if module.startswith("migrator.rules") or module == "migrator.registry":
            continue
        for target, line in imports_of(module):
            assert not target.startswith("migrator.rules"), (
                f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}: declare what it "
                "needs on the rule (see migrator/rule.py) and reach rules through the registry"
            )


def test_rule_modules_share_code_only_through_shared_modules() -> None:
    """A rule may import its own family's rules (NPU102 plans with NPU101) and any family's
    ``_`` modules; another family's rule module is never a dependency."""
    for module in MODULES:
        if family_of(module) is None:
            continue
        for target, line in imports_of(module):
            if is_rule_module(target) and family_of(target) != family_of(module):
                raise AssertionError(
                    f"{MODULES[module].relative_to(ROOT)}:{line} imports the rule module "
                    f"{target} of another family: move what both need to a shared module"
                )


def test_the_import_graph_has_no_cycle() -> None:
    graph = {module: {target for target, _ in imports_of(module)} - {module} for module in MODULES}
    # A package's __init__ is imported with each of its modules; only edges between modules
    # count as a cycle.
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycle = [*path[path.index(target) :], target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_checks_see_the_imports_they_guard() -> None:
    """The checks above read real imports: NPU101 imports the analysis and its shared modules,
    the engine imports the rule interface (a parser that found nothing would pass them all)."""
    npu101 = "migrator.rules.optimizers.npu101_npu_fused_optimizer"
    assert "migrator.rules.optimizers._fused_planner" in {t for t, _ in imports_of(npu101)}
    assert "migrator.rule" in {t for t, _ in imports_of("migrator.engine")}
    assert layer_of("migrator.analysis.index") < layer_of("migrator.rule")
