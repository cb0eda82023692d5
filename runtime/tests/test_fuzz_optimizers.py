"""Fuzzing every optimizer of ``apex.optimizers`` with random parameter lists and hyper-parameters.

Each example draws a parameter list (0-element and 0-d tensors, fp32/fp16/bf16 mixed in one group,
transposed and channels-last tensors, parameters without grad, never used, used only from the
third step, frozen then unfrozen, unfrozen then frozen), splits it into random groups with random
in-range hyper-parameters, trains it for a few steps and compares every parameter with a
reference: torch.optim, or the published formula (``reference_optimizers``), run in fp32 on
contiguous copies that receive the very same gradients.

The reference models what the fused optimizers promise for reduced precision: the update is
computed in fp32 (as torch's fused kernels do) and only what is stored is rounded, so after each
reference step the reference's parameters, and the state tensors the optimizer keeps in fp16 or
bf16, are rounded to that type. Documented tolerance (``TOLERANCE``, absolute and relative):
1e-5 for fp32, 4e-3 for fp16, 3e-2 for bf16 parameters, after ``STEPS`` steps.

Out-of-range hyper-parameters must raise Ascend's ``ValueError`` (same message); duplicate
parameters, parameters shared by two groups and sparse gradients must raise too, before anything
is updated. Set ``APEX_FUZZ_EXAMPLES`` (e.g. 500) for a longer run; the default keeps the whole
module within a few seconds.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_optimizers import (
    ReferenceAdamP,
    ReferenceBertAdam,
    ReferenceLamb,
    ReferenceNovoGrad,
    ReferenceNvLamb,
    ReferenceRMSpropTF,
)

from apex.optimizers import (
    FusedAdagrad,
    FusedAdam,
    FusedLAMB,
    FusedNovoGrad,
    FusedSGD,
    standalone,
)

EXAMPLES = int(os.environ.get("APEX_FUZZ_EXAMPLES", "6"))
STEPS = 4
TOLERANCE = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
REDUCED = (torch.float16, torch.bfloat16)
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="APEX_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow],
)

# ---- random parameter lists ----------------------------------------------------------------

SHAPES = [(), (0,), (5, 0), (3,), (17,), (4, 6), (2, 3, 4, 5)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = ["contiguous", "transposed", "channels_last"]
# train: a grad every step; no_grad: requires_grad=False; unused: never in the loss;
# late: in the loss from the third step; unfreeze / freeze: requires_grad flips at the third step.
ROLES = ["train", "train", "train", "no_grad", "unused", "late", "unfreeze", "freeze"]
LATE_STEP = 2


@dataclass(frozen=True)
class ParamSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str
    role: str


def param_specs(roles: list[str]) -> st.SearchStrategy[list[ParamSpec]]:
    spec = st.builds(
        ParamSpec,
        st.sampled_from(SHAPES),
        st.sampled_from(DTYPES),
        st.sampled_from(LAYOUTS),
        st.sampled_from(roles),
    )
    return st.lists(spec, min_size=1, max_size=7)


def make_params(specs: list[ParamSpec], seed: int, reference: bool) -> list[torch.nn.Parameter]:
    """The fuzzed parameters, or their fp32 contiguous twins for the reference."""
    generator = torch.Generator().manual_seed(seed)
    params = []
    for spec in specs:
        values = torch.randn(spec.shape, generator=generator).to(spec.dtype)
        if reference:
            values = values.float()
        elif spec.layout == "transposed" and values.dim() >= 2:
            values = values.transpose(0, 1).contiguous().transpose(0, 1)
        elif spec.layout == "channels_last" and values.dim() == 4:
            values = values.contiguous(memory_format=torch.channels_last)
        trainable = spec.role not in ("no_grad", "unfreeze")
        params.append(torch.nn.Parameter(values, requires_grad=trainable))
    return params


def backward(params: list[torch.nn.Parameter], specs: list[ParamSpec], step: int) -> None:
    """A seeded linear loss: each parameter's gradient is a fixed random tensor of its dtype."""
    generator = torch.Generator().manual_seed(1000 + step)
    loss = torch.zeros(())
    for p, spec in zip(params, specs, strict=True):
        direction = torch.randn(spec.shape, generator=generator).to(spec.dtype)
        if step == LATE_STEP and spec.role in ("unfreeze", "freeze"):
            p.requires_grad_(spec.role == "unfreeze")
        if spec.role == "unused" or (spec.role == "late" and step < LATE_STEP):
            continue
        if p.requires_grad:
            loss = loss + (p * direction).sum().float()
    if loss.requires_grad:
        loss.backward()


