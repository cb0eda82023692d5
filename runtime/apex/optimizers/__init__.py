"""``apex.optimizers``: Ascend's NpuFused* optimizers and NVIDIA's Fused* ones.

The ``NpuFused*`` classes here behave like Ascend apex's: ``step()`` raises
``RuntimeError("apex.optimizers.<Name> should be used with AMP.")`` unless the optimizer went
through ``amp.initialize`` (which sets ``_amp_stash``). The same classes without that check
live in :mod:`apex.optimizers.standalone`. ``Lamb`` has no amp check, as in Ascend.
NVIDIA's ``FusedSGD``, ``FusedAdam``, ``FusedLAMB``, ``FusedNovoGrad`` and ``FusedAdagrad``
are plain-torch implementations with NVIDIA's signatures.
"""

from __future__ import annotations

from typing import ClassVar

from apex.optimizers import standalone
from apex.optimizers._fused_base import NpuFusedOptimizerBase
from apex.optimizers._nvidia import FusedAdagrad, FusedAdam, FusedLAMB, FusedNovoGrad, FusedSGD
from apex.optimizers.standalone import Lamb


class NpuFusedSGD(standalone.NpuFusedSGD):
    __doc__ = standalone.NpuFusedSGD.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedAdam(standalone.NpuFusedAdam):
    __doc__ = standalone.NpuFusedAdam.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedAdamW(standalone.NpuFusedAdamW):
    __doc__ = standalone.NpuFusedAdamW.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedAdadelta(standalone.NpuFusedAdadelta):
    __doc__ = standalone.NpuFusedAdadelta.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedRMSprop(standalone.NpuFusedRMSprop):
    __doc__ = standalone.NpuFusedRMSprop.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedRMSpropTF(standalone.NpuFusedRMSpropTF):
    __doc__ = standalone.NpuFusedRMSpropTF.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedLamb(standalone.NpuFusedLamb):
    __doc__ = standalone.NpuFusedLamb.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedAdamP(standalone.NpuFusedAdamP):
    __doc__ = standalone.NpuFusedAdamP.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


class NpuFusedBertAdam(standalone.NpuFusedBertAdam):
    __doc__ = standalone.NpuFusedBertAdam.__doc__
    _requires_amp: ClassVar[bool] = True
    is_npu_fused_optimizer: ClassVar[bool] = True


__all__ = [
    "FusedAdagrad",
    "FusedAdam",
    "FusedLAMB",
    "FusedNovoGrad",
    "FusedSGD",
    "Lamb",
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedOptimizerBase",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
    "standalone",
]
