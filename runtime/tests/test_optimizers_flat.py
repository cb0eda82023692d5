"""The flat-buffer contract of the NpuFused optimizers: layout, memory, grads, state dicts."""

from __future__ import annotations

import gc
import io
import weakref
from typing import Any

import numpy as np
import pytest
import torch

import apex.optimizers
from apex.contrib.combine_tensors import get_aligned_storage_size, is_combined_tensor_valid
from apex.optimizers import standalone


def _copy_values(source: Any, target: Any) -> None:
    with torch.no_grad():
        for mine, theirs in zip(target.all_params, source.all_params, strict=True):
            mine.copy_(theirs)


# ---- layout ---------------------------------------------------------------------------------


def test_packing_puts_each_group_in_one_buffer_with_ascend_slots(workload, trainer) -> None:
    optimizer = standalone.NpuFusedAdam(workload.groups([{"lr": 1e-3}, {"lr": 1e-2}]))
    assert not optimizer.is_packed
    trainer(workload, optimizer, steps=1)

    assert optimizer.is_packed
    grad_buffers = optimizer.flat_grad_buffers()
    assert len(grad_buffers) == 2
    for group, param_buffer, grad_buffer in zip(
        optimizer.param_groups, optimizer.flat_param_buffers(), grad_buffers, strict=True
    ):
        packed = [p for p in group["params"] if p.grad is not None]
        offset = 0
        for p in packed:
            for tensor, buffer in ((p, param_buffer), (p.grad, grad_buffer)):
                assert tensor.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
                assert tensor.storage_offset() == offset
            exp_avg = optimizer.state[p]["exp_avg"]
            assert exp_avg.untyped_storage().data_ptr() != p.untyped_storage().data_ptr()
            assert exp_avg.shape == p.shape
            offset += get_aligned_storage_size(p)
        assert param_buffer.numel() == offset
    # The objects users hold are the objects the optimizer updates.
    assert all(
        any(p is q for q in optimizer.param_groups[0]["params"]) for p in workload.trainable[::2]
    )
    assert isinstance(workload.trainable[0], torch.nn.Parameter)
    assert workload.unused.grad is None and workload.frozen.grad is None


def test_pack_is_idempotent_and_waits_for_grads(workload) -> None:
    optimizer = standalone.NpuFusedSGD(workload.groups([{}]), lr=0.1)
    optimizer.pack()
    assert not optimizer.is_packed
    workload.backward(0)
    optimizer.pack()
    buffers = optimizer.flat_grad_buffers()
    optimizer.pack()
    assert [b.data_ptr() for b in optimizer.flat_grad_buffers()] == [b.data_ptr() for b in buffers]


def test_mixed_dtypes_in_one_group_get_one_buffer_each(same_params) -> None:
    def make() -> list[torch.nn.Parameter]:
        torch.manual_seed(3)
        return [
            torch.nn.Parameter(torch.randn(5)),
            torch.nn.Parameter(torch.randn(4, dtype=torch.float64)),
            torch.nn.Parameter(torch.randn(3)),
        ]

    ours_params, torch_params = make(), make()
    ours = standalone.NpuFusedAdam(ours_params, lr=1e-2)
    reference = torch.optim.Adam(torch_params, lr=1e-2)
    for _ in range(5):
        for params, optimizer in ((ours_params, ours), (torch_params, reference)):
            optimizer.zero_grad()
            sum((p * p).sum() for p in params).backward()
            optimizer.step()
    assert sorted(str(b.dtype) for b in ours.flat_grad_buffers()) == [
        "torch.float32",
        "torch.float64",
    ]
    for mine, theirs in zip(ours_params, torch_params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-6)


# ---- memory -------------------------------------------------------------------------------


def _live_bytes(optimizer: torch.optim.Optimizer) -> int:
    storages: dict[int, int] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            tensors = [p, p.grad, *optimizer.state.get(p, {}).values()]
            for tensor in tensors:
                if isinstance(tensor, torch.Tensor) and tensor.numel() > 1:
                    storage = tensor.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def test_packing_keeps_no_second_copy() -> None:
    arrays = [
        np.random.default_rng(i).standard_normal(1000 + 7 * i).astype(np.float32) for i in range(40)
    ]
    params = [torch.nn.Parameter(torch.from_numpy(array)) for array in arrays]
    array_refs = [weakref.ref(array) for array in arrays]
    del arrays
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ours = standalone.NpuFusedAdam(params, lr=1e-3)
    reference = torch.optim.Adam(twins, lr=1e-3)
    for tensors, optimizer in ((params, ours), (twins, reference)):
        sum((p * p).sum() for p in tensors).backward()
        optimizer.step()
    gc.collect()
    assert all(ref() is None for ref in array_refs)  # the original parameter memory was freed
    assert _live_bytes(ours) <= 1.05 * _live_bytes(reference)


