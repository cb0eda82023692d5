"""Editing call arguments without disturbing the call's formatting.

A one-line call gets ``, name=value`` after its last argument. A call with one argument per line
gets the new argument on its own line with the same indentation, and keeps (or not) the trailing
comma the user wrote. Removing an argument keeps the commas and line breaks of the others.
A function's signature gets a keyword-only parameter in the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cache

from migrator.lazy_imports import cst


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` with no spaces around ``=`` (PEP 8 for keyword arguments)."""
    return cst.Arg(keyword=cst.Name(name), value=value, equal=no_space_equal())


def no_space_equal() -> cst.AssignEqual:
    """The ``=`` of a keyword argument, without spaces around it."""
    no_space = cst.SimpleWhitespace("")
    return cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space)


def find_keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    """The plain positional arguments, in order (stops at the first ``*args`` or keyword)."""
    found = []
    for arg in call.args:
        if arg.keyword is not None or arg.star:
            break
        found.append(arg)
    return found


def argument(call: cst.Call, name: str, position: int | None) -> cst.Arg | None:
    """The argument bound to parameter ``name``: by keyword, or at ``position`` if given."""
    by_keyword = find_keyword(call, name)
    if by_keyword is not None:
        return by_keyword
    if position is None:
        return None
    args = positional(call)
    return args[position] if position < len(args) else None


