"""Shared matching of the torch_npu API tables (NPU930, NPU931). Not a rule itself.

A use is reported when it resolves, through :meth:`Rule.qualified_name` (aliases, ``from``
imports), to a name the selected table lists with the rule's status, or, for ``torch.Tensor``
methods, when the receiver is provably a tensor (:func:`provably_tensor`). The scan is driven
by the table: the index is asked for the attributes and names spelled like the last component
of a listed name, and only those are resolved.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import ClassVar

from migrator.analysis.names import Ambiguous
from migrator.analysis.view import FileView, Location
from migrator.api_tables import ApiEntry, ApiTable, table_for
from migrator.diagnostics import Severity
from migrator.rule import FixSafety, Rule

TENSOR = "torch.Tensor"
# Calls whose result is a tensor: enough to call `x = torch.zeros(...)` then `x.smm(...)` a
# tensor method call. Deliberately short: only what certainly returns one tensor.
TENSOR_FACTORIES = frozenset(
    f"torch.{name}"
    for name in (
        "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "full", "rand", "randn",
        "randint", "randperm", "arange", "linspace", "logspace", "eye", "zeros_like",
        "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
        "cat", "concat", "stack", "Tensor", "FloatTensor", "LongTensor",
    )
)  # fmt: skip


@dataclass(frozen=True)
class Lookup:
    """One table's entries of one status, arranged for index lookups."""

    table: ApiTable
    status: str
    last_names: frozenset[str]  # `GRU` for torch.nn.GRU (and for its torch_npu spelling)
    methods: dict[str, ApiEntry]  # `smm` for torch.Tensor.smm
    roots: frozenset[str]  # `torch`, `torch_npu`: what a listed name can start with

    def entry(self, name: str) -> ApiEntry | None:
        found = self.table.lookup(name)
        return found if found is not None and found.status == self.status else None


@cache
def lookup_for(table: ApiTable, status: str) -> Lookup:
    entries = [entry for entry in table.entries.values() if entry.status == status]
    names = [entry.name for entry in entries]
    names += [spelling for spelling, e in table.by_npu_name.items() if e.status == status]
    methods = {
        entry.name.removeprefix(TENSOR + "."): entry
        for entry in entries
        if entry.name.startswith(TENSOR + ".") and entry.name.count(".") == 2
    }
    return Lookup(
        table,
        status,
        frozenset(name.rsplit(".", 1)[1] for name in names),
        methods,
        frozenset(name.split(".", 1)[0] for name in names),
    )


