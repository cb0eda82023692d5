"""The device probe: lazy, cached, and never importing torch_npu just because apex was imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from apex._device import device_kind, reset_device_probe


def _run_python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return completed.stdout.strip()


def test_importing_apex_does_not_import_torch_npu_or_probe() -> None:
    out = _run_python(
        """
        import sys
        import apex, apex._device
        print('torch_npu' in sys.modules, apex._device.device_kind.cache_info().currsize)
        """
    )
    assert out == "False 0"


def test_probe_answers_cpu_without_torch_npu_or_cuda() -> None:
    reset_device_probe()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device_kind() == expected


def test_probe_prefers_an_importable_torch_npu_with_an_available_npu(tmp_path) -> None:
    fake = tmp_path / "torch_npu.py"
    fake.write_text(
        "import torch, types\ntorch.npu = types.SimpleNamespace(is_available=lambda: True)\n"
    )
    out = _run_python(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from apex._device import device_kind
        print(device_kind())
        """
    )
    assert out == "npu"


def test_probe_ignores_torch_npu_without_an_available_npu(tmp_path) -> None:
    fake = tmp_path / "torch_npu.py"
    fake.write_text(
        "import torch, types\ntorch.npu = types.SimpleNamespace(is_available=lambda: False)\n"
    )
    out = _run_python(
        f"""
        import sys, torch
        sys.path.insert(0, {str(tmp_path)!r})
        from apex._device import device_kind
        print(device_kind() == ("cuda" if torch.cuda.is_available() else "cpu"))
        """
    )
    assert out == "True"