# ---- gradients ------------------------------------------------------------------------------


def test_zero_grad_zeroes_the_buffers_in_place(workload, trainer) -> None:
    optimizer = standalone.NpuFusedSGD(workload.groups([{}]), lr=0.1, momentum=0.9)
    trainer(workload, optimizer, steps=1)
    with pytest.raises(RuntimeError, match=r"zero_grad\(set_to_none=True\) would detach"):
        optimizer.zero_grad(set_to_none=True)
    grads = [p.grad for p in workload.trainable]
    optimizer.zero_grad()
    assert all(p.grad is g for p, g in zip(workload.trainable, grads, strict=True))
    assert all(torch.count_nonzero(buffer) == 0 for buffer in optimizer.flat_grad_buffers())
    workload.backward(1)
    (buffer,) = optimizer.flat_grad_buffers()
    assert is_combined_tensor_valid(buffer, grads)
    assert torch.count_nonzero(buffer) > 0


def test_set_to_none_before_packing_behaves_like_torch(workload) -> None:
    optimizer = standalone.NpuFusedAdam(workload.groups([{}]))
    workload.backward(0)
    optimizer.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in workload.trainable)


def test_grads_replaced_by_model_zero_grad_are_readopted(workload_class, same_params) -> None:
    ours_workload, reference_workload = workload_class(1), workload_class(1)
    ours = standalone.NpuFusedAdamW(ours_workload.groups([{"lr": 1e-2}, {"lr": 1e-3}]))
    reference = torch.optim.AdamW(reference_workload.groups([{"lr": 1e-2}, {"lr": 1e-3}]))
    for step in range(6):
        for workload, optimizer in ((ours_workload, ours), (reference_workload, reference)):
            for p in workload.all_params:
                p.grad = None  # what model.zero_grad() does in torch 2
            workload.backward(step)
            optimizer.step()
    same_params(ours_workload, reference_workload)
    buffers = ours.flat_grad_buffers()
    assert any(is_combined_tensor_valid(b, [ours_workload.trainable[0].grad]) for b in buffers)


def test_param_without_grad_at_packing_is_updated_tensor_by_tensor(same_params) -> None:
    def make() -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
        torch.manual_seed(5)
        return torch.nn.Parameter(torch.randn(8)), torch.nn.Parameter(torch.randn(3, 3))

    ours_params, torch_params = make(), make()
    ours = standalone.NpuFusedSGD(ours_params, lr=0.1, momentum=0.9)
    reference = torch.optim.SGD(torch_params, lr=0.1, momentum=0.9)
    for step in range(8):
        for (early, late), optimizer in ((ours_params, ours), (torch_params, reference)):
            optimizer.zero_grad()
            loss = (early * early).sum() + ((late * late).sum() if step >= 3 else 0)
            loss.backward()
            optimizer.step()
    for mine, theirs in zip(ours_params, torch_params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-6)
    assert len(ours.flat_grad_buffers()) == 1
    assert not is_combined_tensor_valid(ours.flat_grad_buffers()[0], [ours_params[1].grad])


def test_packed_param_whose_grad_went_missing_is_stepped_with_zero_grad() -> None:
    params = [torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4))]
    optimizer = standalone.NpuFusedSGD(params, lr=0.1, momentum=0.5)
    sum((p * p).sum() for p in params).backward()
    optimizer.step()  # momentum buffers now hold 2.0
    params[1].grad = None
    params[0].grad.fill_(2.0)
    optimizer.step()
    torch.testing.assert_close(params[1].detach(), torch.full((4,), 0.8 - 0.1 * 1.0))
    assert params[1].grad is not None and torch.count_nonzero(params[1].grad) == 0


# ---- state dicts ----------------------------------------------------------------------------

