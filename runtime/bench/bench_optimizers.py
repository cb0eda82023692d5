"""Time optimizer steps of the flat NpuFused optimizers against torch.optim, at 1 and all threads.

For a ResNet-50-shaped parameter set (161 tensors, 25.6M parameters; and, with ``--sets
resnet50,bert``, a BERT-base-shaped one: 199 tensors, 110M parameters, about 10 GB) this times
``step()`` of NpuFusedSGD (momentum), NpuFusedAdam and NpuFusedAdamW and of torch.optim's
SGD/Adam/AdamW with the default implementation, ``foreach=True`` and ``fused=True``, plus a
plain tensor copy of the bytes a step moves. Every round times one step of every variant with
1 torch thread and then with all threads, so that changes in machine load hit all alike; the
table gives the minimum and the median over the rounds of each (threads, variant), and the
ratio of medians of NpuFused to torch's ``fused=True`` (below 1: NpuFused faster).

On a shared machine the minimum is the better estimate of what the code costs, the median of
what a user sees; the 1-thread figures are the ones that do not depend on how many cores the
scheduler hands out. Not a test: it allocates a few GB.

Run: ``python runtime/bench/bench_optimizers.py [--rounds N] [--sets resnet50,bert]``.
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


def timed(action: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    action()
    synchronize(device)
    return time.perf_counter() - start


def interleaved_times(
    actions: dict[str, Callable[[], object]],
    thread_counts: list[int],
    device: torch.device,
    rounds: int,
) -> dict[tuple[int, str], list[float]]:
    """Seconds of each action at each thread count, every round visiting every pair once."""
    for threads in thread_counts:
        torch.set_num_threads(threads)
        for action in actions.values():
            action()  # warm-up: packing, lazy state creation, kernel selection
    times: dict[tuple[int, str], list[float]] = {
        (threads, name): [] for threads in thread_counts for name in actions
    }
    for _ in range(rounds):
        for threads in thread_counts:
            torch.set_num_threads(threads)
            for name, action in actions.items():
                times[(threads, name)].append(timed(action, device))
    return times


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


PARAMETER_SETS: dict[str, tuple[str, Callable[[], list[Shape]]]] = {
    "resnet50": ("ResNet-50", resnet50_shapes),
    "bert": ("BERT-base", bert_base_shapes),
}


def milliseconds(values: list[float]) -> str:
    return f"{min(values) * 1e3:.1f} / {statistics.median(values) * 1e3:.1f}"


def rows(
    device: torch.device, rounds: int, sets: list[str], thread_counts: list[int]
) -> Iterator[list[str]]:
    for key in sets:
        model, make_shapes = PARAMETER_SETS[key]
        shapes = make_shapes()
        elements = sum(torch.Size(shape).numel() for shape in shapes)
        for kind in KINDS:
            actions = {
                "copy": copy_action(kind.tensors_moved * 4 * elements, device),
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
            times = interleaved_times(actions, thread_counts, device, rounds)
            del actions
            gc.collect()
            for threads in thread_counts:
                fused = statistics.median(times[(threads, "fused")])
                torch_fused = statistics.median(times[(threads, "torch fused")])
                yield [
                    f"{model} ({len(shapes)} tensors, {elements / 1e6:.1f}M)",
                    f"NpuFused{kind.name}",
                    str(threads),
                    milliseconds(times[(threads, "fused")]),
                    *(milliseconds(times[(threads, v)]) for v in VARIANTS),
                    f"{fused / torch_fused:.2f}",
                    f"{statistics.median(times[(threads, 'copy')]) / fused:.0%}",
                ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sets", default="resnet50", help="comma-separated: resnet50,bert")
    args = parser.parse_args()
    device = torch.device(args.device)
    all_threads = torch.get_num_threads()
    thread_counts = sorted({1, all_threads})
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')} device={device} torch={torch.__version__} "
        f"threads={thread_counts} cpus={os.cpu_count()} rounds={args.rounds} "
        f"load average before the run={load}"
    )
    header = [
        "parameter set",
        "optimizer",
        "threads",
        "NpuFused ms (min / median)",
        *(f"{v} ms (min / median)" for v in VARIANTS),
        "NpuFused / torch fused (medians)",
        "NpuFused bandwidth vs copy",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    started = time.perf_counter()
    for row in rows(device, args.rounds, args.sets.split(","), thread_counts):
        print("| " + " | ".join(row) + " |", flush=True)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"took {time.perf_counter() - started:.0f} s; load average after the run={load}")


if __name__ == "__main__":
    main()
