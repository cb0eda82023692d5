"""Every torch name that `--target accelerator` emits exists in the installed torch.

The names come from the target's mapping (rules/device/_target.py) and from the expected output
of the accelerator fixtures (which also hold names the user wrote; they must exist too).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from migrator.rules.device._target import ACCELERATOR, NPU, TARGETS, NoCounterpart
from migrator.settings import Target

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
    names = {*ACCELERATOR.cuda_api.values(), *ACCELERATOR.amp_calls.values()}
    names |= {"torch.get_device_module", "torch.device", "torch.accelerator.current_accelerator"}
    for after in FIXTURES.glob("npu3*/accelerator*.after.py"):
        for match in TORCH_NAME.findall(after.read_text()):
            names.add(match)  # `...current_accelerator().type`: the call ends the name
    return names


def test_accelerator_fixtures_exist() -> None:
    assert len(list(FIXTURES.glob("npu3*/accelerator*.after.py"))) >= 5


@pytest.mark.parametrize("dotted", sorted(emitted_names()))
def test_emitted_name_exists_in_installed_torch(dotted: str) -> None:
    resolve(dotted)  # AttributeError when the installed torch lacks it


def test_every_target_has_one_mapping() -> None:
    """Each `--target` has its spellings, and a missing counterpart always says why."""
    assert set(TARGETS) == set(Target)
    for target in TARGETS.values():
        for spelling in fields(target):
            value = getattr(target, spelling.name)
            if isinstance(value, NoCounterpart):
                assert value.reason, spelling.name
                assert not target.is_npu, f"torch_npu has a counterpart for {spelling.name}"
    assert NPU.device_type == f'"{NPU.device_type_name}"'
