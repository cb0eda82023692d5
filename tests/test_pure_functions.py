"""What NPU203 may call earlier than written (migrator/analysis/functions.py): the verdict on
functions of one module, shape by shape. A pure function changes nothing its caller can see
but what it returns; some calls are accepted as assumptions that NPU203's message states.

The fixtures (fixtures/npu203, fixtures/npu101/factory_moved_by_npu203) show the rule's edits
on the shapes of real repositories; these tests hold each reason a function is refused, which
a fixture would hide behind the first one it meets."""

from __future__ import annotations

import ast
import textwrap

from migrator.analysis.functions import FunctionSummary, ModuleFunctions
from migrator.analysis.parse import index_of_bytes


def summary_of(source: str, name: str = "f") -> FunctionSummary | None:
    index = index_of_bytes(textwrap.dedent(source).encode(), "helpers.py")
    assert index is not None
    return ModuleFunctions(index).summary(name)


# BEiT's get_parameter_groups and MAE's param_groups_lrd, reduced: dicts of groups the function
# builds, a list in each group grown through `groups[name]["params"]`, and a print.
GROUPS_BY_NAME = """
import json

def f(model, weight_decay, skip_list=()):
    names = {}
    groups = {}
    for name, param in model.named_parameters():
        group_name = "no_decay" if name in skip_list else "decay"
        if group_name not in groups:
            names[group_name] = {"weight_decay": 0.0, "params": []}
            groups[group_name] = {"weight_decay": weight_decay, "params": []}
        groups[group_name]["params"].append(param)
        names[group_name]["params"].append(name)
    print("Param groups = %s" % json.dumps(names, indent=2))
    return list(groups.values())
"""


def test_groups_the_function_builds_may_grow() -> None:
    summary = summary_of(GROUPS_BY_NAME)
    assert summary is not None
    assert summary.assumptions == () and summary.called == {}


IMPURE = {
    "a list of the caller stored in a group, then grown": """
        def f(model, extra):
            groups = {}
            groups["a"] = {"params": extra}
            groups["a"]["params"].append(1)
            return groups
    """,
    "a group reached by a computed key": """
        def f(model, key):
            groups = {}
            groups["a"] = {"params": []}
            groups["a"][key].append(1)
            return groups
    """,
    "a local that is the caller's list": """
        def f(model, groups):
            out = groups
            out.append({"params": list(model.parameters())})
            return out
    """,
    "a local bound to a new list and to the caller's": """
        def f(model, groups, fresh):
            out = []
            if not fresh:
                out = groups
            out.append(1)
            return out
    """,
    "an item stored in the caller's dict": """
        def f(model, config):
            config["params"] = list(model.parameters())
            return config
    """,
    "a parameter frozen": """
        def f(model):
            for param in model.parameters():
                param.requires_grad = False
            return list(model.parameters())
    """,
    "a print to a file": """
        def f(model, log):
            print("groups", file=log)
            return list(model.parameters())
    """,
    "an exception class of the repository": """
        def f(model):
            raise ConfigError("no optimizer")
    """,
    "a class that is no optimizer class": """
        from timm.models import Mixer
        def f(model):
            return Mixer(model)
    """,
    "a method of the model other than no_weight_decay()": """
        def f(model):
            model.freeze_stages()
            return list(model.parameters())
    """,
    "a parameter without a None default called (it may be the model: a forward pass)": """
        def f(model, sample):
            model(sample)
            return list(model.parameters())
    """,
    "a function of the module that is handed a function of the module": """
        def scale(name):
            return 1.0

        def groups(model, get_scale=None):
            return [{"params": [p], "lr": get_scale(n)} for n, p in model.named_parameters()]

        def f(model):
            return groups(model, get_scale=scale)
    """,
}


def test_what_a_pure_function_may_not_do() -> None:
    for why, source in IMPURE.items():
        assert summary_of(source) is None, why


def test_an_assert_or_a_raise_stops_the_program_wherever_it_runs() -> None:
    source = """
    import torch

    def f(model, opt):
        assert opt in ("sgd", "adamw"), "Invalid optimizer"
        if opt == "sgd":
            return torch.optim.SGD(model.parameters(), lr=0.1)
        if opt == "adamw":
            return torch.optim.AdamW(model.parameters())
        raise ValueError(opt)
    """
    summary = summary_of(source)
    assert summary is not None and summary.assumptions == ()


def test_optimizer_classes_of_torch_and_of_the_module_are_built_without_assumptions() -> None:
    source = """
    from torch import optim as optim

    class LARS(optim.Optimizer):
        def __init__(self, params, lr=0):
            defaults = dict(lr=lr)
            super().__init__(params, defaults)

    def f(model):
        opt_args = dict(lr=0.1)
        opt_args.pop("eps", None)
        if model.lars:
            return LARS(model.parameters(), **opt_args)
        return optim.SGD(model.parameters(), momentum=0.9, **opt_args)
    """
    summary = summary_of(source)
    assert summary is not None and summary.assumptions == ()


def test_classes_from_outside_and_no_weight_decay_are_assumptions() -> None:
    source = """
    from timm.optim.lookahead import Lookahead
    from timm.optim.nadam import Nadam

    def f(model, opt):
        skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else {}
        optimizer = Nadam([p for n, p in model.named_parameters() if n not in skip])
        if opt.startswith("lookahead"):
            optimizer = Lookahead(optimizer)
        return optimizer
    """
    summary = summary_of(source)
    assert summary is not None
    assert summary.assumptions == (
        "`model.no_weight_decay()` only reads the model (timm's convention: it returns "
        "parameter names)",
        "the optimizer classes `f` may build from outside the files given "
        "(`timm.optim.nadam.Nadam`, `timm.optim.lookahead.Lookahead`) only build an optimizer",
    )


CALLS_WHAT_IT_IS_GIVEN = """
def groups(model, get_num_layer=None, get_scale=None):
    found = {}
    for name, param in model.named_parameters():
        layer = get_num_layer(name) if get_num_layer is not None else 0
        if layer not in found:
            scale = get_scale(layer) if get_scale is not None else 1.0
            found[layer] = {"params": [], "lr_scale": scale}
        found[layer]["params"].append(param)
    return list(found.values())

def f(args, model, get_num_layer=None, get_layer_scale=None):
    return groups(model, get_num_layer, get_scale=get_layer_scale)
"""


def test_functions_it_is_given_are_the_callers_to_state() -> None:
    inner = summary_of(CALLS_WHAT_IT_IS_GIVEN, "groups")
    outer = summary_of(CALLS_WHAT_IT_IS_GIVEN)
    assert inner is not None and outer is not None
    assert inner.called == {"get_num_layer": "None", "get_scale": "None"}
    assert outer.called == {"get_layer_scale": "None", "get_num_layer": "None"}

    def call_of(text: str) -> ast.Call:
        call = ast.parse(text).body[0].value  # type: ignore[attr-defined]
        assert isinstance(call, ast.Call)
        return call

    def stated(text: str) -> list[str]:
        return outer.call_assumptions(call_of(text), ast.unparse)

    assert stated("f(args, model)") == []
    assert stated("f(args, model, None, get_layer_scale=None)") == []
    assert stated("f(args, model, get_num_layer=a.get_layer_id if a is not None else None)") == [
        "`a.get_layer_id if a is not None else None`, which `f` calls, only reads what it is given"
    ]
    assert stated("f(args, model, **hooks)") == [
        "what the call may pass as `get_layer_scale` through `*`/`**`, which `f` calls, only "
        "reads what it is given",
        "what the call may pass as `get_num_layer` through `*`/`**`, which `f` calls, only reads "
        "what it is given",
    ]
