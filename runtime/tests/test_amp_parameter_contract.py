"""Ascend's contract of the fused optimizers: a packed parameter is never re-allocated.

Ascend documents for every ``NpuFused*`` optimizer that the parameters handed to it must not be
re-allocated while it is in use (``model.cpu()`` and back, ``.half()``, ``p.data = ...``): its
step updates the flat buffer, so such a parameter silently stops training on an NPU. The runtime
raises at the next step instead, before anything is updated, and lets every in-place change
through. (The file name starts with ``test_amp`` so that conftest resets amp around each test.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from apex import amp, optimizers
from apex.optimizers import standalone

Action = Callable[[torch.nn.Module, torch.optim.Optimizer], object]


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )


def batch(step: int) -> torch.Tensor:
    return torch.randn(5, 6, generator=torch.Generator().manual_seed(step))


def amp_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    optimizer.zero_grad()
    loss = model(batch(step)).float().square().mean()
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    optimizer.step()


def plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    optimizer.zero_grad()
    model(batch(step).to(next(model.parameters()).dtype)).square().mean().backward()
    optimizer.step()


def with_amp(opt_level: str = "O1") -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = small_model()
    optimizer = optimizers.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    master_weights = True if opt_level == "O2" else None
    return amp.initialize(
        model, optimizer, opt_level=opt_level, master_weights=master_weights, verbosity=0
    )


def rebind_data(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    weight = model[3].weight
    weight.data = weight.data.clone()


def round_trip_through_float64(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    # What `model.cpu(); torch.save(...); model.cuda()` does on a device: every parameter gets
    # new memory with the same values. model.cpu() is a no-op on the CPU, this is not.
    model.double()
    model.float()


def round_trip_swapping_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    # torch's other conversion mode swaps the parameter's contents instead of setting .data.
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.double()
        model.float()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)


def to_half(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model.half()


REALLOCATIONS: dict[str, Action] = {
    "p.data = new tensor": rebind_data,
    "model.double(); model.float()": round_trip_through_float64,
    "round trip with swapped tensors": round_trip_swapping_tensors,
    "model.half() after the first step": to_half,
}


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    for state in optimizer.state.values():
        tensors.extend(v.clone() for v in state.values() if isinstance(v, torch.Tensor))
    return tensors


@pytest.mark.parametrize("action", REALLOCATIONS.values(), ids=REALLOCATIONS.keys())
def test_a_step_after_a_reallocation_raises_naming_the_parameter(action: Action) -> None:
    model, optimizer = with_amp()
    amp_step(model, optimizer, 0)
    action(model, optimizer)
    before = snapshot(model, optimizer)
    with pytest.raises(RuntimeError) as raised:
        if action is to_half:
            optimizer.step()  # a forward pass would fail first: fp16 batchnorm, bf16 autocast
        else:
            amp_step(model, optimizer, 1)
    message = str(raised.value)
    assert message.startswith("NpuFusedSGD: ")
    if action is rebind_data:
        assert "parameter '3.weight' (shape (3, 8)) was re-allocated" in message
    else:
        assert "6 parameters, the first '0.weight' (shape (8, 6)), were re-allocated" in message
    assert "On an NPU, Ascend's fused optimizer would go on updating the buffer" in message
    assert "silently stop training" in message
    # Refused before anything changed: no parameter, no momentum was touched.
    after = snapshot(model, optimizer)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_the_message_offers_check_combined_tensors_under_amp() -> None:
    model, optimizer = with_amp()
    amp_step(model, optimizer, 0)
    rebind_data(model, optimizer)
    with pytest.raises(RuntimeError, match=r"pass check_combined_tensors=True to amp\.initialize"):
        amp_step(model, optimizer, 1)


def test_without_amp_the_parameter_is_named_by_group_and_position() -> None:
    model = small_model()
    optimizer = standalone.NpuFusedAdam(
        [{"params": list(model[0].parameters())}, {"params": list(model[3].parameters())}]
    )
    plain_step(model, optimizer, 0)
    model[3].bias.data = torch.zeros(3)
    with pytest.raises(
        RuntimeError,
        match=r"NpuFusedAdam: parameter param_groups\[1\]\['params'\]\[1\] \(shape \(3,\)\)",
    ):
        plain_step(model, optimizer, 1)


def test_several_models_name_the_model_too() -> None:
    first, second = small_model(), small_model()
    optimizer = optimizers.NpuFusedAdam([*first.parameters(), *second.parameters()])
    [first, second], optimizer = amp.initialize(
        [first, second], optimizer, opt_level="O1", verbosity=0
    )
    optimizer.zero_grad()
    loss = first(batch(0)).sum() + second(batch(1)).sum()
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    optimizer.step()
    second[0].bias.data = second[0].bias.data.clone()
    with pytest.raises(RuntimeError, match=r"parameter '0.bias' of models\[1\] \(shape \(8,\)\)"):
        optimizer.step()


def test_o2_names_the_fp32_parameters_it_packed_and_lets_half_ones_move() -> None:
    """Under O2 the optimizer packs the fp32 masters and the fp32 batchnorm parameters; the half
    model parameters are outside its buffers (amp copies the masters into them after each step,
    wherever they live), as in Ascend apex."""
    model, optimizer = with_amp("O2")
    amp_step(model, optimizer, 0)
    rebind_data(model, optimizer)  # a half parameter
    amp_step(model, optimizer, 1)
    master = dict(zip(model.parameters(), amp.master_params(optimizer), strict=True))
    half_weight = model[3].weight
    assert torch.equal(half_weight.detach(), master[half_weight].detach().to(half_weight.dtype))
    model[1].weight.data = model[1].weight.data.clone()  # batchnorm, fp32, packed
    with pytest.raises(RuntimeError, match=r"parameter '1.weight' \(shape \(8,\)\) was re-alloc"):
        amp_step(model, optimizer, 2)


# ---- check_combined_tensors: Ascend notices and packs again -----------------------------------


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_check_combined_tensors_packs_moved_parameters_again(
    opt_level: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``check_combined_tensors=True`` Ascend apex checks its parameter buffers at every
    step, prints its message and recombines, so training goes on: the runtime packs the moved
    parameters again and the run matches one that never moved them."""
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "float32")
    master_weights = True if opt_level == "O2" else None

    def run(move: bool) -> list[torch.Tensor]:
        amp.frontend._reset()
        model = small_model()
        optimizer = optimizers.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
        model, optimizer = amp.initialize(
            model,
            optimizer,
            opt_level=opt_level,
            master_weights=master_weights,
            check_combined_tensors=True,
            verbosity=1,
        )
        for step in range(5):
            amp_step(model, optimizer, step)
            if move and step in (1, 3):
                round_trip_through_float64(model, optimizer)
        return [p.detach().clone() for p in model.parameters()]

    still = run(move=False)
    capsys.readouterr()
    moved = run(move=True)
    assert capsys.readouterr().out.count("Combined param has been destroyed") == 2
    assert all(torch.equal(a, b) for a, b in zip(still, moved, strict=True))


