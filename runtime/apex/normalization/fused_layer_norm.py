"""LayerNorm / RMSNorm with NVIDIA apex's names and argument orders, computed by torch."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

Shape = int | Sequence[int]


def _as_shape(normalized_shape: Shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


def fused_layer_norm_affine(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    normalized_shape: Shape,
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> torch.Tensor:
    """NVIDIA's argument order (weight, bias before the shape) over ``F.layer_norm``."""
    return F.layer_norm(input, _as_shape(normalized_shape), weight, bias, eps)


def fused_layer_norm(
    input: torch.Tensor, normalized_shape: Shape, eps: float = 1e-6, memory_efficient: bool = False
) -> torch.Tensor:
    return F.layer_norm(input, _as_shape(normalized_shape), None, None, eps)


def fused_rms_norm_affine(
    input: torch.Tensor,
    weight: torch.Tensor,
    normalized_shape: Shape,
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> torch.Tensor:
    return F.rms_norm(input, _as_shape(normalized_shape), weight, eps)


def fused_rms_norm(
    input: torch.Tensor, normalized_shape: Shape, eps: float = 1e-6, memory_efficient: bool = False
) -> torch.Tensor:
    return F.rms_norm(input, _as_shape(normalized_shape), None, eps)


def mixed_dtype_fused_layer_norm_affine(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    normalized_shape: Shape,
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> torch.Tensor:
    """Normalise in fp32 and return the weight's dtype, as NVIDIA's mixed-dtype kernel does."""
    output = F.layer_norm(
        input.float(), _as_shape(normalized_shape), weight.float(), bias.float(), eps
    )
    return output.to(weight.dtype)


def mixed_dtype_fused_rms_norm_affine(
    input: torch.Tensor,
    weight: torch.Tensor,
    normalized_shape: Shape,
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> torch.Tensor:
    output = F.rms_norm(input.float(), _as_shape(normalized_shape), weight.float(), eps)
    return output.to(weight.dtype)


class FusedLayerNormAffineFunction:
    """``FusedLayerNormAffineFunction.apply(input, weight, bias, normalized_shape, eps)``."""

    @staticmethod
    def apply(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        normalized_shape: Shape,
        eps: float,
        memory_efficient: bool = False,
    ) -> torch.Tensor:
        return fused_layer_norm_affine(input, weight, bias, normalized_shape, eps)


class FusedLayerNorm(torch.nn.LayerNorm):
    """``apex.normalization.FusedLayerNorm``: a ``torch.nn.LayerNorm`` (same parameters)."""

    def __init__(
        self,
        normalized_shape: Shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        memory_efficient: bool = False,
    ) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.memory_efficient = memory_efficient


class FusedRMSNorm(torch.nn.RMSNorm):
    """``apex.normalization.FusedRMSNorm``: a ``torch.nn.RMSNorm`` with NVIDIA's eps=1e-5."""

    def __init__(
        self,
        normalized_shape: Shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        memory_efficient: bool = False,
    ) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.memory_efficient = memory_efficient


class MixedFusedLayerNorm(FusedLayerNorm):
    """LayerNorm whose output has the weight's dtype (fp32 weights with fp16 activations)."""

    def __init__(self, normalized_shape: Shape, eps: float = 1e-5, **kwargs: object) -> None:
        if "elementwise_affine" in kwargs and not kwargs["elementwise_affine"]:
            raise RuntimeError("MixedFusedLayerNorm does not support `elementwise_affine = False`")
        memory_efficient = bool(kwargs.get("memory_efficient", False))
        super().__init__(normalized_shape, eps, True, memory_efficient)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return mixed_dtype_fused_layer_norm_affine(
            input, self.weight, self.bias, self.normalized_shape, self.eps
        )


class MixedFusedRMSNorm(FusedRMSNorm):
    """RMSNorm whose output has the weight's dtype."""

    def __init__(self, normalized_shape: Shape, eps: float = 1e-5, **kwargs: object) -> None:
        if "elementwise_affine" in kwargs and not kwargs["elementwise_affine"]:
            raise RuntimeError("MixedFusedRMSNorm does not support `elementwise_affine = False`")
        memory_efficient = bool(kwargs.get("memory_efficient", False))
        super().__init__(normalized_shape, eps, True, memory_efficient)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        assert self.eps is not None
        return mixed_dtype_fused_rms_norm_affine(
            input, self.weight, self.normalized_shape, self.eps
        )
