"""Time amp's whole step against a plain fused step of the same NpuFused optimizer.

The model has ResNet-50's parameters (161 tensors, 25.6M elements: 53 convolutions and the
classifier, which amp O2 casts to half precision, and 53 batchnorms, which stay fp32). Two
variants of each optimizer (NpuFusedSGD with momentum, NpuFusedAdam, NpuFusedAdamW):

* ``amp``: ``amp.initialize(model, optimizer, opt_level="O2", master_weights=True,
  combine_grad=True)``, timed from the end of the ``scale_loss`` block (unscale, overflow
  check, loss-scale update) through ``optimizer.step()`` (the update of the fp32 masters and
  their copy into the half model): everything amp adds after backward.
* ``plain``: the same class from ``apex.optimizers.standalone`` on fp32 copies of the
  parameters, timed over ``optimizer.step()`` alone.

Backward is replaced by copying fixed, scaled gradients into the existing ``.grad`` tensors
(untimed), so both variants start from the same state every round. Rounds alternate the
variants, so load changes on a shared machine hit both alike; the table gives the minimum and
the median per variant and the ratio amp / plain.

Run: ``python runtime/bench/bench_amp_step.py [--rounds N] [--threads N] [--optimizers sgd,adam]
[--device cpu|cuda]``. Not a test: it allocates about 1.5 GB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from apex import amp, optimizers
from apex.amp.frontend import _reset
from apex.optimizers import standalone

Shape = tuple[int, ...]


def resnet50_shapes() -> list[Shape]:
    """Parameter shapes of torchvision's ResNet-50 (161 tensors, 25.6M elements)."""
    shapes: list[Shape] = [(64, 3, 7, 7), (64,), (64,)]
    in_channels = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            out_channels = width * 4
            shapes += [(width, in_channels, 1, 1), (width,), (width,)]
            shapes += [(width, width, 3, 3), (width,), (width,)]
            shapes += [(out_channels, width, 1, 1), (out_channels,), (out_channels,)]
            if block == 0:
                shapes += [(out_channels, in_channels, 1, 1), (out_channels,), (out_channels,)]
            in_channels = out_channels
    return [*shapes, (1000, 2048), (1000,)]


class Convolution(torch.nn.Module):
    """Only the weight of a convolution: the step never runs a forward pass."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(shape) * 0.01)


def resnet50_like(device: torch.device) -> torch.nn.Module:
    """A module with ResNet-50's parameters in its order, batchnorms as real batchnorms."""
    layers: list[torch.nn.Module] = []
    shapes = resnet50_shapes()
    index = 0
    while index < len(shapes) - 2:
        layers.append(Convolution(shapes[index]))
        layers.append(torch.nn.BatchNorm2d(shapes[index][0]))
        index += 3
    layers.append(torch.nn.Linear(2048, 1000))
    model = torch.nn.Sequential(*layers).to(device)
    assert [tuple(p.shape) for p in model.parameters()] == shapes
    return model


@dataclass(frozen=True)
class Kind:
    name: str
    amp_class: type[torch.optim.Optimizer]
    plain_class: type[torch.optim.Optimizer]
    options: dict[str, float]


KINDS = {
    "sgd": Kind("NpuFusedSGD", optimizers.NpuFusedSGD, standalone.NpuFusedSGD,
                {"lr": 0.1, "momentum": 0.9}),
    "adam": Kind("NpuFusedAdam", optimizers.NpuFusedAdam, standalone.NpuFusedAdam, {"lr": 1e-3}),
    "adamw": Kind("NpuFusedAdamW", optimizers.NpuFusedAdamW, standalone.NpuFusedAdamW,
                  {"lr": 1e-3}),
}  # fmt: skip


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class AmpStep:
    """amp O2 + combine_grad: gradients written, then scale_loss's exit and the step timed."""

    def __init__(self, kind: Kind, device: torch.device) -> None:
        _reset()
        torch.manual_seed(0)
        self.model = resnet50_like(device)
        optimizer = kind.amp_class(self.model.parameters(), **kind.options)
        self.model, self.optimizer = amp.initialize(
            self.model,
            optimizer,
            opt_level="O2",
            master_weights=True,
            combine_grad=True,
            verbosity=0,
        )
        self.device = device
        params = list(self.model.parameters())
        scale = amp._amp_state.loss_scalers[0].loss_scale()
        self.grads = [
            torch.randn(p.shape, device=device).mul_(1e-3 * scale).to(p.dtype) for p in params
        ]
        # One real backward creates the grads and lets amp and the optimizer pack them.
        with amp.scale_loss(self.loss(), self.optimizer) as scaled:
            scaled.backward()
        self.optimizer.step()

    def loss(self) -> torch.Tensor:
        return sum(p.float().sum() for p in self.model.parameters()) * 0.0  # type: ignore[return-value]

    def time_once(self) -> float:
        self.optimizer.zero_grad()
        block = amp.scale_loss(torch.zeros((), device=self.device), self.optimizer)
        block.__enter__()
        with torch.no_grad():
            for p, grad in zip(self.model.parameters(), self.grads, strict=True):
                p.grad.copy_(grad)  # type: ignore[union-attr]
        synchronize(self.device)
        start = time.perf_counter()
        block.__exit__(None, None, None)
        self.optimizer.step()
        synchronize(self.device)
        return time.perf_counter() - start


class PlainStep:
    """The standalone class on fp32 parameters: ``step()`` alone is timed."""

    def __init__(self, kind: Kind, device: torch.device) -> None:
        torch.manual_seed(0)
        self.params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in resnet50_shapes()]
        for p in self.params:
            p.grad = torch.randn_like(p).mul_(1e-3)
        self.optimizer = kind.plain_class(self.params, **kind.options)
        self.optimizer.step()  # packs
        self.device = device

    def time_once(self) -> float:
        synchronize(self.device)
        start = time.perf_counter()
        self.optimizer.step()
        synchronize(self.device)
        return time.perf_counter() - start


def interleaved(variants: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name, once in variants.items():
        once()  # warm-up
        times[name].clear()
    for _ in range(rounds):
        for name, once in variants.items():
            times[name].append(once())
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--optimizers", default="sgd,adam,adamw")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"rounds {args.rounds}, load average {os.getloadavg()[0]:.1f}"
    )
    print("| optimizer | amp step ms (min / median) | plain step ms (min / median) "
          "| amp / plain (min) | amp / plain (median) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for key in args.optimizers.split(","):
        kind = KINDS[key]
        amp_step, plain_step = AmpStep(kind, device), PlainStep(kind, device)
        times = interleaved({"amp": amp_step.time_once, "plain": plain_step.time_once}, args.rounds)
        amp_times, plain_times = times["amp"], times["plain"]
        print(
            f"| {kind.name} | {min(amp_times) * 1e3:.1f} / {statistics.median(amp_times) * 1e3:.1f}"
            f" | {min(plain_times) * 1e3:.1f} / {statistics.median(plain_times) * 1e3:.1f}"
            f" | {min(amp_times) / min(plain_times):.2f}"
            f" | {statistics.median(amp_times) / statistics.median(plain_times):.2f} |"
        )
        del amp_step, plain_step
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
