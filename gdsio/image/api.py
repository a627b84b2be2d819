"""gdsio.image.decode and gdsio.image.read: the batch steps (image/batch.py) in a row."""

from __future__ import annotations

import os
import stat
from typing import Any, Sequence

import torch

from ..io.api import read as _read_file
from ..io.urls import is_url
from . import batch
from .batch import Item
from .formats import jpeg as jpeg_format
from .formats.raw import RawFormat

__all__ = ["decode", "read"]

_TENSOR = torch.Tensor
# The mode names batch.options takes (any case); ImageReadMode members take the batch steps.
_FAST_MODES = {m: m for m in ("UNCHANGED", "RGB", "GRAY")} | {m.lower(): m for m in ("UNCHANGED", "RGB", "GRAY")}
# read's one-call case reads a regular file whole before knowing it is a JPEG: only files up to this size.
_FAST_READ_MAX = 64 << 20


def decode(
    data: Any,
    *,
    device: Any = None,
    mode: Any = "UNCHANGED",
    on_error: str = "raise",
    apply_exif_orientation: bool = False,
    raw: RawFormat | None = None,
    npy_layout: str = "auto",
    max_pixels: int | None = None,
    return_info: bool = False,
) -> Any:
    """Decodes images held in memory into (C, H, W) tensors, like
    ``torchvision.io.decode_jpeg`` / ``decode_image``.

    The format is told from the first bytes: JPEG, binary PNM (P5/P6), NPY,
    and through Pillow on the CPU PNG, GIF, BMP, DIB, TIFF, WebP and the
    other PNM variants (plain P1/P2/P3, bitmap P4, gray PFM); ``raw=``
    reads headerless records. GPU data never visits the host but for its
    first few KiB (the header).

    On the GPU's JPEG engines (``nvjpeg-hardware-device``) the call waits on
    the host for the work queued on the current stream, before and after the
    decode: the engines read and write when called, not in stream order (seen
    on H100). Decode on a side stream to keep that wait off a training
    stream; gdsio.Loader decodes on a stream of its own.

    Args:
        data: a 1-D uint8 tensor (cpu or cuda; bytes, bytearray and 1-D
            uint8 numpy arrays too) holding one encoded image, or a list of them.
        device: where the images go: "cpu", "cuda", "cuda:N", an int or a
            torch.device. Default: where the data is.
        mode: "UNCHANGED", "RGB" (gray replicated, alpha dropped) or "GRAY"
            (Pillow's convert("L") luma), or a torchvision ImageReadMode of those.
        on_error: "raise" (the first bad image raises) or "skip" (lists only:
            bad images are left out and their indices returned).
        apply_exif_orientation: rotate/flip JPEGs and Pillow's formats by
            their EXIF orientation, as torchvision does.
        raw: a RawFormat: every input is a headerless record of that layout.
        npy_layout: how 3-D NPY arrays are read: "auto" (HWC when the last
            dimension is 1..4, else CHW when the first is), "HWC", "CHW", or "HW".
        max_pixels: a hard cap: refuse images with more pixels, from the
            header, before anything is allocated. Default (None): Pillow's
            decompression-bomb rule on the ``max_image_pixels`` setting
            (GDSIO_MAX_IMAGE_PIXELS, default 89,478,485, Pillow's): a
            gdsio.DecompressionBombWarning above it, a
            gdsio.DecompressionBombError (a ValueError) above twice it.
        return_info: also return a DecodeInfo per returned image (format,
            the backend that ran, why a faster one did not).

    Returns:
        The (C, H, W) image: uint8; uint16 for 16-bit PNM, PNG or TIFF and
        uint16 NPY; float32 for float32 NPY, TIFF or PFM; int32 for 32-bit
        integer TIFF (Pillow's mode I). For a list, the list of
        images; with on_error="skip", ``(images, failed_indices)``; with
        return_info, the DecodeInfo (list) appended to what is returned.

    Raises:
        ValueError: a bad image (the message names it, ``data[i]``, and the
            problem: corrupt, truncated, too large, unsupported), or a bad argument.
        TypeError: data that is not bytes, or raw that is not a RawFormat.
        gdsio.BackendUnavailable: a CUDA device where CUDA cannot be used.

    Example:
        >>> img = gdsio.image.decode(gdsio.read("cat.jpg", device="cuda"))
        >>> imgs, failed = gdsio.image.decode(list_of_tensors, mode="RGB", on_error="skip")
    """
    # One CPU JPEG with the default options: one core call instead of the batch's steps (a 500x375 decode
    # spent 5% of its instructions in them). decode_one says None to anything else, for the steps below.
    # Each option is tested as a str equal to its default, never calling another type's __eq__ (the batch
    # steps judge other values), written out: a helper call for each cost ~1% of an 8x8 JPEG's decode.
    if (type(data) is _TENSOR and (device is None or (type(device) is str and device == "cpu"))
            and type(mode) is str and type(on_error) is str and on_error == "raise" and apply_exif_orientation is False
            and raw is None and type(npy_layout) is str and npy_layout == "auto"
            and (max_pixels is None or (type(max_pixels) is int and max_pixels > 0)) and return_info is False):
        name = _FAST_MODES.get(mode)
        img = jpeg_format.decode_one(data, name, max_pixels) if name is not None else None
        if img is not None:
            return img
    opts = batch.options(mode=mode, on_error=on_error, exif=apply_exif_orientation, raw=raw, npy_layout=npy_layout,
                         max_pixels=max_pixels)
    single = not isinstance(data, (list, tuple))
    if single and opts.on_error == "skip":
        raise ValueError("on_error='skip' applies to a list of images; pass a list")
    inputs = [data] if single else list(data)
    items = []
    for i, x in enumerate(inputs):
        name = "data" if single else f"data[{i}]"
        t = batch.as_bytes_tensor(x, name)
        it = Item(i, name, t, t.numel())
        if it.total == 0:
            it.fail("empty data")
        items.append(it)
    target = batch.target(device)
    if target is None:
        devices = {it.data.device for it in items}
        if len(devices) > 1:
            raise ValueError(f"the images live on different devices ({sorted(map(str, devices))}); pass device=")
        target = batch.target(devices.pop() if devices else torch.device("cpu"))
    batch.run(items, target, opts)
    return _returned(batch.finish(items, return_info), single, opts.on_error, return_info)


