"""The NPU2xx rewrites produce code that runs under real torch and computes what apex did.

The fixtures prove the text of each rewrite; these tests execute rewritten programs: torch's
LayerNorm / RMSNorm with apex's arguments, torch's DDP and SyncBatchNorm after NPU202, and an
optimizer moved above the DDP wrap by NPU203 that still steps the wrapped model's parameters.
DDP runs in this process with the gloo backend and a world of one.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from migrator.engine import migrate_source
from migrator.registry import all_rules, select_rules
from migrator.results import Status
from migrator.settings import Settings


def migrate(source: str, *codes: str) -> str:
    rules = select_rules(all_rules(), codes)
    result = migrate_source(textwrap.dedent(source).encode(), "program.py", rules, Settings())
    assert result.status is Status.CHANGED, result.diagnostics
    return result.migrated.decode()


def run(code: str) -> dict[str, Any]:
    assert "apex" not in code, code  # the migrated program must not need apex any more
    namespace: dict[str, Any] = {}
    exec(compile(code, "program.py", "exec"), namespace)
    return namespace


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_layer_norm_keeps_its_arguments_and_parameter_names() -> None:
    code = migrate(
        """
        import torch
        from apex.normalization import FusedLayerNorm as BertLayerNorm

        norm = BertLayerNorm(16, 1e-12, True, True)
        """,
        "NPU201",
    )
    norm = run(code)["norm"]
    assert type(norm) is torch.nn.LayerNorm
    assert norm.normalized_shape == (16,)
    assert norm.eps == 1e-12
    assert norm.elementwise_affine
    assert set(norm.state_dict()) == {"weight", "bias"}  # apex's names: checkpoints load


def test_rms_norm_uses_apex_default_eps() -> None:
    code = migrate(
        """
        import torch
        from apex.normalization import FusedRMSNorm

        norm = FusedRMSNorm(8)
        """,
        "NPU201",
    )
    norm = run(code)["norm"]
    assert type(norm) is torch.nn.RMSNorm
    x = torch.randn(4, 8) * 1e-3  # small inputs: the eps term matters
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)


def test_fallback_block_becomes_torch_layer_norm() -> None:
    code = migrate(
        """
        import torch

        try:
            from apex.normalization.fused_layer_norm import FusedLayerNorm as BertLayerNorm
        except ImportError:
            class BertLayerNorm(torch.nn.Module):
                pass

        norm = BertLayerNorm(8, eps=1e-12)
        """,
        "NPU201",
    )
    assert "try" not in code and "except" not in code
    assert type(run(code)["norm"]) is torch.nn.LayerNorm


def test_apex_parallel_rewrite_builds_torch_ddp_and_sync_batch_norm(process_group: None) -> None:
    code = migrate(
        """
        import torch
        from apex.parallel import DistributedDataParallel as DDP, convert_syncbn_model

        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        net = convert_syncbn_model(net)  # torch's DDP takes SyncBatchNorm on devices only
        model = DDP(torch.nn.Linear(4, 4), delay_allreduce=True, message_size=10000000)
        """,
        "NPU202",
    )
    namespace = run(code)
    assert type(namespace["net"][1]) is torch.nn.SyncBatchNorm
    assert type(namespace["model"]) is torch.nn.parallel.DistributedDataParallel


def test_moved_optimizer_steps_the_wrapped_models_parameters(process_group: None) -> None:
    code = migrate(
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        model = DDP(model)
        optimizer = torch.optim.SGD(model.module.parameters(), lr=0.5)
        before = [p.detach().clone() for p in model.parameters()]
        model(torch.ones(3, 4)).sum().backward()
        optimizer.step()
        """,
        "NPU203",
    )
    assert code.index("optimizer = torch.optim.SGD(model.parameters()") < code.index("DDP(model)")
    namespace = run(code)
    model, optimizer = namespace["model"], namespace["optimizer"]
    stepped = [id(p) for group in optimizer.param_groups for p in group["params"]]
    assert stepped == [id(p) for p in model.module.parameters()]
    changed = [
        not torch.equal(b, p) for b, p in zip(namespace["before"], model.parameters(), strict=True)
    ]
    assert all(changed)
