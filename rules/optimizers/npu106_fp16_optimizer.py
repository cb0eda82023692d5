"""NPU106: apex's `FP16_Optimizer` wrapper -> `amp.initialize(..., opt_level="O2")`."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from migrator.analysis.calls import arguments
from migrator.analysis.index import line_of
from migrator.edits import Edit
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._flow import npu_fused_name
from migrator.rules.optimizers._fp16 import (
    DYNAMIC,
    TRIGGER,
    Fp16Site,
    HalfCast,
    Use,
    ambiguous_wrappers,
    brief,
    fp16_sites,
    iter_edit_uses,
)
from migrator.rules.optimizers._plans import (
    Fp16Rewrite,
    Fp16Rewrites,
    OptLevelSwitch,
    switched_level,
)

LINE_LIMIT = 100
SCALED_LOSS = "scaled_loss"


class Fp16Optimizer(Rule):
    """
    ## What it does
    Rewrites NVIDIA apex's `apex.fp16_utils.FP16_Optimizer` (fp32 master weights for a model cast
    with `model.half()`, loss scaling in `optimizer.backward(loss)`) into the amp O2 that does
    the same:

    - `optimizer = FP16_Optimizer(inner, static_loss_scale=S)` becomes
      `model, optimizer = amp.initialize(model, inner, opt_level="O2",
      keep_batchnorm_fp32=False, loss_scale=S)` in its place (`loss_scale=1.0` when neither
      scale is given, FP16_Optimizer's default; `"dynamic"` for `dynamic_loss_scale=True`;
      `"dynamic" if flag else S` for `dynamic_loss_scale=flag`); `dynamic_loss_args` keys map
      to Ascend's `dynamic_init_scale`, `scale_window`, `min_loss_scale`, `max_loss_scale`;
      `verbose` is dropped. `combine_grad=True` is added when the wrapped optimizer is written
      NPU fused (NPU102 adds it in the same run when NPU101 makes it Ascend apex's fused one:
      NPU101 plans the optimizers of the wrappers rewritten here for amp O2);
    - `model.half()` (the statement, or `.half()` in `model = Net().cuda().half()`) is removed:
      amp O2 casts the model, and `keep_batchnorm_fp32=False` casts batchnorm too, as `.half()`
      did. An `if` left empty by the removal goes with it (a `pass` stays where it has an `else`
      or a test with calls);
    - `optimizer.backward(loss)` becomes `with amp.scale_loss(loss, optimizer) as scaled_loss:
      scaled_loss.backward()` (`retain_graph=` kept);
    - `optimizer.clip_master_grads(max_norm)` becomes
      `torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), max_norm)`;
    - `step()`, `zero_grad()` and `param_groups` mean the same after the rewrite and stay.

    `amp` is the file's `from apex import amp` when it has one, else `apex.amp` with `import
    apex`. The wrapper is rewritten only when all of this holds: it is assigned to a name; the
    wrapped optimizer is a constructor call (passed directly, or through a name used nowhere
    else); its parameters come from one model of the same function (`model.parameters()`,
    `model.named_parameters()`, through local names as in BERT's `no_decay` groups); that model
    is cast with `.half()` once, before the wrapper, in the same loop and under no condition the
    wrapper does not share; nothing rebinds, wraps in DDP/DataParallel or recasts the model in
    between; and every use of the wrapper in the function is one of the above. Anything else is
    reported with the recipe filled in for the call (the loss-scale arguments it would get), and
    the reason: `network_to_half` / `FP16Model` (they change the model's state-dict keys),
    `state_dict()` / `load_state_dict()` (FP16_Optimizer's checkpoints hold its scaler and
    masters), `update_master_grads()`, `step(closure)`, `loss_scale` reads, a wrapper used as a
    value or in a nested function, an unreadable `dynamic_loss_args`.

    `apex.optimizers.FP16_Optimizer` / `apex.contrib.optimizers.FP16_Optimizer` (the cut-down
    wrapper of apex's pre-2019 `FusedAdam(..., max_grad_norm=...)`, BERT's fine-tuning scripts)
    are reported with their own recipe: their FusedAdam has no NPU version.

    ## Why
    FP16_Optimizer checks for `torch.cuda.HalfTensor` parameters and needs apex's CUDA
    extension: it does not run on Ascend, where amp O2 is the same algorithm, and the NPU fused
    optimizers get their mixed precision from `amp.initialize`.

    ## Example
    ```python
    model = Net().cuda().half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer = FP16_Optimizer(optimizer, static_loss_scale=128.0)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x).float(), y)
        optimizer.backward(loss)
        optimizer.step()
    ```

    ## Use instead
    ```python
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O2", keep_batchnorm_fp32=False, loss_scale=128.0
    )
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x).float(), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    Safe where the arithmetic is the same: fp16 model (batchnorm included), fp32 master weights
    for every fp16 parameter, `loss.float() * scale` backward, overflow check, unscaled fp32
    master gradients, the wrapped optimizer stepping on the masters, and the same loss-scale
    schedule (FP16_Optimizer uses amp's own scaler since apex of February 2019: start 2**16,
    halve on overflow, double after 2000 clean steps, cap 2**24; Ascend's defaults are the
    same). Two things amp O2 does differently make a rewrite unsafe (applied only with
    `--unsafe-fixes`, reported otherwise with the reason): a loss computed in the training loop
    from the model's outputs without `.float()` (amp returns them as fp32, so that code runs in
    fp32 instead of fp16), and gradient accumulation or several `backward` calls per step (amp
    sums them in the fp32 master gradients, FP16_Optimizer in the fp16 model gradients). amp
    O2 also casts the model's floating inputs to fp16; a model that was fed fp32 inputs under
    `model.half()` fails on its first fp16 layer, unless it casts them itself. Checkpoints
    differ: save `amp.state_dict()` as well. With apex older than February 2019 the dynamic
    schedule was different (start 2**32, window 1000, floor 1): pass those numbers to
    `amp.initialize` if you trained with one.
    """

    CODE = "NPU106"
    NAME = "fp16-optimizer"
    SUMMARY = "apex `FP16_Optimizer` wrapper (fp16 model with fp32 master weights)"
    FIX_SAFETY = FixSafety.SAFE
    TRIGGER = TRIGGER
    # NPU101 plans the wrapped optimizers for the new amp.initialize, NPU102 adds combine_grad
    # to it when they become NPU fused.
    PROVIDES = (Fp16Rewrites,)
    # NPU102's opt-level switch would change the level this rule writes on a second pass.
    READS = (OptLevelSwitch,)

    def check(self) -> None:
        self.rewrites: dict[int, Fp16Rewrite] = {}
        for call, ambiguous in ambiguous_wrappers(self.view):
            self.report(
                call,
                f"cannot tell whether this is apex's `FP16_Optimizer`: {ambiguous.describe()}; "
                "npu-migrate only rewrites names with a single origin",
            )
        sites = fp16_sites(self.view)
        for group in _groups(sites):
            self._examine(group)
        self.publish(Fp16Rewrites(self.rewrites))

    # -- deciding --------------------------------------------------------------------------------

    def _examine(self, group: list[Fp16Site]) -> None:
        for site in group:
            if site.old_api:
                self.report(site.call, _old_api_message(site))
                return
        refusal = self._refusal(group)
        if refusal is not None:
            for site in group:
                self.report(site.call, _recipe(site, refusal))
            return
        suppressed = [line for line in self._lines(group) if self._line_suppressed(line)]
        if suppressed:
            for site in group:
                if not self._line_suppressed(line_of(site.call)):
                    self.report(
                        site.call,
                        _recipe(
                            site,
                            f"line {suppressed[0]}, which the rewrite changes, is suppressed",
                        ),
                    )
            return
        self._rewrite(group)

    def _refusal(self, group: list[Fp16Site]) -> str | None:
        """Why the group is reported rather than rewritten, or None."""
        for site in group:
            if site.blockers:
                if len(group) > 1 and site is not group[0]:
                    return f"{site.blockers[0]} (for the wrapper at line {line_of(site.call)})"
                return site.blockers[0]
        differences = [d for site in group for d in site.differences]
        if differences and not self.settings.unsafe_fixes:
            return (
                f"amp O2 would train differently here: {'; '.join(dict.fromkeys(differences))} "
                "(--unsafe-fixes rewrites it anyway)"
            )
        level = switched_level(self)
        if level not in (None, "O2"):
            return (
                f'NPU102\'s `opt-level = "{level}"` asks for another level than O2, the one '
                "FP16_Optimizer's arithmetic needs"
            )
        return None

    def _lines(self, group: list[Fp16Site]) -> list[int]:
        lines: set[int] = set()
        for site in group:
            lines.add(line_of(site.call))
            lines.update(line_of(cast.statement) for cast in site.casts)
            lines.update(line_of(use.statement) for use in iter_edit_uses(site))
        return sorted(lines)

    def _line_suppressed(self, line: int) -> bool:
        return self.context.suppressions.covers(line, self.CODE)

    # -- rewriting -------------------------------------------------------------------------------

    def _rewrite(self, group: list[Fp16Site]) -> None:
        done: set[int] = set()
        casts: list[HalfCast] = []
        for site in group:
            assert site.inner_call is not None and site.statement is not None
            assert site.model is not None and site.optimizer is not None
            fused = npu_fused_name(self.view, site.inner_call.func) is not None
            if not self.fix(site.call, _fixed_message(site, fused), *self._amp_edits(site, fused)):
                continue
            self.rewrites[id(site.call)] = Fp16Rewrite(
                site.call, site.inner_call, site.model, site.optimizer
            )
            for cast in site.casts:
                if id(cast.call) not in done:
                    done.add(id(cast.call))
                    casts.append(cast)
            for use in iter_edit_uses(site):
                assert use.call is not None
                if id(use.call) in done:
                    continue
                done.add(id(use.call))
                if use.kind == "backward":
                    self.fix(
                        use.call,
                        f"`{brief(self.view, use.call)}` -> `with {site.amp}.scale_loss(...) as "
                        f"{self._scaled_name()}: {self._scaled_name()}.backward()` (NPU106, see "
                        f"line {line_of(site.call)})",
                        self._backward_edit(site, use),
                    )
                else:
                    self.fix(
                        use.call,
                        f"`{brief(self.view, use.call)}` -> `{site.torch}.nn.utils."
                        f"clip_grad_norm_({site.amp}.master_params({site.optimizer}), ...)` "
                        f"(NPU106, see line {line_of(site.call)})",
                        self._clip_edit(site, use),
                    )
                    self.add_import("torch")
            if site.amp == "apex.amp":
                self.add_import("apex", after="apex")
            self._release_wrapper_import(site)
        for cast in casts:
            self.fix(
                cast.call,
                f"removed `.half()` from `{brief(self.view, cast.statement)}`: amp O2 casts the "
                f"model (NPU106, see line {line_of(group[0].call)})",
                self._cast_edit(cast),
            )

    def _scaled_name(self) -> str:
        """``scaled_loss``, or a variant that no name of the file uses."""
        taken = self.index.identifiers()
        name, number = SCALED_LOSS, 1
        while name in taken:
            number += 1
            name = f"{SCALED_LOSS}{number}"
        return name

    def _release_wrapper_import(self, site: Fp16Site) -> None:
        """The import that bound the wrapper's name (``from apex.fp16_utils import
        FP16_Optimizer``, ``import apex.fp16_utils as fp16``) goes when nothing uses it."""
        base = site.call.func
        while isinstance(base, ast.Attribute):
            base = base.value
        if not isinstance(base, ast.Name):
            return
        for binding in self.index.bindings_of(base):
            statement, alias = binding.node, binding.alias
            if alias is None:
                continue
            if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                self.remove_import_if_unused(statement.module, alias.name, alias.asname)
            elif isinstance(statement, ast.Import) and alias.asname is not None:
                self.remove_import_if_unused(alias.name, None, alias.asname)

    # -- edits -----------------------------------------------------------------------------------

    def _amp_edits(self, site: Fp16Site, fused: bool) -> list[Edit]:
        """``optimizer = FP16_Optimizer(inner, ...)`` -> ``model, optimizer =
        amp.initialize(model, inner, ...)``: one edit of the target, one of the call (so that
        a later rule can edit the new call as it edits any other)."""
        assert site.statement is not None and site.inner is not None
        assert site.model is not None and site.optimizer is not None
        model, optimizer, amp = site.model, site.optimizer, site.amp
        inner_keyword = site.inner.keyword
        inner_position = site.inner.index
        quote = self._quote()
        keywords = [
            ("opt_level", f"{quote}O2{quote}"),
            ("keep_batchnorm_fp32", "False"),
            *site.scale_keywords(quote),
        ]
        if fused:
            keywords.append(("combine_grad", "True"))
        target = site.statement.targets[0]
        prefix = f"{model}, {optimizer} = "
        indent = self.source.column(site.statement.lineno, site.statement.col_offset)

        def retarget(name: cst.Name) -> cst.Tuple:
            return cst.Tuple(
                [
                    cst.Element(
                        cst.Name(model),
                        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                    ),
                    cst.Element(name),
                ],
                lpar=[],
                rpar=[],
            )

        def initialize(call: cst.Call) -> cst.BaseExpression:
            args = call.args
            if inner_keyword is not None:
                inner = next(a for a in args if a.keyword and a.keyword.value == inner_keyword)
            else:
                inner = args[inner_position]
            inner_code = cst.Module([]).code_for_node(inner.value)
            values = [model, inner_code, *[f"{name}={code}" for name, code in keywords]]
            text = _layout(f"{amp}.initialize(", values, ")", indent, indent + len(prefix))
            return cst.parse_expression(text).with_changes(lpar=call.lpar, rpar=call.rpar)

        return [
            self.replace(target, cst.Name, retarget),
            self.replace(site.call, cst.Call, initialize),
        ]

    def _backward_edit(self, site: Fp16Site, use: Use) -> Edit:
        assert use.call is not None
        amp, optimizer, scaled = site.amp, site.optimizer, self._scaled_name()
        retain = self.view.written(use.retain_graph) if use.retain_graph is not None else None
        unit = self._indent_unit(use.statement)
        loss_position = next(arg.index for arg in arguments(use.call) if arg.value is use.loss)

        def rewrite(line: cst.SimpleStatementLine) -> cst.BaseStatement:
            expression = line.body[0]
            assert isinstance(expression, cst.Expr) and isinstance(expression.value, cst.Call)
            loss = cst.Module([]).code_for_node(expression.value.args[loss_position].value)
            backward = (
                f"{scaled}.backward(retain_graph={retain})" if retain else f"{scaled}.backward()"
            )
            text = f"with {amp}.scale_loss({loss}, {optimizer}) as {scaled}:\n{unit}{backward}\n"
            statement = cst.parse_statement(text)
            assert isinstance(statement, cst.With)
            body = statement.body
            assert isinstance(body, cst.IndentedBlock)
            inner = body.body[0]
            assert isinstance(inner, cst.SimpleStatementLine)
            inner = inner.with_changes(trailing_whitespace=line.trailing_whitespace)
            return statement.with_changes(
                leading_lines=line.leading_lines, body=body.with_changes(body=[inner])
            )

        return self.replace_statement(use.statement, rewrite)

    def _clip_edit(self, site: Fp16Site, use: Use) -> Edit:
        assert use.call is not None
        head = f"{site.torch}.nn.utils.clip_grad_norm_"
        masters = f"{site.amp}.master_params({site.optimizer})"

        def rewrite(call: cst.Call) -> cst.Call:
            first = cst.Arg(
                cst.parse_expression(masters),
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
            )
            return call.with_changes(func=cst.parse_expression(head), args=[first, *call.args])

        return self.replace(use.call, cst.Call, rewrite)

    def _cast_edit(self, cast: HalfCast) -> Edit:
        if not cast.whole:

            def drop_half(call: cst.Call) -> cst.BaseExpression:
                assert isinstance(call.func, cst.Attribute)
                return call.func.value

            return self.replace(cast.call, cst.Call, drop_half)
        holder = self._emptied_if(cast.statement)
        if holder is not None:
            return self.replace_statement(holder, lambda node: cst.RemoveFromParent())
        if self._only_statement(cast.statement):
            return self.replace_statement(
                cast.statement,
                lambda line: line.with_changes(body=[cst.Pass()]),
            )
        return self.replace_statement(cast.statement, lambda node: cst.RemoveFromParent())

    def _emptied_if(self, statement: ast.stmt) -> ast.If | None:
        """The ``if`` that has nothing but ``statement`` in its body and no ``else``, when its
        test can go (no call in it)."""
        parent = self.index.parent(statement)
        if not (isinstance(parent, ast.If) and parent.body == [statement] and not parent.orelse):
            return None
        if any(
            isinstance(node, (ast.Call, ast.NamedExpr, ast.Await)) for node in ast.walk(parent.test)
        ):
            return None
        grand = self.index.parent(parent)
        if isinstance(grand, ast.If) and grand.orelse == [parent]:
            return None  # an `elif`: removing it would change the chain
        if self._only_statement(parent):
            return None
        return parent

    def _only_statement(self, statement: ast.stmt) -> bool:
        parent = self.index.parent(statement)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(parent, field, None)
            if isinstance(body, list) and any(s is statement for s in body):
                return len(body) == 1 and not isinstance(parent, ast.Module)
        for handler in getattr(parent, "handlers", []):
            if statement in handler.body:
                return len(handler.body) == 1
        return False

    # -- layout ----------------------------------------------------------------------------------

    def _quote(self) -> str:
        """The file's usual string quote: the one most of its string literals use."""
        single = double = 0
        text = self.source.text
        for constant in self.index.nodes(ast.Constant):
            if isinstance(constant.value, str):
                first = text[self.source.start(constant)].lower()
                single += first == "'"
                double += first == '"'
        return "'" if single > double else '"'

    def _indent_unit(self, statement: ast.stmt) -> str:
        """The indentation a block adds in this file, measured at ``statement``'s own block."""
        parent = self.index.parent(statement)
        own = self.source.column(statement.lineno, statement.col_offset)
        if isinstance(parent, ast.stmt):
            outer = self.source.column(parent.lineno, parent.col_offset)
            if own > outer:
                return " " * (own - outer)
        return "    "


