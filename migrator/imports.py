"""The only place that adds or removes import statements.

Rules queue requests with ``Rule.add_import`` / ``Rule.remove_import_if_unused``; the engine calls
:func:`apply_import_edits` once the rule has visited the file.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node

from migrator.rule import ImportRemoval, ImportRequest


def apply_import_edits(
    module: cst.Module,
    additions: Sequence[ImportRequest],
    removals: Sequence[ImportRemoval],
) -> cst.Module:
    # RemoveImportsVisitor keeps one request per module name, so two removals from the same module
    # (`import apex.normalization as N` and `import apex.normalization`) would drop one of them:
    # apply them one at a time.
    for removal in removals:
        unused = [(removal.module, removal.obj, removal.asname)]
        module = RemoveImportsVisitor(CodemodContext(), unused).transform_module(module)
    for request in additions:
        module = ensure_import(module, request.module, after=request.after)
    return module


def ensure_import(module: cst.Module, name: str, *, after: str | None = None) -> cst.Module:
    """Add ``import name`` at module level unless a module-level import already binds ``name``.

    Placement: right after the first module-level import of ``after`` (``import torch``,
    ``from torch import nn``, ``import torch.nn as nn``); otherwise after the last module-level
    import that precedes the first function or class; otherwise after the docstring and
    ``__future__`` imports.
    """
    body = list(module.body)
    if any(_binds_module(statement, name) for statement in body):
        return module
    index = _insertion_index(body, after)
    alias = cst.ImportAlias(cst.parse_expression(name))  # type: ignore[arg-type]
    body.insert(index, cst.SimpleStatementLine([cst.Import([alias])]))
    return module.with_changes(body=body)


def _binds_module(statement: cst.BaseStatement, name: str) -> bool:
    """``import name``, ``import name.sub`` or ``import name as name`` at module level."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                imported = get_full_name_for_node(alias.name) or ""
                if alias.asname is None and (imported == name or imported.startswith(name + ".")):
                    return True
                if alias.evaluated_alias == name and imported == name:
                    return True
    return False


def _imported_modules(statement: cst.BaseStatement) -> list[str]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    modules: list[str] = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            modules.extend(get_full_name_for_node(a.name) or "" for a in small.names)
        elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
            modules.append(get_full_name_for_node(small.module) or "")
    return modules


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return bool(_imported_modules(statement))


def _insertion_index(body: Sequence[cst.BaseStatement], after: str | None) -> int:
    if after is not None:
        for index, statement in enumerate(body):
            if any(m == after or m.startswith(after + ".") for m in _imported_modules(statement)):
                return index + 1
    last_import = None
    for index, statement in enumerate(body):
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            break
        if _is_import_line(statement):
            last_import = index
    if last_import is not None:
        return last_import + 1
    return _header_length(body)


def _header_length(body: Sequence[cst.BaseStatement]) -> int:
    """Statements that must stay first: the docstring and ``from __future__`` imports."""
    index = 0
    if body and _is_docstring(body[0]):
        index = 1
    while index < len(body) and "__future__" in _imported_modules(body[index]):
        index += 1
    return index


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
