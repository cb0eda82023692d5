"""Tests of device strings: the comparisons, membership and prefix tests, ``match`` cases and
dictionary lookups that compare a value with ``"cuda"``. Not a rule.

A migration that rewrites ``device = "cuda"`` to ``"npu"`` but leaves ``"cuda" in device``
changes the program's control flow: the test is now false on the NPU. NPU303 therefore
rewrites a test together with the values it tests, and this module says which tests there are
and what reaches them:

- :func:`device_tests` finds every test of a value against a CUDA device string
  (``==``/``!=``/``is``, ``"cuda" in d``, ``d in ("cuda", "mps")``, ``d.startswith("cuda")``,
  ``case "cuda":``, ``{"cuda": a, "cpu": b}[d]``), with the tested value taken out of
  ``str(...)``, ``.type``, ``.split(":")[0]``, slices and ``.lower()``;
- :class:`TestJudge` decides, from the origins of the tested value, whether the values it
  tests move to the NPU (:data:`Verdict.MOVES`: rewrite the test), stay CUDA strings or other
  values (leave it), disagree (report) or cannot be seen (report), following parameters into
  the calls of the module and, through the project stage's links, of the run;
- :func:`fused_choice` tells a test that turns on ``fused=True`` for an optimizer
  (nanoGPT's ``use_fused = fused_available and device_type == "cuda"``), which NPU303 leaves.
"""

from __future__ import annotations

import ast
import enum
import os
import re
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from migrator.analysis.index import full_name
from migrator.analysis.origins import LookThrough, Origin, Origins, function_of
from migrator.analysis.project import Facts, Resolved
from migrator.analysis.view import FileView
from migrator.rule import Linking
from migrator.rules.device._common import (
    DEVICE_NAME,
    DEVICE_TYPE_NAME,
    moved_device_literals,
    named_place,
    string_body,
    torch_name,
)

# The CUDA device strings a test compares with: "cuda" and "cuda:N".
TESTED_CUDA = re.compile(r"cuda(:\d+)?")
# Strings the migration already wrote: a value that is one moves with the NPU.
NPU_DEVICE = re.compile(r"npu(:\d+)?")
# The tested value is followed further than a device position's: through `self.attr` and the
# module's own functions, to parameters (which the calls of the run then fill in).
TESTED_VALUES = LookThrough(
    boolean=True, templates=True, parameters=True, attributes=True, local_calls=True
)
# Calls whose value is a device (its type is what a test reads).
DEVICE_CALLS = frozenset(
    {"torch.device", "torch.get_default_device", "torch.accelerator.current_accelerator"}
)
# Methods that keep the device part of a string: `d.lower()`, `d.strip()`.
SAME_TEXT_METHODS = frozenset({"lower", "strip", "casefold"})
SPLITTERS = frozenset({"split", "rsplit", "partition", "rpartition"})
_DEPTH = 3  # parameters followed into calls, and calls into their callers


class Form(enum.Enum):
    """How a test compares its value with the CUDA string."""

    EQUALS = "comparison"
    CONTAINS = "substring test"
    MEMBER = "membership test"
    PREFIX = "prefix test"
    CASE = "match case"
    KEY = "dictionary key"


@dataclass(frozen=True)
class DeviceTest:
    """One test of a value against CUDA device strings.

    ``literals`` are rewritten together (``d in ("cuda", "cuda:0")``); ``subjects`` are the
    values tested (a dictionary keyed by ``"cuda"`` may be looked up in several places);
    ``other_uses`` is set for a dictionary that is also used another way (iterated, passed on),
    whose keys are then not only looked up."""

    literals: tuple[ast.Constant, ...]
    subjects: tuple[ast.expr, ...]
    at: ast.AST
    form: Form
    other_uses: bool = False


def device_tests(view: FileView) -> list[DeviceTest]:
    """The file's tests of device strings, in source order (computed once per file)."""
    return view.memo("device-tests", lambda: list(_device_tests(view)))


