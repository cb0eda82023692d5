"""One run of the default rules does what NPU106 (or NPU105) alone followed by the default rules
does: NPU101 reads their plans (``Fp16Rewrites``, ``AddedAmp``) and NPU102 finishes NPU106's
``amp.initialize`` in the same pass. (NPU105 on whole programs: tests/test_e2e_amp.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.rule import chain_order
from migrator.settings import Settings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FP16_CASES = sorted((FIXTURES / "npu106").glob("*.before.py"))


def test_the_chain_runs_npu105_and_npu106_before_npu101_before_npu102() -> None:
    codes = [rule.CODE for rule in chain_order(select_rules(all_rules(), ["NPU", "NPU105"]))]
    assert codes.index("NPU106") < codes.index("NPU101") < codes.index("NPU102")
    assert codes.index("NPU105") < codes.index("NPU101")


def migrated(source: bytes, select: list[str]) -> bytes:
    result = migrate_source(source, "t.py", select_rules(all_rules(), select), Settings())
    assert result.status is not Status.ERROR, result.diagnostics
    return result.migrated


@pytest.mark.parametrize("before", FP16_CASES, ids=lambda path: path.name.split(".")[0])
def test_one_default_run_writes_what_npu106_first_then_the_default_rules_write(
    before: Path,
) -> None:
    source = before.read_bytes()
    one = migrated(source, [])
    two = migrated(migrated(source, ["NPU106"]), [])
    assert migrated(one, []) == one
    assert one == two


def test_an_fp16_optimizer_script_is_fused_with_combined_gradients_in_one_run() -> None:
    one = migrated((FIXTURES / "npu106" / "minimal.before.py").read_bytes(), []).decode()
    assert "optimizer = apex.optimizers.NpuFusedSGD(model.parameters()" in one
    assert 'opt_level="O2", keep_batchnorm_fp32=False, loss_scale=128.0, combine_grad=True' in one
    assert "FP16_Optimizer" not in one
