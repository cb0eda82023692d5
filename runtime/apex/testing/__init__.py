"""Helpers for testing code migrated by npu-migrate on machines without an Ascend NPU.

The main piece is a stand-in ``torch_npu`` package (see :mod:`apex.testing.npu_shim`). It ships
inside the runtime but is *not* importable as ``torch_npu`` by default, so installing the runtime
never hides a real torch_npu. Put its directory on ``PYTHONPATH`` to use it::

    PYTHONPATH="$(python -m apex.testing.npu_shim)" python migrated_train.py

or, from Python (for subprocesses)::

    from apex.testing import npu_shim_env
    subprocess.run([sys.executable, "migrated_train.py"], env=npu_shim_env(), check=True)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from apex.testing.npu_shim import npu_shim_path

__all__ = ["npu_shim_env", "npu_shim_path"]


def npu_shim_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default: ``os.environ``) with the shim directory first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = npu_shim_path() + (os.pathsep + rest if rest else "")
    return env