def split_into_groups(
    params: list[torch.nn.Parameter], assignment: list[int], options: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One group per options entry; parameter i goes to group ``assignment[i] % len(options)``."""
    groups: list[dict[str, Any]] = [{"params": [], **option} for option in options]
    for p, index in zip(params, assignment, strict=False):
        groups[index % len(groups)]["params"].append(p)
    return [group for group in groups if group["params"]]


# ---- hyper-parameters ----------------------------------------------------------------------

rate = st.sampled_from([0.0, 1e-3, 1e-2, 5e-2])
fraction = st.sampled_from([0.0, 0.5, 0.9])
second_moment = st.sampled_from([0.5, 0.9, 0.999])
decay = st.sampled_from([0.0, 1e-2, 0.1])


@st.composite
def sgd_options(draw: st.DrawFn) -> dict[str, Any]:
    momentum = draw(fraction)
    nesterov = momentum > 0 and draw(st.booleans())
    dampening = 0.0 if nesterov else draw(fraction)
    return dict(
        lr=draw(rate), momentum=momentum, dampening=dampening, nesterov=nesterov,
        weight_decay=draw(decay),
    )  # fmt: skip


def adam_options(amsgrad: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "lr": rate,
            "betas": st.tuples(fraction, second_moment),
            "eps": st.sampled_from([1e-8, 1e-6, 1e-3]),
            "weight_decay": decay,
            **({"amsgrad": st.booleans()} if amsgrad else {}),
        }
    )


OPTIONS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "sgd": sgd_options(),
    "adam": adam_options(),
    "adadelta": st.fixed_dictionaries(
        {"lr": st.sampled_from([0.0, 0.5, 1.0]), "rho": fraction, "weight_decay": decay}
    ),
    "rmsprop": st.fixed_dictionaries(
        {
            "lr": rate,
            "alpha": second_moment,
            "momentum": fraction,
            "centered": st.booleans(),
            "weight_decay": decay,
        }
    ),
    "lamb": adam_options(amsgrad=False),
    "rmsprop_tf": st.fixed_dictionaries(
        {
            "lr": rate,
            "alpha": second_moment,
            "momentum": fraction,
            "centered": st.booleans(),
            "weight_decay": decay,
            "decoupled_decay": st.booleans(),
            "lr_in_momentum": st.booleans(),
        }
    ),
    "adamp": st.fixed_dictionaries(
        {
            "lr": rate,
            "betas": st.tuples(fraction, second_moment),
            "weight_decay": decay,
            "nesterov": st.booleans(),
        }
    ),
    "bert_adam": st.fixed_dictionaries(
        {
            "lr": rate,
            "b1": fraction,
            "b2": second_moment,
            "weight_decay": decay,
            "max_grad_norm": st.sampled_from([-1.0, 0.5, 100.0]),
        }
    ),
    "nvidia_sgd": st.fixed_dictionaries({"lr": rate, "momentum": fraction, "weight_decay": decay}),
    "nvidia_adam": adam_options(amsgrad=False),
    "nvidia_lamb": st.fixed_dictionaries({"lr": rate, "weight_decay": decay}),
    "adagrad": st.fixed_dictionaries({"lr": rate, "weight_decay": decay}),
    "novograd": st.fixed_dictionaries({"lr": rate, "weight_decay": decay}),
}


@dataclass(frozen=True)
class Case:
    ours: Callable[..., torch.optim.Optimizer]
    reference: Callable[..., torch.optim.Optimizer]
    options: str
    # NVIDIA's Adam-like optimizers count steps per group, not per parameter: a parameter
    # joining later is bias-corrected with the group's count, so late joiners are left out.
    per_group_steps: bool = False


def _torch(optimizer_class: type[torch.optim.Optimizer]) -> Callable[..., torch.optim.Optimizer]:
    return lambda groups: optimizer_class(groups, foreach=False)


def _nvidia_adam_reference(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, foreach=False)  # same formula in NVIDIA's default mode


CASES: dict[str, Case] = {
    "NpuFusedSGD": Case(standalone.NpuFusedSGD, _torch(torch.optim.SGD), "sgd"),
    "NpuFusedAdam": Case(standalone.NpuFusedAdam, _torch(torch.optim.Adam), "adam"),
    "NpuFusedAdamW": Case(standalone.NpuFusedAdamW, _torch(torch.optim.AdamW), "adam"),
    "NpuFusedAdadelta": Case(standalone.NpuFusedAdadelta, _torch(torch.optim.Adadelta), "adadelta"),
    "NpuFusedRMSprop": Case(standalone.NpuFusedRMSprop, _torch(torch.optim.RMSprop), "rmsprop"),
    "NpuFusedLamb": Case(standalone.NpuFusedLamb, ReferenceLamb, "lamb"),
    "Lamb": Case(standalone.Lamb, ReferenceLamb, "lamb"),
    "NpuFusedRMSpropTF": Case(standalone.NpuFusedRMSpropTF, ReferenceRMSpropTF, "rmsprop_tf"),
    "NpuFusedAdamP": Case(standalone.NpuFusedAdamP, ReferenceAdamP, "adamp"),
    "NpuFusedBertAdam": Case(standalone.NpuFusedBertAdam, ReferenceBertAdam, "bert_adam"),
    "FusedSGD": Case(FusedSGD, _torch(torch.optim.SGD), "nvidia_sgd"),
    "FusedAdam": Case(FusedAdam, _nvidia_adam_reference, "nvidia_adam", per_group_steps=True),
    "FusedLAMB": Case(FusedLAMB, ReferenceNvLamb, "nvidia_lamb", per_group_steps=True),
    "FusedAdagrad": Case(FusedAdagrad, lambda g: torch.optim.Adagrad(g, eps=1e-10), "adagrad"),
    "FusedNovoGrad": Case(FusedNovoGrad, ReferenceNovoGrad, "novograd", per_group_steps=True),
}


# ---- running both sides --------------------------------------------------------------------


def copy_grads(source: list[torch.nn.Parameter], target: list[torch.nn.Parameter]) -> None:
    for ours, reference in zip(source, target, strict=True):
        reference.grad = None if ours.grad is None else ours.grad.detach().float().clone()


@torch.no_grad()
def round_like_ours(
    ours: torch.optim.Optimizer,
    reference: torch.optim.Optimizer,
    ours_params: list[torch.nn.Parameter],
    reference_params: list[torch.nn.Parameter],
) -> None:
    """Round what the reference stores to the types the fused optimizer stores it in."""
    for mine, theirs in zip(ours_params, reference_params, strict=True):
        if mine.dtype in REDUCED:
            theirs.copy_(theirs.to(mine.dtype))
        stored = ours.state.get(mine, {})
        for name, value in reference.state.get(theirs, {}).items():
            kept = stored.get(name)
            if (
                isinstance(value, torch.Tensor)
                and isinstance(kept, torch.Tensor)
                and kept.dtype in REDUCED
                and value.shape == kept.shape
            ):
                value.copy_(value.to(kept.dtype))


def zero_grad_in_place(optimizer: torch.optim.Optimizer) -> None:
    # In place: a packed parameter is always stepped (None counts as zero), as in Ascend.
    optimizer.zero_grad(set_to_none=False)


def run_case(
    case: Case, specs: list[ParamSpec], assignment: list[int], options: list[dict[str, Any]]
) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    ours_params = make_params(specs, seed=len(specs), reference=False)
    reference_params = make_params(specs, seed=len(specs), reference=True)
    ours = case.ours(split_into_groups(ours_params, assignment, options))
    reference = case.reference(split_into_groups(reference_params, assignment, options))
    for step in range(STEPS):
        zero_grad_in_place(ours)
        backward(ours_params, specs, step)
        copy_grads(ours_params, reference_params)
        ours.step()
        reference.step()
        round_like_ours(ours, reference, ours_params, reference_params)
    return ours_params, reference_params


def assert_matches(
    ours: list[torch.nn.Parameter], reference: list[torch.nn.Parameter], specs: list[ParamSpec]
) -> None:
    for index, (mine, theirs, spec) in enumerate(zip(ours, reference, specs, strict=True)):
        assert mine.dtype == spec.dtype and mine.shape == torch.Size(spec.shape), spec
        tolerance = TOLERANCE[spec.dtype]
        torch.testing.assert_close(
            mine.detach().float(),
            theirs.detach(),
            rtol=tolerance,
            atol=tolerance,
            equal_nan=True,
            msg=lambda text, index=index, spec=spec: f"parameter {index} {spec}: {text}",
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_random_parameter_lists_match_the_reference(name: str) -> None:
    case = CASES[name]
    roles = [r for r in ROLES if not (case.per_group_steps and r in ("late", "unfreeze"))]

    @FUZZ_SETTINGS
    @given(
        specs=param_specs(roles),
        assignment=st.lists(st.integers(0, 2), min_size=7, max_size=7),
        options=st.lists(OPTIONS[case.options], min_size=1, max_size=3),
    )
    def check(specs: list[ParamSpec], assignment: list[int], options: list[dict[str, Any]]):
        ours, reference = run_case(case, specs, assignment, options)
        assert_matches(ours, reference, specs)

    check()


# ---- bad input: Ascend's errors --------------------------------------------------------------

# (optimizer, hyper-parameter, how Ascend's message names it); values drawn out of range below.
RANGE_CHECKS: list[tuple[str, str, str]] = [
    ("NpuFusedSGD", "lr", "learning rate"),
    ("NpuFusedSGD", "momentum", "momentum value"),
    ("NpuFusedSGD", "weight_decay", "weight_decay value"),
    ("NpuFusedAdam", "lr", "learning rate"),
    ("NpuFusedAdam", "eps", "epsilon value"),
    ("NpuFusedAdam", "weight_decay", "weight_decay value"),
    ("NpuFusedAdamW", "betas", "beta parameter at index"),
    ("NpuFusedAdadelta", "rho", "rho value"),
    ("NpuFusedAdadelta", "lr", "learning rate"),
    ("NpuFusedRMSprop", "alpha", "alpha value"),
    ("NpuFusedRMSprop", "momentum", "momentum value"),
    ("NpuFusedRMSpropTF", "eps", "epsilon value"),
    ("NpuFusedLamb", "betas", "beta parameter at index"),
    ("Lamb", "lr", "learning rate"),
    ("NpuFusedBertAdam", "b1", "b1 parameter"),
    ("NpuFusedBertAdam", "warmup", "warmup"),
    ("FusedSGD", "lr", "learning rate"),
]

negative = st.floats(min_value=-1e3, max_value=-1e-6)
at_least_one = st.floats(min_value=1.0, max_value=1e3)


def out_of_range(hyperparameter: str) -> st.SearchStrategy[Any]:
    if hyperparameter == "betas":
        bad = st.one_of(negative, at_least_one)
        return st.one_of(st.tuples(bad, st.just(0.9)), st.tuples(st.just(0.9), bad))
    if hyperparameter == "rho":
        return st.one_of(negative, st.floats(min_value=1.001, max_value=1e3))
    if hyperparameter in ("b1", "warmup"):
        return st.one_of(negative.filter(lambda v: v != -1), at_least_one)
    return negative


@pytest.mark.parametrize(("name", "hyperparameter", "label"), RANGE_CHECKS)
def test_out_of_range_hyperparameters_raise_ascends_error(
    name: str, hyperparameter: str, label: str
) -> None:
    @FUZZ_SETTINGS
    @given(value=out_of_range(hyperparameter))
    def check(value: Any) -> None:
        param = torch.nn.Parameter(torch.ones(3))
        with pytest.raises(ValueError, match=rf"^Invalid {re.escape(label)}"):
            CASES[name].ours([param], **{"lr": 0.1, hyperparameter: value})

    check()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_tensor_in_two_groups_is_refused(name: str) -> None:
    shared = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        CASES[name].ours([{"params": [shared]}, {"params": [shared]}], lr=0.1)


@pytest.mark.parametrize("name", [n for n in sorted(CASES) if not n.startswith("Fused")])
def test_a_parameter_listed_twice_in_one_group_is_refused(name: str) -> None:
    # Regression: torch only warns here and updates the parameter twice per step; the flat
    # buffer held it once and updated it once, silently unlike torch.
    param = torch.nn.Parameter(torch.ones(3))
    twice = r"group 0 lists the same parameter twice \(positions 0 and 2\)"
    with pytest.warns(UserWarning, match="duplicate"), pytest.raises(ValueError, match=twice):
        CASES[name].ours([param, torch.nn.Parameter(torch.ones(2)), param], lr=0.1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sparse_gradients_are_refused_before_anything_changes(name: str) -> None:
    # Regression: the NpuFused optimizers failed deep inside aten with NotImplementedError.
    dense = torch.nn.Parameter(torch.ones(4))
    embedding = torch.nn.Embedding(5, 3, sparse=True)
    optimizer = CASES[name].ours([dense, embedding.weight], lr=0.1)
    dense.grad = torch.ones(4)
    embedding(torch.tensor([1, 2])).sum().backward()
    before = [dense.detach().clone(), embedding.weight.detach().clone()]
    expected = name if name.startswith("Fused") else CASES[name].ours.__name__
    with pytest.raises(RuntimeError, match=rf"^{expected} does not support sparse gradients"):
        optimizer.step()
    assert torch.equal(dense.detach(), before[0])
    assert torch.equal(embedding.weight.detach(), before[1])


# ---- regression examples for what the fuzzing found ----------------------------------------


@pytest.mark.parametrize(
    "name", ["NpuFusedBertAdam", "NpuFusedLamb", "NpuFusedAdamP", "NpuFusedRMSpropTF", "FusedAdam"]
)
def test_fp16_parameters_with_tiny_gradients_are_updated_in_fp32(name: str) -> None:
    # Regression: these computed fp16 updates in fp16, where exp_avg_sq of a gradient of 1e-3
    # underflows to 0 and eps=1e-6 / 1e-8 rounds to 0 or nearly: one step moved a parameter of
    # 1.0 by 1.0 (BertAdam) or to inf (AdamP, FusedAdam).
    specs = [ParamSpec((4, 6), torch.float16, "contiguous", "train")]
    ours_params = [torch.nn.Parameter(torch.ones(4, 6, dtype=torch.float16))]
    reference_params = [torch.nn.Parameter(torch.ones(4, 6))]
    ours = CASES[name].ours(ours_params, lr=0.01)
    reference = CASES[name].reference([{"params": reference_params, "lr": 0.01}])
    for _ in range(3):
        ours_params[0].grad = torch.full((4, 6), 1e-3, dtype=torch.float16)
        copy_grads(ours_params, reference_params)
        ours.step()
        reference.step()
        round_like_ours(ours, reference, ours_params, reference_params)
    assert torch.isfinite(ours_params[0]).all()
    assert_matches(ours_params, reference_params, specs)


def test_fused_adam_keeps_fp32_moments_for_fp16_parameters() -> None:
    # NVIDIA's FusedAdam creates its moments with ``.float()``; fp16 moments lose small grads.
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    optimizer = FusedAdam([param], lr=0.01)
    param.grad = torch.full((3,), 1e-4, dtype=torch.float16)
    optimizer.step()
    assert optimizer.state[param]["exp_avg_sq"].dtype == torch.float32
    assert optimizer.state[param]["exp_avg_sq"].min() > 0


# ---- state_dict round trips under random group layouts --------------------------------------


def save_and_reload(state: dict[str, Any]) -> dict[str, Any]:
    """A state dict as a checkpoint file gives it back (tensors copied, nothing shared)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_dict_round_trips_under_random_group_layouts(name: str) -> None:
    case = CASES[name]
    # NVIDIA's FusedNovoGrad fixes its per-tensor norms to the parameters with a gradient at the
    # first step; a late one is refused (test_optimizers_nvidia.py), on NVIDIA's too.
    roles = ["train", "train", "unused"] + ([] if name == "FusedNovoGrad" else ["late"])

    @FUZZ_SETTINGS
    @given(
        specs=param_specs(roles),
        assignment=st.lists(st.integers(0, 2), min_size=7, max_size=7),
        options=st.lists(OPTIONS[case.options], min_size=1, max_size=3),
        saved_after=st.integers(1, STEPS - 1),
    )
    def check(
        specs: list[ParamSpec],
        assignment: list[int],
        options: list[dict[str, Any]],
        saved_after: int,
    ) -> None:
        straight_params = make_params(specs, seed=3, reference=False)
        straight = case.ours(split_into_groups(straight_params, assignment, options))
        resumed_params = make_params(specs, seed=3, reference=False)
        for step in range(STEPS):
            if step == saved_after:
                with torch.no_grad():
                    for source, target in zip(straight_params, resumed_params, strict=True):
                        target.copy_(source)
                resumed = case.ours(split_into_groups(resumed_params, assignment, options))
                resumed.load_state_dict(save_and_reload(straight.state_dict()))
            for params, optimizer in [(straight_params, straight)] + (
                [(resumed_params, resumed)] if step >= saved_after else []
            ):
                zero_grad_in_place(optimizer)
                backward(params, specs, step)
                optimizer.step()
        for index, (a, b) in enumerate(zip(straight_params, resumed_params, strict=True)):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=f"parameter {index}")

    check()


