"""A stand-in ``torch_npu`` for running migrated code where there is no Ascend NPU.

Code migrated by npu-migrate starts with ``import torch_npu`` and calls ``.npu()``,
``torch.npu.*``, ``torch_npu.optim.NpuFused*`` and the ``"hccl"`` backend. On a CPU machine (CI,
a laptop) the shim makes that code run, with the semantics of the original CUDA script on the
same machine: the "NPU" is never available, so a script that picks its device with
``"npu" if torch.npu.is_available() else "cpu"`` (migrated from the usual ``"cuda" if ...``)
takes its CPU path, exactly as the original takes it on a machine without CUDA.

What ``import torch_npu`` does with the shim on the path:

- ``torch.npu``: the ``torch.cuda``-like API that the rules map to. ``is_available()`` is False
  and ``device_count()`` 0; ``set_device``, ``synchronize``, ``empty_cache``, the seeding
  functions and the memory statistics are no-ops (or 0); ``Stream`` / ``Event`` /
  ``stream(...)`` are inert stand-ins (events still measure wall time); ``torch.npu.amp.autocast``
  and ``GradScaler`` are disabled, as ``torch.cuda.amp`` disables itself without CUDA.
- ``Tensor.npu()`` / ``Module.npu()`` move to the stand-in device, ``Tensor.is_npu`` is True
  only for tensors on a real ``npu`` device (so False here).
- ``torch_npu.optim.NpuFused*``: the runtime's ``apex.optimizers.standalone`` classes, imported
  on first use.
- ``torch_npu.profiler``: ``profile`` / ``ProfilerActivity`` / ``schedule`` /
  ``tensorboard_trace_handler`` over torch's profiler (``ProfilerActivity.NPU`` records nothing
  on CPU).
- ``torch.distributed``: an ``"hccl"`` backend that runs gloo, and ``is_hccl_available()``.
- Device strings: the privateuse1 backend is renamed ``npu`` (as torch_npu does) and registered
  with no device (``torch.accelerator.is_available()`` is False; torch code that asks for the
  accelerator, such as ``torch.distributed.barrier``, gets an answer), so
  ``torch.device("npu")`` and ``"npu:0"`` parse; but no tensor can be allocated there, and
  ``torch.ones(1, device="npu")`` or ``.to("npu")`` fails with torch's error. Migrated code that
  names ``"npu"`` unconditionally therefore needs a real NPU; code that chooses it only when
  ``torch.npu.is_available()`` runs.

The stand-in device is the CPU. ``NPU_SHIM_DEVICE=cuda`` makes ``.npu()`` move to CUDA and the
``torch.npu`` functions act on CUDA instead (``is_available()`` stays False, so use it only for
scripts that never pick an ``"npu"`` device string themselves).

Never install the shim's directory where a real torch_npu is wanted: first on ``PYTHONPATH`` it
hides the real package (the shim warns when it sees one behind it).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["npu_shim_path"]


def npu_shim_path() -> str:
    """The directory to put on ``PYTHONPATH`` so that ``import torch_npu`` imports the shim."""
    return str(Path(__file__).resolve().parent / "python")
