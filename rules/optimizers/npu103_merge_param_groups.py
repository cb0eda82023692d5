"""NPU103: parameter groups of an NPU fused optimizer that share all hyper-parameters."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from migrator.analysis.calls import argument, arguments, literal_value
from migrator.analysis.index import line_of, start_of
from migrator.analysis.names import Ambiguous
from migrator.analysis.scopes import Binding, BindingKind
from migrator.diagnostics import Severity
from migrator.edits import Change
from migrator.lazy_imports import cst
from migrator.rule import FixSafety, Rule
from migrator.rules.optimizers._flow import OptimizerFlow, fused_name
from migrator.rules.optimizers._plans import FusedPlans, planned
from migrator.rules.optimizers._tables import NPU_FUSED, OPTIMIZER_TRIGGER

PARAMS = "params"
LINE_LENGTH = 100  # a merged `params` longer than this is written one `+ part` per line

# Expression nodes whose evaluation has no side effect and whose source text fixes their value
# for the duration of the constructor call.
_PURE_NODES = (
    ast.Expression,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Constant,
    ast.BinOp,
    ast.UnaryOp,
    ast.Tuple,
    ast.operator,
    ast.unaryop,
)
# `params` values that may be a single tensor, which `list(...)` would split into rows.
_MAYBE_ONE_TENSOR = (ast.Name, ast.Attribute, ast.Subscript)
_LIST_MUTATORS = frozenset({"append", "extend", "insert"})
# Calls that copy an iterable of parameters into a list or tuple of the same parameters.
_COPIES = frozenset({"builtins.list", "builtins.tuple"})
# How many names and wrappers deep `_holds_parameters` follows a value.
_PARAMETERS_DEPTH = 6
# Parts of the names of functions that build parameter groups (`get_params_groups`,
# `param_groups_weight_decay`, timm's `add_weight_decay`): their result is reported, not read.
_GROUP_BUILDERS = ("group", "weight_decay")


@dataclass
class Group:
    """One element of a list of parameter groups."""

    index: int
    element: ast.expr
    signature: frozenset[tuple[str, str]] | None = None  # hyper-parameters, None: not comparable
    params_may_be_tensor: bool = False
    params_item: int = -1  # position of the 'params' entry among the dict's entries
    params: ast.expr | None = None

    @property
    def mergeable(self) -> bool:
        return self.signature is not None and not self.params_may_be_tensor


@dataclass
class Merge:
    """Groups of one list merged into the first of them."""

    members: list[Group]
    message: str = ""
    wrap_column: int | None = None  # where `+ part` lines start when the merge is too long


@dataclass
class ListPlan:
    groups_list: ast.List
    merges: list[Merge] = field(default_factory=list)


class MergeParamGroups(Rule):
    """
    ## What it does
    In the constructor of an NPU fused optimizer whose params argument is a list literal of dict
    literals (or a name bound once, in the same scope, to such a list and used nowhere else),
    merges the groups whose keys other than `'params'` are the same with the same values. Values
    are compared as source expressions, and only when they have no side effects (names,
    attributes, constants, arithmetic, subscripts of names); a group containing a call or
    anything else is never merged. The merged group takes the place of its first member and its
    params become `list(a) + list(b) + ...`. Groups built in loops or comprehensions, extended
    lists and `add_param_group` calls with equal options are reported instead; a list built the
    same ways from a model's parameters themselves (`[p for p in params if p.requires_grad]`,
    `params += list(net.parameters())`) is one group and says nothing; groups that
    cannot be compared, and groups returned by a helper whose name says it builds them
    (`get_params_groups(student)`), get an info diagnostic.

    ## Why
    The NPU fused optimizers fuse per parameter group: every group gets its own flat buffers and
    its own kernel launches, so many small groups with the same hyper-parameters lose most of
    the benefit of fusion.

    ## Example
    ```python
    optimizer = apex.optimizers.NpuFusedSGD([
        {"params": model.features.parameters()},
        {"params": model.bottleneck.parameters()},
        {"params": model.fc.parameters(), "lr": args.lr},
    ], lr=args.lr / 10, momentum=0.9)
    ```

    ## Use instead
    ```python
    optimizer = apex.optimizers.NpuFusedSGD([
        {"params": list(model.features.parameters()) + list(model.bottleneck.parameters())},
        {"params": model.fc.parameters(), "lr": args.lr},
    ], lr=args.lr / 10, momentum=0.9)
    ```

    ## Fix safety
    Safe for training: every parameter keeps the hyper-parameters it had. Optimizer checkpoints
    saved with the old group layout do not load into the merged optimizer, and group indices
    shift; the rule does not merge when the module indexes `param_groups` at or after a merged
    position (or iterates it with `enumerate`/`zip`).
    """

    CODE = "NPU103"
    NAME = "merge-param-groups"
    SUMMARY = "parameter groups of an NPU fused optimizer that share all hyper-parameters"
    FIX_SAFETY = FixSafety.SAFE
    # `NpuFused` in the file, or a constructor that NPU101 makes NpuFused: NPU101's trigger
    # matches both (see check() for the cheap test that tells them apart).
    TRIGGER = OPTIMIZER_TRIGGER
    # Constructors that NPU101 rewrites count as NPU fused optimizers.
    READS = (FusedPlans,)

    def check(self) -> None:
        if "NpuFused" not in self.source.text and not planned(self):
            return  # no NPU fused optimizer, written or planned: nothing to merge
        self.flow = OptimizerFlow.of(self.view)
        rewritten = planned(self)
        constructors = [plan.call for plan in rewritten.values()]
        for call in self.flow.candidates:
            if id(call) in rewritten:
                continue
            if fused_name(self.view, rewritten, call):
                constructors.append(call)
            else:
                self._examine_ambiguous(call)
        for call in sorted(constructors, key=start_of):
            self._examine_constructor(call)
        self._examine_add_param_group()

    # -- analysis --------------------------------------------------------------------------------

    def _examine_constructor(self, call: ast.Call) -> None:
        arg = argument(call, PARAMS, 0)
        if arg is None:
            return
        groups_list = self._groups_list(arg.value)
        if groups_list is None:
            self._report_opaque_groups(arg.value)
            return
        groups = [self._group(index, element) for index, element in enumerate(groups_list.elts)]
        self._report_tensor_params(groups)
        self._report_not_comparable(groups)
        merges = [Merge(members) for members in _buckets(groups) if len(members) > 1]
        if not merges:
            return
        blocker = self._index_blocker(min(m.members[0].index for m in merges))
        if blocker is not None:
            lines = _groups_text([g for m in merges for g in m.members])
            self.report(
                merges[0].members[0].element,
                f"parameter {lines} share all hyper-parameters and could be merged for "
                f"fusion, but {blocker}, whose indices a merge would shift: merge them by hand "
                "and update those indices",
            )
            return
        for merge in merges:
            merge.message = self._merge_message(merge)
            merge.wrap_column = self._wrap_column(call, merge)
        self._fix(ListPlan(groups_list, merges))

    def _examine_ambiguous(self, call: ast.Call) -> None:
        """A name that may or may not be an NPU fused optimizer, with groups that would merge."""
        name = self.qualified_name(call.func)
        if not isinstance(name, Ambiguous) or not any(
            NPU_FUSED.fullmatch(c) for c in name.candidates
        ):
            return
        arg = argument(call, PARAMS, 0)
        if arg is None or not isinstance(arg.value, ast.List):
            return
        groups = [self._group(index, element) for index, element in enumerate(arg.value.elts)]
        mergeable = [members for members in _buckets(groups) if len(members) > 1]
        if mergeable:
            self.report(
                call,
                f"cannot tell whether `{self.view.written(call.func)}` is an NPU fused optimizer: "
                f"{name.describe()}; if it is, parameter "
                f"{_groups_text(mergeable[0])} share all hyper-parameters: merge them into "
                "one group by hand (the fused optimizer fuses per group)",
            )

    def _groups_list(self, params: ast.expr) -> ast.List | None:
        """The list literal of groups, directly or through a name bound once to it."""
        if isinstance(params, ast.List):
            return params if _has_dict_groups(params) else None
        if isinstance(params, ast.ListComp):
            if not self._holds_parameters(params):
                self.report(params, _RUNTIME_GROUPS.format(how="are built by a comprehension"))
            return None
        if not isinstance(params, ast.Name):
            return None
        bound = self._single_binding(params)
        if bound is None:
            return None
        binding, value = bound
        if isinstance(value, ast.ListComp):
            if not self._holds_parameters(value):
                self.report(params, _RUNTIME_GROUPS.format(how="are built by a comprehension"))
            return None
        if not isinstance(value, ast.List):
            return None
        others = sorted(
            (node for node in self.index.references(binding) if node is not params),
            key=start_of,
        )
        mutation = next((node for node in others if self._mutates(node)), None)
        if mutation is not None and all(
            self._adds_parameters(node) for node in others if self._mutates(node)
        ):
            return None  # a list of parameters: one group, nothing to merge
        if mutation is not None:
            how = f"are added to `{params.id}` at line {line_of(mutation)}"
            self.report(params, _RUNTIME_GROUPS.format(how=how))
            return None
        if not _has_dict_groups(value):
            return None
        if others:
            groups = [self._group(i, e) for i, e in enumerate(value.elts)]
            if any(len(members) > 1 for members in _buckets(groups)):
                self.report(
                    params,
                    f"some parameter groups in `{params.id}` share all hyper-parameters, but "
                    f"`{params.id}` is also used at line {line_of(others[0])}: "
                    "merge them by hand if that use allows it (the fused optimizer fuses per "
                    "group)",
                )
            return None
        return value

    def _single_binding(self, name: ast.Name) -> tuple[Binding, ast.expr] | None:
        """``name = <value>``: its only assignment, in the scope where ``name`` is read."""
        bindings = self.index.bindings_of(name)
        augmented = sorted(
            (
                binding.node
                for binding in bindings
                if binding.kind is BindingKind.ASSIGN
                and isinstance(binding.node, ast.Name)
                and isinstance(self.index.parent(binding.node), ast.AugAssign)
                and not self._adds_parameters(binding.node)
            ),
            key=start_of,
        )
        if augmented:
            how = f"are added to `{name.id}` at line {line_of(augmented[0])}"
            self.report(name, _RUNTIME_GROUPS.format(how=how))
            return None
        return self._assigned_once(name, bindings)

    def _assigned_once(
        self, name: ast.Name, bindings: list[Binding]
    ) -> tuple[Binding, ast.expr] | None:
        """``name = <value>`` when ``bindings`` (``name``'s) are that one assignment, in the
        scope where ``name`` is read."""
        if len(bindings) != 1:
            return None
        binding = bindings[0]
        if binding.kind is not BindingKind.ASSIGN or not isinstance(binding.node, ast.Name):
            return None
        if binding.scope is not self.index.scope_of(name):
            return None
        statement = self.index.parent(binding.node)
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        return binding, statement.value

    def _adds_parameters(self, name: ast.AST, depth: int = 0) -> bool:
        """``params.append(p)``, ``params += [value]`` for a parameter a loop takes from a model
        (see :meth:`_loop_parameter`), and ``params += list(net.parameters())``,
        ``params.extend(net.parameters())`` (pix2pixHD's and vid2vid's ``params``): what they
        add are tensors, never a group."""
        parent = self.index.parent(name)
        if isinstance(parent, ast.AugAssign):
            return (
                parent.target is name
                and isinstance(parent.op, ast.Add)
                and self._holds_parameters(parent.value, depth)
            )
        call = self.index.parent(parent) if parent is not None else None
        if not (
            isinstance(parent, ast.Attribute)
            and isinstance(call, ast.Call)
            and call.func is parent
            and len(call.args) == 1
            and not call.keywords
        ):
            return False
        if parent.attr == "append":
            return self._loop_parameter(call.args[0], depth)
        return parent.attr == "extend" and self._holds_parameters(call.args[0], depth)

    def _holds_parameters(self, node: ast.expr, depth: int = 0) -> bool:
        """Whether ``node`` is an iterable of a model's parameters, never of groups:
        ``model.parameters()``, ``list``/``tuple``/``filter(<test>, ...)``/``itertools.chain``
        of such and their sums, a display of parameters loops take from a model
        (``[value]``), a comprehension that keeps them (``[p for p in params if
        p.requires_grad]``, ``[v for n, v in model.named_parameters()]``), or a name bound
        once, in its scope, to one of these and changed only by adding parameters."""
        if depth > _PARAMETERS_DEPTH:
            return False
        depth += 1
        if isinstance(node, ast.Name):
            value = self._only_value(node, depth)
            return value is not None and self._holds_parameters(value, depth)
        if isinstance(node, ast.BinOp):
            return (
                isinstance(node.op, ast.Add)
                and self._holds_parameters(node.left, depth)
                and self._holds_parameters(node.right, depth)
            )
        if isinstance(node, (ast.List, ast.Tuple)):
            return bool(node.elts) and all(self._loop_parameter(e, depth) for e in node.elts)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            return self._comprehension_keeps(node, depth)
        if not isinstance(node, ast.Call) or node.keywords:
            return False
        if isinstance(node.func, ast.Attribute) and node.func.attr == "parameters":
            return True
        callee = self.view.qualified_name(node.func)
        if callee in _COPIES and len(node.args) == 1:
            return self._holds_parameters(node.args[0], depth)
        if callee == "builtins.filter" and len(node.args) == 2:
            return self._holds_parameters(node.args[1], depth)
        if callee == "itertools.chain" and node.args:
            return all(self._holds_parameters(arg, depth) for arg in node.args)
        return False

    def _holds_named_parameters(self, node: ast.expr, depth: int) -> bool:
        """``model.named_parameters()``, ``list``/``filter`` of it, ``d.items()`` where ``d``
        is ``dict(model.named_parameters())``, or a name bound once to one of these: pairs
        whose second element is a parameter."""
        if depth > _PARAMETERS_DEPTH:
            return False
        depth += 1
        if isinstance(node, ast.Name):
            value = self._only_value(node, depth)
            return value is not None and self._holds_named_parameters(value, depth)
        if not isinstance(node, ast.Call) or node.keywords:
            return False
        if isinstance(node.func, ast.Attribute) and node.func.attr == "named_parameters":
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr == "items" and not node.args:
            mapping = node.func.value
            value = self._only_value(mapping, depth) if isinstance(mapping, ast.Name) else None
            return (
                isinstance(value, ast.Call)
                and self.view.qualified_name(value.func) == "builtins.dict"
                and len(value.args) == 1
                and not value.keywords
                and self._holds_named_parameters(value.args[0], depth)
            )
        callee = self.view.qualified_name(node.func)
        if callee in _COPIES and len(node.args) == 1:
            return self._holds_named_parameters(node.args[0], depth)
        if callee == "builtins.filter" and len(node.args) == 2:
            return self._holds_named_parameters(node.args[1], depth)
        return False

    def _comprehension_keeps(self, node: ast.ListComp | ast.GeneratorExp, depth: int) -> bool:
        """``[p for p in <parameters> if ...]`` or ``[p for n, p in <named parameters> if
        ...]``: any test keeps a subset of the parameters."""
        if len(node.generators) != 1 or not isinstance(node.elt, ast.Name):
            return False
        loop = node.generators[0]
        if loop.is_async:
            return False
        held = _held(loop.target, node.elt.id)
        if held == "parameter":
            return self._holds_parameters(loop.iter, depth)
        return held == "named" and self._holds_named_parameters(loop.iter, depth)

    def _loop_parameter(self, node: ast.expr, depth: int) -> bool:
        """A name a ``for`` loop around it binds to a parameter of a model and its body does
        not bind again: ``p`` of ``for p in model.parameters()`` (or ``filter(<test>, ...)``),
        ``value`` of ``for key, value in model.named_parameters()`` (or of
        ``dict(model.named_parameters()).items()``, pix2pixHD's ``params_dict``)."""
        if not isinstance(node, ast.Name):
            return False
        loop = next((a for a in self.index.ancestors(node) if isinstance(a, ast.For)), None)
        if loop is None:
            return False
        held = _held(loop.target, node.id)
        if held == "parameter":
            holds = self._holds_parameters(loop.iter, depth)
        elif held == "named":
            holds = self._holds_named_parameters(loop.iter, depth)
        else:
            return False
        rebound = any(
            isinstance(name, ast.Name) and name.id == node.id and isinstance(name.ctx, ast.Store)
            for statement in loop.body
            for name in ast.walk(statement)
        )
        return holds and not rebound

    def _only_value(self, name: ast.Name, depth: int) -> ast.expr | None:
        """The value of ``name = <value>``, its one binding in the scope where it is read, when
        every other use of it reads it or adds parameters to it."""
        assigned = self._assigned_once(name, self.index.bindings_of(name))
        if assigned is None:
            return None
        binding, value = assigned
        if any(
            self._mutates(node) and not self._adds_parameters(node, depth)
            for node in self.index.references(binding)
            if node is not name
        ):
            return None
        return value

    def _mutates(self, name: ast.AST) -> bool:
        """``groups.append(...)``, ``groups += ...``, ``groups[i] = ...`` and the like."""
        parent = self.index.parent(name)
        if isinstance(parent, ast.AugAssign):
            return True
        if isinstance(parent, ast.Attribute) and parent.attr in _LIST_MUTATORS:
            return True
        if isinstance(parent, ast.Subscript):
            statement = self.index.parent(parent)
            if isinstance(statement, ast.AugAssign):
                return statement.target is parent
            if isinstance(statement, (ast.Assign, ast.Delete)):
                return any(target is parent for target in statement.targets)
        return False

    def _report_tensor_params(self, groups: list[Group]) -> None:
        for members in _buckets(groups, include_tensor_params=True):
            if len(members) > 1 and any(g.params_may_be_tensor for g in members):
                self.report(
                    members[0].element,
                    f"parameter {_groups_text(members)} share "
                    "all hyper-parameters, but some `params` are a name or attribute that may hold "
                    "a single tensor, so npu-migrate cannot concatenate them safely: merge them "
                    "into one group by hand (the fused optimizer fuses per group)",
                )

    def _report_not_comparable(self, groups: list[Group]) -> None:
        """Groups whose hyper-parameters cannot be compared (calls, ``**`` unpacking, not a
        dict literal) are never merged: say so, since some may share them."""
        opaque = [group for group in groups if group.signature is None]
        if len(opaque) < 2 or self.suppressed(opaque[0].element):
            return
        self.report(
            opaque[0].element,
            f"parameter {_groups_text(opaque)} are not compared, so never merged: their "
            "hyper-parameters involve calls, `**` unpacking or a group that is not a dict "
            "literal, which npu-migrate does not compare; if some share all hyper-parameters, "
            "put their parameters in one group (the fused optimizer fuses per group)",
            Severity.INFO,
        )

    def _report_opaque_groups(self, params: ast.expr) -> None:
        """``get_params_groups(student)``: groups built by a function npu-migrate does not look
        into (a call whose name says it builds groups) may share hyper-parameters."""
        value: ast.expr | None = params
        if isinstance(params, ast.Name):
            bindings = self.index.bindings_of(params)
            value = bindings[0].assigned_value if len(bindings) == 1 else None
        if not isinstance(value, ast.Call):
            return
        callee = value.func.attr if isinstance(value.func, ast.Attribute) else None
        if isinstance(value.func, ast.Name):
            callee = value.func.id
        if callee is None or not any(word in callee.lower() for word in _GROUP_BUILDERS):
            return
        self.report(
            params,
            f"the parameter groups of this NPU fused optimizer come from "
            f"`{self.view.written(value)}`, which npu-migrate does not look into: if several "
            "share all hyper-parameters, put their parameters in one group there (the fused "
            "optimizer fuses per group)",
            Severity.INFO,
        )

    def _index_blocker(self, first_merged: int) -> str | None:
        """Code that addresses parameter groups by position at or after ``first_merged``."""
        subscripts = sorted(
            (
                subscript
                for attribute in self.index.attributes("param_groups")
                if isinstance(subscript := self.index.parent(attribute), ast.Subscript)
                and subscript.value is attribute
            ),
            key=start_of,
        )
        for subscript in subscripts:
            index = _literal_index(subscript)
            if index is None or index < 0 or index >= first_merged:
                return f"line {line_of(subscript)} indexes `{self.view.written(subscript)}`"
        pairing = sorted(
            (
                call
                for name in (*self.index.names("enumerate"), *self.index.names("zip"))
                if isinstance(call := self.index.parent(name), ast.Call) and call.func is name
            ),
            key=start_of,
        )
        for call in pairing:
            for arg in arguments(call):
                value = arg.value
                if isinstance(value, ast.Attribute) and value.attr == "param_groups":
                    assert isinstance(call.func, ast.Name)
                    return (
                        f"line {line_of(call)} pairs `{self.view.written(value)}` with positions "
                        f"in `{call.func.id}(...)`"
                    )
        return None

    def _merge_message(self, merge: Merge) -> str:
        lines = _groups_text(merge.members)
        signature = merge.members[0].signature or frozenset()
        keys = [f"`{key}`" for key, _ in sorted(signature)]
        shared = (
            "the same " + (", ".join(keys[:-1]) + " and " if len(keys) > 1 else "") + keys[-1]
            if signature
            else "no overrides of the optimizer's defaults"
        )
        return (
            f"merged the parameter {lines} into one: they have {shared}, and the NPU "
            "fused optimizer fuses per group; optimizer checkpoints saved with the old group "
            "layout will not load into the merged optimizer"
        )

    def _wrap_column(self, call: ast.Call, merge: Merge) -> int | None:
        """Where continuation lines of a too long merged ``params`` start, or None.

        The column is the one the first ``params`` value has in the rewritten code: NPU101's
        new spelling of the callee moves what follows it on its line.
        """
        value = merge.members[0].params
        assert value is not None
        start_line, start = self.source.position(value)
        start -= 1  # 0-based, as the indentation it becomes
        plan = planned(self).get(id(call))
        if plan is not None:
            start = plan.output_column(start_line, start)
        one_line = len(" + ".join(self._part(g) for g in merge.members))
        return start if start + one_line > LINE_LENGTH else None

    def _part(self, group: Group) -> str:
        """How the group's params appear in the concatenation (see :func:`_concatenation`)."""
        assert group.params is not None
        code = self.view.written(group.params)
        return code if isinstance(group.params, (ast.List, ast.ListComp)) else f"list({code})"

    def _examine_add_param_group(self) -> None:
        """``opt.add_param_group({...})`` twice with equal options: one group would do."""
        seen: dict[tuple[str, frozenset[tuple[str, str]]], ast.Call] = {}
        calls = sorted(
            (
                call
                for attribute in self.index.attributes("add_param_group")
                if isinstance(call := self.index.parent(attribute), ast.Call)
                and call.func is attribute
            ),
            key=start_of,
        )
        for call in calls:
            func = call.func
            assert isinstance(func, ast.Attribute)
            args = arguments(call)
            if len(args) != 1 or not isinstance(args[0].value, ast.Dict):
                continue
            origins = self.flow.origins(func.value)
            if not any(
                isinstance(o, ast.Call) and fused_name(self.view, planned(self), o) for o in origins
            ):
                continue
            group = self._group(0, args[0].value)
            if group.signature is None:
                continue
            key = (self.view.written(func.value), group.signature)
            if key in seen:
                self.report(
                    call,
                    "this `add_param_group` has the same options as the one at line "
                    f"{line_of(seen[key])}: add their parameters as one group, since "
                    "the fused optimizer fuses per group",
                )
            else:
                seen[key] = call

    def _group(self, index: int, element: ast.expr) -> Group:
        group = Group(index, element)
        if not isinstance(element, ast.Dict):
            return group
        options: list[tuple[str, str]] = []
        entries = zip(element.keys, element.values, strict=True)
        for position, (key_node, value) in enumerate(entries):
            if key_node is None:
                return group  # `**defaults`: keys unknown
            key = literal_value(key_node)
            if not isinstance(key, str):
                return group
            if key == PARAMS:
                if group.params is not None:
                    return group
                group.params, group.params_item = value, position
                continue
            fingerprint = self._pure_fingerprint(value)
            if fingerprint is None:
                return group
            options.append((key, fingerprint))
        keys = [key for key, _ in options]
        if group.params is None or len(set(keys)) != len(keys):
            return group
        group.signature = frozenset(options)
        group.params_may_be_tensor = isinstance(group.params, _MAYBE_ONE_TENSOR)
        return group

    def _pure_fingerprint(self, value: ast.expr) -> str | None:
        """A formatting-independent text of ``value`` when it is side-effect free, else None."""
        code = self.view.written(value)
        tree: ast.AST = value
        if "\n" in code or "\\" in code:
            # Compared as the expression's text parses on its own line, as it always was.
            try:
                tree = ast.parse(code.strip(), mode="eval").body
            except SyntaxError:
                return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript):
                if not isinstance(node.value, ast.Name):
                    return None
                continue
            if isinstance(node, ast.Slice | ast.expr_context):
                continue
            if not isinstance(node, _PURE_NODES):
                return None
        return ast.dump(tree)

    # -- the edit --------------------------------------------------------------------------------

    def _fix(self, plan: ListPlan) -> None:
        """One edit of the list for every merge whose diagnostic is not suppressed."""
        merges = [m for m in plan.merges if not self.suppressed(m.members[0].element)]
        if not merges:
            return
        edit = self.replace(plan.groups_list, cst.List, _merge_edit(merges))
        for number, merge in enumerate(merges):
            self.fix(merge.members[0].element, merge.message, *([edit] if number == 0 else []))


def _merge_edit(merges: list[Merge]) -> Change:
    """The change of the list of groups: each merge's params concatenated into its first
    member, the other members removed (their comments go with them)."""
    specs = [
        ([g.index for g in m.members], [g.params_item for g in m.members], m.wrap_column)
        for m in merges
    ]

    def merge(node: cst.List) -> cst.List:
        elements = list(node.elements)
        removed: set[int] = set()
        for indices, items, wrap_column in specs:
            members = [elements[index] for index in indices]
            params = [_dict_entry(m, item).value for m, item in zip(members, items, strict=True)]
            concatenation = _concatenation(params, wrap_column)
            elements[indices[0]] = _with_params(members[0], items[0], concatenation)
            removed.update(indices[1:])
        kept = [element for index, element in enumerate(elements) if index not in removed]
        if kept[-1] is not elements[-1]:
            kept[-1] = kept[-1].with_changes(comma=node.elements[-1].comma)
        return node.with_changes(elements=kept)

    return merge


def _dict_entry(element: cst.BaseElement, position: int) -> cst.DictElement:
    assert isinstance(element.value, cst.Dict)
    entry = element.value.elements[position]
    assert isinstance(entry, cst.DictElement)
    return entry


def _concatenation(params: list[cst.BaseExpression], wrap_column: int | None) -> cst.BaseExpression:
    """``list(a) + list(b) + ...``; a list literal or comprehension is used as it is. With
    ``wrap_column``, each ``+ part`` starts a new line there (inside the braces of the group)."""
    parts = [
        value
        if isinstance(value, (cst.List, cst.ListComp))
        else cst.Call(cst.Name("list"), [cst.Arg(value)])
        for value in params
    ]
    before_plus: cst.BaseParenthesizableWhitespace = cst.SimpleWhitespace(" ")
    if wrap_column is not None:
        before_plus = cst.ParenthesizedWhitespace(
            indent=False, last_line=cst.SimpleWhitespace(" " * wrap_column)
        )
    expression: cst.BaseExpression = parts[0]
    for part in parts[1:]:
        operator = cst.Add(
            whitespace_before=before_plus, whitespace_after=cst.SimpleWhitespace(" ")
        )
        expression = cst.BinaryOperation(expression, operator, part)
    return expression


def _with_params(
    element: cst.BaseElement, position: int, params: cst.BaseExpression
) -> cst.BaseElement:
    assert isinstance(element.value, cst.Dict)
    entries = list(element.value.elements)
    entries[position] = _dict_entry(element, position).with_changes(value=params)
    return element.with_changes(value=element.value.with_changes(elements=entries))


def _held(target: ast.expr, name: str) -> str | None:
    """What a loop's ``target`` makes of ``name``: ``"parameter"`` for ``for name in ...``,
    ``"named"`` for ``for key, name in ...`` (the second of a pair), else None."""
    if isinstance(target, ast.Name):
        return "parameter" if target.id == name else None
    if (
        isinstance(target, ast.Tuple)
        and len(target.elts) == 2
        and isinstance(target.elts[1], ast.Name)
        and target.elts[1].id == name
        and not (isinstance(target.elts[0], ast.Name) and target.elts[0].id == name)
    ):
        return "named"
    return None


def _has_dict_groups(groups: ast.List) -> bool:
    return any(isinstance(element, ast.Dict) for element in groups.elts)


def _buckets(groups: list[Group], include_tensor_params: bool = False) -> list[list[Group]]:
    """Groups with equal signatures, each bucket in list order, buckets by first member."""
    buckets: dict[frozenset[tuple[str, str]], list[Group]] = {}
    for group in groups:
        if group.mergeable or (include_tensor_params and group.signature is not None):
            assert group.signature is not None
            buckets.setdefault(group.signature, []).append(group)
    return list(buckets.values())


def _literal_index(subscript: ast.Subscript) -> int | None:
    if isinstance(subscript.slice, (ast.Slice, ast.Tuple)):
        return None
    value = literal_value(subscript.slice)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _groups_text(groups: list[Group]) -> str:
    """``groups 1, 2 and 4 (lines 7, 8, 10)``: 1-based positions in the list, and lines."""
    numbers = [str(g.index + 1) for g in groups]
    lines = sorted({line_of(g.element) for g in groups})
    where = f"line {lines[0]}" if len(lines) == 1 else "lines " + ", ".join(map(str, lines))
    return f"groups {', '.join(numbers[:-1])} and {numbers[-1]} ({where})"


_RUNTIME_GROUPS = (
    "the parameter groups of this NPU fused optimizer {how}, so npu-migrate cannot tell which "
    "share hyper-parameters: if several do, put their parameters in one group (the fused "
    "optimizer fuses per group)"
)
