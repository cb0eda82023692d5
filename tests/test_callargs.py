"""migrator.callargs keeps the layout of the call it edits."""

from __future__ import annotations

import libcst as cst
import pytest

from migrator.callargs import add_keyword_only, append_arg, argument, keyword, remove_args


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("f()", "f(flag=True)"),
        ("f(a, b)", "f(a, b, flag=True)"),
        ("f(a, )", "f(a, flag=True, )"),
        ("f(\n    a,\n    b,\n)", "f(\n    a,\n    b,\n    flag=True,\n)"),
        ("f(\n    a,\n    b\n)", "f(\n    a,\n    b,\n    flag=True\n)"),
        ("f(\n    a, b)", "f(\n    a, b, flag=True)"),
        ("f(\n    a,\n)", "f(\n    a,\n    flag=True,\n)"),
        (
            "f(\n    a,  # one\n    b,  # two\n)",
            "f(\n    a,  # one\n    b,  # two\n    flag=True,\n)",
        ),
        ("f(a,  # c\n  b)", "f(a,  # c\n  b,\n  flag=True)"),
    ],
)
def test_append_keeps_layout(before: str, after: str) -> None:
    call = cst.parse_expression(before)
    assert isinstance(call, cst.Call)
    assert code(append_arg(call, keyword("flag", cst.Name("True")))) == after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("f(a, x=1, y=2)", "f(a, y=2)"),
        ("f(a, x=1)", "f(a)"),
        ("f(a, x=1, b=2, )", "f(a, b=2, )"),
        ("f(\n    a,\n    x=1,\n)", "f(\n    a,\n)"),
        ("f(\n    a,\n    x=1\n)", "f(\n    a\n)"),
    ],
)
def test_remove_keeps_layout(before: str, after: str) -> None:
    call = cst.parse_expression(before)
    assert isinstance(call, cst.Call)
    assert code(remove_args(call, {"x"})) == after


def test_argument_by_keyword_or_position() -> None:
    call = cst.parse_expression("Adam(params, 0.1, betas=b)")
    assert isinstance(call, cst.Call)
    lr = argument(call, "lr", 1)
    assert lr is not None and code(lr.value) == "0.1"
    betas = argument(call, "betas", 2)
    assert betas is not None and code(betas.value) == "b"
    assert argument(call, "eps", 3) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("def f(args, model):", "def f(args, model, *, apex_amp):"),
        ("def f():", "def f(*, apex_amp):"),
        ("def f(**kwargs):", "def f(*, apex_amp, **kwargs):"),
        ("def f(a, *args, b=1, **kw):", "def f(a, *args, b=1, apex_amp, **kw):"),
        ("def f(a, *, b):", "def f(a, *, b, apex_amp):"),
        (
            "def f(\n        model,\n        lr=None,\n        **kwargs):",
            "def f(\n        model,\n        lr=None,\n        *,\n        apex_amp,\n"
            "        **kwargs):",
        ),
        (
            "def f(\n    model,\n    opt,\n):",
            "def f(\n    model,\n    opt,\n    *,\n    apex_amp,\n):",
        ),
        (
            "def f(\n    model,\n    opt\n):",
            "def f(\n    model,\n    opt,\n    *,\n    apex_amp\n):",
        ),
    ],
)
def test_keyword_only_parameter_keeps_layout(before: str, after: str) -> None:
    module = cst.parse_module(before + "\n    pass\n")
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef)
    edited = function.with_changes(params=add_keyword_only(function.params, "apex_amp"))
    assert module.with_changes(body=[edited]).code == after + "\n    pass\n"
