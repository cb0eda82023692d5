"""NVIDIA apex's ``apex.normalization`` as thin layers over torch's LayerNorm and RMSNorm.

The classes subclass ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm``, so parameter names
(``weight``, ``bias``) and state dicts are unchanged, and ``isinstance(m, nn.LayerNorm)`` holds.
NVIDIA-only knobs (``memory_efficient``) are accepted and ignored: they only trade memory for
recomputation in NVIDIA's CUDA kernel.
"""

from apex.normalization.fused_layer_norm import (
    FusedLayerNorm,
    FusedLayerNormAffineFunction,
    FusedRMSNorm,
    MixedFusedLayerNorm,
    MixedFusedRMSNorm,
    fused_layer_norm,
    fused_layer_norm_affine,
    fused_rms_norm,
    fused_rms_norm_affine,
    mixed_dtype_fused_layer_norm_affine,
    mixed_dtype_fused_rms_norm_affine,
)

__all__ = [
    "FusedLayerNorm",
    "FusedLayerNormAffineFunction",
    "FusedRMSNorm",
    "MixedFusedLayerNorm",
    "MixedFusedRMSNorm",
    "fused_layer_norm",
    "fused_layer_norm_affine",
    "fused_rms_norm",
    "fused_rms_norm_affine",
    "mixed_dtype_fused_layer_norm_affine",
    "mixed_dtype_fused_rms_norm_affine",
]
