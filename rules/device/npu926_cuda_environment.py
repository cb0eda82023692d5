"""NPU926: CUDA and NCCL environment variables (`CUDA_VISIBLE_DEVICES`, `NCCL_*`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from migrator.analysis.calls import string_literal
from migrator.analysis.names import Ambiguous
from migrator.analysis.view import Location
from migrator.diagnostics import Diagnostic, Severity
from migrator.rule import FixSafety, Rule
from migrator.rules.device._common import shell_finding, string_body

# Environment variable names this rule knows, as whole words.
ENVIRONMENT_NAME = re.compile(
    r"\b(CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|PYTORCH_CUDA_ALLOC_CONF|(?:TORCH_)?NCCL_\w+)\b"
)
# `NAME=value` inside a command string ("CUDA_VISIBLE_DEVICES=0 python train.py").
ASSIGNED_NAME = re.compile(ENVIRONMENT_NAME.pattern + "=")
TRIGGER_WORDS = ("CUDA_VISIBLE", "CUDA_LAUNCH", "CUDA_ALLOC", "NCCL_")

ENVIRON = "os.environ"
# Calls whose first argument names an environment variable.
NAMING_CALLS = {"os.getenv": "read", "os.putenv": "set", "os.unsetenv": "removed"}
ENVIRON_METHODS = {"get": "read", "setdefault": "set", "pop": "removed"}


@dataclass(frozen=True)
class Advice:
    """What to do about one variable on Ascend: its counterpart (None: there is none) and a
    note on how the two differ."""

    counterpart: str | None
    note: str = ""


# Counterparts from Ascend's public references: CANN's "Environment Variables" (HCCL_* network
# and function settings, ASCEND_RT_VISIBLE_DEVICES, ASCEND_LAUNCH_BLOCKING) and torch_npu's
# environment variable reference (HCCL_ASYNC_ERROR_HANDLING, HCCL_DESYNC_DEBUG,
# PYTORCH_NPU_ALLOC_CONF; HCCL_BLOCKING_WAIT and TORCH_HCCL_* are read by its ProcessGroupHCCL).
ADVICE = {
    "CUDA_VISIBLE_DEVICES": Advice("ASCEND_RT_VISIBLE_DEVICES", "same comma-separated device ids"),
    "CUDA_LAUNCH_BLOCKING": Advice(
        "ASCEND_LAUNCH_BLOCKING", "1 runs operators synchronously, for exact error stacks"
    ),
    "PYTORCH_CUDA_ALLOC_CONF": Advice(
        "PYTORCH_NPU_ALLOC_CONF", "check each option: torch_npu supports only some of them"
    ),
    "NCCL_SOCKET_IFNAME": Advice("HCCL_SOCKET_IFNAME", "check its value syntax"),
    "NCCL_SOCKET_FAMILY": Advice("HCCL_SOCKET_FAMILY"),
    "NCCL_BUFFSIZE": Advice("HCCL_BUFFSIZE", "HCCL counts megabytes, NCCL bytes"),
    "NCCL_ALGO": Advice("HCCL_ALGO", "its values name HCCL's own algorithms"),
    "NCCL_IB_TIMEOUT": Advice("HCCL_RDMA_TIMEOUT", "check its value range"),
    "NCCL_IB_RETRY_CNT": Advice("HCCL_RDMA_RETRY_CNT"),
    "NCCL_IB_TC": Advice("HCCL_RDMA_TC"),
    "NCCL_IB_SL": Advice("HCCL_RDMA_SL"),
    "NCCL_ASYNC_ERROR_HANDLING": Advice("HCCL_ASYNC_ERROR_HANDLING", "it accepts only 0 or 1"),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": Advice(
        "HCCL_ASYNC_ERROR_HANDLING", "it accepts only 0 or 1"
    ),
    "NCCL_BLOCKING_WAIT": Advice("HCCL_BLOCKING_WAIT"),
    "TORCH_NCCL_BLOCKING_WAIT": Advice("HCCL_BLOCKING_WAIT"),
    "NCCL_DESYNC_DEBUG": Advice("HCCL_DESYNC_DEBUG"),
    "TORCH_NCCL_DESYNC_DEBUG": Advice("HCCL_DESYNC_DEBUG"),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": Advice("TORCH_HCCL_DUMP_ON_TIMEOUT"),
    "TORCH_NCCL_ENABLE_MONITORING": Advice("TORCH_HCCL_ENABLE_MONITORING"),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": Advice("TORCH_HCCL_TRACE_BUFFER_SIZE"),
    "NCCL_DEBUG": Advice(None, "CANN's log level is `ASCEND_GLOBAL_LOG_LEVEL`"),
    "NCCL_DEBUG_SUBSYS": Advice(None, "CANN's log level is `ASCEND_GLOBAL_LOG_LEVEL`"),
}


def advice_for(name: str) -> tuple[str, Severity]:
    """The message about variable ``name`` (matched by :data:`ENVIRONMENT_NAME`) and its
    severity: manual where Ascend has a counterpart to set instead, info where the variable
    simply has no effect."""
    advice = ADVICE.get(name)
    if advice is not None and advice.counterpart is not None:
        note = f" ({advice.note})" if advice.note else ""
        return f"on Ascend use `{advice.counterpart}`{note}", Severity.MANUAL
    note = f"; {advice.note}" if advice is not None and advice.note else ""
    return f"hccl ignores it, and HCCL has no counterpart setting{note}", Severity.INFO


class CudaEnvironment(Rule):
    """
    ## What it does
    Reports CUDA and NCCL environment variables in Python code, with their Ascend counterpart
    where one exists: `os.environ["CUDA_VISIBLE_DEVICES"]` (read, set or deleted),
    `os.getenv(...)`, `os.environ.get/setdefault/pop(...)`, `os.putenv/unsetenv(...)`,
    `"NCCL_DEBUG" in os.environ`, `os.environ.update(NCCL_DEBUG=...)`, any other string that is
    exactly such a name (an `env={...}` dictionary for a subprocess), and command strings that
    set one (`os.system("CUDA_VISIBLE_DEVICES=0 python train.py")`), at the variable's own line
    and column in a multi-line string. Docstrings and other bare string statements are prose and
    are not scanned.

    Variables: `CUDA_VISIBLE_DEVICES` (-> `ASCEND_RT_VISIBLE_DEVICES`), `CUDA_LAUNCH_BLOCKING`
    (-> `ASCEND_LAUNCH_BLOCKING`), `PYTORCH_CUDA_ALLOC_CONF` (-> `PYTORCH_NPU_ALLOC_CONF`), and
    every `NCCL_*` / `TORCH_NCCL_*` variable: those with an HCCL counterpart
    (`NCCL_SOCKET_IFNAME` -> `HCCL_SOCKET_IFNAME`, `NCCL_BUFFSIZE` -> `HCCL_BUFFSIZE`,
    `NCCL_IB_TIMEOUT` -> `HCCL_RDMA_TIMEOUT`, `TORCH_NCCL_ASYNC_ERROR_HANDLING` ->
    `HCCL_ASYNC_ERROR_HANDLING`, ...; see docs/rules-device.md for the table) are reported for
    manual review, the others as info (they have no effect with hccl).

    Shell launch scripts are scanned for the same variables with `--include-shell`.

    ## Why
    Ascend's runtime ignores the CUDA variables, and hccl ignores NCCL's: a script that limits
    itself to two GPUs with `CUDA_VISIBLE_DEVICES=0,1` sees every NPU of the machine, and an
    interface chosen with `NCCL_SOCKET_IFNAME` is not the one HCCL uses.

    ## Example
    ```python
    os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "eth0")
    ```

    ## Use instead
    ```python
    os.environ["ASCEND_RT_VISIBLE_DEVICES"] = args.gpus
    os.environ.setdefault("HCCL_SOCKET_IFNAME", "eth0")
    ```

    ## Fix safety
    No fix: the counterparts differ in details (units, accepted values), and a script that
    runs on both GPUs and NPUs may need both variables.
    """

    CODE = "NPU926"
    NAME = "cuda-environment"
    SUMMARY = "`CUDA_VISIBLE_DEVICES` / `NCCL_*` environment variable"
    FIX_SAFETY = FixSafety.NONE
    TRIGGER = TRIGGER_WORDS

    @classmethod
    def scan_shell_line(cls, code: str, path: str, number: int) -> Iterator[Diagnostic]:
        """``export CUDA_VISIBLE_DEVICES=0,1``, ``NCCL_DEBUG=INFO torchrun ...``,
        ``$CUDA_VISIBLE_DEVICES``, ``unset NCCL_P2P_DISABLE``."""
        for match in ENVIRONMENT_NAME.finditer(code):
            name = match.group(1)
            message, severity = advice_for(name)
            use = _shell_use(code, match.start(1), match.end(1))
            yield shell_finding(
                path, number, match.start(1), cls.CODE, f"`{name}` ({use}): {message}", severity
            )

    def check(self) -> None:
        for constant in self.index.nodes(ast.Constant):
            value = constant.value
            if isinstance(value, str) and ("CUDA_" in value or "NCCL_" in value):
                self._check_string(constant)
        for given in self.index.nodes(ast.keyword):
            if given.arg is not None and ENVIRONMENT_NAME.fullmatch(given.arg):
                self._report(given, given.arg, "set")

    def _check_string(self, constant: ast.Constant) -> None:
        if isinstance(self.index.parent(constant), ast.Expr):
            return  # a docstring or a bare string: prose about the variable, not a use of it
        body = string_body(self.view, constant)
        if body is None:
            return
        if ENVIRONMENT_NAME.fullmatch(body):
            use = self._use_of(constant)
            if isinstance(use, Ambiguous):
                message, _ = advice_for(body)
                self.report(
                    constant,
                    f"`{body}` may be an environment variable here; cannot tell whether this "
                    f"is `{ENVIRON}`: {use.describe()}; if it is, {message}",
                )
            else:
                self._report(constant, body, use)
            return
        for match in ASSIGNED_NAME.finditer(body):
            name = match.group(1)
            self._report(self._inside(constant, body, match.start()), name, "set in a command")

    def _inside(self, constant: ast.Constant, body: str, offset: int) -> ast.AST | Location:
        """Where ``body[offset]`` is in the source (the body is the text between the quotes as
        written, so offsets in it are offsets in the file)."""
        literal = string_literal(self.source, constant)
        if literal is None:
            return constant
        line, column = self.position(constant)
        before = body[:offset]
        newlines = before.count("\n")
        if newlines == 0:
            return Location(line, column + len(literal.prefix) + len(literal.quote) + offset)
        return Location(line + newlines, len(before) - before.rfind("\n"))  # 1-based

    def _report(self, at: ast.AST | Location, name: str, use: str) -> None:
        message, severity = advice_for(name)
        self.report(at, f"`{name}` ({use} here): {message}", severity)

    # -- how the string is used -----------------------------------------------------------------

    def _use_of(self, constant: ast.Constant) -> str | Ambiguous:
        """``read`` / ``set`` / ``removed`` / ``tested`` through ``os.environ`` and friends,
        ``named`` otherwise; Ambiguous when the mapping may or may not be ``os.environ``."""
        parent = self.index.parent(constant)
        if isinstance(parent, ast.Subscript) and parent.slice is constant:
            environ = self._is_environ(parent.value)
            if isinstance(environ, Ambiguous):
                return environ
            if not environ:
                return "named"
            return {ast.Store: "set", ast.Del: "removed"}.get(type(parent.ctx), "read")
        if isinstance(parent, ast.Compare) and parent.left is constant:
            in_environ = [
                self._is_environ(operand)
                for operator, operand in zip(parent.ops, parent.comparators, strict=True)
                if isinstance(operator, (ast.In, ast.NotIn))
            ]
            if True in in_environ:
                return "tested"
            ambiguous = [found for found in in_environ if isinstance(found, Ambiguous)]
            return ambiguous[0] if ambiguous else "named"
        if isinstance(parent, ast.Call) and parent.args[:1] == [constant]:
            return self._called_with(parent)
        return "named"

    def _called_with(self, call: ast.Call) -> str | Ambiguous:
        callee = call.func
        if isinstance(callee, ast.Attribute) and callee.attr in ENVIRON_METHODS:
            environ = self._is_environ(callee.value)
            if isinstance(environ, Ambiguous):
                return environ
            if environ:
                return ENVIRON_METHODS[callee.attr]
        name = self.qualified_name_in(callee, NAMING_CALLS)
        if isinstance(name, Ambiguous):
            return name
        return NAMING_CALLS.get(name or "", "named")

    def _is_environ(self, node: ast.AST) -> bool | Ambiguous:
        if not self.may_name(node, {"os"}):
            return False
        name = self.qualified_name_in(node, {ENVIRON})
        return name if isinstance(name, Ambiguous) else name == ENVIRON


def _shell_use(code: str, start: int, end: int) -> str:
    """How a shell line uses the variable at ``code[start:end]``."""
    before = code[:start].rstrip("{")
    if before.endswith("$"):
        return "read here"
    if code.startswith("=", end):
        return "set here"
    if re.search(r"\bunset\s+(-v\s+)?$", code[:start]):
        return "unset here"
    return "named here"
