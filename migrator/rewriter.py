"""Applying edits to a concrete syntax tree: one code generation to find them, one pass.

Only a file that has edits gets here (:mod:`migrator.engine`), so only such a run imports this
module and libcst. One code generation over the concrete tree locates the nodes that the edits
(:mod:`migrator.edits`) name by span (and marks the nodes on the way to them); one transformer
pass then visits only those paths and applies every edit bottom-up, so an edit of an outer node
(a call) receives its inner nodes already edited (its arguments).

Nothing here needs libcst metadata: no scope, parent or position providers, no deep copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import libcst as cst
from libcst._nodes.internal import CodegenState

from migrator.edits import BlockEdit, Change, Edit, EditError, NodeEdit, Span, is_statement_kind

NodeT = TypeVar("NodeT", bound=cst.CSTNode)


def _key(kind: type[cst.CSTNode], span: Span) -> tuple[type[cst.CSTNode], int, int]:
    return (kind, span[0], -1 if is_statement_kind(kind) else span[1])


@dataclass
class _Located:
    nodes: dict[tuple[type[cst.CSTNode], int, int], cst.CSTNode] = field(default_factory=dict)
    parents: dict[int, cst.CSTNode] = field(default_factory=dict)  # id(statement) -> its block
    on_path: set[int] = field(default_factory=set)  # ids of the wanted nodes and their ancestors


class _LocatingState(CodegenState):
    """A code generation that writes nothing and records where the wanted nodes are.

    libcst's own position provider computes a line and column for every node of the tree;
    the edits need only the few nodes they name, by character offset.
    """

    def __init__(
        self, root: cst.CSTNode, wanted: set[tuple[type[cst.CSTNode], int, int]], base: int
    ):
        if isinstance(root, cst.Module):
            super().__init__(
                default_indent=root.default_indent, default_newline=root.default_newline
            )
        else:
            super().__init__(default_indent="    ", default_newline="\n")
        self.wanted = wanted
        self.kinds = {kind for kind, _, _ in wanted}
        self.offset = base  # where the root's code starts in the file
        self.stack: list[cst.CSTNode] = []
        self.located = _Located()

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        pass  # only the module's very end moves: nothing is located after it

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.stack.append(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.stack.pop()

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> Iterator[None]:
        start = self.offset
        yield
        kind = type(node)
        if kind not in self.kinds:
            return
        key = (kind, start, -1 if is_statement_kind(kind) else self.offset)
        if key not in self.wanted:
            return
        located = self.located
        located.nodes[key] = node
        # The stack ends with the node itself (codegen of a node wraps its syntactic part).
        for ancestor in self.stack:
            located.on_path.add(id(ancestor))
        if len(self.stack) >= 2:
            located.parents[id(node)] = self.stack[-2]


def locate(
    root: cst.CSTNode, wanted: set[tuple[type[cst.CSTNode], int, int]], base: int = 0
) -> _Located:
    """Where the wanted nodes are under ``root``, whose code starts at offset ``base``."""
    state = _LocatingState(root, wanted, base)
    root._codegen(state)
    return state.located


class _Applier(cst.CSTTransformer):
    """Visits only the paths to edited nodes; applies node edits and block edits on leave."""

    def __init__(
        self,
        located: _Located,
        changes: dict[int, list[Change]],
        blocks: dict[int, tuple[list[cst.CSTNode], BlockEdit]],
    ) -> None:
        super().__init__()
        self.on_path = located.on_path
        self.changes = changes
        self.blocks = blocks
        self.results: dict[int, Any] = {}  # id(original statement) -> what it became

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.on_path

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result: Any = updated_node
        block = self.blocks.get(id(original_node))
        if block is not None:
            result = self._rebuild(original_node, result, *block)
        for change in self.changes.get(id(original_node), ()):
            if not isinstance(result, cst.CSTNode):
                break  # removed or split by an earlier change of the same node
            result = change(result)
        if isinstance(original_node, cst.BaseStatement):
            self.results[id(original_node)] = result
        return result

    def _rebuild(
        self,
        original: cst.CSTNode,
        block: cst.CSTNode,
        lines: list[cst.CSTNode],
        edit: BlockEdit,
    ) -> cst.CSTNode:
        statements: Sequence[cst.CSTNode] = original.body  # type: ignore[attr-defined]
        first = next(i for i, statement in enumerate(statements) if statement is lines[0])
        after = first + len(lines)
        if list(statements[first:after]) != lines:
            raise EditError("a block edit's lines are not consecutive statements of one block")
        body: list[cst.CSTNode] = []
        for statement in statements[:first]:
            body += self._edited(statement)
        body += edit.rebuild([self._edited(line) for line in lines])
        for statement in statements[after:]:
            body += self._edited(statement)
        return block.with_changes(body=body)

    def _edited(self, statement: cst.CSTNode) -> list[Any]:
        """What the node edits made of one statement of the block: none, one or several."""
        result = self.results.get(id(statement), statement)
        if isinstance(result, cst.FlattenSentinel):
            return list(result.nodes)
        if isinstance(result, cst.RemovalSentinel):
            return []
        return [result]


def apply_edits(root: NodeT, edits: Sequence[Edit], *, base: int = 0) -> NodeT:
    """``root`` (a module, or an expression sliced out of one, whose code starts at offset
    ``base`` of the file) with every edit applied, in one pass (order: inner before outer).
    An expression may come back as another kind of expression (``0`` -> ``"npu:0"``)."""
    wanted: set[tuple[type[cst.CSTNode], int, int]] = set()
    for edit in edits:
        if isinstance(edit, NodeEdit):
            wanted.add(_key(edit.kind, edit.span))
        else:
            wanted.update((kind, start, -1) for kind, start in edit.lines)
    located = locate(root, wanted, base)
    changes: dict[int, list[Change]] = {}
    blocks: dict[int, tuple[list[cst.CSTNode], BlockEdit]] = {}
    for edit in edits:
        if isinstance(edit, NodeEdit):
            node = _found(located, _key(edit.kind, edit.span))
            changes.setdefault(id(node), []).append(edit.change)
        else:
            lines = [_found(located, (kind, start, -1)) for kind, start in edit.lines]
            parent = located.parents.get(id(lines[0]))
            if parent is None or id(parent) in blocks:
                raise EditError("two edits rebuild the same block")
            blocks[id(parent)] = (lines, edit)
    applier = _Applier(located, changes, blocks)
    updated = root.visit(applier)
    expected = cst.Module if isinstance(root, cst.Module) else cst.BaseExpression
    if not isinstance(updated, expected):
        raise EditError(f"an edit replaced the whole {type(root).__name__}")
    return updated  # type: ignore[return-value]


def _found(located: _Located, key: tuple[type[cst.CSTNode], int, int]) -> cst.CSTNode:
    node = located.nodes.get(key)
    if node is None:
        kind, start, _ = key
        raise EditError(f"no {kind.__name__} found at offset {start} to edit")
    return node
