"""The rule interface: one class per rule, one rule per module, in a family package of ``rules/``.

A rule has a declarative header and one method, :meth:`Rule.check`, that examines the file's
Python ``ast`` through a shared :class:`~migrator.analysis.index.ModuleIndex` and records findings::

    class CudaMethod(Rule):
        '''
        ## What it does
        ...   (also: ## Why, ## Example, ## Use instead, ## Fix safety)
        '''

        CODE = "NPU301"
        NAME = "cuda-method"
        SUMMARY = "`.cuda(...)` method call"
        FIX_SAFETY = FixSafety.SAFE
        TRIGGER = ("cuda",)

        def check(self) -> None:
            for attribute in self.index.attributes("cuda"):   # a lookup, not a walk
                call = self.index.parent(attribute)
                if isinstance(call, ast.Call) and call.func is attribute:
                    if self.fix(self.attr_position(attribute), "`.cuda(...)` -> `.npu(...)`",
                                self.replace(attribute, cst.Attribute, to_npu)):
                        self.add_import("torch_npu", after="torch")

What a rule costs is visible in what it uses:

- ``TRIGGER`` is a tuple of strings searched for, as plain substrings, in the text of every
  file. A file that contains none of the selected rules' strings is never parsed at all, so
  every file the rule could report on or edit must contain one of them (a necessary condition,
  not a sufficient one). Substring search, not a regular expression: it runs over every byte of
  the tree, and ``"cuda" in text`` is some twenty times cheaper than ``re.search(r"\\bcuda\\b")``.
- ``check`` runs on ``ast`` for every file that passes the triggers, in every mode. It should
  ask the index for the few nodes it is about (``index.attributes("cuda")``,
  ``index.names("SGD")``, ``index.nodes(ast.Call)``, :meth:`Rule.calls_to`) rather than walk
  the tree, and resolve names only for those.
- Edits passed to :meth:`fix` are functions over libcst nodes (:mod:`migrator.edits`). They
  run only when the file is rewritten (never in ``--check`` mode), on concrete nodes that
  libcst parsed from the slices of the file that change (:mod:`migrator.slices`), shared by
  all rules; they get the concrete node with everything inside it already edited and return
  its replacement, built from that node, never from the original text. They need no libcst
  metadata: positions come from ``ast``.
- Plans: a rule that builds on another one's decisions reads its *plan*, a typed value the
  other rule publishes (``self.publish(FusedPlans(...))`` in ``check``) or gives for the whole
  run (``run_plans(settings)``). ``PROVIDES`` / ``RUN_PLANS`` declare what a rule publishes,
  ``READS`` what it reads (``self.read_plan(FusedPlans)``: None when the provider does not run); the
  engine runs every provider before its readers (:func:`chain_order`), in code order otherwise.
  NPU102 adds ``combine_grad=True`` for optimizers that NPU101 *will* make NpuFused; both edits
  land in the same pass.

Inside ``check``:

- ``self.fix(at, message, *edits)`` records a ``fixed`` diagnostic with its edits and returns
  ``True``; it returns ``False`` when a suppression comment covers that line: nothing is
  recorded, and the rule must then not count on the fix.
- ``self.report(at, message)`` records a ``manual`` (or ``info``) diagnostic.
- ``at`` is an ``ast`` node (its start) or a :class:`Location` (``self.attr_position(...)``).
- ``self.qualified_name(node)`` / ``self.qualified_name_in(node, names)`` give the node's
  qualified name through :mod:`migrator.analysis.names`, ``Ambiguous`` when it has more than
  one origin.
- ``self.add_import("apex")`` and ``self.remove_import_if_unused(...)`` queue import edits that
  the engine applies after the node edits, through :mod:`migrator.imports`.
"""

from __future__ import annotations