def _device_tests(view: FileView) -> Iterator[DeviceTest]:
    seen: set[int] = set()
    for constant in view.index.nodes(ast.Constant):
        value = constant.value
        if not isinstance(value, str) or not value.startswith("cuda") or id(constant) in seen:
            continue
        body = string_body(view, constant)
        if body is None or not TESTED_CUDA.fullmatch(body):
            continue
        test = _test_of(view, constant)
        if test is not None:
            seen.update(id(literal) for literal in test.literals)
            yield test


def is_tested_cuda(view: FileView, node: ast.AST) -> bool:
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        return False
    body = string_body(view, node)
    return body is not None and TESTED_CUDA.fullmatch(body) is not None


def _test_of(view: FileView, literal: ast.Constant) -> DeviceTest | None:
    index = view.index
    parent = index.parent(literal)
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        holder = index.parent(parent)
        if isinstance(holder, ast.Compare):
            return _membership(view, parent, holder)
        if isinstance(holder, ast.Call) and isinstance(parent, ast.Tuple):
            return _prefix(view, parent, holder)
        return None
    if isinstance(parent, ast.Compare):
        return _comparison(literal, parent)
    if isinstance(parent, ast.Call):
        return _prefix(view, literal, parent)
    if isinstance(parent, ast.MatchValue):
        return _case(view, literal, parent)
    if isinstance(parent, ast.Dict) and any(key is literal for key in parent.keys):
        return _keyed(view, parent)
    return None


def _comparison(literal: ast.Constant, compare: ast.Compare) -> DeviceTest | None:
    operands = [compare.left, *compare.comparators]
    position = next(i for i, operand in enumerate(operands) if operand is literal)
    for op_index in (position - 1, position):
        if not 0 <= op_index < len(compare.ops):
            continue
        operator = compare.ops[op_index]
        other = operands[op_index + 1] if op_index == position else operands[op_index]
        if isinstance(operator, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            return DeviceTest((literal,), (unwrapped(other),), compare, Form.EQUALS)
        if isinstance(operator, (ast.In, ast.NotIn)) and op_index == position:
            return DeviceTest((literal,), (unwrapped(other),), compare, Form.CONTAINS)
    return None


def _membership(
    view: FileView, container: ast.Tuple | ast.List | ast.Set, compare: ast.Compare
) -> DeviceTest | None:
    operands = [compare.left, *compare.comparators]
    position = next((i for i, operand in enumerate(operands) if operand is container), 0)
    if position == 0 or not isinstance(compare.ops[position - 1], (ast.In, ast.NotIn)):
        return None
    literals = tuple(e for e in container.elts if is_tested_cuda(view, e))
    subject = unwrapped(operands[position - 1])
    return DeviceTest(literals, (subject,), compare, Form.MEMBER)  # type: ignore[arg-type]


def _prefix(view: FileView, argument: ast.AST, call: ast.Call) -> DeviceTest | None:
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "startswith"):
        return None
    if not call.args or call.args[0] is not argument:
        return None
    if isinstance(argument, ast.Tuple):
        literals = tuple(e for e in argument.elts if is_tested_cuda(view, e))
    else:
        literals = (argument,)
    return DeviceTest(literals, (unwrapped(func.value),), call, Form.PREFIX)  # type: ignore[arg-type]


def _case(view: FileView, literal: ast.Constant, pattern: ast.MatchValue) -> DeviceTest | None:
    """``case "cuda":`` (also inside ``|`` alternatives and ``as`` captures)."""
    node: ast.AST = pattern
    parent = view.index.parent(node)
    while isinstance(parent, (ast.MatchOr, ast.MatchAs)):
        node, parent = parent, view.index.parent(parent)
    if not isinstance(parent, ast.match_case) or parent.pattern is not node:
        return None
    match = view.index.parent(parent)
    if not isinstance(match, ast.Match):
        return None
    return DeviceTest((literal,), (unwrapped(match.subject),), node, Form.CASE)


