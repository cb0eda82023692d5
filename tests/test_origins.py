"""The value-origin analysis (migrator/analysis/origins.py) on small programs.

Each case marks the expression asked about with a call of ``probe(...)`` and compares the
origins found, as written, with what Python would let reach that point.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from migrator.analysis.origins import (
    DEVICE_VALUES,
    OPTIMIZER_VALUES,
    LookThrough,
    Origins,
    origins_of,
    returned_values,
)
from migrator.analysis.parse import parse_index
from migrator.analysis.view import FileView


def view_of(code: str) -> FileView:
    return FileView(parse_index(textwrap.dedent(code), "case.py"))


def probed(view: FileView) -> ast.expr:
    """The argument of the (last) ``probe(...)`` call of the file."""
    calls = [
        call
        for call in view.index.nodes(ast.Call)
        if isinstance(call.func, ast.Name) and call.func.id == "probe"
    ]
    return calls[-1].args[0]


def shown(view: FileView, policy: LookThrough) -> list[str]:
    """The origins of the probed expression, as written (a parameter as ``param:<name>``)."""
    found = Origins(view, policy).of(probed(view))
    return [f"param:{o.arg}" if isinstance(o, ast.arg) else view.code(o) for o in found]


def origins(code: str, policy: LookThrough = DEVICE_VALUES) -> list[str]:
    return shown(view_of(code), policy)


# -- names: the definitions that reach the read -------------------------------------------------


def test_a_later_assignment_replaces_an_earlier_one() -> None:
    assert origins('d = "cuda"\nd = "cpu"\nprobe(d)\n') == ['"cpu"']


def test_both_branches_of_an_if_reach() -> None:
    code = """
    if fast:
        d = "cuda"
    else:
        d = "cpu"
    probe(d)
    """
    assert origins(code) == ['"cuda"', '"cpu"']


def test_an_assignment_after_the_read_does_not_reach_it() -> None:
    assert origins('d = "cuda"\nprobe(d)\nd = "cpu"\n') == ['"cuda"']


def test_a_loop_carries_its_assignments_back_to_its_head() -> None:
    code = """
    d = "cpu"
    for step in range(3):
        probe(d)
        d = "cuda"
    """
    assert origins(code) == ['"cpu"', '"cuda"']


def test_a_name_that_refers_to_itself_ends() -> None:
    code = """
    d = "cpu"
    while busy:
        d = d or "cuda"
    probe(d)
    """
    assert origins(code) == ['"cpu"', '"cuda"']


def test_a_global_read_in_a_function_sees_every_module_assignment() -> None:
    code = """
    device = "cuda"
    def run():
        probe(device)
    device = "cpu"
    """
    assert origins(code) == ['"cuda"', '"cpu"']


def test_what_cannot_be_followed_is_the_read_itself() -> None:
    code = """
    import os
    for d in os.environ["DEVICES"].split(","):
        probe(d)
    """
    assert origins(code) == ["d"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(DEVICE_VALUES, ["param:where", '"cuda"']), (OPTIMIZER_VALUES, ["where", '"cuda"'])],
    ids=["parameters-as-origins", "read-stands-for-parameter"],
)
def test_parameters(policy: LookThrough, expected: list[str]) -> None:
    code = """
    def run(where, fallback):
        if where is None:
            where = "cuda"
        probe(where)
    """
    assert origins(code, policy) == expected


# -- unpacking ------------------------------------------------------------------------------------


def test_tuple_unpacking_gives_each_name_its_element() -> None:
    assert origins('dtype, d = "fp16", "cuda"\nprobe(d)\n') == ['"cuda"']


def test_nested_unpacking_through_a_name() -> None:
    code = """
    pair = ("fp16", ("cuda", 0))
    dtype, (d, index) = pair
    probe(d)
    """
    assert origins(code) == ['"cuda"']


def test_a_starred_unpacking_cannot_be_told() -> None:
    assert origins('first, *rest = "cuda", "cpu", "mps"\nprobe(first)\n') == ["first"]


def test_unpacking_the_result_of_a_recursive_function_ends() -> None:
    # NeMo's `get_dtype_device`, which returns a call of itself for a container: the element
    # cannot be told on that path, so the read stays its own origin (it used to recurse until
    # Python's limit, and the file's project summary failed with RecursionError).
    code = """
    def get_dtype_device(value):
        if isinstance(value, list):
            return get_dtype_device(value[0])
        return value.dtype, value.device

    def run(batch):
        dtype, device = get_dtype_device(batch)
        probe(device)
    """
    assert origins(code, OPTIMIZER_VALUES) == ["device"]


def test_unpacking_off_leaves_the_read() -> None:
    policy = LookThrough(unpacking=False)
    assert origins('dtype, d = "fp16", "cuda"\nprobe(d)\n', policy) == ["d"]


def test_a_pass_through_call_hands_back_its_argument() -> None:
    code = """
    model, optimizer = amp.initialize(model, SGD(params))
    probe(optimizer)
    """
    view = view_of(code)

    def initialize(call: ast.Call, position: int | None) -> list[ast.expr] | None:
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "initialize"):
            return None
        return [call.args[1]] if position in (None, 1) else []

    found = Origins(view, OPTIMIZER_VALUES, pass_through=initialize).of(probed(view))
    assert [view.code(o) for o in found] == ["SGD(params)"]


# -- expressions the policy looks through ------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "on", "off"),
    [
        ('probe("cuda" if ok else "cpu")', LookThrough(), LookThrough(conditionals=False)),
        ('probe(args.device or "cuda")', LookThrough(boolean=True), LookThrough()),
        ("probe([SGD(a), Adam(b)])", LookThrough(containers=True), LookThrough()),
        ('probe({"main": SGD(a)})', LookThrough(containers=True), LookThrough()),
        ("probe(optimizers[0])", LookThrough(subscripts=True), LookThrough()),
        ('probe((d := "cuda"))', LookThrough(), LookThrough(walrus=False)),
        ('probe("cuda:{}".format(rank))', LookThrough(templates=True), LookThrough()),
        ('probe("cuda:%d" % rank)', LookThrough(templates=True), LookThrough()),
        ("probe(dict(sgd=SGD, adam=Adam))", LookThrough(containers=True), LookThrough()),
        ("probe(classes.get(name))", LookThrough(subscripts=True), LookThrough()),
    ],
    ids=[
        "conditional",
        "boolean",
        "list",
        "dict",
        "subscript",
        "walrus",
        "format",
        "percent",
        "dict-call",
        "get",
    ],
)
def test_each_look_through_is_a_choice(code: str, on: LookThrough, off: LookThrough) -> None:
    view = view_of(code)
    whole = view.code(probed(view))
    assert origins(code, on) != [whole]
    assert origins(code, off) == [whole]


def test_the_parts_found() -> None:
    assert origins('probe(args.device or "cuda")') == ["args.device", '"cuda"']
    assert origins('probe("cuda:{}".format(rank))') == ['"cuda:{}"']
    assert origins('probe({"a": SGD(a), **rest})', OPTIMIZER_VALUES) == ["SGD(a)"]
    assert origins("probe(f'cuda:{rank}'.format())") == ["f'cuda:{rank}'.format()"]
    assert origins("probe(width % rank)") == ["width % rank"]
    assert origins("probe(dict(base, sgd=SGD))", OPTIMIZER_VALUES) == ["base", "SGD"]
    assert origins("probe(classes.get(name, SGD))", OPTIMIZER_VALUES) == ["classes", "SGD"]
    # a `dict` of the module's own is no builtin; `get` with a keyword is no dict's
    assert origins("def dict(**k): pass\nprobe(dict(sgd=SGD))", OPTIMIZER_VALUES) == [
        "dict(sgd=SGD)"
    ]
    assert origins("probe(cfg.get(name, default=SGD))", OPTIMIZER_VALUES) == [
        "cfg.get(name, default=SGD)"
    ]


def test_a_container_gives_what_is_put_into_it_later() -> None:
    code = """
    OPTS = dict(sgd=SGD)
    OPTS["adam"] = Adam
    try:
        OPTS.update(lamb=Lamb, **more)
        OPTS.update({"rms": RMSprop})
    except ImportError:
        pass
    OPTS.setdefault("ada", Adadelta)

    def build(name):
        probe(OPTS[name])
    """
    # every statement that fills the one object, in any order: ESPnet's `optim_classes`
    assert origins(code, OPTIMIZER_VALUES) == ["SGD", "Adam", "Lamb", "more", "RMSprop", "Adadelta"]
    # what cannot be read stands for itself
    augmented = code.replace('OPTS["adam"] = Adam', 'OPTS["adam"] += extra')
    assert origins(augmented, OPTIMIZER_VALUES)[:2] == ["SGD", 'OPTS["adam"]']
    appended = "opts = [first]\nopts.append(second)\nopts.extend(rest)\nprobe(opts)\n"
    assert origins(appended, OPTIMIZER_VALUES) == ["first", "second", "rest"]
    # not a container: `meter.update(x)` puts nothing into what `meter` holds
    assert origins("meter = Meter()\nmeter.update(loss)\nprobe(meter)\n", OPTIMIZER_VALUES) == [
        "Meter()"
    ]
    # another binding of the same spelling (a function's own `OPTS`) is another object
    local = code.replace("def build(name):", "def build(name):\n        OPTS = {}")
    assert origins(local, OPTIMIZER_VALUES) == []
    # refilled under new keys (ESPnet lower-cases them): the same classes, and only those
    refilled = code.replace(
        "    def build", "    OPTS = {k.lower(): v for k, v in OPTS.items()}\n\n    def build"
    )
    assert origins(refilled, OPTIMIZER_VALUES) == origins(code, OPTIMIZER_VALUES)
    keys = refilled.replace("for k, v in OPTS.items()", "for v, k in OPTS.items()")
    assert origins(keys, OPTIMIZER_VALUES) == [
        *origins(code, OPTIMIZER_VALUES),
        "{k.lower(): v for v, k in OPTS.items()}",  # the keys: not followed
    ]
    # containers not looked through: the container itself, nothing put into it
    assert origins(code, LookThrough(subscripts=True)) == ["dict(sgd=SGD)"]


def test_a_class_attribute_gives_what_the_class_body_assigns() -> None:
    code = """
    class Base:
        OPTS = {"sgd": SGD}

    class Agent(Base):
        OPTS = {"adam": Adam}

        def build(self):
            probe(Agent.OPTS[name])
    """
    # named directly: exactly the class's own body (a base's is overridden)
    assert origins(code, OPTIMIZER_VALUES) == ["Adam"]
    # inherited: the module's bases' bodies, and the read (a base of another module may hold it)
    inherited = code.replace('OPTS = {"adam": Adam}', "pass")
    assert origins(inherited, OPTIMIZER_VALUES) == ["Agent.OPTS", "SGD"]
    # through `self`: the related classes' bodies, and what a subclass elsewhere may assign
    through_self = code.replace("probe(Agent.OPTS[name])", "probe(self.OPTS[name])")
    assert origins(through_self, OPTIMIZER_VALUES) == ["self.OPTS", "SGD", "Adam"]
    # an attribute so named assigned anywhere in the module: not followed into class bodies
    assigned = through_self.replace("class Base:", "other.OPTS = {}\n\n    class Base:")
    assert origins(assigned, OPTIMIZER_VALUES) == ["self.OPTS"]
    assert origins(code, LookThrough(subscripts=True, containers=True)) == ["Agent.OPTS"]


def test_attributes_through_the_assignments_of_the_module() -> None:
    code = """
    class Trainer:
        def __init__(self, cfg):
            self.device = "cuda" if cfg.gpu else "cpu"

        def run(self, model):
            probe(self.device)
    """
    assert origins(code, LookThrough(attributes=True)) == ['"cuda"', '"cpu"']
    assert origins(code, LookThrough()) == ["self.device"]


def test_an_attribute_assigned_in_its_own_function_hides_the_others() -> None:
    code = """
    class Trainer:
        def __init__(self):
            self.device = "cuda"

        def run(self):
            self.device = "cpu"
            probe(self.device)
    """
    assert origins(code, LookThrough(attributes=True)) == ['"cpu"']


def test_local_calls_through_their_returns() -> None:
    code = """
    import helpers

    def pick():
        if ok:
            return "cuda"
        return "cpu"

    probe(pick() or helpers.pick())
    """
    policy = LookThrough(boolean=True, local_calls=True)
    assert origins(code, policy) == ['"cuda"', '"cpu"', "helpers.pick()"]
    assert origins(code, LookThrough(boolean=True)) == ["pick()", "helpers.pick()"]


def test_an_imported_function_is_not_followed_into_a_local_one_of_the_same_name() -> None:
    code = """
    from helpers import pick

    def pick_local():
        return "cuda"

    probe(pick())
    """
    assert origins(code, LookThrough(local_calls=True)) == ["pick()"]


_HANDING_BACK = """
def maybe_clip(cfg, optimizer, *, scale=None):
    if cfg.clip:
        optimizer.clip_value = cfg.clip
        return optimizer
    return optimizer