import ast
import enum
import inspect
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from migrator.analysis import names
from migrator.analysis.index import ModuleIndex
from migrator.analysis.project import Facts, Module, ProjectFacts, ProjectFiles
from migrator.analysis.view import FileView, Location
from migrator.diagnostics import Diagnostic, Severity
from migrator.edits import (
    BlockEdit,
    Change,
    Edit,
    ImportRemoval,
    ImportRequest,
    NodeEdit,
    statement_kind,
)
from migrator.lazy_imports import cst
from migrator.settings import Settings
from migrator.source import Source
from migrator.suppressions import Suppressions

DOC_SECTIONS = ("What it does", "Why", "Example", "Use instead", "Fix safety")

PlanT = TypeVar("PlanT")


class FixSafety(enum.StrEnum):
    """Whether a rule's edits may be applied without review (ruff's vocabulary)."""

    SAFE = "safe"
    UNSAFE = "unsafe"  # applied only with --unsafe-fixes; reported otherwise
    NONE = "none"  # report-only rule


@dataclass(frozen=True)
class Linking:
    """What a rule's :meth:`Rule.link` works with."""

    project: ProjectFacts  # every rule's summaries (no links yet)
    files: ProjectFiles
    settings: Settings
    plans: Mapping[type, object]  # the run plans of the rules that run (Rule.run_plans)


@dataclass
class FileContext:
    """State shared by all rules that run over one file."""

    path: str
    settings: Settings
    suppressions: Suppressions
    view: FileView
    diagnostics: list[Diagnostic] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    imports: list[ImportRequest] = field(default_factory=list)
    removals: list[ImportRemoval] = field(default_factory=list)
    # The plans of this run and file, by type: the run plans, then what rules publish.
    plans: dict[type, object] = field(default_factory=dict)
    released: bool = False  # see release()
    _text: str = ""

    @property
    def index(self) -> ModuleIndex:
        return self.view.index

    @property
    def fast(self) -> bool:
        """False in the soundness test: candidate filters (calls_to) return every candidate."""
        return self.view.fast

    @property
    def source(self) -> Source:
        return self.index.source

    @property
    def source_text(self) -> str:
        """The file's text; still there after :meth:`release`."""
        return self._text if self.released else self.index.source.text

    def release(self) -> None:
        """Let go of the file's tree, index and edits (their cycles would otherwise wait for
        the cyclic garbage collector, which is paused while a file is processed)."""
        if self.released:
            return
        self._text = self.index.source.text
        self.edits.clear()
        self.imports.clear()
        self.removals.clear()
        self.plans.clear()
        self.view.release()
        self.index.release()
        self.released = True