def append_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    """``call`` with ``new`` added after its last argument, in the call's own layout."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    between = _line_break_between_args(call)
    if between is None:
        between = cst.SimpleWhitespace(" ")
    comma_after_last = cst.Comma(whitespace_after=between)
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: the new argument gets one too, followed by what closed the call.
        closing = last.comma.whitespace_after
        if isinstance(closing, cst.ParenthesizedWhitespace) and isinstance(
            between, cst.ParenthesizedWhitespace
        ):
            # A comment after the old last argument stays on its line.
            comma_after_last = cst.Comma(
                whitespace_after=between.with_changes(
                    first_line=closing.first_line, empty_lines=closing.empty_lines
                )
            )
            closing = _without_comments(closing)
        new = new.with_changes(comma=last.comma.with_changes(whitespace_after=closing))
    else:
        # No trailing comma: what followed the old last argument now follows the new one.
        new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
        last = last.with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
    args[-1] = last.with_changes(comma=comma_after_last)
    return call.with_changes(args=[*args, new])


def _line_break_between_args(call: cst.Call) -> cst.BaseParenthesizableWhitespace | None:
    """The line break and indentation that separate arguments written one per line, if so."""
    args = call.args
    if len(args) >= 2:
        comma = args[-2].comma
        if isinstance(comma, cst.Comma) and isinstance(
            comma.whitespace_after, cst.ParenthesizedWhitespace
        ):
            return _without_comments(comma.whitespace_after)
        return None
    if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        last = args[-1]
        after = (
            last.comma.whitespace_after
            if isinstance(last.comma, cst.Comma)
            else last.whitespace_after_arg
        )
        if isinstance(after, cst.ParenthesizedWhitespace):
            return _without_comments(call.whitespace_before_args)
    return None


def _without_comments(whitespace: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
    """The line break and indentation only: a comment belongs to the argument it follows."""
    return whitespace.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())


def remove_args(call: cst.Call, names: Collection[str]) -> cst.Call:
    """``call`` without the keyword arguments in ``names``; the rest keep their layout."""
    kept = [arg for arg in call.args if arg.keyword is None or arg.keyword.value not in names]
    return call.with_changes(args=_repair_commas(call.args, kept))


def remove_arg_objects(call: cst.Call, doomed: Sequence[cst.Arg]) -> cst.Call:
    """``call`` without the given argument nodes (by identity)."""
    kept = [arg for arg in call.args if not any(arg is d for d in doomed)]
    return call.with_changes(args=_repair_commas(call.args, kept))


def _repair_commas(original: Sequence[cst.Arg], kept: list[cst.Arg]) -> list[cst.Arg]:
    """Give the new last argument the comma (or its absence) that the old last one had."""
    if not kept or len(kept) == len(original):
        return list(kept)
    old_last = original[-1]
    if kept[-1] is old_last:
        return list(kept)
    repaired = list(kept)
    repaired[-1] = repaired[-1].with_changes(
        comma=old_last.comma, whitespace_after_arg=old_last.whitespace_after_arg
    )
    return repaired


def add_keyword_only(parameters: cst.Parameters, name: str) -> cst.Parameters:
    """``parameters`` with a keyword-only parameter ``name`` without default, after the other
    keyword-only ones (after ``*args`` or a bare ``*``, added when there is none) and before
    ``**kwargs``, in the layout of the parameters as written (one per line stays one per
    line; a trailing comma stays last). Positional-only parameters are left to the caller."""
    star = parameters.star_arg
    has_star = isinstance(star, cst.Param | cst.ParamStar)
    items: list[cst.Param | cst.ParamStar] = [*parameters.params]
    if isinstance(star, cst.Param | cst.ParamStar):
        items.append(star)
    items.extend(parameters.kwonly_params)
    kwargs = parameters.star_kwarg
    single = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    between: cst.Comma = single
    if len(items) >= 2 and isinstance(items[-2].comma, cst.Comma):
        between = items[-2].comma
    elif items and kwargs is not None and isinstance(items[-1].comma, cst.Comma):
        between = items[-1].comma
    trailing = bool(items) and kwargs is None and isinstance(items[-1].comma, cst.Comma)
    last_comma: cst.Comma | cst.MaybeSentinel = cst.MaybeSentinel.DEFAULT
    if kwargs is not None:
        last_comma = between
    elif trailing:
        last_comma = items[-1].comma  # type: ignore[assignment]
    param = cst.Param(cst.Name(name), comma=last_comma)
    kwonly = [*parameters.kwonly_params]
    changes: dict[str, object] = {}
    if items:
        previous = items[-1].with_changes(comma=between)
        if isinstance(previous, cst.Param) and kwargs is None and not trailing:
            # What closed the parameters after the old last one now follows the new one.
            param = param.with_changes(whitespace_after_param=previous.whitespace_after_param)
            previous = previous.with_changes(whitespace_after_param=cst.SimpleWhitespace(""))
        if parameters.kwonly_params:
            kwonly[-1] = previous  # type: ignore[assignment]
        elif has_star:
            changes["star_arg"] = previous
        else:
            changes["params"] = [*parameters.params[:-1], previous]
    if not has_star:
        changes["star_arg"] = cst.ParamStar(comma=between)
    changes["kwonly_params"] = [*kwonly, param]
    return parameters.with_changes(**changes)


def expression_as_written(code: str) -> cst.BaseExpression:
    """``code`` parsed so that its continuation lines keep the indentation they are written
    with, wherever the expression lands: libcst marks each of them as indented by the enclosing
    block, which a statement rebuilt around it (a function that also gets a parameter) would
    add again."""
    expression = cst.parse_expression(code)
    if "\n" not in code:
        return expression
    kept = expression.visit(_kept_indentation())
    assert isinstance(kept, cst.BaseExpression)  # the transformer only changes whitespace
    return kept


@cache
def _kept_indentation() -> cst.CSTTransformer:
    """A transformer that marks every line break inside brackets as not indented by its block
    (made on first use: libcst is imported only when an edit is made)."""

    class KeptIndentation(cst.CSTTransformer):
        def leave_ParenthesizedWhitespace(
            self,
            original_node: cst.ParenthesizedWhitespace,
            updated_node: cst.ParenthesizedWhitespace,
        ) -> cst.ParenthesizedWhitespace:
            return updated_node.with_changes(indent=False)

    return KeptIndentation()
