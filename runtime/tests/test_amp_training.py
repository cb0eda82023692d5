"""Training loops through amp on CPU: opt levels, loss scaling, step skipping, accumulation,
checkpoints."""

from __future__ import annotations

import pytest
import torch

from apex import amp, optimizers
from apex.amp.frontend import _reset


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )


def batches(count: int = 6, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(32, 6, generator=generator), torch.randint(0, 3, (32,), generator=generator))
        for _ in range(count)
    ]


def loss_of(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets = batch
    return torch.nn.functional.cross_entropy(model(inputs), targets)


def train_step(model, optimizer, batch, loss_id: int = 0) -> float:
    optimizer.zero_grad()
    loss = loss_of(model, batch)
    with amp.scale_loss(loss, optimizer, loss_id=loss_id) as scaled:
        scaled.backward()
    optimizer.step()
    return loss.item()


def params_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().float().clone() for p in model.parameters()]


@pytest.mark.parametrize("opt_level", ["O0", "O1", "O2", "O3"])
def test_every_opt_level_trains(opt_level):
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0)
    data = batches(4)
    first = sum(loss_of(model, b).item() for b in data)
    for _ in range(10):
        for batch in data:
            train_step(model, optimizer, batch)
    last = sum(loss_of(model, b).item() for b in data)
    assert last < 0.7 * first


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_mixed_precision_runs_are_deterministic(opt_level):
    def run() -> list[torch.Tensor]:
        _reset()
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0)
        for batch in batches():
            train_step(model, optimizer, batch)
        return params_of(model)

    assert all(torch.equal(a, b) for a, b in zip(run(), run(), strict=True))


def test_o2_copies_master_weights_back_into_the_half_model():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2", verbosity=0)
    before = model[0].weight.detach().clone()
    train_step(model, optimizer, batches(1)[0])
    master = optimizer.param_groups[0]["params"][0]
    assert master.dtype == torch.float32
    assert not torch.equal(model[0].weight, before)
    assert torch.equal(model[0].weight, master.detach().to(torch.bfloat16))


def test_o2_tracks_fp32_training_closely():
    reference, mixed = small_model(), small_model()
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    mixed_optimizer = torch.optim.SGD(mixed.parameters(), lr=0.1)
    mixed, mixed_optimizer = amp.initialize(mixed, mixed_optimizer, opt_level="O2", verbosity=0)
    for batch in batches():
        reference_optimizer.zero_grad()
        loss_of(reference, batch).backward()
        reference_optimizer.step()
        train_step(mixed, mixed_optimizer, batch)
    for expected, got in zip(params_of(reference), params_of(mixed), strict=True):
        torch.testing.assert_close(got, expected, atol=3e-2, rtol=3e-2)


# ---- dynamic and static loss scaling ---------------------------------------------------------


def inject_inf_into_grads(model: torch.nn.Module) -> None:
    model[0].weight.register_hook(lambda grad: torch.full_like(grad, float("inf")))


def test_overflow_skips_the_step_and_halves_the_scale(capsys):
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=1)
    capsys.readouterr()
    handle = model[0].weight.register_hook(lambda grad: grad * float("inf"))
    before = params_of(model)
    train_step(model, optimizer, batches(1)[0])
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(model), strict=True))
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**15
    assert (
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
        in capsys.readouterr().out
    )
    handle.remove()
    train_step(model, optimizer, batches(1)[0])  # the next clean step is taken
    assert not all(torch.equal(a, b) for a, b in zip(before, params_of(model), strict=True))
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**15


def test_overflow_in_o2_skips_and_leaves_master_grads_clean():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2", verbosity=0)
    handle = model[3].weight.register_hook(lambda grad: grad * float("nan"))
    before = params_of(model)
    train_step(model, optimizer, batches(1)[0])
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(model), strict=True))
    handle.remove()
    train_step(model, optimizer, batches(1)[0])
    assert all(torch.isfinite(p).all() for p in params_of(model))
    assert all(m.grad is None or torch.isfinite(m.grad).all() for m in amp.master_params(optimizer))


def test_scale_grows_after_a_window_of_clean_steps_and_respects_the_cap():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = amp.initialize(
        model,
        optimizer,
        opt_level="O1",
        dynamic_init_scale=4.0,
        scale_window=2,
        scale_growth_factor=4.0,
        max_loss_scale=32.0,
        verbosity=0,
    )
    scales = []
    for batch in batches(6):
        train_step(model, optimizer, batch)
        scales.append(amp._amp_state.loss_scalers[0].loss_scale())
    assert scales == [4.0, 16.0, 16.0, 32.0, 32.0, 32.0]


