"""Rule modules, one rule per file, installed as ``migrator.rules``.

Numbering policy (codes are stable: a retired code is never reused):

- ``NPU1xx``: apex optimizers and amp (NpuFused optimizers, ``combine_grad``, parameter groups).
- ``NPU2xx``: normalization, apex.parallel, DDP ordering.
- ``NPU3xx``: CUDA device and backend code.
- ``NPU9xx``: report-only findings that belong to no fixing rule.
- ``NPU000``: reserved by the engine for files it could not process.
"""