class Rule:
    """Base class of every rule. See the module docstring for the contract."""

    CODE: ClassVar[str]
    NAME: ClassVar[str]
    SUMMARY: ClassVar[str]
    FIX_SAFETY: ClassVar[FixSafety]
    TRIGGER: ClassVar[tuple[str, ...]]
    # Plans (typed values, see the module docstring): what check() publishes for the file,
    # what run_plans() gives for the whole run, and what check() reads of other rules'.
    PROVIDES: ClassVar[tuple[type, ...]] = ()
    RUN_PLANS: ClassVar[tuple[type, ...]] = ()
    READS: ClassVar[tuple[type, ...]] = ()
    # An opt-in rule runs only when a --select (or config `select`) entry names its full code:
    # a prefix such as "NPU1", or no selection at all, leaves it out (see registry.select_rules).
    OPT_IN: ClassVar[bool] = False
    # Cross-file facts (migrator.analysis.project): Python files containing one of these strings are
    # summarised by summarize(), native sources containing one by summarize_native(), before
    # any file is checked. Most rules need neither.
    PROJECT_TRIGGER: ClassVar[tuple[str, ...]] = ()
    NATIVE_TRIGGER: ClassVar[tuple[str, ...]] = ()
    # Rules that share one cross-file analysis give the same key (NPU101 and NPU102: "NPU1"):
    # each file is summarised, and the summaries linked, once per key. Empty: the rule's CODE.
    PROJECT_KEY: ClassVar[str] = ""
    # msFmkTransplt's review sheets (--format csv): findings of a rule that sets this are rows
    # of `unsupported_api.csv` (APIs the NPU lacks); fixes of every rule are `change_list.csv`.
    UNSUPPORTED_API_SHEET: ClassVar[bool] = False

    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.view = context.view
        self.index = context.index
        self.source = context.index.source

    @classmethod
    def triggers(cls, settings: Settings) -> tuple[str, ...]:
        """The strings a file must contain for the rule to run on it: ``TRIGGER``, unless they
        depend on the run (a rule about the names that other files define derives them from
        ``settings.project``). An override may read only ``settings.project``, and must give
        ``triggers(Settings())`` when the run has no project facts: that is what the registry's
        manifest records, and a run without facts never imports the rule to ask."""
        return cls.TRIGGER

    @classmethod
    def triggered_by(cls, text: str, settings: Settings | None = None) -> bool:
        """Whether ``text`` mentions one of the rule's trigger strings."""
        return any(word in text for word in cls.triggers(settings or Settings()))

    def check(self) -> None:
        """Examine the file and record findings (see the module docstring)."""
        raise NotImplementedError

    @classmethod
    def scan_shell_line(cls, code: str, path: str, number: int) -> Iterator[Diagnostic]:
        """What this rule reports on one line of a shell launch script (``--include-shell``;
        ``code`` is the line without its comment). Shell scripts are never rewritten: these
        are ``manual`` or ``info`` findings under the rule's code. Most rules have none."""
        return iter(())

    @classmethod
    def run_plans(cls, settings: Settings) -> tuple[object, ...]:
        """The plans this rule gives for the whole run (one of each ``RUN_PLANS`` type at
        most), known from the settings before any file is read."""
        return ()

    # -- plans -----------------------------------------------------------------------------------

    def publish(self, plan: object) -> None:
        """Leave ``plan`` for the rules that read its type (declared in ``PROVIDES``)."""
        if type(plan) not in self.PROVIDES:
            raise TypeError(f"{self.CODE} publishes a {type(plan).__name__} not in PROVIDES")
        self.context.plans[type(plan)] = plan

    def read_plan(self, kind: type[PlanT]) -> PlanT | None:
        """The plan of type ``kind`` (declared in ``READS``) for this file, or None when no
        rule of the run provides it."""
        if kind not in self.READS:
            raise TypeError(f"{self.CODE} reads a {kind.__name__} not in READS")
        found = self.context.plans.get(kind)
        return found if isinstance(found, kind) else None

    @classmethod
    def summarize(cls, index: ModuleIndex, module: Module) -> Facts | None:
        """What other files' checks need to know about this Python file (JSON values), or
        None. Called before any check, for files that contain a ``PROJECT_TRIGGER`` string."""
        return None

    @classmethod
    def summarize_native(cls, text: str, path: str) -> Facts | None:
        """The same for a C, C++ or CUDA source containing a ``NATIVE_TRIGGER`` string."""
        return None

    @classmethod
    def project_key(cls) -> str:
        """Where the rule's project facts are kept (``PROJECT_KEY``, else ``CODE``)."""
        return cls.PROJECT_KEY or cls.CODE

    @classmethod
    def wants_summary(cls, source: bytes) -> bool:
        """The text test a Python file must pass to be parsed and summarised: by default, it
        contains a ``PROJECT_TRIGGER`` string. A rule may require more (all of several words)
        to parse fewer files; every file it could summarise must still pass."""
        return any(word.encode() in source for word in cls.PROJECT_TRIGGER)

    @classmethod
    def link(cls, linking: Linking) -> Mapping[str, Facts] | None:
        """Facts by path that follow what the summaries name into other files of the run
        (:class:`~migrator.analysis.project.ProjectFiles` resolves names and parses files on
        demand);
        called once per key after every file is summarised, kept in ``project.links(key)``."""
        return None

    @property
    def project(self) -> ProjectFacts:
        """Every rule's facts about the files of the run (:mod:`migrator.analysis.project`)."""
        return self.context.settings.project

    # -- documentation ---------------------------------------------------------------------------

    @classmethod
    def documentation(cls) -> str:
        """The docstring, dedented: What it does / Why / Example / Use instead / Fix safety;
        for an opt-in rule, preceded by a line that says how to turn it on."""
        text = inspect.cleandoc(cls.__doc__ or "")
        if cls.OPT_IN:
            text = (
                f"Opt-in: runs only when selected by its full code (`--select {cls.CODE}`, or "
                f'"{cls.CODE}" in `select` of [tool.npu-migrate]).\n\n{text}'
            )
        return text

    # -- settings --------------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` (its message is shown to the user) for options of
        ``[tool.npu-migrate.rules.<CODE>]`` the rule cannot use; called when the configuration
        is read. The default accepts any table."""

    @property
    def options(self) -> Mapping[str, Any]:
        """This rule's options from ``[tool.npu-migrate.rules.<CODE>]``."""
        return self.settings.options_for(self.CODE)

    # -- positions (the file view's) -------------------------------------------------------------

    def position(self, at: ast.AST | Location) -> Location:
        """1-based line and column of ``at`` (an ``ast`` node's start)."""
        return self.view.position(at)

    def line(self, node: ast.AST) -> int:
        return self.view.line(node)

    def attr_position(self, node: ast.Attribute) -> Location:
        """Where the attribute name of ``x.attr`` starts."""
        return self.view.attr_position(node)

    def code(self, node: ast.AST) -> str:
        """The code of ``node`` as written."""
        return self.view.code(node)

    # -- diagnostics -----------------------------------------------------------------------------

    def suppressed(self, at: ast.AST | Location) -> bool:
        return self.context.suppressions.covers(self.position(at).line, self.CODE)

    def fix(self, at: ast.AST | Location, message: str, *edits: Edit) -> bool:
        """Record that ``at`` is rewritten by ``edits``; ``False`` means suppressed."""
        if not self._add(at, message, Severity.FIXED):
            return False
        self.context.edits.extend(edits)
        return True

    def report(
        self, at: ast.AST | Location, message: str, severity: Severity = Severity.MANUAL
    ) -> None:
        """Record a finding that is not fixed here (``manual`` by default, or ``info``)."""
        if severity is Severity.FIXED or severity is Severity.ERROR:
            raise ValueError("report() is for manual and info diagnostics; use fix()")
        self._add(at, message, severity)

    def _add(self, at: ast.AST | Location, message: str, severity: Severity) -> bool:
        line, column = self.position(at)
        if self.context.suppressions.covers(line, self.CODE):
            return False
        self.context.diagnostics.append(
            Diagnostic(self.context.path, line, column, self.CODE, severity, message)
        )
        return True

    # -- edits -----------------------------------------------------------------------------------

    def replace(self, node: ast.AST, kind: type[cst.CSTNode], change: Change) -> NodeEdit:
        """An edit of the concrete ``kind`` node that spans what ``node`` spans."""
        return NodeEdit(kind, self.source.span(node), change)

    def replace_statement(self, statement: ast.stmt, change: Change) -> NodeEdit:
        """An edit of the concrete statement line (or compound statement) of ``statement``."""
        kind = statement_kind(statement)
        first = self.index.line_head(statement) if kind is cst.SimpleStatementLine else statement
        return NodeEdit(kind, self.source.span(first), change)

    def rebuild_block(
        self, lines: list[list[ast.stmt]], rebuild: Callable[[Any], list[cst.BaseStatement]]
    ) -> BlockEdit:
        """An edit of a run of consecutive statement lines of one block (from
        ``index.lines(body)``): ``rebuild`` gets them as the other edits left them and returns
        what takes their place."""
        keys = tuple((statement_kind(line[0]), self.source.start(line[0])) for line in lines)
        return BlockEdit(keys, rebuild)

    # -- names (the file view's) -----------------------------------------------------------------

    def qualified_name(self, node: ast.AST) -> str | names.Ambiguous | None:
        """The one qualified name of ``node``, ``Ambiguous``, or ``None`` (nothing imported)."""
        return self.view.qualified_name(node)

    def qualified_name_in(
        self, node: ast.AST, wanted: Collection[str]
    ) -> str | names.Ambiguous | None:
        """:meth:`qualified_name`, narrowed to ``wanted`` (:meth:`FileView.qualified_name_in`)."""
        return self.view.qualified_name_in(node, wanted)

    def may_name(self, node: ast.AST, roots: Collection[str]) -> bool:
        """Could ``node`` resolve to a name under ``roots``? (:meth:`FileView.may_name`)"""
        return self.view.may_name(node, roots)

    def calls_to(self, roots: Collection[str]) -> Iterator[ast.Call]:
        """The calls whose callee may resolve to a name under ``roots``, in source order."""
        return self.view.calls_to(roots)

    # -- imports ---------------------------------------------------------------------------------

    def add_import(
        self,
        module: str,
        *,
        after: str | None = None,
        name: str | None = None,
        optional: bool = False,
    ) -> None:
        """Queue ``import module`` (added once, after the first import of ``after`` if given);
        with ``name``, ``from module import name``; ``optional``: see ``ImportRequest``."""
        request = ImportRequest(module, after, name, optional)
        if request not in self.context.imports:
            self.context.imports.append(request)

    def remove_import_if_unused(
        self, module: str, obj: str | None = None, asname: str | None = None
    ) -> None:
        """Queue removal of ``import module`` / ``from module import obj as asname`` if unused."""
        removal = ImportRemoval(module, obj, asname)
        if removal not in self.context.removals:
            self.context.removals.append(removal)