def test_backoff_factor_and_min_loss_scale():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = amp.initialize(
        model,
        optimizer,
        opt_level="O1",
        dynamic_init_scale=64.0,
        scale_backoff_factor=0.125,
        min_loss_scale=4.0,
        verbosity=0,
    )
    inject_inf_into_grads(model)
    scales = []
    for batch in batches(3):
        train_step(model, optimizer, batch)
        scales.append(amp._amp_state.loss_scalers[0].loss_scale())
    assert scales == [8.0, 4.0, 4.0]


def test_static_scale_multiplies_the_loss_and_never_skips():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O1", loss_scale=128.0, verbosity=0
    )
    loss = loss_of(model, batches(1)[0])
    with amp.scale_loss(loss, optimizer) as scaled:
        torch.testing.assert_close(scaled, loss.float() * 128.0)
        scaled.backward()
    # The grads the optimizer sees are unscaled: compare with a plain fp32 backward.
    reference = small_model()
    loss_of(reference, batches(1)[0]).backward()
    for got, expected in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, expected.grad, atol=5e-3, rtol=5e-2)
    inject_inf_into_grads(model)
    before = params_of(model)
    train_step(model, optimizer, batches(1)[0])
    assert amp._amp_state.loss_scalers[0].loss_scale() == 128.0
    assert not all(torch.equal(a, b) for a, b in zip(before, params_of(model), strict=True))


def test_scripts_can_set_the_scale_through_amp_state():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    amp._amp_state.loss_scalers[0]._loss_scale = 8.0
    loss = loss_of(model, batches(1)[0])
    with amp.scale_loss(loss, optimizer) as scaled:
        torch.testing.assert_close(scaled, loss.float() * 8.0)
        scaled.backward()


# ---- accumulation, several losses, delay_unscale -------------------------------------------


def accumulated_grads(opt_level: str, use_delay_unscale: bool) -> list[torch.Tensor]:
    _reset()
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0)
    optimizer.zero_grad()
    micro_batches = batches(3)
    for index, batch in enumerate(micro_batches):
        delay = use_delay_unscale and index < len(micro_batches) - 1
        with amp.scale_loss(loss_of(model, batch), optimizer, delay_unscale=delay) as scaled:
            scaled.backward()
    return [p.grad.clone() for p in amp.master_params(optimizer)]


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
@pytest.mark.parametrize("use_delay_unscale", [False, True])
def test_gradient_accumulation_over_several_scale_loss_blocks(opt_level, use_delay_unscale):
    reference = small_model()
    for batch in batches(3):
        loss_of(reference, batch).backward()
    expected = [p.grad for p in reference.parameters()]
    got = accumulated_grads(opt_level, use_delay_unscale)
    tolerance = 1e-5 if opt_level == "O0" else 5e-2
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=tolerance, rtol=tolerance)


def test_accumulation_without_zero_grad_adds_to_existing_grads():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    batch = batches(1)[0]
    optimizer.zero_grad()
    with amp.scale_loss(loss_of(model, batch), optimizer) as scaled:
        scaled.backward()
    once = [p.grad.clone() for p in model.parameters()]
    with amp.scale_loss(loss_of(model, batch), optimizer) as scaled:
        scaled.backward()
    for twice, single in zip(model.parameters(), once, strict=True):
        torch.testing.assert_close(twice.grad, 2 * single)


def test_two_losses_with_their_own_scalers():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", num_losses=2, verbosity=0)
    amp._amp_state.loss_scalers[1]._loss_scale = 2.0**10
    batch_a, batch_b = batches(2)
    optimizer.zero_grad()
    with amp.scale_loss(loss_of(model, batch_a), optimizer, loss_id=0) as scaled:
        scaled.backward()
    handle = model[0].bias.register_hook(lambda grad: grad * float("inf"))
    with amp.scale_loss(loss_of(model, batch_b), optimizer, loss_id=1) as scaled:
        scaled.backward()
    handle.remove()
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**16
    assert amp._amp_state.loss_scalers[1].loss_scale() == 2.0**9
    before = params_of(model)
    optimizer.step()  # skipped: loss 1 overflowed
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(model), strict=True))


def test_delay_overflow_check_leaves_scale_and_step_alone():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    inject_inf_into_grads(model)
    with amp.scale_loss(loss_of(model, batches(1)[0]), optimizer, delay_overflow_check=True) as s:
        s.backward()
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**16