def _groups(sites: Sequence[Fp16Site]) -> list[list[Fp16Site]]:
    """Sites that share a ``model.half()`` are rewritten together or not at all."""
    groups: list[list[Fp16Site]] = []
    by_cast: dict[int, list[Fp16Site]] = {}
    for site in sites:
        shared = next((by_cast[id(c.call)] for c in site.casts if id(c.call) in by_cast), None)
        if shared is None:
            shared = []
            groups.append(shared)
        shared.append(site)
        for cast in site.casts:
            by_cast[id(cast.call)] = shared
    return groups


def _layout(head: str, values: list[str], tail: str, indent: int, start: int) -> str:
    """``head`` + arguments + ``tail``, starting at column ``start`` of a statement indented
    by ``indent``: on one line when it fits in the line limit, else the arguments on one
    indented line, else one argument per line.

    Continuation lines are written relative to the statement: libcst adds the indentation of
    the block the statement lands in.
    """
    one_line = head + ", ".join(values) + tail
    if start + len(one_line) <= LINE_LIMIT and "\n" not in one_line:
        return one_line
    middle = ", ".join(values)
    if indent + 4 + len(middle) <= LINE_LIMIT and "\n" not in middle:
        return f"{head}\n    {middle}\n{tail}"
    lines = "".join(f"    {value},\n" for value in values)
    return f"{head}\n{lines}{tail}"


