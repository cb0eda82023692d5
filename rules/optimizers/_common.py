"""Facts and analyses shared by the NPU1xx rules (apex optimizers and amp). Not a rule itself.

- The optimizer tables of DOMAIN.md section 2: which constructors have an NPU fused version, their
  signatures, and which of their arguments can be dropped, kept or block the rewrite.
- :class:`OptimizerFlow`: where the optimizers passed to ``apex.amp.initialize`` are built, found by
  following names, ``self.<attr>`` assignments, containers and same-module function returns, on
  the module's ``ast`` through :class:`~migrator.analysis.index.ModuleIndex`.
- :class:`FusedPlan`: what NPU101 publishes in ``context.facts["NPU101"]`` about each constructor
  call it rewrites, so that NPU102 and NPU103 treat those calls as NPU fused optimizers already
  (every rule analyses the original file; the edits of all three land in one pass).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Collection, Container, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from migrator.analysis.calls import NOT_LITERAL, Argument, argument, has_star, literal_value
from migrator.analysis.flow import ENTRY, ReachingDefinitions
from migrator.analysis.index import ModuleIndex, full_name
from migrator.analysis.names import Ambiguous
from migrator.rule import Rule

AMP_INITIALIZE = "apex.amp.initialize"
AMP_OPTIMIZERS_POSITION = 1

APEX_HOME = "apex.optimizers"
TORCH_NPU_HOME = "torch_npu.optim"
NPU_FUSED = re.compile(r"(apex\.optimizers|torch_npu\.optim)\.NpuFused\w+")

# Roots of every qualified name the NPU1xx rules look for, for the candidate filter
# Rule.may_name. One set for all of them: the index computes the names reaching a set of roots
# once per file and set, and the resolution of a name is shared by every rule that asks.
NPU1_ROOTS = frozenset({"torch", "apex", "torch_npu"})

# Text without which a file has no optimizer constructor to rewrite or report (NPU101's
# trigger): every spelling of torch.optim, apex.optimizers and torch_npu.optim contains "optim";
# the class names cover names bound elsewhere (`from mylib import SGD`). "Fused" covers NpuFused.
OPTIMIZER_TRIGGER = ("optim", "Optim", "SGD", "Adam", "Adadelta", "RMSprop", "Fused")

# The key of NPU101's plan in context.facts (see READS in migrator.rule).
NPU101 = "NPU101"

# Target signatures (Ascend apex and torch_npu agree): positional order after `params`.
TARGET_PARAMETERS: dict[str, tuple[str, ...]] = {
    "NpuFusedSGD": ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "NpuFusedAdam": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "NpuFusedAdamW": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "NpuFusedAdadelta": ("params", "lr", "rho", "eps", "weight_decay"),
    "NpuFusedRMSprop": (
        "params",
        "lr",
        "alpha",
        "eps",
        "weight_decay",
        "momentum",
        "centered",
    ),
}


@dataclass(frozen=True)
class Source:
    """A constructor with an NPU fused version. ``target`` is None when an argument decides it."""

    display: str
    target: str | None
    positional: tuple[str, ...]
    keyword_only: tuple[str, ...] = ()
    # For NVIDIA apex's classes: the torch optimizer to use instead when the NPU fused one cannot
    # be used (they need apex's CUDA extension `amp_C`, which Ascend's apex lacks).
    unfused_replacement: str | None = None

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.positional + self.keyword_only


_TORCH_SGD = Source(
    "torch.optim.SGD",
    "NpuFusedSGD",
    ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    ("maximize", "foreach", "differentiable", "fused"),
)
_TORCH_ADAM = Source(
    "torch.optim.Adam",
    "NpuFusedAdam",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    ("foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay"),
)
_TORCH_ADAMW = Source(
    "torch.optim.AdamW",
    "NpuFusedAdamW",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    ("maximize", "foreach", "capturable", "differentiable", "fused"),
)
_TORCH_ADADELTA = Source(
    "torch.optim.Adadelta",
    "NpuFusedAdadelta",
    ("params", "lr", "rho", "eps", "weight_decay", "foreach"),
    ("capturable", "maximize", "differentiable"),
)
_TORCH_RMSPROP = Source(
    "torch.optim.RMSprop",
    "NpuFusedRMSprop",
    (
        "params",
        "lr",
        "alpha",
        "eps",
        "weight_decay",
        "momentum",
        "centered",
        "capturable",
        "foreach",
        "maximize",
        "differentiable",
    ),
)
_APEX_SGD = Source(
    "apex.optimizers.FusedSGD",
    "NpuFusedSGD",
    (
        "params",
        "lr",
        "momentum",
        "dampening",
        "weight_decay",
        "nesterov",
        "wd_after_momentum",
        "materialize_master_grads",
        "set_grad_none",
    ),
    unfused_replacement="`torch.optim.SGD`",
)
_APEX_ADAM = Source(
    "apex.optimizers.FusedAdam",
    None,  # adam_w_mode picks NpuFusedAdamW (default) or NpuFusedAdam
    (
        "params",
        "lr",
        "bias_correction",
        "betas",
        "eps",
        "adam_w_mode",
        "weight_decay",
        "amsgrad",
        "set_grad_none",
        "capturable",
        "master_weights",
    ),
    unfused_replacement="`torch.optim.AdamW` (`torch.optim.Adam` for `adam_w_mode=False`)",
)

# Every public spelling of each source: the package attribute and the defining submodule.
SOURCES: dict[str, Source] = {
    "torch.optim.SGD": _TORCH_SGD,
    "torch.optim.sgd.SGD": _TORCH_SGD,
    "torch.optim.Adam": _TORCH_ADAM,
    "torch.optim.adam.Adam": _TORCH_ADAM,
    "torch.optim.AdamW": _TORCH_ADAMW,
    "torch.optim.adamw.AdamW": _TORCH_ADAMW,
    "torch.optim.Adadelta": _TORCH_ADADELTA,
    "torch.optim.adadelta.Adadelta": _TORCH_ADADELTA,
    "torch.optim.RMSprop": _TORCH_RMSPROP,
    "torch.optim.rmsprop.RMSprop": _TORCH_RMSPROP,
    "apex.optimizers.FusedSGD": _APEX_SGD,
    "apex.optimizers.fused_sgd.FusedSGD": _APEX_SGD,
    "apex.optimizers.FusedAdam": _APEX_ADAM,
    "apex.optimizers.fused_adam.FusedAdam": _APEX_ADAM,
}

_LAMB_ADVICE = (
    "Ascend's `NpuFusedLamb` has no bias correction, clamps the weight norm at 10 and always "
    "applies the trust ratio, so it trains differently: switch to it only after comparing loss "
    "curves, or keep a pure-PyTorch LAMB"
)
# apex optimizers with no exact NPU version: reported, never rewritten.
UNSUPPORTED: dict[str, str] = {
    "apex.optimizers.FusedLAMB": _LAMB_ADVICE,
    "apex.optimizers.fused_lamb.FusedLAMB": _LAMB_ADVICE,
    "apex.optimizers.FusedMixedPrecisionLamb": _LAMB_ADVICE,
    "apex.optimizers.fused_mixed_precision_lamb.FusedMixedPrecisionLamb": _LAMB_ADVICE,
    "apex.optimizers.FusedNovoGrad": (
        "it is a CUDA extension with no NPU version: use a pure-PyTorch NovoGrad, or "
        "`torch_npu.optim.NpuFusedAdamW` if switching algorithms is acceptable"
    ),
    "apex.optimizers.fused_novograd.FusedNovoGrad": (
        "it is a CUDA extension with no NPU version: use a pure-PyTorch NovoGrad, or "
        "`torch_npu.optim.NpuFusedAdamW` if switching algorithms is acceptable"
    ),
    "apex.optimizers.FusedAdagrad": (
        "it is a CUDA extension with no NPU version: use `torch.optim.Adagrad`, which runs on NPU"
    ),
    "apex.optimizers.fused_adagrad.FusedAdagrad": (
        "it is a CUDA extension with no NPU version: use `torch.optim.Adagrad`, which runs on NPU"
    ),
}
KNOWN_OPTIMIZERS = frozenset(SOURCES.keys() | UNSUPPORTED.keys())

FP16_OPTIMIZERS = frozenset(
    {
        "apex.fp16_utils.FP16_Optimizer",
        "apex.fp16_utils.fp16_optimizer.FP16_Optimizer",
        "apex.optimizers.FP16_Optimizer",
        "apex.optimizers.fp16_optimizer.FP16_Optimizer",
        "apex.contrib.optimizers.FP16_Optimizer",
        "apex.contrib.optimizers.fp16_optimizer.FP16_Optimizer",
    }
)

# Modules whose attributes `getattr(module, name)` may turn into an optimizer class at run time.
OPTIMIZER_MODULES = frozenset({"torch.optim", "apex.optimizers"})


# -- source text -------------------------------------------------------------------------------

_BLANK = " \t\f\r\n\\"


def written_span(rule: Rule, node: ast.AST) -> tuple[int, int]:
    """The character span of ``node`` with the parentheses that belong to it.

    ``ast`` spans leave out the parentheses around an expression; libcst, which the messages
    were first written against, counts them as part of the node (``(a).b`` is ``((a).b)`` as
    written). The parentheses of a call around its only argument belong to the call.
    """
    text = rule.source.text
    start, end = rule.source.span(node)
    closing = _closing_paren_of_call(rule, node)
    while True:
        left = start - 1
        while left >= 0 and text[left] in _BLANK:
            left -= 1
        right = end
        while right < len(text) and text[right] in _BLANK:
            right += 1
        if left < 0 or right >= len(text) or text[left] != "(" or text[right] != ")":
            return start, end
        if right == closing:
            return start, end
        start, end = left, right + 1


def _closing_paren_of_call(rule: Rule, node: ast.AST) -> int:
    """Where the ``)`` of the call that ``node`` is an argument of sits (-1 if it is none)."""
    parent = rule.index.parent(node)
    if isinstance(parent, ast.keyword):
        parent = rule.index.parent(parent)
    if isinstance(parent, ast.Call) and parent.func is not node:
        return rule.source.end(parent) - 1
    return -1


def code_of(rule: Rule, node: ast.AST) -> str:
    """The code of ``node`` as written, with its own parentheses (see :func:`written_span`).

    Code that spans lines is given as libcst prints a node on its own, which the messages
    have always quoted: continuation lines lose the indentation of the block the statement is
    in (they keep what they have beyond it), and line breaks are ``\\n``; the inside of a
    string literal is left as it is.
    """
    start, end = written_span(rule, node)
    text = rule.source.text[start:end]
    if "\n" not in text and "\r" not in text:
        return text
    return _without_block_indentation(rule, node, text)


def _without_block_indentation(rule: Rule, node: ast.AST, text: str) -> str:
    statement = rule.index.statement_of(node)
    indentation = ""
    if statement is not None:
        head = rule.source.line_text(statement.lineno)  # type: ignore[attr-defined]
        indentation = head[: len(head) - len(head.lstrip(" \t\f"))]
    lines = [line for line in _LINES.findall(text) if line]
    in_string = _lines_inside_strings(text)
    pieces: list[str] = []
    continued = False  # the line before ends with a backslash: its break stays as written
    for number, line in enumerate(lines):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        if number and number not in in_string and not continued:
            body = body.removeprefix(indentation)
        continued = body.endswith("\\")
        if ending and number + 1 not in in_string and not continued:
            ending = "\n"
        pieces.append(body + ending)
    return "".join(pieces)


# A line with its break; only \r\n, \r and \n break lines in Python source (not \f).
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


def _lines_inside_strings(text: str) -> set[int]:
    """0-based numbers of the lines of ``text`` that continue a string literal."""
    inside: set[int] = set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({text})").readline))
    except (tokenize.TokenError, SyntaxError):
        return inside
    for token in tokens:
        if token.type == tokenize.STRING and token.end[0] > token.start[0]:
            inside.update(range(token.start[0], token.end[0]))  # 1-based rows: +1 -1
    return inside


def line_of(node: ast.AST) -> int:
    return node.lineno  # type: ignore[attr-defined,no-any-return]


def source_order(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


# -- names -------------------------------------------------------------------------------------

# The last part of every name the NPU1xx rules resolve a callee to: a dotted callee can only
# resolve to a name that ends as it does (`x.y.SGD` is some `....SGD`), so the others are never
# resolved. A plain name may be an alias (`from torch.optim import SGD as S`) and always is.
OPTIMIZER_LAST_NAMES = frozenset(
    name.rpartition(".")[2] for name in KNOWN_OPTIMIZERS | FP16_OPTIMIZERS | {AMP_INITIALIZE}
)
_FUSED_PREFIX = "NpuFused"


def may_end_with(rule: Rule, func: ast.AST, last_names: Collection[str] | str) -> bool:
    """A cheap, conservative test: could ``func`` resolve to a name whose last part is in
    ``last_names`` (or starts with it, for a string)? Off with the candidate filters."""
    if not rule.context.fast or isinstance(func, ast.Name):
        return True
    if isinstance(func, ast.Attribute):
        last = func.attr
    else:
        dotted = full_name(func)  # through calls and subscripts, as names are resolved
        if dotted is None:
            return False  # no dotted name: it resolves to nothing
        _, dot, last = dotted.rpartition(".")
        if not dot:
            return True
    if isinstance(last_names, str):
        return last.startswith(last_names)
    return last in last_names


def npu_fused_name(rule: Rule, func: ast.AST) -> str | None:
    """``apex.optimizers.NpuFusedSGD`` etc. when ``func`` resolves to an NPU fused optimizer."""
    if not may_end_with(rule, func, _FUSED_PREFIX) or not rule.may_name(func, NPU1_ROOTS):
        return None
    name = rule.qualified_name(func)
    if isinstance(name, str) and NPU_FUSED.fullmatch(name):
        return name
    return None


@dataclass(frozen=True)
class FusedPlan:
    """NPU101's rewrite of one constructor call into an NPU fused optimizer.

    Besides the new class, it says how the rewrite moves the text on the call's lines, for a
    later rule whose edit depends on columns of the rewritten code (NPU103's line wrapping):
    the callee's new spelling is ``shift`` characters longer (shorter when negative), which
    moves what follows it on its line, and the continuation lines in ``realigned`` that were
    aligned with the opening parenthesis move with it.
    """

    call: ast.Call
    qualified_target: str  # e.g. "apex.optimizers.NpuFusedSGD"
    func_end: tuple[int, int]  # 1-based line and 0-based column where the callee ends
    shift: int = 0
    realigned: frozenset[int] = frozenset()

    def output_column(self, line: int, column: int) -> int:
        """Where 0-based ``column`` of ``line`` (original code) is once the call is rewritten."""
        end_line, end_column = self.func_end
        if line in self.realigned or (line == end_line and column >= end_column):
            return column + self.shift
        return column


def planned_fused(rule: Rule) -> Mapping[int, FusedPlan]:
    """NPU101's plan: id(constructor call) -> its rewrite (empty when NPU101 does not run)."""
    plans: Mapping[int, FusedPlan] = rule.context.facts.get(NPU101, {})
    return plans


def fused_name(rule: Rule, call: ast.Call) -> str | None:
    """The NPU fused optimizer ``call`` constructs, as written or as NPU101 will rewrite it."""
    plan = planned_fused(rule).get(id(call))
    if plan is not None:
        return plan.qualified_target
    return npu_fused_name(rule, call.func)


# -- amp.initialize's options and the opt-level switch -----------------------------------------

NPU102 = "NPU102"
OPT_LEVEL_OPTION = "opt-level"  # [tool.npu-migrate.rules.NPU102] opt-level = "O2"
NPU102_OPTIONS = (OPT_LEVEL_OPTION,)
OPT_LEVELS = ("O0", "O1", "O2", "O3")
FUSED_LEVELS = ("O1", "O2")  # where Ascend apex accepts NPU fused optimizers and combine_grad
DEFAULT_OPT_LEVEL = "O1"

# Positions in Ascend's `initialize(models, optimizers, enabled, opt_level, cast_model_type,
# patch_torch_functions, keep_batchnorm_fp32, master_weights, loss_scale, cast_model_outputs,
# num_losses, verbosity, dynamic_init_scale, scale_growth_factor, scale_backoff_factor,
# scale_window, min_loss_scale, max_loss_scale, combine_grad, combine_ddp, ddp_replica_count,
# user_cast_preferred, check_combined_tensors)`.
AMP_POSITIONS = {
    "enabled": 2,
    "opt_level": 3,
    "cast_model_type": 4,
    "patch_torch_functions": 5,
    "keep_batchnorm_fp32": 6,
    "master_weights": 7,
    "combine_grad": 18,
    "user_cast_preferred": 21,
    "check_combined_tensors": 22,
}
# Options Ascend apex refuses with a level (set to anything but None / a false value).
_O1_REFUSES = ("cast_model_type", "keep_batchnorm_fp32", "master_weights")
_O1_ONLY = ("patch_torch_functions", "user_cast_preferred")
_O1_O2_ONLY = ("combine_grad", "check_combined_tensors")


def requested_opt_level(options: Mapping[str, object]) -> str | None:
    """The ``opt-level`` of NPU102's options, validated; None when it is not set.

    Raises ValueError with the message a user sees for an unknown key or a bad value.
    """
    unknown = sorted(set(options) - set(NPU102_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown option(s) for {NPU102}: {', '.join(unknown)} "
            f"(known: {', '.join(NPU102_OPTIONS)})"
        )
    level = options.get(OPT_LEVEL_OPTION)
    if level is None:
        return None
    if level not in OPT_LEVELS:
        choices = ", ".join(f'"{choice}"' for choice in OPT_LEVELS)
        raise ValueError(
            f"{NPU102} option `{OPT_LEVEL_OPTION}` must be one of {choices} (the letter O, then "
            f"a digit), got {level!r}"
        )
    assert isinstance(level, str)
    return level


@dataclass(frozen=True)
class AmpOptions:
    """What one ``amp.initialize`` call asks for, as far as it can be read from the code, with
    NPU102's ``opt-level`` switch applied where NPU102 will apply it.

    ``level`` is the opt level the call runs with (``None``: computed at run time, ``level_code``
    says how, or hidden in ``**kwargs``); ``written_level`` the literal level as written (the
    default O1 when absent); ``switch`` the level NPU102 sets, when it changes the call, and
    ``switch_blocker`` why it does not, when the option asks for one it cannot set.
    """

    call: ast.Call
    level: str | None
    level_code: str | None
    written_level: str | None
    master_weights: object  # a literal value, NOT_LITERAL, or None when not passed
    master_code: str | None
    enabled: object  # a literal value, NOT_LITERAL, or True when not passed
    enabled_code: str | None
    starred: bool
    switch: str | None = None
    switch_blocker: str | None = None

    @property
    def disabled(self) -> bool:
        """``enabled=False``: amp.initialize returns its arguments untouched."""
        return self.enabled is False

    def refuses_fused(self) -> str | None:
        """Why Ascend apex refuses an NPU fused optimizer (either home) here, or None."""
        if self.disabled or self.level is None:
            return None
        if self.level not in FUSED_LEVELS:
            return (
                f"Ascend apex refuses NPU fused optimizers (from `apex.optimizers` and "
                f"`torch_npu.optim` alike) unless opt_level is O1 or O2, and this call uses "
                f"{self.level!r}"
            )
        if self.level == "O2" and self.master_weights is False:
            return (
                "with opt_level O2 Ascend apex needs master weights for NPU fused optimizers, "
                "and this call sets `master_weights=False`"
            )
        return None

    def run_time_notes(self, with_enabled: bool = True) -> list[str]:
        """What must hold at run time for an NPU fused optimizer to be accepted here; without
        the note on a run-time ``enabled=`` when the caller reports that on its own."""
        if self.disabled:
            return []
        if self.starred and self.level is None:
            return [
                "the arguments passed with `**` must select opt_level O1 or O2 (and master "
                "weights with O2), which Ascend apex requires for NPU fused optimizers"
            ]
        notes: list[str] = []
        if self.enabled is NOT_LITERAL and with_enabled:
            notes.append(
                f"warning: `{self.enabled_code}` decides at run time whether amp is enabled, and "
                "with amp disabled Ascend apex's fused optimizers refuse to step: use the "
                "`torch_npu.optim` version on that path"
            )
        if self.level is None:
            notes.append(
                f"`{self.level_code}` must be O1 or O2 at run time, the levels at which Ascend "
                "apex accepts NPU fused optimizers"
            )
        if self.level in ("O2", None) and self.master_weights is NOT_LITERAL:
            notes.append(
                "with opt_level O2, NPU fused optimizers need master weights: "
                f"`{self.master_code}` must not be False at run time"
            )
        return notes


def amp_options(rule: Rule, call: ast.Call) -> AmpOptions:
    """The options of ``amp.initialize`` call ``call`` (see :class:`AmpOptions`)."""
    cache: dict[int, AmpOptions] = rule.context.facts.setdefault(_AMP_OPTIONS_FACT, {})
    found = cache.get(id(call))
    if found is None:
        found = cache[id(call)] = _read_amp_options(rule, call)
    return found


_AMP_OPTIONS_FACT = "npu1:amp-options"


def _read_amp_options(rule: Rule, call: ast.Call) -> AmpOptions:
    return amp_options_requesting(rule, call, _requested_here(rule))


def amp_options_requesting(rule: Rule, call: ast.Call, requested: str | None) -> AmpOptions:
    """The options of ``call`` when NPU102's ``opt-level`` switch asks for ``requested`` (None:
    no switch), for a call in another file whose run settings are not this file's concern."""
    options = _written_amp_options(rule, call)
    if requested is None or (requested == options.written_level and not options.starred):
        return options
    blocker = _switch_blocker(rule, call, options, requested)
    if blocker is not None:
        return replace(options, switch_blocker=blocker)
    return replace(options, level=requested, switch=requested)


def requested_here(rule: Rule) -> str | None:
    """NPU102's ``opt-level`` for the file ``rule`` checks (None: no switch, or NPU102 does not
    run)."""
    return _requested_here(rule)


def _written_amp_options(rule: Rule, call: ast.Call) -> AmpOptions:
    starred = has_star(call)
    level_arg = _amp_argument(call, "opt_level")
    written = DEFAULT_OPT_LEVEL if level_arg is None else literal_value(level_arg.value)
    written_level = written if isinstance(written, str) else None
    level_code = code_of(rule, level_arg.value) if level_arg is not None else None
    master = _amp_argument(call, "master_weights")
    enabled = _amp_argument(call, "enabled")
    return AmpOptions(
        call=call,
        level=None if starred and level_arg is None else written_level,
        level_code=level_code,
        written_level=written_level,
        master_weights=literal_value(master.value) if master is not None else None,
        master_code=code_of(rule, master.value) if master is not None else None,
        enabled=literal_value(enabled.value) if enabled is not None else True,
        enabled_code=code_of(rule, enabled.value) if enabled is not None else None,
        starred=starred,
    )


def _requested_here(rule: Rule) -> str | None:
    """NPU102's ``opt-level``, when NPU102 runs on this file (otherwise nobody sets it)."""
    if NPU102 not in rule.context.selected:
        return None
    return requested_opt_level(rule.settings.options_for(NPU102))


def _amp_argument(call: ast.Call, name: str) -> Argument | None:
    return argument(call, name, AMP_POSITIONS.get(name))


def _switch_blocker(rule: Rule, call: ast.Call, options: AmpOptions, requested: str) -> str | None:
    """Why NPU102 cannot set ``opt_level=requested`` on ``call``, or None."""
    if options.starred:
        return "arguments passed with `*`/`**` may set `opt_level` themselves"
    if options.written_level is None:
        return f"its level is computed at run time (`{options.level_code}`)"
    if options.written_level not in OPT_LEVELS:
        return f"it passes {options.written_level!r}, which is not an opt level"
    conflicts: list[str] = []
    for name in AMP_POSITIONS:
        arg = _amp_argument(call, name)
        if arg is None:
            continue
        value = literal_value(arg.value)
        if value is None or value is False:
            continue
        written = f"`{name}={code_of(rule, arg.value)}`"
        if requested == "O1" and name in _O1_REFUSES:
            conflicts.append(f"{written} (Ascend apex refuses it with O1)")
        elif requested != "O1" and name in _O1_ONLY:
            conflicts.append(f"{written} (only allowed with O1)")
        elif requested not in FUSED_LEVELS and name in _O1_O2_ONLY:
            conflicts.append(f"{written} (only allowed with O1 or O2)")
        elif requested == "O2" and name == "master_weights" and value is not True:
            conflicts.append(f"{written} (NPU fused optimizers need master weights with O2)")
    if requested == "O2" and options.master_weights is False:
        conflicts = conflicts or ["`master_weights=False` (NPU fused optimizers need them)"]
    if conflicts:
        return f"the call also passes {', '.join(conflicts)}"
    return None


# -- the optimizer flow ------------------------------------------------------------------------


@dataclass(frozen=True)
class AmpSink:
    """An ``apex.amp.initialize`` call and the optimizers expression passed to it."""

    call: ast.Call
    optimizers: ast.expr | None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_FLOW_FACT = "npu1:optimizer-flow"  # the shared OptimizerFlow of one file's analysis


class OptimizerFlow:
    """Module-wide facts about optimizers, computed once per file from the original tree.

    ``origins(expr)`` are the expressions that may produce the value of ``expr``: it follows
    names through their assignments in the scope where they are read, ``self.<attr>`` through
    every assignment to that attribute in the module, list / tuple / dict / conditional
    expressions through their parts, subscripts to what they index, and calls of functions
    defined in this module through their ``return`` values. What cannot be followed (a
    parameter, a call into another module) is itself an origin.

    The rules of one file share one flow (:meth:`of`); what it computes depends only on the
    module, never on the rule that asks.
    """

    def __init__(self, rule: Rule) -> None:
        self.rule = rule  # the first rule that asks: names and text, never its findings
        self.index: ModuleIndex = rule.index
        self.reaching = ReachingDefinitions(rule.index)
        self.amp_sinks: list[AmpSink] = []
        self.ambiguous_amp: list[tuple[ast.Call, Ambiguous]] = []
        # Calls whose callee may be an optimizer, `FP16_Optimizer`, `amp.initialize` or an NPU
        # fused optimizer: what the NPU1xx rules examine (every call, with the filters off).
        self.candidates = [call for call in self.index.nodes(ast.Call) if self._candidate(call)]
        for call in self.candidates:
            name = rule.qualified_name_in(call.func, {AMP_INITIALIZE})
            if isinstance(name, Ambiguous):
                self.ambiguous_amp.append((call, name))
            elif name == AMP_INITIALIZE:
                arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
                self.amp_sinks.append(AmpSink(call, arg.value if arg is not None else None))
        self._sink_calls = {id(sink.call) for sink in self.amp_sinks}

    def _candidate(self, call: ast.Call) -> bool:
        rule, func = self.rule, call.func
        if isinstance(func, ast.Name):
            # Rule.may_name for a plain name, without building its arguments once per call.
            return not rule.context.fast or func.id in self._reaching
        wanted = may_end_with(rule, func, OPTIMIZER_LAST_NAMES)
        wanted = wanted or may_end_with(rule, func, _FUSED_PREFIX)
        return wanted and rule.may_name(func, NPU1_ROOTS)

    @property
    def reaching_names(self) -> frozenset[str] | Container[str]:
        """Identifiers of the file that may be bound to a name under torch, apex or torch_npu
        (every identifier with the candidate filters off)."""
        return self._reaching

    @cached_property
    def _reaching(self) -> frozenset[str] | Container[str]:
        return self.index.names_reaching(NPU1_ROOTS)

    @classmethod
    def of(cls, rule: Rule) -> OptimizerFlow:
        """The flow of the file ``rule`` is checking, built by the first NPU1xx rule that asks."""
        facts = rule.context.facts
        flow = facts.get(_FLOW_FACT)
        if not isinstance(flow, OptimizerFlow):
            flow = facts[_FLOW_FACT] = cls(rule)
        return flow

    # -- what reaches amp.initialize -----------------------------------------------------------

    @cached_property
    def reaches_amp(self) -> dict[int, ast.Call]:
        """id(constructor call) -> the first ``amp.initialize`` call its optimizer reaches."""
        return {key: calls[0] for key, calls in self.amp_calls_reached.items()}

    @cached_property
    def amp_calls_reached(self) -> dict[int, list[ast.Call]]:
        """id(constructor call) -> every ``amp.initialize`` call its optimizer reaches, in
        source order (never one that runs only where the constructor does not)."""
        reached: dict[int, list[ast.Call]] = {}
        for sink in self.amp_sinks:
            if sink.optimizers is None:
                continue
            for origin in self.origins(sink.optimizers):
                if isinstance(origin, ast.Call) and not self.exclusive(sink.call, origin):
                    calls = reached.setdefault(id(origin), [])
                    if sink.call not in calls:
                        calls.append(sink.call)
        return reached

    def is_amp_initialize(self, call: ast.Call) -> bool:
        return id(call) in self._sink_calls

    # -- conditions ------------------------------------------------------------------------------

    def condition_only_for(self, node: ast.AST, other: ast.AST) -> str | None:
        """The `if` condition under which ``node`` runs that does not also guard ``other``.

        ``"`args.fp16` holds"`` or ``"`args.fp32` is false"`` (an ``else`` branch), else None.
        """
        guard = self.guard_only_for(node, other)
        if guard is None:
            return None
        test, in_body = guard
        return f"`{test}` holds" if in_body else f"`{test}` is false"

    def guard_only_for(self, node: ast.AST, other: ast.AST) -> tuple[str, bool] | None:
        """The innermost `if` test (as written) under which ``node`` runs and ``other`` need
        not, and whether ``node`` is in its body (True) or its ``else`` part (False)."""
        # Two `if args.fp16:` blocks guard alike: compare the conditions, not the statements.
        guards_of_other = {(self._test(guard), in_body) for guard, in_body in self._guards(other)}
        for guard, in_body in self._guards(node):
            test = self._test(guard)
            if (test, in_body) not in guards_of_other:
                return test, in_body
        return None

    def exclusive(self, node: ast.AST, other: ast.AST) -> bool:
        """``node`` runs only where ``other`` does not: opposite branches of the same condition
        (`if args.fp16:` ... `else:` ...), compared by the condition's text."""
        branches = {(self._test(guard), in_body) for guard, in_body in self._guards(other)}
        return any(
            (self._test(guard), not in_body) in branches for guard, in_body in self._guards(node)
        )

    def _test(self, guard: ast.If) -> str:
        return code_of(self.rule, guard.test)

    def _guards(self, node: ast.AST) -> Iterator[tuple[ast.If, bool]]:
        """Enclosing `if` statements of the same function (innermost first) and whether
        ``node`` is in the body (rather than in the ``else``/``elif`` part)."""
        child = node
        for parent in self.index.ancestors(node):
            if isinstance(parent, _FUNCTIONS):
                return
            if isinstance(parent, ast.If) and child is not parent.test:
                yield parent, any(statement is child for statement in parent.body)
            child = parent

    # -- origins ---------------------------------------------------------------------------------

    def origins(self, expr: ast.expr) -> list[ast.expr]:
        found: list[ast.expr] = []
        self._follow(expr, found, set())
        return found

    def _follow(self, expr: ast.expr, found: list[ast.expr], seen: set[int]) -> None:
        if id(expr) in seen:
            return
        seen.add(id(expr))
        for part in self._sources_of(expr):
            if part is expr:
                found.append(expr)
            else:
                self._follow(part, found, seen)

    def _sources_of(self, expr: ast.expr) -> Iterator[ast.expr]:
        """The expressions one step upstream of ``expr``; ``expr`` itself when it is an origin."""
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            for element in expr.elts:
                yield element.value if isinstance(element, ast.Starred) else element
        elif isinstance(expr, ast.Dict):
            entries = zip(expr.keys, expr.values, strict=True)
            yield from (value for key, value in entries if key is not None)
        elif isinstance(expr, ast.IfExp):
            yield expr.body
            yield expr.orelse
        elif isinstance(expr, (ast.Subscript, ast.NamedExpr)):
            yield expr.value
        elif isinstance(expr, ast.Name):
            yield from self._name_sources(expr)
        elif isinstance(expr, ast.Attribute):
            yield from self._attribute_sources(expr)
        elif isinstance(expr, ast.Call):
            yield from self._call_sources(expr)
        else:
            yield expr

    def _name_sources(self, name: ast.Name) -> Iterator[ast.expr]:
        """The values assigned to ``name`` that reach this read, in program order
        (:mod:`migrator.analysis.flow`); every binding of the name in its scope where order
        cannot be used (a closure, ``global``)."""
        definitions = self.reaching.of_name(name)
        if definitions is None:
            definitions = [binding.node or ENTRY for binding in self.index.bindings_of(name)]
        yield from self._definition_sources(name, definitions)

    def _definition_sources(self, read: ast.expr, definitions: list[ast.AST]) -> Iterator[ast.expr]:
        values: list[ast.expr] = []
        opaque = False
        for definition in definitions:
            assigned = (
                self._assigned_values(definition)
                if isinstance(definition, (ast.Name, ast.Attribute))
                else None
            )
            if assigned is None:
                opaque = True  # a parameter, an import, a def, a `for` target, a builtin...
            else:
                values.extend(assigned)
        if opaque or not definitions:
            yield read
        yield from values

    def _assigned_values(self, target: ast.Name | ast.Attribute) -> list[ast.expr] | None:
        """What an assignment to ``target`` stores there; ``None`` when it cannot be told.

        Unpacking is followed element by element: ``a, b = x, y`` gives ``b`` the value ``y``,
        and ``model, optimizer = amp.initialize(model, optimizer)`` (directly, or through
        ``amp_inits = amp.initialize(...)``) gives ``optimizer`` the optimizers passed in.
        """
        parent = self.index.parent(target)
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            return [parent.value] if parent.value is not None else None
        path: list[int] = []
        node: ast.AST = target
        while isinstance(parent, (ast.Tuple, ast.List)):
            path.append(next(i for i, e in enumerate(parent.elts) if e is node))
            node, parent = parent, self.index.parent(parent)
        if not isinstance(parent, ast.Assign) or not path:
            return None  # a `for` / `with` target, an augmented assignment...
        if any(isinstance(e, ast.Starred) for e in ast.walk(node)):
            return None
        path.reverse()
        return self._unpacked(parent.value, path)

    def _unpacked(self, value: ast.expr, path: list[int]) -> list[ast.expr] | None:
        """The element at ``path`` of what ``value`` gives when unpacked, or None."""
        position, rest = path[0], path[1:]
        if isinstance(value, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            if position >= len(value.elts):
                return None
            element = value.elts[position]
            return self._unpacked(element, rest) if rest else [element]
        if isinstance(value, ast.Call) and self.is_amp_initialize(value):
            # `(models, optimizers)` out, in the shape they went in: the optimizers part may
            # be reached; the models part never holds an optimizer.
            if position != 1:
                return []
            arg = argument(value, "optimizers", AMP_OPTIMIZERS_POSITION)
            return [arg.value] if arg is not None else []
        if isinstance(value, ast.Name):
            definitions = self.reaching.of_name(value)
            if definitions is None or not definitions:
                return None
            found: list[ast.expr] = []
            for definition in definitions:
                if not isinstance(definition, ast.Name):
                    return None
                assigned = self._assigned_values(definition)
                if assigned is None:
                    return None
                for item in assigned:
                    unpacked = self._unpacked(item, path)
                    if unpacked is None:
                        return None
                    found.extend(unpacked)
            return found
        return None

    def _call_sources(self, call: ast.Call) -> Iterator[ast.expr]:
        if self.is_amp_initialize(call):
            # `amp_inits = amp.initialize(...)`: the optimizers come back out.
            arg = argument(call, "optimizers", AMP_OPTIMIZERS_POSITION)
            if arg is not None:
                yield arg.value
            return
        callee = call.func
        local_function = None
        if isinstance(callee, ast.Name):
            local_function = callee.id
        elif isinstance(callee, ast.Attribute):
            local_function = callee.attr  # `self.build_optimizer(...)`
        returns = self._returns
        # Only calls that resolve to no import can be this module's functions.
        if local_function in returns and self.rule.qualified_name(callee) is None:
            yield from returns[local_function]
        else:
            yield call

    @cached_property
    def _returns(self) -> dict[str, list[ast.expr]]:
        """Function name -> the values its ``return`` statements give (any function so named)."""
        returns: dict[str, list[ast.expr]] = {}
        for statement in self.index.nodes(ast.Return):
            if statement.value is None:
                continue
            function = next(
                (a for a in self.index.ancestors(statement) if isinstance(a, _FUNCTIONS)), None
            )
            if function is not None:
                returns.setdefault(function.name, []).append(statement.value)
        return returns

    def _attribute_sources(self, read: ast.Attribute) -> Iterator[ast.expr]:
        """``self.optimizer``: the assignments of its own function that reach the read, in
        program order; when the value may come from before the function started, also every
        assignment to an attribute spelled so in the rest of the module (another method)."""
        dotted = full_name(read)
        function = self._function_of(read)
        local = self.reaching.of_attribute(read, function) if dotted else None
        if local is None:
            local = [ENTRY]
        definitions = [d for d in local if d is not ENTRY]
        if ENTRY in local:
            definitions += [
                target
                for target in self._attribute_targets.get(dotted or "", [])
                if self._function_of(target) is not function
            ]
        if not definitions:
            yield read
            return
        yield from self._definition_sources(read, definitions)

    def _function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function around ``node``, or the module."""
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _FUNCTIONS):
                return ancestor
        return self.index.tree

    @cached_property
    def _attribute_targets(self) -> dict[str, list[ast.Attribute]]:
        """``self.optimizer`` -> every attribute spelled so that is assigned to (unpacking
        included), in source order."""
        targets: dict[str, list[ast.Attribute]] = {}
        for attribute in self._stored_attributes():
            dotted = full_name(attribute)
            if dotted is not None:
                targets.setdefault(dotted, []).append(attribute)
        return targets

    def _stored_attributes(self) -> Iterator[ast.Attribute]:
        assignments: list[ast.Assign | ast.AnnAssign] = [*self.index.nodes(ast.Assign)]
        assignments += self.index.nodes(ast.AnnAssign)
        assignments.sort(key=source_order)
        for statement in assignments:
            if statement.value is None:
                continue
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            stack = list(reversed(targets))
            while stack:
                target = stack.pop()
                if isinstance(target, ast.Attribute):
                    yield target
                elif isinstance(target, (ast.Tuple, ast.List)):
                    stack.extend(reversed(target.elts))