def test_check_combined_tensors_repacks_a_model_converted_to_half() -> None:
    model = small_model()
    optimizer = optimizers.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O1", check_combined_tensors=True, verbosity=0
    )
    amp_step(model, optimizer, 0)
    momentum = optimizer.state[model[0].weight]["momentum_buffer"].clone()
    model.half()
    optimizer.step()  # the grads of step 0, now in half precision
    assert {buffer.dtype for buffer in optimizer.flat_param_buffers()} == {torch.float16}
    expected = momentum.half() * 0.9 + model[0].weight.grad
    torch.testing.assert_close(optimizer.state[model[0].weight]["momentum_buffer"], expected)


# ---- what keeps the parameters in place ------------------------------------------------------


def scale_in_place(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model[0].weight.data.mul_(0.5)


def add_under_no_grad(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)


def copy_into(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    with torch.no_grad():
        model[3].weight.copy_(torch.ones_like(model[3].weight))


def load_model_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    saved = {k: v.clone() + 1 for k, v in model.state_dict().items()}
    model.load_state_dict(saved)


def load_optimizer_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))


def copy_of_the_model_to_the_cpu(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    # An EMA or a checkpoint copy: other parameter objects, whatever happens to them.
    copy.deepcopy(model).cpu().double()


def moves_that_are_no_ops_here(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model.cpu()
    model.float()
    model.to(torch.float32)
    model.train()


IN_PLACE: dict[str, Action] = {
    "p.data.mul_": scale_in_place,
    "p.add_ under no_grad": add_under_no_grad,
    "p.copy_": copy_into,
    "model.load_state_dict": load_model_checkpoint,
    "optimizer.load_state_dict": load_optimizer_checkpoint,
    "copy.deepcopy(model).cpu()": copy_of_the_model_to_the_cpu,
    "model.cpu() on the CPU": moves_that_are_no_ops_here,
}


@pytest.mark.parametrize("action", IN_PLACE.values(), ids=IN_PLACE.keys())
def test_in_place_changes_are_honoured_like_torch(
    action: Action, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each change is made to a fused and a torch.optim.SGD run alike; the runs stay equal
    (amp in float32, so that only the optimizers differ)."""
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "float32")
    fused_model, fused = with_amp()
    model = small_model()
    reference = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        amp_step(fused_model, fused, step)
        plain_step(model, reference, step)
        if step == 1:
            action(fused_model, fused)
            action(model, reference)
    for mine, theirs in zip(fused_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(mine.detach(), theirs.detach(), rtol=1e-6, atol=1e-6)


def test_moves_before_the_first_step_are_free() -> None:
    """Packing happens at the first step (Ascend's too): a model converted after the optimizer
    was built but before it stepped is packed as it is then."""
    model = small_model()
    optimizer = standalone.NpuFusedSGD(model.parameters(), lr=0.1)
    model.double()
    plain_step(model, optimizer, 0)
    plain_step(model, optimizer, 1)
    assert {buffer.dtype for buffer in optimizer.flat_param_buffers()} == {torch.float64}


def test_grads_replaced_after_packing_are_still_taken_in() -> None:
    """Only parameters are bound by the contract here: a gradient set to None (torch's
    ``model.zero_grad()``) or replaced is copied into its slot at the next step."""
    model = small_model()
    optimizer = standalone.NpuFusedSGD(model.parameters(), lr=0.1)
    reference_model = small_model()
    reference = torch.optim.SGD(reference_model.parameters(), lr=0.1)
    for step in range(3):
        for net, opt in ((model, optimizer), (reference_model, reference)):
            net.zero_grad(set_to_none=True)
            net(batch(step)).square().mean().backward()
            opt.step()
    for mine, theirs in zip(model.parameters(), reference_model.parameters(), strict=True):
        torch.testing.assert_close(mine.detach(), theirs.detach(), rtol=1e-6, atol=1e-6)


def test_parameters_outside_the_buffers_may_move() -> None:
    """A parameter without a gradient at packing time is stepped tensor by tensor, wherever it
    lives, so re-allocating it breaks nothing."""
    model = small_model()
    optimizer = standalone.NpuFusedSGD(model.parameters(), lr=0.1)
    model[3].requires_grad_(False)
    plain_step(model, optimizer, 0)
    model[3].requires_grad_(True)
    model[3].weight.data = model[3].weight.data.clone()
    before = model[3].weight.detach().clone()
    plain_step(model, optimizer, 1)
    assert not torch.equal(before, model[3].weight.detach())