def _keyed(view: FileView, dictionary: ast.Dict) -> DeviceTest | None:
    """``{"cuda": a, "cpu": b}[d]``, ``.get(d)``, directly or through the one name the
    dictionary is bound to."""
    literals = tuple(k for k in dictionary.keys if k is not None and is_tested_cuda(view, k))
    subjects: list[ast.expr] = []
    other_uses = False
    uses: list[ast.AST] = [dictionary]
    statement = view.index.parent(dictionary)
    if (
        isinstance(statement, ast.Assign)
        and statement.value is dictionary
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
    ):
        uses = list(_reads_of(view, statement.targets[0]))
    for use in uses:
        subject = _looked_up_by(view, use)
        if subject is None:
            other_uses = other_uses or use is not dictionary
        else:
            subjects.append(unwrapped(subject))
    if not subjects:
        return None
    return DeviceTest(literals, tuple(subjects), dictionary, Form.KEY, other_uses)  # type: ignore[arg-type]


def _reads_of(view: FileView, target: ast.Name) -> Iterator[ast.Name]:
    """The reads of the name ``target`` binds (in its scope and the functions nested in it)."""
    for name in view.index.names(target.id):
        if isinstance(name.ctx, ast.Load) and any(
            binding.node is target for binding in view.index.bindings_of(name)
        ):
            yield name


def _looked_up_by(view: FileView, use: ast.AST) -> ast.expr | None:
    parent = view.index.parent(use)
    if isinstance(parent, ast.Subscript) and parent.value is use:
        return parent.slice if not isinstance(parent.slice, ast.Slice) else None
    if isinstance(parent, ast.Attribute) and parent.attr == "get":
        call = view.index.parent(parent)
        if isinstance(call, ast.Call) and call.func is parent and call.args:
            return call.args[0]
    return None


def unwrapped(node: ast.expr) -> ast.expr:
    """The value a test reads the device string of: ``d`` in ``str(d)``, ``d.type``,
    ``d.split(":")[0]``, ``d[:4]``, ``d.lower()``."""
    while True:
        if (
            isinstance(node, ast.Call)
            and full_name(node.func) == "str"
            and len(node.args) == 1
            and not node.keywords
        ):
            node = node.args[0]
        elif _reads_whole(node):
            assert isinstance(node, (ast.Attribute, ast.Subscript))
            node = node.value
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in SPLITTERS
        ):
            node = node.value.func.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (
                (node.func.attr in SAME_TEXT_METHODS and not node.args)
                or node.func.attr in SPLITTERS
            )
        ):
            node = node.func.value
        else:
            return node


def names_a_parameter(parameter: ast.arg) -> bool:
    """A ``device`` / ``device_type`` parameter holds a device (type) by its name."""
    return bool(DEVICE_NAME.fullmatch(parameter.arg) or DEVICE_TYPE_NAME.fullmatch(parameter.arg))


