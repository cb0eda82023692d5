"""The rule interface: one class per rule, one rule per module in ``rules/``.

A rule is a libcst transformer with a declarative header::

    class AmpCombineGrad(Rule):
        '''
        ## What it does
        ...
        ## Why
        ...
        ## Example
        ...
        ## Use instead
        ...
        ## Fix safety
        ...
        '''

        CODE = "NPU102"
        NAME = "amp-combine-grad"
        SUMMARY = "`amp.initialize(...)` without `combine_grad=True`"
        FIX_SAFETY = FixSafety.SAFE
        TRIGGER = re.compile(r"initialize")

The engine creates one instance per file and per pass, with the file's :class:`FileContext`, and
visits the module through a ``MetadataWrapper``. Inside the transformer:

- ``self.fix(original_node, message)`` records a ``fixed`` diagnostic and returns ``True``; it
  returns ``False`` when a suppression comment covers that line, and the rule must then leave the
  node as it is. Always call it before returning an edited node.
- ``self.report(original_node, message)`` records a ``manual`` (or ``info``) diagnostic.
- ``self.qualified_name(node)`` / ``self.qualified_name_in(node, names)`` give the node's
  qualified name through :mod:`migrator.names`, ``Ambiguous`` when it has more than one origin.
- ``self.add_import("apex")`` and ``self.remove_import_if_unused(...)`` queue import edits that the
  engine applies after the rule has run, through :mod:`migrator.imports`.

Positions and metadata are only known for nodes of the tree being visited: pass ``original_node``,
never ``updated_node``, to ``fix``, ``report`` and ``qualified_name``. (``resolve`` is taken:
libcst's ``MetadataDependent.resolve`` binds the metadata.)

``TRIGGER`` is the cheap pre-scan: the engine only parses a file with libcst when the trigger of at
least one selected rule matches its text, so it must match every file the rule could edit or
report on (a necessary condition, not a sufficient one).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    ParentNodeProvider,
    PositionProvider,
    QualifiedNameProvider,
    ScopeProvider,
)

from migrator import names
from migrator.diagnostics import Diagnostic, Severity
from migrator.suppressions import Suppressions

DOC_SECTIONS = ("What it does", "Why", "Example", "Use instead", "Fix safety")


class FixSafety(enum.StrEnum):
    """Whether a rule's edits may be applied without review (ruff's vocabulary)."""

    SAFE = "safe"
    UNSAFE = "unsafe"  # applied only with --unsafe-fixes; reported otherwise
    NONE = "none"  # report-only rule


class Target(enum.StrEnum):
    """What device code is migrated to (``--target``)."""

    NPU = "npu"
    ACCELERATOR = "accelerator"


@dataclass(frozen=True)
class Settings:
    """Run-wide options that rules may read. Frozen so that workers can share it."""

    target: Target = Target.NPU
    unsafe_fixes: bool = False
    rule_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def options_for(self, code: str) -> Mapping[str, Any]:
        return self.rule_options.get(code, {})


@dataclass(frozen=True)
class ImportRequest:
    """``import module`` to add at module level, right after the first import of ``after``."""

    module: str
    after: str | None = None


@dataclass(frozen=True)
class ImportRemoval:
    """An import to drop when nothing uses it any more (libcst's RemoveImportsVisitor semantics)."""

    module: str
    obj: str | None = None
    asname: str | None = None


@dataclass
class FileContext:
    """State shared by all rules that run over one file."""

    path: str
    settings: Settings
    suppressions: Suppressions
    star_imports: tuple[str, ...] = ()
    diagnostics: list[Diagnostic] = field(default_factory=list)
    pending_imports: list[ImportRequest] = field(default_factory=list)
    pending_removals: list[ImportRemoval] = field(default_factory=list)
    # Facts one rule leaves for a later one in the chain, keyed by the writer's rule code.
    scratch: dict[str, Any] = field(default_factory=dict)


class Rule(m.MatcherDecoratableTransformer):
    """Base class of every rule. See the module docstring for the contract."""

    CODE: ClassVar[str]
    NAME: ClassVar[str]
    SUMMARY: ClassVar[str]
    FIX_SAFETY: ClassVar[FixSafety]
    TRIGGER: ClassVar[re.Pattern[str]]

    METADATA_DEPENDENCIES = (
        QualifiedNameProvider,
        PositionProvider,
        ScopeProvider,
        ParentNodeProvider,
    )

    def __init__(self, context: FileContext) -> None:
        super().__init__()
        self.context = context

    # -- documentation ---------------------------------------------------------------------------

    @classmethod
    def documentation(cls) -> str:
        """The docstring, dedented: What it does / Why / Example / Use instead / Fix safety."""
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")

    # -- settings --------------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def options(self) -> Mapping[str, Any]:
        """This rule's options from ``[tool.npu-migrate.rules.<CODE>]``."""
        return self.settings.options_for(self.CODE)

    # -- diagnostics -----------------------------------------------------------------------------

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based line and column of ``node`` (a node of the visited tree)."""
        start = self.get_metadata(PositionProvider, node).start
        return start.line, start.column + 1

    def fix(self, node: cst.CSTNode, message: str) -> bool:
        """Record that ``node`` is rewritten; ``False`` means suppressed: leave the node alone."""
        return self._add(node, message, Severity.FIXED)

    def report(self, node: cst.CSTNode, message: str, severity: Severity = Severity.MANUAL) -> None:
        """Record a finding that is not fixed here (``manual`` by default, or ``info``)."""
        if severity is Severity.FIXED or severity is Severity.ERROR:
            raise ValueError("report() is for manual and info diagnostics; use fix()")
        self._add(node, message, severity)

    def _add(self, node: cst.CSTNode, message: str, severity: Severity) -> bool:
        line, column = self.position(node)
        if self.context.suppressions.covers(line, self.CODE):
            return False
        self.context.diagnostics.append(
            Diagnostic(self.context.path, line, column, self.CODE, severity, message)
        )
        return True

    # -- names -----------------------------------------------------------------------------------

    def qualified_name(self, node: cst.BaseExpression) -> str | names.Ambiguous | None:
        """The one qualified name of ``node``, ``Ambiguous``, or ``None`` (nothing imported)."""
        return names.resolve(self, node, self.context.star_imports)

    def qualified_name_in(
        self, node: cst.BaseExpression, wanted: Collection[str]
    ) -> str | names.Ambiguous | None:
        """Like :meth:`qualified_name`, narrowed to ``wanted``: a name in it, ``Ambiguous`` when
        one of the possible origins is in it, else ``None``."""
        return names.resolve_any(self, node, wanted, self.context.star_imports)

    # -- imports ---------------------------------------------------------------------------------

    def add_import(self, module: str, *, after: str | None = None) -> None:
        """Queue ``import module`` (added once, after the first import of ``after`` if given)."""
        request = ImportRequest(module, after)
        if request not in self.context.pending_imports:
            self.context.pending_imports.append(request)

    def remove_import_if_unused(
        self, module: str, obj: str | None = None, asname: str | None = None
    ) -> None:
        """Queue removal of ``import module`` / ``from module import obj as asname`` if unused."""
        removal = ImportRemoval(module, obj, asname)
        if removal not in self.context.pending_removals:
            self.context.pending_removals.append(removal)
