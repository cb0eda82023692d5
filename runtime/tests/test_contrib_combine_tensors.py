"""combine_npu and friends: Ascend's slot layout, identity-preserving rebinding, no second copy."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from apex.contrib.combine_tensors import (
    combine_npu,
    get_aligned_storage_size,
    get_part_combined_tensor,
    is_combined_tensor_valid,
)


@pytest.mark.parametrize(("numel", "slot"), [(0, 32), (1, 48), (16, 48), (17, 64), (100, 144)])
def test_slot_is_numel_rounded_up_to_16_plus_32_padding(numel: int, slot: int) -> None:
    assert get_aligned_storage_size(torch.zeros(numel)) == slot


def test_combine_keeps_objects_values_and_lays_out_slots() -> None:
    weight = torch.nn.Parameter(torch.randn(3, 5))
    empty = torch.nn.Parameter(torch.randn(0))
    scalar = torch.nn.Parameter(torch.tensor(2.5))
    before = [t.detach().clone() for t in (weight, empty, scalar)]

    combined = combine_npu([weight, empty, scalar])

    assert combined is not None
    assert combined.numel() == 48 + 32 + 48
    for tensor, value in zip((weight, empty, scalar), before, strict=True):
        assert isinstance(tensor, torch.nn.Parameter)
        assert torch.equal(tensor, value)
    assert weight.data_ptr() == combined.data_ptr()
    assert scalar.data_ptr() == combined[80:].data_ptr()
    assert torch.count_nonzero(combined) == 16  # padding stays zero
    combined.mul_(2)
    assert torch.equal(weight, before[0] * 2)


def test_gradients_accumulate_in_place_into_a_combined_grad_buffer() -> None:
    weight = torch.nn.Parameter(torch.ones(4))
    (weight * 3).sum().backward()
    assert weight.grad is not None
    grads = combine_npu([weight.grad])
    (weight * 3).sum().backward()
    assert grads is not None
    assert torch.equal(grads[:4], torch.full((4,), 6.0))
    assert is_combined_tensor_valid(grads, [weight.grad])


def test_without_copy_the_tensors_read_zero() -> None:
    tensor = torch.ones(7)
    combine_npu([tensor], require_copy_value=False)
    assert torch.equal(tensor, torch.zeros(7))


def test_combining_releases_the_old_storage() -> None:
    array = np.ones(1000, dtype=np.float32)
    tensor = torch.from_numpy(array)
    array_ref = weakref.ref(array)
    del array
    combine_npu([tensor])
    gc.collect()
    assert array_ref() is None
    assert torch.equal(tensor, torch.ones(1000))


def test_empty_list_gives_none_and_mixed_dtypes_are_refused() -> None:
    assert combine_npu([]) is None
    with pytest.raises(RuntimeError, match="same dtype"):
        combine_npu([torch.zeros(2), torch.zeros(2, dtype=torch.float64)])


def test_part_combined_tensor_is_a_view_with_bounds_checked() -> None:
    combined = torch.arange(64.0)
    part = get_part_combined_tensor(combined, 10, 5)
    assert part is not None
    assert torch.equal(part, torch.arange(10.0, 15.0))
    part.zero_()
    assert combined[12] == 0
    assert get_part_combined_tensor(combined, 0, 0) is None
    with pytest.raises(RuntimeError, match="index"):
        get_part_combined_tensor(combined, 60, 5)


def test_validity_detects_a_tensor_moved_out_of_the_buffer() -> None:
    first, second = torch.ones(3), torch.ones(5)
    combined = combine_npu([first, second])
    assert is_combined_tensor_valid(combined, [first, second])
    second.data = torch.ones(5)
    assert not is_combined_tensor_valid(combined, [first, second])
    assert not is_combined_tensor_valid(None, [first])
    assert is_combined_tensor_valid(None, [])


def test_packed_parameters_keep_their_gradient_accumulator() -> None:
    """Hooks on a parameter's AccumulateGrad node (torch DDP's all-reduce hangs there) must still
    fire after packing: rebinding a parameter with ``set_`` gave it a new node, so DDP stopped
    averaging gradients after an NpuFused optimizer's first step."""
    weight = torch.nn.Parameter(torch.randn(4, 3))
    bias = torch.nn.Parameter(torch.randn(3))
    accumulators = [p.view_as(p).grad_fn.next_functions[0][0] for p in (weight, bias)]
    fired: list[int] = []
    for index, accumulator in enumerate(accumulators):
        accumulator.register_hook(lambda *_, index=index: fired.append(index))

    combined = combine_npu([weight, bias])

    assert combined is not None and is_combined_tensor_valid(combined, [weight, bias])
    assert [p.view_as(p).grad_fn.next_functions[0][0] for p in (weight, bias)] == accumulators
    (torch.ones(2, 4) @ weight + bias).sum().backward()
    assert sorted(fired) == [0, 1]
