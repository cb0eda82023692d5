"""O1 autocast, O2/O3 input and output casts, the user cast registry, CPU dtype choice."""

from __future__ import annotations

import types

import pytest
import torch

from apex import amp
from apex.amp.frontend import _reset


class Recorder(torch.nn.Module):
    """Two linears; records the dtypes its first layer sees and produces."""

    def __init__(self, helpers: types.SimpleNamespace | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 2)
        self.helpers = helpers
        self.seen: list[torch.dtype] = []
        self.first.register_forward_hook(self._record)

    def _record(self, module, inputs, output) -> None:
        self.seen = [inputs[0].dtype, output.dtype]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = self.first(inputs)
        if self.helpers is not None:
            hidden = self.helpers.combine(hidden, hidden)
        return self.second(hidden)


def initialize(model: torch.nn.Module, opt_level: str, **kwargs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0, **kwargs)


def test_o1_runs_forward_under_autocast_and_returns_fp32():
    model, _ = initialize(Recorder(), "O1")
    output = model(torch.randn(3, 4))
    assert model.seen == [torch.float32, torch.bfloat16]  # fp32 input, bf16 matmul
    assert output.dtype == torch.float32
    assert model.first.weight.dtype == torch.float32


def test_o1_with_cast_model_outputs():
    model, _ = initialize(Recorder(), "O1", cast_model_outputs=torch.bfloat16)
    assert model(torch.randn(3, 4)).dtype == torch.bfloat16


def test_o1_in_cpu_float32_mode_runs_fp32(monkeypatch):
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "float32")
    model, _ = initialize(Recorder(), "O1")
    model(torch.randn(3, 4))
    assert model.seen == [torch.float32, torch.float32]


def test_o1_cpu_float16_mode_is_available(monkeypatch):
    monkeypatch.setenv("APEX_AMP_CPU_DTYPE", "float16")
    model, _ = initialize(Recorder(), "O1")
    model(torch.randn(3, 4))
    assert model.seen[1] == torch.float16


def test_disable_casts_turns_autocast_off_inside_forward():
    class Switchable(Recorder):
        def forward(self, inputs):
            with amp.disable_casts():
                return super().forward(inputs)

    model, _ = initialize(Switchable(), "O1")
    model(torch.randn(3, 4))
    assert model.seen == [torch.float32, torch.float32]


def test_o2_casts_floating_inputs_only():
    class TakesADict(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)
            self.seen: dict[str, torch.dtype] = {}

        def forward(self, batch):
            self.seen = {key: value.dtype for key, value in batch.items()}
            return self.linear(batch["x"])

    model, _ = initialize(TakesADict(), "O2")
    output = model({"x": torch.randn(3, 4), "ids": torch.arange(3)})
    assert model.seen == {"x": torch.bfloat16, "ids": torch.int64}
    assert output.dtype == torch.float32


def test_o2_cast_model_outputs():
    model, _ = initialize(Recorder(), "O2", cast_model_outputs=torch.bfloat16)
    assert model(torch.randn(3, 4)).dtype == torch.bfloat16


# ---- the user cast registry --------------------------------------------------------------------


def recording_helpers() -> types.SimpleNamespace:
    helpers = types.SimpleNamespace(calls=[])

    def combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        helpers.calls.append((a.dtype, b.dtype, torch.is_autocast_enabled("cpu")))
        return a + b

    helpers.combine = combine
    return helpers


@pytest.mark.parametrize(
    ("register", "expected"),
    [
        (amp.register_half_function, torch.bfloat16),
        (amp.register_float_function, torch.float32),
    ],
)
def test_registered_functions_get_their_dtype_without_autocast(register, expected):
    helpers = recording_helpers()
    register(helpers, "combine")
    model, _ = initialize(Recorder(helpers), "O1")
    model(torch.randn(3, 4))
    assert helpers.calls == [(expected, expected, False)]


