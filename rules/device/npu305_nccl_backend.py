"""NPU305: the `"nccl"` distributed backend, and `is_nccl_available()`."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator

from migrator.analysis.calls import argument, keyword
from migrator.analysis.index import full_name
from migrator.analysis.names import Ambiguous
from migrator.diagnostics import Diagnostic
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import (
    BACKEND_NAME,
    TORCH_ROOTS,
    add_device_import,
    expression,
    last_name,
    names_match,
    option_values,
    parameter_defaults,
    shell_finding,
    simple_string,
    string_body,
    torch_name,
    values_reaching,
)
from migrator.rules.device._target import DeviceTarget, NoCounterpart, device_target

# The process-group constructors that take a backend, with the backend's position.
_GROUP_CONSTRUCTORS = {
    "init_process_group": 0,
    "new_group": 2,
    "new_subgroups": 3,
    "new_subgroups_by_enumeration": 2,
    "split_group": 5,
}
BACKEND_POSITIONS = {
    f"{module}.{name}": position
    for module in ("torch.distributed", "torch.distributed.distributed_c10d")
    for name, position in _GROUP_CONSTRUCTORS.items()
}
LITERAL_TYPES = {"typing.Literal", "typing_extensions.Literal"}
GET_BACKEND = "torch.distributed.get_backend"
IS_NCCL_AVAILABLE = "torch.distributed.is_nccl_available"
BACKEND_NCCL = "torch.distributed.Backend.NCCL"
# Keyword arguments and dict keys whose name says they hold the distributed backend, in any
# call or dict: tacotron2's `HParams(dist_backend="nccl")`, `SimpleNamespace(dist_backend=...)`,
# Hugging Face's `TrainingArguments(ddp_backend=...)`, Lightning's
# `DDPStrategy(process_group_backend=...)`. A bare `backend=` of a call npu-migrate does not
# know could be any library's (Ray's collectives take `backend="nccl"` too): reported.
DIST_BACKEND_KEY = re.compile(r"(.*_)?(dist|distributed|ddp|process_group)_backend", re.IGNORECASE)
# The distributed settings of mmcv / mmengine configs: `dist_params = dict(backend="nccl")`
# (mmcv, passed as `init_dist(launcher, **cfg.dist_params)`), `env_cfg = dict(dist_cfg=dict(
# backend="nccl"))` (mmengine); their `backend` entry is the process group's backend.
DIST_SETTINGS_NAME = re.compile(r"(.*_)?dist(ributed)?_(params|cfg|config|kwargs)", re.IGNORECASE)
BACKEND_KEY = "backend"
# Third-party initialisers whose `backend` (second parameter) goes to `init_process_group`:
# mmcv 1.x's and mmengine's `init_dist(launcher, backend="nccl", **kwargs)`.
BACKEND_TAKERS = {
    "mmcv.runner.init_dist",
    "mmcv.runner.dist_utils.init_dist",
    "mmengine.dist.init_dist",
    "mmengine.dist.utils.init_dist",
}
BACKEND_TAKER_ROOTS = frozenset({"mmcv", "mmengine"})
# "cpu:gloo,cuda:nccl": one backend per device type
PER_DEVICE_BACKENDS = re.compile(r"(\w+:\w+,)*\w+:\w+")


# `--dist-backend nccl` style options in a shell script.
SHELL_BACKEND_OPTION = re.compile(r"(--[\w-]*backend)(?:=|\s+)[\"']?(nccl)\b")


class NcclBackend(Rule):
    """
    ## What it does
    Rewrites the `"nccl"` backend to `"hccl"` where it names a backend: the `backend` of
    `torch.distributed.init_process_group(...)` (positional, keyword, or the `"backend"` entry of
    a dict unpacked with `**`) and of `new_group`, `new_subgroups`,
    `new_subgroups_by_enumeration` and `split_group`, assignments to a `*backend` variable or
    attribute (annotated too, with the values of a `Literal[...]` annotation), `*backend`
    parameter defaults, the default of an `--*backend` command-line option or absl flag, and
    comparisons with those or with `dist.get_backend()`. Values are followed through
    `a if cond else b` and names assigned in the same scope. Only the backend names count:
    `"ncclep"` compared with a `*backend` setting is not a backend. `"cuda:nccl"` inside a
    per-device backend string (`"cpu:gloo,cuda:nccl"`) becomes `"npu:hccl"`.

    Where the backend travels under a name before it reaches the process group, it is rewritten
    when the name says what it is: a keyword argument or dict key named `dist_backend`,
    `distributed_backend`, `ddp_backend` or `process_group_backend` in any call or dict
    (`HParams(dist_backend="nccl")`, `SimpleNamespace(...)`, `TrainingArguments(ddp_backend=...)`,
    `DDPStrategy(process_group_backend=...)`), the `backend` entry of an mmcv / mmengine
    distributed-settings dict (`dist_params = dict(backend="nccl")`, `dist_cfg=dict(...)`), the
    backend of mmcv's and mmengine's `init_dist(launcher, backend)`, and `backend=` of a call of
    a function of the same module with a `backend` parameter. `backend="nccl"` passed to any
    other function is reported. A file that does not import torch (a config) gets no
    `import torch_npu`.

    `torch.distributed.is_nccl_available()` becomes `is_hccl_available()` (torch_npu adds it).

    With `--target accelerator`: `"nccl"` becomes
    `torch.distributed.get_default_backend_for_device(torch.accelerator.current_accelerator())`
    (torch >= 2.6), which is `"nccl"` on a GPU and `"hccl"` on an NPU.

    ## Why
    NCCL is NVIDIA's collective library; Ascend's is HCCL, registered by torch_npu as `"hccl"`.

    ## Example
    ```python
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    ```

    ## Use instead
    ```python
    dist.init_process_group("hccl" if torch.cuda.is_available() else "gloo")
    ```

    ## Fix safety
    Safe. A backend computed at run time from text that mentions `"nccl"` (an environment
    variable with an `"nccl"` default, for example) is reported, and so is `backend="nccl"`
    passed to a function npu-migrate does not know (Ray's collectives take NCCL for their own
    groups), and, under `--target accelerator`, a backend in a file that does not import torch.
    """

    CODE = "NPU305"
    NAME = "nccl-backend"
    SUMMARY = '`"nccl"` distributed backend'
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = ("nccl", "NCCL")

    @classmethod
    def scan_shell_line(cls, code: str, path: str, number: int) -> Iterator[Diagnostic]:
        """``--dist-backend nccl`` style options of a launch command."""
        for match in SHELL_BACKEND_OPTION.finditer(code):
            yield shell_finding(
                path,
                number,
                match.start(2),
                cls.CODE,
                f"`{match.group(1)}` selects nccl: pass hccl",
            )

    def check(self) -> None:
        targets: dict[int, ast.Constant] = {}
        for position in _backend_positions(self):
            for value in values_reaching(self.view, position):
                if isinstance(value, ast.Constant):
                    if _nccl_text(self, value) is not None:
                        targets.setdefault(id(value), value)
                elif _mentions_nccl(self, value):
                    self.report(
                        value,
                        f"the backend `{self.code(value)}` is chosen at run time and may "
                        'be "nccl": make sure it is "hccl" on Ascend',
                    )
        for value in sorted(targets.values(), key=lambda v: (v.lineno, v.col_offset)):
            self._rewrite(value)
        for call, value, known in backend_arguments(self):
            if not known and id(value) not in targets and _nccl_text(self, value) is not None:
                self.report(
                    value,
                    f"cannot tell whether `backend=` of `{self.view.written(call.func)}(...)` is "
                    "the torch.distributed backend (npu-migrate does not know that function); "
                    f"if it passes it on to `init_process_group`, write {_hccl_code(self, value)}",
                )
        for attribute in self.index.attributes("NCCL"):
            self._backend_member(attribute)
        for call in self.calls_to(TORCH_ROOTS):
            if torch_name(self.view, call.func) == IS_NCCL_AVAILABLE:
                self._is_nccl_available(call)

    def _rewrite(self, node: ast.Constant) -> None:
        target = device_target(self)
        text = _new_backend_text(self, node, target)
        old = self.code(node)
        if isinstance(text, NoCounterpart):
            self.report(node, f"per-device backend string: {text.reason}")
            return
        imports_torch = _imports_torch(self)
        if text is None:
            new = target.backend
            if not imports_torch:
                self.report(
                    node,
                    f"{old} would become `{new}`, which needs torch, and this file does not "
                    "import it (a config file's loader may not take imports): choose the backend "
                    "by hand where it is used",
                )
                return
            edit = self.replace(node, cst.SimpleString, lambda _: expression(new))
        else:
            literal = simple_string(self.view, node)
            assert literal is not None
            new = f"{literal.prefix}{literal.quote}{text}{literal.quote}"

            def renamed(string: cst.SimpleString) -> cst.SimpleString:
                start = len(string.prefix) + len(string.quote)
                return string.with_changes(
                    value=string.value[:start] + text + string.value[-len(string.quote) :]
                )

            edit = self.replace(node, cst.SimpleString, renamed)
        # A file that never imports torch only holds the name (a config, a hyper-parameter
        # module): torch_npu is imported where torch is, not added to it.
        if self.fix(node, f"{old} -> {new}", edit) and imports_torch:
            add_device_import(self)

    def _backend_member(self, attribute: ast.Attribute) -> None:
        """``dist.Backend.NCCL``: torch_npu registers ``hccl``, which gives ``Backend.HCCL``."""
        if not self.may_name(attribute, TORCH_ROOTS):
            return
        name = self.qualified_name_in(attribute, {BACKEND_NCCL})
        if isinstance(name, Ambiguous):
            self.report(
                attribute,
                f"cannot tell whether this is `{BACKEND_NCCL}`: {name.describe()}; if it is, "
                "use the hccl backend",
            )
            return
        if name != BACKEND_NCCL:
            return
        target = device_target(self)
        backend = target.backend_name
        if isinstance(backend, str):
            member = backend.upper()
            edit = self.replace(
                attribute, cst.Attribute, lambda node: node.with_changes(attr=cst.Name(member))
            )
            message = f"`Backend.NCCL` -> `Backend.{member}`"
        else:
            edit = self.replace(attribute, cst.Attribute, lambda _: expression(target.backend))
            message = f"`Backend.NCCL` -> `{target.backend}`"
        if self.fix(self.attr_position(attribute), message, edit):
            add_device_import(self)

    def _is_nccl_available(self, call: ast.Call) -> None:
        available = device_target(self).backend_available
        if isinstance(available, NoCounterpart):
            self.report(call, f"`is_nccl_available()`: {available.reason}")
            return
        func = call.func
        if not isinstance(func, (ast.Attribute, ast.Name)):
            return
        message = f"`is_nccl_available()` -> `{available}()`"
        if isinstance(func, ast.Attribute):
            edit = self.replace(
                func,
                cst.Attribute,
                lambda node: node.with_changes(attr=cst.Name(available)),
            )
            if self.fix(call, message, edit):
                add_device_import(self)
            return
        if self.fix(call, message):
            add_device_import(self)
            self.report(
                call,
                f"`is_nccl_available` was imported by name: import `{available}` instead",
            )


def _imports_torch(rule: Rule) -> bool:
    """Whether the module imports torch (or torch_npu) anywhere."""
    for statement in rule.index.imports():
        if isinstance(statement, ast.Import):
            roots = {alias.name.split(".")[0] for alias in statement.names}
        else:
            roots = set() if statement.level else {(statement.module or "").split(".")[0]}
        if roots & TORCH_ROOTS:
            return True
    return False


def _nccl_text(rule: Rule, node: ast.AST) -> str | None:
    """The body of a backend literal that names NCCL: ``"nccl"``, or a per-device backend
    string with ``cuda:nccl`` in it (``"cpu:gloo,cuda:nccl"``); else None."""
    body = string_body(rule.view, node)
    if body is not None and body.lower() == "nccl":  # torch reads backend names in any case
        return body
    if body and PER_DEVICE_BACKENDS.fullmatch(body) and "cuda:nccl" in body.split(","):
        return body
    return None


def _new_backend_text(
    rule: Rule, node: ast.AST, target: DeviceTarget
) -> str | NoCounterpart | None:
    """The new body of a backend literal on ``target``; None when the target spells the
    backend as an expression instead (:attr:`DeviceTarget.backend`)."""
    body = _nccl_text(rule, node)
    assert body is not None
    if body.lower() == "nccl":
        name = target.backend_name
        return _same_case(name, body) if isinstance(name, str) else None
    per_device = target.per_device_backend
    if isinstance(per_device, NoCounterpart):
        return per_device
    return ",".join(per_device if part == "cuda:nccl" else part for part in body.split(","))


def _same_case(name: str, like: str) -> str:
    """``hccl`` spelled in the case of ``like`` (``"NCCL"`` -> ``"HCCL"``)."""
    return "".join(n.upper() if c.isupper() else n for n, c in zip(name, like, strict=True))


def _mentions_nccl(rule: Rule, value: ast.AST) -> bool:
    """Whether an expression computed at run time holds the backend name ``"nccl"`` (or a
    per-device backend string with ``cuda:nccl``) somewhere inside: ``os.environ.get(KEY,
    "nccl")``. Other strings that contain the letters (``"ncclep"``) are not backends."""
    return any(
        isinstance(node, ast.Constant) and _nccl_text(rule, node) is not None
        for node in ast.walk(value)
    )


def _backend_positions(rule: Rule) -> Iterator[ast.AST]:
    index = rule.index
    for call in index.nodes(ast.Call):
        position = BACKEND_POSITIONS.get(torch_name(rule.view, call.func) or "")
        if position is not None:
            found = argument(call, "backend", position)
            if found is not None:
                yield found.value
            yield from _backend_in_kwargs(rule, call)
        else:
            yield from option_values(rule.view, call, BACKEND_NAME)
            for given in call.keywords:
                if given.arg is not None and DIST_BACKEND_KEY.fullmatch(given.arg):
                    yield given.value
    for mapping in index.nodes(ast.Dict):
        for key, value in zip(mapping.keys, mapping.values, strict=True):
            body = None if key is None else string_body(rule.view, key)
            if body is not None and DIST_BACKEND_KEY.fullmatch(body):
                yield value
    for _, value in _settings_backends(rule):
        yield value
    for _, value, known in backend_arguments(rule):
        if known:
            yield value
    for assign in index.nodes(ast.Assign):
        if any(names_match(target, BACKEND_NAME) for target in assign.targets):
            yield assign.value
    for annotated in index.nodes(ast.AnnAssign):
        if names_match(annotated.target, BACKEND_NAME):
            if annotated.value is not None:
                yield annotated.value
            yield from _literal_choices(rule, annotated.annotation)
    for parameter, default in parameter_defaults(rule.view):
        if BACKEND_NAME.fullmatch(parameter.arg):
            yield default
    for comparison in index.nodes(ast.Compare):
        operands = [comparison.left, *comparison.comparators]
        for (left, right), operator in zip(
            itertools.pairwise(operands), comparison.ops, strict=True
        ):
            if _names_backend(rule, left):
                if isinstance(operator, ast.In | ast.NotIn) and isinstance(
                    right, ast.List | ast.Tuple | ast.Set
                ):
                    # `backend in ["gloo", "nccl"]`: each element is a backend it is tested for.
                    yield from right.elts
                else:
                    yield right
            elif _names_backend(rule, right):
                yield left


def _backend_in_kwargs(rule: Rule, call: ast.Call) -> Iterator[ast.AST]:
    """The ``backend`` entry of a dict unpacked into a process-group constructor:
    ``init_process_group(**{"backend": "nccl"})``, ``kwargs = dict(backend="nccl", ...)`` then
    ``init_process_group(**kwargs)``."""
    for unpacked in call.keywords:
        if unpacked.arg is not None:
            continue
        for mapping in values_reaching(rule.view, unpacked.value):
            if isinstance(mapping, ast.Dict):
                for key, value in zip(mapping.keys, mapping.values, strict=True):
                    if key is not None and string_body(rule.view, key) == "backend":
                        yield value
            elif (
                isinstance(mapping, ast.Call)
                and rule.qualified_name(mapping.func) == "builtins.dict"
            ):
                found = keyword(mapping, "backend")
                if found is not None:
                    yield found.value


def _entries(rule: Rule, node: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """The entries of a dict written in place, ``{"backend": ...}`` or ``dict(backend=...)``,
    by key (other nodes have none)."""
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            body = None if key is None else string_body(rule.view, key)
            if body is not None:
                yield body, value
    elif isinstance(node, ast.Call) and _is_dict_call(rule, node):
        for given in node.keywords:
            if given.arg is not None:
                yield given.arg, given.value


def _is_dict_call(rule: Rule, call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Name)
        and func.id == "dict"
        and rule.qualified_name(func) == "builtins.dict"
    )


def _owner_name(rule: Rule, node: ast.AST) -> str | None:
    """The name a value is given where it is written: the variable or attribute it is
    assigned to, the keyword it is passed as, or its key in a dict."""
    parent = rule.index.parent(node)
    if isinstance(parent, ast.Assign) and parent.value is node:
        names = [last_name(target) for target in parent.targets]
        return next((name for name in names if name is not None), None)
    if isinstance(parent, ast.AnnAssign) and parent.value is node:
        return last_name(parent.target)
    if isinstance(parent, ast.keyword):
        return parent.arg
    if isinstance(parent, ast.Dict):
        for key, value in zip(parent.keys, parent.values, strict=True):
            if value is node and key is not None:
                return string_body(rule.view, key)
    return None


def _settings_backends(rule: Rule) -> Iterator[tuple[ast.AST, ast.expr]]:
    """The ``backend`` entry of each distributed-settings dict (:data:`DIST_SETTINGS_NAME`),
    with the dict."""
    index = rule.index
    for node in itertools.chain(index.nodes(ast.Dict), index.nodes(ast.Call)):
        entries = [value for key, value in _entries(rule, node) if key == BACKEND_KEY]
        if not entries:
            continue
        owner = _owner_name(rule, node)
        if owner is not None and DIST_SETTINGS_NAME.fullmatch(owner):
            yield from ((node, value) for value in entries)


def backend_arguments(rule: Rule) -> list[tuple[ast.Call, ast.expr, bool]]:
    """:func:`_backend_arguments`, computed once per file."""
    return rule.view.memo("npu305-backend-arguments", lambda: list(_backend_arguments(rule)))


def _backend_arguments(rule: Rule) -> Iterator[tuple[ast.Call, ast.expr, bool]]:
    """The backend passed to a call that is neither a process-group constructor nor a dict,
    and whether npu-migrate knows it for the process group's: mmcv's and mmengine's
    ``init_dist(launcher, backend)`` (:data:`BACKEND_TAKERS`), and a function of this module
    with a ``backend`` parameter (whose default the rule already treats as one). Any other
    ``backend=`` could be any library's, and depends on code this file does not show."""
    for call in rule.index.nodes(ast.Call):
        taker = _backend_taker(rule, call)
        found = argument(call, BACKEND_KEY, 1) if taker else keyword(call, BACKEND_KEY)
        if found is None or _is_dict_call(rule, call):
            continue
        if BACKEND_POSITIONS.get(torch_name(rule.view, call.func) or "") is None:
            yield call, found.value, taker or _takes_backend_here(rule, call.func)


