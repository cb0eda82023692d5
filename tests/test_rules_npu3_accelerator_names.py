"""Every torch name that `--target accelerator` emits exists in the installed torch.

The names come from the mapping tables and from the expected output of the accelerator fixtures
(which also hold names the user wrote; they must exist too).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from migrator.rules.device._common import ACCELERATOR_API, ACCELERATOR_TORCH_API

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TORCH_NAME = re.compile(r"\btorch(?:\.\w+)+")


def resolve(dotted: str) -> object:
    value: object = torch
    for part in dotted.split(".")[1:]:
        value = getattr(value, part)
    return value


def emitted_names() -> set[str]:
    """Dotted torch names in the expected output of every accelerator fixture of NPU3xx."""
    names = {f"torch.accelerator.{name}" for name in ACCELERATOR_API.values()}
    names |= {f"torch.{name}" for name in ACCELERATOR_TORCH_API.values()}
    for after in FIXTURES.glob("npu3*/accelerator*.after.py"):
        for match in TORCH_NAME.findall(after.read_text()):
            names.add(match)  # `...current_accelerator().type`: the call ends the name
    return names


def test_accelerator_fixtures_exist() -> None:
    assert len(list(FIXTURES.glob("npu3*/accelerator*.after.py"))) >= 5


@pytest.mark.parametrize("dotted", sorted(emitted_names()))
def test_emitted_name_exists_in_installed_torch(dotted: str) -> None:
    resolve(dotted)  # AttributeError when the installed torch lacks it
