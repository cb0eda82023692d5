"""Rules, one rule per module, in one package per family; installed as ``migrator.rules``.

Numbering policy (codes are stable: a retired code is never reused). A rule's family is the
package its code's prefix belongs to:

- ``NPU1xx`` (``optimizers``): apex optimizers and amp (NpuFused optimizers, ``combine_grad``,
  parameter groups, ``combine_ddp``).
- ``NPU2xx`` (``normalization_parallel``): normalization, apex.parallel, DDP ordering.
- ``NPU3xx`` and ``NPU92x`` (``device``): CUDA device and backend code, and the device findings
  that are reported only.
- ``NPU90x`` (``apex_extensions``): apex's CUDA extensions.
- ``NPU93x`` (``preflight_api``): what the torch_npu release in use will still refuse.
- ``NPU000``: reserved by the engine for files it could not process.

A module whose name starts with ``_`` is shared code of its family, never a rule: the registry
(:mod:`migrator.registry`) does not import it for rules, and a rule module imports it.
"""