def test_promote_function_uses_the_widest_argument_dtype():
    helpers = recording_helpers()
    amp.register_promote_function(helpers, "combine")
    initialize(Recorder(), "O1")
    helpers.combine(torch.ones(2, dtype=torch.bfloat16), torch.ones(2))
    assert helpers.calls == [(torch.float32, torch.float32, False)]


def test_registration_only_applies_at_o1_and_before_initialize():
    helpers = recording_helpers()
    original = helpers.combine
    amp.register_float_function(helpers, "combine")
    initialize(Recorder(), "O2")
    assert helpers.combine is original
    _reset()
    initialize(Recorder(), "O1")
    amp.register_float_function(helpers, "combine")
    assert helpers.combine is original


def test_registering_a_missing_function_is_an_error():
    with pytest.raises(ValueError, match="No function named nothing_here"):
        amp.register_half_function(torch, "nothing_here")


def test_a_new_initialize_restores_the_original_functions():
    helpers = recording_helpers()
    original = helpers.combine
    amp.register_half_function(helpers, "combine")
    initialize(Recorder(), "O1")
    assert helpers.combine is not original
    initialize(Recorder(), "O0")
    assert helpers.combine is original


def matmul_namespace() -> types.SimpleNamespace:
    # A stand-in for torch with a function apex keeps on its fp16 list.
    return types.SimpleNamespace(matmul=torch.matmul)


@pytest.mark.parametrize("preferred", [None, True])
def test_user_cast_preferred_decides_whether_fp16_list_casts_apply_first(preferred):
    namespace = matmul_namespace()
    amp.register_float_function(namespace, "matmul")
    initialize(Recorder(), "O1", user_cast_preferred=preferred)
    a = torch.randn(8, 8, generator=torch.Generator().manual_seed(3))
    b = torch.randn(8, 8, generator=torch.Generator().manual_seed(4))
    result = namespace.matmul(a, b)
    assert result.dtype == torch.float32
    if preferred:
        torch.testing.assert_close(result, a @ b)
    else:
        # apex: the fp16-list cast runs first, so fp32 compute sees half-rounded arguments.
        rounded = a.bfloat16().float() @ b.bfloat16().float()
        torch.testing.assert_close(result, rounded)
        assert not torch.allclose(result, a @ b, rtol=1e-4, atol=1e-4)


def test_cast_decorators_apply_only_while_o1_is_active():
    @amp.float_function
    def as_float(tensor: torch.Tensor) -> torch.dtype:
        return tensor.dtype

    @amp.half_function
    def as_half(tensor: torch.Tensor) -> torch.dtype:
        return tensor.dtype

    bf16 = torch.ones(2, dtype=torch.bfloat16)
    assert as_float(bf16) == torch.bfloat16  # no amp yet
    initialize(Recorder(), "O1")
    assert as_float(bf16) == torch.float32
    assert as_half(torch.ones(2)) == torch.bfloat16
    _reset()
    initialize(Recorder(), "O2")
    assert as_float(bf16) == torch.bfloat16


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_a_deepcopy_of_the_model_runs_its_own_weights(opt_level):
    import copy

    model, optimizer = initialize(Recorder(), opt_level)
    with amp.scale_loss(model(torch.randn(3, 4)).sum(), optimizer) as scaled:
        scaled.backward()
    optimizer.step()  # O2 masters exist from here on
    ema = copy.deepcopy(model)  # the usual EMA copy, made after initialize
    with torch.no_grad():
        for param in ema.parameters():
            param.zero_()
    inputs = torch.randn(3, 4)
    assert isinstance(ema, Recorder)
    assert int(torch.count_nonzero(ema(inputs))) == 0
    assert int(torch.count_nonzero(model(inputs))) > 0
    assert ema(inputs).dtype == torch.float32
    assert all(int(torch.count_nonzero(v)) == 0 for v in ema.state_dict().values())


def test_an_instance_level_forward_is_wrapped_too():
    model = Recorder()
    original = model.forward
    model.forward = lambda inputs: original(inputs) * 2
    model, _ = initialize(model, "O1")
    assert model(torch.randn(3, 4)).dtype == torch.float32
    assert model.seen == [torch.float32, torch.bfloat16]
