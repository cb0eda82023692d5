"""NPU103: parameter groups of an NPU fused optimizer that share all hyper-parameters."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import Assignment, ParentNodeProvider, PositionProvider, ScopeProvider

from migrator.callargs import argument
from migrator.names import Ambiguous
from migrator.rule import FixSafety, Rule
from migrator.rules.npu1_common import (
    NPU_FUSED,
    OptimizerFlow,
    code_of,
    literal_value,
    npu_fused_name,
    qualified,
)

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
_MAYBE_ONE_TENSOR = (cst.Name, cst.Attribute, cst.Subscript)
_USED_AS_IS = (cst.List, cst.ListComp)
_LIST_MUTATORS = frozenset({"append", "extend", "insert"})


@dataclass
class Group:
    """One element of a list of parameter groups."""

    index: int
    element: cst.Element
    signature: frozenset[tuple[str, str]] | None = None  # hyper-parameters, None: not comparable
    params_may_be_tensor: bool = False

    @property
    def mergeable(self) -> bool:
        return self.signature is not None and not self.params_may_be_tensor


@dataclass
class Merge:
    """Groups of one list merged into the first of them."""

    members: list[Group]
    message: str = ""


@dataclass
class ListPlan:
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
    lists and `add_param_group` calls with equal options are reported instead.

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
    TRIGGER = re.compile(r"NpuFused")

    def visit_Module(self, node: cst.Module) -> None:
        self.flow = OptimizerFlow(self, node)
        self.plans: dict[int, ListPlan] = {}  # id(original list of groups) -> merges
        for call in self.flow.calls:
            if npu_fused_name(self, call.func):
                self._examine_constructor(call)
            else:
                self._examine_ambiguous(call)
        self._examine_add_param_group()

    # -- analysis --------------------------------------------------------------------------------

    def _examine_constructor(self, call: cst.Call) -> None:
        arg = argument(call, PARAMS, 0)
        if arg is None:
            return
        groups_list = self._groups_list(call, arg.value)
        if groups_list is None:
            return
        groups = [_group(index, element) for index, element in enumerate(groups_list.elements)]
        self._report_tensor_params(groups)
        merges = [Merge(members) for members in _buckets(groups) if len(members) > 1]
        if not merges:
            return
        blocker = self._index_blocker(min(m.members[0].index for m in merges))
        if blocker is not None:
            lines = _groups_text(self, [g for m in merges for g in m.members])
            self.report(
                merges[0].members[0].element,
                f"parameter {lines} share all hyper-parameters and could be merged for "
                f"fusion, but {blocker}, whose indices a merge would shift: merge them by hand "
                "and update those indices",
            )
            return
        for merge in merges:
            merge.message = self._merge_message(merge)
        self.plans[id(groups_list)] = ListPlan(merges)

    def _examine_ambiguous(self, call: cst.Call) -> None:
        """A name that may or may not be an NPU fused optimizer, with groups that would merge."""
        name = qualified(self, call.func)
        if not isinstance(name, Ambiguous) or not any(
            NPU_FUSED.fullmatch(c) for c in name.candidates
        ):
            return
        arg = argument(call, PARAMS, 0)
        if arg is None or not isinstance(arg.value, cst.List):
            return
        groups = [_group(index, element) for index, element in enumerate(arg.value.elements)]
        mergeable = [members for members in _buckets(groups) if len(members) > 1]
        if mergeable:
            self.report(
                call,
                f"cannot tell whether `{code_of(call.func)}` is an NPU fused optimizer: "
                f"{name.describe()}; if it is, parameter "
                f"{_groups_text(self, mergeable[0])} share all hyper-parameters: merge them into "
                "one group by hand (the fused optimizer fuses per group)",
            )

    def _groups_list(self, call: cst.Call, params: cst.BaseExpression) -> cst.List | None:
        """The list literal of groups, directly or through a name bound once to it."""
        if isinstance(params, cst.List):
            return params if _has_dict_groups(params) else None
        if isinstance(params, cst.ListComp):
            self.report(params, _RUNTIME_GROUPS.format(how="are built by a comprehension"))
            return None
        if not isinstance(params, cst.Name):
            return None
        binding = self._single_binding(params)
        if binding is None:
            return None
        assignment, value = binding
        if isinstance(value, cst.ListComp):
            self.report(params, _RUNTIME_GROUPS.format(how="are built by a comprehension"))
            return None
        if not isinstance(value, cst.List):
            return None
        others = [a.node for a in assignment.references if a.node is not params]
        mutation = next((node for node in others if self._mutates(node)), None)
        if mutation is not None:
            how = f"are added to `{params.value}` at line {self.flow.line_of(mutation)}"
            self.report(params, _RUNTIME_GROUPS.format(how=how))
            return None
        if not _has_dict_groups(value):
            return None
        if others:
            groups = [_group(i, e) for i, e in enumerate(value.elements)]
            if any(len(members) > 1 for members in _buckets(groups)):
                self.report(
                    params,
                    f"some parameter groups in `{params.value}` share all hyper-parameters, but "
                    f"`{params.value}` is also used at line {self.flow.line_of(others[0])}: "
                    "merge them by hand if that use allows it (the fused optimizer fuses per "
                    "group)",
                )
            return None
        return value

    def _single_binding(self, name: cst.Name) -> tuple[Assignment, cst.BaseExpression] | None:
        """``name = <value>``: its only assignment, in the scope where ``name`` is read."""
        scope = self.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return None
        assignments = list(scope[name.value])
        augmented = [
            a.node for a in assignments if isinstance(a, Assignment) and self._augments(a.node)
        ]
        if augmented:
            how = f"are added to `{name.value}` at line {self.flow.line_of(augmented[0])}"
            self.report(name, _RUNTIME_GROUPS.format(how=how))
            return None
        if len(assignments) != 1 or not isinstance(assignments[0], Assignment):
            return None
        assignment = assignments[0]
        if assignment.scope is not scope or not isinstance(assignment.node, cst.Name):
            return None
        target = self.get_metadata(ParentNodeProvider, assignment.node)
        if not isinstance(target, cst.AssignTarget):
            return None
        statement = self.get_metadata(ParentNodeProvider, target)
        if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
            return None
        return assignment, statement.value

    def _augments(self, target: cst.CSTNode) -> bool:
        """``name += ...`` (an assignment of ``name`` too)."""
        return isinstance(self.get_metadata(ParentNodeProvider, target, None), cst.AugAssign)

    def _mutates(self, name: cst.CSTNode) -> bool:
        """``groups.append(...)``, ``groups += ...``, ``groups[i] = ...`` and the like."""
        parent = self.get_metadata(ParentNodeProvider, name)
        if isinstance(parent, cst.AugAssign):
            return True
        if isinstance(parent, cst.Attribute) and parent.attr.value in _LIST_MUTATORS:
            return True
        if isinstance(parent, cst.Subscript):
            grand = self.get_metadata(ParentNodeProvider, parent)
            return isinstance(grand, cst.AssignTarget | cst.AugAssign | cst.Del)
        return False

    def _report_tensor_params(self, groups: list[Group]) -> None:
        for members in _buckets(groups, include_tensor_params=True):
            if len(members) > 1 and any(g.params_may_be_tensor for g in members):
                self.report(
                    members[0].element,
                    f"parameter {_groups_text(self, members)} share "
                    "all hyper-parameters, but some `params` are a name or attribute that may hold "
                    "a single tensor, so npu-migrate cannot concatenate them safely: merge them "
                    "into one group by hand (the fused optimizer fuses per group)",
                )

    def _index_blocker(self, first_merged: int) -> str | None:
        """Code that addresses parameter groups by position at or after ``first_merged``."""
        for subscript in self.flow.subscripts:
            value = subscript.value
            if not (isinstance(value, cst.Attribute) and value.attr.value == "param_groups"):
                continue
            index = _literal_index(subscript)
            if index is None or index < 0 or index >= first_merged:
                return f"line {self.flow.line_of(subscript)} indexes `{code_of(subscript)}`"
        for call in self.flow.calls:
            if not (isinstance(call.func, cst.Name) and call.func.value in ("enumerate", "zip")):
                continue
            for arg in call.args:
                value = arg.value
                if isinstance(value, cst.Attribute) and value.attr.value == "param_groups":
                    return (
                        f"line {self.flow.line_of(call)} pairs `{code_of(value)}` with positions "
                        f"in `{call.func.value}(...)`"
                    )
        return None

    def _merge_message(self, merge: Merge) -> str:
        lines = _groups_text(self, merge.members)
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

    def _examine_add_param_group(self) -> None:
        """``opt.add_param_group({...})`` twice with equal options: one group would do."""
        seen: dict[tuple[str, frozenset[tuple[str, str]]], cst.Call] = {}
        for call in self.flow.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "add_param_group"):
                continue
            if len(call.args) != 1 or not isinstance(call.args[0].value, cst.Dict):
                continue
            origins = self.flow.origins(func.value)
            if not any(isinstance(o, cst.Call) and npu_fused_name(self, o.func) for o in origins):
                continue
            group = _group(0, cst.Element(call.args[0].value))
            if group.signature is None:
                continue
            key = (code_of(func.value), group.signature)
            if key in seen:
                self.report(
                    call,
                    "this `add_param_group` has the same options as the one at line "
                    f"{self.flow.line_of(seen[key])}: add their parameters as one group, since "
                    "the fused optimizer fuses per group",
                )
            else:
                seen[key] = call

    # -- transformation --------------------------------------------------------------------------

    def _wrap_column(self, merge: Merge) -> int | None:
        """Where continuation lines of a too long merged ``params`` start, or None."""
        first = merge.members[0]
        value = _params_item(first.element).value
        start = self.get_metadata(PositionProvider, value).start.column
        one_line = len(code_of(_concatenation([g.element for g in merge.members], None)))
        return start if start + one_line > LINE_LENGTH else None

    def leave_List(self, original_node: cst.List, updated_node: cst.List) -> cst.BaseExpression:
        plan = self.plans.get(id(original_node))
        if plan is None:
            return updated_node
        elements = list(updated_node.elements)
        removed: set[int] = set()
        for merge in plan.merges:
            first = merge.members[0]
            if not self.fix(first.element, merge.message):
                continue
            members = [elements[g.index] for g in merge.members]
            concatenation = _concatenation(members, self._wrap_column(merge))
            elements[first.index] = _with_params(members[0], concatenation)
            removed.update(g.index for g in merge.members[1:])
        if not removed:
            return updated_node
        kept = [element for index, element in enumerate(elements) if index not in removed]
        last = updated_node.elements[-1]
        if kept[-1] is not elements[-1]:
            kept[-1] = kept[-1].with_changes(comma=last.comma)
        return updated_node.with_changes(elements=kept)


def _has_dict_groups(groups: cst.List) -> bool:
    return any(isinstance(element.value, cst.Dict) for element in groups.elements)


def _group(index: int, element: cst.BaseElement) -> Group:
    group = Group(index, element)  # type: ignore[arg-type]
    if not isinstance(element, cst.Element) or not isinstance(element.value, cst.Dict):
        return group
    options: list[tuple[str, str]] = []
    params: cst.BaseExpression | None = None
    for item in element.value.elements:
        if not isinstance(item, cst.DictElement):
            return group  # `**defaults`: keys unknown
        key = literal_value(item.key)
        if not isinstance(key, str):
            return group
        if key == PARAMS:
            if params is not None:
                return group
            params = item.value
            continue
        fingerprint = _pure_fingerprint(item.value)
        if fingerprint is None:
            return group
        options.append((key, fingerprint))
    keys = [key for key, _ in options]
    if params is None or len(set(keys)) != len(keys):
        return group
    group.signature = frozenset(options)
    group.params_may_be_tensor = isinstance(params, _MAYBE_ONE_TENSOR)
    return group


def _pure_fingerprint(value: cst.BaseExpression) -> str | None:
    """A formatting-independent text of ``value`` when it is side-effect free, else None."""
    try:
        tree = ast.parse(code_of(value).strip(), mode="eval")
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
    return ast.dump(tree.body)


def _buckets(groups: list[Group], include_tensor_params: bool = False) -> list[list[Group]]:
    """Groups with equal signatures, each bucket in list order, buckets by first member."""
    buckets: dict[frozenset[tuple[str, str]], list[Group]] = {}
    for group in groups:
        if group.mergeable or (include_tensor_params and group.signature is not None):
            assert group.signature is not None
            buckets.setdefault(group.signature, []).append(group)
    return list(buckets.values())


def _literal_index(subscript: cst.Subscript) -> int | None:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    value = literal_value(subscript.slice[0].slice.value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _params_item(element: cst.BaseElement) -> cst.DictElement:
    assert isinstance(element.value, cst.Dict)
    for item in element.value.elements:
        if isinstance(item, cst.DictElement) and literal_value(item.key) == PARAMS:
            return item
    raise AssertionError("a mergeable group has a 'params' key")


def _concatenation(members: list[cst.BaseElement], wrap_column: int | None) -> cst.BaseExpression:
    """``list(a) + list(b) + ...``; a list literal or comprehension is used as it is. With
    ``wrap_column``, each ``+ part`` starts a new line there (inside the braces of the group)."""
    parts: list[cst.BaseExpression] = []
    for member in members:
        params = _params_item(member).value
        if isinstance(params, _USED_AS_IS):
            parts.append(params)
        else:
            parts.append(cst.Call(cst.Name("list"), [cst.Arg(params)]))
    before_plus: cst.BaseParenthesizableWhitespace = cst.SimpleWhitespace(" ")
    if wrap_column is not None:
        before_plus = cst.ParenthesizedWhitespace(
            indent=False, last_line=cst.SimpleWhitespace(" " * wrap_column)
        )
    expression = parts[0]
    for part in parts[1:]:
        operator = cst.Add(
            whitespace_before=before_plus, whitespace_after=cst.SimpleWhitespace(" ")
        )
        expression = cst.BinaryOperation(expression, operator, part)
    return expression


def _with_params(element: cst.BaseElement, params: cst.BaseExpression) -> cst.BaseElement:
    assert isinstance(element.value, cst.Dict)
    target = _params_item(element)
    items = [
        item.with_changes(value=params) if item is target else item
        for item in element.value.elements
    ]
    return element.with_changes(value=element.value.with_changes(elements=items))


def _groups_text(rule: Rule, groups: list[Group]) -> str:
    """``groups 1, 2 and 4 (lines 7, 8, 10)``: 1-based positions in the list, and lines."""
    numbers = [str(g.index + 1) for g in groups]
    lines = sorted({rule.position(g.element)[0] for g in groups})
    where = f"line {lines[0]}" if len(lines) == 1 else "lines " + ", ".join(map(str, lines))
    return f"groups {', '.join(numbers[:-1])} and {numbers[-1]} ({where})"


_RUNTIME_GROUPS = (
    "the parameter groups of this NPU fused optimizer {how}, so npu-migrate cannot tell which "
    "share hyper-parameters: if several do, put their parameters in one group (the fused "
    "optimizer fuses per group)"
)