def _backend_taker(rule: Rule, call: ast.Call) -> bool:
    if not call.keywords and len(call.args) < 2:
        return False
    if not rule.may_name(call.func, BACKEND_TAKER_ROOTS):
        return False
    name = rule.qualified_name(call.func)
    return isinstance(name, str) and name in BACKEND_TAKERS


def _takes_backend_here(rule: Rule, callee: ast.AST) -> bool:
    """Whether ``callee`` is a plain name bound only to functions of this module that have a
    ``backend`` parameter."""
    if not isinstance(callee, ast.Name):
        return False
    bound = [binding.node for binding in rule.index.bindings_of(callee)]
    return bool(bound) and all(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(
            parameter.arg == BACKEND_KEY
            for parameter in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
        )
        for node in bound
    )


def _hccl_code(rule: Rule, node: ast.AST) -> str:
    """The literal as the target spells it, for a message."""
    target = device_target(rule)
    text = _new_backend_text(rule, node, target)
    literal = simple_string(rule.view, node)
    if isinstance(text, str) and literal is not None:
        return f"{literal.prefix}{literal.quote}{text}{literal.quote}"
    return f"`{target.backend}`"


def _literal_choices(rule: Rule, annotation: ast.expr) -> Iterator[ast.AST]:
    """The values of a ``Literal["nccl", "gloo"]`` annotation of a backend field: config
    systems turn them into the option's choices (Megatron's dataclass configs do)."""
    if not isinstance(annotation, ast.Subscript) or rule.qualified_name(annotation.value) not in (
        LITERAL_TYPES
    ):
        return
    elements = annotation.slice
    yield from elements.elts if isinstance(elements, ast.Tuple) else (elements,)


def _names_backend(rule: Rule, node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return torch_name(rule.view, node.func) == GET_BACKEND
    return names_match(node, BACKEND_NAME)


__all__ = ["NcclBackend", "full_name"]
