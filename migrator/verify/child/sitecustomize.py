"""Start-up hook of a program run by ``npu-migrate verify`` (never imported by the migrator).

``npu-migrate verify`` puts this folder first on the ``PYTHONPATH`` of the programs it runs, and
only of those, so Python's ``site`` module imports this file before the user's script starts.
It installs the recording probe when the verify environment variables are set, then runs the
``sitecustomize`` this file shadows (a distribution's or a virtual environment's), if any.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _run_shadowed_sitecustomize() -> None:
    """Execute the next ``sitecustomize`` on the path, which ours hides by coming first."""
    here = os.path.dirname(os.path.abspath(__file__))
    others = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("NPU_MIGRATE_VERIFY_RECORDS"):
    import _npu_migrate_verify_probe

    _npu_migrate_verify_probe.install()
_run_shadowed_sitecustomize()
