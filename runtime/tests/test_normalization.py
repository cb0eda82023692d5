"""apex.normalization: torch layers under NVIDIA's names, argument orders and dtype rules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from apex.normalization import (
    FusedLayerNorm,
    FusedLayerNormAffineFunction,
    FusedRMSNorm,
    MixedFusedLayerNorm,
    MixedFusedRMSNorm,
    fused_layer_norm,
    fused_layer_norm_affine,
    fused_rms_norm_affine,
)


@pytest.fixture
def activations() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 3, 8)


def test_fused_layer_norm_is_a_torch_layer_norm_with_the_same_state_dict(activations) -> None:
    fused = FusedLayerNorm(8, eps=1e-5, memory_efficient=True)
    with torch.no_grad():
        fused.weight.uniform_()
        fused.bias.uniform_()
    plain = torch.nn.LayerNorm(8)
    plain.load_state_dict(fused.state_dict())
    assert isinstance(fused, torch.nn.LayerNorm)
    torch.testing.assert_close(fused(activations), plain(activations))


def test_fused_layer_norm_without_affine_has_no_parameters(activations) -> None:
    fused = FusedLayerNorm([3, 8], elementwise_affine=False)
    assert list(fused.parameters()) == []
    torch.testing.assert_close(fused(activations), F.layer_norm(activations, (3, 8), eps=1e-5))


def test_fused_rms_norm_defaults_eps_to_nvidia_value(activations) -> None:
    norm = FusedRMSNorm(8)
    assert norm.eps == 1e-5
    expected = activations / torch.sqrt(activations.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm(activations), expected)


def test_mixed_layer_norm_output_follows_weight_dtype(activations) -> None:
    mixed = MixedFusedLayerNorm(8)
    output = mixed(activations.half())
    assert output.dtype == torch.float32
    torch.testing.assert_close(output, F.layer_norm(activations.half().float(), (8,), eps=1e-5))
    assert MixedFusedRMSNorm(8).half()(activations).dtype == torch.float16


def test_mixed_layer_norm_refuses_no_affine() -> None:
    with pytest.raises(RuntimeError, match="elementwise_affine"):
        MixedFusedLayerNorm(8, elementwise_affine=False)


def test_functional_forms_take_weight_before_shape(activations) -> None:
    weight, bias = torch.rand(8), torch.rand(8)
    expected = F.layer_norm(activations, (8,), weight, bias, 1e-6)
    torch.testing.assert_close(fused_layer_norm_affine(activations, weight, bias, 8), expected)
    torch.testing.assert_close(
        FusedLayerNormAffineFunction.apply(activations, weight, bias, (8,), 1e-6), expected
    )
    torch.testing.assert_close(
        fused_layer_norm(activations, 8), F.layer_norm(activations, (8,), eps=1e-6)
    )
    torch.testing.assert_close(
        fused_rms_norm_affine(activations, weight, 8), F.rms_norm(activations, (8,), weight, 1e-6)
    )


def test_gradients_flow_through_fused_layer_norm(activations) -> None:
    fused = FusedLayerNorm(8)
    fused(activations.requires_grad_()).sum().backward()
    assert fused.weight.grad is not None
    assert activations.grad is not None