def read(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    device: Any = "cuda",
    mode: Any = "UNCHANGED",
    on_error: str = "raise",
    apply_exif_orientation: bool = False,
    raw: RawFormat | None = None,
    npy_layout: str = "auto",
    max_pixels: int | None = None,
    return_info: bool = False,
    backend: str | None = None,
) -> Any:
    """Reads image files into (C, H, W) tensors on ``device``, like
    ``torchvision.io.read_image`` but straight into GPU memory.

    Each file is opened once: its header is read on the host first (a plain
    pread of the first 4 KiB, more for a longer header), so a bad file fails before its bulk read;
    then the same open file (never the path again, which may name another
    file by then) is read whole into ``device`` memory (cuFile where GPUDirect Storage
    works: the pixels, or the JPEG bitstream, never touch host memory) and
    ``decode`` runs there. PNG, GIF, BMP, DIB, TIFF and WebP files are read into
    host memory instead, decoded by Pillow and uploaded (so are the PNM
    variants Pillow decodes, after a read to ``device``). One local file
    for the CPU with the default options (up to 64 MiB) is read whole in
    one read and, if it is a JPEG the one-call core decode takes, decoded
    at once; any other file is then probed as above.

    Args:
        path: a file, or a list of files.
        device: "cuda" (the current device, the default), "cuda:N", an int,
            "cpu" or a torch.device.
        mode: as in ``decode``.
        on_error: "raise", or "skip" (lists only): unreadable and bad files
            are left out and their indices returned.
        apply_exif_orientation: as in ``decode``.
        raw: as in ``decode``.
        npy_layout: as in ``decode``.
        max_pixels: as in ``decode``.
        return_info: also return a DecodeInfo per image; ``DecodeInfo.io`` is
            the file's ReadStats.
        backend: gdsio.read's backend for the bulk read (the formats Pillow
            decodes are read to the host whatever it says). Default: the settings'.

    Returns:
        As ``decode``: an image, or a list (with failed indices and DecodeInfo as asked).

    Raises:
        FileNotFoundError: a file that does not exist (PermissionError,
            IsADirectoryError likewise; OSError naming a FIFO, socket or
            device, refused without blocking), with on_error="raise".
        ValueError: a bad file (the message names it and the problem), or a bad argument.
        gdsio.BackendUnavailable: a CUDA device where CUDA cannot be used
            (pass device="cpu").

    Example:
        >>> img = gdsio.image.read("cat.jpg", device="cuda", mode="RGB")
        >>> imgs, infos = gdsio.image.read(paths, return_info=True)
    """
    # One local JPEG for the CPU with the default options: one read of the whole file and decode's one-call
    # core path (an 8x8 JPEG took 144 us through the probe, body read and batch steps). Anything else, or a
    # file that path refuses (missing, not regular, too large, not a JPEG it takes), takes the steps below,
    # which raise or decode exactly as before.
    one = path if type(path) is str else os.fspath(path) if isinstance(path, os.PathLike) else None
    if (type(one) is str and type(device) is str and device == "cpu" and backend is None
            and type(mode) is str and type(on_error) is str and on_error == "raise" and apply_exif_orientation is False
            and raw is None and type(npy_layout) is str and npy_layout == "auto"
            and (max_pixels is None or (type(max_pixels) is int and max_pixels > 0)) and return_info is False):
        img = _read_one_jpeg(one, _FAST_MODES.get(mode), max_pixels)
        if img is not None:
            return img
    opts = batch.options(mode=mode, on_error=on_error, exif=apply_exif_orientation, raw=raw, npy_layout=npy_layout,
                         max_pixels=max_pixels)
    single = isinstance(path, (str, bytes, os.PathLike))
    if single and opts.on_error == "skip":
        raise ValueError("on_error='skip' applies to a list of paths; pass a list")
    paths: list[Any] = [path] if single else list(path)  # type: ignore[arg-type]
    target = batch.target(device)
    if target is None:
        raise ValueError("device must be 'cpu', 'cuda', 'cuda:N', an int or a torch.device, got None")
    items = [Item(i, p if is_url(p) else os.fsdecode(os.fspath(p))) for i, p in enumerate(paths)]
    batch.read_files(items, target, backend, opts)
    if opts.on_error == "raise":
        batch.raise_first(items)
    batch.run(items, target, opts)
    return _returned(batch.finish(items, return_info), single, opts.on_error, return_info)


def _read_one_jpeg(path: str, mode: str | None, max_pixels: int | None) -> Any:
    """read's one-call case: the image, or None for the batch steps to take the file."""
    if mode is None or is_url(path):
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= _FAST_READ_MAX:
        return None
    try:
        data = _read_file(path, device="cpu")
    except (OSError, ValueError):
        return None
    return jpeg_format.decode_one(data, mode, max_pixels)


def _returned(done: batch.Decoded, single: bool, on_error: str, return_info: bool) -> Any:
    """What decode and read return (their Returns): the image of a single
    input, else the list of images, with the failed indices when
    on_error="skip" and the DecodeInfo (list) when return_info."""
    if single:
        return (done.images[0], done.infos[0]) if return_info else done.images[0]
    out = (done.images,) + ((done.failed,) if on_error == "skip" else ()) + ((done.infos,) if return_info else ())
    return out[0] if len(out) == 1 else out
