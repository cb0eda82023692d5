"""amp.initialize: return conventions, opt-level effects on the model, validation errors."""

from __future__ import annotations

import pytest
import torch

from apex import amp, optimizers


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    )


def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1)


# ---- return conventions -----------------------------------------------------------------------


def test_single_model_and_optimizer_come_back_as_a_pair():
    model = small_model()
    optimizer = sgd(model)
    result = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    assert result == (model, optimizer)


def test_model_alone_comes_back_alone():
    model = small_model()
    assert amp.initialize(model, opt_level="O1", verbosity=0) is model


def test_lists_in_lists_out():
    models = [small_model(), small_model()]
    optimizers = [sgd(models[0]), sgd(models[1])]
    returned_models, returned_optimizers = amp.initialize(
        models=models, optimizers=optimizers, opt_level="O1", verbosity=0
    )
    assert returned_models == models
    assert returned_optimizers == optimizers


def test_model_list_with_a_single_optimizer():
    models = [small_model(), small_model()]
    optimizer = torch.optim.SGD([*models[0].parameters(), *models[1].parameters()], lr=0.1)
    returned = amp.initialize(models, optimizer, opt_level="O1", verbosity=0)
    assert returned == (models, optimizer)


def test_disabled_returns_inputs_untouched():
    model = small_model()
    optimizer = sgd(model)
    assert amp.initialize(model, optimizer, enabled=False) == (model, optimizer)
    assert not hasattr(optimizer, "_amp_stash")


def test_bad_types_are_rejected():
    with pytest.raises(TypeError, match="models must be either a single model"):
        amp.initialize("not a model", verbosity=0)
    with pytest.raises(TypeError, match="optimizers must be either a single optimizer"):
        amp.initialize(small_model(), optimizers=("a", "b"), verbosity=0)


# ---- opt levels -------------------------------------------------------------------------------


def test_o0_keeps_fp32_and_a_static_scale_of_one():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O0", verbosity=0)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    scaler = amp._amp_state.loss_scalers[0]
    assert not scaler.dynamic and scaler.loss_scale() == 1.0


def test_o1_keeps_weights_fp32_with_dynamic_scale():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O1", verbosity=0)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert amp._amp_state.loss_scalers[0].dynamic
    assert amp._amp_state.loss_scalers[0].loss_scale() == 2.0**16


def test_o2_casts_model_to_half_but_keeps_batchnorm_fp32_and_fp32_outputs():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O2", verbosity=0)
    assert model[0].weight.dtype == torch.bfloat16  # CPU default half dtype
    assert model[1].weight.dtype == torch.float32
    assert model[1].running_mean.dtype == torch.float32
    assert model(torch.randn(3, 4)).dtype == torch.float32


def test_o2_optimizer_steps_fp32_master_weights():
    model = small_model()
    optimizer = sgd(model)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2", verbosity=0)
    masters = list(amp.master_params(optimizer))
    assert {p.dtype for p in masters} == {torch.float32}
    assert not any(m is model[0].weight for m in masters)
    assert any(m is model[1].weight for m in masters)  # fp32 batchnorm is its own master


def test_o2_model_state_dict_is_fp32():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O2", verbosity=0)
    assert {v.dtype for v in model.state_dict().values() if v.is_floating_point()} == {
        torch.float32
    }


def test_o3_is_pure_half_with_static_scale():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O3", verbosity=0)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert not amp._amp_state.loss_scalers[0].dynamic


def test_o3_with_keep_batchnorm_fp32():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O3", keep_batchnorm_fp32=True, verbosity=0)
    assert model[1].weight.dtype == torch.float32
    assert model[0].weight.dtype == torch.bfloat16


def test_cpu_float32_mode_keeps_every_level_in_fp32(monkeypatch):
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "float32")
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O3", verbosity=0)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_unknown_cpu_dtype_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "int8")
    with pytest.raises(ValueError, match="APEX_AMP_CPU_DTYPE"):
        amp.initialize(small_model(), opt_level="O2", verbosity=0)