def _reads_whole(node: ast.expr) -> bool:
    """``d.type`` (of a device) and ``d[:4]`` (of a string) test the device string ``d``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "type"
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)


def names_a_device(node: ast.AST) -> bool:
    """``x.device``, ``device``, ``args.device``, ``self.train_device``, ``device_type`` (any
    case): a value the device rules take for a device (type) by its name, as NPU303's
    comparisons do."""
    return named_place(node) is not None


# -- judging a test -------------------------------------------------------------------------------


class Verdict(enum.Enum):
    MOVES = "moves"  # a value it tests moves to the NPU: rewrite the test with it
    STAYS = "stays"  # a CUDA string it tests stays one: leave the test, unless others move
    OTHER = "other"  # a value that is no CUDA device either way ("cpu", None): no say
    CONFLICT = "conflict"  # some values move and some stay CUDA strings: report
    UNKNOWN = "unknown"  # something it tests cannot be seen: report


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    # What could not be seen, or what stays while the rest moves, as messages quote it.
    unseen: tuple[str, ...] = ()
    staying: tuple[str, ...] = ()


def combine(verdicts: list[Judgement]) -> Judgement:
    kinds = {judgement.verdict for judgement in verdicts}
    unseen = tuple(dict.fromkeys(u for j in verdicts for u in j.unseen))
    staying = tuple(dict.fromkeys(s for j in verdicts for s in j.staying))
    if Verdict.CONFLICT in kinds or (Verdict.MOVES in kinds and Verdict.STAYS in kinds):
        return Judgement(Verdict.CONFLICT, unseen, staying)
    if Verdict.MOVES in kinds:
        return Judgement(Verdict.MOVES, unseen, staying)
    if Verdict.UNKNOWN in kinds:
        return Judgement(Verdict.UNKNOWN, unseen, staying)
    if Verdict.STAYS in kinds:
        return Judgement(Verdict.STAYS, unseen, staying)
    return OTHER


MOVES = Judgement(Verdict.MOVES)
OTHER = Judgement(Verdict.OTHER)


class TestJudge:
    """Judges the tests of one file (``linked``: the project stage's verdicts for the
    parameters of this file's functions, by ``"<function>:<parameter>"``)."""

    def __init__(self, view: FileView, linked: Mapping[str, Any] | None = None) -> None:
        self.view = view
        self.index = view.index
        self.moved = moved_device_literals(view)
        self.origins = Origins(view, TESTED_VALUES)
        self.linked = linked or {}

    def judge(self, test: DeviceTest) -> Judgement:
        return combine([self.value(subject) for subject in test.subjects])

    def value(self, node: ast.expr, depth: int = 0) -> Judgement:
        """What the values of ``node`` do in the migration."""
        if names_a_device(node):
            return MOVES
        return combine([self.origin(origin, depth) for origin in self.origins.of(node)])

    def origin(self, origin: Origin, depth: int) -> Judgement:
        view = self.view
        if isinstance(origin, ast.arg):
            if names_a_parameter(origin):
                return MOVES
            return self.parameter(origin, depth)
        if isinstance(origin, (ast.Constant, ast.JoinedStr)):
            if id(origin) in self.moved:
                return MOVES
            if isinstance(origin, ast.JoinedStr):
                return Judgement(Verdict.UNKNOWN, (view.written(origin),))
            body = string_body(view, origin)
            if body is not None and TESTED_CUDA.fullmatch(body):
                return Judgement(Verdict.STAYS, staying=(view.written(origin),))
            if body is not None and NPU_DEVICE.fullmatch(body):
                return MOVES
            return OTHER
        if isinstance(origin, (ast.Name, ast.Attribute)) and names_a_device(origin):
            return MOVES
        if isinstance(origin, ast.Call) and torch_name(view, origin.func) in DEVICE_CALLS:
            return MOVES
        inner = unwrapped(origin) if isinstance(origin, ast.expr) else origin
        if inner is not origin and depth < _DEPTH:
            return self.value(inner, depth + 1)
        return Judgement(Verdict.UNKNOWN, (view.written(origin),))

    # -- parameters ------------------------------------------------------------------------------

    def parameter(self, parameter: ast.arg, depth: int) -> Judgement:
        """The values the calls of the parameter's function pass it: those of this module, else
        those the project stage found in the other modules of the run."""
        function = _function_of_parameter(self.view, parameter)
        shown = f"the parameter `{parameter.arg}`"
        if function is None:
            return Judgement(Verdict.UNKNOWN, (shown,))
        shown = f"the parameter `{parameter.arg}` of `{function.name}()`"
        nobody = f"{shown}, which nothing in this run calls"
        linked = self.linked.get(f"{qualified_function(self.view, function)}:{parameter.arg}")
        found: list[Judgement] = []
        if depth < _DEPTH:
            for call in calls_of(self.view, function):
                passed = passed_value(function, call, parameter)
                if passed is None:
                    found.append(Judgement(Verdict.UNKNOWN, (shown,)))
                elif isinstance(passed, ast.expr):
                    found.append(self.value(passed, depth + 1))
                elif (default := default_of(function, parameter)) is not None:
                    found.append(self.value(default, depth + 1))
        if isinstance(linked, Mapping):
            found.append(_linked_judgement(linked, shown))
        if not found:
            return Judgement(Verdict.UNKNOWN, (nobody,))
        return combine(found)


def _linked_judgement(linked: Mapping[str, Any], shown: str) -> Judgement:
    verdict = Verdict(linked.get("verdict", "unknown"))
    if verdict is Verdict.UNKNOWN:
        where = ", ".join(linked.get("calls", []))
        return Judgement(verdict, (f"{shown}, called at {where}" if where else shown,))
    return Judgement(verdict, staying=tuple(linked.get("staying", [])))


# -- functions, their calls and their parameters --------------------------------------------------

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _function_of_parameter(
    view: FileView, parameter: ast.arg
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    arguments = view.index.parent(parameter)
    function = view.index.parent(arguments) if arguments is not None else None
    if not isinstance(arguments, ast.arguments) or not isinstance(function, _FUNCTIONS):
        return None
    if parameter is arguments.vararg or parameter is arguments.kwarg:
        return None
    return function


def qualified_function(view: FileView, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``GPT.configure_optimizers`` / ``train``: the function's name in its module."""
    parts = [function.name]
    for ancestor in view.index.ancestors(function):
        if isinstance(ancestor, ast.ClassDef):
            parts.append(ancestor.name)
        elif isinstance(ancestor, _FUNCTIONS):
            parts.append(f"{ancestor.name}.<locals>")
    return ".".join(reversed(parts))


def is_method(view: FileView, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    owner = view.index.parent(function)
    if not isinstance(owner, ast.ClassDef):
        return False
    decorators = {full_name(decorator) for decorator in function.decorator_list}
    return "staticmethod" not in decorators


def calls_of(
    view: FileView, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> Iterator[ast.Call]:
    """The calls of ``function`` in its module: ``f(...)`` through a name bound to it, and for
    a method ``<anything>.f(...)`` (any receiver: the module's methods so named are taken
    together)."""
    method = isinstance(view.index.parent(function), ast.ClassDef)
    for call in view.index.nodes(ast.Call):
        func = call.func
        if method:
            if isinstance(func, ast.Attribute) and func.attr == function.name:
                yield call
        elif (
            isinstance(func, ast.Name)
            and func.id == function.name
            and any(binding.node is function for binding in view.index.bindings_of(func))
        ):
            yield call


def passed_value(
    function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, parameter: ast.arg
) -> ast.expr | ast.arg | None:
    """What ``call`` passes as ``parameter``: an argument, the parameter itself when the call
    leaves it to its default, None when it cannot be told (``*args``, ``**kwargs``)."""
    arguments = function.args
    plain = [*arguments.posonlyargs, *arguments.args]
    offset = 1 if isinstance(call.func, ast.Attribute) and plain and _bound(function) else 0
    for given in call.keywords:
        if given.arg is None:
            return None
        if given.arg == parameter.arg:
            return given.value
    for position, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            return None
        slot = position + offset
        if slot < len(plain) and plain[slot] is parameter:
            return value
    return parameter


def _bound(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method called through an instance receives it as its first parameter."""
    decorators = {full_name(decorator) for decorator in function.decorator_list}
    return "staticmethod" not in decorators


def default_of(
    function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: ast.arg
) -> ast.expr | None:
    arguments = function.args
    plain = [*arguments.posonlyargs, *arguments.args]
    defaulted = plain[len(plain) - len(arguments.defaults) :]
    defaults = dict(zip(defaulted, arguments.defaults, strict=True))
    for keyword_only, value in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        if value is not None:
            defaults[keyword_only] = value
    return defaults.get(parameter)


# -- fused optimizers -----------------------------------------------------------------------------

FUSED = "fused"


def fused_choice(
    view: FileView, test: DeviceTest, dropped: Container[int] = frozenset()
) -> ast.AST | None:
    """The ``fused=`` argument (or ``"fused"`` key) whose value the test decides: in the
    test's own statement, or where a name the statement assigns is read (two names deep),
    in the same function. Those in ``dropped`` (ids: NPU101 removes them) do not count."""
    statement = view.index.statement_of(test.at)
    if statement is None:
        return None
    pending: list[ast.stmt] = [statement]
    names: set[str] = set()
    for _ in range(3):
        following: list[ast.stmt] = []
        for current in pending:
            found = _fused_in(current, dropped)
            if found is not None:
                return found
            for target in _assigned_names(current):
                if target in names:
                    continue
                names.add(target)
                following.extend(_statements_reading(view, current, target))
        pending = following
        if not pending:
            return None
    return None


def _fused_in(statement: ast.stmt, dropped: Container[int]) -> ast.AST | None:
    for node in ast.walk(statement):
        if isinstance(node, ast.keyword) and node.arg == FUSED and id(node) not in dropped:
            return node
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and key.value == FUSED and id(key) not in dropped:
                    return key
    return None


def _assigned_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.Assign):
        return [t.id for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) and isinstance(
        statement.target, ast.Name
    ):
        return [statement.target.id]
    return []


def _statements_reading(view: FileView, statement: ast.stmt, name: str) -> Iterator[ast.stmt]:
    function = function_of(view.index, statement)
    for read in view.index.names(name):
        if isinstance(read.ctx, ast.Load) and function_of(view.index, read) is function:
            found = view.index.statement_of(read)
            if found is not None and found is not statement:
                yield found


# -- across the modules of a run (the project stage) ----------------------------------------------

# Text a file must hold to have a test of a device string on a value that is not named as a
# device (those move by their name, with no call to follow): "cuda" compared with, or tested
# against, something; the tested operand is captured when the text shows it.
TEST_SHAPE = re.compile(
    rb"""(?P<left>[\w.\])]*)\s*(?:==|!=|\bis(?:\s+not)?)\s*[(\[{]?\s*["']cuda(?::\d+)?["']"""
    rb"""|["']cuda(?::\d+)?["']\s*(?:==|!=|\bis\b(?:\s+not)?|(?:\bnot\s+)?\bin\b)\s*"""
    rb"""(?P<right>[\w.]*)"""
    rb"""|(?P<member>[\w.\])]*)\s+(?:not\s+)?in\s*[(\[{]\s*["']cuda"""
    rb"""|startswith\(\s*[(\[]?\s*["']cuda|\bcase\s+["']cuda"""
)
NAMED_DEVICE = re.compile(rb"(?:\w*_)?device(?:_type)?|type", re.IGNORECASE)
# Every match of TEST_SHAPE holds a quoted "cuda", and what comes before its first one is made
# of these bytes only: a match starts in the run of them that ends at such a quote.
_QUOTED_CUDA = re.compile(rb"""["']cuda""")
_BEFORE_QUOTE = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.])=!([{ \t\n\r\f\v"
)


def shapes_of(source: bytes) -> Iterator[re.Match[bytes]]:
    """``TEST_SHAPE.finditer(source)``, trying only the starts that can match: each search
    position costs a scan of the identifier there, which over a whole file of code is
    quadratic in the length of its dotted names (10 of 35 CPU-s on torch's sources)."""
    resume = 0  # where finditer would look next
    for quote in _QUOTED_CUDA.finditer(source):
        position = quote.start()
        while position > resume and source[position - 1] in _BEFORE_QUOTE:
            position -= 1
        position = max(position, resume)
        while position <= quote.start():
            match = TEST_SHAPE.match(source, position)
            if match is None:
                position += 1
            else:
                yield match
                position = match.end()
        resume = max(resume, position)


def wants_summary(source: bytes) -> bool:
    for match in shapes_of(source):
        operand = match.group("left") or match.group("right") or match.group("member") or b""
        last = re.split(rb"\W+", operand.strip(b".()[]"))[-1] if operand else b""
        if not last or not NAMED_DEVICE.fullmatch(last):
            return True
    return False


def summarize(view: FileView) -> dict[str, Any] | None:
    """The parameters whose values the file's tests of device strings read, by the function
    that has them: the link stage looks for the calls of those functions in the other modules
    of the run."""
    origins = Origins(view, TESTED_VALUES)
    found: dict[str, dict[str, Any]] = {}
    for test in device_tests(view):
        for subject in test.subjects:
            for origin in origins.of(subject):
                if not isinstance(origin, ast.arg) or names_a_parameter(origin):
                    continue
                function = _function_of_parameter(view, origin)
                if function is None:
                    continue
                qualified = qualified_function(view, function)
                found.setdefault(
                    f"{qualified}:{origin.arg}",
                    {"function": qualified, "name": function.name, "parameter": origin.arg},
                )
    return {"parameters": list(found.values())} if found else None


def link(linking: Linking, key: str) -> dict[str, Facts] | None:
    """For the parameters the summaries name, what the calls of their functions in the other
    modules of the run pass them: ``{"parameters": {"<function>:<parameter>": {"verdict",
    "calls", "staying"}}}`` by the path of the function's module (the calls of a function in
    its own module are that module's check's)."""
    facts: dict[str, dict[str, dict[str, Any]]] = {}
    views: dict[str, FileView | None] = {}
    judges: dict[str, TestJudge] = {}

    def view_of(path: str) -> FileView | None:
        if path not in views:
            index = linking.files.index(path)
            views[path] = None if index is None else FileView(index)
        return views[path]

    def judge_of(path: str, view: FileView) -> TestJudge:
        if path not in judges:
            judges[path] = TestJudge(view)
        return judges[path]

    for path, summary in linking.project.summaries(key).items():
        definer = view_of(path)
        if definer is None:
            continue
        for entry in summary.get("parameters", []):
            function = _function_named(definer, entry["function"])
            if function is None:
                continue
            parameter = next(
                (p for p in _parameters(function) if p.arg == entry["parameter"]), None
            )
            if parameter is None:
                continue
            found: list[Judgement] = []
            calls: list[str] = []
            method = isinstance(definer.index.parent(function), ast.ClassDef)
            for caller in linking.files.containing([entry["name"]])[entry["name"]]:
                caller_view = view_of(caller) if caller != path else None
                if caller_view is None:
                    continue
                for call in _calls_from(linking, caller_view, caller, path, function, method):
                    calls.append(f"{os.path.normpath(caller)}:{call.lineno}")
                    passed = passed_value(function, call, parameter)
                    if passed is None:
                        found.append(Judgement(Verdict.UNKNOWN))
                    elif isinstance(passed, ast.expr):
                        found.append(judge_of(caller, caller_view).value(passed, depth=1))
                    elif (default := default_of(function, parameter)) is not None:
                        found.append(judge_of(path, definer).value(default, depth=1))
            if not calls:
                continue
            judgement = combine(found)
            parameters = facts.setdefault(path, {}).setdefault("parameters", {})
            parameters[f"{entry['function']}:{entry['parameter']}"] = {
                "verdict": judgement.verdict.value,
                "calls": calls,
                "staying": list(judgement.staying),
            }
    return dict(facts) or None


def _function_named(
    view: FileView, qualified: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = [*view.index.nodes(ast.FunctionDef)]
    functions += view.index.nodes(ast.AsyncFunctionDef)
    for function in functions:
        if qualified_function(view, function) == qualified:
            return function
    return None


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    arguments = function.args
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]


def _calls_from(
    linking: Linking,
    view: FileView,
    caller: str,
    definer: str,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    method: bool,
) -> Iterator[ast.Call]:
    """The calls of ``function`` (defined in the file ``definer``) in the file ``caller``: a
    function by its qualified name; a method by its name, in a file that imports the module
    that defines it."""
    if method and not _imports(linking, view, caller, definer):
        return
    for call in view.index.nodes(ast.Call):
        func = call.func
        if method:
            if isinstance(func, ast.Attribute) and func.attr == function.name:
                yield call
            continue
        if not isinstance(func, (ast.Name, ast.Attribute)) or _last(func) != function.name:
            continue
        name = view.qualified_name(func)
        if not isinstance(name, str):
            continue
        resolved = linking.files.resolve(name, caller)
        if (
            isinstance(resolved, Resolved)
            and resolved.module.path == definer
            and resolved.rest == (function.name,)
        ):
            yield call


def _last(func: ast.Name | ast.Attribute) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr


def _imports(linking: Linking, view: FileView, caller: str, definer: str) -> bool:
    """Whether the file ``caller`` imports the module of the file ``definer`` (or a name of it)."""
    for statement in view.index.imports():
        names: list[str] = []
        if isinstance(statement, ast.ImportFrom):
            module = "." * statement.level + (statement.module or "")
            names = [module, *(f"{module}.{alias.name}" for alias in statement.names)]
        else:
            names = [alias.name for alias in statement.names]
        for name in names:
            resolved = linking.files.resolve(name, caller)
            if isinstance(resolved, Resolved) and resolved.module.path == definer:
                return True
    return False