def _scale_text(site: Fp16Site) -> str:
    return ", ".join(f"{name}={code}" for name, code in site.scale_keywords()) or "loss_scale=..."


def _recipe(site: Fp16Site, reason: str) -> str:
    model = site.model or "model"
    optimizer = site.optimizer or "optimizer"
    amp = site.amp
    return (
        f"`FP16_Optimizer` is not rewritten: {reason}. By hand: build the optimizer unwrapped, "
        f"remove `{model}.half()` (amp O2 casts the model), call `{model}, {optimizer} = "
        f'{amp}.initialize({model}, {optimizer}, opt_level="O2", keep_batchnorm_fp32=False, '
        f"{_scale_text(site)})` before any DDP wrapper, and replace `{optimizer}.backward(loss)` "
        f"with `with {amp}.scale_loss(loss, {optimizer}) as scaled_loss: scaled_loss.backward()` "
        f"and `{optimizer}.clip_master_grads(n)` with `torch.nn.utils.clip_grad_norm_("
        f"{amp}.master_params({optimizer}), n)`"
    )


def _old_api_message(site: Fp16Site) -> str:
    return (
        f"`{site.qualified}` is not rewritten: it is the cut-down wrapper of apex's pre-2019 "
        "`FusedAdam` (fused `max_grad_norm` clipping, `step(grads=..., output_params=..., "
        "scale=...)`), which has no NPU version. By hand: remove `model.half()`, build "
        "`NpuFusedAdamW` (decoupled weight decay; note that the old kernel applied bias "
        "correction, when on, to the weight decay and eps too, and that `bias_correction=False` "
        "has no NPU equivalent), call `model, optimizer = amp.initialize(model, optimizer, "
        'opt_level="O2", keep_batchnorm_fp32=False, loss_scale=...)` before any DDP wrapper, '
        "replace `optimizer.backward(loss)` with `amp.scale_loss`, and clip with "
        "`torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), max_grad_norm)` before "
        "`step()`. Its dynamic loss scale starts at 2**16, doubles after 1000 steps without "
        'overflow and never drops below 1: pass `loss_scale="dynamic", dynamic_init_scale=2.**16, '
        "scale_window=1000, min_loss_scale=1.0` to keep that schedule"
    )


def _fixed_message(site: Fp16Site, fused: bool) -> str:
    notes = [
        f'replaced `FP16_Optimizer` with `{site.amp}.initialize(..., opt_level="O2", '
        f"keep_batchnorm_fp32=False, {_scale_text(site)})`: amp O2 keeps fp32 master weights "
        "for the fp16 model and scales the loss as FP16_Optimizer did"
    ]
    if any(name == "loss_scale" and DYNAMIC in code for name, code in site.scale):
        notes.append(
            "dynamic scaling follows amp's schedule, which FP16_Optimizer uses since apex of "
            "February 2019 (2**16 at start, doubled after 2000 clean steps, at most 2**24)"
        )
    if fused:
        notes.append("added `combine_grad=True` for the NPU fused optimizer")
    if site.differences:
        notes.append("unsafe: " + "; ".join(dict.fromkeys(site.differences)))
    return "; ".join(notes)