def test_scaler_knobs_reach_every_loss_scaler():
    model = small_model()
    amp.initialize(
        model,
        sgd(model),
        opt_level="O1",
        num_losses=3,
        dynamic_init_scale=1024.0,
        scale_window=7,
        scale_backoff_factor=0.25,
        verbosity=0,
    )
    scalers = amp._amp_state.loss_scalers
    assert len(scalers) == 3
    assert all(s.loss_scale() == 1024.0 and s._scale_seq_len == 7 for s in scalers)
    assert all(s._scale_backoff_factor == 0.25 for s in scalers)


def test_init_scale_is_capped_by_max_loss_scale():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O1", max_loss_scale=128.0, verbosity=0)
    assert amp._amp_state.loss_scalers[0].loss_scale() == 128.0


def test_explicit_loss_scale_makes_scaling_static():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O2", loss_scale=32.0, verbosity=0)
    scaler = amp._amp_state.loss_scalers[0]
    assert not scaler.dynamic and scaler.loss_scale() == 32.0


# ---- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"opt_level": "o1"}, "Unexpected optimization level o1"),
        ({"opt_level": "O0", "combine_grad": True}, "combine_grad=True or check_combined"),
        ({"opt_level": "O3", "check_combined_tensors": True}, "combine_grad=True or check_comb"),
        ({"opt_level": "O1", "combine_ddp": True}, "Combine_grad should be True"),
        ({"opt_level": "O2", "user_cast_preferred": True}, "user_cast_preferred=True should"),
        ({"opt_level": "O1", "master_weights": True}, "master_weights with O1"),
        ({"opt_level": "O1", "keep_batchnorm_fp32": True}, "keep_batchnorm_fp32 should be None"),
        ({"opt_level": "O1", "cast_model_type": torch.float16}, "O1 inserts casts"),
        ({"opt_level": "O2", "patch_torch_functions": True}, "patch_torch_functions=True"),
        (
            {"opt_level": "O2", "combine_grad": True, "master_weights": False},
            "master_weights should be True when combine_grad",
        ),
    ],
)
def test_inconsistent_options_are_errors(kwargs, message):
    model = small_model()
    with pytest.raises(RuntimeError, match=message):
        amp.initialize(model, sgd(model), verbosity=0, **kwargs)


NPU_FUSED_CLASSES = [
    getattr(optimizers, name)
    for name in optimizers.__all__
    if name.startswith("NpuFused") and name != "NpuFusedOptimizerBase"
]
FUSED_ONLY_WITH_O1_O2 = (
    "Currently, npu fused optimizer can only be used when opt_level='O1' or opt_level='O2'"
)
COMBINING_ONLY_WITH_O1_O2 = (
    "Currently, combine_grad=True or check_combined_tensors=True should only be set by "
    "selecting opt_level='O1' or opt_level='O2'."
)


@pytest.mark.parametrize("opt_level", ["O0", "O3"])
@pytest.mark.parametrize("optimizer_class", NPU_FUSED_CLASSES, ids=lambda c: c.__name__)
def test_npu_fused_optimizers_are_refused_outside_o1_and_o2(opt_level, optimizer_class):
    """Ascend apex's refusal, word for word; here before the model is cast (Ascend casts the
    model first), so nothing is left half-initialised."""
    model = small_model()
    optimizer = optimizer_class(model.parameters(), lr=0.1)
    amp._amp_state.hard_override = True  # Ascend raises even then: this is no option check
    with pytest.raises(RuntimeError) as raised:
        amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0)
    assert str(raised.value) == FUSED_ONLY_WITH_O1_O2
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not hasattr(optimizer, "_amp_stash")


