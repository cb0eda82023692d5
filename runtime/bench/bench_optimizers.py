"""Time optimizer steps of the flat NpuFused optimizers against torch.optim.

For a ResNet-50-shaped parameter set (161 tensors, 25.6M parameters) and a BERT-base-shaped
one (199 tensors, 110M parameters) this times ``step()`` of NpuFusedSGD (momentum),
NpuFusedAdam and NpuFusedAdamW and of torch.optim's SGD/Adam/AdamW with the default
implementation, ``foreach=True`` and ``fused=True``; it prints one markdown table with each
time, the speed-up of the fused optimizer over each torch variant, and the effective memory
bandwidth of each step as a fraction of a plain tensor copy moving the same number of bytes.
The variants of one row are timed round-robin, step by step, so that changes in machine load
affect them alike; all of a row's optimizers are alive at once (about 10 GB for BERT-base).

Run: ``python runtime/bench/bench_optimizers.py [--device cpu|cuda] [--steps N] [--threads N]``.
Not a test: it allocates several GB and takes a minute or two.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

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


def bert_base_shapes() -> list[Shape]:
    """Parameter shapes of BERT-base with its pooler (199 tensors, 110M elements)."""
    hidden, intermediate = 768, 3072
    shapes: list[Shape] = [(30522, hidden), (512, hidden), (2, hidden), (hidden,), (hidden,)]
    for _ in range(12):
        for _ in range(4):  # query, key, value, attention output
            shapes += [(hidden, hidden), (hidden,)]
        shapes += [(hidden,), (hidden,)]
        shapes += [(intermediate, hidden), (intermediate,), (hidden, intermediate), (hidden,)]
        shapes += [(hidden,), (hidden,)]
    return [*shapes, (hidden, hidden), (hidden,)]


@dataclass(frozen=True)
class OptimizerKind:
    name: str
    fused_class: type[torch.optim.Optimizer]
    torch_class: type[torch.optim.Optimizer]
    options: dict[str, object]
    # Elementwise tensors read plus tensors written per parameter element in one step.
    tensors_moved: int


KINDS = [
    OptimizerKind("SGD", standalone.NpuFusedSGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, 5),
    OptimizerKind("Adam", standalone.NpuFusedAdam, torch.optim.Adam, {"lr": 1e-3}, 7),
    OptimizerKind("AdamW", standalone.NpuFusedAdamW, torch.optim.AdamW, {"lr": 1e-3}, 7),
]

VARIANTS: dict[str, dict[str, object]] = {
    "torch default": {},
    "torch foreach": {"foreach": True},
    "torch fused": {"fused": True},
}


def make_params(shapes: list[Shape], device: torch.device) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(0)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=generator).to(device))
        p.grad = torch.randn(shape, generator=generator).to(device) * 1e-3
        params.append(p)
    return params


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def interleaved_medians(
    actions: dict[str, Callable[[], object]], device: torch.device, steps: int
) -> dict[str, float]:
    """Median seconds of each action, timed round-robin so that load drifts hit all alike."""
    for action in actions.values():
        action()  # warm-up: packing, lazy state creation, kernel selection
        action()
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(steps):
        for name, action in actions.items():
            synchronize(device)
            start = time.perf_counter()
            action()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def copy_action(total_bytes: int, device: torch.device) -> Callable[[], object]:
    """``dst.copy_(src)`` moving ``total_bytes`` (half read, half written)."""
    source = torch.ones(total_bytes // 2 // 4, device=device)
    target = torch.empty_like(source)
    return lambda: target.copy_(source)


def optimizer_action(
    make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    shapes: list[Shape],
    device: torch.device,
) -> Callable[[], object]:
    return make(make_params(shapes, device)).step


def rows(device: torch.device, steps: int) -> Iterator[list[str]]:
    for model, shapes in (("ResNet-50", resnet50_shapes()), ("BERT-base", bert_base_shapes())):
        elements = sum(torch.Size(shape).numel() for shape in shapes)
        for kind in KINDS:
            moved_bytes = kind.tensors_moved * 4 * elements
            actions = {
                "copy": copy_action(moved_bytes, device),
                "fused": optimizer_action(
                    lambda p, kind=kind: kind.fused_class(p, **kind.options), shapes, device
                ),
            }
            for variant, extra in VARIANTS.items():
                actions[variant] = optimizer_action(
                    lambda p, kind=kind, extra=extra: kind.torch_class(p, **kind.options, **extra),
                    shapes,
                    device,
                )
            seconds = interleaved_medians(actions, device, steps)
            del actions
            gc.collect()
            fused = seconds["fused"]
            yield [
                f"{model} ({len(shapes)} tensors, {elements / 1e6:.1f}M)",
                f"NpuFused{kind.name}",
                f"{fused * 1e3:.1f}",
                *(f"{seconds[v] * 1e3:.1f} ({seconds[v] / fused:.2f}x)" for v in VARIANTS),
                f"{seconds['copy'] / fused:.0%}",
            ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"load average before the run={load}"
    )
    header = [
        "parameter set",
        "optimizer",
        "fused ms/step",
        *(f"{v} ms (fused speed-up)" for v in VARIANTS),
        "fused bandwidth vs copy",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows(device, args.steps):
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
