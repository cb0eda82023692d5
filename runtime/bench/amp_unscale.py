"""Time amp's combined unscale + overflow check against per-tensor unscale.

The gradient set has ResNet-50's parameter shapes (161 tensors, 25.6M elements). Three ways to
unscale it by 1/65536 and learn whether anything overflowed:

* ``loop``: one multiply and one finiteness check per tensor, then a sync (what a naive
  per-tensor implementation does).
* ``per-tensor``: amp's per-tensor path, one fused check-and-unscale call over the 161 tensors.
* ``combined``: amp with ``combine_grad=True``, the same call over one flat buffer.

Usage: ``python runtime/bench/amp_unscale.py [--device cpu|cuda|npu]
[--dtype float32|bfloat16|float16] [--repeats N] [--threads N]``. The device defaults to what
``apex._device.device_kind()`` finds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from apex._device import device_kind
from apex.amp.scaler import LossScaler
from apex.contrib.combine_tensors import combine_npu

STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))  # (blocks, width) of ResNet-50
EXPANSION = 4


def resnet50_parameter_shapes() -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    channels = 64
    for blocks, width in STAGES:
        for block in range(blocks):
            shapes += [(width, channels, 1, 1), (width,), (width,)]
            shapes += [(width, width, 3, 3), (width,), (width,)]
            shapes += [(width * EXPANSION, width, 1, 1), (width * EXPANSION,), (width * EXPANSION,)]
            if block == 0:
                shapes += [(width * EXPANSION, channels, 1, 1)]
                shapes += [(width * EXPANSION,), (width * EXPANSION,)]
            channels = width * EXPANSION
    shapes += [(1000, channels), (1000,)]
    return shapes


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)  # type: ignore[attr-defined]


def timed(function: Callable[[], None], device: torch.device, repeats: int) -> float:
    """Median seconds of ``function`` (it ends with a host read, so it includes the sync)."""
    function()  # warm-up: kernel selection, allocator
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def loop_unscale(grads: list[torch.Tensor], inv_scale: float) -> bool:
    overflow = torch.zeros((), dtype=torch.bool, device=grads[0].device)
    for grad in grads:
        overflow |= ~torch.isfinite(grad).all()
        grad.mul_(inv_scale)
    return bool(overflow.item())


def amp_unscale(scaler: LossScaler, tensors: list[torch.Tensor]) -> bool:
    scaler.clear_overflow_state()
    scaler.unscale_(tensors)
    return scaler.has_overflow()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=device_kind())
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "npu":
        import torch_npu  # noqa: F401  (registers the device)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    shapes = resnet50_parameter_shapes()
    grads = [torch.randn(shape, device=device).to(dtype) for shape in shapes]
    elements = sum(grad.numel() for grad in grads)
    scaler = LossScaler("dynamic", init_scale=1.0)  # x1: repeated runs keep the values stable
    inv_scale = 1.0

    loop_s = timed(lambda: loop_unscale(grads, inv_scale), device, args.repeats)
    per_tensor_s = timed(lambda: amp_unscale(scaler, grads), device, args.repeats)
    flat = combine_npu(grads)
    assert flat is not None
    combined_s = timed(lambda: amp_unscale(scaler, [flat]), device, args.repeats)

    print(f"device={device} dtype={args.dtype} tensors={len(shapes)} elements={elements:,}")
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, repeats={args.repeats}")
    print(f"loop (mul_ + isfinite per tensor): {loop_s * 1e3:8.3f} ms")
    print(f"amp per-tensor (fused over list):  {per_tensor_s * 1e3:8.3f} ms")
    print(f"amp combined (one flat buffer):    {combined_s * 1e3:8.3f} ms")
    print(f"ratio loop / combined:       {loop_s / combined_s:6.2f}x")
    print(f"ratio per-tensor / combined: {per_tensor_s / combined_s:6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