def test_two_optimizers_in_one_scale_loss():
    model = small_model()
    first = torch.optim.SGD(model[0].parameters(), lr=0.1)
    rest = torch.optim.SGD([*model[1].parameters(), *model[3].parameters()], lr=0.1)
    model, (first, rest) = amp.initialize(model, [first, rest], opt_level="O2", verbosity=0)
    with amp.scale_loss(loss_of(model, batches(1)[0]), [first, rest]) as scaled:
        scaled.backward()
    assert all(p.grad is not None for opt in (first, rest) for p in amp.master_params(opt))
    masters = [p for opt in (first, rest) for p in amp.master_params(opt)]
    before = [p.detach().clone() for p in masters]
    first.step()
    rest.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, masters, strict=True))


# ---- checkpoints ------------------------------------------------------------------------------


def test_state_dict_format_and_round_trip():
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    amp.initialize(model, optimizer, opt_level="O1", num_losses=2, verbosity=0)
    amp._amp_state.loss_scalers[1]._loss_scale = 4.0
    amp._amp_state.loss_scalers[1]._unskipped = 3
    saved = amp.state_dict()
    assert saved == {
        "loss_scaler0": {"loss_scale": 65536.0, "unskipped": 0},
        "loss_scaler1": {"loss_scale": 4.0, "unskipped": 3},
    }
    amp._amp_state.loss_scalers[1]._loss_scale = 1.0
    amp.load_state_dict(saved)
    assert amp._amp_state.loss_scalers[1].loss_scale() == 4.0
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "bogus"'):
        amp.load_state_dict({"loss_scaler0": saved["loss_scaler0"], "bogus": {}})


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
@pytest.mark.parametrize("migrated", [False, True], ids=["torch_sgd", "npu_fused_combined"])
def test_resume_from_a_checkpoint_gives_the_identical_trajectory(opt_level, migrated, tmp_path):
    data = batches(8)

    def fresh(window: int = 3):
        _reset()
        model = small_model()
        optimizer_class = optimizers.NpuFusedSGD if migrated else torch.optim.SGD
        optimizer = optimizer_class(model.parameters(), lr=0.1, momentum=0.9)
        return amp.initialize(
            model,
            optimizer,
            opt_level=opt_level,
            dynamic_init_scale=2.0**20,
            scale_window=window,
            combine_grad=migrated or None,
            verbosity=0,
        )

    model, optimizer = fresh()
    inject_inf_into_grads_once(model)  # make the scaler state non-trivial before the checkpoint
    for batch in data[:4]:
        train_step(model, optimizer, batch)
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "amp": amp.state_dict()},
        checkpoint,
    )
    uninterrupted = [train_step(model, optimizer, batch) for batch in data[4:]]
    final = params_of(model)

    model, optimizer = fresh()
    saved = torch.load(checkpoint)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    amp.load_state_dict(saved["amp"])
    assert amp.state_dict() == saved["amp"]
    resumed = [train_step(model, optimizer, batch) for batch in data[4:]]
    assert resumed == uninterrupted
    assert all(torch.equal(a, b) for a, b in zip(final, params_of(model), strict=True))


def inject_inf_into_grads_once(model: torch.nn.Module) -> None:
    fired = []

    def hook(grad: torch.Tensor) -> torch.Tensor:
        if fired:
            return grad
        fired.append(True)
        return torch.full_like(grad, float("inf"))

    model[0].weight.register_hook(hook)


def test_a_saturating_npu_flag_skips_the_step(monkeypatch):
    # No Ascend 910A here: stand in for torch_npu's float-status flag to check amp's handling.
    from apex.amp import _npu_overflow

    flag = {"set": False, "cleared": 0}

    class FakeUtils:
        @staticmethod
        def clear_npu_overflow_flag() -> None:
            flag["cleared"] += 1
            flag["set"] = False

        @staticmethod
        def get_npu_overflow_flag() -> bool:
            return flag["set"]

    monkeypatch.setattr(_npu_overflow, "_saturation_mode_utils", lambda: FakeUtils)
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    model[0].weight.register_hook(lambda grad: flag.update(set=True) or grad)
    before = params_of(model)
    train_step(model, optimizer, batches(1)[0])
    assert flag["cleared"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(model), strict=True))
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**15


@pytest.mark.parametrize("opt_level", ["O1", "O2", "O3"])
def test_cpu_float32_mode_trains_exactly_like_o0(opt_level, monkeypatch):
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "float32")

    def run(level: str) -> list[torch.Tensor]:
        _reset()
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model, optimizer = amp.initialize(model, optimizer, opt_level=level, verbosity=0)
        for batch in batches(4):
            train_step(model, optimizer, batch)
        return params_of(model)

    # Loss scales are powers of two, so scaling and unscaling fp32 grads is exact.
    assert all(torch.equal(a, b) for a, b in zip(run("O0"), run(opt_level), strict=True))