class ApiTableRule(Rule):
    """Base of NPU930 / NPU931: one diagnostic per use of a name the table lists with
    ``STATUS`` (with ``ONCE_PER_NOTE``: per note and file, at its first use)."""

    STATUS: ClassVar[str]
    SEVERITY: ClassVar[Severity]
    # An unsupported API needs a change at every use; a behaviour note is read once per file.
    ONCE_PER_NOTE: ClassVar[bool] = False
    FIX_SAFETY = FixSafety.NONE
    # Every listed name (and every override: migrator.api_tables validates it) is under a
    # `torch*` package, so every use needs an import that spells "torch".
    TRIGGER = ("torch",)

    def describe(self, name: str, entry: ApiEntry, release: str) -> str:
        """The message for a use of ``name`` (as resolved: the torch_npu spelling of
        ``entry`` where the code uses that)."""
        raise NotImplementedError

    def check(self) -> None:
        table = table_for(self.settings.torch_npu_version, self.settings.torch_npu_api)
        lookup = lookup_for(table, self.STATUS)
        taken = self._reported_elsewhere()
        found: dict[int, tuple[ast.AST, ApiEntry | Ambiguous, str]] = {}
        for node in self._candidates(lookup):
            if id(node) not in found:
                match = self._match(node, lookup)
                if match is not None:
                    found[id(node)] = (node, *match)
        uses: list[tuple[ast.AST, ApiEntry | Ambiguous, str]] = []
        for node, result, name in sorted(found.values(), key=lambda f: _start(f[0])):
            parent = self.index.parent(node)
            if isinstance(parent, ast.Attribute) and id(parent) in found:
                continue  # `a.b.c` listed as well as `a.b`: the longer name is reported
            if self.position(node) not in taken:
                uses.append((node, result, name))
        folded = self._fold_notes(uses) if self.ONCE_PER_NOTE else [(*u, []) for u in uses]
        for node, result, name, later_lines in folded:
            self._report(node, result, name, table.release, later_lines)

    def _fold_notes(
        self, uses: list[tuple[ast.AST, ApiEntry | Ambiguous, str]]
    ) -> list[tuple[ast.AST, ApiEntry | Ambiguous, str, list[int]]]:
        """The first use of each note (by its text: `init_process_group` and `new_group`
        share one) with the lines of the later uses, which are not reported on their own.
        Ambiguous uses are kept apart: each one asks its own question."""
        kept: list[tuple[ast.AST, ApiEntry | Ambiguous, str, list[int]]] = []
        first_of_note: dict[str, list[int]] = {}
        for node, result, name in uses:
            if isinstance(result, Ambiguous):
                kept.append((node, result, name, []))
                continue
            later_lines = first_of_note.get(result.note)
            if later_lines is None:
                first_of_note[result.note] = later_lines = []
                kept.append((node, result, name, later_lines))
            else:
                later_lines.append(self.position(node).line)
        return kept

    # -- finding the uses --------------------------------------------------------------------

    def _candidates(self, lookup: Lookup) -> Iterator[ast.AST]:
        index = self.index
        for last in lookup.last_names:
            yield from index.attributes(last)
            yield from index.names(last)
        # `from torch.nn import GRU as Recurrent`: uses are spelled `Recurrent`
        for statement in index.nodes(ast.ImportFrom):
            for alias in statement.names:
                if alias.asname and alias.name in lookup.last_names:
                    yield from index.names(alias.asname)

    def _match(self, node: ast.AST, lookup: Lookup) -> tuple[ApiEntry | Ambiguous, str] | None:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            return None  # a local definition of the same name
        if self.may_name(node, lookup.roots):
            name = self.qualified_name(node)
            if isinstance(name, str):
                entry = lookup.entry(name)
                if entry is not None:
                    return entry, name
            elif isinstance(name, Ambiguous):
                listed = [c for c in name.candidates if lookup.entry(c) is not None]
                if listed:
                    return name, listed[0]
        method = lookup.methods.get(node.attr) if isinstance(node, ast.Attribute) else None
        if method is not None and provably_tensor(self.view, node.value):  # type: ignore[attr-defined]
            return method, method.name
        return None

    def _reported_elsewhere(self) -> set[Location]:
        """Where an earlier rule already said something (NPU920 on DataParallel, NPU302 on
        torch.cuda names without an NPU counterpart, NPU922, NPU923...): the more specific
        rule's finding stands alone."""
        return {
            Location(d.line, d.column)
            for d in self.context.diagnostics
            if d.code != self.CODE and d.severity in (Severity.MANUAL, Severity.INFO)
        }

    def _report(
        self,
        node: ast.AST,
        result: ApiEntry | Ambiguous,
        name: str,
        release: str,
        later_lines: list[int],
    ) -> None:
        if isinstance(result, Ambiguous):
            entry = self._entry_of(name, release)
            self.report(
                node,
                f"cannot tell whether this is `{name}`: {result.describe()}; "
                f"if it is: {self.describe(name, entry, release)}",
            )
            return
        message = self.describe(name, result, release)
        if later_lines:
            lines = sorted(set(later_lines))
            plural = "s" if len(lines) > 1 else ""
            message += f" The same applies at line{plural} {', '.join(map(str, lines))}."
        self.report(node, message, self.SEVERITY)

    def _entry_of(self, name: str, release: str) -> ApiEntry:
        table = table_for(self.settings.torch_npu_version, self.settings.torch_npu_api)
        entry = table.lookup(name)
        assert entry is not None
        return entry


def _start(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def source_of(entry: ApiEntry, release: str) -> str:
    """Where a finding's claim comes from, for the message."""
    if entry.origin == "table":
        return f"torch_npu {release} API support list"
    return f"{entry.origin}, torch_npu {release}"


# -- tensors -------------------------------------------------------------------------------------


def provably_tensor(view: FileView, node: ast.AST) -> bool:
    """Whether ``node`` certainly evaluates to a ``torch.Tensor``, decided cheaply on the index:

    - a call of a torch tensor factory (``torch.zeros(...)``, ``torch.tensor(...)``, see
      ``TENSOR_FACTORIES``);
    - a name all of whose bindings in scope are such an assignment (``x = torch.randn(3)``), a
      parameter annotated ``torch.Tensor`` (or ``Tensor`` imported from torch), or a variable
      annotated so (``x: torch.Tensor = ...``).

    Anything else (attributes, results of other calls, unannotated parameters) is not provably
    a tensor: a method of the same name on another object must not be reported.
    """
    if isinstance(node, ast.Call):
        return _resolves_to(view, node.func, TENSOR_FACTORIES)
    if not isinstance(node, ast.Name):
        return False
    bindings = view.index.bindings_of(node)
    return bool(bindings) and all(_tensor_binding(view, binding) for binding in bindings)


def _tensor_binding(view: FileView, binding: object) -> bool:
    parameter = getattr(binding, "node", None)
    if isinstance(parameter, ast.arg):
        return parameter.annotation is not None and _is_tensor_type(view, parameter.annotation)
    statement = getattr(binding, "statement", None)
    if isinstance(statement, ast.AnnAssign):
        return _is_tensor_type(view, statement.annotation)
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        value = statement.value
        return isinstance(value, ast.Call) and _resolves_to(view, value.func, TENSOR_FACTORIES)
    return False


def _is_tensor_type(view: FileView, annotation: ast.AST) -> bool:
    return _resolves_to(view, annotation, {TENSOR})


def _resolves_to(view: FileView, node: ast.AST, names: frozenset[str] | set[str]) -> bool:
    if not view.may_name(node, {"torch"}):
        return False
    return view.qualified_name(node) in names
