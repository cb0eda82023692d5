"""NPU925: `"cuda"` literals that reach a device by a path NPU303 does not follow."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import (
    DEVICE_NAME,
    DeviceFlow,
    cuda_fstring_head,
    device_flow,
    device_origins,
    names_match,
    parameter_defaults,
    string_body,
)
from migrator.rules.device._target import device_target

# Dictionary keys and subscripts that hold a device: {"device": "cuda"}, cfg["map_location"].
DEVICE_KEY = re.compile(r"(.*_)?device|map_location|device_type")
CUDA_LITERAL = re.compile(r"cuda(:(\d+|%[ds]|\{[^{}]*\}))?")


@dataclass
class Sinks:
    """Where values become devices in this module, beyond what NPU303 rewrites: parameters,
    attributes and local functions whose value reaches a device position (with that
    position's line, for the message)."""

    parameters: dict[int, tuple[ast.arg, int]] = field(default_factory=dict)
    attributes: dict[str, int] = field(default_factory=dict)
    functions: dict[int, int] = field(default_factory=dict)  # id(FunctionDef) -> line


class CudaDeviceLiteral(Rule):
    """
    ## What it does
    Reports the `"cuda"` / `"cuda:N"` strings (and `f"cuda:{i}"`, `"cuda:{}"`) that become a
    device by a path NPU303 does not rewrite:

    - the value of a `"device"` (or `"*_device"`, `"map_location"`, `"device_type"`) entry of a
      dictionary literal, or of `cfg["device"] = ...`;
    - assigned to an attribute that is used as a device elsewhere in the module
      (`self.dev = "cuda"` ... `x.to(self.dev)`);
    - passed to a function of the module (or used as a parameter default) whose parameter is
      used as a device (`run(model, "cuda:1")` with `def run(model, where): model.to(where)`);
    - returned by a function of the module whose result is used as a device
      (`def pick(): return "cuda"` ... `torch.device(pick())`).

    Strings that NPU303 rewrites (device positions and the values it follows to them) are never
    reported here.

    ## Why
    These strings stay `"cuda"` after the migration, and the code fails on an Ascend machine
    ("Torch not compiled with CUDA enabled") far from where the string is written.

    ## Example
    ```python
    config = {"device": "cuda", "epochs": 10}
    model.to(config["device"])
    ```

    ## Use instead
    ```python
    config = {"device": "npu", "epochs": 10}
    model.to(config["device"])
    ```

    ## Fix safety
    No fix: whether the value is only ever used as a device is not provable here (the same
    dictionary may be logged or saved); change the literal by hand.
    """

    CODE = "NPU925"
    NAME = "cuda-device-literal"
    SUMMARY = '`"cuda"` string that reaches a device through a dict, attribute or call'
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = ('"cuda', "'cuda")

    def check(self) -> None:
        flow = device_flow(self.view)  # NPU303's: it reports the "cuda" literals NPU303 misses
        reached = {id(value) for value, _ in flow.reached}
        candidates = [node for node in self._cuda_literals() if id(node) not in reached]
        if not candidates:
            return
        sinks = self._sinks(flow)
        for literal in candidates:
            message = self._flow_of(_carrier(self, literal), sinks)
            if message is not None:
                self.report(
                    literal,
                    f"{self.code(literal)} {message}: write {self._replacement(literal)} "
                    "(npu-migrate rewrites device strings only where it sees them used as "
                    "devices)",
                )

    def _replacement(self, literal: ast.AST) -> str:
        target = device_target(self)
        name = target.device_type_name
        if isinstance(name, str):
            return _renamed(self.code(literal), name)
        index = ", keeping the index after `:`" if ":" in self.code(literal) else ""
        return f"the accelerator's device type (`{target.device_type}`{index}) instead"

    def _cuda_literals(self) -> Iterator[ast.Constant | ast.JoinedStr]:
        for constant in self.index.nodes(ast.Constant):
            value = constant.value
            if isinstance(value, str) and value.startswith("cuda"):
                body = string_body(self.view, constant)
                if body is not None and CUDA_LITERAL.fullmatch(body):
                    yield constant
        for joined in self.index.nodes(ast.JoinedStr):
            if cuda_fstring_head(self.view, joined) is not None:
                yield joined

    # -- where values become devices -------------------------------------------------------------

    def _sinks(self, flow: DeviceFlow) -> Sinks:
        sinks = Sinks()
        for position, _ in flow.positions:
            line = position.lineno  # type: ignore[attr-defined]
            for origin in device_origins(self.view).of(position):
                if isinstance(origin, ast.arg):
                    sinks.parameters.setdefault(id(origin), (origin, line))
                elif isinstance(origin, ast.Attribute) and not names_match(origin, DEVICE_NAME):
                    sinks.attributes.setdefault(origin.attr, line)
                elif isinstance(origin, ast.Call):
                    for function in self._local_functions(origin.func):
                        sinks.functions.setdefault(id(function), line)
        return sinks

    def _local_functions(self, callee: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The functions of this module that a call of ``callee`` (a plain name) may run."""
        if not isinstance(callee, ast.Name):
            return []
        return [
            binding.node
            for binding in self.index.bindings_of(callee)
            if isinstance(binding.node, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]

    # -- how a literal gets there ----------------------------------------------------------------

    def _flow_of(self, carrier: ast.AST, sinks: Sinks) -> str | None:
        """Why the value ``carrier`` becomes a device, or None when it does not."""
        parent = self.index.parent(carrier)
        if isinstance(parent, ast.Dict):
            key = _entry_key(parent, carrier)
            if key is not None and DEVICE_KEY.fullmatch(key):
                return f'is the "{key}" entry of a dictionary'
        elif isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is carrier:
            return self._assigned(parent, sinks)
        elif isinstance(parent, ast.Call):
            return self._passed(parent, carrier, sinks)
        elif isinstance(parent, ast.keyword):
            call = self.index.parent(parent)
            if not isinstance(call, ast.Call):
                return None
            key = parent.arg
            if key is not None and DEVICE_KEY.fullmatch(key) and self._is_dict(call.func):
                return f'is the "{key}" entry of a dictionary'
            return self._passed(call, parent, sinks)
        elif isinstance(parent, ast.Return):
            return self._returned(parent, sinks)
        elif isinstance(parent, ast.arguments):
            return self._default_of(carrier, sinks)
        return None

    def _assigned(self, statement: ast.Assign | ast.AnnAssign, sinks: Sinks) -> str | None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for target in targets:
            if isinstance(target, ast.Subscript):
                key = _string_key(target.slice)
                if key is not None and DEVICE_KEY.fullmatch(key):
                    return f'is stored under the "{key}" key'
            elif isinstance(target, ast.Attribute) and target.attr in sinks.attributes:
                line = sinks.attributes[target.attr]
                return f"is stored in `.{target.attr}`, which is used as a device (line {line})"
        return None

    def _is_dict(self, callee: ast.AST) -> bool:
        return isinstance(callee, ast.Name) and self.qualified_name(callee) == "builtins.dict"

    def _passed(self, call: ast.Call, given: ast.AST, sinks: Sinks) -> str | None:
        functions = self._local_functions(call.func)
        for function in functions:
            parameter = _parameter_for(function, call, given)
            if parameter is None or id(parameter) not in sinks.parameters:
                continue
            line = sinks.parameters[id(parameter)][1]
            uses = f"which uses it as a device (line {line})"
            assert isinstance(call.func, ast.Name)
            if len(self.index.bindings_of(call.func)) > len(functions):
                return (
                    f"is passed as `{parameter.arg}` to `{function.name}()`, if that is the "
                    f"function defined at line {function.lineno} (`{function.name}` has other "
                    f"bindings too), {uses}"
                )
            return f"is passed as `{parameter.arg}` to `{function.name}()`, {uses}"
        return None

    def _returned(self, statement: ast.Return, sinks: Sinks) -> str | None:
        for ancestor in self.index.ancestors(statement):
            if isinstance(ancestor, ast.Lambda):
                return None
            if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
                line = sinks.functions.get(id(ancestor))
                if line is None:
                    return None
                return f"is returned by `{ancestor.name}()`, whose result is used as a device " + (
                    f"(line {line})"
                )
        return None

    def _default_of(self, default: ast.AST, sinks: Sinks) -> str | None:
        for parameter, value in parameter_defaults(self.view):
            if value is default and id(parameter) in sinks.parameters:
                line = sinks.parameters[id(parameter)][1]
                return (
                    f"is the default of `{parameter.arg}`, which is used as a device (line {line})"
                )
        return None


def _carrier(rule: Rule, literal: ast.AST) -> ast.AST:
    """The expression that carries the literal's value: ``"cuda" if ok else "cpu"``,
    ``"cuda:{}".format(i)``, ``"cuda:%d" % i``, ``x or "cuda"``."""
    node = literal
    while True:
        parent = rule.index.parent(node)
        passes_value = isinstance(parent, ast.IfExp) and node is not parent.test
        if passes_value or isinstance(parent, ast.BoolOp):
            assert parent is not None
            node = parent
        elif isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod):
            if parent.left is not node:
                return node
            node = parent
        elif isinstance(parent, ast.Attribute) and parent.attr == "format":
            call = rule.index.parent(parent)
            if not isinstance(call, ast.Call) or call.func is not parent:
                return node
            node = call
        else:
            return node


def _entry_key(dictionary: ast.Dict, value: ast.AST) -> str | None:
    for key, entry in zip(dictionary.keys, dictionary.values, strict=True):
        if entry is value:
            return _string_key(key) if key is not None else None
    return None


def _string_key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _parameter_for(
    function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, given: ast.AST
) -> ast.arg | None:
    """The parameter of ``function`` that receives ``given`` (a positional argument or a
    keyword of ``call``); None past a ``*args`` or when nothing matches."""
    arguments = function.args
    if isinstance(given, ast.keyword):
        candidates = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        return next((p for p in candidates if p.arg == given.arg), None)
    for position, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            return None
        if argument is given:
            plain = [*arguments.posonlyargs, *arguments.args]
            return plain[position] if position < len(plain) else None
    return None


def _renamed(code: str, name: str) -> str:
    """The literal as written with its ``cuda`` replaced by ``name``."""
    start = code.index("cuda")
    return code[:start] + name + code[start + 4 :]