STATE_DICT_CASES = [
    (standalone.NpuFusedSGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    (standalone.NpuFusedAdam, torch.optim.Adam, {"lr": 1e-2, "amsgrad": True}),
    (standalone.NpuFusedAdamW, torch.optim.AdamW, {"lr": 1e-2}),
    (
        standalone.NpuFusedRMSprop,
        torch.optim.RMSprop,
        {"lr": 1e-3, "momentum": 0.5, "centered": True},
    ),
    (standalone.NpuFusedAdadelta, torch.optim.Adadelta, {"lr": 1.0}),
]


def _case_name(case: tuple[type, type, dict[str, Any]]) -> str:
    return case[0].__name__


@pytest.mark.parametrize("case", STATE_DICT_CASES, ids=_case_name)
def test_state_dict_moves_both_ways_between_torch_and_fused(
    case, workload_class, trainer, same_params
) -> None:
    ours_class, torch_class, options = case
    groups = [options, {**options, "lr": options["lr"] / 2}]

    # torch -> fused, loaded before packing, then fused -> torch after packing.
    torch_workload = workload_class(2)
    torch_optimizer = torch_class(torch_workload.groups(groups))
    trainer(torch_workload, torch_optimizer, steps=4)
    ours_workload = workload_class(2)
    _copy_values(torch_workload, ours_workload)
    ours = ours_class(ours_workload.groups(groups))
    ours.load_state_dict(torch_optimizer.state_dict())
    trainer(ours_workload, ours, steps=4, first_step=4)
    trainer(torch_workload, torch_optimizer, steps=4, first_step=4)
    same_params(ours_workload, torch_workload)
    assert ours.is_packed

    buffer = io.BytesIO()
    torch.save(ours.state_dict(), buffer)
    buffer.seek(0)
    back_workload = workload_class(2)
    _copy_values(ours_workload, back_workload)
    back = torch_class(back_workload.groups(groups))
    back.load_state_dict(torch.load(buffer))
    trainer(back_workload, back, steps=4, first_step=8)
    trainer(ours_workload, ours, steps=4, first_step=8)
    same_params(back_workload, ours_workload)


def test_loading_into_an_already_packed_optimizer_copies_into_its_buffers(
    workload_class, trainer, same_params
) -> None:
    torch_workload, ours_workload = workload_class(4), workload_class(4)
    torch_optimizer = torch.optim.Adam(torch_workload.groups([{"lr": 1e-2}]))
    ours = standalone.NpuFusedAdam(ours_workload.groups([{"lr": 1e-2}]))
    trainer(ours_workload, ours, steps=2)  # packed, with its own progress
    buffers = ours.flat_grad_buffers()
    trainer(torch_workload, torch_optimizer, steps=5)
    _copy_values(torch_workload, ours_workload)
    ours.load_state_dict(torch_optimizer.state_dict())
    assert [b.data_ptr() for b in ours.flat_grad_buffers()] == [b.data_ptr() for b in buffers]
    trainer(ours_workload, ours, steps=3, first_step=5)
    trainer(torch_workload, torch_optimizer, steps=3, first_step=5)
    same_params(ours_workload, torch_workload)


def test_loading_disagreeing_steps_into_a_packed_bucket_splits_it(same_params) -> None:
    def make() -> list[torch.nn.Parameter]:
        torch.manual_seed(9)
        return [torch.nn.Parameter(torch.randn(6)), torch.nn.Parameter(torch.randn(5))]

    torch_params, ours_params = make(), make()
    reference = torch.optim.Adam(torch_params, lr=1e-2)
    for step in range(6):  # the second parameter only trains from step 3: steps 6 vs 3
        reference.zero_grad()
        loss = (torch_params[0] ** 2).sum() + ((torch_params[1] ** 2).sum() if step >= 3 else 0)
        loss.backward()
        reference.step()
    ours = standalone.NpuFusedAdam(ours_params, lr=1e-2)
    sum((p * 0).sum() for p in ours_params).backward()
    ours.pack()
    with torch.no_grad():
        for mine, theirs in zip(ours_params, torch_params, strict=True):
            mine.copy_(theirs)
    ours.load_state_dict(reference.state_dict())
    for optimizer, params in ((ours, ours_params), (reference, torch_params)):
        for _ in range(3):
            optimizer.zero_grad()
            sum((p * p).sum() for p in params).backward()
            optimizer.step()
    for mine, theirs in zip(ours_params, torch_params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-6)
    assert [float(ours.state[p]["step"]) for p in ours_params] == [9.0, 6.0]


def test_add_param_group_after_packing(workload_class, same_params) -> None:
    ours_workload, torch_workload = workload_class(6), workload_class(6)
    ours = standalone.NpuFusedAdam(ours_workload.trainable[:3], lr=1e-2)
    reference = torch.optim.Adam(torch_workload.trainable[:3], lr=1e-2)
    for step in range(8):
        if step == 3:
            ours.add_param_group({"params": ours_workload.trainable[3:], "lr": 5e-3})
            reference.add_param_group({"params": torch_workload.trainable[3:], "lr": 5e-3})
        for workload, optimizer in ((ours_workload, ours), (torch_workload, reference)):
            optimizer.zero_grad()
            workload.backward(step)
            optimizer.step()
    same_params(ours_workload, torch_workload)
    assert len(ours.flat_grad_buffers()) == 2


def test_state_dict_before_any_step_is_empty_and_loads() -> None:
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = standalone.NpuFusedSGD([param], lr=0.1, momentum=0.9)
    state = optimizer.state_dict()
    assert state["state"] == {}
    torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1).load_state_dict(state)


