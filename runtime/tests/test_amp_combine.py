"""combine_grad: flat grad buffers change where grads live, never their values."""

from __future__ import annotations

import warnings

import pytest
import torch

from apex import amp, optimizers
from apex.amp.frontend import _reset


class Branchy(torch.nn.Module):
    """A small net whose ``extra`` branch only gets grads when asked for."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU()
        )
        self.head = torch.nn.Linear(16, 3)
        self.extra = torch.nn.Linear(16, 3)

    def forward(self, inputs: torch.Tensor, use_extra: bool = False) -> torch.Tensor:
        features = self.body(inputs)
        out = self.head(features)
        return out + self.extra(features) if use_extra else out


def batches(count: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(16, 6, generator=generator), torch.randint(0, 3, (16,), generator=generator))
        for _ in range(count)
    ]


def sgd(params, **kwargs):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4, **kwargs)


def fused_sgd(params):
    return optimizers.NpuFusedSGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)


def train(
    opt_level: str,
    make_optimizer=sgd,
    steps: int = 5,
    micro_batches: int = 1,
    extra_from_step: int | None = None,
    before_step=None,
    **amp_kwargs,
) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    _reset()
    model = Branchy()
    optimizer = make_optimizer(model.parameters())
    amp_kwargs.setdefault("verbosity", 0)
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level, **amp_kwargs)
    data = batches(steps * micro_batches)
    for step in range(steps):
        optimizer.zero_grad()
        use_extra = extra_from_step is not None and step >= extra_from_step
        for inputs, targets in data[step * micro_batches : (step + 1) * micro_batches]:
            loss = torch.nn.functional.cross_entropy(model(inputs, use_extra), targets)
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
        if before_step is not None:
            before_step(model, optimizer)
        optimizer.step()
    return [p.detach().float().clone() for p in model.parameters()], optimizer


def assert_identical(first: list[torch.Tensor], second: list[torch.Tensor]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b), (a - b).abs().max()


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
@pytest.mark.parametrize("micro_batches", [1, 3])
def test_combine_grad_is_bit_identical_to_per_tensor(opt_level, micro_batches):
    per_tensor, _ = train(opt_level, micro_batches=micro_batches)
    combined, _ = train(opt_level, micro_batches=micro_batches, combine_grad=True)
    assert_identical(per_tensor, combined)


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_combine_grad_with_static_scale_is_bit_identical(opt_level):
    per_tensor, _ = train(opt_level, loss_scale=32.0)
    combined, _ = train(opt_level, loss_scale=32.0, combine_grad=True)
    assert_identical(per_tensor, combined)


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_npu_fused_sgd_with_combine_grad_matches_torch_sgd(opt_level):
    reference, _ = train(opt_level)
    fused, _ = train(opt_level, make_optimizer=fused_sgd, combine_grad=True)
    for a, b in zip(reference, fused, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_o2_unscaling_into_the_fused_optimizer_s_buffers_is_bit_identical(micro_batches):
    """O2 + an NpuFused optimizer casts the half grads into the masters' slots of the optimizer's
    flat buffers and unscales those buffers whole; torch's fused SGD kernel on the same masters,
    unscaled tensor by tensor, must give the very same bits (accumulating micro-batches take the
    per-tensor path after the first one)."""
    options = {"steps": 4, "micro_batches": micro_batches}
    per_tensor, _ = train(
        "O2",
        make_optimizer=lambda p: torch.optim.SGD(
            p, lr=0.1, momentum=0.9, weight_decay=1e-4, fused=True
        ),
        **options,
    )
    combined, optimizer = train("O2", make_optimizer=fused_sgd, combine_grad=True, **options)
    assert_identical(per_tensor, combined)
    assert optimizer._amp_stash.combined.masters_in_optimizer is not None


def test_npu_fused_adamw_matches_apex_fused_adam_in_o2():
    # The end-to-end pair: NVIDIA's FusedAdam script and its migrated NpuFusedAdamW version.
    reference, _ = train("O2", make_optimizer=lambda p: optimizers.FusedAdam(p, lr=1e-2))
    migrated, _ = train(
        "O2",
        make_optimizer=lambda p: optimizers.NpuFusedAdamW(p, lr=1e-2, weight_decay=0.0),
        combine_grad=True,
    )
    for a, b in zip(reference, migrated, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


LATE = "parameters 'extra.weight', 'extra.bias' got their first gradient after the first"


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_params_without_grad_at_packing_stay_outside_and_still_train(opt_level):
    per_tensor, _ = train(opt_level, extra_from_step=2, steps=4)
    with pytest.warns(RuntimeWarning, match=LATE) as caught:
        combined, _ = train(opt_level, extra_from_step=2, steps=4, combine_grad=True)
    assert len(caught) == 1  # once, at the step where they first get one
    assert caught[0].filename == __file__  # points at the `with amp.scale_loss` line
    assert_identical(per_tensor, combined)


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_params_without_grad_at_packing_with_a_fused_optimizer(opt_level):
    reference, _ = train(opt_level, extra_from_step=2, steps=4)
    with pytest.warns(RuntimeWarning, match=LATE):
        fused, _ = train(
            opt_level, make_optimizer=fused_sgd, extra_from_step=2, steps=4, combine_grad=True
        )
    for a, b in zip(reference, fused, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_late_gradients_raise_where_strict(monkeypatch):
    # Ascend apex would train these parameters on loss-scaled gradients: a loud error instead.
    monkeypatch.setenv("APEX_AMP_STRICT", "1")
    with pytest.raises(RuntimeError, match=LATE + ".*drop combine_grad=True"):
        train("O1", extra_from_step=2, steps=4, combine_grad=True)


@pytest.mark.parametrize(
    ("extra_from_step", "amp_kwargs"),
    [(0, {"combine_grad": True}), (2, {})],
    ids=["every-grad-at-packing", "per-tensor"],
)
def test_no_late_gradient_warning_where_ascend_agrees(monkeypatch, extra_from_step, amp_kwargs):
    monkeypatch.setenv("APEX_AMP_STRICT", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train("O2", extra_from_step=extra_from_step, steps=4, **amp_kwargs)


def test_overflow_with_combined_grads_skips_the_step():
    model = Branchy()
    optimizer = sgd(model.parameters())
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O2", combine_grad=True, verbosity=0
    )
    inputs, targets = batches(1)[0]
    handle = model.head.weight.register_hook(lambda grad: grad * float("inf"))
    before = [p.detach().clone() for p in model.parameters()]
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    optimizer.step()
    handle.remove()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**15


# ---- the buffers themselves --------------------------------------------------------------------


def one_backward(opt_level: str, make_optimizer=sgd, **amp_kwargs):
    model = Branchy()
    optimizer = make_optimizer(model.parameters())
    model, optimizer = amp.initialize(
        model, optimizer, opt_level=opt_level, verbosity=0, **amp_kwargs
    )
    inputs, targets = batches(1)[0]
    loss = torch.nn.functional.cross_entropy(model(inputs, use_extra=True), targets)
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    return model, optimizer


def lives_in(tensor: torch.Tensor, buffers: list[torch.Tensor]) -> bool:
    return any(
        tensor.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in buffers
    )


def test_o1_packs_one_buffer_per_dtype():
    model, optimizer = one_backward("O1", combine_grad=True)
    buffers = optimizer.get_model_combined_grads()
    assert [b.dtype for b in buffers] == [torch.float32]
    assert all(lives_in(p.grad, buffers) for p in model.parameters())
    assert optimizer.get_optimizer_combined_grads() == buffers


def test_o2_packs_half_model_grads_and_fp32_master_grads():
    model, optimizer = one_backward("O2", combine_grad=True)
    model_buffers = optimizer.get_model_combined_grads()
    assert [b.dtype for b in model_buffers] == [torch.bfloat16, torch.float32]
    assert all(lives_in(p.grad, model_buffers) for p in model.parameters())
    optimizer_buffers = optimizer.get_optimizer_combined_grads()
    assert {b.dtype for b in optimizer_buffers} == {torch.float32}
    assert all(lives_in(p.grad, optimizer_buffers) for p in amp.master_params(optimizer))


def test_o2_with_a_fused_optimizer_uses_its_buffers_for_master_grads():
    _, optimizer = one_backward("O2", make_optimizer=fused_sgd, combine_grad=True)
    assert optimizer.get_optimizer_combined_grads() == optimizer.flat_grad_buffers()
    assert all(
        lives_in(p.grad, optimizer.flat_grad_buffers()) for p in amp.master_params(optimizer)
    )


def test_module_zero_grad_is_torchs_again_after_reset():
    one_backward("O1", combine_grad=True)
    _reset()
    layer = torch.nn.Linear(2, 2)
    layer(torch.ones(1, 2)).sum().backward()
    layer.zero_grad()
    assert layer.weight.grad is None


def test_combined_params_come_from_a_fused_optimizer():
    model, optimizer = one_backward("O1", make_optimizer=fused_sgd, combine_grad=True)
    params = optimizer.get_optimizer_combined_params()
    assert params == optimizer.flat_param_buffers()
    assert optimizer.get_model_combined_params() == params
    assert all(lives_in(p, params) for p in model.parameters())
    _reset()
    _, plain = one_backward("O1", combine_grad=True)
    assert plain.get_optimizer_combined_params() == []


def test_clip_model_grad_norm_fused_is_o1_only():
    model, optimizer = one_backward("O1", combine_grad=True)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    expected = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    torch.testing.assert_close(optimizer.clip_model_grad_norm_fused(1e9), expected)
    _reset()
    _, o2_optimizer = one_backward("O2", combine_grad=True)
    with pytest.raises(RuntimeError, match="can only be used when opt_level='O1'"):
        o2_optimizer.clip_model_grad_norm_fused(1.0)


def test_combined_grads_are_empty_before_backward_or_without_combine_grad(capsys):
    model = Branchy()
    optimizer = sgd(model.parameters())
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", combine_grad=True)
    capsys.readouterr()
    assert optimizer.get_optimizer_combined_grads() == []
    assert "Please get the combined grads after backward phase." in capsys.readouterr().out
    _reset()
    model, optimizer = one_backward("O1")
    amp._amp_state.verbosity = 1
    assert optimizer.get_model_combined_grads() == []
    assert "please set combine_grad=True" in capsys.readouterr().out


@pytest.mark.parametrize("zero", ["optimizer", "model", "wrapper"])
def test_zero_grad_keeps_grads_inside_the_buffers(zero):
    model, optimizer = one_backward("O1", combine_grad=True)
    buffers = optimizer.get_model_combined_grads()
    # "wrapper": a module amp never saw (a DDP wrapper, say) zeroes the model's grads.
    zeroed = {"optimizer": optimizer, "model": model, "wrapper": torch.nn.Sequential(model)}
    zeroed[zero].zero_grad()
    assert all(p.grad is not None and lives_in(p.grad, buffers) for p in model.parameters())
    assert all(int(torch.count_nonzero(b)) == 0 for b in buffers)


def test_replaced_grads_are_detected_and_repacked(capsys):
    def replace_a_grad(model, optimizer):
        if not hasattr(replace_a_grad, "done"):
            replace_a_grad.done = True
            model.head.weight.grad = model.head.weight.grad.clone()

    reference, _ = train("O1", steps=4)
    capsys.readouterr()
    combined, optimizer = train(
        "O1", steps=4, before_step=replace_a_grad, combine_grad=True, verbosity=1
    )
    assert_identical(reference, combined)
    assert "Combined grad has been destroyed and will be recombined" in capsys.readouterr().out
    buffers = optimizer.get_model_combined_grads()
    with_grad = [p for p in amp.master_params(optimizer) if p.grad is not None]
    assert with_grad and all(lives_in(p.grad, buffers) for p in with_grad)


def test_check_combined_tensors_catches_a_grad_moved_in_place(capsys):
    def move_a_grad(model, optimizer):
        if not hasattr(move_a_grad, "done"):
            move_a_grad.done = True
            grad = model.head.weight.grad
            grad.data = grad.data.clone()  # same tensor object, new memory

    reference, _ = train("O1", steps=3)
    capsys.readouterr()
    combined, _ = train(
        "O1",
        steps=3,
        before_step=move_a_grad,
        combine_grad=True,
        check_combined_tensors=True,
        verbosity=1,
    )
    assert_identical(reference, combined)
    assert "Combined grad has been destroyed and will be recombined" in capsys.readouterr().out


# ---- clip_optimizer_grad_norm_fused ------------------------------------------------------------


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("make_optimizer", [sgd, fused_sgd], ids=["sgd", "npu_fused_sgd"])
def test_clip_optimizer_grad_norm_fused_equals_clip_grad_norm(opt_level, norm_type, make_optimizer):
    torch_norms: list[float] = []
    fused_norms: list[float] = []

    def clip_with_torch(model, optimizer):
        params = list(amp.master_params(optimizer))
        torch_norms.append(float(torch.nn.utils.clip_grad_norm_(params, 0.1, norm_type)))

    def clip_fused(model, optimizer):
        fused_norms.append(float(optimizer.clip_optimizer_grad_norm_fused(0.1, norm_type)))

    reference, _ = train(opt_level, make_optimizer=make_optimizer, before_step=clip_with_torch)
    clipped, _ = train(
        opt_level, make_optimizer=make_optimizer, before_step=clip_fused, combine_grad=True
    )
    assert fused_norms == pytest.approx(torch_norms, rel=1e-5)
    assert min(torch_norms) > 0.1  # the clipping really happened
    for a, b in zip(reference, clipped, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
