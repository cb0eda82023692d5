"""Pack many tensors into one flat buffer, Ascend's ``apex.contrib.combine_tensors`` API.

Every tensor handed to :func:`combine_npu` keeps its Python identity but is rebound (with
``Tensor.set_``) to a slice of one freshly allocated 1-D buffer, so a single elementwise kernel on
the buffer updates all of them. The slot layout is Ascend's: each tensor gets
``ceil(numel / 16) * 16 + 32`` elements, that is its size rounded up to 16 elements plus 32
elements of zero padding (128 bytes of padding for fp32). The padding stays zero as long as only
the views are written, which keeps norms and sums over the whole buffer exact.

Unlike Ascend's version this one works for any device (``tensor.device.type``) and any dtype, and
it never holds a second copy: each tensor's old storage is released as soon as it is rebound,
unless something else still refers to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

SLOT_ALIGNMENT_ELEMENTS = 16
SLOT_PADDING_ELEMENTS = 32


def get_aligned_storage_size(tensor: torch.Tensor) -> int:
    """Slot size in elements that ``tensor`` takes in a combined buffer (Ascend's rule)."""
    numel = tensor.numel()
    return math.ceil(numel / SLOT_ALIGNMENT_ELEMENTS) * SLOT_ALIGNMENT_ELEMENTS + (
        SLOT_PADDING_ELEMENTS
    )


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides: list[int] = []
    running = 1
    for extent in reversed(shape):
        strides.append(running)
        running *= max(extent, 1)
    return tuple(reversed(strides))


def _check_combinable(list_of_tensor: Sequence[torch.Tensor]) -> None:
    if any(tensor is None for tensor in list_of_tensor):
        raise RuntimeError("Tensors to combine must not have `None`.")
    first = list_of_tensor[0]
    for tensor in list_of_tensor:
        if tensor.dtype != first.dtype:
            raise RuntimeError(
                "Tensors to combine must have the same dtype, "
                f"got {first.dtype} and {tensor.dtype}."
            )
        if tensor.device != first.device:
            raise RuntimeError(
                "Tensors to combine must be on the same device, "
                f"got {first.device} and {tensor.device}."
            )
        if tensor.is_sparse:
            raise RuntimeError("Sparse tensors cannot be combined.")


def rebind_into(tensor: torch.Tensor, combined: torch.Tensor, offset: int) -> None:
    """Make ``tensor`` (same object) a contiguous view of ``combined`` starting at ``offset``.

    A tensor autograd tracks (a parameter) is rebound through ``.data``: ``set_`` would give it a
    new gradient accumulator, and every hook registered on the old one (torch DDP's all-reduce
    hooks, for a start) would silently stop firing.
    """
    with torch.no_grad():
        if tensor.requires_grad:
            slot = combined.narrow(0, offset, tensor.numel())
            tensor.data = slot.view(tensor.shape)
            return
        tensor.set_(
            combined.untyped_storage(),
            combined.storage_offset() + offset,
            tensor.shape,
            _contiguous_strides(tensor.shape),
        )


def allocate_combined(
    shapes: Sequence[torch.Size], dtype: torch.dtype, device: torch.device, fill: float = 0.0
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A new combined buffer for tensors of ``shapes`` and fresh views of it, one per shape.

    For state that is created rather than adopted (optimizer moments): no existing tensor is
    rebound, only the slots are filled with ``fill``; padding is zero whatever ``fill`` is.
    """
    slot_sizes = [get_aligned_storage_size(torch.empty(shape, device="meta")) for shape in shapes]
    combined = torch.zeros(sum(slot_sizes), dtype=dtype, device=device)
    views = []
    offset = 0
    for shape, slot_size in zip(shapes, slot_sizes, strict=True):
        numel = math.prod(shape)
        view = combined.narrow(0, offset, numel).view(shape)
        if fill != 0.0:
            view.fill_(fill)
        views.append(view)
        offset += slot_size
    return combined, views


def combine_npu(
    list_of_tensor: Sequence[torch.Tensor], require_copy_value: bool = True
) -> torch.Tensor | None:
    """Allocate one flat buffer and rebind every tensor into it; None for an empty list.

    The buffer has the tensors' common dtype and device and is zero-initialised, so padding is
    zero; with ``require_copy_value=False`` the tensors read as zeros afterwards.
    """
    if len(list_of_tensor) == 0:
        return None
    _check_combinable(list_of_tensor)
    slot_sizes = [get_aligned_storage_size(tensor) for tensor in list_of_tensor]
    first = list_of_tensor[0]
    combined = torch.zeros(sum(slot_sizes), dtype=first.dtype, device=first.device)
    offset = 0
    with torch.no_grad():
        for tensor, slot_size in zip(list_of_tensor, slot_sizes, strict=True):
            if require_copy_value:
                combined[offset : offset + tensor.numel()].view(tensor.shape).copy_(tensor)
            # Rebinding drops this tensor's reference to its old storage, so the old memory is
            # freed tensor by tensor and peak memory grows by one buffer, not by two copies.
            rebind_into(tensor, combined, offset)
            offset += slot_size
    return combined


def get_part_combined_tensor(
    combined_tensor: torch.Tensor | None, index: int, size: int
) -> torch.Tensor | None:
    """A 1-D view of ``size`` elements of ``combined_tensor`` starting at element ``index``."""
    if combined_tensor is None or size == 0:
        return None
    if index + size > combined_tensor.numel():
        raise RuntimeError(
            f"(index + size) ({index + size}) > combined tensor size ({combined_tensor.numel()})"
        )
    return combined_tensor.narrow(0, index, size)


def is_combined_tensor_valid(
    combined_tensor: torch.Tensor | None, list_of_tensor: Sequence[torch.Tensor | None]
) -> bool:
    """True when every tensor still lives inside ``combined_tensor``'s memory."""
    if len(list_of_tensor) == 0:
        return True
    if combined_tensor is None:
        return False
    start = combined_tensor.data_ptr()
    end = start + combined_tensor.numel() * combined_tensor.element_size()
    for tensor in list_of_tensor:
        if tensor is None or tensor.device != combined_tensor.device:
            return False
        if tensor.numel() == 0:
            # An empty view has no address of its own worth checking; its storage must match.
            if tensor.untyped_storage().data_ptr() != combined_tensor.untyped_storage().data_ptr():
                return False
            continue
        if not start <= tensor.data_ptr() < end:
            return False
    return True
