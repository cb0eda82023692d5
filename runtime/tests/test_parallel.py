"""apex.parallel: torch DDP / SyncBatchNorm under NVIDIA's names, on a real gloo group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from apex.parallel import DistributedDataParallel, SyncBatchNorm, convert_syncbn_model


@pytest.fixture
def single_process_group(tmp_path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def _grads_of(model: torch.nn.Module, inputs: torch.Tensor) -> list[torch.Tensor]:
    model(inputs).pow(2).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def _twin_models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    reference = torch.nn.Linear(4, 3)
    twin = torch.nn.Linear(4, 3)
    twin.load_state_dict(reference.state_dict())
    return reference, twin


def test_ddp_accepts_nvidia_arguments_and_averages_like_torch(single_process_group) -> None:
    reference, twin = _twin_models()
    wrapped = DistributedDataParallel(twin, message_size=1, delay_allreduce=True)
    assert isinstance(wrapped, torch.nn.parallel.DistributedDataParallel)
    inputs = torch.randn(5, 4)
    for expected, got in zip(_grads_of(reference, inputs), _grads_of(wrapped, inputs), strict=True):
        torch.testing.assert_close(got, expected)


def test_ddp_sum_with_predivide_divides_by_the_factor(single_process_group) -> None:
    reference, twin = _twin_models()
    wrapped = DistributedDataParallel(twin, gradient_average=False, gradient_predivide_factor=2.0)
    inputs = torch.randn(5, 4)
    for expected, got in zip(_grads_of(reference, inputs), _grads_of(wrapped, inputs), strict=True):
        torch.testing.assert_close(got, expected / 2)


def test_ddp_refuses_shared_param() -> None:
    with pytest.raises(ValueError, match="shared_param"):
        DistributedDataParallel(torch.nn.Linear(2, 2), shared_param=True)


def test_sync_batchnorm_without_group_is_batch_norm_and_fuses_relu() -> None:
    torch.manual_seed(0)
    inputs = torch.randn(6, 3, 2, 2)
    plain = torch.nn.BatchNorm2d(3)
    fused = SyncBatchNorm(3, fuse_relu=True, channel_last=True)
    torch.testing.assert_close(fused(inputs), torch.relu(plain(inputs)))
    torch.testing.assert_close(fused.running_mean, plain.running_mean)


def test_convert_syncbn_model_replaces_batch_norms_and_keeps_state() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4))
    model[1].running_mean.fill_(0.5)
    converted = convert_syncbn_model(model)
    assert isinstance(converted[1], torch.nn.SyncBatchNorm)
    assert torch.equal(converted[1].running_mean, torch.full((4,), 0.5))