def rebinds(cfg, optimizer):
    if cfg.wrap:
        optimizer = Wrapper(optimizer)
    return optimizer

def keyword_only(*, optimizer=None):
    return optimizer

def packed(*args):
    return args

sgd = SGD(params)
"""


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ("maybe_clip(cfg, sgd)", ["SGD(params)"]),  # both returns hand the argument back
        ("maybe_clip(cfg, optimizer=Adam(params))", ["Adam(params)"]),
        ("keyword_only(optimizer=sgd)", ["SGD(params)"]),
        # A path that rebinds the parameter, a default, a starred call, `*args` itself: the
        # returned values as before.
        ("rebinds(cfg, sgd)", ["optimizer", "Wrapper(optimizer)"]),
        ("keyword_only()", ["optimizer"]),
        ("maybe_clip(*pair)", ["optimizer", "optimizer"]),
        ("packed(sgd)", ["args"]),
    ],
)
def test_a_local_function_that_hands_its_argument_back_gives_the_argument(
    call: str, expected: list[str]
) -> None:
    code = f"{_HANDING_BACK}probe({call})\n"
    assert shown(FileView(parse_index(code, "case.py")), LookThrough(local_calls=True)) == expected


def test_a_method_that_returns_its_argument_is_not_matched_to_the_call() -> None:
    code = """
    class Builder:
        def keep(self, optimizer):
            return optimizer

    probe(Builder().keep(SGD(params)))
    """
    assert origins(code, LookThrough(local_calls=True)) == ["optimizer"]


# -- sharing --------------------------------------------------------------------------------------


def test_one_analysis_per_file_and_policy() -> None:
    view = view_of("probe(1)\n")
    assert origins_of(view, DEVICE_VALUES) is origins_of(view, DEVICE_VALUES)
    assert origins_of(view, DEVICE_VALUES) is not origins_of(view, OPTIMIZER_VALUES)
    assert origins_of(view, DEVICE_VALUES).reaching is origins_of(view, OPTIMIZER_VALUES).reaching


def test_returned_values_are_the_functions_own() -> None:
    view = view_of(
        """
        def build():
            def inner():
                return "nested"
            if ok:
                return SGD(a)
            return Adam(b)
        """
    )
    function = view.index.tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    assert [view.code(v) for v in returned_values(view.index, function)] == ["SGD(a)", "Adam(b)"]