# ---- Ascend behaviour: the amp check, validation, documented choices ----------------------

AMP_CHECKED = [
    "NpuFusedSGD",
    "NpuFusedAdam",
    "NpuFusedAdamW",
    "NpuFusedAdadelta",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedLamb",
    "NpuFusedAdamP",
    "NpuFusedBertAdam",
]


@pytest.mark.parametrize("name", AMP_CHECKED)
def test_apex_npu_fused_step_requires_amp(name: str) -> None:
    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.ones(3)
    optimizer = getattr(apex.optimizers, name)([param], lr=0.1)
    assert optimizer.is_npu_fused_optimizer
    with pytest.raises(
        RuntimeError, match=rf"^apex\.optimizers\.{name} should be used with AMP\.$"
    ):
        optimizer.step()
    optimizer._amp_stash = object()  # what amp.initialize attaches
    optimizer.step()
    assert not torch.equal(param.detach(), torch.ones(3))
    getattr(standalone, name)([torch.nn.Parameter(torch.ones(1))], lr=0.1).step()


def test_lamb_has_no_amp_check() -> None:
    """Ascend's `Lamb` steps without `amp.initialize`; `NpuFusedLamb`, the same math, refuses."""
    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.ones(3)
    apex.optimizers.Lamb([param], lr=0.1).step()
    assert not torch.equal(param.detach(), torch.ones(3))  # it did step
    fused = torch.nn.Parameter(torch.ones(3))
    fused.grad = torch.ones(3)
    with pytest.raises(RuntimeError, match="should be used with AMP"):
        apex.optimizers.NpuFusedLamb([fused], lr=0.1).step()


VALIDATION_CASES = [
    ("NpuFusedSGD", {"lr": -1}, "Invalid learning rate: -1"),
    ("NpuFusedSGD", {"lr": 0.1, "momentum": -0.5}, "Invalid momentum value: -0.5"),
    ("NpuFusedSGD", {"lr": 0.1, "weight_decay": -1}, "Invalid weight_decay value: -1"),
    (
        "NpuFusedSGD",
        {"lr": 0.1, "nesterov": True},
        "Nesterov momentum requires a momentum and zero dampening",
    ),
    ("NpuFusedAdam", {"lr": -0.1}, "Invalid learning rate: -0.1"),
    ("NpuFusedAdam", {"eps": -1.0}, "Invalid epsilon value: -1.0"),
    ("NpuFusedAdamW", {"betas": (1.0, 0.9)}, "Invalid beta parameter at index 0: 1.0"),
    ("NpuFusedAdamW", {"betas": (0.9, -0.1)}, "Invalid beta parameter at index 1: -0.1"),
    ("NpuFusedAdam", {"weight_decay": -0.5}, "Invalid weight_decay value: -0.5"),
    ("NpuFusedAdadelta", {"rho": 1.5}, "Invalid rho value: 1.5"),
    ("NpuFusedRMSprop", {"alpha": -1}, "Invalid alpha value: -1"),
    ("NpuFusedRMSpropTF", {"momentum": -1}, "Invalid momentum value: -1"),
    ("NpuFusedLamb", {"betas": (0.9, 1.0)}, "Invalid beta parameter at index 1: 1.0"),
    ("Lamb", {"eps": -1e-6}, "Invalid epsilon value: -1e-06"),
    ("NpuFusedBertAdam", {"lr": 0.1, "warmup": 1.0}, "Invalid warmup: 1.0"),
    ("NpuFusedBertAdam", {"lr": 0.1, "schedule": "cosine"}, "Invalid schedule parameter: cosine"),
    ("NpuFusedBertAdam", {"lr": 0.1, "b1": 1.0}, "Invalid b1 parameter: 1.0"),
    ("NpuFusedBertAdam", {"lr": 0.1, "b2": -0.1}, "Invalid b2 parameter: -0.1"),
    ("NpuFusedBertAdam", {"lr": 0.1, "e": -1.0}, "Invalid epsilon value: -1.0"),
]