def trained(name: str, shapes: list[tuple[int, ...]], groups: list[list[int]]) -> Any:
    params = [torch.nn.Parameter(torch.ones(shape)) for shape in shapes]
    # SGD keeps state only with momentum; without state there is nothing to mismatch.
    extra = {"momentum": 0.9} if name.endswith("SGD") else {}
    layout = [{"params": [params[i] for i in group]} for group in groups]
    optimizer = CASES[name].ours(layout, lr=0.1, **extra)
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    return params, optimizer


@pytest.mark.parametrize("name", sorted(CASES))
def test_loading_a_state_saved_with_another_group_layout_says_what_differs(name: str) -> None:
    shapes = [(3,), (17,), (2, 2)]
    _, saved = trained(name, shapes, [[0, 1], [2]])
    state = saved.state_dict()
    with pytest.raises(
        ValueError, match=r"saved with 2 parameter group\(s\), this optimizer has 1"
    ):
        trained(name, shapes, [[0, 1, 2]])[1].load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"group 0 has 1 parameter\(s\) here and 2 in the state dict "
        r"\(parameters per group: saved \[2, 1\], here \[1, 2\]\)",
    ):
        trained(name, shapes, [[0], [1, 2]])[1].load_state_dict(state)
    # Regression: same group sizes, parameters in another order: torch's check passes and a
    # flat buffer broadcast the saved state into the wrong slots.
    with pytest.raises(
        ValueError,
        match=r"parameter 0 of group 0 has shape \(17,\), but its saved '\w+' has "
        r"shape \(3,\)",
    ):
        trained(name, shapes, [[1, 0], [2]])[1].load_state_dict(state)
    with pytest.raises(ValueError, match="Not an optimizer state dict"):
        saved.load_state_dict({"state": {}})
