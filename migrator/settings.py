"""The run-wide options every layer below the CLI reads: frozen, so that workers share them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.analysis.project import ProjectFacts


class Target(enum.StrEnum):
    """What device code is migrated to (``--target``)."""

    NPU = "npu"
    ACCELERATOR = "accelerator"


class AmpPolicy(enum.StrEnum):
    """How an ``amp.initialize`` that runs only on some paths counts (``amp`` / ``--amp``)."""

    AS_WRITTEN = "as-written"  # as the code is written: some paths train without amp
    ALWAYS = "always"  # the project trains with amp on: a gated amp.initialize counts as reached


@dataclass(frozen=True)
class Settings:
    """Run-wide options that rules may read. Frozen so that workers can share it."""

    target: Target = Target.NPU
    unsafe_fixes: bool = False
    rule_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Facts about the other files of the run (migrator.analysis.project), filled in by the runner.
    project: ProjectFacts = field(default_factory=ProjectFacts)
    # The torch_npu release whose API table NPU930/NPU931 read (None: the newest), and the
    # project's validated [tool.npu-migrate.torch-npu-api] entries (migrator.api_tables).
    torch_npu_version: str | None = None
    torch_npu_api: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    amp: AmpPolicy = AmpPolicy.AS_WRITTEN

    def options_for(self, code: str) -> Mapping[str, Any]:
        return self.rule_options.get(code, {})