@pytest.mark.parametrize(("name", "options", "message"), VALIDATION_CASES)
def test_bad_hyperparameters_raise_ascend_messages(name: str, options: dict, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        getattr(apex.optimizers, name)([torch.nn.Parameter(torch.ones(1))], **options)
    assert str(raised.value) == message


def test_bert_adam_defaults_follow_ascend_apex() -> None:
    defaults = standalone.NpuFusedBertAdam([torch.nn.Parameter(torch.ones(1))], lr=0.1).defaults
    assert (defaults["b2"], defaults["max_grad_norm"], defaults["e"]) == (0.999, 1.0, 1e-6)
    assert (defaults["warmup"], defaults["t_total"], defaults["schedule"]) == (
        -1,
        -1,
        "warmup_linear",
    )


def test_bert_adam_step_counter_advances_and_survives_state_dict(
    workload_class, trainer, same_params
) -> None:
    options = [{"lr": 1e-2, "t_total": 12, "warmup": 0.25, "schedule": "warmup_linear"}]
    straight_workload = workload_class(7)
    straight = standalone.NpuFusedBertAdam(straight_workload.groups(options))
    trainer(straight_workload, straight, steps=10)

    first_workload = workload_class(7)
    first = standalone.NpuFusedBertAdam(first_workload.groups(options))
    trainer(first_workload, first, steps=5)
    saved = first.state_dict()
    assert {float(s["step"]) for s in saved["state"].values()} == {5.0}
    resumed_workload = workload_class(7)
    _copy_values(first_workload, resumed_workload)
    resumed = standalone.NpuFusedBertAdam(resumed_workload.groups(options))
    resumed.load_state_dict(saved)
    trainer(resumed_workload, resumed, steps=5, first_step=5)
    same_params(resumed_workload, straight_workload)
    assert {float(s["step"]) for s in resumed.state_dict()["state"].values()} == {10.0}


def test_rmsprop_tf_square_avg_starts_at_ones() -> None:
    param = torch.nn.Parameter(torch.zeros(3))
    param.grad = torch.tensor([1.0, 2.0, 3.0])
    optimizer = standalone.NpuFusedRMSpropTF([param], lr=0.1, alpha=0.9)
    optimizer.step()
    expected = 1.0 + 0.1 * (param.grad**2 - 1.0)
    torch.testing.assert_close(optimizer.state[param]["square_avg"], expected)
    torch.testing.assert_close(param.detach(), -0.1 * param.grad / torch.sqrt(expected + 1e-10))


def test_momentum_switched_on_after_packing_matches_torch() -> None:
    def make() -> list[torch.nn.Parameter]:
        torch.manual_seed(11)
        return [torch.nn.Parameter(torch.randn(7)), torch.nn.Parameter(torch.randn(2, 3))]

    ours_params, torch_params = make(), make()
    ours = standalone.NpuFusedSGD(ours_params, lr=0.1)
    reference = torch.optim.SGD(torch_params, lr=0.1)
    for step in range(6):
        for params, optimizer in ((ours_params, ours), (torch_params, reference)):
            if step == 3:
                optimizer.param_groups[0]["momentum"] = 0.9
            optimizer.zero_grad()
            sum((p * p).sum() for p in params).backward()
            optimizer.step()
    for mine, theirs in zip(ours_params, torch_params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-6)
    assert "momentum_buffer" in ours.state_dict()["state"][0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_sgd_with_momentum_matches_torch(dtype: torch.dtype) -> None:
    def make() -> list[torch.nn.Parameter]:
        torch.manual_seed(13)
        return [
            torch.nn.Parameter(torch.randn(37).to(dtype)),
            torch.nn.Parameter(torch.randn(5).to(dtype)),
        ]

    ours_params, torch_params = make(), make()
    ours = standalone.NpuFusedSGD(ours_params, lr=0.01, momentum=0.9, weight_decay=1e-3)
    reference = torch.optim.SGD(torch_params, lr=0.01, momentum=0.9, weight_decay=1e-3)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=generator).to(dtype) for p in ours_params]
        for params, optimizer in ((ours_params, ours), (torch_params, reference)):
            for p, grad in zip(params, grads, strict=True):
                p.grad = grad.clone()
            optimizer.step()
    for mine, theirs in zip(ours_params, torch_params, strict=True):
        assert torch.equal(mine, theirs)
