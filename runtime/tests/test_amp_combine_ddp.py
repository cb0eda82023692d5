"""combine_ddp with real torch.distributed: two gloo processes against torch DDP."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from apex import amp, optimizers
from apex.amp.frontend import _reset

WORLD_SIZE = 2
STEPS = 4


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Net(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 3)
        self.extra = torch.nn.Linear(32, 3)

    def forward(self, inputs: torch.Tensor, use_extra: bool = False) -> torch.Tensor:
        features = self.body(inputs)
        return self.head(features) + (self.extra(features) if use_extra else 0)


def rank_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [
        (torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator))
        for _ in range(STEPS)
    ]


def train(model, optimizer, data) -> list[torch.Tensor]:
    for inputs, targets in data:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        with amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters() if p.grad is not None]


def with_torch_ddp(rank: int, opt_level: str) -> list[torch.Tensor]:
    _reset()
    model = Net(seed=rank)  # DDP broadcasts rank 0's weights at construction
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level, verbosity=0)
    wrapped = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    return train(wrapped, optimizer, rank_batches(rank))


def with_combine_ddp(rank: int, opt_level: str, fused: bool = False) -> list[torch.Tensor]:
    _reset()
    model = Net(seed=rank)  # amp.initialize broadcasts rank 0's weights
    optimizer_class = optimizers.NpuFusedSGD if fused else torch.optim.SGD
    optimizer = optimizer_class(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = amp.initialize(
        model,
        optimizer,
        opt_level=opt_level,
        combine_grad=True,
        combine_ddp=True,
        ddp_replica_count=3,
        verbosity=0,
    )
    return train(model, optimizer, rank_batches(rank))


def inconsistent_layout_is_refused(rank: int) -> None:
    _reset()
    model = Net(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(
        model, optimizer, opt_level="O1", combine_grad=True, combine_ddp=True, verbosity=0
    )
    inputs, targets = rank_batches(rank)[0]
    # Rank 1 uses a branch rank 0 does not, so the ranks pack different grads.
    loss = torch.nn.functional.cross_entropy(model(inputs, use_extra=rank == 1), targets)
    with (
        pytest.raises(RuntimeError, match="does not support inconsistent parameters"),
        amp.scale_loss(loss, optimizer) as scaled,
    ):
        scaled.backward()


def worker(rank: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE
    )
    torch.set_num_threads(1)
    try:
        for opt_level in ("O1", "O2"):
            expected = with_torch_ddp(rank, opt_level)
            for fused in (False, True):
                got = with_combine_ddp(rank, opt_level, fused)
                assert len(got) == len(expected) > 0
                for a, b in zip(got, expected, strict=True):
                    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
            # Every rank ends with the same weights.
            gathered = [torch.zeros_like(got[0]) for _ in range(WORLD_SIZE)]
            dist.all_gather(gathered, got[0])
            assert torch.equal(gathered[0], gathered[1])
        inconsistent_layout_is_refused(rank)
    finally:
        dist.destroy_process_group()


def test_combine_ddp_matches_torch_ddp_on_two_gloo_processes():
    # fork, after building one optimizer here: the children inherit torch and the modules the
    # first optimizer imports (torch._dynamo) instead of importing them again, which takes seconds.
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    mp.start_processes(
        worker, args=(free_port(),), nprocs=WORLD_SIZE, join=True, start_method="fork"
    )


def test_combine_ddp_without_a_process_group_is_a_clear_error():
    _reset()
    model = Net(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(
        RuntimeError, match=r"needs an initialised torch\.distributed process group"
    ):
        amp.initialize(
            model, optimizer, opt_level="O1", combine_grad=True, combine_ddp=True, verbosity=0
        )
    assert not hasattr(optimizer, "_amp_stash")  # nothing was changed: fixing it and retrying works
    _reset()


def test_combine_ddp_refuses_a_ddp_wrapped_model():
    _reset()
    with pytest.raises(RuntimeError, match="Parallel wrappers should only be applied"):
        amp.initialize(torch.nn.DataParallel(Net(seed=0)), combine_grad=True, combine_ddp=True)
