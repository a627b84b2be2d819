"""The decoder the uncompressed formats share (PNM, NPY, raw records): gdsio's
CUDA kernels from bytes already in GPU memory, or their multithreaded CPU
twin, the same arithmetic (csrc/image/pixel_formats.hpp) on both.

A format hands it a PixelLayout per image (``item.layout``, set by its
check); every image of every such format in a batch goes in one call to the
core (one kernel launch per 128 images on a GPU).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ... import _core
from .. import transfer
from ..core_types import pixel_job
from ..layout import PixelLayout, channel_plan
from ..codec import Item, Options, Size

__all__ = ["BACKEND_CPU", "BACKEND_CUDA", "check_fits", "decode"]

BACKEND_CUDA = "gdsio-cuda"
BACKEND_CPU = "gdsio-cpu"

_TORCH_DTYPES = {"uint8": torch.uint8, "uint16": torch.uint16, "float32": torch.float32}


def check_fits(item: Item, lay: PixelLayout, title: str) -> Size:
    """Sets ``item.layout``; ValueError when the samples run past the data."""
    avail = item.total - lay.offset
    if lay.nbytes > avail:
        raise ValueError(
            f"{title} header declares {lay.width}x{lay.height}x{lay.channels} {lay.dtype} "
            f"({lay.nbytes} bytes of pixels after a {lay.offset}-byte header), "
            f"but the data holds only {avail} bytes after it (truncated?)"
        )
    item.layout = lay
    return Size(lay.height, lay.width, lay.channels)


def decode(items: Sequence[Item], target: Any, opts: Options) -> None:
    """Decodes every item (its ``layout`` set) on `target`, in one call to the core."""
    if not items:
        return
    jobs = []
    for it in items:
        lay = it.layout
        if it.data.device != target:
            it.data = it.data.to(target)
        c, convert = channel_plan(lay.channels, opts.mode)
        it.result = torch.empty((c, lay.height, lay.width), dtype=_TORCH_DTYPES[lay.dtype], device=target)
        jobs.append(pixel_job(lay, it.data, it.result, convert))
        it.backend = BACKEND_CUDA if target.type == "cuda" else BACKEND_CPU
    if target.type == "cuda":
        _core.img_decode_pixels_cuda(jobs, device=target.index, stream=transfer.current_stream(target))
    else:
        _core.img_decode_pixels_cpu(jobs, threads=opts.threads)
