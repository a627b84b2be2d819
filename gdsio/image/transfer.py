"""The decode path's touch points with torch.cuda: the current stream, a
host wait on it, and host bytes copied to a GPU.

They are kept apart, and always called through this module
(``transfer.stage(...)``, never a name imported from it), so that tests can
run the GPU orchestration on the CPU with stand-ins for these and for the
core (tests/image/test_image_nvjpeg.py).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["ALIGN", "aligned_offsets", "current_stream", "stage", "synchronize", "upload"]

ALIGN = 256  # where each of several byte strings starts in one staging buffer, as a tensor of its own would


def current_stream(device: Any) -> int:
    """The current CUDA stream of `device` as the int the core takes."""
    return torch.cuda.current_stream(device).cuda_stream


def synchronize(device: Any) -> None:
    """Waits on the host for the work queued on `device`'s current stream."""
    torch.cuda.current_stream(device).synchronize()


def aligned_offsets(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Where byte strings of `sizes` go, back to back in one buffer, each ALIGN-byte aligned: (their
    offsets, the buffer's size)."""
    offsets, n = [], 0
    for size in sizes:
        offsets.append(n)
        n += -(-int(size) // ALIGN) * ALIGN
    return offsets, n


def stage(tensors: Sequence[Any], device: Any) -> list[Any]:
    """Host byte tensors moved to `device` in one pinned copy, queued on the
    current stream; each starts 256-byte aligned there, as a tensor of its
    own would."""
    offsets, n = aligned_offsets([t.numel() for t in tensors])
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    flat = pinned.numpy()  # numpy's slice assignment is a memcpy: no dispatch, no thread pool for each image
    for t, at in zip(tensors, offsets):
        flat[at : at + t.numel()] = t.numpy()
    on_device = pinned.to(device, non_blocking=True)  # the caching host allocator keeps `pinned` until done
    return [on_device[at : at + t.numel()] for t, at in zip(tensors, offsets)]


def upload(images: Sequence[Any], target: Any) -> list[Any]:
    """Images decoded on the host (any dtype) moved to `target` with one
    pinned copy, queued on the current stream; as they are for a CPU target."""
    if target.type == "cpu" or not images:
        return list(images)
    flat = [t.contiguous().reshape(-1).view(torch.uint8) for t in images]
    return [b.view(t.dtype).view(t.shape) for b, t in zip(stage(flat, target), images)]
