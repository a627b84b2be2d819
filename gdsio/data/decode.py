"""The loader's one contact with gdsio.image, through its batch contract
(gdsio/image/batch.py): how a reader thread gets an image ready and how a
batch is decoded, with the names of the decoders that ran. EXIF orientation
is not applied, as torchvision's ImageFolder (PIL) does not apply it.

On the CPU each reader thread decodes its own image (``decode_one``). On a
GPU, where true GPUDirect Storage runs, a reader thread probes the header on
the host and reads the bytes into device memory (``read_image``: a file, or a
local tar shard's member by its byte range, storage to GPU); elsewhere a
reader thread reads a group of images on the host in one call into C++
(``read_images``, into pinned memory; the loader copies the group to the
device in one copy), as the pinned backend would read each through its pinned
staging but without the engine's per-file Python. The loader thread then
decodes the batch in one call (``decode_items``: one launch per format and
backend; nvJPEG's device backends read those device bitstreams).

>>> setup = image_setup("cuda", "RGB")
>>> items = [read_image(p, setup) for p in paths]          # reader threads (GDS)
>>> member = read_image("shard-000000.tar", setup, (1536, 107520))  # a member: (offset, size)
>>> items, buf = read_images(paths, None, setup, pin=True)  # a reader thread (no GDS): host views of buf
>>> images, errors, decoders = decode_items(items, setup)   # the loader thread
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import torch

from .. import _core, image
from ..config import current
from ..errors import NeedMoreData
from ..image import batch, codec, jpeg_cpu, transfer
from ..image.formats import jpeg as jpeg_format
from ..image.formats.jpeg import parse_jpeg
from ..io.many import read_ranges

__all__ = ["ImageSetup", "decode_box", "decode_items", "decode_one", "image_setup", "read_image", "read_images"]


@dataclasses.dataclass(frozen=True)
class ImageSetup:
    """The target device and decode options of a pass, made once, not per image."""

    target: torch.device
    options: batch.Options


def image_setup(device: Any, mode: str) -> ImageSetup:
    """The setup for read_image/decode_items: `device` resolved, options for
    `mode` with failures kept per image (on_error="skip")."""
    return ImageSetup(batch.target(device), batch.options(mode=mode, on_error="skip"))


def decode_one(data: Any, device: Any, mode: str) -> tuple[Any, str]:
    """One encoded image (1-D uint8 tensor) -> ((C,H,W) tensor, decoder name); raises on a bad image."""
    if getattr(device, "type", device) == "cpu" and not data.is_cuda:
        # A CPU JPEG: decode's one-call core path (image.decode takes it only without return_info; its batch
        # steps cost ~5% of a 500x375 decode). It gives the image those steps' first decoder would, or None.
        img = jpeg_format.decode_one(data, mode, None)
        if img is not None:
            return img, jpeg_cpu.NATIVE_BACKEND
    img, info = image.decode(data, device=device, mode=mode, return_info=True)
    return img, info.backend


def decode_box(data: Any, mode: str, box_for: Callable[[int, int], Any], options: batch.Options,
               name: str) -> tuple[Any, str, tuple[int, int, int, int] | None]:
    """One encoded image on the CPU, decoded only for the box its first
    transform keeps when it is a JPEG the box decoder takes:
    ``box_for(height, width)`` gives the box (top, left, height, width).
    Returns (tensor, decoder name, (image height, image width, top, left) of
    the box, or None for a whole image). Anything else, or a JPEG
    libjpeg-turbo warns about, goes to decode_one (the whole image, the
    decoders that decide what a damaged file gives)."""
    raw = data.numpy()
    if raw.size >= 4 and raw[0] == 0xFF and raw[1] == 0xD8 and jpeg_cpu.box_available():
        try:
            h = parse_jpeg(raw[: 1 << 16].tobytes(), int(raw.size), raw[-2:].tobytes())
        except (NeedMoreData, ValueError):
            h = None  # decode_one says what is wrong with it
        if h is not None and h.components in (1, 3) and jpeg_cpu.refusal(h, mode) is None:
            codec.check_pixels(h.width, h.height, options, name)  # as a whole decode would
            top, left, bh, bw = (int(v) for v in box_for(h.height, h.width))
            if (bh, bw) != (h.height, h.width):
                try:
                    img = jpeg_cpu.decode_box(data, h, mode, (top, left, bh, bw))
                    return img, jpeg_cpu.BOX_BACKEND, (h.height, h.width, top, left)
                except ValueError:
                    pass
    img, backend = decode_one(data, "cpu", mode)
    return img, backend, None


def read_image(path: str, setup: ImageSetup, span: tuple[int, int] | None = None) -> batch.Item:
    """Reader thread, GPU loader: the header read on the host (a pread of the
    first 4 KiB, more for a longer header, checked: a bad file fails before its bulk read), then the
    whole file into the target's memory by one read of the I/O engine (on a
    GPU: gds where it runs, storage to device memory; else pinned, through a
    pinned host buffer). `span`: (offset, size), the image is that range of
    the file (a tar shard's member, named ``path@offset``): header and bytes
    come from it alone. Returns the item for decode_items; raises the file's
    error (OSError, ValueError; a span past the file's end is a ValueError)."""
    it = batch.Item(0, path if span is None else f"{path}@{span[0]}", span=span)
    try:
        batch.probe_file(it, setup.options, path)
        if it.error is None:
            batch.read_bodies([it], setup.target, None, 1)  # the file the probe opened: one open
    finally:
        batch.release(it)
    if it.error is not None:
        raise it.error
    return it


def read_images(paths: list[str], spans: Any, setup: ImageSetup, *, pin: bool) -> tuple[list[batch.Item], Any]:
    """Reader thread, GPU loader without true GDS: a group of images read on
    the host by one call into C++ (gdsio.io.many.read_ranges: whole files, or
    the (offset, size) `spans` of tar shards' members, adjacent ones merged),
    the GIL released, back to back into one buffer (pinned when `pin`, so that
    the group goes to the device in one copy); then each header parsed from
    that memory, a bad one failing its item only (its checks, the pixel cap
    and the mode's channels, run with the batch's decode, decode_items).

    Returns:
        (the items, their data host views of the buffer, in order, each
        starting 256-byte aligned; the buffer). An item's name is its path (a member: ``path@offset``).

    Raises:
        OSError, ValueError: a file could not be sized (not a regular file,
        missing) or read (shorter than its span): not saying which, so read
        them alone (``read_image``) to name it.
    """
    threads = current().threads
    if spans is None:
        offsets = np.zeros(len(paths), dtype=np.int64)
        sizes = np.asarray(_core.file_sizes(paths, threads=threads), dtype=np.int64)
    else:
        offsets, sizes = spans[:, 0].astype(np.int64), spans[:, 1].astype(np.int64)
    # Each image aligned in the buffer (and so on the device after one copy), as transfer.stage lays them out.
    dst, total = transfer.aligned_offsets(sizes.tolist())
    buf = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=pin)
    read_ranges(buf, paths, offsets, sizes, dst, threads=threads)
    items = []
    for path, off, at, n in zip(paths, offsets.tolist(), dst, sizes.tolist()):
        it = batch.Item(0, path if spans is None else f"{path}@{off}", buf[at : at + n], n)
        if it.total == 0:
            it.fail("empty file" if spans is None else "empty range")
        items.append(it)
    batch.read_headers(items, setup.options)  # the size checks run with the decode (batch.run), as for read_image's
    return items, buf


def decode_items(items: list[batch.Item], setup: ImageSetup) -> tuple[list[Any], dict[int, BaseException], dict[str, int]]:
    """Items from read_image decoded in one call (one launch per format and
    backend; no header goes back to the host, it is there already) ->
    (images, None where failed; {position: error naming the file}; {decoder name: images})."""
    for k, it in enumerate(items):
        it.index = k
    batch.run(items, setup.target, setup.options)
    out = [it.result if it.error is None else None for it in items]
    errors = {k: it.error for k, it in enumerate(items) if it.error is not None}
    backends: dict[str, int] = {}
    for it in items:
        if it.error is None:
            backends[it.backend] = backends.get(it.backend, 0) + 1
    return out, errors, backends