@pytest.mark.parametrize("opt_level", ["O0", "O3"])
@pytest.mark.parametrize("option", ["combine_grad", "check_combined_tensors"])
@pytest.mark.parametrize("fused", [False, True], ids=["torch SGD", "NpuFusedSGD"])
def test_combining_is_refused_outside_o1_and_o2(opt_level, option, fused):
    model = small_model()
    optimizer = (optimizers.NpuFusedSGD if fused else torch.optim.SGD)(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError) as raised:
        amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0, **{option: True})
    assert str(raised.value) == COMBINING_ONLY_WITH_O1_O2
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not hasattr(optimizer, "_amp_stash")


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_npu_fused_optimizers_are_accepted_with_o1_and_o2(opt_level):
    model = small_model()
    master_weights = True if opt_level == "O2" else None
    _, optimizer = amp.initialize(
        model,
        optimizers.NpuFusedSGD(model.parameters(), lr=0.1),
        opt_level=opt_level,
        master_weights=master_weights,
        combine_grad=True,
        verbosity=0,
    )
    assert hasattr(optimizer, "_amp_stash")


@pytest.mark.parametrize(
    ("opt_level", "combine_grad"),
    [("O0", None), ("O1", None), ("O1", True), ("O2", None), ("O2", True), ("O3", None)],
)
def test_torch_npu_fused_optimizers_are_refused_by_amp(opt_level, combine_grad):
    """On Ascend, amp sets the gradients of torch_npu.optim's classes to None before every
    backward while they step the buffers packed at their first step: stale gradients, silently.
    Refused here, at every level, before anything is changed."""
    model = small_model()
    optimizer = optimizers.standalone.NpuFusedSGD(model.parameters(), lr=0.1)
    master_weights = True if opt_level == "O2" else None
    with pytest.raises(
        RuntimeError, match=r"NpuFusedSGD \(torch_npu.optim\) cannot be used with amp"
    ):
        amp.initialize(
            model,
            optimizer,
            opt_level=opt_level,
            master_weights=master_weights,
            combine_grad=combine_grad,
            verbosity=0,
        )
    assert not hasattr(optimizer, "_amp_stash")
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_torch_npu_fused_optimizers_work_when_amp_is_disabled():
    """`enabled=False` (a `--amp` flag left off) makes amp.initialize return its arguments."""
    model = small_model()
    optimizer = optimizers.standalone.NpuFusedSGD(model.parameters(), lr=0.1)
    model, same = amp.initialize(model, optimizer, enabled=False, verbosity=0)
    assert same is optimizer
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    assert any(
        not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True)
    )


def test_hard_override_turns_option_errors_into_warnings(capsys):
    amp._amp_state.hard_override = True
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O1", master_weights=True, verbosity=0)
    assert "Warning:  It doesn't make sense to use master_weights" in capsys.readouterr().out


def test_keep_batchnorm_fp32_accepts_strings():
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O2", keep_batchnorm_fp32="False", verbosity=0)
    assert model[1].weight.dtype == torch.bfloat16


def test_parallel_wrapped_model_is_refused():
    with pytest.raises(RuntimeError, match="Parallel wrappers should only be applied"):
        amp.initialize(torch.nn.DataParallel(small_model()), verbosity=0)


def test_half_model_is_refused():
    with pytest.raises(RuntimeError, match=r"you do not need to call \.half"):
        amp.initialize(small_model().half(), opt_level="O2", verbosity=0)


def test_an_optimizer_goes_through_initialize_only_once():
    model = small_model()
    optimizer = sgd(model)
    amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    with pytest.raises(RuntimeError, match=r"only be passed through amp\.initialize once"):
        amp.initialize(model, optimizer, opt_level="O1", verbosity=0)


def test_closure_is_refused():
    model = small_model()
    model, optimizer = amp.initialize(model, sgd(model), opt_level="O1", verbosity=0)
    with pytest.raises(RuntimeError, match="does not support closure"):
        optimizer.step(lambda: 0.0)


def test_options_are_printed_unless_verbosity_is_zero(capsys):
    model = small_model()
    amp.initialize(model, sgd(model), opt_level="O2")
    out = capsys.readouterr().out
    assert "Selected optimization level O2" in out
    assert "master_weights" in out