def chain_order(rules: Sequence[type[Rule]]) -> tuple[type[Rule], ...]:
    """``rules`` in the order their checks run: every rule after the rules that publish a plan
    it reads (``PROVIDES`` / ``READS``), in code order otherwise. A cycle is a programming error.
    """
    return plan_order(rules, lambda rule: (rule.CODE, rule.PROVIDES, rule.READS))


ItemT = TypeVar("ItemT")


def plan_order(
    items: Sequence[ItemT], header: Callable[[ItemT], tuple[str, Collection[Any], Collection[Any]]]
) -> tuple[ItemT, ...]:
    """:func:`chain_order` of anything that describes a rule: ``header`` gives its code, the
    plans it provides and those it reads (types, or their names in the registry's manifest)."""
    headers = {id(item): header(item) for item in items}
    pending = sorted(items, key=lambda item: headers[id(item)][0])
    ordered: list[ItemT] = []
    while pending:
        for item in pending:
            reads = set(headers[id(item)][2])
            waiting = [
                other
                for other in pending
                if other is not item and set(headers[id(other)][1]) & reads
            ]
            if not waiting:
                ordered.append(item)
                pending.remove(item)
                break
        else:
            codes = ", ".join(headers[id(item)][0] for item in pending)
            raise RuntimeError(f"the plans of {codes} depend on each other in a cycle")
    return tuple(ordered)


def run_plans(rules: Sequence[type[Rule]], settings: Settings) -> dict[type, object]:
    """The run plans of ``rules`` by type."""
    found: dict[type, object] = {}
    for rule in rules:
        for plan in rule.run_plans(settings):
            if type(plan) not in rule.RUN_PLANS:
                raise TypeError(f"{rule.CODE} gives a {type(plan).__name__} not in RUN_PLANS")
            found[type(plan)] = plan
    return found
